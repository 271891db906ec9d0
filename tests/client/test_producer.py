"""Producer state machine on a fake broker: receipts, resend on reconnect, timeouts, queue, batching."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client import errors
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.client.producer import Producer
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.batch import decode_batch
from pulsar_twisted.wire.compression import decompress
from pulsar_twisted.wire.frames import parse_metadata, split_message
from tests.client.helpers import FakeClient, T


class ProducerCase(SynchronousTestCase):
    def make(self, **conf):
        self.client = FakeClient()
        producer = Producer(self.client, "persistent://public/default/t", 3, **conf)
        d = producer.start()
        (create,) = self.client.broker.commands(T.PRODUCER)
        self.client.broker.producer_success(create.producer.request_id, name="gen-name")
        self.assertIs(self.successResultOf(d), producer)
        return producer

    def sends(self):
        return [(c, m) for c, m in self.client.broker.read() if c.type == T.SEND]


class SendTests(ProducerCase):
    def test_receipt_resolves_message_id(self):
        """send fires with the receipt's (ledger, entry); metadata carries name, key, props."""
        producer = self.make()
        d = producer.send(b"hello", properties={"a": "1"}, partition_key="k", event_timestamp=42)
        ((cmd, part),) = self.sends()
        self.assertEqual(cmd.send.sequence_id, 0)
        metadata = parse_metadata(part, verify=True)
        self.assertEqual(metadata.producer_name, "gen-name")
        self.assertEqual(metadata.partition_key, "k")
        self.assertEqual(metadata.event_time, 42)
        self.assertEqual({kv.key: kv.value for kv in metadata.properties}, {"a": "1"})
        self.assertEqual(split_message(part)[1], b"hello")
        self.assertNoResult(d)
        self.client.broker.receipt(3, 0, ledger_id=5, entry_id=9)
        self.assertEqual(self.successResultOf(d), MessageId(5, 9))

    def test_reconnect_resends_in_order(self):
        """After a lost connection the producer is re-created and pending messages resent in order."""
        producer = self.make()
        ds = [producer.send(b"m%d" % i) for i in range(3)]
        self.client.broker.receipt(3, 0, entry_id=0)
        self.successResultOf(ds[0])
        self.client.broker.lose()
        self.assertEqual(producer.state, "connecting")
        self.client.clock.advance(0.1)   # first backoff step
        (create,) = self.client.broker.commands(T.PRODUCER)
        self.assertEqual(create.producer.producer_name, "gen-name")
        self.client.broker.producer_success(create.producer.request_id, name="gen-name")
        resent = self.sends()
        self.assertEqual([c.send.sequence_id for c, _ in resent], [1, 2])
        self.assertEqual([split_message(m)[1] for _, m in resent], [b"m1", b"m2"])
        self.client.broker.receipt(3, 1, entry_id=1)
        self.client.broker.receipt(3, 2, entry_id=2)
        self.assertEqual([self.successResultOf(d).entry_id for d in ds[1:]], [1, 2])

    def test_close_producer_from_broker_reconnects(self):
        """CLOSE_PRODUCER from the broker re-creates the producer on the same connection."""
        producer = self.make()
        d = producer.send(b"x")
        self.client.broker.feed(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(
            producer_id=3, request_id=0)))
        self.client.clock.advance(0.1)
        (create,) = self.client.broker.commands(T.PRODUCER)
        self.client.broker.producer_success(create.producer.request_id)
        self.assertEqual([c.send.sequence_id for c, _ in self.sends()], [0])
        self.client.broker.receipt(3, 0)
        self.successResultOf(d)

    def test_send_timeout(self):
        """Messages unacknowledged for send_timeout_ms fail with Timeout."""
        producer = self.make(send_timeout_ms=2000)
        d1 = producer.send(b"a")
        self.client.clock.advance(1)
        d2 = producer.send(b"b")
        self.client.clock.advance(0.99)
        self.assertNoResult(d1)
        self.client.clock.advance(0.01)
        self.failureResultOf(d1, errors.Timeout)
        self.failureResultOf(d2, errors.Timeout)
        self.assertEqual(producer.pending_count, 0)

    def test_queue_full_fails(self):
        """Past max_pending_messages, send fails with ProducerQueueIsFull."""
        producer = self.make(max_pending_messages=2)
        producer.send(b"a")
        producer.send(b"b")
        self.failureResultOf(producer.send(b"c"), errors.ProducerQueueIsFull)

    def test_queue_full_blocks(self):
        """With block_if_queue_full the send waits for room and is sent when a receipt frees it."""
        producer = self.make(max_pending_messages=2, block_if_queue_full=True)
        producer.send(b"a")
        producer.send(b"b")
        d = producer.send(b"c")
        self.assertEqual(len(self.sends()), 2)
        self.assertNoResult(d)
        self.client.broker.receipt(3, 0)
        ((cmd, part),) = self.sends()
        self.assertEqual((cmd.send.sequence_id, split_message(part)[1]), (2, b"c"))
        self.client.broker.receipt(3, 1, entry_id=1)
        self.client.broker.receipt(3, 2, entry_id=2)
        self.assertEqual(self.successResultOf(d), MessageId(1, 2))

    def test_closed_producer_refuses(self):
        """send after close fails with AlreadyClosed."""
        producer = self.make()
        d = producer.close()
        (close,) = self.client.broker.commands(T.CLOSE_PRODUCER)
        self.client.broker.success(close.close_producer.request_id)
        self.successResultOf(d)
        self.failureResultOf(producer.send(b"x"), errors.AlreadyClosed)

    def test_message_too_big(self):
        """A message over the broker's max_message_size fails with MessageTooBig."""
        producer = self.make()
        producer.max_message_size = 100
        self.failureResultOf(producer.send(b"x" * 200), errors.MessageTooBig)


