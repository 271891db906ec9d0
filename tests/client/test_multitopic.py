"""Pattern (regex) subscriptions: discovery, re-discovery, removal, and routing acks by topic."""

import re

from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import errors, multitopic
from pulsar_twisted.client.consumer import Consumer
from tests.client.helpers import FakeClient, T
from tests.client.test_consumer import single

NS = "persistent://public/default/"


class FakeLookup:
    def __init__(self, topics):
        self.topics = list(topics)
        self.asked = []

    def topics_of_namespace(self, namespace, mode=0, pattern=None):
        self.asked.append((namespace, mode, pattern))
        return defer.succeed(list(self.topics))


class PureTests(SynchronousTestCase):
    def test_split_pattern(self):
        """The namespace comes from the pattern; no domain means persistent://public/default."""
        self.assertEqual(multitopic.split_pattern(NS + "x-.*"), ("public/default", NS + "x-.*"))
        self.assertEqual(multitopic.split_pattern("x-.*"), ("public/default", NS + "x-.*"))
        self.assertRaises(errors.InvalidTopicName, multitopic.split_pattern, "persistent://x")

    def test_matching_uses_base_names(self):
        """Partitions match by their base topic; the match is a full match."""
        regex = re.compile(NS + "x-.*")
        topics = [NS + "x-1", NS + "x-2-partition-0", NS + "y-1", NS + "ax-1"]
        self.assertEqual(multitopic.matching(topics, regex), [NS + "x-1", NS + "x-2-partition-0"])

    def test_modes(self):
        """Regex subscription modes by name."""
        Mode = api.CommandGetTopicsOfNamespace
        self.assertEqual(multitopic.regex_mode("AllTopics"), Mode.ALL)
        self.assertEqual(multitopic.regex_mode(None), Mode.PERSISTENT)
        self.assertRaises(errors.InvalidConfiguration, multitopic.regex_mode, "bogus")


class PatternConsumerTests(SynchronousTestCase):
    def setUp(self):
        self.client = FakeClient()
        self.lookup = FakeLookup([NS + "x-1", NS + "y-1"])
        self.ids = iter(range(1, 100))

    def subscribe_topic(self, topic):
        consumer = Consumer(self.client, topic, "sub", next(self.ids), consumer_type_="Shared")
        d = consumer.start()
        (sub,) = [c for c, _ in self.client.broker.read() if c.type == T.SUBSCRIBE]
        self.client.broker.success(sub.subscribe.request_id)
        return d

    def make(self):
        consumer = multitopic.PatternConsumer(
            re.compile(NS + "x-.*"), "public/default", api.CommandGetTopicsOfNamespace.PERSISTENT,
            self.lookup, self.subscribe_topic, self.client.clock, discovery_period=60,
            subscription="sub")
        self.assertIs(self.successResultOf(consumer.start()), consumer)
        return consumer

    def test_discovers_and_rediscovers(self):
        """Matching topics are subscribed; a new one is added at the next discovery period."""
        consumer = self.make()
        self.assertEqual(consumer.topics(), [NS + "x-1"])
        self.assertEqual(self.lookup.asked, [("public/default", 0, NS + "x-.*")])
        self.lookup.topics.append(NS + "x-2")
        self.client.clock.advance(60)
        self.assertEqual(consumer.topics(), [NS + "x-1", NS + "x-2"])

    def test_vanished_topic_removed(self):
        """A topic no longer listed is closed and dropped."""
        consumer = self.make()
        self.lookup.topics = []
        self.client.clock.advance(60)
        (close,) = [c for c, _ in self.client.broker.read() if c.type == T.CLOSE_CONSUMER]
        self.client.broker.success(close.close_consumer.request_id)
        self.assertEqual(consumer.topics(), [])

    def test_messages_carry_topic_and_acks_route(self):
        """Message ids carry their topic; acking by id goes to that topic's consumer."""
        consumer = self.make()
        self.lookup.topics.append(NS + "x-2")
        self.client.clock.advance(60)
        inner = consumer.consumers[NS + "x-2"]
        self.client.broker.message(inner.consumer_id, single(b"hi"), entry_id=7)
        message = self.successResultOf(consumer.receive())
        self.assertEqual(message.topic_name(), NS + "x-2")
        self.assertEqual(message.message_id().owner_topic(), NS + "x-2")
        consumer.acknowledge(message.message_id())
        (ack,) = [c for c, _ in self.client.broker.read() if c.type == T.ACK]
        self.assertEqual(ack.ack.consumer_id, inner.consumer_id)

    def test_close_stops_discovery(self):
        """After close no more discovery runs."""
        consumer = self.make()
        consumer.close()
        for c, _ in self.client.broker.read():
            if c.type == T.CLOSE_CONSUMER:
                self.client.broker.success(c.close_consumer.request_id)
        self.client.clock.advance(120)
        self.assertEqual(len(self.lookup.asked), 1)
        self.assertEqual([c for c in self.client.clock.getDelayedCalls()
                          if "PatternConsumer" in repr(c)], [])
