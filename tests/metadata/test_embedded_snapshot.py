"""
The embedded store's snapshot does not block the reactor: a consistent cut walked in slices while
writes go on to the log, installed by the worker; interrupted anywhere, the store recovers.
"""

import os

from twisted.internet import reactor, task
from twisted.trial.unittest import TestCase

from pulsar_twisted.metadata.embedded import log_format, store as store_module
from pulsar_twisted.metadata.embedded.log_format import HEADER_SIZE, LOG_NAME, SNAPSHOT_NAME, decode_records
from pulsar_twisted.metadata.embedded.store import (
    EmbeddedMetadataStore,
    SnapshotFailedError,
    StoreFailedError,
)
from pulsar_twisted.metadata.embedded.tree import Tree


class SlicedSnapshotTests(TestCase):

    def setUp(self):
        self.data_dir = self.mktemp()
        self.patch(store_module, "SNAPSHOT_SLICE_NODES", 10)

    async def open(self, **kwargs):
        store = EmbeddedMetadataStore(self.data_dir, reactor, **kwargs)
        self.addCleanup(store.close)
        await store.start()
        return store

    async def filled(self, n=100):
        store = await self.open()
        for i in range(n):
            await store.put(f"/t/n{i}", b"v%d" % i)
        return store

    def snapshot_tree(self) -> Tree:
        with open(os.path.join(self.data_dir, SNAPSHOT_NAME), "rb") as f:
            data = f.read()
        [(txid, ops, _)] = list(decode_records(data, HEADER_SIZE))
        tree = Tree()
        tree.apply(ops)
        tree.txid = txid
        return tree

    async def cut_open(self, store):
        """Wait until the snapshot's cut is open (its walk under way)."""
        for _ in range(100):
            if store._core.snapshot is not None:
                return
            await task.deferLater(reactor, 0, lambda: None)
        self.fail("no snapshot started")

    def hold_walk(self):
        """Keep the snapshot's walk from advancing until the returned function is called."""
        held = [True]
        real = store_module._Core._snapshot_slice

        def slice_(core):
            if held:
                core.reactor.callLater(0.001, slice_, core)
            else:
                real(core)
        self.patch(store_module._Core, "_snapshot_slice", slice_)
        return held.clear

    def watch_install(self) -> list:
        """A list that is non-empty while the worker installs a snapshot (``_Core._install``)."""
        installing = []
        real_install = store_module._Core._install

        def install(core, *args):
            installing.append(True)
            try:
                return real_install(core, *args)
            finally:
                installing.clear()
        self.patch(store_module._Core, "_install", install)
        return installing

    def count_slices(self):
        calls = []
        real = store_module._Core._snapshot_slice

        def counting(core):
            calls.append(core.snapshot.position if core.snapshot else None)
            return real(core)
        self.patch(store_module._Core, "_snapshot_slice", counting)
        return calls

    async def test_walk_takes_many_reactor_turns(self):
        """100 nodes at 10 a slice: the walk is cut into reactor turns, not one callback."""
        store = await self.filled()
        calls = self.count_slices()
        await store.snapshot()
        self.assertGreaterEqual(len(calls), 10)
        self.assertEqual(os.path.getsize(os.path.join(self.data_dir, LOG_NAME)), HEADER_SIZE)

    async def test_a_slice_also_ends_on_time(self):
        """However many nodes a slice may take, it ends once SNAPSHOT_SLICE_SECONDS are spent
        (checked every SNAPSHOT_SLICE_STEP nodes); the snapshot still holds every node."""
        self.patch(store_module, "SNAPSHOT_SLICE_NODES", 100_000)
        self.patch(store_module, "SNAPSHOT_SLICE_SECONDS", 0.0)
        self.patch(store_module, "SNAPSHOT_SLICE_STEP", 7)
        store = await self.filled()
        calls = self.count_slices()
        await store.snapshot()
        self.assertGreaterEqual(len(calls), 100 // 7)
        self.assertEqual({f"/t/n{i}" for i in range(100)} - self.snapshot_tree().nodes.keys(), set())

    async def test_writes_during_the_walk_stay_out_of_the_snapshot_and_in_the_log(self):
        """The snapshot is the tree at the cut; changes made meanwhile are kept in the log."""
        store = await self.filled()
        release = self.hold_walk()
        done = store.snapshot()
        # The cut is open (the walk has not finished): change nodes it has and has not walked yet.
        await self.cut_open(store)
        writes = [store.put("/t/n0", b"changed"), store.put("/t/n99", b"changed"),
                  store.delete("/t/n50"), store.put("/t/new", b"x"),
                  store.put("/t/seq-", b"", sequential=True)]
        for d in writes:
            await d
        release()
        await done
        at_cut = self.snapshot_tree()
        self.assertEqual(at_cut.nodes["/t/n0"].value, b"v0")
        self.assertEqual(at_cut.nodes["/t/n99"].value, b"v99")
        self.assertIn("/t/n50", at_cut.nodes)
        self.assertNotIn("/t/new", at_cut.nodes)
        self.assertEqual(at_cut.nodes["/t"].seq, 0)
        self.assertGreater(os.path.getsize(os.path.join(self.data_dir, LOG_NAME)), HEADER_SIZE)
        store._abandon()
        store = await self.open()
        self.assertEqual((await store.get("/t/n0"))[0], b"changed")
        self.assertEqual((await store.get("/t/n99"))[0], b"changed")
        self.assertIsNone(await store.exists("/t/n50"))
        self.assertEqual((await store.get("/t/new"))[0], b"x")
        self.assertEqual(len(await store.get_children("/t")), 101)
        seq = await store.put("/t/seq-", b"", sequential=True)
        self.assertEqual(seq.path, "/t/seq-0000000001")

    async def test_the_walk_is_written_as_it_goes(self):
        """Each slice is on disk (in the .tmp file) before the next is encoded: what the store holds
        of a snapshot in memory is a slice, not the whole tree."""
        store = await self.filled()
        sizes = []
        real = store_module._Core._snapshot_append

        def append(core, snap, ops):
            error = real(core, snap, ops)
            sizes.append(os.path.getsize(os.path.join(self.data_dir, SNAPSHOT_NAME + ".tmp")))
            return error
        self.patch(store_module._Core, "_snapshot_append", append)
        await store.snapshot()
        self.assertGreaterEqual(len(sizes), 10)
        self.assertEqual(sizes, sorted(set(sizes)))
        self.assertEqual(sizes[-1], os.path.getsize(os.path.join(self.data_dir, SNAPSHOT_NAME)))
        self.assertFalse(os.path.exists(os.path.join(self.data_dir, SNAPSHOT_NAME + ".tmp")))
        self.assertEqual({f"/t/n{i}" for i in range(100)} - self.snapshot_tree().nodes.keys(), set())

    async def test_a_slice_the_disk_refuses(self):
        """The disk full in the middle of the walk: the snapshot fails and its .tmp file is removed;
        the store takes writes on, and every write is there after a restart."""
        store = await self.filled()
        await store.snapshot()
        before = os.path.getsize(os.path.join(self.data_dir, SNAPSHOT_NAME))
        await store.put("/t/after", b"a")
        appends = []
        real = log_format.SnapshotWriter.append

        def append(writer, ops):
            appends.append(len(ops))
            if len(appends) == 3:
                raise OSError(28, "No space left on device (injected)")
            return real(writer, ops)
        self.patch(log_format.SnapshotWriter, "append", append)
        await self.assertFailure(store.snapshot(), SnapshotFailedError)
        self.assertEqual(len(appends), 3)
        self.assertEqual(os.path.getsize(os.path.join(self.data_dir, SNAPSHOT_NAME)), before)
        await store.put("/t/later", b"l")     # (the worker removed the file before this batch)
        self.assertFalse(os.path.exists(os.path.join(self.data_dir, SNAPSHOT_NAME + ".tmp")))
        store._abandon()
        store = await self.open()
        self.assertEqual(len(await store.get_children("/t")), 102)
        self.assertEqual((await store.get("/t/after"))[0], b"a")

    async def test_automatic_snapshot_under_writes(self):
        """The size threshold's snapshot runs while writes go on; everything reloads."""
        store = await self.open(snapshot_log_bytes=3000)
        pending = [store.put(f"/auto/{i}", b"x" * 50) for i in range(200)]
        for d in pending:
            await d
        await store._core.snapshot_settled()
        self.assertLess(store._core.log_size, 3000 + 200 * 100)
        self.assertEqual(store._core.log_size, os.path.getsize(os.path.join(self.data_dir, LOG_NAME)))
        store._abandon()
        store = await self.open()
        self.assertEqual(len(await store.get_children("/auto")), 200)

    async def crash_at(self, name, nth, where=None, store_fails=False):
        """Make the ``nth`` call of ``where.<name>`` (``os`` by default) made while the worker installs a snapshot fail
        (a write made during its walk is in the log by then), crash, reopen: every acknowledged
        write is there."""
        store = await self.filled(100)
        calls, installing = [], self.watch_install()
        where = os if where is None else where
        real = getattr(where, name)

        def failing(*args, **kwargs):
            if installing:
                calls.append(args)
                if len(calls) == nth:
                    raise OSError(5, "EIO (injected)")
            return real(*args, **kwargs)
        self.patch(where, name, failing)
        release = self.hold_walk()
        done = store.snapshot()
        await self.cut_open(store)
        await store.put("/t/during", b"d")      # in the log before the snapshot is installed
        release()
        await self.assertFailure(done, SnapshotFailedError)
        self.assertEqual(len(calls), nth)
        # Past the log's rename the store can no longer promise durability: it refuses writes.
        self.assertEqual(store._core.failure is not None, store_fails)
        store._abandon()
        store = await self.open()
        self.assertEqual(len(await store.get_children("/t")), 101)
        self.assertEqual((await store.get("/t/during"))[0], b"d")
        self.assertEqual((await store.get("/t/n7"))[0], b"v7")

    async def test_interrupted_writing_the_snapshot(self):
        """The snapshot's data sync fails: old snapshot and whole log."""
        await self.crash_at("_fsync", 1, log_format)

    async def test_interrupted_before_the_snapshot_rename(self):
        await self.crash_at("replace", 1)

    async def test_interrupted_after_the_snapshot_rename(self):
        """Rename not yet durable: either snapshot, with the whole log (covered records skipped)."""
        await self.crash_at("fsync", 1)

    async def test_interrupted_writing_the_kept_log(self):
        """New snapshot, the kept records' file not synced: the old log is still whole."""
        await self.crash_at("_fsync", 2, log_format)

    async def test_interrupted_before_the_log_rename(self):
        await self.crash_at("replace", 2)

    async def test_interrupted_after_the_log_rename(self):
        await self.crash_at("fsync", 2, store_fails=True)

    async def test_crash_during_the_walk(self):
        """A store dropped mid-walk: the previous snapshot and the log are untouched."""
        store = await self.filled(100)
        await store.snapshot()
        await store.put("/t/after", b"a")
        done = store.snapshot()
        await self.cut_open(store)
        store._abandon()
        await self.assertFailure(done, SnapshotFailedError)
        store = await self.open()
        self.assertEqual(len(await store.get_children("/t")), 101)

    async def test_write_failure_during_a_snapshot(self):
        """A log write failing mid-walk fails the writes and the waiting requests once each; the
        snapshot is abandoned and the files still hold every acknowledged write."""
        store = await self.filled(100)
        release = self.hold_walk()
        first = store.snapshot()
        await self.cut_open(store)
        second = store.snapshot()       # waits for the snapshot after the current one
        self.patch(log_format, "append", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO")))
        await self.assertFailure(store.put("/t/lost", b""), StoreFailedError)
        release()
        await self.assertFailure(first, SnapshotFailedError)
        await self.assertFailure(second, StoreFailedError)
        self.flushLoggedErrors(OSError)
        store._abandon()
        store = await self.open()
        self.assertEqual(len(await store.get_children("/t")), 100)

    async def test_log_truncate_not_synced_then_next_snapshot_keeps_writes_of_its_walk(self):
        """The snapshot is installed and the log truncated, but the log's fsync fails: the store
        must not go on with a log size it no longer has, or the next snapshot's keep_from points
        past the real end of the log and the writes made during its walk are dropped."""
        store = await self.filled(100)
        calls, installing = [], self.watch_install()
        real_fsync = log_format._fsync

        def failing(fd):
            if installing:
                calls.append(fd)
                if len(calls) == 2:     # 1: the snapshot file's; 2: the truncated log's
                    raise OSError(5, "EIO (injected)")
            return real_fsync(fd)
        self.patch(log_format, "_fsync", failing)
        await self.assertFailure(store.snapshot(), SnapshotFailedError)
        self.assertEqual(len(calls), 2)
        if store._core.failure is None:
            # The store took writes on: they must all survive a second snapshot and a crash.
            await store.put("/t/after", b"a")
            release = self.hold_walk()
            done = store.snapshot()
            await self.cut_open(store)
            await store.put("/t/during", b"d")
            release()
            await done
        else:
            await self.assertFailure(store.put("/t/after", b"a"), StoreFailedError)
        self.flushLoggedErrors(OSError)
        store._abandon()
        store = await self.open()
        if (await store.exists("/t/after")) is not None:
            self.assertEqual((await store.get("/t/during"))[0], b"d")
        self.assertEqual((await store.get("/t/n7"))[0], b"v7")

    async def test_a_log_write_failing_before_the_install_is_not_snapshotted(self):
        """A one-slice walk whose cut holds a write the log then refuses: once the store has
        failed, the snapshot must not be installed (it would put the refused write on disk)."""
        import threading
        store = await self.filled(5)
        gate = threading.Event()
        real_append = log_format.append

        def append(fd, data, sync):
            gate.wait(10)
            raise OSError(5, "EIO (injected)")
        self.patch(log_format, "append", append)
        done = store.snapshot()
        lost = store.put("/t/lost", b"")        # in the cut's own batch
        await self.cut_open(store)
        for _ in range(100):                    # the one slice is encoded and queued
            if store._core.snapshot.position == len(store._core.snapshot.paths):
                break
            await task.deferLater(reactor, 0, lambda: None)
        gate.set()
        await self.assertFailure(lost, StoreFailedError)
        await self.assertFailure(done, SnapshotFailedError, StoreFailedError)
        await store._core.snapshot_settled()
        self.patch(log_format, "append", real_append)
        self.flushLoggedErrors(OSError)
        store._abandon()
        store = await self.open()
        self.assertIsNone(await store.exists("/t/lost"))
        self.assertEqual(len(await store.get_children("/t")), 5)
