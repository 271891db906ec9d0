"""
A consumer waiting with permits gets a new entry in the reactor turn its add completes in, not
turns later (issue 14, end-to-end latency): the managed ledger announces a turn's first add at
once and the dispatcher reads from that announcement without scheduling a read first.
"""

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from tests.broker.messaging import FeatureCase, Sub, T, message, payloads


class WaitingConsumerTests(FeatureCase):

    def _send_without_pumping(self, client, seq):
        client.protocol.dataReceived(frames.encode_payload_command(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq, num_messages=1)),
            message(seq)))

    def _consumer_and_producer(self, kind):
        """A consumer of ``kind`` with permits, waiting, and a producer on the topic."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=kind)
        producer = self.harness.client()
        self.create_producer(producer)
        consumer.received()
        return consumer, producer

    def test_message_dispatched_in_the_turn_its_add_completes(self):
        consumer, producer = self._consumer_and_producer(Sub.Shared)
        # The fake ledger completes the add inside the SEND: no reactor turn passes.
        self._send_without_pumping(producer, 0)
        frames_out = frames.FrameDecoder(1 << 20).feed(consumer.transport.value())
        self.assertEqual(payloads(frames_out), ["m0"])
        receipts = frames.FrameDecoder(1 << 20).feed(producer.transport.value())
        self.assertEqual([c.type for c, _ in receipts], [T.SEND_RECEIPT])

    def test_a_burst_is_dispatched_whole_by_the_end_of_the_turn(self):
        consumer, producer = self._consumer_and_producer(Sub.Exclusive)
        for seq in range(5):
            self._send_without_pumping(producer, seq)
        self.clock.advance(0)
        frames_out = frames.FrameDecoder(1 << 20).feed(consumer.transport.value())
        self.assertEqual(payloads(frames_out), [f"m{i}" for i in range(5)])
