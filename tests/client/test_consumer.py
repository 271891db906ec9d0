"""Consumer state machine on a fake broker: flow control, acks, batches, redelivery, reconnect."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client import errors
from pulsar_twisted.client.consumer import Consumer, Sub
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.batch import encode_batch, single_metadata
from pulsar_twisted.wire.compression import compress
from pulsar_twisted.wire.frames import encode_message
from tests.client.helpers import FakeClient, T

CONSUMER_ID = 5


def single(payload=b"p", **fields):
    metadata = api.MessageMetadata(producer_name="prod", sequence_id=1, publish_time=1000, **fields)
    return encode_message(metadata, payload)


def batch(payloads, codec=api.NONE):
    raw = encode_batch([(single_metadata(p, {"n": str(i)}, sequence_id=i), p)
                        for i, p in enumerate(payloads)])
    metadata = api.MessageMetadata(producer_name="prod", sequence_id=0, publish_time=1000,
                                   num_messages_in_batch=len(payloads))
    if codec != api.NONE:
        metadata.compression = codec
        metadata.uncompressed_size = len(raw)
        raw = compress(codec, raw)
    return encode_message(metadata, raw)


class ConsumerCase(SynchronousTestCase):
    def make(self, **conf):
        self.client = FakeClient()
        consumer = Consumer(self.client, "persistent://public/default/t", "sub", CONSUMER_ID,
                            **conf)
        d = consumer.start()
        (sub,) = self.client.broker.commands(T.SUBSCRIBE)
        self.subscribe_command = sub
        self.client.broker.success(sub.subscribe.request_id)
        self.assertIs(self.successResultOf(d), consumer)
        return consumer

    @property
    def broker(self):
        return self.client.broker

    def flows(self):
        return [c.flow.messagePermits for c in self.broker.commands(T.FLOW)]


class FlowTests(ConsumerCase):
    def test_initial_flow_and_refill(self):
        """Subscribe grants receiver_queue_size permits; half the queue consumed refills it."""
        consumer = self.make(receiver_queue_size=4)
        self.assertEqual(self.flows(), [4])
        for entry in range(4):
            self.broker.message(CONSUMER_ID, single(b"%d" % entry), entry_id=entry)
        self.assertEqual(consumer.available_messages(), 4)
        self.successResultOf(consumer.receive())
        self.assertEqual(self.flows(), [])
        self.successResultOf(consumer.receive())
        self.assertEqual(self.flows(), [2])

    def test_receive_waits_and_times_out(self):
        """receive waits for a message; with a timeout it fails with Timeout."""
        consumer = self.make()
        d = consumer.receive()
        self.assertNoResult(d)
        self.broker.message(CONSUMER_ID, single(b"hi", partition_key="k"), ledger_id=2, entry_id=3)
        message = self.successResultOf(d)
        self.assertEqual((message.data(), message.partition_key(), message.message_id()),
                         (b"hi", "k", MessageId(2, 3)))
        d = consumer.receive(timeout=1)
        self.client.clock.advance(1)
        self.failureResultOf(d, errors.Timeout)

    def test_listener(self):
        """A message listener gets each message instead of the queue."""
        got = []
        self.make(message_listener=lambda consumer, message: got.append(message.data()))
        self.broker.message(CONSUMER_ID, single(b"a"))
        self.assertEqual(got, [b"a"])

    def test_reconnect_resubscribes(self):
        """After a lost connection: resubscribe, drop the local queue, grant fresh permits."""
        consumer = self.make(receiver_queue_size=10)
        self.broker.message(CONSUMER_ID, single())
        self.assertEqual(consumer.available_messages(), 1)
        self.broker.lose()
        self.client.clock.advance(0.1)
        (sub,) = self.broker.commands(T.SUBSCRIBE)
        self.broker.success(sub.subscribe.request_id)
        self.assertEqual(consumer.available_messages(), 0)
        self.assertEqual(self.flows(), [10])


class AckTests(ConsumerCase):
    def acks(self):
        return [(c.ack.ack_type, [(m.ledgerId, m.entryId) for m in c.ack.message_id])
                for c in self.broker.commands(T.ACK)]

    def test_individual_ack(self):
        consumer = self.make()
        self.broker.message(CONSUMER_ID, single(), ledger_id=1, entry_id=4)
        consumer.acknowledge(self.successResultOf(consumer.receive()))
        self.assertEqual(self.acks(), [(api.CommandAck.Individual, [(1, 4)])])

    def test_batch_unpacked_and_acked_when_complete(self):
        """A batch entry yields one Message per member; the entry is acked after all members."""
        consumer = self.make()
        self.broker.message(CONSUMER_ID, batch([b"a", b"b", b"c"]), ledger_id=1, entry_id=2)
        messages = [self.successResultOf(consumer.receive()) for _ in range(3)]
        self.assertEqual([m.data() for m in messages], [b"a", b"b", b"c"])
        self.assertEqual([m.message_id() for m in messages], [MessageId(1, 2, i) for i in range(3)])
        self.assertEqual([m.properties() for m in messages], [{"n": "0"}, {"n": "1"}, {"n": "2"}])
        self.assertEqual(messages[2].sequence_id(), 2)
        consumer.acknowledge(messages[0])
        consumer.acknowledge(messages[2])
        self.assertEqual(self.acks(), [])
        consumer.acknowledge(messages[1])
        self.assertEqual(self.acks(), [(api.CommandAck.Individual, [(1, 2)])])

    def test_cumulative_ack_inside_batch(self):
        """Cumulative ack in the middle of a batch acks up to the previous entry only."""
        consumer = self.make()
        self.broker.message(CONSUMER_ID, batch([b"a", b"b"]), ledger_id=1, entry_id=2)
        first = self.successResultOf(consumer.receive())
        consumer.acknowledge_cumulative(first)
        self.assertEqual(self.acks(), [(api.CommandAck.Cumulative, [(1, 1)])])
        consumer.acknowledge_cumulative(self.successResultOf(consumer.receive()))
        self.assertEqual(self.acks(), [(api.CommandAck.Cumulative, [(1, 2)])])

    def test_cumulative_refused_on_shared(self):
        consumer = self.make(consumer_type_=Sub.Shared)
        self.failureResultOf(consumer.acknowledge_cumulative(MessageId(1, 1)),
                             errors.InvalidConfiguration)

    def test_compressed_batches(self):
        """Every codec's batch decompresses into its members."""
        consumer = self.make()
        for entry, codec in enumerate((api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY)):
            payloads = [b"%d-" % codec * 50, b"second"]
            self.broker.message(CONSUMER_ID, batch(payloads, codec), entry_id=entry)
            self.assertEqual([self.successResultOf(consumer.receive()).data() for _ in payloads],
                             payloads)

    def test_corrupt_entry_discarded(self):
        """An entry failing its checksum is acked with ChecksumMismatch and never delivered."""
        consumer = self.make()
        part = bytearray(single(b"payload"))
        part[-1] ^= 0xFF
        self.broker.message(CONSUMER_ID, bytes(part), entry_id=3)
        self.assertEqual(consumer.available_messages(), 0)
        (ack,) = self.broker.commands(T.ACK)
        self.assertEqual(ack.ack.validation_error, api.CommandAck.ChecksumMismatch)

    def test_undecompressable_entry_discarded(self):
        """An entry whose payload does not decompress is acked with DecompressionError, not delivered."""
        consumer = self.make()
        metadata = api.MessageMetadata(producer_name="prod", sequence_id=1, publish_time=1000,
                                       compression=api.ZLIB, uncompressed_size=10)
        self.broker.message(CONSUMER_ID, encode_message(metadata, b"not zlib"), entry_id=4)
        self.assertEqual(consumer.available_messages(), 0)
        (ack,) = self.broker.commands(T.ACK)
        self.assertEqual(ack.ack.validation_error, api.CommandAck.DecompressionError)

    def test_undecodable_batch_discarded(self):
        """A batch whose members run past its payload is acked with BatchDeSerializeError."""
        consumer = self.make()
        metadata = api.MessageMetadata(producer_name="prod", sequence_id=0, publish_time=1000,
                                       num_messages_in_batch=3)
        raw = encode_batch([(single_metadata(b"one"), b"one")])[:-1]
        self.broker.message(CONSUMER_ID, encode_message(metadata, raw), entry_id=5)
        self.assertEqual(consumer.available_messages(), 0)
        (ack,) = self.broker.commands(T.ACK)
        self.assertEqual(ack.ack.validation_error, api.CommandAck.BatchDeSerializeError)


