"""
The bookie's write-ahead journal: one writer thread, group commit, replay after a crash.

The reactor thread queues encoded records (``Journal.append``); one dedicated writer thread takes everything
queued, waits for more only while none of BookKeeper's three group-commit conditions holds (the oldest
queued record has waited ``max_group_wait_ms``, ``buffered_bytes_threshold`` bytes are queued,
``buffered_entries_threshold`` records are queued), then does ONE write and ONE fdatasync for the whole
group and hands the group back to the reactor with ONE ``callFromThread`` that fires all its Deferreds
(one for several groups, when the reactor has not yet taken the previous ones).

With ``flush_when_queue_empty`` (BookKeeper's ``journalFlushWhenQueueEmpty``) the writer does not wait
for a group to fill: it writes whatever is queued the moment it is free. At a low rate every record is
then written and fsynced alone, at once, instead of waiting ``max_group_wait_ms`` for company that never
comes; under load the records that arrive while one group is being written and fsynced form the next
group, so grouping adapts to the rate by itself (the group is as large as one fsync's worth of arrivals)
and the thresholds still cut groups that grow too large.

With ``inline_sync_max_ms`` (on by default, only with ``flush_when_queue_empty``) the reactor thread
writes and fsyncs itself, once per reactor turn, for everything appended during that turn, and fires the
records' waiters straight after: the way Redis's ``appendfsync always`` flushes before its event loop
sleeps. A durable add then costs no thread hand-off at all (no condition-variable wake of the writer, no
GIL hand-over, no waker-pipe wake of the reactor), which at low and moderate rates is most of both its
latency and its CPU; under load a turn's group is everything read from the sockets in that turn. The
price is that the reactor waits for the fsync, so the journal measures it: when fsyncs average more than
``inline_sync_max_ms`` (a slow or busy disk) it goes back to the writer thread, and returns once the
thread's fsyncs are fast again.

Record formats are in ``formats.py``; ``replay_journal`` reads them back at start.
"""

import os
import threading
import time
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.prealloc import Preallocator
from pulsar_twisted.common.bk_errors import BookieUnavailableError
from pulsar_twisted.common.latency import LatencySummary
from pulsar_twisted.net import handback

log = Logger()

_SUFFIX = ".txn"


def journal_path(journal_dir: str, file_id: int) -> str:
    return os.path.join(journal_dir, f"{file_id:x}{_SUFFIX}")


def list_journal_files(journal_dir: str) -> list[tuple[int, str]]:
    """``(file_id, path)`` of every ``*.txn`` file, oldest first; other names are ignored."""
    found = []
    for name in os.listdir(journal_dir):
        if name.endswith(_SUFFIX):
            try:
                found.append((int(name[:-len(_SUFFIX)], 16), os.path.join(journal_dir, name)))
            except ValueError:
                continue
    found.sort()
    return found


