"""Tests for pulsar_twisted.bookie.storage.BookieStorage: real files, the real journal thread and reactor."""

import glob
import os
import threading

from twisted.internet import defer, reactor
from twisted.trial import unittest

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie import storage as bookie_storage
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.common.threads import GIL_YIELD_EVERY
from pulsar_twisted.testing.patching import patch_method
from pulsar_twisted.common.bk_errors import (
    BookieReadOnlyError, DigestMismatchError, LedgerFencedError, NoSuchEntryError, NoSuchLedgerError,
    UnauthorizedAccessError)

KEY = b"master-key"


class StorageTestBase(unittest.TestCase):

    def setUp(self):
        base = self.mktemp()
        self.journal_dir = os.path.join(base, "journal")
        self.ledger_dirs = [os.path.join(base, "ledgers")]

    @defer.inlineCallbacks
    def open(self, **kw):
        """A started storage over this test's dirs; periodic checkpoint and GC off unless asked for."""
        kw.setdefault("flush_interval_ms", 0)
        kw.setdefault("gc_wait_time_ms", 0)
        storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, **kw)
        yield storage.start()
        self.addCleanup(self._close, storage)
        return storage

    def _close(self, storage):
        if storage._running:
            return storage.stop()

    def crash(self, storage):
        storage.simulate_crash()

    @defer.inlineCallbacks
    def fill(self, storage, ledger_id, count, size=100, first=0):
        yield defer.gatherResults([
            storage.add_entry(ledger_id, i, self.data(ledger_id, i, size), KEY, i - 1)
            for i in range(first, first + count)])

    @staticmethod
    def data(ledger_id, entry_id, size=100):
        return (f"{ledger_id}:{entry_id}:".encode() * size)[:size]

    @defer.inlineCallbacks
    def assert_entries(self, storage, ledger_id, entry_ids, size=100):
        for i in entry_ids:
            got = yield storage.read_entry(ledger_id, i)
            self.assertEqual(got, self.data(ledger_id, i, size), f"entry {ledger_id}:{i}")