class RedeliveryTests(ConsumerCase):
    def redelivered(self):
        return [[(m.ledgerId, m.entryId) for m in c.redeliverUnacknowledgedMessages.message_ids]
                for c in self.broker.commands(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)]

    def test_negative_ack_delay(self):
        """A negative ack asks for redelivery of that id after the configured delay."""
        consumer = self.make(consumer_type_=Sub.Shared, negative_ack_redelivery_delay_ms=1000)
        self.broker.message(CONSUMER_ID, single(), ledger_id=1, entry_id=6)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.999)
        self.assertEqual(self.redelivered(), [])
        self.client.clock.advance(0.001)
        self.assertEqual(self.redelivered(), [[(1, 6)]])

    def test_negative_ack_exclusive_redelivers_all(self):
        """On Exclusive subscriptions a negative ack redelivers everything (the Java rule)."""
        consumer = self.make(negative_ack_redelivery_delay_ms=100)
        self.broker.message(CONSUMER_ID, single(), entry_id=1)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.1)
        self.assertEqual(self.redelivered(), [[]])

    def test_ack_timeout(self):
        """Messages not acked within ack_timeout_ms are redelivered; acked ones are not."""
        consumer = self.make(consumer_type_=Sub.Shared, ack_timeout_ms=5000,
                             ack_timeout_tick_ms=1000)
        for entry in (1, 2):
            self.broker.message(CONSUMER_ID, single(), entry_id=entry)
        first = self.successResultOf(consumer.receive())
        self.successResultOf(consumer.receive())
        consumer.acknowledge(first)
        self.client.clock.advance(4)
        self.assertEqual(self.redelivered(), [])
        self.client.clock.advance(1)
        self.assertEqual(self.redelivered(), [[(1, 2)]])
        self.client.clock.advance(10)
        self.assertEqual(self.redelivered(), [])


