"""
One active-consumer rule for Failover on both kinds of topic: among the consumers of the best
priority level, sorted by name, a partition's active consumer is ``partition % count``; a
non-partitioned topic's is the one Pulsar's hash ring of consumer names gives the topic name.
"""

import mmh3

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker.dispatch.single import choose_active
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand
Sub = api.CommandSubscribe


def message(seq):
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
    return frames.encode_message(meta, b"m%d" % seq)


def payloads(received):
    return [frames.split_message(m)[1].decode() for c, m in received if c.type == T.MESSAGE]


def active_flags(received):
    return [c.active_consumer_change.is_active for c, _ in received if c.type == T.ACTIVE_CONSUMER_CHANGE]


class FailoverPartitionRuleMixin:
    """``topic``: a partition of index 1, so with consumers a and b the active one is b."""

    topic = None

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness()
        yield self.harness.start()
        self.producer = self.harness.client()
        self.producer.send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic=self.topic, producer_id=1, request_id=1)))
        self.assertEqual(len(self.producer.commands(T.PRODUCER_SUCCESS)), 1)

    def subscribe(self, client, consumer_id, name, priority=0):
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=self.topic, subscription="s", subType=Sub.Failover, consumer_id=consumer_id,
            request_id=100 + consumer_id, consumer_name=name, priority_level=priority)))
        client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=10)))

    def publish(self, n):
        for seq in range(n):
            self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)),
                               message(seq))
        self.assertEqual(len(self.producer.commands(T.SEND_RECEIPT)), n)

    def test_partition_index_picks_active(self):
        """Partition 1 of two Failover consumers a, b: b is active (1 % 2) once the delay passed."""
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, "a")
        self.subscribe(b, 2, "b")
        self.harness.clock.advance(2)
        self.publish(3)
        got_a, got_b = a.received(), b.received()
        self.assertEqual(active_flags(got_b)[-1], True)
        self.assertEqual(active_flags(got_a)[-1], False)
        self.assertEqual(payloads(got_b), ["m0", "m1", "m2"])
        self.assertEqual(payloads(got_a), [])

    def test_newcomer_takes_over_only_after_delay(self):
        """As in Pulsar, the choice changes at once and its delivery waits
        activeConsumerFailoverDelayTimeMillis: a consumer subscribing within the delay of another
        takes over before anything was sent to the other, which is never told it is active."""
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, "a")
        self.harness.pump()
        self.subscribe(b, 2, "b")
        self.harness.pump()
        self.publish(2)
        got_a = a.received()
        self.assertEqual(active_flags(got_a), [])
        self.assertEqual(payloads(got_a), [])
        early_b = b.received()
        self.assertEqual(active_flags(early_b), [])
        self.harness.clock.advance(1.0)
        got_a, got_b = a.received(), early_b + b.received()
        self.assertEqual(active_flags(got_a), [False])
        self.assertEqual(active_flags(got_b), [True])
        self.assertEqual(payloads(got_a), [])
        # (a non-persistent subscription sends to the chosen consumer at once: nothing to rewind)
        self.assertEqual(payloads(got_b), ["m0", "m1"])

    def test_switch_waits_for_acks_then_rewinds(self):
        """Once a consumer is active, a newcomer it must give way to is told at once that it is
        not active; the switch happens after the delay, with nothing sent to the old one meanwhile."""
        a = self.harness.client()
        self.subscribe(a, 1, "a")
        self.harness.clock.advance(1.0)
        self.assertEqual(active_flags(a.received()), [True])
        b = self.harness.client()
        self.subscribe(b, 2, "b")
        self.harness.pump()
        self.publish(1)
        self.assertEqual(payloads(a.received()), [])
        self.harness.clock.advance(1.0)
        got_a, got_b = a.received(), b.received()
        self.assertEqual(active_flags(got_a), [False])
        self.assertEqual(active_flags(got_b), [True])
        self.assertEqual(payloads(got_b), ["m0"])

    def test_best_priority_level_only(self):
        """Only consumers of the best (lowest) priority level count for ``partition % count``."""
        a, b, c = self.harness.client(), self.harness.client(), self.harness.client()
        self.subscribe(a, 1, "a")
        self.subscribe(b, 2, "b", priority=1)
        self.subscribe(c, 3, "c", priority=1)
        self.harness.clock.advance(2)
        self.publish(2)
        self.assertEqual(payloads(a.received()), ["m0", "m1"])
        self.assertEqual(payloads(b.received()) + payloads(c.received()), [])