class BatchTests(ProducerCase):
    def test_batch_by_count(self):
        """batching_max_messages members go in one SEND; each gets its batch index."""
        producer = self.make(batching_enabled=True, batching_max_messages=3,
                             batching_max_publish_delay_ms=1000)
        ds = [producer.send(b"m%d" % i, properties={"i": str(i)}) for i in range(3)]
        ((cmd, part),) = self.sends()
        self.assertEqual((cmd.send.num_messages, cmd.send.sequence_id,
                          cmd.send.highest_sequence_id), (3, 0, 2))
        metadata = parse_metadata(part)
        self.assertEqual(metadata.num_messages_in_batch, 3)
        members = decode_batch(split_message(part)[1], 3)
        self.assertEqual([p for _, p in members], [b"m0", b"m1", b"m2"])
        self.assertEqual([m.properties[0].value for m, _ in members], ["0", "1", "2"])
        self.client.broker.receipt(3, 0, ledger_id=4, entry_id=7)
        self.assertEqual([self.successResultOf(d) for d in ds],
                         [MessageId(4, 7, i) for i in range(3)])

    def test_batch_by_delay(self):
        """An open batch is sent after batching_max_publish_delay_ms."""
        producer = self.make(batching_enabled=True, batching_max_publish_delay_ms=10)
        producer.send(b"a")
        producer.send(b"b")
        self.assertEqual(self.sends(), [])
        self.client.clock.advance(0.01)
        ((cmd, _),) = self.sends()
        self.assertEqual(cmd.send.num_messages, 2)

    def test_batch_by_bytes(self):
        """A member that would pass batching_max_bytes closes the batch first."""
        producer = self.make(batching_enabled=True, batching_max_bytes=10,
                             batching_max_publish_delay_ms=1000)
        producer.send(b"123456")
        producer.send(b"123456")
        ((cmd, _),) = self.sends()
        self.assertEqual(cmd.send.num_messages, 1)

    def test_key_based_batching(self):
        """Key-based batching puts each key in its own batch entry, keyed in the metadata."""
        producer = self.make(batching_enabled=True, batching_type="key_based",
                             batching_max_publish_delay_ms=1000)
        for key in ("a", "b", "a"):
            producer.send(key.encode(), partition_key=key)
        producer.flush()
        sends = self.sends()
        self.assertEqual([(parse_metadata(m).partition_key, c.send.num_messages) for c, m in sends],
                         [("a", 2), ("b", 1)])

    def test_compressed_batch(self):
        """The batch payload is compressed as a whole; uncompressed_size is its raw length."""
        producer = self.make(batching_enabled=True, batching_max_messages=2,
                             compression_type="ZSTD")
        producer.send(b"x" * 100)
        producer.send(b"y" * 100)
        ((_, part),) = self.sends()
        metadata = parse_metadata(part)
        self.assertEqual(metadata.compression, api.ZSTD)
        raw = decompress(api.ZSTD, split_message(part)[1], metadata.uncompressed_size)
        self.assertEqual([p for _, p in decode_batch(raw, 2)], [b"x" * 100, b"y" * 100])

    def test_unknown_compression_is_invalid_configuration(self):
        """A compression type that does not exist is the client's InvalidConfiguration, as before
        the codec moved to wire/."""
        for bogus in ("BROTLI", 99):
            self.assertRaises(errors.InvalidConfiguration, Producer, FakeClient(), "t", 1,
                              compression_type=bogus)
        self.assertEqual(self.make(compression_type="lz4").compression, api.LZ4)


