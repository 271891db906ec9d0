"""
Topic-level policies (resources/topic_policies.py, PolicyService): a topic's own policies win
over its namespace's, which win over the broker's; they are read with the namespace's, applied at
load, and applied to loaded topics (and every partition) as soon as the store says they changed,
whoever wrote them.
"""

from twisted.internet import defer

from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.metadata import layout
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.topic_policies import TopicPoliciesResources
from tests.broker.test_policies import TOPIC, PolicyCase

T = api.BaseCommand


class TopicPoliciesCase(PolicyCase):
    """A PolicyCase with the topic policies' resource and helpers (no tests of its own)."""

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.resources = TopicPoliciesResources(self.harness.store)
        self.service = self.broker.policies

    def set_topic(self, topic=TOPIC, **changes):
        """Write a topic's policies behind the broker's back (as another broker's admin would)."""
        self.successResultOf(self.resources.update(parse_topic(topic), changes))
        self.harness.pump()

    def effective(self, topic=TOPIC):
        return self.successResultOf(self.service.effective_for(parse_topic(topic)))


class TopicPoliciesTests(TopicPoliciesCase):

    def test_resource_round_trip(self):
        name = parse_topic(TOPIC)
        self.assertIsNone(self.successResultOf(self.resources.get(name)))
        self.set_topic(message_ttl_in_seconds=30, max_producers_per_topic=2)
        self.set_topic(max_producers_per_topic=None)
        self.assertEqual(self.successResultOf(self.resources.get(name)),
                         {"message_ttl_in_seconds": 30})
        self.assertEqual(self.successResultOf(self.resources.of_namespace("public/default")),
                         {TOPIC: {"message_ttl_in_seconds": 30}})
        self.set_topic(message_ttl_in_seconds=None)
        self.assertIsNone(self.successResultOf(self.harness.store.get(
            layout.topic_policies_path(name))))

    def test_topic_over_namespace_over_broker(self):
        self.write_policies(message_ttl_in_seconds=100, max_consumers_per_topic=7)
        self.set_topic(message_ttl_in_seconds=5,
                       retention_policies={"retentionTimeInMinutes": 60, "retentionSizeInMB": 10})
        policies = self.effective()
        self.assertEqual((policies.message_ttl_seconds, policies.max_consumers_per_topic,
                          policies.retention_time_minutes, policies.retention_size_mb),
                         (5, 7, 60, 10))
        other = self.effective("persistent://public/default/other")
        self.assertEqual(other.message_ttl_seconds, 100)

    def test_applied_to_a_loaded_topic_at_once_and_removed(self):
        self.producer()
        topic = self.broker.topics[TOPIC]
        self.set_topic(max_producers_per_topic=1)
        self.assertEqual(topic.max_producers, 1)
        _, _, reply = self.producer()
        self.assertEqual(reply.type, T.ERROR)
        self.assertEqual(reply.error.error, api.ProducerBusy)
        self.set_topic(max_producers_per_topic=None)
        self.assertEqual(topic.max_producers, 0)
        _, _, reply = self.producer()
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS)

    def test_applied_at_load_and_to_the_managed_ledger(self):
        self.producer(topic="persistent://public/default/warm")     # the namespace is read
        self.set_topic(retention_policies={"retentionTimeInMinutes": -1, "retentionSizeInMB": 5})
        self.producer()
        topic = self.broker.topics[TOPIC]
        self.assertEqual((topic.policies.retention_time_minutes, topic.policies.retention_size_mb),
                         (-1, 5))
        config = topic.ledger.config
        self.assertEqual((config.retention_time_ms, config.retention_size_mb), (-1, 5))

    def test_partitions_take_their_partitioned_topics_policies(self):
        base = "persistent://public/default/parted"
        self.set_topic(topic=base, max_producers_per_topic=1)
        for index in range(2):
            partition = f"{base}-partition-{index}"
            self.producer(topic=partition)
            _, _, reply = self.producer(topic=partition)
            self.assertEqual(reply.type, T.ERROR, partition)
        self.assertEqual(self.effective(f"{base}-partition-1").max_producers_per_topic, 1)

    def test_namespace_change_keeps_the_topics_own(self):
        self.producer()
        topic = self.broker.topics[TOPIC]
        self.set_topic(max_producers_per_topic=3)
        self.write_policies(max_producers_per_topic=9, max_consumers_per_topic=4)
        self.assertEqual((topic.max_producers, topic.max_consumers), (3, 4))

    def test_a_bad_value_leaves_the_namespace_value(self):
        self.write_policies(message_ttl_in_seconds=100)
        self.set_topic(message_ttl_in_seconds="soon", max_producers_per_topic=2)
        policies = self.effective()
        self.assertEqual((policies.message_ttl_seconds, policies.max_producers_per_topic), (100, 2))

    def test_change_while_the_namespace_is_read(self):
        """A change notified while the namespace's topic policies are being read is not lost."""
        service = self.service
        service._topic_docs.clear()
        service._cache.clear()
        real = self.resources.of_namespace
        held = defer.Deferred()
        service.topic_policies.of_namespace = lambda namespace: held
        d = service.policies_of("public/default")
        self.set_topic(max_producers_per_topic=4)               # notified during the read
        service.topic_policies.of_namespace = real
        real("public/default").addCallback(lambda _: held.callback({}))   # a stale answer
        self.successResultOf(d)
        self.assertEqual(self.effective().max_producers_per_topic, 4)

    def test_deleting_the_topic_deletes_its_policies(self):
        from pulsar_twisted.broker.admin.service import AdminService
        admin = AdminService(self.broker, self.harness.store, self.harness.config, self.clock)
        self.producer()
        self.set_topic(max_producers_per_topic=1)
        self.broker.topics[TOPIC].producers.clear()
        self.successResultOf(defer.Deferred.fromCoroutine(
            admin.delete_topic(parse_topic(TOPIC), force=True)))
        self.assertIsNone(self.successResultOf(self.resources.get(parse_topic(TOPIC))))

    def test_deleting_the_namespace_deletes_its_topics_policies(self):
        from pulsar_twisted.broker.admin.service import AdminService
        admin = AdminService(self.broker, self.harness.store, self.harness.config, self.clock)
        self.run_async(admin.create_namespace("public", "gone"))
        self.set_topic(topic="persistent://public/gone/t", max_producers_per_topic=1)
        self.run_async(admin.delete_namespace("public", "gone", force=True))
        self.assertEqual(self.successResultOf(self.resources.of_namespace("public/gone")), {})