class FailoverTopicHashMixin(FailoverPartitionRuleMixin):
    """``topic``: non-partitioned, a name whose ring point goes to b of consumers a and b."""

    def test_partition_index_picks_active(self):
        """Without a partition index, b (the ring's choice for this name) becomes active
        although a subscribed first, after the failover delay."""
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, "a")
        self.harness.pump()
        self.subscribe(b, 2, "b")
        self.harness.pump()
        self.harness.clock.advance(1.0)
        self.publish(3)
        got_a, got_b = a.received(), b.received()
        self.assertEqual(active_flags(got_a), [False])
        self.assertEqual(active_flags(got_b)[-1], True)
        self.assertEqual(payloads(got_b), ["m0", "m1", "m2"])
        self.assertEqual(payloads(got_a), [])

    test_newcomer_takes_over_only_after_delay = test_partition_index_picks_active


class PersistentFailoverTests(FailoverPartitionRuleMixin, unittest.TestCase):
    topic = "persistent://public/default/t-partition-1"


class NonPersistentFailoverTests(FailoverPartitionRuleMixin, unittest.TestCase):
    topic = "non-persistent://public/default/t-partition-1"


class PersistentTopicHashTests(FailoverTopicHashMixin, unittest.TestCase):
    topic = "persistent://public/default/t"


class NonPersistentTopicHashTests(FailoverTopicHashMixin, unittest.TestCase):
    topic = "non-persistent://public/default/t"


class _Consumer:
    def __init__(self, name, consumer_id, priority_level=0):
        self.name, self.consumer_id, self.priority_level = name, consumer_id, priority_level


class ChooseActiveTests(unittest.SynchronousTestCase):
    def test_rule(self):
        """Best priority level only, sorted by name then id; partition % count; first if unpartitioned."""
        a, b, c = _Consumer("a", 3), _Consumer("b", 1), _Consumer("c", 2)
        low = _Consumer("0-low", 9, priority_level=1)
        consumers = [c, low, b, a]
        self.assertIsNone(choose_active([], 0))
        self.assertEqual([choose_active(consumers, p) for p in range(4)], [a, b, c, a])
        twin = _Consumer("a", 0)
        self.assertIs(choose_active([a, twin], 0), twin)

    def test_ring_known_values(self):
        """Pulsar's ring over a, b: ".../t" goes to b, ".../x" to a, on both topic kinds."""
        a, b = _Consumer("a", 1), _Consumer("b", 2)
        for domain in ("persistent", "non-persistent"):
            self.assertIs(choose_active([a, b], -1, f"{domain}://public/default/t"), b)
            self.assertIs(choose_active([b, a], -1, f"{domain}://public/default/x"), a)

    def test_ring_is_first_point_at_or_after_topic_hash(self):
        """The ring rule, worked out by a linear scan: 100 points per name (Murmur3 of name +
        point number, 31 bits), the first at or after the topic's hash, else the lowest."""
        consumers = [_Consumer(n, i) for i, n in enumerate(("x1", "x2", "x3"))]

        def h(text):
            return mmh3.hash(text.encode(), 0, signed=False) & 0x7FFFFFFF

        for topic in (f"persistent://public/default/t{i}" for i in range(50)):
            points = [(h(f"{c.name}{j}"), c) for c in consumers for j in range(100)]
            after = [p for p in points if p[0] >= h(topic)]
            expected = min(after or points, key=lambda p: p[0])[1]
            self.assertIs(choose_active(consumers, -1, topic), expected, topic)

    def test_consistent_hashing_for_partitions(self):
        """activeConsumerFailoverConsistentHashing: partitions use the ring too."""
        a, b = _Consumer("a", 1), _Consumer("b", 2)
        topic = "persistent://public/default/t-partition-0"
        self.assertIs(choose_active([a, b], 0, topic), a)
        self.assertIs(choose_active([a, b], 0, topic, consistent=True),
                      choose_active([a, b], -1, topic))
