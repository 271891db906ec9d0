"""
Tests for the embedded metadata store: the shared contract (memory and durable), the on-disk format,
recovery from damaged files, group commit and listener ordering.

The durable store writes through a real worker thread, so those tests run on the real reactor.
"""

import os
import threading

from hypothesis import given, settings, strategies as st
from twisted.internet import reactor
from twisted.internet.defer import gatherResults
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from pulsar_twisted.metadata.embedded import log_format as embedded
from pulsar_twisted.metadata.embedded.log_format import (
    HEADER_SIZE,
    LOG_NAME,
    SNAPSHOT_NAME,
    CorruptStoreError,
    decode_records,
    encode_delete,
    encode_record,
    encode_set,
)
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore, StoreFailedError, StoreNotStartedError
from pulsar_twisted.metadata.interfaces import MetadataStoreError, Notification
from pulsar_twisted.testing.metadata_mixin import MetadataStoreTestsMixin, NotificationRecorder


class MemoryStoreContractTests(MetadataStoreTestsMixin, TestCase):
    """The contract against the memory-only store on a fake clock."""

    def make_store(self):
        store = EmbeddedMetadataStore(None, Clock())
        self.addCleanup(store.close)
        return store

    def make_other_session(self, store):
        session = store.new_session()
        self.addCleanup(session.close)
        return session


class DurableStoreContractTests(MetadataStoreTestsMixin, TestCase):
    """The contract against the durable store (real files, real worker thread)."""

    async def make_store(self):
        store = EmbeddedMetadataStore(self.mktemp(), reactor)
        self.addCleanup(store.close)
        await store.start()
        return store

    def make_other_session(self, store):
        session = store.new_session()
        self.addCleanup(session.close)
        return session


