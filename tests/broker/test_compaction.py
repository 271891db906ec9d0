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


class AdminCompactionSequenceTests(FeatureCase):
    """
    Found by the HTTP fuzzer: PUT .../compaction after other admin calls on the same topic logged
    ``ManagedLedgerError: mark-delete 1:-1 is after the last entry -1:-1``. The cause was the
    managed ledger's idea of its last entry: a topic terminated before any write, once unloaded,
    reopened with its (empty) only ledger dropped and its last entry computed as -1:-1, behind the
    mark-delete its cursors already held; it now keeps the terminated position, as Pulsar does.
    Each sequence here goes through the admin REST routes and must end with status SUCCESS.
    """

    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self._admin())
        return d

    def _admin(self):
        from pulsar_twisted.broker.admin.service import AdminService
        from pulsar_twisted.web.routing import RouterResource
        from pulsar_twisted.web.site import make_router
        admin = AdminService(self.harness.broker, self.harness.store, self.harness.config, self.clock)
        self.root = RouterResource(make_router(admin, self.harness.config))
        self.path = "/admin/v2/persistent/public/default/" + self.topic.rsplit("/", 1)[1]

    def request(self, method, suffix="", body=b""):
        """``(code, parsed JSON or None)`` of ``method`` on the topic's admin path + ``suffix``."""
        import io
        import json
        from twisted.web import server
        from twisted.web.test.requesthelper import DummyRequest
        raw = (self.path + suffix).encode()
        request = DummyRequest(raw.split(b"/")[1:])
        request.method, request.path, request.uri = method.encode(), raw, raw
        request.content = io.BytesIO(body)
        result = self.root.render(request)
        if result is not server.NOT_DONE_YET:
            request.write(result)
            request.finish()
        for _ in range(20):
            self.harness.pump()
            if request.finished:
                break
            self.clock.advance(0.1)
        self.assertTrue(request.finished, f"{method} {suffix} never answered")
        text = b"".join(request.written)
        return request.responseCode or 200, json.loads(text) if text.strip() else None

    def run_sequence(self, *calls):
        """Each ``(method, suffix)`` answered below 500; then a compaction run, its status."""
        for method, suffix in calls:
            code, body = self.request(method, suffix)
            self.assertLess(code, 500, f"{method} {suffix}: {body}")
        self.assertEqual(self.request("PUT", "/compaction")[0], 204)
        self.harness.pump()
        code, status = self.request("GET", "/compaction")
        self.assertEqual(code, 200)
        self.assertEqual(self.flushLoggedErrors(), [])
        return status

    def test_empty_topic(self):
        """A topic with no message compacts."""
        self.assertEqual(self.run_sequence(("PUT", "")), {"status": "SUCCESS"})

    def test_only_ledger_empty_after_unload(self):
        """After an unload the topic's only ledger is a new, empty one (the old empty one is
        dropped on reopening): compacting succeeds, also a second time after another unload."""
        self.assertEqual(self.run_sequence(("PUT", ""), ("PUT", "/unload")), {"status": "SUCCESS"})
        self.assertEqual(self.run_sequence(("PUT", "/unload")), {"status": "SUCCESS"})

    def test_subscription_reset_unload(self):
        """Create, subscription, reset cursor, unload, then compaction."""
        self.assertEqual(self.run_sequence(
            ("PUT", ""), ("PUT", "/subscription/s"), ("POST", "/subscription/s/resetcursor/0"),
            ("PUT", "/compaction"), ("PUT", "/unload")), {"status": "SUCCESS"})

    def test_terminated_empty_topic_after_unload(self):
        """The fuzzer's sequence: create, compact, terminate, unload, compact. The last message id
        stays the terminated position across the unload."""
        status = self.run_sequence(("PUT", ""), ("PUT", "/compaction"))
        self.assertEqual(status, {"status": "SUCCESS"})
        code, terminated = self.request("POST", "/terminate")
        self.assertEqual(code, 200)
        self.assertEqual(self.run_sequence(("PUT", "/unload")), {"status": "SUCCESS"})
        self.assertEqual(self.request("GET", "/lastMessageId")[1], terminated)

    def test_messages_after_unload(self):
        """A topic with messages (kept by a subscription: without one, and without retention, the
        unload's trim deletes them, as in Pulsar), unloaded, compacts to its latest values."""
        self.assertEqual(self.request("PUT", "")[0], 204)
        self.assertEqual(self.request("PUT", "/subscription/s")[0], 204)
        client = self.harness.client()
        self.create_producer(client)
        for seq, value in ((1, b"a1"), (2, b"a2")):
            client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq,
                                                            num_messages=1)), keyed(seq, "a", value))
        self.assertEqual(len(client.commands(T.SEND_RECEIPT)), 2)
        self.assertEqual(self.run_sequence(("PUT", "/unload")), {"status": "SUCCESS"})
        state = self.harness.broker.compactor.state_of(self.topic_object())
        self.assertEqual(len(state.positions), 1)
