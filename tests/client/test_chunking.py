"""Chunked messages: splitting in the producer, reassembly and acks in the consumer, bit sets."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import encode_message, parse_metadata, split_message
from pulsar_twisted.client import batch_ack, errors
from pulsar_twisted.client.chunking import ChunkAssembler, ChunkMessageId, chunk_payload_size, split
from pulsar_twisted.client.consumer import Consumer
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.client.producer import Producer
from tests.client.helpers import FakeClient, T, start_subscribed
from tests.client.test_consumer import batch

CONSUMER_ID = 5


def chunk(uuid, chunk_id, num, total, data, publish_time=1000, **fields):
    metadata = api.MessageMetadata(producer_name="prod", sequence_id=7, publish_time=publish_time,
                                   uuid=uuid, chunk_id=chunk_id, num_chunks_from_msg=num,
                                   total_chunk_msg_size=total, **fields)
    return encode_message(metadata, data)


class PureTests(SynchronousTestCase):
    def test_split_and_size(self):
        """split slices in order; the chunk size leaves room for the metadata."""
        self.assertEqual(split(b"abcdefg", 3), [b"abc", b"def", b"g"])
        self.assertEqual(split(b"", 3), [b""])
        self.assertEqual(chunk_payload_size(1000, 100), 868)
        self.assertEqual(chunk_payload_size(1000, 100, 50), 50)

    def test_ack_set_words(self):
        """Ack sets are Java BitSet long words (signed), trailing zero words trimmed."""
        self.assertEqual(batch_ack.to_words({0, 2}), [5])
        self.assertEqual(batch_ack.to_words({63}), [-(1 << 63)])
        words = batch_ack.to_words({1, 64})
        self.assertEqual([batch_ack.bit_is_set(words, i) for i in (0, 1, 64, 65)],
                         [False, True, True, False])

    def test_assembler_bound_and_expiry(self):
        """Past max_pending the oldest is dropped (acked with auto-ack); old contexts expire."""
        dropped = []
        assembler = ChunkAssembler(lambda ids, ack: dropped.append((ids, ack)), max_pending=1,
                                   auto_ack_oldest=True, expire_seconds=10)
        meta = api.MessageMetadata(uuid="a", chunk_id=0, num_chunks_from_msg=2)
        self.assertIsNone(assembler.add(meta, b"x", MessageId(1, 1), 0))
        meta_b = api.MessageMetadata(uuid="b", chunk_id=0, num_chunks_from_msg=2)
        self.assertIsNone(assembler.add(meta_b, b"y", MessageId(1, 2), 1))
        self.assertEqual(dropped, [([MessageId(1, 1)], True)])
        self.assertEqual(assembler.expire(5), 0)
        self.assertEqual(assembler.expire(11), 1)
        self.assertEqual(dropped[-1], ([MessageId(1, 2)], True))


class ProducerChunkingTests(SynchronousTestCase):
    def make(self, **conf):
        self.client = FakeClient()
        producer = Producer(self.client, "persistent://public/default/t", 3, **conf)
        d = producer.start()
        (create,) = self.client.broker.commands(T.PRODUCER)
        self.client.broker.producer_success(create.producer.request_id, name="gen")
        self.successResultOf(d)
        return producer

    def test_not_with_batching(self):
        """Chunking and batching together are refused, as in the Java client."""
        self.assertRaises(errors.InvalidConfiguration, Producer, FakeClient(), "t", 1,
                          chunking_enabled=True, batching_enabled=True)

    def test_splits_large_message(self):
        """A payload over the chunk size goes out as chunks with Java's metadata; the id spans them."""
        producer = self.make(chunking_enabled=True, chunk_max_message_size=100)
        payload = bytes(range(256)) * 2
        d = producer.send(payload, properties={"p": "1"})
        sends = [(c, m) for c, m in self.client.broker.read() if c.type == T.SEND]
        self.assertEqual(len(sends), 6)
        metas = [parse_metadata(m, verify=True) for _, m in sends]
        self.assertEqual({c.send.sequence_id for c, _ in sends}, {0})
        self.assertEqual([m.chunk_id for m in metas], list(range(6)))
        self.assertEqual({(m.uuid, m.num_chunks_from_msg, m.total_chunk_msg_size) for m in metas},
                         {("gen-0", 6, 512)})
        self.assertEqual(b"".join(split_message(m)[1] for _, m in sends), payload)
        for entry in range(5):
            self.client.broker.receipt(3, 0, ledger_id=4, entry_id=entry)
            self.assertNoResult(d)
        self.assertEqual(producer.pending_count, 1)
        self.client.broker.receipt(3, 0, ledger_id=4, entry_id=5)
        mid = self.successResultOf(d)
        self.assertIsInstance(mid, ChunkMessageId)
        self.assertEqual((mid, mid.first_chunk_message_id), (MessageId(4, 5), MessageId(4, 0)))
        self.assertEqual(producer.pending_count, 0)
        self.assertEqual(mid.to_proto().first_chunk_message_id.entryId, 0)

    def test_small_message_not_chunked(self):
        """A message under the limit is one plain SEND without chunk fields."""
        producer = self.make(chunking_enabled=True)
        producer.send(b"small")
        ((cmd, part),) = [(c, m) for c, m in self.client.broker.read() if c.type == T.SEND]
        self.assertFalse(parse_metadata(part).HasField("uuid"))

    def test_too_big_without_chunking(self):
        """Without chunking a message over max_message_size fails with MessageTooBig."""
        producer = self.make()
        producer.max_message_size = 100
        self.failureResultOf(producer.send(b"x" * 200), errors.MessageTooBig)