class MemoryStoreTests(SynchronousTestCase):
    """Behaviour of the memory store that the fake clock lets us check synchronously."""

    def setUp(self):
        self.clock = Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)

    def test_times_come_from_the_reactor(self):
        """created_ms and modified_ms are the injected clock's time in milliseconds."""
        self.clock.advance(12.5)
        created = self.successResultOf(self.store.put("/t", b"1"))
        self.clock.advance(1)
        modified = self.successResultOf(self.store.put("/t", b"2"))
        self.assertEqual((created.created_ms, created.modified_ms), (12500, 12500))
        self.assertEqual((modified.created_ms, modified.modified_ms), (12500, 13500))

    def test_listener_writes_are_ordered(self):
        """A write made inside a listener is announced to every listener after the current change."""
        first, second = [], []

        def writer(n):
            first.append(n)
            if n == Notification("created", "/a"):
                self.store.put("/b", b"")

        self.store.register_listener(writer)
        self.store.register_listener(second.append)
        self.successResultOf(self.store.put("/a", b""))
        expected = [Notification("created", "/a"), Notification("children", "/"),
                    Notification("created", "/b"), Notification("children", "/")]
        self.assertEqual(first, expected)
        self.assertEqual(second, expected)

    def test_failing_listener_does_not_stop_others(self):
        """A listener that raises is logged; the others still hear the change."""
        def broken(n):
            raise RuntimeError("listener bug")

        recorder = NotificationRecorder()
        self.store.register_listener(broken)
        self.store.register_listener(recorder)
        self.successResultOf(self.store.put("/x", b""))
        self.assertEqual(recorder.kinds_for("/x"), ["created"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)  # created, children

    def test_closed_session_listener_dropped(self):
        """A session's listeners stop hearing changes once it closes."""
        session = self.store.new_session()
        recorder = NotificationRecorder()
        session.register_listener(recorder)
        self.successResultOf(session.close())
        self.successResultOf(self.store.put("/y", b""))
        self.assertEqual(recorder.events, [])

    def test_owner_close_ends_every_session(self):
        """Closing the store that owns the tree removes every session's ephemeral nodes."""
        session = self.store.new_session()
        self.successResultOf(session.put("/e", b"", ephemeral=True))
        recorder = NotificationRecorder()
        self.store.register_listener(recorder)
        self.successResultOf(self.store.close())
        self.assertEqual(recorder.kinds_for("/e"), ["deleted"])
        self.assertIsInstance(self.failureResultOf(session.get("/e")).value, MetadataStoreError)

    def test_bad_arguments_fail_as_deferreds(self):
        """Bad paths and values come back as failed Deferreds."""
        for d in [self.store.put("relative", b""), self.store.put("/trailing/", b""),
                  self.store.put("/a//b", b""), self.store.get("nope"), self.store.put("/s", "str"),
                  self.store.delete("/"), self.store.put("/q", b"", expected_version=2, sequential=True)]:
            self.failureResultOf(d, ValueError, TypeError)

    def test_root(self):
        """The root always exists, can be written and cannot be deleted."""
        value, stat = self.successResultOf(self.store.get("/"))
        self.assertEqual((value, stat.version), (b"", 0))
        self.assertEqual(self.successResultOf(self.store.put("/", b"r")).version, 1)
        self.failureResultOf(self.store.delete_recursive("/"), ValueError)


class DurableStoreTests(TestCase):
    """Durability, recovery and group commit of the durable store."""

    def setUp(self):
        self.data_dir = self.mktemp()

    async def open(self, **kwargs):
        store = EmbeddedMetadataStore(self.data_dir, reactor, **kwargs)
        self.addCleanup(store.close)
        await store.start()
        return store

    def crash(self, store):
        """Drop the store as a dying process would: no close, no flush, no snapshot."""
        store._abandon()

    def log_path(self):
        return os.path.join(self.data_dir, LOG_NAME)

    async def test_reopen_after_crash(self):
        """Every write whose Deferred fired is there, value and version, after a crash and reopen."""
        store = await self.open()
        await store.put("/a/b", b"one")
        await store.put("/a/b", b"two")
        await store.put("/c", b"gone")
        await store.delete("/c")
        self.crash(store)
        store = await self.open()
        value, stat = await store.get("/a/b")
        self.assertEqual((value, stat.version), (b"two", 1))
        self.assertIsNone(await store.exists("/c"))
        self.assertEqual(await store.get_children("/"), ["a"])

    async def test_reopen_after_close(self):
        """A clean close leaves a snapshot and an empty log, and everything reloads."""
        store = await self.open()
        for i in range(10):
            await store.put(f"/n/{i}", b"%d" % i)
        await store.close()
        self.assertEqual(os.path.getsize(self.log_path()), HEADER_SIZE)
        store = await self.open()
        self.assertEqual(len(await store.get_children("/n")), 10)

    async def test_requires_start(self):
        """A durable store refuses work before start()."""
        store = EmbeddedMetadataStore(self.data_dir, reactor)
        self.addCleanup(store.close)
        await self.assertFailure(store.put("/x", b""), StoreNotStartedError)

    async def test_data_dir_locked(self):
        """A second store cannot open a data directory in use."""
        await self.open()
        other = EmbeddedMetadataStore(self.data_dir, reactor)
        await self.assertFailure(other.start(), MetadataStoreError)

    async def test_torn_tail_cut(self):
        """A record torn mid-write is cut; everything before it loads and new writes follow it."""
        store = await self.open()
        await store.put("/k/1", b"a")
        await store.put("/k/2", b"b")
        size_before_last = os.path.getsize(self.log_path())
        await store.put("/k/3", b"c" * 100)
        self.crash(store)
        with open(self.log_path(), "r+b") as f:
            f.truncate(size_before_last + 20)
        store = await self.open()
        self.assertEqual(await store.get_children("/k"), ["1", "2"])
        self.assertEqual(os.path.getsize(self.log_path()), size_before_last)
        await store.put("/k/4", b"d")
        self.crash(store)
        store = await self.open()
        self.assertEqual(await store.get_children("/k"), ["1", "2", "4"])

    async def test_put_all_survives_or_vanishes_whole(self):
        """A put_all is one log record: after a crash both writes are there, or (torn anywhere
        in it, even past the first write's bytes) neither is."""
        store = await self.open()
        await store.put("/g/ml", b"v0")
        size_before = os.path.getsize(self.log_path())
        await store.put_all([("/g/ledger", b"L" * 200, -1), ("/g/ml", b"v1" * 100, 0)])
        size_after = os.path.getsize(self.log_path())
        self.crash(store)
        store = await self.open()
        self.assertEqual((await store.get("/g/ledger"))[0], b"L" * 200)
        self.assertEqual((await store.get("/g/ml"))[1].version, 1)
        self.crash(store)
        with open(self.log_path(), "r+b") as f:
            f.truncate(size_after - 10)    # the ledger's op whole, the node's update torn
        store = await self.open()
        self.assertIsNone(await store.get("/g/ledger"))
        self.assertEqual(await store.get("/g/ml"), (b"v0", (await store.get("/g/ml"))[1]))
        self.assertEqual((await store.get("/g/ml"))[1].version, 0)
        self.assertEqual(os.path.getsize(self.log_path()), size_before)

    async def test_junk_tail_cut(self):
        """Junk after the last record (bad length or CRC) is cut, and new writes survive."""
        store = await self.open()
        await store.put("/j", b"x")
        self.crash(store)
        with open(self.log_path(), "ab") as f:
            f.write(b"\x00\x00\x00\x10\xde\xad\xbe\xef" + b"junk" * 4)
        store = await self.open()
        await store.put("/j2", b"y")
        self.crash(store)
        store = await self.open()
        self.assertEqual((await store.get("/j"))[0], b"x")
        self.assertEqual((await store.get("/j2"))[0], b"y")

    async def test_crc_bad_record_cut(self):
        """A record whose payload was damaged ends the replay there."""
        store = await self.open()
        await store.put("/c1", b"good")
        size = os.path.getsize(self.log_path())
        await store.put("/c2", b"will be damaged")
        await store.put("/c3", b"after the damage")
        self.crash(store)
        with open(self.log_path(), "r+b") as f:
            f.seek(size + 12)
            f.write(b"\xff")
        store = await self.open()
        self.assertIsNotNone(await store.exists("/c1"))
        self.assertIsNone(await store.exists("/c2"))
        self.assertIsNone(await store.exists("/c3"))

    async def test_empty_and_header_only_log(self):
        """An empty log file, or one holding only a torn header, opens as an empty store."""
        os.makedirs(self.data_dir)
        for content in [b"", b"PTM"]:
            with open(self.log_path(), "wb") as f:
                f.write(content)
            store = await self.open()
            self.assertEqual(await store.get_children("/"), [])
            await store.put("/ok", b"")
            await store.close()
            os.remove(os.path.join(self.data_dir, SNAPSHOT_NAME))

    async def test_foreign_log_refused(self):
        """A log with someone else's magic is not overwritten: start fails CorruptStoreError."""
        os.makedirs(self.data_dir)
        with open(self.log_path(), "wb") as f:
            f.write(b"NOTOURS!" + b"\x00" * 32)
        store = EmbeddedMetadataStore(self.data_dir, reactor)
        await self.assertFailure(store.start(), CorruptStoreError)
        with open(self.log_path(), "rb") as f:
            self.assertTrue(f.read().startswith(b"NOTOURS!"))

    async def test_damaged_snapshot_refused(self):
        """A damaged snapshot stops the start rather than loading part of the tree."""
        store = await self.open()
        await store.put("/s", b"v")
        await store.close()
        snap = os.path.join(self.data_dir, SNAPSHOT_NAME)
        with open(snap, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
        store = EmbeddedMetadataStore(self.data_dir, reactor)
        await self.assertFailure(store.start(), CorruptStoreError)

    async def test_snapshot_then_log_replay(self):
        """State comes back from the snapshot plus the log written after it."""
        store = await self.open()
        await store.put("/x", b"1")
        await store.put("/y/z", b"1")
        await store.snapshot()
        self.assertEqual(os.path.getsize(self.log_path()), HEADER_SIZE)
        await store.put("/x", b"2")
        await store.delete("/y/z")
        await store.put("/w", b"new")
        self.crash(store)
        store = await self.open()
        value, stat = await store.get("/x")
        self.assertEqual((value, stat.version), (b"2", 1))
        self.assertIsNone(await store.exists("/y/z"))
        self.assertIsNotNone(await store.exists("/y"))
        self.assertEqual((await store.get("/w"))[0], b"new")

    async def test_log_older_than_snapshot_skipped(self):
        """Records a snapshot already covers are not replayed (a crash before the log was emptied)."""
        store = await self.open()
        await store.put("/v", b"old")
        await store.put("/v", b"older is gone")
        with open(self.log_path(), "rb") as f:
            stale_log = f.read()
        await store.put("/v", b"newest")
        await store.snapshot()
        self.crash(store)
        with open(self.log_path(), "wb") as f:
            f.write(stale_log)
        store = await self.open()
        value, stat = await store.get("/v")
        self.assertEqual((value, stat.version), (b"newest", 2))

    async def test_automatic_snapshot(self):
        """Once the log passes snapshot_log_bytes a snapshot replaces it."""
        store = await self.open(snapshot_log_bytes=2000)
        for i in range(50):
            await store.put(f"/auto/{i}", b"x" * 100)
        self.assertTrue(os.path.exists(os.path.join(self.data_dir, SNAPSHOT_NAME)))
        self.assertLess(os.path.getsize(self.log_path()), 2000)
        self.crash(store)
        store = await self.open()
        self.assertEqual(len(await store.get_children("/auto")), 50)

    async def test_ephemeral_not_restored(self):
        """Ephemeral nodes do not survive a restart; sequential counters do."""
        store = await self.open()
        first = await store.put("/seqs/n-", b"", ephemeral=True, sequential=True)
        await store.put("/kept", b"")
        self.crash(store)
        store = await self.open()
        self.assertIsNone(await store.exists(first.path))
        self.assertIsNotNone(await store.exists("/kept"))
        second = await store.put("/seqs/n-", b"", ephemeral=True, sequential=True)
        self.assertGreater(second.path, first.path)

    async def test_group_commit(self):
        """Many puts in one tick are covered by one fsync, and all fire."""
        store = await self.open()
        syncs = []
        real_fsync = embedded._fsync
        self.patch(embedded, "_fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
        stats = await gatherResults([store.put(f"/g/{i}", b"v") for i in range(200)])
        self.assertEqual(len(stats), 200)
        self.assertEqual(len(syncs), 1)
        self.crash(store)
        store = await self.open()
        self.assertEqual(len(await store.get_children("/g")), 200)

    async def test_next_batch_goes_before_the_callbacks(self):
        """What came while a batch was written goes to the worker before that batch's callbacks
        run (they are the callers' whole continuation; the disk need not wait for them), and
        the Deferreds still fire in write order."""
        from twisted.internet.task import deferLater
        store = await self.open()
        core = store._core
        first = store.put("/nb/a", b"a")
        await deferLater(reactor, 0, lambda: None)     # the first batch is with the worker
        self.assertTrue(core.in_flight)
        second = store.put("/nb/b", b"b")
        seen, order = [], []
        first.addCallback(lambda _: (seen.append((core.in_flight, list(core.pending))),
                                     order.append("a")))
        second.addCallback(lambda _: order.append("b"))
        await gatherResults([first, second])
        self.assertEqual(seen, [(True, [])])
        self.assertEqual(order, ["a", "b"])

    async def test_writes_visible_before_durable(self):
        """A read right after a put sees it though the put's Deferred has not fired yet."""
        store = await self.open()
        recorder = NotificationRecorder()
        store.register_listener(recorder)
        d = store.put("/soon", b"v")
        self.assertNoResult(d)
        self.assertEqual(self.successResultOf(store.get("/soon"))[0], b"v")
        self.assertEqual(recorder.events, [], "listeners hear of a change only once it is durable")
        await d
        self.assertEqual(recorder.kinds_for("/soon"), ["created"])

    async def test_deferreds_fire_in_order(self):
        """Write Deferreds fire in the order of the writes, ephemeral ones included."""
        store = await self.open()
        order = []
        ds = []
        for i in range(20):
            d = store.put(f"/o/{i}", b"", ephemeral=(i % 3 == 0))
            d.addCallback(lambda _, i=i: order.append(i))
            ds.append(d)
        await gatherResults(ds)
        self.assertEqual(order, list(range(20)))

    async def test_fsync_not_in_reactor_thread(self):
        """fsync runs in the worker thread, never in the reactor thread."""
        store = await self.open()
        threads = []
        real_fsync = embedded._fsync
        self.patch(embedded, "_fsync", lambda fd: (threads.append(threading.current_thread()), real_fsync(fd)))
        await store.put("/t", b"")
        self.assertTrue(threads)
        self.assertNotIn(threading.main_thread(), threads)

    async def test_write_failure_stops_writes(self):
        """A failed disk write fails that put and every later one."""
        store = await self.open()

        def broken(fd, data):
            raise OSError(28, "No space left on device")

        self.patch(embedded, "_write_all", broken)
        await self.assertFailure(store.put("/f", b""), StoreFailedError)
        await self.assertFailure(store.put("/g", b""), StoreFailedError)
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        # Refused before the tree changes: a later write is never read back (it was never logged),
        # and neither are a group write's or a delete's.
        self.assertIsNone(await store.get("/g"))
        await store.put_all([("/h", b"", -1)]).addErrback(lambda f: f.trap(StoreFailedError))
        self.assertIsNone(await store.get("/h"))


class CodecTests(SynchronousTestCase):
    """The log record framing."""

    ops = st.lists(st.one_of(
        st.builds(encode_set, st.text(min_size=1).map(lambda s: "/" + s.replace("\x00", "")),
                  st.binary(), st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62),
                  st.integers(0, 2**62)),
        st.builds(encode_delete, st.text(min_size=1).map(lambda s: "/" + s))), max_size=5)

    @settings(max_examples=50)
    @given(st.lists(ops, min_size=1, max_size=5), st.data())
    def test_round_trip_and_truncation(self, transactions, data):
        """Records decode to what was encoded; a truncated stream yields exactly the whole records."""
        records = [encode_record(i + 1, ops) for i, ops in enumerate(transactions)]
        stream = b"".join(records)
        decoded = list(decode_records(stream, 0))
        self.assertEqual([txid for txid, _, _ in decoded], list(range(1, len(records) + 1)))
        self.assertEqual(decoded[-1][2], len(stream))
        for (_, ops, _), encoded in zip(decoded, transactions):
            self.assertEqual(len(ops), len(encoded))
        cut = data.draw(st.integers(0, len(stream) - 1))
        whole = [end for _, _, end in decode_records(stream[:cut], 0)]
        ends = [sum(len(r) for r in records[:i + 1]) for i in range(len(records))]
        self.assertEqual(whole, [e for e in ends if e <= cut])

    def test_fixed_vector(self):
        """The framing is length, CRC32C, txid, then the operations."""
        record = encode_record(1, [encode_delete("/a")])
        self.assertEqual(record.hex(), "0000000d" + record[4:8].hex() + "0000000000000001" + "44" + "0002" + "2f61")
        self.assertEqual(list(decode_records(record, 0)), [(1, [("D", "/a")], len(record))])
