"""Tests for pulsar_twisted.bookie.journal: replay of damaged files and the group-commit writer thread."""

import os

from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.trial import unittest

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie import journal
from pulsar_twisted.bookie import journal as journal_module
from pulsar_twisted.bookie.journal import (
    Journal, ensure_durable_dir, journal_path, list_journal_files, replay_journal)
# Imported here, not in a test: entrylog and index bind journal.fsync_dir at import, and must not
# bind DurableDirTests' patched one.
from pulsar_twisted.bookie.storage import BookieStorage


def key_record(ledger_id: int) -> bytes:
    return formats.encode_journal_record(formats.REC_MASTER_KEY, ledger_id, 0, b"key")


class ReplayTests(unittest.TestCase):
    """replay_journal over files made by hand: empty, header-only, junk, truncated, corrupt in the middle."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def write(self, file_id: int, data: bytes) -> str:
        path = journal_path(self.dir, file_id)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def ledgers(self, result) -> list[int]:
        return [r[1] for r in result.records]

    def test_no_files(self):
        """An empty journal dir replays nothing and starts file 1."""
        result = replay_journal(self.dir)
        self.assertEqual((result.records, result.append_file, result.next_file_id), ([], None, 1))

    def test_empty_file(self):
        """An empty last file (crash before its header) gets a header and is appended to."""
        path = self.write(3, b"")
        result = replay_journal(self.dir)
        self.assertEqual((result.append_file, result.append_offset), (3, 16))
        with open(path, "rb") as f:
            self.assertEqual(formats.decode_journal_header(f.read()), 3)

    def test_partial_header(self):
        """A last file holding part of a header is restarted the same way."""
        self.write(3, formats.encode_journal_header(3)[:7])
        result = replay_journal(self.dir)
        self.assertEqual((result.append_file, result.append_offset, result.records), (3, 16, []))

    def test_header_only(self):
        """A header-only file has no records and is appended to after its header."""
        self.write(2, formats.encode_journal_header(2))
        result = replay_journal(self.dir)
        self.assertEqual((result.records, result.append_file, result.append_offset, result.problems),
                         ([], 2, 16, []))

    def test_junk_file(self):
        """A junk file is reported and skipped; appends go to a new file after it."""
        self.write(1, formats.encode_journal_header(1) + key_record(5))
        junk = self.write(2, b"this is not a journal file at all" * 3)
        result = replay_journal(self.dir)
        self.assertEqual(self.ledgers(result), [5])
        self.assertEqual((result.append_file, result.next_file_id), (None, 3))
        self.assertEqual(len(result.problems), 1)
        with open(junk, "rb") as f:
            self.assertTrue(f.read().startswith(b"this is not"), "junk files are left alone")

    def test_torn_tail_cut(self):
        """A truncated last record is dropped and cut off so appends follow the last intact record."""
        good = formats.encode_journal_header(1) + key_record(1) + key_record(2)
        path = self.write(1, good + key_record(3)[:10])
        result = replay_journal(self.dir)
        self.assertEqual(self.ledgers(result), [1, 2])
        self.assertEqual((result.append_file, result.append_offset), (1, len(good)))
        self.assertEqual(os.path.getsize(path), len(good))

    def test_torn_tail_then_junk(self):
        """A partial record followed by junk is cut at the last intact record too."""
        good = formats.encode_journal_header(1) + key_record(1)
        path = self.write(1, good + key_record(2)[:20] + os.urandom(500))
        result = replay_journal(self.dir)
        self.assertEqual(self.ledgers(result), [1])
        self.assertEqual(os.path.getsize(path), len(good))

    def test_middle_corruption(self):
        """A bad record in an older file stops that file (reported) but later files still replay."""
        bad = bytearray(key_record(2))
        bad[-1] ^= 0xFF
        old = formats.encode_journal_header(1) + key_record(1) + bytes(bad) + key_record(3)
        path = self.write(1, old)
        self.write(2, formats.encode_journal_header(2) + key_record(4))
        result = replay_journal(self.dir)
        self.assertEqual(self.ledgers(result), [1, 4])
        self.assertEqual(len(result.problems), 1)
        self.assertEqual(os.path.getsize(path), len(old), "only the last file is repaired")

    def test_checkpoint_mark(self):
        """Replay starts at the last checkpoint's position, which may be in an earlier file."""
        first = formats.encode_journal_header(1) + key_record(1)
        mark_offset = len(first)
        self.write(1, first + key_record(2))
        checkpoint = formats.encode_journal_record(formats.REC_CHECKPOINT, 1, mark_offset)
        self.write(2, formats.encode_journal_header(2) + key_record(3) + checkpoint + key_record(4))
        result = replay_journal(self.dir)
        self.assertEqual(result.checkpoint, (1, mark_offset))
        self.assertEqual(self.ledgers(result), [2, 3, 4])