class AddReadTests(StorageTestBase):

    @defer.inlineCallbacks
    def test_round_trip_cache_and_log(self):
        """Entries read back from the write cache before a checkpoint and from the entry log after."""
        storage = yield self.open()
        yield self.fill(storage, 1, 20)
        yield self.assert_entries(storage, 1, range(20))
        self.assertEqual(storage.stats()["cache_reads"], 20)
        yield storage.checkpoint()
        self.assertEqual(storage.stats()["write_cache_entries"], 0)
        yield self.assert_entries(storage, 1, range(20))
        self.assertEqual(storage.stats()["cache_reads"], 20)

    def test_readable_before_durable(self):
        """An entry is readable as soon as add_entry returns, before its Deferred fires."""
        d = self.open()

        def opened(storage):
            add = storage.add_entry(1, 0, b"now", KEY)
            self.assertEqual(self.successResultOf(storage.read_entry(1, 0)), b"now")
            return add
        return d.addCallback(opened)

    @defer.inlineCallbacks
    def test_read_last(self):
        """Entry id -1 reads the highest stored entry; entries may arrive out of order."""
        storage = yield self.open()
        yield self.assertFailure(storage.read_entry(1, -1), NoSuchLedgerError)
        yield storage.fence_ledger(1, KEY)
        yield self.assertFailure(storage.read_entry(1, -1), NoSuchEntryError)
        for entry_id in (3, 7, 5):
            yield storage.add_entry(1, entry_id, b"e%d" % entry_id, KEY, recovery_add=True)
        self.assertEqual((yield storage.read_entry(1, -1)), b"e7")
        self.assertEqual(storage.last_entry_id(1), 7)
        yield storage.checkpoint()
        self.assertEqual((yield storage.read_entry(1, -1)), b"e7")
        yield self.assertFailure(storage.read_entry(1, 4), NoSuchEntryError)
        yield self.assertFailure(storage.read_entry(1, 100), NoSuchEntryError)

    @defer.inlineCallbacks
    def test_overwrite(self):
        """Re-adding an entry id replaces it, in the cache and across a checkpoint."""
        storage = yield self.open()
        yield storage.add_entry(1, 0, b"old", KEY)
        yield storage.checkpoint()
        yield storage.add_entry(1, 0, b"new", KEY)
        self.assertEqual((yield storage.read_entry(1, 0)), b"new")
        yield storage.checkpoint()
        self.assertEqual((yield storage.read_entry(1, 0)), b"new")

    @defer.inlineCallbacks
    def test_lac(self):
        """read_lac is the highest lac passed with any add; unknown ledgers raise."""
        storage = yield self.open()
        self.assertRaises(NoSuchLedgerError, storage.read_lac, 9)
        yield storage.add_entry(1, 0, b"a", KEY)
        self.assertEqual(storage.read_lac(1), -1)
        yield storage.add_entry(1, 2, b"c", KEY, 1)
        yield storage.add_entry(1, 1, b"b", KEY, 0)
        self.assertEqual(storage.read_lac(1), 1)

    @defer.inlineCallbacks
    def test_fence(self):
        """A fenced ledger refuses adds but takes recovery adds; fencing an unknown ledger creates it."""
        storage = yield self.open()
        yield storage.add_entry(1, 0, b"a", KEY)
        yield storage.fence_ledger(1, KEY)
        self.assertTrue(storage.is_fenced(1))
        yield self.assertFailure(storage.add_entry(1, 1, b"b", KEY), LedgerFencedError)
        yield storage.add_entry(1, 1, b"b", KEY, recovery_add=True)
        self.assertEqual((yield storage.read_entry(1, 1)), b"b")
        yield storage.fence_ledger(2, KEY)
        self.assertTrue(storage.has_ledger(2))
        self.assertEqual(storage.ledger_ids(), [1, 2])

    @defer.inlineCallbacks
    def test_master_key(self):
        """Adds and fences with another master key than the first one are refused."""
        storage = yield self.open()
        yield storage.add_entry(1, 0, b"a", KEY)
        yield self.assertFailure(storage.add_entry(1, 1, b"b", b"other"), UnauthorizedAccessError)
        yield self.assertFailure(storage.fence_ledger(1, b"other"), UnauthorizedAccessError)
        self.assertFalse(storage.is_fenced(1))

    @defer.inlineCallbacks
    def test_read_only(self):
        """Read-only refuses adds, keeps reads."""
        storage = yield self.open()
        yield storage.add_entry(1, 0, b"a", KEY)
        storage.set_read_only(True)
        self.assertTrue(storage.read_only)
        yield self.assertFailure(storage.add_entry(1, 1, b"b", KEY), BookieReadOnlyError)
        self.assertEqual((yield storage.read_entry(1, 0)), b"a")
        storage.read_only = False
        yield storage.add_entry(1, 1, b"b", KEY)

    @defer.inlineCallbacks
    def test_group_commit(self):
        """1,000 adds issued at once complete with far fewer fsyncs than adds."""
        storage = yield self.open()
        yield self.fill(storage, 1, 1000)
        stats = storage.stats()
        self.assertEqual(stats["adds"], 1000)
        self.assertLess(stats["fsyncs"], stats["adds"] / 10)
        self.assertGreaterEqual(stats["journal_groups"], stats["fsyncs"])

    @defer.inlineCallbacks
    def test_cache_limit_triggers_checkpoint(self):
        """Passing write_cache_max_bytes starts a checkpoint without waiting for the interval."""
        storage = yield self.open(write_cache_max_bytes=10_000)
        yield self.fill(storage, 1, 200)
        yield storage._flush_lock.acquire()   # wait for the checkpoint it started
        storage._flush_lock.release()
        self.assertGreaterEqual(storage.stats()["checkpoints"], 1)
        yield self.assert_entries(storage, 1, range(200))

    @defer.inlineCallbacks
    def test_periodic_checkpoint(self):
        """The flush interval checkpoints by itself, and the journal is trimmed behind it."""
        storage = yield self.open(flush_interval_ms=10, journal_max_size_mb=0)
        yield self.fill(storage, 1, 50)
        while storage.stats()["checkpoints"] == 0:
            yield deferLater(0.01)
        yield self.assert_entries(storage, 1, range(50))


