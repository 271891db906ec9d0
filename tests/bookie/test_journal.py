"""Tests for pulsar_twisted.bookie.journal: replay of damaged files and the group-commit writer thread."""

import os
import threading

from twisted.internet import defer, reactor
from twisted.internet.task import Clock, deferLater
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial import unittest

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie import journal
from pulsar_twisted.bookie import journal as journal_module
from pulsar_twisted.bookie.journal import (
    Journal, ensure_durable_dir, journal_path, list_journal_files, replay_journal)
# Imported here, not in a test: entrylog and index bind journal.fsync_dir at import, and must not
# bind DurableDirTests' patched one.
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.proto import bookie_pb2
from pulsar_twisted.wire.bookie import status_for


def key_record(ledger_id: int) -> bytes:
    return formats.encode_journal_record(formats.REC_MASTER_KEY, ledger_id, 0, b"key")


class ThreadCallsReactor:
    """A reactor that keeps what the writer thread hands back (``callFromThread``) for the test to run."""

    def __init__(self):
        self.calls = []

    def callFromThread(self, f, *args):
        self.calls.append((f, args))


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
        fake = ThreadCallsReactor()
        journal = Journal(self.dir, fake, sync_data=False)
        journal._create(1)
        self.addCleanup(os.close, journal._fd)
        r = key_record(1)
        fired = []
        groups = [[((r,), len(r), defer.Deferred().addCallback(lambda _, i=i: fired.append(i)), 0.0, 1)]
                  for i in range(3)]
        for group in groups:
            journal._write_group(group)
        self.assertEqual(len(fake.calls), 1)
        f, args = fake.calls.pop()
        f(*args)
        self.assertEqual(fired, [0, 1, 2])
        self.assertEqual((journal.groups, journal.records), (3, 3))
        journal._write_group([((r,), len(r), defer.Deferred(), 0.0, 1)])
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
        fake = ThreadCallsReactor()
        journal = Journal(self.dir, fake, inline_sync_max_ms=0)
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

    def test_failed_write_fails_every_waiter_even_after_a_raising_one(self):
        """A group whose write fails errbacks all its waiters in order; one whose ``errback``
        raises is logged and the later ones still hear (no adapter object per record does this:
        the journal's own loop does)."""
        fake = ThreadCallsReactor()
        journal = Journal(self.dir, fake, inline_sync_max_ms=0)
        journal._create(1)
        os.close(journal._fd)
        journal._fd = -1        # every write to it now fails (EBADF)
        fired = []

        class Waiter:
            def __init__(self, i):
                self.i = i

            def callback(self, value):
                fired.append((self.i, value))

            def errback(self, failure):
                fired.append((self.i, failure.type))
                if self.i == 0:
                    raise RuntimeError("a buggy waiter")
        r = key_record(1)
        for i in range(3):
            journal.append((r,), len(r), Waiter(i))
        journal._write_group(journal._take_all())
        f, args = fake.calls.pop()
        f(*args)
        self.assertEqual(fired, [(0, journal_module.JournalWriteError), (1, journal_module.JournalWriteError),
                                 (2, journal_module.JournalWriteError)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    @defer.inlineCallbacks
    def test_stop_ends_when_closing_the_file_fails(self):
        """A close that reports an error (a deferred write error) still ends the thread and the stop."""
        journal = self.open()
        real, fd = os.close, journal._fd

        def close(f):
            real(f)
            if f == fd:
                raise OSError(5, "Input/output error")
        self.patch(journal_module.os, "close", close)
        yield journal.stop()
        self.assertEqual(journal._fd, -1)

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


class _TurnReactor(Clock):
    """A Clock that also keeps callFromThread calls (run them with ``run_thread_calls``)."""

    def __init__(self):
        super().__init__()
        self.thread_calls = []

    def callFromThread(self, f, *args):
        self.thread_calls.append((f, args))

    def run_thread_calls(self):
        calls, self.thread_calls = self.thread_calls, []
        for f, args in calls:
            f(*args)


class TurnWriteTests(unittest.TestCase):
    """The reactor thread writes small turns itself (journalInlineSyncMaxMillis)."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        self.syncs = []     # the thread of each fdatasync
        real = os.fdatasync

        self.sync_errors = []   # errors the next fdatasyncs raise, in order (a failing disk; None: none)

        def fdatasync(fd):
            self.syncs.append(threading.current_thread().name)
            if self.sync_errors:
                error = self.sync_errors.pop(0)
                if error is not None:
                    raise error
            real(fd)
        self.patch(journal_module.os, "fdatasync", fdatasync)

    def journal(self, **kw) -> Journal:
        """A journal on a fake reactor, its file created, no writer thread: ``_idle`` says whether
        the (absent) thread is waiting for work."""
        clock = _TurnReactor()
        j = Journal(self.dir, clock, **kw)
        j._create(1)
        self.syncs.clear()      # the header's
        j._idle = True
        self.addCleanup(lambda: os.close(j._fd) if j._fd >= 0 else None)
        return j

    def append(self, j, count: int, fired: list, start: int = 0) -> None:
        r = key_record(1)
        for i in range(start, start + count):
            j.append((r,), len(r)).addCallback(lambda _, i=i: fired.append(i))

    def test_a_turn_is_one_group_written_by_the_reactor(self):
        """Records appended in one turn wait for the turn's end, then share one write and one
        fdatasync on the reactor thread, and fire in order with no hand-off."""
        j = self.journal()
        fired = []
        self.append(j, 3, fired)
        self.assertEqual((fired, self.syncs, j.queue_length()), ([], [], 3))
        j._reactor.advance(0)
        self.assertEqual(fired, [0, 1, 2])
        self.assertEqual(self.syncs, [threading.current_thread().name])
        self.assertEqual((j.groups, j.fsyncs, j.records), (1, 1, 3))
        self.assertEqual((j._queue, j._reactor.thread_calls), ([], []))
        self.assertTrue(j.inline)
        os.close(j._fd)
        j._fd = -1
        self.assertEqual(len(replay_journal(self.dir).records), 3)

    def test_a_large_turn_goes_to_the_writer_thread(self):
        """A turn over TURN_MAX_RECORDS is queued for the writer thread, in order, and the reactor
        does not fsync."""
        j = self.journal()
        fired = []
        self.append(j, Journal.TURN_MAX_RECORDS + 1, fired)
        j._reactor.advance(0)
        self.assertEqual((fired, self.syncs), ([], []))
        self.assertEqual(len(j._queue), Journal.TURN_MAX_RECORDS + 1)
        self.assertFalse(j._idle)   # the thread was woken
        j._write_group(j._take_all())
        j._reactor.run_thread_calls()
        self.assertEqual(fired, list(range(Journal.TURN_MAX_RECORDS + 1)))

    def test_records_of_one_append_count_toward_a_large_turn(self):
        """An append holding several records (a batch of adds) counts each toward
        TURN_MAX_RECORDS: over it, the turn goes to the writer thread as well."""
        j = self.journal()
        r = key_record(1)
        n = Journal.TURN_MAX_RECORDS + 1
        fired = []
        j.append((r,) * n, len(r) * n, records=n).addCallback(fired.append)
        j._reactor.advance(0)
        self.assertEqual((fired, self.syncs, len(j._queue)), ([], [], 1))
        j._write_group(j._take_all())
        j._reactor.run_thread_calls()
        self.assertEqual((fired, j.records), ([None], n))
        os.close(j._fd)
        j._fd = -1
        self.assertEqual(len(replay_journal(self.dir).records), n)

    def test_a_small_turn_queues_behind_a_busy_thread(self):
        """While the thread holds a group, a small turn goes behind it (never written first)."""
        j = self.journal()
        fired = []
        self.append(j, Journal.TURN_MAX_RECORDS + 1, fired)
        j._reactor.advance(0)
        thread_group = j._take_all()        # the thread took its group and is writing it
        self.append(j, 2, fired, start=100)
        j._reactor.advance(0)
        self.assertEqual([len(thread_group), len(j._queue), self.syncs], [Journal.TURN_MAX_RECORDS + 1, 2, []])
        j._write_group(thread_group)
        j._write_group(j._take_all())
        j._reactor.run_thread_calls()
        self.assertEqual(fired, list(range(Journal.TURN_MAX_RECORDS + 1)) + [100, 101])

    def test_slow_fsyncs_move_the_writes_to_the_thread_and_back(self):
        """fdatasyncs averaging over the limit hand the writes to the thread (logged once); after
        THREAD_DWELL_S of fast thread fsyncs the reactor takes them back."""
        self.patch(journal_module.os, "fdatasync", lambda fd: None)    # fsync times set by hand
        j = self.journal(inline_sync_max_ms=1.0)
        j.THREAD_DWELL_S = 0.0
        fired = []
        j._sync_avg = 0.005             # recent fsyncs took 5 ms
        self.append(j, 1, fired)
        j._reactor.advance(0)
        self.assertEqual(fired, [0])    # written inline, then the switch
        self.assertFalse(j.inline)
        self.assertEqual(j.mode_switches, 1)
        self.append(j, 1, fired, start=1)
        self.assertEqual(len(j._queue), 1)      # straight to the thread, no turn
        j._sync_avg = 0.0001
        j._write_group(j._take_all())
        j._idle = True                  # the thread waits again
        j._reactor.run_thread_calls()
        self.assertEqual(fired, [0, 1])
        self.assertTrue(j.inline)
        self.assertEqual(j.mode_switches, 2)

    def test_no_turn_writes_without_flush_when_queue_empty(self):
        """With group waits (journalFlushWhenQueueEmpty off), or the limit at 0, records go to the
        writer thread at once."""
        for kw in ({"flush_when_queue_empty": False}, {"inline_sync_max_ms": 0}):
            j = self.journal(**kw)
            self.append(j, 1, [])
            self.assertFalse(j.inline)
            self.assertEqual(len(j._queue), 1)
            os.close(j._fd)
            j._fd = -1

    def test_mark_in_a_turn(self):
        """A mark appended in a turn fires with the position after the turn's earlier records."""
        j = self.journal()
        r = key_record(1)
        j.append((r,), len(r))
        marks = []
        j.mark().addCallback(marks.append)
        j._reactor.advance(0)
        self.assertEqual(marks, [(1, formats.JOURNAL_HEADER.size + len(r))])

    @defer.inlineCallbacks
    def test_stop_writes_the_pending_turn(self):
        """``stop`` writes what the current turn appended before the thread ends; a halt drops it."""
        j = Journal(self.dir, reactor)
        j.open(replay_journal(self.dir))
        r = key_record(7)
        first = j.append((r,), len(r))
        yield j.stop()
        self.assertEqual(self.successResultOf(first), None)
        self.assertEqual([rec[1] for rec in replay_journal(self.dir).records], [7])
        j = Journal(self.dir, reactor)
        j.open(replay_journal(self.dir))
        lost = j.append((key_record(8),), len(r))
        j.halt()
        self.assertNoResult(lost)
        self.assertEqual([rec[1] for rec in replay_journal(self.dir).records], [7])


    def _drop_region(self, file_id: int, start: int, end: int) -> None:
        """What a power cut leaves of pages a failed fdatasync dropped: zeros."""
        with open(journal_path(self.dir, file_id), "r+b") as f:
            f.seek(start)
            f.write(bytes(end - start))

    def _fail_one(self, j, ledger_id: int) -> list:
        """Append one record in a turn whose fdatasync fails; the failures it got."""
        failed = []
        r = key_record(ledger_id)
        j.append((r,), len(r)).addErrback(failed.append)
        j._reactor.advance(0)
        return failed

    def test_records_acknowledged_after_a_failed_fsync_survive_a_crash(self):
        """A failed fdatasync refuses its group (JournalWriteError: the bookie answers unavailable) and
        the next group goes to a new file. The failed group's pages may never reach the disk; replay
        reads a file up to its first bad record, so a record acknowledged after that hole in the same
        file would be lost at the next crash. In a new file it is replayed."""
        j = self.journal()
        fired = []
        r1 = key_record(1)
        j.append((r1,), len(r1)).addCallback(fired.append)
        j._reactor.advance(0)
        first_file, hole_start = j.file_id, j._offset
        self.sync_errors.append(OSError(5, "Input/output error"))
        failed = self._fail_one(j, 2)
        self.assertEqual([f.type for f in failed], [journal_module.JournalWriteError])
        # The bookie answers it as unavailable (the writer replaces it), not as an unexpected error.
        self.assertEqual(status_for(failed[0].value), bookie_pb2.UNAVAILABLE)
        hole_end = j._dirty_end
        r3 = key_record(3)
        j.append((r3,), len(r3)).addCallback(fired.append)
        j._reactor.advance(0)
        self.assertEqual(fired, [None, None])
        self.assertEqual(j.file_id, first_file + 1)
        os.close(j._fd)
        j._fd = -1
        self._drop_region(first_file, hole_start, hole_end)
        self.assertEqual([rec[1] for rec in replay_journal(self.dir).records], [1, 3])

    def test_a_failure_is_logged_once_while_new_files_fail_too(self):
        """A disk that takes each new file's header but fails each group's fdatasync makes one
        episode, logged once when it starts and once when a group is on disk again, not twice per
        group; and one new file for it, not one per group: the file made after the failure holds
        no acknowledged record, so the next groups are written in it again."""
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        j = self.journal()
        r1 = key_record(1)
        j.append((r1,), len(r1))
        j._reactor.advance(0)
        first_file = j.file_id
        eio = OSError(5, "Input/output error")
        self.sync_errors += [eio, None, eio, eio]     # group, (new file's header, group), group
        for ledger_id in (2, 3, 4):
            self.assertEqual(len(self._fail_one(j, ledger_id)), 1)
        self.assertEqual(j.file_id, first_file + 1)
        fired = []
        r5 = key_record(5)
        j.append((r5,), len(r5)).addCallback(fired.append)
        j._reactor.advance(0)
        self.assertEqual((fired, j.file_id), ([None], first_file + 1))
        mine = [e["log_level"] for e in events if e.get("log_namespace") == journal_module.log.namespace]
        self.assertEqual(mine, [LogLevel.error, LogLevel.info])
        self.assertEqual(sorted(os.listdir(self.dir)), [os.path.basename(journal_path(self.dir, f))
                                                        for f in (first_file, first_file + 1)])

    def test_a_file_written_again_after_a_failure_replays_only_what_was_acknowledged(self):
        """A group refused in a file that holds no acknowledged record is written over by the next,
        and what the refused group left past the next one's end is zeroed: replay reads the
        acknowledged records and stops, never taking a refused one for stored."""
        j = self.journal()
        self.sync_errors.append(OSError(5, "Input/output error"))
        long_record = key_record(2) * 3       # three records in one group
        failed = []
        j.append((long_record,), len(long_record), records=3).addErrback(failed.append)
        j._reactor.advance(0)
        self.assertEqual(len(failed), 1)
        first_file, dirty = j.file_id, j._dirty_end
        fired = []
        r3 = key_record(3)
        j.append((r3,), len(r3)).addCallback(fired.append)
        j._reactor.advance(0)
        self.assertEqual((fired, j.file_id), ([None], first_file))
        self.assertLess(j._offset, dirty)
        os.close(j._fd)
        j._fd = -1
        # The refused group's bytes did reach the disk here (the failure was the fdatasync's).
        self.assertEqual([rec[1] for rec in replay_journal(self.dir).records], [3])

    def test_a_disk_full_part_way_does_not_demand_space_the_refused_group_never_took(self):
        """ENOSPC part-way through a large group (a short pwrite, then the error) in a file that
        holds no acknowledged record: the next, small group fits in the blocks already written and
        must be taken; zeroing up to where the refused group would have ended needs space the disk
        does not have, and refused every group until that much was free."""
        j = self.journal()
        full_at = j._offset + 4096      # the disk takes this much more, then it is full
        real = os.pwrite

        def pwrite(fd, data, offset):
            if offset >= full_at:
                raise OSError(28, "No space left on device")
            return real(fd, bytes(data)[:full_at - offset], offset)
        self.patch(journal_module.os, "pwrite", pwrite)
        big = key_record(2) * 200
        self.assertGreater(len(big), 4096)
        failed = []
        j.append((big,), len(big)).addErrback(failed.append)
        j._reactor.advance(0)
        self.assertEqual(len(failed), 1)
        fired = []
        r3 = key_record(3)
        j.append((r3,), len(r3)).addCallbacks(fired.append, fired.append)
        j._reactor.advance(0)
        self.assertEqual(fired, [None])
        os.close(j._fd)
        j._fd = -1
        self.assertEqual([rec[1] for rec in replay_journal(self.dir).records], [3])

    def test_a_failed_new_file_is_retried(self):
        """When making the new file fails too (its header's fdatasync), that group is refused as
        well and the next one tries again; nothing is acknowledged before a write succeeds."""
        j = self.journal()
        r1 = key_record(1)
        j.append((r1,), len(r1))
        j._reactor.advance(0)
        first_file = j.file_id
        self.sync_errors += [OSError(5, "Input/output error"), OSError(5, "Input/output error")]
        self.assertEqual(len(self._fail_one(j, 2)), 1)      # the group's fdatasync
        self.assertEqual(len(self._fail_one(j, 3)), 1)      # the new file's header
        self.assertEqual(j.file_id, first_file)
        fired = []
        r4 = key_record(4)
        j.append((r4,), len(r4)).addCallback(fired.append)
        j._reactor.advance(0)
        self.assertEqual((fired, j.file_id), ([None], first_file + 1))
        os.close(j._fd)
        j._fd = -1
        self.assertIn(4, [rec[1] for rec in replay_journal(self.dir).records])


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
