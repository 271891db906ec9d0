"""
BookieStorage: a bookie's local storage (BookKeeper's Bookie + SortedLedgerStorage, in small parts).

Write path: ``add_entry`` puts the entry in the write cache (readable at once, as BookKeeper serves reads
from its write cache) and queues a journal record; its Deferred fires when the journal group holding the
record is on disk. A checkpoint (every ``flush_interval_ms``, or when the cache passes
``write_cache_max_bytes``) moves the cache into the entry logs, writes the index, and only then writes a
CHECKPOINT mark into the journal so replay can start there and older journal files can go.

Read path: write cache, then the cache being flushed, then index -> entry log (CRC checked).

Fenced and deleted ledgers: a fence is a journal record, then a flag in the index header, so it survives
restarts and crashes. A deleted ledger is remembered for good (its DELETE journal record, then the
index's deleted list, fsynced before the index file goes): adds, recovery adds and fences to it are
refused and reads answer NoSuchLedger. Real BookKeeper bookies forget a deleted ledger (its index goes
at GC) and re-create it on the next add; here a stale writer cannot bring it back (issue 11).

Threads: the reactor thread owns all in-memory state. The journal has its own writer thread; the disk work
of checkpoints, GC and start-up runs in one single-threaded pool owned by this object, so checkpoint and GC
file writes never interleave. Reads of flushed entries (index slot + record, two preads) run in a read
thread of their own: at page-cache speed a pread costs microseconds, but a cold one blocks for milliseconds,
and on the reactor that stalled every connection while a backlog not in memory was drained. The reads
issued while one batch is out go as the next batch, so a dispatcher's range read costs one thread hop,
not one per entry; a separate thread, so reads never wait behind a checkpoint.
"""

import os

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from pulsar_twisted.bookie import cookie, formats
from pulsar_twisted.bookie.entrylog import EntryLogger, EntryLogMissing
from pulsar_twisted.bookie.index import LedgerIndex
from pulsar_twisted.bookie.journal import Journal, ensure_durable_dir, replay_journal
from pulsar_twisted.common.threads import GIL_YIELD_EVERY, yield_gil
from pulsar_twisted.common.bk_errors import (
    BookieReadOnlyError, BookieUnavailableError, DigestMismatchError, LedgerFencedError, NoSuchEntryError,
    NoSuchLedgerError, UnauthorizedAccessError)

log = Logger()

_GC_BATCH_BYTES = 16 * 1024 * 1024


class _Ledger:
    """In-memory state of one ledger (its durable copy: journal records, then the index file header)."""

    __slots__ = ("master_key", "fenced", "lac", "last_entry", "key_journaled")

    def __init__(self, master_key: bytes, fenced: bool = False, lac: int = -1, last_entry: int = -1,
                 key_journaled: bool = True):
        self.master_key = master_key
        self.fenced = fenced
        self.lac = lac
        self.last_entry = last_entry
        #: A journal record carrying the master key is durable (or the index holds the key). Until
        #: then every ADD record of the ledger takes a MASTER_KEY record with it (``add_entries``).
        self.key_journaled = key_journaled

    def header(self) -> bytes:
        return formats.encode_index_header(self.master_key, self.fenced, self.lac)


class _KeyJournaled:
    """An add's waiter while its ledger's MASTER_KEY record rides in the same journal append: once
    that append is durable, so is the key, and later adds need not carry it. A waiter object rather
    than a Deferred callback, so the add path keeps taking plain waiters (``Journal.append``)."""

    __slots__ = ("ledger", "waiter")

    def __init__(self, ledger: _Ledger, waiter):
        self.ledger, self.waiter = ledger, waiter

    def callback(self, value) -> None:
        self.ledger.key_journaled = True
        self.waiter.callback(value)

    def errback(self, failure) -> None:
        self.waiter.errback(failure)


def _key_journaled(result, ledger: _Ledger):
    """A FENCE record (it carries the master key) is durable: so is the ledger's key."""
    ledger.key_journaled = True
    return result


