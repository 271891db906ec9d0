"""
Review regressions of the dispatch path: each test pins a bug found by reading the code (a stall
or a lost message), on BrokerHarness and task.Clock.
"""

from pulsar_twisted.broker.dispatch.key_shared import key_hash
from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import FeatureCase, messages, payloads

T = api.BaseCommand
Sub = api.CommandSubscribe


class KeySharedWritableTests(FeatureCase):
    def test_replay_delivered_when_consumer_becomes_writable(self):
        """
        A Key_Shared message waiting (replay set) for a consumer whose connection was not
        writable is delivered once the connection drains, without any FLOW or ack: the
        connection becoming writable must lift the "replay stalled" state.
        """
        x, y = self.harness.client(), self.harness.client()
        self.subscribe(x, 1, Sub.Key_Shared, name="x")
        self.subscribe(y, 2, Sub.Key_Shared, name="y")
        dispatcher = self.topic_object().subscriptions["s"].dispatcher
        [cx] = [c for c in dispatcher.consumers if c.name == "x"]
        key = next(k for k in (b"k%d" % i for i in range(1000))
                   if dispatcher.selector.select(key_hash(k)) is cx)
        producer = self.harness.client()
        self.create_producer(producer)
        x.protocol.pauseProducing()
        self.send(producer, 0, partition_key=key.decode())
        self.clock.advance(0)
        self.harness.pump()
        self.assertEqual(messages(x.received()), [])
        x.protocol.resumeProducing()
        self.harness.pump()
        self.assertEqual(payloads(x.received()), ["m0"])
        self.assertEqual(messages(y.received()), [])


class ReplayReadFailureTests(FeatureCase):
    config = {"managedLedgerCacheSizeMB": 0}

    def test_failed_replay_read_keeps_the_messages(self):
        """
        A redelivery whose read from storage fails is retried: the positions taken from the
        replay set for that read must not be lost (else the messages are never delivered
        again to a Shared subscription).
        """
        c = self.harness.client()
        self.subscribe(c, 1, Sub.Shared)
        producer = self.harness.client()
        self.create_producer(producer)
        for seq in range(3):
            self.send(producer, seq)
        self.harness.pump()
        first = messages(c.received())
        self.assertEqual(len(first), 3)
        self.harness.ledger_client.fail_next_reads(1)
        self.redeliver(c, 1)
        self.harness.pump()
        self.clock.advance(1.0)
        self.harness.pump()
        self.clock.advance(1.0)
        self.harness.pump()
        self.assertEqual(sorted(payloads(c.received())), ["m0", "m1", "m2"])
        self.assertEqual(len(self.flushLoggedErrors()), 1)