def deferLater(seconds):
    from twisted.internet import task
    return task.deferLater(reactor, seconds, lambda: None)


class DiskReadThreadTests(StorageTestBase):

    @defer.inlineCallbacks
    def test_disk_reads_off_the_reactor_in_batches(self):
        """Entries no longer in the write cache are read by the read thread, never the reactor's;
        the first read goes out at once and the rest of the turn's reads wait for it as one batch;
        each read gets its own answer."""
        storage = yield self.open()
        yield self.fill(storage, 1, 50)
        yield storage.checkpoint()
        threads, batches = set(), []
        read_disk, read_batch = storage._read_disk, storage._read_batch

        def recording_read(ledger_id, entry_id):
            threads.add(threading.get_ident())
            return read_disk(ledger_id, entry_id)

        def recording_batch(batch):
            batches.append(len(batch))
            return read_batch(batch)
        storage._read_disk, storage._read_batch = recording_read, recording_batch
        reads = [storage.read_entry(1, i) for i in range(50)] + [storage.read_entry(1, 77)]
        results = yield defer.DeferredList(reads, consumeErrors=True)
        self.assertEqual([r for ok, r in results[:50]], [self.data(1, i) for i in range(50)])
        self.assertFalse(results[50][0])
        results[50][1].trap(NoSuchEntryError)
        self.assertNotIn(threading.get_ident(), threads)
        self.assertEqual(batches, [1, 50])

    @defer.inlineCallbacks
    def test_stop_waits_for_reads_out(self):
        """stop() lets a read batch in flight finish before it closes the files."""
        storage = yield self.open()
        yield self.fill(storage, 1, 5)
        yield storage.checkpoint()
        reads = [storage.read_entry(1, i) for i in range(5)]
        yield storage.stop()
        got = yield defer.gatherResults(reads)
        self.assertEqual(got, [self.data(1, i) for i in range(5)])