class MessageIdTests(SynchronousTestCase):
    def test_ordering(self):
        ids = [MessageId(1, 2, 0), MessageId(1, 1), MessageId(0, 9), MessageId(1, 2, -1)]
        self.assertEqual(sorted(ids), [MessageId(0, 9), MessageId(1, 1), MessageId(1, 2, -1),
                                       MessageId(1, 2, 0)])
        self.assertLess(MessageId.earliest, MessageId(0, 0))
        self.assertLess(MessageId(10 ** 12, 10 ** 12), MessageId.latest)

    def test_serialize_round_trip(self):
        for mid in (MessageId(3, 4), MessageId(3, 4, 2, 1), MessageId.earliest, MessageId.latest):
            self.assertEqual(MessageId.deserialize(mid.serialize()), mid)

    def test_official_client_compatible(self):
        """Our serialize() is read by the official client and vice versa."""
        try:
            import pulsar
        except ImportError:
            raise self.skipTest("official client not installed")
        theirs = pulsar.MessageId.deserialize(MessageId(7, 8, 1, 2).serialize())
        self.assertEqual((theirs.ledger_id(), theirs.entry_id(), theirs.batch_index(),
                          theirs.partition()), (7, 8, 1, 2))
        ours = MessageId.deserialize(pulsar.MessageId.earliest.serialize())
        self.assertEqual(ours, MessageId.earliest)


class BrokerStatsTests(ConsumerCase):
    def test_get_broker_stats_sends_consumer_stats(self):
        """get_broker_stats: CONSUMER_STATS for this consumer, answered fields as a dict."""
        consumer = self.make()
        d = consumer.get_broker_stats()
        (request,) = self.broker.commands(T.CONSUMER_STATS)
        self.assertEqual(request.consumerStats.consumer_id, CONSUMER_ID)
        self.broker.feed(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=api.CommandConsumerStatsResponse(
            request_id=request.consumerStats.request_id, msgRateOut=2.5, msgThroughputOut=80.0,
            consumerName="c", unackedMessages=3)))
        stats = self.successResultOf(d)
        self.assertEqual((stats["msgRateOut"], stats["msgThroughputOut"], stats["consumerName"],
                          stats["unackedMessages"]), (2.5, 80.0, "c", 3))

    def test_get_broker_stats_error(self):
        """A CONSUMER_STATS_RESPONSE with an error code fails the Deferred with that error."""
        consumer = self.make()
        d = consumer.get_broker_stats()
        (request,) = self.broker.commands(T.CONSUMER_STATS)
        self.broker.feed(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=api.CommandConsumerStatsResponse(
            request_id=request.consumerStats.request_id, error_code=api.ConsumerNotFound,
            error_message="Consumer 5 not found")))
        failure = self.failureResultOf(d, errors.ConsumerNotFound)
        self.assertIn("Consumer 5 not found", str(failure.value))
