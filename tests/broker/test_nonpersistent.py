"""Non-persistent topics: nothing stored, messages dropped for consumers without permits."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from tests.broker.messaging import harness_with_producer

T = api.BaseCommand
TOPIC = "non-persistent://public/default/np"


def message(seq, key=None):
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
    if key is not None:
        meta.partition_key = key
    return frames.encode_message(meta, b"m%d" % seq)


class NonPersistentTests(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness, self.producer, answers = yield harness_with_producer(TOPIC)
        [ok] = answers
        self.producer_name = ok.producer_success.producer_name

    def subscribe(self, client, consumer_id, sub="s", kind=api.CommandSubscribe.Shared, name="c"):
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=TOPIC, subscription=sub, subType=kind, consumer_id=consumer_id, request_id=100 + consumer_id,
            consumer_name=name)))
        return client.commands()

    def publish(self, seq, key=None):
        self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)), message(seq, key))
        return self.producer.commands(T.SEND_RECEIPT)

    def test_topics_answer_persistent_or_not(self):
        """Quota, TTL and stats code asks the topic whether it stores anything, not for a ledger."""
        self.harness.client().send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic="persistent://public/default/p", producer_id=1, request_id=1)))
        topics = self.harness.broker.topics
        np_topic, p_topic = topics[TOPIC], topics["persistent://public/default/p"]
        self.subscribe(self.harness.client(), 1)
        self.publish(0)
        self.assertEqual((np_topic.persistent, np_topic.storage_size(), np_topic.backlog_size()),
                         (False, 0, 0))
        self.assertEqual(np_topic.durable_subscriptions(), [])
        self.assertTrue(p_topic.persistent)
        self.assertEqual(p_topic.storage_size(), p_topic.ledger.total_size())

    def test_generated_producer_name(self):
        self.assertTrue(self.producer_name.startswith("standalone-"))

    def test_messages_only_within_permits(self):
        """A consumer gets as many messages as its permits; the rest are dropped, not queued."""
        c = self.harness.client()
        self.subscribe(c, 1)
        c.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=2)))
        for seq in range(5):
            self.assertEqual(len(self.publish(seq)), 1)
        got = [m for cmd, m in c.received() if cmd.type == T.MESSAGE]
        self.assertEqual(len(got), 2)
        self.assertEqual(frames.split_message(got[0])[1], b"m0")
        c.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10)))
        self.assertEqual(c.commands(T.MESSAGE), [])

    def test_exclusive_second_consumer_busy(self):
        c = self.harness.client()
        self.subscribe(c, 1, kind=api.CommandSubscribe.Exclusive)
        [err] = [x for x in self.subscribe(c, 2, kind=api.CommandSubscribe.Exclusive) if x.type == T.ERROR]
        self.assertEqual(err.error.error, api.ConsumerBusy)

    def test_key_shared_one_key_one_consumer(self):
        """Key_Shared routes every key to one consumer (the persistent selectors), in order."""
        c1, c2 = self.harness.client(), self.harness.client()
        self.subscribe(c1, 1, kind=api.CommandSubscribe.Key_Shared, name="c1")
        self.subscribe(c2, 2, kind=api.CommandSubscribe.Key_Shared, name="c2")
        for client, consumer_id in ((c1, 1), (c2, 2)):
            client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=100)))
        for seq in range(20):
            self.publish(seq, key=f"k{seq % 4}")
        owners = {}
        for name, client in (("c1", c1), ("c2", c2)):
            for cmd, m in client.received():
                if cmd.type == T.MESSAGE:
                    meta, payload = frames.split_message(m)
                    key = api.MessageMetadata.FromString(meta).partition_key
                    owners.setdefault(key, set()).add(name)
                    self.assertEqual(int(payload[1:]) % 4, int(key[1:]))
        self.assertEqual(sorted(owners), ["k0", "k1", "k2", "k3"])
        self.assertTrue(all(len(names) == 1 for names in owners.values()))

    def test_drops_counted_in_stats(self):
        """Messages nobody can take are dropped and counted in the subscription's stats."""
        c = self.harness.client()
        self.subscribe(c, 1)
        c.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=1)))
        for seq in range(3):
            self.publish(seq)
        topic = self.harness.broker.topics[TOPIC]
        self.assertEqual(topic.subscriptions["s"].stats()["dropped"], 2)