class BookieStorage(Service):
    """One bookie's ledger storage. See the module docstring for the design.

    Beyond the journal/cache settings named after BookKeeper's: ``gc_wait_time_ms`` is the period of the
    background GC and ``gc_compaction_threshold`` the live fraction under which GC compacts a log.
    ``flush_interval_ms`` or ``gc_wait_time_ms`` of 0 turns that periodic work off (tests call
    ``checkpoint()`` and ``gc()`` themselves).

    ``start``/``stop`` (also ``startService``/``stopService``) return Deferreds. All other methods are for
    the reactor thread only. Errors are the ``pulsar_twisted.common.bk_errors`` exceptions.
    """

    def __init__(self, journal_dir: str, ledger_dirs: list[str], reactor, *,
                 journal_sync_data: bool = True,
                 journal_max_group_wait_ms: float = 2.0,
                 journal_buffered_writes_threshold: int = 512 * 1024,
                 journal_buffered_entries_threshold: int = 0,
                 journal_max_size_mb: int = 2048,
                 journal_flush_when_queue_empty: bool = True,
                 journal_inline_sync_max_ms: float = 1.0,
                 journal_prealloc_mb: int = 0,
                 entry_log_size_limit: int = 1024 * 1024 * 1024,
                 flush_interval_ms: int = 1000,
                 write_cache_max_bytes: int = 64 * 1024 * 1024,
                 gc_wait_time_ms: int = 60_000,
                 gc_compaction_threshold: float = 0.5):
        if not ledger_dirs:
            raise ValueError("at least one ledger dir is needed")
        self._reactor = reactor
        self._journal_dir = journal_dir
        self._ledger_dirs = list(ledger_dirs)
        self._journal = Journal(journal_dir, reactor, sync_data=journal_sync_data,
                                max_group_wait_ms=journal_max_group_wait_ms,
                                buffered_bytes_threshold=journal_buffered_writes_threshold,
                                buffered_entries_threshold=journal_buffered_entries_threshold,
                                max_size_mb=journal_max_size_mb,
                                flush_when_queue_empty=journal_flush_when_queue_empty,
                                inline_sync_max_ms=journal_inline_sync_max_ms,
                                prealloc_bytes=journal_prealloc_mb * 1024 * 1024)
        self._entry_logs = EntryLogger(self._ledger_dirs, entry_log_size_limit)
        self._index = LedgerIndex(os.path.join(self._ledger_dirs[0], "index"))
        self._flush_interval = flush_interval_ms / 1000.0
        self._cache_max = write_cache_max_bytes
        self._gc_interval = gc_wait_time_ms / 1000.0
        self._compaction_threshold = gc_compaction_threshold
        self._pool = ThreadPool(minthreads=1, maxthreads=1, name="bookie-storage")
        # Reads that miss the write cache go to the disk in their own thread (never on the reactor,
        # never queued behind a checkpoint): ``_disk_reads`` gathers them while a batch is out.
        self._read_pool = ThreadPool(minthreads=1, maxthreads=1, name="bookie-read")
        self._disk_reads = []       # (ledger_id, entry_id, Deferred) waiting for the read thread
        self._reading = False
        self._reads_idle = []       # Deferreds fired once no read batch is out (stop waits on them)

        self._ledgers = {}          # ledger_id -> _Ledger
        self._cache = {}            # ledger_id -> {entry_id: bytes}: adds since the last checkpoint began
        self._cache_bytes = 0
        self._flushing = {}         # the cache a running checkpoint is writing; still served to reads
        self._dirty = set()         # ledgers whose header (key, fence, lac) changed since the last snapshot
        self._pending_deletes = set()   # deleted since the last snapshot: index files to remove
        self._stale_index = set()   # deleted, index file not yet removed: lookups must not trust it
        self._undurable_deletes = {}    # ledger_id -> count of DELETE records not yet on disk (for GC)
        # Deleted ledgers whose DELETE record the journal refused (a failed write): live for GC until a
        # checkpoint has put them in the index's deleted list (``_delete_durable``).
        self._refused_deletes = set()
        # Every ledger this bookie deleted (journal, then the index's deleted list): adds to them are
        # refused, so a stale writer cannot bring a deleted ledger back to life.
        self._deleted = set()
        self._flush_lock = defer.DeferredLock()
        self._flush_loop = None
        self._gc_loop = None
        self._running = False
        self._dir_locks = {}    # directory -> its flock'd descriptor while started (cookie.lock)
        self._read_only = False
        self._counters = dict(adds=0, add_bytes=0, reads=0, read_bytes=0, cache_reads=0, checkpoints=0,
                              checkpoint_failures=0, gc_runs=0, logs_deleted=0, logs_compacted=0,
                              entries_moved=0, replayed_records=0, journal_problems=0)

    @classmethod
    def from_config(cls, config, reactor) -> "BookieStorage":
        """
        The storage a configuration's journal and storage keys describe (``config.py``'s
        ``_STORAGE_KEYS``: ``BookieConfig`` for ``pulsar-bookie``, ``StandaloneConfig`` for the
        standalone's in-process bookie). The one place a daemon's BookieStorage is built, so a
        cluster bookie and a standalone bookie run the same settings.
        """
        return cls(
            config.journalDirectory, list(config.ledgerDirectories), reactor,
            journal_sync_data=config.journalSyncData,
            journal_max_group_wait_ms=config.journalMaxGroupWaitMSec,
            journal_buffered_writes_threshold=config.journalBufferedWritesThreshold,
            journal_buffered_entries_threshold=config.journalBufferedEntriesThreshold,
            journal_max_size_mb=config.journalMaxSizeMB,
            journal_flush_when_queue_empty=config.journalFlushWhenQueueEmpty,
            journal_inline_sync_max_ms=config.journalInlineSyncMaxMillis,
            journal_prealloc_mb=config.journalPreAllocSizeMB,
            entry_log_size_limit=config.logSizeLimit,
            flush_interval_ms=config.flushInterval,
            write_cache_max_bytes=config.dbStorage_writeCacheMaxSizeMb * 1024 * 1024,
            gc_wait_time_ms=config.gcWaitTime)

    # ------------------------------------------------------------------------------------ lifecycle

    def startService(self):
        Service.startService(self)
        return self.start()

    def stopService(self):
        Service.stopService(self)
        return self.stop()

    def start(self) -> defer.Deferred:
        """Create the dirs, load the index, replay the journal after the last checkpoint (cutting a torn
        tail off), start the journal thread and the periodic checkpoint and GC."""
        return defer.Deferred.fromCoroutine(self._start())

    async def _start(self):
        self._pool.start()
        self._read_pool.start()
        try:
            loaded = await deferToThreadPool(self._reactor, self._pool, self._load)
        except BaseException:
            # Refused (a damaged or newer index table...): no thread or lock left behind.
            self._read_pool.stop()
            self._pool.stop()
            cookie.unlock(self._dir_locks)
            raise
        ledgers, deleted, replay = loaded
        self._deleted = deleted
        for ledger_id, (key, fenced, lac, last_entry) in ledgers.items():
            if ledger_id in deleted:
                # Listed before its index file was removed, then a crash: finish the delete.
                self._pending_deletes.add(ledger_id)
                self._stale_index.add(ledger_id)
                continue
            self._ledgers[ledger_id] = _Ledger(key, fenced, lac, last_entry)
        for record in replay.records:
            self._apply(*record)
        self._counters["replayed_records"] = len(replay.records)
        self._counters["journal_problems"] = len(replay.problems)
        self._journal.open(replay)
        self._running = True
        log.info("bookie storage started: {ledgers} ledgers, {records} journal records replayed",
                 ledgers=len(self._ledgers), records=len(replay.records))
        if self._flush_interval > 0:
            self._flush_loop = task.LoopingCall(self._periodic_checkpoint)
            self._flush_loop.clock = self._reactor
            self._flush_loop.start(self._flush_interval, now=False)
        if self._gc_interval > 0:
            self._gc_loop = task.LoopingCall(self._periodic_gc)
            self._gc_loop.clock = self._reactor
            self._gc_loop.start(self._gc_interval, now=False)

    def _load(self):
        # The cookies first: a directory that was wiped or replaced must not be read (nor written: the
        # index table would be made afresh) as if it were the bookie's own (cookie.py). A missing
        # directory has none; each part below makes its own directory, as before cookies.
        directories = [self._journal_dir, *self._ledger_dirs, self._index.directory]
        # No other bookie process on these directories, and a refused start makes none of them.
        cookie.lock(directories, self._dir_locks)
        cookie.verify(directories)
        # Then the missing ones (a new bookie's) are made and locked before anything is written in
        # any: of two processes starting at once on one configuration, the second is refused here,
        # before it writes an index table, a journal file or a cookie beside the first's. Checked
        # again under every lock, for a first process that wrote its cookies and died meanwhile.
        for directory in directories:
            ensure_durable_dir(directory)
        cookie.lock(directories, self._dir_locks)
        instance = cookie.verify(directories)
        ledgers = self._index.load_all(table_must_exist=instance is not None)
        deleted = self._index.load_deleted()
        self._entry_logs.open()
        replay = replay_journal(self._journal_dir)
        if instance is None:
            # A new bookie, or one from before cookies: what its directories hold is read now.
            instance = cookie.write(directories)
            log.info("bookie storage: cookies written (instance {instance})", instance=instance)
        self.instance_id = instance
        return ledgers, deleted, replay

    def stop(self) -> defer.Deferred:
        """Stop the periodic work, checkpoint everything, stop the journal and the flush thread."""
        return defer.Deferred.fromCoroutine(self._stop())

    async def _stop(self):
        if not self._running:
            return
        self._stop_loops()
        await self.checkpoint()
        self._running = False
        await self._journal.stop()
        await self._reads_done_waiter()
        self._read_pool.stop()
        await deferToThreadPool(self._reactor, self._pool, self._close_files)
        self._pool.stop()

    def _close_files(self):
        self._entry_logs.close()
        self._index.close()
        cookie.unlock(self._dir_locks)

    def _stop_loops(self):
        for loop in (self._flush_loop, self._gc_loop):
            if loop is not None and loop.running:
                loop.stop()

    def simulate_crash(self) -> None:
        """Testing aid: stop every thread and timer WITHOUT writing anything more (queued journal records
        are dropped, no checkpoint), as if the process died. The instance is unusable afterwards."""
        self._running = False
        self._stop_loops()
        self._journal.halt()
        self._pool.stop()   # waits for a running checkpoint's disk work: a crash after it is still a crash
        self._read_pool.stop()
        self._entry_logs.abandon()
        self._index.close()
        cookie.unlock(self._dir_locks)     # as the dead process's would be

    # ---------------------------------------------------------------------------------------- writes

    @property
    def read_only(self) -> bool:
        return self._read_only

    @read_only.setter
    def read_only(self, flag: bool) -> None:
        self.set_read_only(flag)

    def set_read_only(self, flag: bool) -> None:
        """When set, adds fail with BookieReadOnlyError; reads, fences and deletes go on."""
        if flag != self._read_only:
            log.info("bookie storage read-only: {flag}", flag=flag)
        self._read_only = bool(flag)

    #: ``add_entry`` takes ``waiter=``, and ``add_entries`` exists (``ledger.bookies.LocalBookieClient``
    #: looks for this).
    accepts_add_waiter = True

    def add_entry(self, ledger_id: int, entry_id: int, data: bytes, master_key: bytes, lac: int = -1, *,
                  recovery_add: bool = False, waiter=None) -> defer.Deferred:
        """Store an entry; the Deferred fires (None) once it is durable in the journal. The entry is
        readable as soon as this returns. Re-adding an entry id overwrites it. An unknown ledger is
        created, unless this bookie deleted it: then LedgerFencedError, recovery add or not (a
        deleted ledger stays fenced for good).

        ``waiter``: no Deferred (None is returned); ``waiter.callback(None)`` once durable or
        ``waiter.errback(failure)`` (at once for a refused add), as ``Journal.append`` describes."""
        d = defer.Deferred() if waiter is None else waiter
        self.add_entries(ledger_id, ((entry_id, data, lac),), master_key, d, recovery_add=recovery_add)
        return d if waiter is None else None

    def add_entries(self, ledger_id: int, entries, master_key: bytes, waiter, *,
                    recovery_add: bool = False) -> None:
        """``add_entry`` for several entries of one ledger, ``entries`` ``(entry_id, data, lac)`` in
        order: every check is about the ledger, so all are stored or all refused; one journal
        append (one queue item, one hand-back) for them all. ``waiter.callback(None)`` once all are
        durable, ``waiter.errback(failure)`` once otherwise (at once for a refusal)."""
        refusal = None
        if self._read_only:
            refusal = BookieReadOnlyError(f"bookie is read-only; add {ledger_id}:{entries[0][0]} refused")
        elif not self._running:
            refusal = BookieUnavailableError("bookie storage is not running")
        elif min(entry[0] for entry in entries) < 0:
            refusal = ValueError(f"entry id {min(entry[0] for entry in entries)} < 0")
        else:
            ledger = self._ledgers.get(ledger_id)
            if ledger is None:
                if ledger_id in self._deleted:
                    refusal = LedgerFencedError(f"ledger {ledger_id} was deleted on this bookie")
                else:
                    try:
                        ledger = self._create_ledger(ledger_id, master_key)
                    except ValueError as e:
                        refusal = e
            elif ledger.master_key != master_key:
                refusal = UnauthorizedAccessError(f"master key mismatch for ledger {ledger_id}")
            if refusal is None and ledger.fenced and not recovery_add:
                refusal = LedgerFencedError(f"ledger {ledger_id} is fenced")
        if refusal is not None:
            self._refuse(waiter, refusal)
            return
        cached = self._cache.get(ledger_id)
        if cached is None:
            cached = self._cache[ledger_id] = {}
        chunks = []
        nbytes = data_bytes = added = 0
        records = len(entries)
        if not ledger.key_journaled:
            # The key goes in the same append as the entries, so in the same journal group: were
            # it a record of its own, its group could be refused (a failed write) while the
            # entries' group is acknowledged from the next journal file, and a crash that took the
            # refused group's pages would replay the entries for a ledger without its key (which
            # then refuses its own writer's adds and its reader's recovery fence).
            key = formats.encode_journal_record(formats.REC_MASTER_KEY, ledger_id, 0, ledger.master_key)
            chunks.append(key)
            nbytes += len(key)
            records += 1
            waiter = _KeyJournaled(ledger, waiter)
        encode = formats.encode_add_record_header
        for entry_id, data, lac in entries:
            if type(data) is not bytes:
                data = bytes(data)
            old = cached.get(entry_id)
            cached[entry_id] = data
            size = len(data)
            added += size - (len(old) if old is not None else 0)
            if entry_id > ledger.last_entry:
                ledger.last_entry = entry_id
            if lac > ledger.lac:
                ledger.lac = lac
                self._dirty.add(ledger_id)
            header = encode(ledger_id, entry_id, lac, data)
            chunks += (header, data)
            data_bytes += size
            nbytes += len(header) + size
        self._cache_bytes += added
        counters = self._counters
        counters["adds"] += len(entries)
        counters["add_bytes"] += data_bytes
        if self._cache_bytes > self._cache_max and not self._flush_lock.locked:
            self._start_checkpoint()
        self._journal.append(chunks, nbytes, waiter, records)

    @staticmethod
    def _refuse(d, error) -> None:
        """Fail an add at once; a waiter's exception is logged (as a Deferred would keep it)."""
        try:
            d.errback(Failure(error))
        except Exception:
            log.failure("bookie storage: an add's failure callback failed")

    def _create_ledger(self, ledger_id: int, master_key: bytes) -> _Ledger:
        if len(master_key) > formats.INDEX_MAX_KEY:
            raise ValueError(f"master key longer than {formats.INDEX_MAX_KEY} bytes")
        # No MASTER_KEY record of its own: the caller's record carries the key (a FENCE record has it,
        # an ADD takes a MASTER_KEY record along until one is durable), so the key is durable no
        # later than the first record of the ledger that is acknowledged.
        ledger = self._ledgers[ledger_id] = _Ledger(bytes(master_key), key_journaled=False)
        self._dirty.add(ledger_id)
        return ledger

    def fence_ledger(self, ledger_id: int, master_key: bytes) -> defer.Deferred:
        """Fence a ledger (creating it if unknown): later non-recovery adds fail. Durable when it fires.
        NoSuchLedgerError for a ledger this bookie deleted."""
        if not self._running:
            return defer.fail(BookieUnavailableError("bookie storage is not running"))
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._deleted:
                return defer.fail(NoSuchLedgerError(f"ledger {ledger_id} was deleted on this bookie"))
            try:
                ledger = self._create_ledger(ledger_id, master_key)
            except ValueError as e:
                return defer.fail(e)
        elif ledger.master_key != master_key:
            return defer.fail(UnauthorizedAccessError(f"master key mismatch for ledger {ledger_id}"))
        if not ledger.fenced:
            ledger.fenced = True
            self._dirty.add(ledger_id)
        # Journaled even when already fenced: the earlier FENCE may still be in flight, and the caller
        # must not hear "fenced" before it is durable.
        record = formats.encode_journal_record(formats.REC_FENCE, ledger_id, 0, ledger.master_key)
        d = self._journal.append((record,), len(record))
        if not ledger.key_journaled:
            d.addCallback(_key_journaled, ledger)
        return d

    def delete_ledger(self, ledger_id: int) -> defer.Deferred:
        """Forget a ledger: its entries are unreadable at once; GC reclaims their space. Durable when it
        fires. Deleting an unknown ledger succeeds."""
        if not self._running:
            return defer.fail(BookieUnavailableError("bookie storage is not running"))
        self._forget(ledger_id)
        self._undurable_deletes[ledger_id] = self._undurable_deletes.get(ledger_id, 0) + 1
        record = formats.encode_journal_record(formats.REC_DELETE, ledger_id, 0)
        d = self._journal.append((record,), len(record))
        d.addBoth(self._delete_durable, ledger_id)
        return d

    def _delete_durable(self, result, ledger_id: int):
        left = self._undurable_deletes.pop(ledger_id) - 1
        if left:
            self._undurable_deletes[ledger_id] = left
        if isinstance(result, Failure):
            # The record was refused, so nothing on disk says the ledger is deleted: a crash would
            # bring it back from its index file. The ledger stays deleted in memory, so the next
            # checkpoint lists it as deleted (again, if one running now already did: the list and the
            # index delete take a ledger twice); until one has, GC must not drop its entries.
            self._refused_deletes.add(ledger_id)
            self._pending_deletes.add(ledger_id)
        return result

    def _forget(self, ledger_id: int) -> None:
        self._deleted.add(ledger_id)
        self._ledgers.pop(ledger_id, None)
        self._dirty.discard(ledger_id)
        entries = self._cache.pop(ledger_id, None)
        if entries:
            self._cache_bytes -= sum(len(v) for v in entries.values())
        self._pending_deletes.add(ledger_id)
        self._stale_index.add(ledger_id)

    def _apply(self, rtype: int, ledger_id: int, entry_id: int, payload: bytes) -> None:
        """Re-apply one replayed journal record to the in-memory state."""
        if ledger_id in self._deleted and rtype != formats.REC_CHECKPOINT:
            return   # deleted for good (adds to it were refused after the DELETE)
        if rtype == formats.REC_ADD:
            lac, data = formats.decode_add_payload(payload)
            ledger = self._ledgers.get(ledger_id)
            if ledger is None:   # its MASTER_KEY record was lost with a corrupt journal file
                ledger = self._ledgers[ledger_id] = _Ledger(b"")
            entries = self._cache.setdefault(ledger_id, {})
            old = entries.get(entry_id)
            entries[entry_id] = data
            self._cache_bytes += len(data) - (len(old) if old is not None else 0)
            ledger.last_entry = max(ledger.last_entry, entry_id)
            ledger.lac = max(ledger.lac, lac)
            self._dirty.add(ledger_id)
        elif rtype in (formats.REC_MASTER_KEY, formats.REC_FENCE):
            ledger = self._ledgers.get(ledger_id)
            if ledger is None:
                ledger = self._ledgers[ledger_id] = _Ledger(payload)
            if rtype == formats.REC_FENCE:
                ledger.fenced = True
            self._dirty.add(ledger_id)
        elif rtype == formats.REC_DELETE:
            self._forget(ledger_id)

    # ----------------------------------------------------------------------------------------- reads

    def read_entry(self, ledger_id: int, entry_id: int) -> defer.Deferred:
        """Deferred firing with the entry's bytes; ``entry_id == -1`` reads the highest stored entry.
        NoSuchLedgerError, NoSuchEntryError, or DigestMismatchError when the stored copy is corrupt.
        An entry still in the write cache is answered at once; one that is not is read by the read
        thread (a disk read may block for milliseconds: never on the reactor)."""
        try:
            entry_id, data = self._read_memory(ledger_id, entry_id)
        except Exception as e:
            return defer.fail(e)
        if data is not None:
            return defer.succeed(data)
        d = defer.Deferred()
        self._disk_reads.append((ledger_id, entry_id, d))
        if not self._reading:
            self._start_disk_reads()
        return d

    def _read_memory(self, ledger_id: int, entry_id: int) -> tuple[int, bytes | None]:
        """Reactor thread: ``(entry_id, bytes)`` from the write cache, or ``(entry_id, None)`` when
        the index must be asked; raises when the entry cannot exist."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        if entry_id == -1:
            entry_id = ledger.last_entry
            if entry_id < 0:
                raise NoSuchEntryError(f"ledger {ledger_id} has no entries")
        counters = self._counters
        counters["reads"] += 1
        for cache in (self._cache, self._flushing):
            entries = cache.get(ledger_id)
            if entries is not None:
                data = entries.get(entry_id)
                if data is not None:
                    counters["cache_reads"] += 1
                    counters["read_bytes"] += len(data)
                    return entry_id, data
        if ledger_id in self._stale_index or entry_id < 0:
            raise NoSuchEntryError(f"no entry {ledger_id}:{entry_id}")
        return entry_id, None

    def _start_disk_reads(self) -> None:
        batch, self._disk_reads = self._disk_reads, []
        self._reading = True
        d = deferToThreadPool(self._reactor, self._read_pool, self._read_batch, batch)
        d.addBoth(self._disk_reads_done, batch)

    def _read_batch(self, batch: list) -> list:
        """Read thread: ``(True, bytes)`` or ``(False, exception)`` per read of ``batch``."""
        out = []
        for ledger_id, entry_id, _ in batch:
            try:
                out.append((True, self._read_disk(ledger_id, entry_id)))
            except Exception as e:
                out.append((False, e))
        return out

    def _disk_reads_done(self, results, batch: list) -> None:
        """Reactor thread: fire the batch's Deferreds in order, then send what queued meanwhile."""
        self._reading = False
        if isinstance(results, Failure):    # the pool itself failed: every read of the batch fails
            results = [(False, results.value)] * len(batch)
        counters = self._counters
        for (ok, value), (_, _, d) in zip(results, batch):
            if ok:
                counters["read_bytes"] += len(value)
                d.callback(value)
            else:
                d.errback(value)
        if self._disk_reads and not self._reading:
            self._start_disk_reads()
        elif not self._reading:
            waiters, self._reads_idle = self._reads_idle, []
            for w in waiters:
                w.callback(None)

    def _reads_done_waiter(self) -> defer.Deferred:
        """Fires once no read batch is out (so the files may be closed)."""
        if not self._reading and not self._disk_reads:
            return defer.succeed(None)
        d = defer.Deferred()
        self._reads_idle.append(d)
        return d

    def _read_disk(self, ledger_id: int, entry_id: int) -> bytes:
        """Any thread: the entry from the index and the entry logs (both safe beside the flush
        thread; a log compacted away between lookup and read is looked up again)."""
        for _attempt in range(2):
            slot = self._index.lookup(ledger_id, entry_id)
            if slot is None:
                raise NoSuchEntryError(f"no entry {ledger_id}:{entry_id}")
            try:
                data = self._entry_logs.read(slot[0], slot[1], slot[2], ledger_id, entry_id)
            except EntryLogMissing:
                continue   # compacted between lookup and read: the slot now names the new log
            if data is None:
                raise DigestMismatchError(f"entry {ledger_id}:{entry_id} in entry log {slot[0]} at "
                                          f"{slot[1]} is corrupt (CRC or header mismatch)")
            return data
        raise NoSuchEntryError(f"entry {ledger_id}:{entry_id} moved twice while being read")

    def read_lac(self, ledger_id: int) -> int:
        """Highest ``lac`` passed with any add to the ledger, -1 if none; NoSuchLedgerError if unknown."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        return ledger.lac

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id stored for the ledger, -1 if none (or the ledger is unknown)."""
        ledger = self._ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.last_entry

    def is_fenced(self, ledger_id: int) -> bool:
        ledger = self._ledgers.get(ledger_id)
        return ledger is not None and ledger.fenced

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def was_deleted(self, ledger_id: int) -> bool:
        """True when this bookie deleted the ledger (it refuses adds and fences to it for good)."""
        return ledger_id in self._deleted

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def journal_metrics(self) -> dict:
        """The journal's latency summaries (``add``: append to durable, ``sync``: fdatasync; ms)
        and its queue length, for /metrics."""
        journal = self._journal
        return {"add": journal.add_latency, "sync": journal.sync_latency,
                "queue": journal.queue_length()}

    def stats(self) -> dict:
        """Counters and gauges (a fresh dict)."""
        s = dict(self._counters)
        s.update(fsyncs=self._journal.fsyncs, journal_groups=self._journal.groups,
                 journal_records=self._journal.records, journal_bytes=self._journal.bytes_written,
                 journal_file=self._journal.file_id, entry_logs=self._entry_logs.log_count(),
                 ledgers=len(self._ledgers), deleted_ledgers=len(self._deleted),
                 ledger_dirs=len(self._ledger_dirs),
                 write_cache_bytes=self._cache_bytes,
                 write_cache_entries=sum(len(v) for v in self._cache.values()), read_only=self._read_only)
        return s

    # ------------------------------------------------------------------------------------ checkpoint

    def checkpoint(self) -> defer.Deferred:
        """Flush the write cache to the entry logs and index, then mark the journal; fires when done.
        Checkpoints run one at a time; this one starts after any running one."""
        return self._flush_lock.run(self._checkpoint)

    def _start_checkpoint(self) -> None:
        self.checkpoint().addErrback(self._background_failure, "checkpoint failed")

    def _background_failure(self, failure, what: str) -> None:
        # After simulate_crash (or during stop) a running checkpoint fails on the stopped journal: expected.
        if not self._running:
            return
        if failure.check(OSError):
            # The disk's error (EIO, ENOSPC...): one error line, as for a failed journal write; the
            # work is kept for the next try (_restore). A traceback only says where we called it.
            log.error("{what}: {error}", what=what, error=failure.getErrorMessage())
        else:
            log.failure(what, failure)

    def _periodic_checkpoint(self) -> None:
        if not self._flush_lock.locked:
            self._start_checkpoint()

    def _checkpoint(self) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._do_checkpoint())

    async def _do_checkpoint(self):
        snapshot, snapshot_bytes = self._cache, self._cache_bytes
        deletes = self._pending_deletes
        dirty = self._dirty | snapshot.keys()
        if not snapshot and not dirty and not deletes:
            return
        # The snapshot, headers and mark are taken together in this reactor turn: every record queued
        # before the mark is reflected in them, every record after it is not.
        headers = {lid: self._ledgers[lid].header() for lid in dirty if lid in self._ledgers}
        self._flushing, self._cache, self._cache_bytes = snapshot, {}, 0
        self._dirty, self._pending_deletes = set(), set()
        try:
            mark = await self._journal.mark()
            await deferToThreadPool(self._reactor, self._pool, self._write_checkpoint, snapshot, headers,
                                    deletes)
        except BaseException:
            self._counters["checkpoint_failures"] += 1
            self._restore(snapshot, snapshot_bytes, headers, deletes)
            raise
        finally:
            self._flushing = {}
        # Only now is the index durable, so only now may the journal say "replay from here".
        self._stale_index -= deletes - self._pending_deletes
        self._refused_deletes -= deletes
        record = formats.encode_journal_record(formats.REC_CHECKPOINT, mark[0], mark[1])
        await self._journal.append((record,), len(record))
        self._counters["checkpoints"] += 1
        await deferToThreadPool(self._reactor, self._pool, self._journal.trim, mark[0])

    def _write_checkpoint(self, snapshot: dict, headers: dict, deletes: set) -> None:
        """Flush thread: deletes first (listed durably in the deleted list before their index files go,
        so a crash in between cannot bring them back), then entries (durable in the entry log before any
        index slot names them), then index files."""
        self._index.append_deleted(deletes)
        for ledger_id in deletes:
            self._index.delete(ledger_id)
        placements = self._entry_logs.append_entries(snapshot) if snapshot else {}
        created = bool(deletes)
        for ledger_id in placements.keys() | headers.keys():
            created |= self._index.update(ledger_id, headers.get(ledger_id), placements.get(ledger_id, []))
        self._index.sync()
        if created:
            self._index.sync_dir()

    def _restore(self, snapshot: dict, snapshot_bytes: int, headers: dict, deletes: set) -> None:
        """A checkpoint failed: put its work back so the next one retries it (newer adds win)."""
        for ledger_id, entries in snapshot.items():
            if ledger_id not in self._ledgers:
                continue
            current = self._cache.setdefault(ledger_id, {})
            for entry_id, data in entries.items():
                if entry_id not in current:
                    current[entry_id] = data
                    self._cache_bytes += len(data)
        self._dirty |= headers.keys() & self._ledgers.keys()
        self._pending_deletes |= deletes

    # -------------------------------------------------------------------------------------------- GC

    def gc(self) -> defer.Deferred:
        """Delete entry logs with no live entries, compact those whose live fraction is below the
        threshold. Fires with figures: logs_deleted, logs_compacted, entries_moved, bytes_reclaimed,
        entry_logs (left)."""
        # A ledger counts as live until its DELETE is durable: otherwise a crash could replay the ledger
        # from the index after GC removed its entries.
        if not self._running:
            return defer.fail(BookieUnavailableError("bookie storage is not running"))
        live = self._ledgers.keys() | self._undurable_deletes.keys() | self._refused_deletes
        d = deferToThreadPool(self._reactor, self._pool, self._gc, frozenset(live))
        d.addCallback(self._gc_done)
        return d

    def _periodic_gc(self) -> None:
        self.gc().addErrback(self._background_failure, "garbage collection failed")

    def _gc_done(self, figures: dict) -> dict:
        c = self._counters
        c["gc_runs"] += 1
        c["logs_deleted"] += figures["logs_deleted"]
        c["logs_compacted"] += figures["logs_compacted"]
        c["entries_moved"] += figures["entries_moved"]
        if figures["logs_deleted"] or figures["logs_compacted"]:
            log.info("gc: {logs_deleted} entry logs deleted, {logs_compacted} compacted, {entries_moved} "
                     "entries moved, {bytes_reclaimed} bytes reclaimed", **figures)
        return figures

    def _gc(self, live: frozenset) -> dict:
        """Flush thread."""
        logs = self._entry_logs
        figures = dict(logs_deleted=0, logs_compacted=0, entries_moved=0, bytes_reclaimed=0)
        for log_id in logs.log_ids():
            if log_id == logs.current_id:
                continue
            usage = logs.usage.get(log_id)
            if usage is None:
                continue
            total = sum(usage.values())
            alive = sum(n for lid, n in usage.items() if lid in live)
            if alive == 0:
                logs.remove_log(log_id)
                figures["logs_deleted"] += 1
                figures["bytes_reclaimed"] += total
            elif alive < total * self._compaction_threshold:
                figures["entries_moved"] += self._compact(log_id, live)
                logs.remove_log(log_id)
                figures["logs_compacted"] += 1
                figures["bytes_reclaimed"] += total - alive
        figures["entry_logs"] = len(logs.log_ids())
        return figures

    def _compact(self, log_id: int, live: frozenset) -> int:
        """Copy the entries of ``log_id`` that the index still points at into the current log and repoint
        the index, in bounded batches. The caller deletes the old log afterwards."""
        moved = 0
        batch, batch_bytes = {}, 0
        for scanned, (offset, ledger_id, entry_id, data) in enumerate(self._entry_logs.scan(log_id), 1):
            if scanned % GIL_YIELD_EVERY == 0:
                yield_gil()   # a pure-Python scan: let the reactor in (common/threads.py)
            if ledger_id not in live:
                continue
            # Only the copy the index names is live: older copies of a re-added entry are garbage.
            if self._index.lookup(ledger_id, entry_id) != (log_id, offset, len(data)):
                continue
            batch.setdefault(ledger_id, {})[entry_id] = data
            batch_bytes += len(data)
            moved += 1
            if batch_bytes >= _GC_BATCH_BYTES:
                self._move(batch)
                batch, batch_bytes = {}, 0
        if batch:
            self._move(batch)
        return moved

    def _move(self, batch: dict) -> None:
        placements = self._entry_logs.append_entries(batch)
        for ledger_id, slots in placements.items():
            # The entries were found through the index: their slots are repointed where they are;
            # headers stay as they are.
            self._index.update(ledger_id, None, slots)
        self._index.sync()