class JournalWriterTests(unittest.TestCase):
    """The writer thread, with the real reactor."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def open(self, **kw) -> Journal:
        journal = Journal(self.dir, reactor, **kw)
        journal.open(replay_journal(self.dir))
        self.addCleanup(journal.stop)
        return journal

    @defer.inlineCallbacks
    def test_group_commit(self):
        """1,000 records queued at once are written in far fewer groups and fsyncs, and all replay."""
        journal = self.open()
        records = [key_record(i) for i in range(1000)]
        yield defer.gatherResults([journal.append((r,), len(r)) for r in records])
        self.assertEqual(journal.records, 1000)
        self.assertLess(journal.fsyncs, 100)
        self.assertEqual(journal.fsyncs, journal.groups)
        yield journal.stop()
        self.assertEqual([r[1] for r in replay_journal(self.dir).records], list(range(1000)))

    @defer.inlineCallbacks
    def test_entries_threshold(self):
        """With an entries threshold of 1 and a long group wait, a lone record is not held back."""
        journal = self.open(max_group_wait_ms=60_000, buffered_entries_threshold=1)
        r = key_record(1)
        yield journal.append((r,), len(r))
        self.assertEqual(journal.groups, 1)

    @defer.inlineCallbacks
    def test_flush_when_queue_empty(self):
        """With journalFlushWhenQueueEmpty, a lone record is written and fsynced at once, however long
        the group wait; a burst queued while the writer is busy is still grouped."""
        journal = self.open(max_group_wait_ms=60_000, flush_when_queue_empty=True)
        r = key_record(1)
        yield journal.append((r,), len(r))
        self.assertEqual((journal.groups, journal.fsyncs), (1, 1))
        yield defer.gatherResults([journal.append((r,), len(r)) for _ in range(1000)])
        self.assertEqual(journal.records, 1001)
        self.assertLess(journal.fsyncs, 100)

    @defer.inlineCallbacks
    def test_group_wait_without_flush_when_queue_empty(self):
        """Without it, the writer waits for a group: a record is held until a threshold (here the second
        record) is reached, so two records queued apart share one fsync."""
        journal = self.open(max_group_wait_ms=60_000, buffered_entries_threshold=2,
                            flush_when_queue_empty=False)
        r = key_record(1)
        first = journal.append((r,), len(r))
        yield deferLater(reactor, 0.01, lambda: None)
        yield defer.gatherResults([first, journal.append((r,), len(r))])
        self.assertEqual((journal.groups, journal.fsyncs, journal.records), (1, 1, 2))

    def test_hand_back_coalesced(self):
        """Groups written while the reactor has not yet run the previous hand-back share one
        callFromThread (one waker-pipe wake-up), and fire in write order when it runs."""
        class Reactor:
            def __init__(self):
                self.calls = []

            def callFromThread(self, f, *args):
                self.calls.append((f, args))
        fake = Reactor()
        journal = Journal(self.dir, fake, sync_data=False)
        journal._create(1)
        self.addCleanup(os.close, journal._fd)
        r = key_record(1)
        fired = []
        groups = [[((r,), len(r), defer.Deferred().addCallback(lambda _, i=i: fired.append(i)), 0.0)]
                  for i in range(3)]
        for group in groups:
            journal._write_group(group)
        self.assertEqual(len(fake.calls), 1)
        f, args = fake.calls.pop()
        f(*args)
        self.assertEqual(fired, [0, 1, 2])
        self.assertEqual((journal.groups, journal.records), (3, 3))
        journal._write_group([((r,), len(r), defer.Deferred(), 0.0)])
        self.assertEqual(len(fake.calls), 1)

    @defer.inlineCallbacks
    def test_no_sync(self):
        """Without sync_data, records are written but never fsync'd."""
        journal = self.open(sync_data=False)
        r = key_record(1)
        yield journal.append((r,), len(r))
        self.assertEqual((journal.fsyncs, journal.records), (0, 1))

    @defer.inlineCallbacks
    def test_mark_and_roll(self):
        """Files roll past the size limit; a mark names the position after everything queued before it,
        and trim deletes the files before a given one but never the current file."""
        journal = self.open(max_size_mb=0)   # roll before every group
        r = key_record(1)
        yield journal.append((r,), len(r))
        first_file = journal.file_id
        mark = yield journal.mark()
        yield journal.append((r,), len(r))
        self.assertEqual(mark, (first_file, 16 + len(r)))
        self.assertGreater(journal.file_id, first_file)
        self.assertGreaterEqual(len(list_journal_files(self.dir)), 2)
        removed = journal.trim(journal.file_id + 10)
        self.assertNotIn(journal.file_id, removed)
        self.assertEqual([f for f, _ in list_journal_files(self.dir)], [journal.file_id])

    @defer.inlineCallbacks
    def test_append_after_stop_fails(self):
        """A stopped journal refuses records."""
        journal = self.open()
        yield journal.stop()
        r = key_record(1)
        yield self.assertFailure(journal.append((r,), len(r)), Exception)

    def test_waiters_fire_in_order_and_a_failing_one_spares_the_rest(self):
        """``append(..., waiter=)`` returns None; the waiters of a group get ``callback(None)`` in
        write order when it is durable, and one that raises is logged while the later ones still fire."""
        class Reactor:
            def __init__(self):
                self.calls = []

            def callFromThread(self, f, *args):
                self.calls.append((f, args))
        fake = Reactor()
        journal = Journal(self.dir, fake)
        journal._create(1)
        self.addCleanup(os.close, journal._fd)
        fired = []

        class Waiter:
            def __init__(self, i):
                self.i = i

            def callback(self, value):
                fired.append((self.i, value))
                if self.i == 1:
                    raise RuntimeError("a buggy waiter")

            def errback(self, failure):
                fired.append((self.i, failure))
        r = key_record(1)
        self.assertEqual([journal.append((r,), len(r), Waiter(i)) for i in range(3)], [None] * 3)
        journal._write_group(journal._take_all())
        f, args = fake.calls.pop()
        f(*args)
        self.assertEqual(fired, [(0, None), (1, None), (2, None)])
        self.assertEqual((journal.groups, journal.fsyncs, journal.records), (1, 1, 3))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    @defer.inlineCallbacks
    def test_waiter_after_stop_gets_a_failure(self):
        """A stopped journal fails a waiter with a Failure (JournalStoppedError), as it fails a Deferred."""
        journal = self.open()
        yield journal.stop()
        got = []

        class Waiter:
            def callback(self, value):
                got.append(value)

            def errback(self, failure):
                got.append(failure)
        r = key_record(1)
        journal.append((r,), len(r), Waiter())
        self.assertEqual(len(got), 1)
        self.assertTrue(got[0].check(journal_module.JournalStoppedError))


