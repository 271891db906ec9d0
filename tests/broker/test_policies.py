"""
Namespace policies enforced on the broker's topics (policies.py): parsing with Pulsar's defaults,
application at load and to live topics at once (admin API and metadata-store watch), limits,
retention, deduplication, inactive topic deletion and subscription expiration.
"""


from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker import backlog_quota
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.policies import PolicyService, check_config
from pulsar_twisted.broker.service import TopicBusyError
from pulsar_twisted.common import errors
from pulsar_twisted.config import ConfigError, StandaloneConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP, NamespacePolicies
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand
Sub = api.CommandSubscribe
TOPIC = "persistent://public/default/t"


def message(seq: int, publish_time: int, size: int = 10) -> bytes:
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=publish_time)
    return frames.encode_message(meta, b"x" * size)


class PolicyCase(unittest.TestCase):
    """A harness, an AdminService over it, and helpers to produce and consume."""

    config = {}

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(**self.config)
        yield self.harness.start()
        self.broker = self.harness.broker
        self.clock = self.harness.clock
        self.clock.advance(1000)   # publish times well above 0
        self.admin = AdminService(self.broker, self.harness.store, self.harness.config, self.clock)
        self.seq = 0
        self._ids = iter(range(1, 10000))

    def run_async(self, coroutine):
        return self.successResultOf(defer.Deferred.fromCoroutine(coroutine))

    def set_policy(self, name, value):
        self.run_async(self.admin.set_namespace_policy("public", "default", name, value))
        self.harness.pump()

    def write_policies(self, **fields):
        self.harness.write_policies(**fields)

    def producer(self, client=None, topic=TOPIC):
        """(client, producer_id, reply command) for a new producer."""
        client = client or self.harness.client()
        pid = next(self._ids)
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=pid,
                                                                    request_id=pid)))
        [reply] = [c for c in client.commands() if c.type in (T.PRODUCER_SUCCESS, T.ERROR)]
        return client, pid, reply

    def publish(self, client, pid, n=1, age_seconds=0, size=10):
        now_ms = int(self.clock.seconds() * 1000)
        for _ in range(n):
            client.send(T(type=T.SEND, send=api.CommandSend(producer_id=pid, sequence_id=self.seq)),
                        message(self.seq, now_ms - age_seconds * 1000, size))
            self.seq += 1
        return [c.send_receipt for c in client.commands(T.SEND_RECEIPT)]

    def subscribe(self, client, sub="s", permits=0, topic=TOPIC, initial=Sub.Earliest):
        cid = next(self._ids)
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=topic, subscription=sub, subType=Sub.Shared, consumer_id=cid, request_id=cid,
            initialPosition=initial)))
        if permits:
            client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=cid, messagePermits=permits)))
        return cid

    def topic(self, name=TOPIC):
        return self.broker.topics[name]


class TopicPolicyCase(PolicyCase):
    """A PolicyCase whose setUp also opens a producer (``self.client``, ``self.pid``) and a client for
    consumers (``self.consumer_client``), then calls ``subscribe_consumers()``."""

    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self._topic())
        return d

    def _topic(self):
        self.client, self.pid, _ = self.producer()
        self.consumer_client = self.harness.client()
        self.subscribe_consumers()

    def subscribe_consumers(self):
        """The subscriptions each test class needs on ``self.consumer_client``."""


