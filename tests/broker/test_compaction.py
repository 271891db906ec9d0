"""Topic compaction: the two-pass compactor, compacted reads, the horizon's durability, the threshold."""

from twisted.trial import unittest

from pulsar_twisted.broker import compaction
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from pulsar_twisted.wire.batch import encode_batch, single_metadata
from pulsar_twisted.wire.compression import LZ4, compress
from tests.broker.messaging import FeatureCase, Sub, T, messages


def keyed(seq, key, value):
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
    if key is not None:
        meta.partition_key = key
    return frames.encode_message(meta, value)


def batch(seq, members, codec=api.NONE):
    """A batch entry of ``(key, value)`` members, compressed with ``codec``."""
    payload = encode_batch([(single_metadata(v, partition_key=k), v) for k, v in members])
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq,
                               num_messages_in_batch=len(members), compression=codec,
                               uncompressed_size=len(payload))
    return frames.encode_message(meta, compress(codec, payload))


class CompactionTests(FeatureCase):
    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self._producer())
        return d

    def _producer(self):
        self.client = self.harness.client()
        self.create_producer(self.client)
        self.seq = 0

    def publish(self, data, count=1):
        self.seq += 1
        self.client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=self.seq,
                                                             num_messages=count)), data)
        self.harness.pump()
        return self.client.commands()

    def compact(self):
        d = self.harness.broker.compactor.compact(self.topic_object())
        self.harness.pump()
        return self.successResultOf(d)

    def read_compacted(self, consumer_id=1, read_compacted=True):
        """Values a fresh compacted reader receives, as (key, payload) (batches expanded)."""
        client = self.harness.client()
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=self.topic, subscription=f"reader-{consumer_id}", subType=Sub.Exclusive,
            consumer_id=consumer_id, request_id=5, durable=False, read_compacted=read_compacted,
            start_message_id=api.MessageIdData(ledgerId=(1 << 64) - 1, entryId=(1 << 64) - 1))))
        client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=1000)))
        out = []
        for _, data in messages(client.received()):
            metadata = frames.parse_metadata(data)
            if metadata.HasField("num_messages_in_batch"):
                for single, value in compaction._decompressed_batch(metadata, data):
                    out.append((single.partition_key, value))
            else:
                out.append((metadata.partition_key, frames.split_message(data)[1]))
        return out

    def test_latest_value_per_key(self):
        """Only the latest value of each key remains; tombstones and keyless messages go."""
        self.publish(keyed(1, "a", b"a1"))
        self.publish(keyed(2, "b", b"b1"))
        self.publish(keyed(3, "a", b"a2"))
        self.publish(keyed(4, "c", b"c1"))
        self.publish(keyed(5, "c", b""))  # tombstone
        self.publish(keyed(6, None, b"nokey"))
        self.compact()
        self.assertEqual(self.read_compacted(), [("b", b"b1"), ("a", b"a2")])
        # A plain reader still sees everything.
        self.assertEqual(len(self.read_compacted(2, read_compacted=False)), 6)

    def test_batches_compressed_and_rebuilt(self):
        """Batch members are compacted one by one, through compression."""
        self.publish(batch(1, [("a", b"a1"), ("b", b"b1"), ("c", b"c1")], LZ4), count=3)
        self.publish(keyed(2, "a", b"a2"))
        self.compact()
        self.assertEqual(self.read_compacted(), [("b", b"b1"), ("c", b"c1"), ("a", b"a2")])

    def test_live_messages_after_horizon(self):
        """A compacted reader reads the compacted ledger, then what came after the horizon."""
        self.publish(keyed(1, "a", b"a1"))
        self.publish(keyed(2, "a", b"a2"))
        self.compact()
        self.publish(keyed(3, "b", b"b1"))
        self.assertEqual(self.read_compacted(), [("a", b"a2"), ("b", b"b1")])

    def test_second_compaction_builds_on_first(self):
        """The second run starts from the first's ledger; the old compacted ledger is deleted."""
        self.publish(keyed(1, "a", b"a1"))
        self.publish(keyed(2, "b", b"b1"))
        self.compact()
        first = self.harness.broker.compactor.state_of(self.topic_object()).ledger_id
        self.publish(keyed(3, "a", b"a2"))
        self.publish(keyed(4, "b", b""))
        self.compact()
        self.assertEqual(self.read_compacted(), [("a", b"a2")])
        self.assertNotIn(first, self.harness.ledger_client.ledger_ids())

    def test_horizon_survives_restart(self):
        """The horizon and ledger are the __compaction cursor's mark-delete and property."""
        self.publish(keyed(1, "a", b"a1"))
        self.publish(keyed(2, "a", b"a2"))
        horizon = self.compact()
        d = self.restart()
        self.harness.pump()
        self.successResultOf(d)
        self.client = self.harness.client()
        self.create_producer(self.client)
        self.assertEqual(self.read_compacted(), [("a", b"a2")])
        state = self.harness.broker.compactor.state_of(self.topic_object())
        self.assertEqual(state.horizon, horizon)

    def test_status(self):
        compactor = self.harness.broker.compactor
        self.assertEqual(compactor.status(self.topic), {"status": "NOT_RUN"})
        self.publish(keyed(1, "a", b"a1"))
        self.compact()
        self.assertEqual(compactor.status(self.topic), {"status": "SUCCESS"})

    def test_shared_read_compacted_refused(self):
        client = self.harness.client()
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=self.topic, subscription="s", subType=Sub.Shared, consumer_id=1, request_id=5,
            read_compacted=True)))
        [error] = client.commands()
        self.assertEqual(error.error.error, api.NotAllowedError)

    def test_threshold_triggers(self):
        """Over brokerServiceCompactionThresholdInBytes, the monitor compacts on its interval."""
        self.harness.config.brokerServiceCompactionThresholdInBytes = 10
        self.harness.config.brokerServiceCompactionMonitorIntervalInSeconds = 60
        compactor = self.harness.broker.compactor
        compactor.topic_loaded(self.topic_object())
        self.publish(keyed(1, "a", b"a1" * 20))
        self.clock.advance(59)
        self.assertEqual(compactor.status(self.topic)["status"], "NOT_RUN")
        self.clock.advance(1)
        self.harness.pump()
        self.assertEqual(compactor.status(self.topic)["status"], "SUCCESS")

    def test_entry_codec(self):
        raw = compaction.encode_compacted_entry((3, 4), b"data")
        self.assertEqual(compaction.decode_compacted_entry(raw), ((3, 4), b"data"))
        self.assertRaises(ValueError, compaction.decode_compacted_entry, raw[:-1])


class CompactionInterruptedTests(unittest.TestCase):
    """Found by schemathesis: PUT .../compaction then PUT .../unload logged a traceback."""

    def test_unload_during_compaction_is_a_warning(self):
        from twisted.python.failure import Failure
        from twisted.logger import LogLevel, capturedLogs

        from pulsar_twisted.broker.compaction import Compactor
        from pulsar_twisted.mledger.interfaces import ManagedLedgerClosedError

        compactor = Compactor.__new__(Compactor)
        compactor._running = {"t": None}
        compactor._status = {}

        class Topic:
            name = "t"

        with capturedLogs() as events:
            result = compactor._finished(Failure(ManagedLedgerClosedError("cursor __compaction is closed")),
                                         Topic())
        result.trap(ManagedLedgerClosedError)
        self.assertEqual(compactor.status("t")["status"], "ERROR")
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])
        self.assertNotIn("log_failure", events[0])