class DurableDirTests(unittest.TestCase):
    """ensure_durable_dir: a directory the bookie creates has its name made durable (its parent
    fsynced), as a file's name is by fsync of its directory."""

    def setUp(self):
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)
        self.synced = []
        self.patch(journal, "fsync_dir", self.synced.append)

    def test_new_levels_are_synced_in_their_parents(self):
        target = os.path.join(self.base, "a", "b", "c")
        ensure_durable_dir(target)
        self.assertTrue(os.path.isdir(target))
        a, b = os.path.join(self.base, "a"), os.path.join(self.base, "a", "b")
        self.assertEqual(self.synced, [b, a, self.base])

    def test_existing_directory_still_has_its_parent_synced(self):
        """Someone else may have created it without syncing: its parent is fsynced anyway."""
        target = os.path.join(self.base, "journal")
        os.mkdir(target)
        ensure_durable_dir(target)
        self.assertEqual(self.synced, [self.base])

    def test_storage_start_makes_its_directories_durable(self):
        """BookieStorage on fresh dirs: the journal dir, the ledger dir and its index dir each get
        their parent fsynced before anything is written in them."""
        journal_dir = os.path.join(self.base, "disk", "journal")
        ledger_dir = os.path.join(self.base, "disk", "ledgers")
        storage = BookieStorage(journal_dir, [ledger_dir], reactor, flush_interval_ms=0, gc_wait_time_ms=0)
        d = storage.start()
        d.addCallback(lambda _: storage.stop())

        def check(_):
            disk = os.path.join(self.base, "disk")
            for parent in (self.base, disk, ledger_dir):
                self.assertIn(parent, self.synced)
        return d.addCallback(check)