class ConsumerChunkTests(SynchronousTestCase):
    def make(self, **conf):
        self.client = FakeClient()
        consumer = Consumer(self.client, "persistent://public/default/t", "sub", CONSUMER_ID,
                            consumer_type_="Shared", receiver_queue_size=10, **conf)
        return start_subscribed(self, consumer)

    def acks(self):
        return [[(m.ledgerId, m.entryId) for m in c.ack.message_id]
                for c in self.client.broker.commands(T.ACK)]

    def test_reassembles_and_acks_every_chunk(self):
        """Chunks become one message; acking it acks all chunk entries in one ACK."""
        consumer = self.make()
        broker = self.client.broker
        broker.message(CONSUMER_ID, chunk("u", 0, 3, 9, b"abc"), entry_id=1)
        plain = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
        broker.message(CONSUMER_ID, encode_message(plain, b"plain"), entry_id=2)
        broker.message(CONSUMER_ID, chunk("u", 1, 3, 9, b"def"), entry_id=3)
        broker.message(CONSUMER_ID, chunk("u", 2, 3, 9, b"ghi"), entry_id=4)
        plain = self.successResultOf(consumer.receive())
        self.assertEqual(plain.data(), b"plain")
        whole = self.successResultOf(consumer.receive())
        self.assertEqual(whole.data(), b"abcdefghi")
        mid = whole.message_id()
        self.assertEqual((mid, mid.first_chunk_message_id), (MessageId(1, 4), MessageId(1, 1)))
        consumer.acknowledge(whole)
        self.assertEqual(self.acks(), [[(1, 1), (1, 3), (1, 4)]])

    def test_compressed_chunks(self):
        """The chunks of a compressed payload are decompressed once reassembled."""
        from pulsar_twisted.wire.compression import compress
        raw = b"hello world " * 50
        data = compress(api.ZLIB, raw)
        consumer = self.make()
        half = len(data) // 2
        for i, part in enumerate((data[:half], data[half:])):
            self.client.broker.message(CONSUMER_ID, chunk(
                "z", i, 2, len(data), part, compression=api.ZLIB, uncompressed_size=len(raw)),
                entry_id=i)
        self.assertEqual(self.successResultOf(consumer.receive()).data(), raw)

    def test_orphan_chunk_and_queue_bound(self):
        """A chunk without its start is dropped (acked once expired); the oldest is evicted."""
        consumer = self.make(max_pending_chunked_message=1,
                             auto_ack_oldest_chunked_message_on_queue_full=True,
                             expire_time_of_incomplete_chunked_message_ms=5000)
        broker = self.client.broker
        broker.message(CONSUMER_ID, chunk("x", 1, 2, 2, b"b"), entry_id=1)
        self.assertEqual(self.acks(), [])
        broker.message(CONSUMER_ID, chunk("y", 1, 2, 2, b"b", publish_time=0), entry_id=2)
        self.client.clock.advance(6)
        broker.message(CONSUMER_ID, chunk("z", 1, 2, 2, b"b", publish_time=0), entry_id=3)
        self.assertEqual(self.acks(), [[(1, 3)]])
        broker.message(CONSUMER_ID, chunk("a", 0, 2, 2, b"a"), entry_id=4)
        broker.message(CONSUMER_ID, chunk("b", 0, 2, 2, b"a"), entry_id=5)
        self.assertEqual(self.acks(), [[(1, 4)]])
        self.client.clock.advance(6)
        self.assertEqual(self.acks(), [[(1, 5)]])
        self.assertEqual(consumer.available_messages(), 0)

    def test_nack_redelivers_every_chunk(self):
        """A negatively acknowledged chunked message asks redelivery of all its chunks."""
        consumer = self.make(negative_ack_redelivery_delay_ms=100)
        broker = self.client.broker
        broker.message(CONSUMER_ID, chunk("u", 0, 2, 2, b"a"), entry_id=1)
        broker.message(CONSUMER_ID, chunk("u", 1, 2, 2, b"b"), entry_id=2)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.2)
        (cmd,) = broker.commands(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        self.assertEqual([m.entryId for m in cmd.redeliverUnacknowledgedMessages.message_ids],
                         [1, 2])


class BatchIndexAckTests(SynchronousTestCase):
    def make(self, **conf):
        return ConsumerChunkTests.make(self, **conf)

    def acks(self):
        return [c.ack for c in self.client.broker.commands(T.ACK)]

    def test_off_by_default(self):
        """Without batch_index_ack_enabled partial batch acks stay local."""
        consumer = self.make()
        self.client.broker.message(CONSUMER_ID, batch([b"a", b"b", b"c"]), entry_id=1)
        consumer.acknowledge(self.successResultOf(consumer.receive()))
        self.assertEqual(self.acks(), [])

    def test_individual_ack_sends_ack_set(self):
        """With it on, acking one member sends the remaining indexes as ack_set."""
        consumer = self.make(batch_index_ack_enabled=True)
        self.client.broker.message(CONSUMER_ID, batch([b"a", b"b", b"c"]), entry_id=1)
        first, second, third = [self.successResultOf(consumer.receive()) for _ in range(3)]
        consumer.acknowledge(second)
        (ack,) = self.acks()
        self.assertEqual(list(ack.message_id[0].ack_set), [0b101])
        consumer.acknowledge(first)
        consumer.acknowledge(third)
        acks = self.acks()
        self.assertEqual(list(acks[0].message_id[0].ack_set), [0b100])
        self.assertEqual(list(acks[1].message_id[0].ack_set), [])

    def test_cumulative_partial_batch(self):
        """A cumulative ack inside a batch carries the indexes after it."""
        consumer = self.make(batch_index_ack_enabled=True)
        consumer.sub_type = api.CommandSubscribe.Exclusive
        self.client.broker.message(CONSUMER_ID, batch([b"a", b"b", b"c"]), entry_id=1)
        first = self.successResultOf(consumer.receive())
        consumer.acknowledge_cumulative(first)
        (ack,) = self.acks()
        self.assertEqual((ack.ack_type, list(ack.message_id[0].ack_set)),
                         (api.CommandAck.Cumulative, [0b110]))

    def test_message_ack_set_skips_acked_indexes(self):
        """A redelivered batch with ack_set only yields the indexes still due."""
        consumer = self.make()
        self.client.broker.feed(T(type=T.MESSAGE, message=api.CommandMessage(
            consumer_id=CONSUMER_ID, ack_set=[0b010],
            message_id=api.MessageIdData(ledgerId=1, entryId=1))), batch([b"a", b"b", b"c"]))
        self.assertEqual(consumer.available_messages(), 1)
        self.assertEqual(self.successResultOf(consumer.receive()).data(), b"b")
