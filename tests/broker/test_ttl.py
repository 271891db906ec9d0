"""Message TTL (ttl.py): expiry by publish time on every subscription, found by bisection."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker import ttl
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames

from tests.broker.test_policies import PolicyCase, TopicPolicyCase

T = api.BaseCommand


def payloads(client):
    return [frames.split_message(m)[1] for c, m in client.received() if c.type == T.MESSAGE]


class CountingLedger:
    """A ledger wrapper counting entry reads."""

    def __init__(self, ledger):
        self.ledger = ledger
        self.reads = 0

    def __getattr__(self, name):
        return getattr(self.ledger, name)

    def read_entries(self, position, count):
        self.reads += 1
        return self.ledger.read_entries(position, count)


class TtlTests(TopicPolicyCase):
    config = {"managedLedgerMaxEntriesPerLedger": 4, "managedLedgerMinLedgerRolloverTimeMinutes": 0,
              "messageExpiryCheckIntervalInMinutes": 1}

    def subscribe_consumers(self):
        self.cid = self.subscribe(self.consumer_client, "s")
        self.client.commands()

    def test_backlog_index_spans_ledgers(self):
        self.publish(self.client, self.pid, 10)
        ledger = self.topic().ledger
        ids = [i["ledgerId"] for i in ledger.ledgers_info() if i["entries"]]
        index = ttl.BacklogIndex(ledger, Position(ids[0], 1))
        self.assertEqual(index.size, 8)
        self.assertEqual(index.position(0), Position(ids[0], 2))
        self.assertEqual(index.position(2), Position(ids[1], 0))
        self.assertEqual(index.position(7), Position(ids[2], 1))

    def test_expired_messages_are_acknowledged_and_never_delivered(self):
        """Messages older than the TTL are acked on the subscription; newer ones are kept."""
        self.publish(self.client, self.pid, 7, age_seconds=120)
        self.publish(self.client, self.pid, 3, age_seconds=10)
        self.set_policy("messageTTL", 60)      # applied at once: the check runs now
        sub = self.topic().subscriptions["s"]
        self.assertEqual(sub.backlog(), 3)
        self.consumer_client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=self.cid,
                                                                      messagePermits=100)))
        self.assertEqual(len(payloads(self.consumer_client)), 3)

    def test_periodic_check_and_bisection_reads(self):
        """The periodic check expires as the messages age, reading about log2(backlog) entries."""
        self.write_policies(message_ttl_in_seconds=30)
        self.publish(self.client, self.pid, 40, age_seconds=0)
        topic = self.topic()
        counting = CountingLedger(topic.ledger)
        now_ms = int(self.clock.seconds() * 1000)
        moved = self.successResultOf(defer.Deferred.fromCoroutine(ttl.expire_subscription(
            type("TopicView", (), {"ledger": counting})(), topic.subscriptions["s"], 30, now_ms)))
        self.assertFalse(moved)
        self.assertEqual(counting.reads, 1)     # the first unacked entry is fresh: one read
        self.clock.advance(20)
        self.publish(self.client, self.pid, 24)
        self.clock.advance(15)                  # the first 40 are 35 s old, the rest 15 s
        counting.reads = 0
        moved = self.successResultOf(defer.Deferred.fromCoroutine(ttl.expire_subscription(
            type("TopicView", (), {"ledger": counting})(), topic.subscriptions["s"], 30,
            int(self.clock.seconds() * 1000))))
        self.assertTrue(moved)
        self.assertLessEqual(counting.reads, 2 + 7)
        self.assertEqual(topic.subscriptions["s"].backlog(), 24)
        self.broker.startService()
        self.addCleanup(self.broker.stopService)
        self.clock.advance(60)                  # the check runs every minute
        self.assertEqual(topic.subscriptions["s"].backlog(), 0)

    def test_individual_acks_above_the_expiry_point(self):
        """Expiry folds individually acked messages into the mark-delete position."""
        receipts = self.publish(self.client, self.pid, 6, age_seconds=100)
        sub = self.topic().subscriptions["s"]
        last = receipts[-1].message_id
        self.successResultOf(sub.cursor.delete([Position(last.ledgerId, last.entryId)]))
        self.set_policy("messageTTL", 50)
        self.assertEqual(sub.backlog(), 0)
        self.assertEqual(sub.cursor.individually_deleted_ranges(), [])

    def test_no_ttl_no_expiry(self):
        self.publish(self.client, self.pid, 3, age_seconds=500)
        self.successResultOf(self.broker.policies.check_message_expiry())
        self.assertEqual(self.topic().subscriptions["s"].backlog(), 3)

class DefaultTtlTests(PolicyCase):
    config = {"ttlDurationDefaultInSeconds": 5}

    def test_broker_default_ttl(self):
        """ttlDurationDefaultInSeconds applies to namespaces without a TTL of their own."""
        client, pid, _ = self.producer()
        self.subscribe(self.harness.client(), "s")
        self.publish(client, pid, 2, age_seconds=10)
        self.publish(client, pid, 1, age_seconds=1)
        self.successResultOf(self.broker.policies.check_message_expiry())
        self.assertEqual(self.topic().subscriptions["s"].backlog(), 1)


class NonPersistentTtlTests(unittest.TestCase):
    def test_topic_without_ledger_is_ignored(self):
        topic = type("NP", (), {"persistent": False, "subscriptions": {}})()
        self.assertEqual(self.successResultOf(defer.Deferred.fromCoroutine(ttl.expire_topic(topic, 5, 0))), 0)