def fsync_dir(path: str) -> None:
    """Make a file creation/removal in ``path`` durable (the directory entry, not just the data)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_durable_dir(path: str) -> None:
    """Create ``path`` (and missing parents) and make its name durable: a directory's entry lives in
    its parent, so each created level's parent is fsynced, and ``path``'s own parent always (it may
    have been created by someone who never synced it). Without this, a power cut soon after the
    first start can take the whole directory, with every file fsynced in it, away."""
    path = os.path.abspath(path)
    created = []
    level = path
    while not os.path.isdir(level):
        created.append(level)
        parent = os.path.dirname(level)
        if parent == level:
            break
        level = parent
    os.makedirs(path, exist_ok=True)
    for parent in dict.fromkeys([os.path.dirname(p) for p in created] + [os.path.dirname(path)]):
        fsync_dir(parent)


@dataclass
class ReplayResult:
    """What ``replay_journal`` found.

    ``records``: ``(rtype, ledger_id, entry_id, payload)`` after the last checkpoint mark, in journal order.
    ``append_file`` / ``append_offset``: where new records may go (the last file, its torn tail cut off), or
    None when the last file is unusable and a new one must be started at ``next_file_id``.
    """

    records: list = field(default_factory=list)
    checkpoint: tuple[int, int] | None = None
    append_file: int | None = None
    append_offset: int = 0
    next_file_id: int = 1
    problems: list[str] = field(default_factory=list)


def replay_journal(journal_dir: str) -> ReplayResult:
    """Scan every journal file (blocking: run it in a thread) and return the records to re-apply.

    Each file is read up to its first bad record (torn, CRC mismatch, junk), which is logged; later files
    are still read, since a record there was written (and maybe acknowledged) after the bad one. Only the
    last file is repaired: its tail past the last intact record is cut off so appends follow valid data.
    A last file that is empty or holds a partial header gets a fresh header; one with a junk header is
    left alone and a new file is started after it.
    """
    result = ReplayResult()
    pending = []  # (file_id, offset, rtype, ledger_id, entry_id, payload)
    files = list_journal_files(journal_dir)
    for index, (file_id, path) in enumerate(files):
        last = index == len(files) - 1
        result.next_file_id = file_id + 1
        with open(path, "r+b") as f:
            head = f.read(formats.JOURNAL_HEADER.size)
            try:
                formats.decode_journal_header(head)
            except formats.FormatError as e:
                if len(head) < formats.JOURNAL_HEADER.size and last:
                    # A crash between creating the file and making its header durable: start it afresh.
                    _rewrite(f, formats.encode_journal_header(file_id))
                    result.append_file, result.append_offset = file_id, formats.JOURNAL_HEADER.size
                else:
                    _problem(result, path, f"unreadable header ({e}); file skipped")
                continue
            scanner = formats.RecordScanner.journal(f)
            for offset, rtype, ledger_id, entry_id, payload in scanner:
                if rtype == formats.REC_CHECKPOINT:
                    result.checkpoint = mark = (ledger_id, entry_id)
                    pending = [r for r in pending if (r[0], r[1]) >= mark]
                else:
                    pending.append((file_id, offset, rtype, ledger_id, entry_id, payload))
            if scanner.problem is not None:
                _problem(result, path, f"{scanner.problem} at offset {scanner.valid_end}; rest of file ignored")
            if last and (scanner.problem is not None or os.fstat(f.fileno()).st_size > scanner.valid_end):
                # A torn tail, or the space preallocated past the last record: appends go right
                # after the last intact record, with nothing left behind it that a later replay
                # could take for records (the preallocation starts afresh).
                f.truncate(scanner.valid_end)
                f.flush()
                os.fdatasync(f.fileno())
            if last:
                result.append_file, result.append_offset = file_id, scanner.valid_end
    mark = result.checkpoint or (-1, -1)
    result.records = [r[2:] for r in pending if (r[0], r[1]) >= mark]
    return result


def _rewrite(f, header: bytes) -> None:
    f.seek(0)
    f.truncate(0)
    f.write(header)
    f.flush()
    os.fdatasync(f.fileno())


def _problem(result: ReplayResult, path: str, text: str) -> None:
    result.problems.append(f"{path}: {text}")
    log.warn("journal {path}: {problem}", path=path, problem=text)


class JournalStoppedError(Exception):
    """The journal is stopped (or halted) and takes no more records."""


class JournalWriteError(BookieUnavailableError):
    """A group's write or fdatasync failed (the disk said so): its records were not stored. The
    bookie answers such an add as unavailable, so the writer takes it to another bookie, as it would
    from a bookie that died; the journal logs the failure once, not once per add."""


def _errback(d, failure) -> None:
    """Fail one record's Deferred or waiter; a waiter's exception is logged (as a Deferred would
    keep it), so the records after it still hear."""
    try:
        d.errback(failure)
    except Exception:
        log.failure("journal: a record's failure callback failed")


class Journal:
    """The append side of the journal: a queue, one writer thread, group commit.

    ``THREAD_DWELL_S``: once fsyncs were too slow for the reactor, the writer thread keeps the
    writes at least this long before the reactor takes them back. ``TURN_MAX_RECORDS`` /
    ``TURN_MAX_BYTES``: the largest turn the reactor writes itself.

    Call ``open`` with a ``ReplayResult`` to start the thread; ``append`` and ``mark`` from the reactor
    thread only; ``stop`` drains the queue and ends the thread; ``trim`` (any thread) deletes old files.
    """

    THREAD_DWELL_S = 10.0
    #: A reactor turn with more records or bytes than this goes to the writer thread.
    TURN_MAX_RECORDS = 16
    TURN_MAX_BYTES = 256 * 1024

    def __init__(self, journal_dir: str, reactor, *, sync_data: bool = True, max_group_wait_ms: float = 2.0,
                 buffered_bytes_threshold: int = 512 * 1024, buffered_entries_threshold: int = 0,
                 max_size_mb: int = 2048, flush_when_queue_empty: bool = True,
                 inline_sync_max_ms: float = 1.0, prealloc_bytes: int = 0):
        self._dir = journal_dir
        self._flush_when_empty = flush_when_queue_empty
        self._reactor = reactor
        self._sync = sync_data
        self._max_wait = max_group_wait_ms / 1000.0
        self._bytes_threshold = buffered_bytes_threshold
        self._entries_threshold = buffered_entries_threshold
        self._max_size = max_size_mb * 1024 * 1024
        self._cond = threading.Condition(threading.Lock())
        # (chunks | None, nbytes, Deferred, monotonic time queued, records); None chunks = a mark
        self._queue = []
        self._queued_bytes = 0
        self._head_time = 0.0       # monotonic time the oldest queued record arrived
        self._idle = False          # the writer waits for a first record: the next append must notify
        self._gathering = False     # the writer waits for more: notify only once a threshold is reached
        self._stopping = False
        self._halted = False
        self._thread = None
        self._stop_waiters = []
        self._done_lock = threading.Lock()
        self._done = []             # written groups not yet handed back to the reactor
        self._finished = False
        self._fd = -1
        self.file_id = 0
        self._offset = 0
        #: Allocated space ahead of ``_offset`` (prealloc.py; BookKeeper's journalPreAllocSizeMB).
        self.prealloc = Preallocator(prealloc_bytes, limit=self._max_size)
        self.groups = 0
        self.fsyncs = 0
        self.records = 0
        self.bytes_written = 0
        #: Time from append to durable per record, and fdatasync durations, in ms (for /metrics:
        #: BookKeeper's bookie_journal_JOURNAL_ADD_ENTRY and bookie_journal_JOURNAL_SYNC).
        self.add_latency = LatencySummary()
        self.sync_latency = LatencySummary()
        # Reactor-turn writes (module docstring). ``_inline``: appends go to ``_turn`` and are written
        # by ``_write_turn`` at the end of the reactor turn; otherwise they go to the writer thread.
        self._inline_max = inline_sync_max_ms / 1000.0 if flush_when_queue_empty else 0.0
        self._inline = self._inline_max > 0
        self._turn = []             # records appended during this reactor turn (inline mode)
        self._turn_bytes = 0        # their bytes
        self._turn_records = 0      # and records (an item may hold several: ``append``)
        self._turn_call = None      # the DelayedCall that writes them
        self._sync_avg = 0.0        # moving average of recent fdatasync durations, s
        #: Times the journal moved its writes between the reactor thread and the writer thread.
        self.mode_switches = 0
        self._switched_at = 0.0     # monotonic time of the last move to the writer thread
        self._switch_logged = -60.0
        #: A group failed part-way: the next one starts a new file (``_write_records``).
        self._roll_next = False
        #: The end of what was written to the current file, failed groups included, and whether
        #: it holds a record that was acknowledged (a failure then makes a new file).
        self._dirty_end = 0
        self._holds_acked = False
        #: Groups fail since the last one written and fdatasync'd: the failure was logged.
        self._failing = False

    # ----------------------------------------------------------------------------- reactor-thread API

    def open(self, replay: ReplayResult) -> None:
        """Open the file to append to (as ``replay_journal`` decided) and start the writer thread."""
        if replay.append_file is not None:
            self.file_id = replay.append_file
            self._fd = os.open(journal_path(self._dir, self.file_id), os.O_WRONLY)
            self._offset = self._dirty_end = replay.append_offset
            self._holds_acked = self._offset > formats.JOURNAL_HEADER.size
            self.prealloc.reset(self._fd, self._offset)
        else:
            self._create(replay.next_file_id)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    def append(self, chunks: tuple, nbytes: int, waiter=None, records: int = 1) -> Deferred:
        """Queue one record (``b"".join(chunks)``, ``nbytes`` long). The Deferred fires with None once it is
        written (and fdatasync'd when ``sync_data``); it fails if the write fails or the journal stopped.
        ``records``: how many records ``chunks`` holds when it is several written together (a batch of
        adds: one waiter, one queue item and one hand-back call for them all; counted as ``records``
        in the statistics and by ``TURN_MAX_RECORDS``, as one by ``buffered_entries_threshold`` and
        by the add latency summary).

        ``waiter``: instead of a Deferred (None is returned), an object whose ``callback(None)`` or
        ``errback(failure)`` is called at the same moments, with a Failure, on the reactor thread: the
        in-process add path, which would otherwise make a Deferred per entry only to add one callback.
        An exception from a waiter is logged; the rest of its group still fires."""
        # The waiter itself goes in the queue (no adapter per record): every place that fires
        # records catches what a callback raises, as a Deferred would.
        d = Deferred() if waiter is None else waiter
        self._add(chunks, nbytes, d, records)
        return d if waiter is None else None

    def _add(self, chunks, nbytes: int, d, records: int = 1) -> None:
        if not self._inline:
            self._enqueue_all([(chunks, nbytes, d, time.monotonic(), records)], nbytes)
            return
        if self._stopping:
            _errback(d, Failure(JournalStoppedError("journal stopped")))
            return
        self._turn.append((chunks, nbytes, d, time.monotonic(), records))
        self._turn_bytes += nbytes
        self._turn_records += records
        if self._turn_call is None:
            # callLater(0) runs once the reactor has handled every I/O event of this poll: the turn's
            # group is all that was read in it.
            self._turn_call = self._reactor.callLater(0, self._write_turn)

    def mark(self) -> Deferred:
        """Deferred firing with ``(file_id, offset)``: the journal position just after every record queued
        before this call and before every record queued after it (a checkpoint's replay start)."""
        d = Deferred()
        self._add(None, 0, d, 0)
        return d

    def stop(self) -> Deferred:
        """Write everything queued, close the file and end the thread; the Deferred fires after that."""
        if self._turn_call is not None and self._turn_call.active():
            self._turn_call.cancel()
        self._write_turn()
        if self._thread is None or self._finished:
            return succeed(None)
        d = Deferred()
        self._stop_waiters.append(d)
        with self._cond:
            self._stopping = True
            self._cond.notify()
        return d

    def halt(self) -> None:
        """End the thread at once, dropping what is queued (their Deferreds never fire): a crash, for
        tests. Blocks until the thread has finished its current write."""
        if self._turn_call is not None and self._turn_call.active():
            self._turn_call.cancel()
        self._turn_call, self._turn, self._turn_bytes, self._turn_records = None, [], 0, 0
        with self._cond:
            self._halted = self._stopping = True
            self._queue = []
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def trim(self, before_file_id: int) -> list[int]:
        """Delete the journal files older than ``before_file_id`` (never the current one); return their ids.
        Blocking: call it from a thread."""
        removed = []
        for file_id, path in list_journal_files(self._dir):
            if file_id < before_file_id and file_id != self.file_id:
                os.unlink(path)
                removed.append(file_id)
        if removed:
            fsync_dir(self._dir)
        return removed

    def queue_length(self) -> int:
        """Records and marks waiting to be written (a gauge: read without the lock)."""
        return len(self._queue) + len(self._turn)

    @property
    def inline(self) -> bool:
        """Whether the reactor thread writes the journal now (else the writer thread does)."""
        return self._inline

    def _write_turn(self) -> None:
        """Reactor thread, end of a turn: write and fsync this turn's records and fire their waiters,
        if the turn is small and the writer thread holds nothing; else queue them for the thread."""
        self._turn_call = None
        group, self._turn = self._turn, []
        turn_bytes, self._turn_bytes = self._turn_bytes, 0
        turn_records, self._turn_records = self._turn_records, 0
        if not group:
            return
        if (turn_records > self.TURN_MAX_RECORDS or turn_bytes > self.TURN_MAX_BYTES
                or not self._thread_idle()):
            # Under load the writer thread's pipeline (the reactor reads the next records while a
            # group is fsynced) carries more than the reactor waiting for each fsync would, and the
            # hand-off then costs little per record; a group queued behind the thread's keeps order.
            self._enqueue_all(group, turn_bytes)
            return
        written = self._write_records(group)
        handback.begin()
        try:
            self._fire_group(*written)
        finally:
            handback.end()
        if self._sync_avg > self._inline_max:
            # A slow disk: the reactor must not wait for it. The writer thread is idle (every
            # record so far went through the turn), so it can take over at once.
            self._inline = False
            self._switched_at = time.monotonic()
            self._mode_switched("fdatasync averages {ms:.2f} ms, over journalInlineSyncMaxMillis: "
                                "the writer thread takes the writes")

    def _thread_idle(self) -> bool:
        """The writer thread waits for a first record and nothing of it awaits hand-back."""
        with self._cond:
            if not self._idle or self._queue:
                return False
        with self._done_lock:
            return not self._done

    def _enqueue_all(self, group: list, nbytes: int) -> None:
        """Hand records ``(chunks, nbytes, waiter, time queued, records)``, in order, to the writer thread;
        ``nbytes``: their bytes."""
        with self._cond:
            if self._stopping:
                stopped = Failure(JournalStoppedError("journal stopped"))
                for item in group:
                    _errback(item[2], stopped)
                return
            if not self._queue:
                self._head_time = group[0][3]
            self._queue.extend(group)
            self._queued_bytes += nbytes
            # Wake the writer only when it matters, so a burst of adds does not cost a thread switch each.
            if self._idle:
                self._idle = False
                self._cond.notify()
            elif self._gathering and self._threshold_reached():
                self._gathering = False
                self._cond.notify()

    def _maybe_back_inline(self) -> None:
        """Reactor thread, after a thread group: back to turn writes once fsyncs are fast again and
        the thread holds nothing (it waits for a first record and nothing awaits hand-back)."""
        if (self._inline_max <= 0 or self._sync_avg > self._inline_max / 2 or self._stopping
                or time.monotonic() - self._switched_at < self.THREAD_DWELL_S):
            return
        with self._cond:
            if not (self._idle and not self._queue):
                return
            with self._done_lock:
                if self._done:
                    return
            self._inline = True
        self._mode_switched("fdatasync averages {ms:.2f} ms again: the reactor writes the journal")

    def _mode_switched(self, text: str) -> None:
        """Count a switch; log it, at most once a minute at info level (a disk whose fsync time
        hovers at the limit would otherwise fill the log)."""
        self.mode_switches += 1
        now = time.monotonic()
        quiet = now - self._switch_logged < 60.0
        if not quiet:
            self._switch_logged = now
        (log.debug if quiet else log.info)("journal: " + text + " ({n} switches so far)",
                                           ms=self._sync_avg * 1000.0, n=self.mode_switches)

    def _threshold_reached(self) -> bool:
        return (self._queued_bytes >= self._bytes_threshold
                or (self._entries_threshold > 0 and len(self._queue) >= self._entries_threshold))

    def _fire_done(self) -> None:
        """Reactor thread: fire every group written since the last hand-back, in write order."""
        with self._done_lock:
            done, self._done = self._done, []
        handback.begin()
        try:
            for group in done:
                self._fire_group(*group)
        finally:
            handback.end()
        if not self._inline and self._inline_max > 0:
            self._maybe_back_inline()

    def _fire_group(self, results: list, error, records: int, nbytes: int, fsync_s) -> None:
        """Reactor thread: account for one group and fire all its Deferreds. ``fsync_s``: how long
        the group's fdatasync took (None: none was made)."""
        self.groups += 1
        self.records += records
        self.bytes_written += nbytes
        if fsync_s is not None:
            self.fsyncs += 1
            self.sync_latency.observe(fsync_s * 1000.0)
            self._sync_avg += (fsync_s - self._sync_avg) * 0.05
        now = time.monotonic()
        if error is not None:
            for d, _, _ in results:
                _errback(d, error)
            return
        latency = self.add_latency
        for d, value, queued in results:
            if queued is not None:
                latency.observe((now - queued) * 1000.0)
            # A Deferred or an append(..., waiter=) waiter: its exception is logged, as a Deferred
            # would keep it, and the rest of the group still fires.
            try:
                d.callback(value)
            except Exception:
                log.failure("journal: a record's completion callback failed")

    # -------------------------------------------------------------------------------- writer thread

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                break
            self._write_group(group)
        try:
            if self._fd >= 0:
                self.prealloc.reset(-1, 0)
                os.close(self._fd)
        except OSError as e:
            # Every record was answered already; a stop must still end (it waits for this).
            log.error("journal: closing file {id:x} failed: {err}", id=self.file_id, err=e)
        finally:
            self._fd = -1
            if not self._halted:
                self._reactor.callFromThread(self._thread_finished)

    def _thread_finished(self) -> None:
        self._finished = True
        waiters, self._stop_waiters = self._stop_waiters, []
        for d in waiters:
            d.callback(None)

    def _take_group(self):
        """Block until there is a group to write (per the three conditions); None when stopping."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._idle = True
                self._cond.wait()
            self._idle = False
            if self._halted or not self._queue:
                return None
            if self._flush_when_empty:
                # Write now: what arrives meanwhile is the next group (see the module docstring).
                return self._take_all()
            deadline = self._head_time + self._max_wait
            while not self._stopping and not self._threshold_reached():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._gathering = True
                self._cond.wait(remaining)
            self._gathering = False
            return self._take_all()

    def _take_all(self) -> list:
        """Everything queued, as one group (the condition held)."""
        group, self._queue, self._queued_bytes = self._queue, [], 0
        return group

    def _write_group(self, group: list) -> None:
        written = self._write_records(group)
        # Coalesced hand-back: one reactor wake-up for all the groups written while the reactor had not
        # yet run the previous hand-back (a busy reactor then fires several groups in one turn instead
        # of paying a waker-pipe wake-up for each).
        with self._done_lock:
            self._done.append(written)
            wake = len(self._done) == 1
        if wake:
            self._reactor.callFromThread(self._fire_done)

    def _write_records(self, group: list) -> tuple:
        """Write (and fdatasync) one group, on whichever thread writes now; return what
        ``_fire_group`` needs: ``(results, error, records, nbytes, fsync_s)``."""
        results, parts = [], []
        records = nbytes = 0
        fsync_s = None
        error = None
        try:
            if (self._offset >= self._max_size or self._roll_next) and any(item[0] is not None
                                                                          for item in group):
                self._roll()
                self._roll_next = False
            position = self._offset
            for chunks, n, d, queued, count in group:
                if chunks is None:
                    results.append((d, (self.file_id, position), None))
                else:
                    parts.extend(chunks)
                    position += n
                    records += count
                    results.append((d, None, queued))
            if parts:
                data = b"".join(parts)
                nbytes = len(data)
                end = self._offset + nbytes
                if self._dirty_end > end:
                    # A failed group's bytes lie past this one (a file written again after a
                    # failure): zeroed, so that replay stops after this group and never reads
                    # a record that was refused.
                    data += bytes(self._dirty_end - end)
                self.prealloc.claim(self._offset + len(data))
                # ``_dirty_end`` follows what the disk took (``_pwrite_all``): past it the file
                # reads as its end or allocated zeros, and zeroing up to where a group refused
                # part-way (ENOSPC) would have ended needs blocks the next group does not.
                self._pwrite_all(data, self._offset)
                if self._sync:
                    started = time.monotonic()
                    os.fdatasync(self._fd)
                    fsync_s = time.monotonic() - started
                self._offset = self._dirty_end = end
                self._holds_acked = True
                if self._failing:
                    # Only a group on disk ends the episode: a new file can be made on a disk that
                    # still fails every group's fdatasync (a log line per group, and per file, then).
                    self._failing = False
                    log.info("journal: writes go on in file {id:x} after the failure", id=self.file_id)
        except Exception as e:
            error = Failure(JournalWriteError(f"journal write failed: {e}"))
            # Every record of the group hears, also when the failure came before they were listed
            # (a new file that could not be made).
            results = [(item[2], None, None) for item in group]
            # What the file holds past the last good group is unknown now: a failed fdatasync may
            # have dropped those pages, and replay reads a file only up to its first bad record, so
            # a record acknowledged after the hole would be lost at the next crash (and cut off as
            # a torn tail). BookKeeper stops the bookie; we refuse this group and start a new file
            # for the next (replay reads every file), retrying until the disk takes it. A file that
            # holds no acknowledged record yet (the new one, failing too) is written again instead,
            # from where its records start (see the zeroing above): a disk that keeps failing makes
            # one new file per episode, not one per group.
            self._roll_next = self._holds_acked
            if not self._failing:
                self._failing = True
                text = ("journal: writing {n} records to file {id:x} failed ({err}); they are refused "
                        "and the next write {where}")
                where = ("starts a new file" if self._roll_next else
                         "goes where they were, in this file (it holds no acknowledged record)")
                if isinstance(e, OSError):
                    log.error(text, n=len(group), id=self.file_id, err=e, where=where)
                else:
                    # Not the disk: a bug, whose traceback is what tells where.
                    log.failure(text, Failure(), n=len(group), id=self.file_id, err=e, where=where)
        return results, error, records, nbytes, fsync_s

    def _pwrite_all(self, data: bytes, offset: int) -> None:
        # pwrite at our own offset rather than O_APPEND: after a failed (partial) write the next group
        # overwrites the garbage instead of following it.
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written
            if offset > self._dirty_end:
                self._dirty_end = offset

    def _roll(self) -> None:
        old = self._fd
        self._create(self.file_id + 1)
        os.close(old)

    def _create(self, file_id: int) -> None:
        path = journal_path(self._dir, file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            header = formats.encode_journal_header(file_id)
            os.write(fd, header)
            os.fdatasync(fd)
            fsync_dir(self._dir)
        except BaseException:
            os.close(fd)    # the next attempt makes the same file afresh (O_TRUNC)
            raise
        self._fd, self.file_id, self._offset = fd, file_id, len(header)
        self._dirty_end, self._holds_acked = self._offset, False
        self.prealloc.reset(fd, len(header))