class NamespacePoliciesTests(unittest.TestCase):
    def test_defaults_come_from_the_broker_config(self):
        """Unset fields resolve to the broker's keys, as Pulsar resolves them."""
        config = StandaloneConfig(maxProducersPerTopic=3, ttlDurationDefaultInSeconds=30,
                                  backlogQuotaDefaultLimitBytes=1000,
                                  backlogQuotaDefaultRetentionPolicy="producer_exception",
                                  defaultRetentionTimeInMinutes=-1, brokerDeleteInactiveTopicsEnabled=True)
        p = NamespacePolicies.from_json({"replication_clusters": ["standalone"]}, config)
        self.assertEqual(p.max_producers_per_topic, 3)
        self.assertEqual(p.message_ttl_seconds, 30)
        self.assertEqual(p.retention_time_minutes, -1)
        self.assertEqual(p.backlog_quotas, {backlog_quota.DESTINATION_STORAGE: backlog_quota.BacklogQuota(
            limit_size=1000, policy="producer_exception")})
        self.assertTrue(p.inactive_topic.delete_while_inactive)
        self.assertEqual(p.inactive_topic.max_inactive_seconds, 60)

    def test_stored_values_override(self):
        config = StandaloneConfig()
        p = NamespacePolicies.from_json({
            "retention_policies": {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1},
            "message_ttl_in_seconds": 5, "max_consumers_per_subscription": 2,
            "deduplicationEnabled": True, "subscription_expiration_time_minutes": 7,
            "backlog_quota_map": {"destination_storage": {"limit": 99, "policy": "consumer_backlog_eviction"},
                                  "message_age": {"limitTime": 60, "policy": "producer_exception"}},
            "inactive_topic_policies": {"deleteWhileInactive": True, "maxInactiveDurationSeconds": 5,
                                        "inactiveTopicDeleteMode": DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP},
        }, config)
        self.assertEqual((p.retention_time_minutes, p.retention_size_mb), (10, -1))
        self.assertEqual(p.message_ttl_seconds, 5)
        self.assertEqual(p.max_consumers_per_subscription, 2)
        self.assertTrue(p.deduplication_enabled)
        self.assertEqual(p.subscription_expiration_minutes, 7)
        self.assertEqual(p.backlog_quotas["destination_storage"].limit_size, 99)
        self.assertEqual(p.backlog_quotas["message_age"],
                         backlog_quota.BacklogQuota(limit_time=60, policy="producer_exception"))
        self.assertEqual(p.inactive_topic.mode, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP)

    def test_bad_field_keeps_the_default_and_is_logged(self):
        """One unusable field falls back to the broker default; the others still apply."""
        p = NamespacePolicies.from_json({"message_ttl_in_seconds": "soon", "max_producers_per_topic": 4,
                                         "backlog_quota_map": {"destination_storage": {"policy": "nope"}}},
                                        StandaloneConfig())
        self.assertEqual(p.message_ttl_seconds, 0)
        self.assertEqual(p.max_producers_per_topic, 4)
        self.assertEqual(p.backlog_quotas, {})
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_bad_config_refused(self):
        with self.assertRaisesRegex(ConfigError, "brokerDeleteInactiveTopicsMode"):
            check_config(StandaloneConfig(brokerDeleteInactiveTopicsMode="sometimes"))
        with self.assertRaisesRegex(ConfigError, "backlogQuotaDefaultRetentionPolicy"):
            PolicyService(None, None, StandaloneConfig(backlogQuotaDefaultRetentionPolicy="x"), None)


class LimitTests(PolicyCase):
    def test_max_producers_applied_to_live_topic_at_once(self):
        """A namespace limit set while the topic is loaded binds its next producer."""
        self.producer()
        self.set_policy("maxProducersPerTopic", 1)
        _, _, reply = self.producer()
        self.assertEqual((reply.type, reply.error.error), (T.ERROR, api.ProducerBusy))
        self.run_async(self.admin.remove_namespace_policy("public", "default", "maxProducersPerTopic"))
        _, _, reply = self.producer()
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS)

    def test_limits_applied_at_load(self):
        """A topic loaded after the policy was set obeys it from its first client."""
        self.set_policy("maxConsumersPerSubscription", 1)
        client = self.harness.client()
        self.subscribe(client)
        self.subscribe(client)
        errors_ = client.commands(T.ERROR)
        self.assertEqual([e.error.error for e in errors_], [api.ConsumerBusy])
        self.assertEqual(self.topic().policies.max_consumers_per_subscription, 1)

    def test_store_watch_applies_another_brokers_change(self):
        """A change written to the metadata store directly reaches the loaded topics."""
        self.producer()
        self.write_policies(max_consumers_per_topic=1)
        self.assertEqual(self.topic().max_consumers, 1)
        client = self.harness.client()
        self.subscribe(client, "a")
        self.subscribe(client, "b")
        self.assertEqual([e.error.error for e in client.commands(T.ERROR)], [api.ConsumerBusy])