class RestartTests(StorageTestBase):

    @defer.inlineCallbacks
    def test_clean_restart(self):
        """stop + a new instance keeps entries, lac, fence state, master keys and deletions."""
        storage = yield self.open()
        yield self.fill(storage, 1, 30)
        yield storage.checkpoint()
        yield self.fill(storage, 1, 10, first=30)
        yield storage.fence_ledger(1, KEY)
        yield storage.fence_ledger(2, KEY)
        yield self.fill(storage, 3, 5)
        yield storage.delete_ledger(3)
        yield storage.stop()

        storage = yield self.open()
        self.assertEqual(storage.ledger_ids(), [1, 2])
        yield self.assert_entries(storage, 1, range(40))
        self.assertEqual((storage.read_lac(1), storage.last_entry_id(1)), (38, 39))
        self.assertTrue(storage.is_fenced(1) and storage.is_fenced(2))
        yield self.assertFailure(storage.add_entry(1, 40, b"x", KEY), LedgerFencedError)
        yield self.assertFailure(storage.add_entry(2, 0, b"x", b"bad"), UnauthorizedAccessError)
        yield self.assertFailure(storage.read_entry(3, 0), NoSuchLedgerError)
        self.assertEqual(storage.stats()["replayed_records"], 0, "stop checkpoints everything")

    @defer.inlineCallbacks
    def test_crash_keeps_acknowledged_adds(self):
        """Without stop, every add whose Deferred fired survives: some from entry logs, some replayed."""
        storage = yield self.open()
        yield self.fill(storage, 1, 100)
        yield storage.checkpoint()
        yield self.fill(storage, 1, 100, first=100)
        yield storage.fence_ledger(2, KEY)
        yield self.fill(storage, 4, 3)
        yield storage.delete_ledger(4)
        self.crash(storage)

        storage = yield self.open()
        self.assertEqual(storage.stats()["replayed_records"] >= 100, True)
        yield self.assert_entries(storage, 1, range(200))
        self.assertEqual(storage.read_lac(1), 198)
        self.assertTrue(storage.is_fenced(2))
        self.assertFalse(storage.has_ledger(4))
        # A second crash right after replay loses nothing either.
        self.crash(storage)
        storage = yield self.open()
        yield self.assert_entries(storage, 1, range(200))
        yield storage.checkpoint()
        self.crash(storage)
        storage = yield self.open()
        yield self.assert_entries(storage, 1, range(200))

    @defer.inlineCallbacks
    def test_crash_amid_checkpoints(self):
        """Adds racing frequent checkpoints, small entry logs and journal rolls, then a crash: every
        acknowledged add and delete survives."""
        storage = yield self.open(flush_interval_ms=3, entry_log_size_limit=8192, journal_max_size_mb=0)
        acked = set()
        for wave in range(20):
            adds = []
            for i in range(wave * 50, wave * 50 + 50):
                if i % 3 == 2 and wave > 10:
                    continue   # ledger 3 is deleted: adds to it are refused (DeletedLedgerTests)
                d = storage.add_entry(1 + i % 3, i, self.data(1 + i % 3, i), KEY)
                d.addCallback(lambda _, i=i: acked.add(i))
                adds.append(d)
            if wave == 10:
                yield storage.delete_ledger(3)
            yield defer.gatherResults(adds)
            yield deferLater(0.002)
        self.assertGreaterEqual(storage.stats()["checkpoints"], 1)
        self.crash(storage)
        storage = yield self.open()
        for i in sorted(acked):
            ledger_id = 1 + i % 3
            if ledger_id == 3 and i < 550:
                continue
            got = yield storage.read_entry(ledger_id, i)
            self.assertEqual(got, self.data(ledger_id, i))
        yield self.assertFailure(storage.read_entry(3, 0), NoSuchLedgerError)
        yield self.assertFailure(storage.add_entry(3, 2000, b"x", KEY), LedgerFencedError)

    @defer.inlineCallbacks
    def test_torn_tail(self):
        """A journal cut mid-record with junk after it: complete records recover, new adds follow them."""
        storage = yield self.open()
        yield self.fill(storage, 1, 10)
        self.crash(storage)
        [path] = glob.glob(os.path.join(self.journal_dir, "*.txn"))
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - 50)     # into the last record (10 + 100 bytes of data)
            f.seek(0, 2)
            f.write(b"\xde\xad\xbe\xef" * 30)

        storage = yield self.open()
        self.assertEqual(storage.stats()["journal_problems"], 1)
        yield self.assert_entries(storage, 1, range(9))
        yield self.assertFailure(storage.read_entry(1, 9), NoSuchEntryError)
        yield self.fill(storage, 1, 5, first=9)
        self.crash(storage)

        storage = yield self.open()
        self.assertEqual(storage.stats()["journal_problems"], 0)
        yield self.assert_entries(storage, 1, range(14))

    @defer.inlineCallbacks
    def test_damaged_journal_files(self):
        """Empty, header-only and junk journal files do not stop start-up; adds after them survive."""
        os.makedirs(self.journal_dir)
        for name, data in (("1.txn", b"junk" * 10), ("2.txn", formats.encode_journal_header(2)),
                           ("3.txn", b"")):
            with open(os.path.join(self.journal_dir, name), "wb") as f:
                f.write(data)
        storage = yield self.open()
        self.assertEqual(storage.stats()["journal_problems"], 1)
        yield self.fill(storage, 1, 5)
        self.crash(storage)
        storage = yield self.open()
        yield self.assert_entries(storage, 1, range(5))

    @defer.inlineCallbacks
    def test_corrupt_index_header(self):
        """A ledger whose header is damaged, in the index table or in its own file, is skipped at start
        (logged), not fatal."""
        big = formats.TABLE_LEDGER_LIMIT
        storage = yield self.open()
        yield self.fill(storage, 1, 3)
        yield self.fill(storage, 2, 3)
        yield self.fill(storage, big, 3)
        yield self.fill(storage, big + 1, 3)
        yield storage.stop()
        with open(os.path.join(self.ledger_dirs[0], "index", "table"), "r+b") as f:
            f.seek(formats.table_offset(1))
            f.write(b"junk")
        with open(os.path.join(self.ledger_dirs[0], "index", f"{big:x}.idx"), "r+b") as f:
            f.write(b"junk")
        storage = yield self.open()
        self.assertEqual(storage.ledger_ids(), [2, big + 1])
        yield self.assert_entries(storage, 2, range(3))
        yield self.assert_entries(storage, big + 1, range(3))
        self.flushLoggedErrors()

    @defer.inlineCallbacks
    def test_damaged_index_table_refused(self):
        """An index table whose header is damaged while it holds ledgers stops the start: started
        without it, ledger 2 (indexed in the table alone) would be unknown and ledger 1 would come back
        unfenced, from the older copy of its header in its own file."""
        storage = yield self.open()
        yield self.fill(storage, 1, 10)         # past the inline slots: a file, with a copy of the header
        yield storage.checkpoint()
        yield storage.fence_ledger(1, KEY)      # the table's header only
        yield self.fill(storage, 2, 3)
        yield storage.stop()
        table = os.path.join(self.ledger_dirs[0], "index", "table")
        with open(table, "r+b") as f:
            f.seek(10)
            f.write(b"\xff")
        storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                gc_wait_time_ms=0)
        self.addCleanup(storage.stop)
        yield self.assertFailure(storage.start(), formats.FormatError)
        self.assertFalse(os.path.exists(table + ".bad"))

    @defer.inlineCallbacks
    def test_new_ledgers_make_no_index_files(self):
        """Ledgers with few entries are indexed in the table alone, one file for all; they survive a
        clean restart, a crash after the checkpoint and a crash before it (journal replay)."""
        storage = yield self.open()
        for ledger_id in range(1, 41):
            yield self.fill(storage, ledger_id, 2)
        yield storage.fence_ledger(7, KEY)
        yield storage.checkpoint()
        yield self.fill(storage, 41, 2)          # journal only: replayed after the crash
        index_dir = os.path.join(self.ledger_dirs[0], "index")
        self.assertEqual(glob.glob(os.path.join(index_dir, "*.idx")), [])
        self.crash(storage)
        storage = yield self.open()
        self.assertEqual(storage.ledger_ids(), list(range(1, 42)))
        self.assertTrue(storage.is_fenced(7))
        for ledger_id in range(1, 42):
            self.assertEqual(storage.last_entry_id(ledger_id), 1)
            yield self.assert_entries(storage, ledger_id, range(2))
        yield storage.stop()
        storage = yield self.open()
        self.assertEqual(storage.ledger_ids(), list(range(1, 42)))
        yield self.assert_entries(storage, 41, range(2))
        self.assertEqual(glob.glob(os.path.join(index_dir, "*.idx")), [])


