"""Backpressure: reads from producers pause while too much is in flight, and resume after."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand


def big_message(seq, size):
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    return frames.encode_message(meta, b"x" * size)


class PublishBackpressureTests(unittest.TestCase):
    @defer.inlineCallbacks
    def start(self, **config):
        self.harness = BrokerHarness(**config)
        yield self.harness.start()
        self.producer = self.harness.client()
        self.producer.send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic="bp", producer_id=1, request_id=1)))
        self.producer.received()

    def send(self, seq, size=100):
        self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)),
                           big_message(seq, size))

    @defer.inlineCallbacks
    def test_publish_buffer_pauses_every_connection(self):
        """Past maxMessagePublishBufferSizeInMB in flight, all connections stop being read."""
        yield self.start(maxMessagePublishBufferSizeInMB=1)
        bystander = self.harness.client()
        self.harness.ledger_client.pause_adds()
        self.send(0, 600_000)
        self.assertEqual(self.producer.transport.producerState, "producing")
        self.send(1, 600_000)
        self.assertEqual(self.producer.transport.producerState, "paused")
        self.assertEqual(bystander.transport.producerState, "paused")
        self.harness.ledger_client.resume_adds()
        self.harness.pump()
        self.assertEqual(self.producer.transport.producerState, "producing")
        self.assertEqual(bystander.transport.producerState, "producing")
        self.assertEqual(len(self.producer.commands(T.SEND_RECEIPT)), 2)

    @defer.inlineCallbacks
    def test_pending_sends_per_connection(self):
        """maxPendingPublishRequestsPerConnection in flight pauses that connection only."""
        yield self.start(maxPendingPublishRequestsPerConnection=4)
        other = self.harness.client()
        self.harness.ledger_client.pause_adds()
        for seq in range(4):
            self.send(seq)
        self.assertEqual(self.producer.transport.producerState, "paused")
        self.assertEqual(other.transport.producerState, "producing")
        self.harness.ledger_client.resume_adds()
        self.harness.pump()
        self.assertEqual(self.producer.transport.producerState, "producing")

    @defer.inlineCallbacks
    def test_topic_pending_adds_pause_its_producers(self):
        """managedLedgerMaxPendingAddsPerTopic pending writes pause the topic's producers."""
        yield self.start(managedLedgerMaxPendingAddsPerTopic=3)
        self.harness.ledger_client.pause_adds()
        for seq in range(3):
            self.send(seq)
        self.assertEqual(self.producer.transport.producerState, "paused")
        self.harness.ledger_client.resume_adds()
        self.harness.pump()
        self.assertEqual(self.producer.transport.producerState, "producing")
        self.assertEqual(len(self.producer.commands(T.SEND_RECEIPT)), 3)