class RetentionAndDedupTests(PolicyCase):
    config = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def test_retention_change_applied_and_trims_at_once(self):
        """Retention lives in the topic's own ledger config; lowering it trims at once."""
        self.set_policy("retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        client, pid, _ = self.producer()
        self.subscribe(client, "s", initial=Sub.Latest)
        self.publish(client, pid, 6)
        topic = self.topic()
        self.assertIsNot(topic.ledger.config, self.harness.ml_factory.default_config)
        self.assertEqual(topic.ledger.config.retention_time_ms, -1)
        cursor = topic.subscriptions["s"].cursor
        self.successResultOf(cursor.mark_delete(topic.ledger.last_confirmed_entry()))
        self.harness.pump()
        kept = len(topic.ledger.ledgers_info())
        self.assertGreater(kept, 2)
        self.set_policy("retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        self.assertEqual(topic.ledger.config.retention_time_ms, 0)
        self.assertLess(len(topic.ledger.ledgers_info()), kept)
        # the factory default, shared by the other topics, did not change
        self.assertEqual(self.harness.ml_factory.default_config.retention_time_ms, 0)

    def test_deduplication_flag(self):
        """deduplicationEnabled turns the topic's deduplication on and off when it supports it."""
        self.producer()
        topic = self.topic()
        if not hasattr(topic, "set_deduplication"):
            raise unittest.SkipTest("topics have no set_deduplication yet")
        self.set_policy("deduplication", True)
        self.assertIsNotNone(topic.dedup)
        self.set_policy("deduplication", False)
        self.assertIsNone(topic.dedup)


class ServiceMethodTests(PolicyCase):
    def test_delete_topic_refuses_busy_unless_forced(self):
        client, pid, _ = self.producer()
        self.publish(client, pid, 2)
        f = self.failureResultOf(self.broker.delete_topic(TOPIC))
        f.trap(TopicBusyError)
        self.successResultOf(self.broker.delete_topic(TOPIC, force=True))
        self.assertNotIn(TOPIC, self.broker.topics)
        self.failureResultOf(self.broker.delete_topic(TOPIC)).trap(errors.TopicNotFound)
        self.assertEqual(len(client.commands(T.CLOSE_PRODUCER)), 1)

    def test_unload_and_create_subscription(self):
        client, pid, _ = self.producer()
        receipts = self.publish(client, pid, 3)
        from pulsar_twisted.common.position import Position
        first = Position(receipts[1].message_id.ledgerId, receipts[1].message_id.entryId)
        sub = self.successResultOf(self.broker.create_subscription(TOPIC, "admin-made", first))
        self.assertEqual(sub.backlog(), 2)
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.assertNotIn(TOPIC, self.broker.topics)
        topic = self.successResultOf(self.broker.get_topic(TOPIC))
        self.assertEqual(topic.subscriptions["admin-made"].backlog(), 2)
        self.assertIsNotNone(topic.policies)
        self.failureResultOf(self.broker.create_subscription("non-persistent://public/default/x", "s")).trap(
            errors.NotAllowedError)


class InactiveTopicTests(PolicyCase):
    config = {"brokerDeleteInactiveTopicsEnabled": True, "brokerDeleteInactiveTopicsFrequencySeconds": 30,
              "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 60}

    def check(self):
        self.successResultOf(self.broker.policies.check_inactive_topics())

    def test_inactive_topic_deleted_after_the_duration(self):
        """No producers, consumers or traffic for maxInactiveDuration: the topic goes, data too."""
        client, pid, _ = self.producer()
        self.publish(client, pid, 1)
        self.check()
        self.clock.advance(100)
        self.check()
        self.assertIn(TOPIC, self.broker.topics)       # a producer is connected
        client.close()
        self.check()                                    # traffic since the last check: active
        self.clock.advance(59)
        self.check()
        self.assertIn(TOPIC, self.broker.topics)
        self.clock.advance(1)
        self.check()
        self.assertNotIn(TOPIC, self.broker.topics)
        names = self.successResultOf(self.harness.ml_factory.list_names())
        self.assertNotIn("public/default/persistent/t", names)

    def test_subscriptions_keep_the_topic_by_default(self):
        """delete_when_no_subscriptions: a durable subscription keeps an idle topic."""
        client = self.harness.client()
        cid = self.subscribe(client)
        client.send(T(type=T.CLOSE_CONSUMER, close_consumer=api.CommandCloseConsumer(
            consumer_id=cid, request_id=999)))
        for _ in range(4):
            self.check()
            self.clock.advance(61)
        self.assertIn(TOPIC, self.broker.topics)

    def test_caught_up_mode_and_live_change(self):
        """delete_when_subscriptions_caught_up deletes idle topics whose subscriptions have no
        backlog; a namespace policy switching deletion off applies at once."""
        client = self.harness.client()
        cid = self.subscribe(client)
        client.send(T(type=T.CLOSE_CONSUMER, close_consumer=api.CommandCloseConsumer(
            consumer_id=cid, request_id=999)))
        self.set_policy("inactiveTopicPolicies", {"deleteWhileInactive": False})
        self.check()
        self.clock.advance(200)
        self.check()
        self.assertIn(TOPIC, self.broker.topics)
        self.set_policy("inactiveTopicPolicies", {
            "deleteWhileInactive": True, "maxInactiveDurationSeconds": 10,
            "inactiveTopicDeleteMode": DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP})
        self.check()
        self.assertNotIn(TOPIC, self.broker.topics)

    def test_partitions_are_not_deleted_alone(self):
        """A partition of a partitioned topic stays: it goes with its partitioned topic."""
        name = "persistent://public/default/pt-partition-0"
        client, _, reply = self.producer(topic=name)
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS)
        client.close()
        for _ in range(3):
            self.check()
            self.clock.advance(61)
        self.assertIn(name, self.broker.topics)

    def test_client_back_during_deletion_is_not_an_error(self):
        """A topic busy again when the deletion runs is skipped without a logged failure."""
        client, _, _ = self.producer()
        client.close()
        self.check()
        self.clock.advance(61)
        topic = self.topic()
        real = self.broker.delete_topic

        def busy_again(name, force=False):
            return defer.fail(TopicBusyError("Topic has active producers/subscriptions"))
        self.broker.delete_topic = busy_again
        self.check()
        self.broker.delete_topic = real
        self.assertIs(self.topic(), topic)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_periodic_check_runs_on_the_clock(self):
        """startService runs the check every brokerDeleteInactiveTopicsFrequencySeconds."""
        client, pid, _ = self.producer()
        client.close()
        self.broker.startService()
        self.addCleanup(self.broker.stopService)
        for _ in range(4):
            self.clock.advance(30)
        self.assertNotIn(TOPIC, self.broker.topics)


class SubscriptionExpirationTests(PolicyCase):
    def test_idle_durable_subscription_expires(self):
        """A durable subscription without consumers for the expiration time is deleted; one with
        a consumer is kept; the policy is read live."""
        client = self.harness.client()
        idle = self.subscribe(client, "idle")
        self.subscribe(client, "busy")
        client.send(T(type=T.CLOSE_CONSUMER, close_consumer=api.CommandCloseConsumer(
            consumer_id=idle, request_id=999)))
        check = self.broker.policies.check_subscription_expiry
        self.successResultOf(check())
        self.clock.advance(600)
        self.successResultOf(check())
        self.assertEqual(set(self.topic().subscriptions), {"idle", "busy"})   # no policy: never
        self.set_policy("subscriptionExpirationTime", 10)
        self.successResultOf(check())
        self.assertEqual(set(self.topic().subscriptions), {"busy"})
        self.assertNotIn("idle", self.topic().ledger.cursors)