class BackgroundFailureTests(StorageTestBase):

    @defer.inlineCallbacks
    def test_checkpoint_failing_on_the_disk_logs_one_error_line(self):
        """A periodic checkpoint failing on the disk (EIO under a power-loss fault) is one error
        line, not a traceback, and its work is retried by the next checkpoint."""
        from twisted.logger import globalLogPublisher
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        storage = yield self.open()
        yield self.fill(storage, 1, 3)
        real = BookieStorage._write_checkpoint
        calls = []

        def write_checkpoint(*args):
            calls.append(1)
            if len(calls) == 1:
                raise OSError(5, "Input/output error")
            return real(storage, *args)
        patch_method(self, storage, "_write_checkpoint", write_checkpoint)
        storage._start_checkpoint()
        yield storage.checkpoint()          # runs after the failed one, and retries its work
        self.assertEqual(len(calls), 2)
        self.assertEqual(self.flushLoggedErrors(OSError), [])
        lines = [e for e in events if e.get("what") == "checkpoint failed"]
        self.assertEqual(len(lines), 1)
        self.assertNotIn("log_failure", lines[0])
        self.assertIn("Input/output error", lines[0]["error"])
        yield self.assert_entries(storage, 1, range(3))


class CorruptionAndGCTests(StorageTestBase):

    @defer.inlineCallbacks
    def test_entry_log_crc(self):
        """A flipped byte in an entry log is a DigestMismatchError on read, never wrong data."""
        storage = yield self.open()
        yield self.fill(storage, 1, 3)
        yield storage.checkpoint()
        [path] = [p for p in glob.glob(os.path.join(self.ledger_dirs[0], "*.log")) if os.path.getsize(p) > 16]
        with open(path, "r+b") as f:
            # Second record's data: header 16, record 24 + 100, then 24 bytes of the next header.
            f.seek(16 + 124 + 24 + 50)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x01]))
        yield self.assertFailure(storage.read_entry(1, 1), DigestMismatchError)
        yield self.assert_entries(storage, 1, [0, 2])

    @defer.inlineCallbacks
    def test_delete_and_gc_reclaims(self):
        """Deleted ledgers' entry logs are removed by gc; other ledgers stay readable."""
        storage = yield self.open(entry_log_size_limit=4096)
        yield self.fill(storage, 1, 40, size=1000)   # ~10 entry logs
        yield storage.checkpoint()
        yield self.fill(storage, 2, 3)
        yield storage.checkpoint()
        logs_before = len(glob.glob(os.path.join(self.ledger_dirs[0], "*.log")))
        yield storage.delete_ledger(1)
        yield self.assertFailure(storage.read_entry(1, 0), NoSuchLedgerError)
        yield storage.checkpoint()
        figures = yield storage.gc()
        self.assertGreaterEqual(figures["logs_deleted"], 9)
        logs_after = len(glob.glob(os.path.join(self.ledger_dirs[0], "*.log")))
        self.assertEqual(logs_after, figures["entry_logs"])
        self.assertLess(logs_after, logs_before - 8)
        self.assertFalse(os.path.exists(os.path.join(self.ledger_dirs[0], "index", "1.idx")))
        yield self.assert_entries(storage, 2, range(3))
        yield storage.stop()
        storage = yield self.open()
        self.assertEqual(storage.ledger_ids(), [2])
        yield self.assert_entries(storage, 2, range(3))

    @defer.inlineCallbacks
    def test_compaction(self):
        """A log mostly dead is compacted: live entries move to the current log and stay readable."""
        storage = yield self.open()
        for i in range(10):
            yield storage.add_entry(1, i, self.data(1, i, 1000), KEY)
            if i < 2:
                yield storage.add_entry(2, i, self.data(2, i, 100), KEY)
        yield storage.checkpoint()
        yield storage.stop()     # the log is sealed; the next instance writes a new one
        storage = yield self.open()
        yield storage.delete_ledger(1)
        figures = yield storage.gc()
        self.assertEqual((figures["logs_compacted"], figures["entries_moved"]), (1, 2))
        yield self.assert_entries(storage, 2, range(2))
        yield storage.stop()
        storage = yield self.open()
        yield self.assert_entries(storage, 2, range(2))

    @defer.inlineCallbacks
    def test_compaction_scan_yields_the_gil(self):
        """Compacting a log of 3,000 entries lets the reactor in every GIL_YIELD_EVERY records scanned:
        a big GC run is a pure-Python loop in the flush thread, and must not hold the GIL for long."""
        storage = yield self.open()
        yield self.fill(storage, 1, 3000)
        yield self.fill(storage, 2, 10)
        yield storage.checkpoint()
        yield storage.stop()
        storage = yield self.open()
        yield storage.delete_ledger(1)
        yields = []
        self.patch(bookie_storage, "yield_gil", lambda: yields.append(1))
        figures = yield storage.gc()
        self.assertEqual((figures["logs_compacted"], figures["entries_moved"]), (1, 10))
        self.assertGreaterEqual(len(yields), 3010 // GIL_YIELD_EVERY)
        yield self.assert_entries(storage, 2, range(10))

    @defer.inlineCallbacks
    def test_gc_keeps_undurable_delete(self):
        """GC does not drop a deleted ledger's data before its DELETE record is durable."""
        storage = yield self.open()
        yield self.fill(storage, 1, 3)
        yield storage.stop()
        # A long group wait holds the DELETE record in the journal queue while gc runs.
        storage = yield self.open(journal_max_group_wait_ms=300, journal_flush_when_queue_empty=False)
        deleted = storage.delete_ledger(1)
        figures = yield storage.gc()
        self.assertNoResult(deleted)
        self.assertEqual(figures["logs_deleted"], 0)
        yield deleted
        figures = yield storage.gc()
        self.assertGreaterEqual(figures["logs_deleted"], 1)


class RefusalTests(StorageTestBase):
    """A bookie refuses adds to fenced and deleted ledgers, and never serves a deleted one, across
    restarts and crashes (issue 11: a stale writer's adds to a recovered-then-deleted ledger)."""

    @defer.inlineCallbacks
    def assert_deleted(self, storage, ledger_id):
        self.assertTrue(storage.was_deleted(ledger_id))
        self.assertFalse(storage.has_ledger(ledger_id))
        yield self.assertFailure(storage.read_entry(ledger_id, 0), NoSuchLedgerError)
        yield self.assertFailure(storage.read_entry(ledger_id, -1), NoSuchLedgerError)
        yield self.assertFailure(storage.add_entry(ledger_id, 0, b"x", KEY), LedgerFencedError)
        yield self.assertFailure(storage.add_entry(ledger_id, 99, b"x", KEY, recovery_add=True),
                                 LedgerFencedError)
        yield self.assertFailure(storage.fence_ledger(ledger_id, KEY), NoSuchLedgerError)
        self.assertFalse(storage.has_ledger(ledger_id), "a refused add must not re-create it")

    @defer.inlineCallbacks
    def test_add_to_deleted_ledger_refused(self):
        """Once deleted, a ledger is never re-created by an add, a recovery add or a fence."""
        storage = yield self.open()
        yield self.fill(storage, 7, 5)
        yield storage.delete_ledger(7)
        yield self.assert_deleted(storage, 7)
        self.assertEqual(storage.stats()["deleted_ledgers"], 1)

    @defer.inlineCallbacks
    def test_deleted_survives_crash_before_checkpoint(self):
        """The DELETE journal record alone keeps the ledger deleted after a crash."""
        storage = yield self.open()
        yield self.fill(storage, 7, 5)
        yield storage.checkpoint()      # its index file exists
        yield storage.delete_ledger(7)
        self.crash(storage)
        storage = yield self.open()
        yield self.assert_deleted(storage, 7)

    @defer.inlineCallbacks
    def test_deleted_survives_journal_trim(self):
        """After checkpoints trimmed the DELETE out of the journal, the deleted list keeps it."""
        storage = yield self.open(journal_max_size_mb=0)
        yield self.fill(storage, 7, 5)
        yield self.fill(storage, 8, 5)
        yield storage.checkpoint()
        yield storage.delete_ledger(7)
        yield storage.checkpoint()
        yield self.fill(storage, 8, 5, first=5)
        yield storage.checkpoint()
        self.crash(storage)
        storage = yield self.open()
        self.assertEqual(storage.stats()["replayed_records"], 0)
        yield self.assert_deleted(storage, 7)
        yield self.assert_entries(storage, 8, range(10))
        yield storage.stop()
        storage = yield self.open()
        yield self.assert_deleted(storage, 7)

    @defer.inlineCallbacks
    def test_deleted_list_torn_tail(self):
        """A torn record at the end of the deleted list is cut off; the ids before it stay deleted
        and later appends follow them."""
        storage = yield self.open()
        for lid in (1, 2):
            yield self.fill(storage, lid, 2)
            yield storage.delete_ledger(lid)
        yield storage.stop()
        path = os.path.join(self.ledger_dirs[0], "index", "deleted")
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x00")
        storage = yield self.open()
        yield self.assert_deleted(storage, 1)
        yield self.assert_deleted(storage, 2)
        yield self.fill(storage, 3, 2)
        yield storage.delete_ledger(3)
        yield storage.stop()
        storage = yield self.open()
        for lid in (1, 2, 3):
            yield self.assert_deleted(storage, lid)

    def test_deleted_list_codec(self):
        """Round trip; junk after the valid records is ignored and reported by the valid length."""
        data = formats.encode_deleted_header() + formats.encode_deleted_records({5, 1, 2 ** 40})
        ids, valid = formats.decode_deleted(data + b"junkjunkjunk")
        self.assertEqual((ids, valid), ({1, 5, 2 ** 40}, len(data)))
        self.assertEqual(formats.decode_deleted(b""), (set(), 0))
        self.assertRaises(formats.FormatError, formats.decode_deleted, b"PTIX\x00\x01\x00\x00")

    @defer.inlineCallbacks
    def test_fence_survives_crash(self):
        """A fence acknowledged (durable in the journal) and then a crash: adds are still refused."""
        storage = yield self.open()
        yield self.fill(storage, 4, 3)
        yield storage.fence_ledger(4, KEY)
        self.crash(storage)
        storage = yield self.open()
        self.assertTrue(storage.is_fenced(4))
        yield self.assertFailure(storage.add_entry(4, 3, b"x", KEY), LedgerFencedError)
        yield storage.add_entry(4, 3, b"x", KEY, recovery_add=True)
        yield self.assert_entries(storage, 4, range(3))


class AddWaiterTests(StorageTestBase):
    """``add_entry(..., waiter=)``: the same outcomes as the Deferred, without one."""

    @defer.inlineCallbacks
    def test_waiter_hears_durable_and_refused_adds(self):
        """A waiter gets ``callback(None)`` once the entry is durable and ``errback`` at once for a
        refused add (None is returned either way); a waiter that raises on a refusal is logged."""
        storage = yield self.open()
        got = []

        class Waiter:
            def __init__(self, name, raises=False):
                self.name, self.raises = name, raises

            def callback(self, value):
                got.append((self.name, value))

            def errback(self, failure):
                got.append((self.name, failure.type))
                if self.raises:
                    raise RuntimeError("a buggy waiter")
        self.assertIsNone(storage.add_entry(7, 0, b"x", KEY, -1, waiter=Waiter("ok")))
        yield storage.add_entry(7, 1, b"y", KEY, 0)     # durable after entry 0 (same journal order)
        self.assertEqual(got, [("ok", None)])
        yield storage.fence_ledger(7, KEY)
        self.assertIsNone(storage.add_entry(7, 2, b"z", KEY, 1, waiter=Waiter("fenced", raises=True)))
        self.assertIsNone(storage.add_entry(7, 2, b"z", b"other", 1, waiter=Waiter("key")))
        self.assertEqual(got[1:], [("fenced", LedgerFencedError), ("key", UnauthorizedAccessError)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        yield self.assertFailure(storage.add_entry(7, 2, b"z", KEY, 1), LedgerFencedError)

    @defer.inlineCallbacks
    def test_batch_stored_as_one_journal_append(self):
        """``add_entries`` stores every entry (readable at once, the highest LAC kept) and makes
        one journal append for them: one waiter call once all are durable, the journal counting
        each record."""
        storage = yield self.open()
        yield storage.add_entry(3, 0, self.data(3, 0), KEY)
        journal = storage._journal
        appends, real = [], journal.append
        patch_method(self, journal, "append", lambda *a: appends.append(a[2:]) or real(*a))
        got = []
        d = defer.Deferred().addCallback(got.append)
        entries = [(i, self.data(3, i), i - 1) for i in range(1, 6)]
        records = journal.records
        self.assertIsNone(storage.add_entries(3, entries, KEY, d))
        yield self.assert_entries(storage, 3, range(6))
        self.assertEqual(storage.read_lac(3), 4)
        self.assertEqual(appends, [(d, 5)])
        yield d
        self.assertEqual(got, [None])
        self.assertEqual(journal.records - records, 5)
        self.assertEqual(storage.stats()["adds"], 6)
        self.assertEqual(storage.stats()["add_bytes"], 600)

    @defer.inlineCallbacks
    def test_batch_refused_whole(self):
        """Every check of ``add_entries`` is about the ledger: a refused batch stores nothing and
        fails its waiter once, at once."""
        storage = yield self.open()
        yield storage.add_entry(4, 0, b"a", KEY)
        failures = []
        waiter = defer.Deferred().addErrback(lambda f: failures.append(f.type))
        storage.add_entries(4, [(1, b"b", 0), (2, b"c", 1)], b"other key", waiter)
        self.assertEqual(failures, [UnauthorizedAccessError])
        yield self.assertFailure(storage.read_entry(4, 1), NoSuchEntryError)
        storage.add_entries(4, [(1, b"b", 0), (-1, b"c", 1)], KEY, defer.Deferred().addErrback(
            lambda f: failures.append(f.type)))
        self.assertEqual(failures, [UnauthorizedAccessError, ValueError])
        yield self.assertFailure(storage.read_entry(4, 1), NoSuchEntryError)