class ReplicationTargetTests(ProducerCase):
    """``replication_clusters`` / ``disable_replication`` as MessageMetadata.replicate_to."""

    def metadata_of_sends(self):
        return [parse_metadata(part, verify=True) for _, part in self.sends()]

    def test_replication_clusters_on_the_wire(self):
        """replication_clusters becomes replicate_to, in order; without it the field is absent."""
        producer = self.make()
        producer.send(b"a", replication_clusters=["us-east", "eu-west"])
        producer.send(b"b")
        first, second = self.metadata_of_sends()
        self.assertEqual(list(first.replicate_to), ["us-east", "eu-west"])
        self.assertEqual(list(second.replicate_to), [])

    def test_disable_replication_is_local_marker(self):
        """disable_replication=True sends ["__local__"] and wins over replication_clusters (as
        the official client's MessageBuilder)."""
        producer = self.make()
        producer.send(b"a", disable_replication=True)
        producer.send(b"b", replication_clusters=["c2"], disable_replication=True)
        self.assertEqual([list(m.replicate_to) for m in self.metadata_of_sends()],
                         [["__local__"], ["__local__"]])

    def test_empty_list_means_namespace_clusters(self):
        """An empty replication_clusters list is no field at all, as in the official client."""
        producer = self.make()
        producer.send(b"a", replication_clusters=[])
        (metadata,) = self.metadata_of_sends()
        self.assertFalse(metadata.replicate_to)

    def test_string_is_refused(self):
        """A bare string is not a list of clusters (it would become one cluster per letter)."""
        producer = self.make()
        self.assertRaises(ValueError, producer.send, b"a", replication_clusters="c2")

    def test_chunks_carry_replicate_to(self):
        """Every chunk of a chunked message carries the message's replicate_to."""
        producer = self.make(chunking_enabled=True)
        producer.max_message_size = 1024
        producer.send(b"x" * 3000, replication_clusters=["c2"])
        chunks = self.metadata_of_sends()
        self.assertGreater(len(chunks), 1)
        self.assertEqual({tuple(m.replicate_to) for m in chunks}, {("c2",)})

    def test_batch_shares_one_replicate_to(self):
        """Messages with the same replicate_to share a batch, whose entry carries it."""
        producer = self.make(batching_enabled=True, batching_max_messages=3,
                             batching_max_publish_delay_ms=1000)
        for i in range(3):
            producer.send(b"m%d" % i, replication_clusters=["c2", "c3"])
        ((cmd, part),) = self.sends()
        self.assertEqual(cmd.send.num_messages, 3)
        self.assertEqual(list(parse_metadata(part).replicate_to), ["c2", "c3"])

    def test_batch_flushed_when_replicate_to_changes(self):
        """replicate_to is entry-level: a message with another list closes the open batch, so no
        message is replicated by another message's list."""
        producer = self.make(batching_enabled=True, batching_max_publish_delay_ms=1000)
        ds = [producer.send(b"a1", replication_clusters=["c2"]),
              producer.send(b"a2", replication_clusters=["c2"]),
              producer.send(b"b1"),
              producer.send(b"c1", disable_replication=True),
              producer.send(b"c2", disable_replication=True)]
        producer.flush()
        sends = self.sends()
        self.assertEqual(
            [(c.send.sequence_id, c.send.num_messages, list(parse_metadata(m).replicate_to))
             for c, m in sends],
            [(0, 2, ["c2"]), (2, 1, []), (3, 2, ["__local__"])])
        for sequence_id, entry_id in ((0, 0), (2, 1), (3, 2)):
            self.client.broker.receipt(3, sequence_id, entry_id=entry_id)
        self.assertEqual([self.successResultOf(d) for d in ds],
                         [MessageId(1, 0, 0, -1, 2), MessageId(1, 0, 1, -1, 2),
                          MessageId(1, 1, 0, -1, 1), MessageId(1, 2, 0, -1, 2),
                          MessageId(1, 2, 1, -1, 2)])

    def test_key_based_batches_keep_their_replicate_to(self):
        """With key-based batching too, every entry holds one replicate_to."""
        producer = self.make(batching_enabled=True, batching_type="key_based",
                             batching_max_publish_delay_ms=1000)
        producer.send(b"1", partition_key="a", replication_clusters=["c2"])
        producer.send(b"2", partition_key="b", replication_clusters=["c2"])
        producer.send(b"3", partition_key="a", replication_clusters=["c3"])
        producer.flush()
        self.assertEqual(
            [(m.partition_key, list(m.replicate_to)) for m in self.metadata_of_sends()],
            [("a", ["c2"]), ("b", ["c2"]), ("a", ["c3"])])


class SendEntryTests(ProducerCase):
    """``send_entry``: the geo-replicator's send of an entry made on another cluster."""

    def test_chunks_are_marked_as_chunks(self):
        """An entry holding a chunk of a chunked message goes in a SEND with is_chunk (as the
        original producer's did), so that the receiving broker's deduplication keeps every
        chunk of the message; a whole message's SEND has no is_chunk."""
        producer = self.make()
        for chunk_id in range(2):
            metadata = api.MessageMetadata(producer_name="east-1-0", sequence_id=7, publish_time=1,
                                           uuid="east-1-0-7", chunk_id=chunk_id,
                                           num_chunks_from_msg=2, total_chunk_msg_size=6)
            producer.send_entry(metadata, b"abc")
        producer.send_entry(api.MessageMetadata(producer_name="east-1-0", sequence_id=8,
                                                publish_time=1), b"whole")
        sends = self.sends()
        self.assertEqual([c.send.is_chunk for c, _ in sends], [True, True, False])
        self.assertEqual([parse_metadata(p, verify=True).sequence_id for _, p in sends], [7, 7, 8])
