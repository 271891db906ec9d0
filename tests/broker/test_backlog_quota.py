"""Backlog quotas (backlog_quota.py): producer refusal and disconnection, consumer eviction."""

from twisted.trial import unittest

from pulsar_twisted.broker import backlog_quota
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.test_policies import TopicPolicyCase

T = api.BaseCommand


class QuotaCase(TopicPolicyCase):
    config = {"managedLedgerMaxEntriesPerLedger": 5, "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def subscribe_consumers(self):
        self.subscribe(self.consumer_client, "slow")
        self.subscribe(self.consumer_client, "fast")

    def backlog(self):
        return backlog_quota.backlog_size(self.topic())

    def check(self):
        self.successResultOf(self.broker.policies.check_backlog_quotas())
        self.harness.pump()


class ProducerPolicyTests(QuotaCase):
    def test_producer_exception_refuses_and_disconnects(self):
        """Over a producer_exception quota the check closes producers and new ones are refused
        with ProducerBlockedQuotaExceededException; under it they are accepted again."""
        self.publish(self.client, self.pid, 10, size=100)
        size = self.backlog()
        self.assertGreater(size, 1000)
        self.set_policy_quota(limit=size - 100, policy="producer_exception")
        self.assertEqual([c.close_producer.producer_id for c in self.client.commands(T.CLOSE_PRODUCER)],
                         [self.pid])                   # the change was enforced at once
        _, _, reply = self.producer()
        self.assertEqual((reply.type, reply.error.error),
                         (T.ERROR, api.ProducerBlockedQuotaExceededException))
        self.assertIn("backlog quota exceeded", reply.error.message)
        for sub in ("slow", "fast"):
            cursor = self.topic().subscriptions[sub].cursor
            self.successResultOf(cursor.mark_delete(self.topic().ledger.last_confirmed_entry()))
        _, _, reply = self.producer()
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS)

    def test_producer_request_hold_refuses_with_the_error_code(self):
        self.publish(self.client, self.pid, 10, size=100)
        self.set_policy_quota(limit=500, policy="producer_request_hold")
        _, _, reply = self.producer()
        self.assertEqual((reply.type, reply.error.error), (T.ERROR, api.ProducerBlockedQuotaExceededError))

    def test_periodic_check_disconnects_new_excess(self):
        """A quota exceeded after it was set is found by the periodic check."""
        self.set_policy_quota(limit=2000, policy="producer_exception")
        self.publish(self.client, self.pid, 30, size=100)
        self.assertEqual(self.client.commands(T.CLOSE_PRODUCER), [])
        self.broker.startService()
        self.addCleanup(self.broker.stopService)
        self.clock.advance(60)
        self.harness.pump()
        self.assertEqual(len(self.client.commands(T.CLOSE_PRODUCER)), 1)
        self.assertEqual(self.topic().producers, {})

    def test_broker_default_quota(self):
        """backlogQuotaDefaultLimitBytes applies to namespaces without a quota."""
        self.publish(self.client, self.pid, 10, size=100)
        policies = self.broker.policies
        policies.defaults = policies.defaults.__class__(backlog_quotas={
            "destination_storage": backlog_quota.BacklogQuota(limit_size=10)})
        self.topic().policies = policies.defaults
        _, _, reply = self.producer()
        self.assertEqual(reply.error.error, api.ProducerBlockedQuotaExceededError)

    def test_message_age_quota(self):
        """A message_age quota refuses producers while the oldest unacked message is too old."""
        self.publish(self.client, self.pid, 3, age_seconds=100)
        self.set_policy_quota(limit_time=60, policy="producer_exception", kind="message_age")
        _, _, reply = self.producer()
        self.assertEqual(reply.error.error, api.ProducerBlockedQuotaExceededException)

    def set_policy_quota(self, limit=-1, policy="producer_request_hold", limit_time=-1,
                         kind="destination_storage"):
        self.run_async(self.admin.set_backlog_quota(
            "public", "default", {"limitSize": limit, "limitTime": limit_time, "policy": policy}, kind))
        self.harness.pump()


class EvictionTests(QuotaCase):
    def test_consumer_backlog_eviction_skips_oldest_of_slowest(self):
        """Eviction acks the slowest subscriptions' oldest messages to under 90% of the limit;
        producers are untouched."""
        self.publish(self.client, self.pid, 20, size=100)
        topic = self.topic()
        fast = topic.subscriptions["fast"].cursor
        receipts_position = fast.nth_unacked_position(15)
        self.successResultOf(fast.mark_delete(receipts_position))
        limit = self.backlog() // 2
        ProducerPolicyTests.set_policy_quota(self, limit=limit, policy="consumer_backlog_eviction")
        self.assertLessEqual(self.backlog(), 0.9 * limit)
        self.assertGreater(self.backlog(), 0)
        self.assertEqual(topic.subscriptions["fast"].backlog(), 5)   # already under: untouched
        self.assertEqual(self.client.commands(T.CLOSE_PRODUCER), [])
        _, _, reply = self.producer()
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS)

    def test_eviction_by_age(self):
        self.publish(self.client, self.pid, 4, age_seconds=100)
        self.publish(self.client, self.pid, 2, age_seconds=1)
        ProducerPolicyTests.set_policy_quota(self, limit_time=50, policy="consumer_backlog_eviction",
                                             kind="message_age")
        self.assertEqual(self.topic().subscriptions["slow"].backlog(), 2)
        self.assertEqual(self.topic().subscriptions["fast"].backlog(), 2)


class QuotaValueTests(unittest.TestCase):
    def test_no_ledger_never_exceeded(self):
        topic = type("NP", (), {"persistent": False, "subscriptions": {}})()
        self.assertFalse(backlog_quota.size_exceeded(topic, backlog_quota.BacklogQuota(limit_size=0)))
        self.assertFalse(backlog_quota.size_exceeded(topic, None))
