"""
The embedded metadata store: ZooKeeper's data model in this process, durable on local disk.

Standalone runs on it; clusters use ZooKeeper (``zookeeper.py``) through the same ``IMetadataStore``.

Model
-----
A tree of nodes, each with a value, a version (0 on creation, +1 per write), creation and modification
times in milliseconds from the injected reactor, an optional ephemeral owner (a session id) and a
counter for sequential children. ``put`` creates missing parents as empty persistent nodes. Ephemeral
nodes cannot have children, are never written to disk (the session that owned them does not outlive the
process) and vanish when their session closes.

Sessions
--------
``EmbeddedMetadataStore(data_dir, reactor)`` owns the tree and the files and is itself a session.
``new_session()`` returns another client over the same tree with its own session id, ephemeral nodes and
listeners; closing it removes only what it owns. Closing the owning store closes every session and then
the files.

Durability
----------
``data_dir`` None keeps everything in memory (tests). Otherwise every change is a record appended to
``metadata.log`` (see ``log_format.py``) and a write's Deferred fires only once its record is on
disk, fsync'd when ``sync`` (without ``sync`` it has reached the OS: it survives the process, not the
machine). ``start()`` is required before use in that mode: it loads the snapshot and replays the log.

Writes are group-committed. ``put``/``delete`` change the tree at once, so a ``get`` issued later, even in
the same reactor tick and before the write's Deferred fired, sees the new value; the record joins a pending
batch. At most one batch is being written at any time, by a single dedicated worker thread (the reactor
never waits on the disk); a batch is everything that was pending when the previous batch finished, or,
when the log was idle, everything written during the tick in which the first write arrived. So N writes in
one tick cost one fsync. Deferreds fire, and listeners hear of the changes, in write order.

Every so often (when the log passes ``snapshot_log_bytes``, on ``snapshot()`` and on a clean close) the
store snapshots the persistent tree without stopping: it opens a consistent cut at the last transaction
(``Tree.begin_cut``: the paths of that moment; every later change first preserves the node's state of the
cut), encodes it a slice per reactor turn (at most ``SNAPSHOT_SLICE_NODES`` nodes and
``SNAPSHOT_SLICE_SECONDS``) while writes go on to the log, the worker appending each slice to
``metadata.snapshot.tmp`` before the next is encoded (so only a slice is ever in memory), and once the
walk is done the worker fsyncs that file, renames it over ``metadata.snapshot``, fsyncs the directory
and only then drops the part of the log the snapshot covers (records written during the walk are kept:
copied to ``metadata.log.tmp``, fsync'd and renamed over the log). Each record carries a transaction id
and the snapshot the last id it covers, so a crash at any step replays nothing twice and loses nothing:
the previous snapshot and the whole log, or the new snapshot and a log holding at least what it does not cover. ``snapshot()`` fires once a snapshot started after it is durable. Loading cuts the log at the first torn or CRC-bad record: a write whose Deferred had
fired is always before that point.

If a disk write fails the store stops accepting writes (every later write fails with
``StoreFailedError``): its tree may then hold changes the disk does not, and only a restart, which reloads
from disk, makes the two agree again.

Listeners
---------
``register_listener`` callbacks are called directly (no ``callLater``) in the reactor thread, once the
change is durable, in the order of the changes. A write made from inside a listener is queued behind the
notifications already being delivered, so every listener sees every change in the same order. A listener
that raises is logged and does not stop the others. A listener belongs to the session that registered it
and is dropped when that session closes.

Modules
-------
This module holds the store and its commit pipeline; ``tree.py`` the nodes; ``log_format.py`` the files
(format, loading and recovery, snapshot installation).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections import deque
from typing import Callable, Optional

from twisted.internet.defer import Deferred, ensureDeferred, fail, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from pulsar_twisted.metadata.embedded import log_format
from pulsar_twisted.metadata.embedded.log_format import HEADER_SIZE, LOCK_NAME, encode_delete, encode_record
from pulsar_twisted.metadata.embedded.tree import Node, Tree, check_path, parent_of
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError,
    BadVersionError,
    IMetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    Notification,
    Stat,
    value_bytes,
)

__all__ = [
    "EmbeddedMetadataStore",
    "NoChildrenForEphemeralsError",
    "StoreNotStartedError",
    "StoreClosedError",
    "StoreFailedError",
]

log = Logger()


def _kept(value, raw: bytes):
    """What a node holds for a value given to ``put``: a record as given (immutable, its bytes the
    same each time: see ``interfaces``), so that an object the writer keeps anyway (a ledger's
    LedgerMetadata, held by its handle) is not held a second time as ~450 bytes of JSON (issue
    14); otherwise the bytes."""
    return raw if isinstance(value, (bytes, bytearray, memoryview)) else value


class NoChildrenForEphemeralsError(MetadataStoreError):
    """A put would create a node under an ephemeral node (ZooKeeper forbids it too)."""


class StoreNotStartedError(MetadataStoreError):
    """A durable store was used before ``start()`` completed."""


class StoreClosedError(MetadataStoreError):
    """The session (or its store) is closed."""


class StoreFailedError(MetadataStoreError):
    """A disk write failed earlier; the store accepts no more writes until restarted."""


class SnapshotFailedError(MetadataStoreError):
    """A snapshot could not be encoded or written; the log still holds every write (nothing lost)."""


#: After a failed snapshot, how long the size threshold waits before trying another one.
SNAPSHOT_RETRY_SECONDS = 30.0

#: Nodes a snapshot encodes per reactor turn at most, so a large tree never stalls it.
SNAPSHOT_SLICE_NODES = 2000

#: And seconds of encoding per turn at most, checked every ``SNAPSHOT_SLICE_STEP`` nodes: a node
#: holding a record (a ledger's metadata, encoded again for the snapshot) costs about 6 µs where
#: a bytes value costs 1, so 2000 of them were a 13 ms turn.
SNAPSHOT_SLICE_SECONDS = 0.002
SNAPSHOT_SLICE_STEP = 64


def _load(data_dir: str):
    """Worker thread: the tree, last txid, log fd and log size from the files (``log_format.load``)."""
    tree = Tree()
    last_txid, fd, size = log_format.load(data_dir, tree.apply)
    return tree, last_txid, fd, size


class _Commit:
    """One write waiting for the disk: its record (maybe empty), Deferred, result and notifications."""

    __slots__ = ("record", "deferred", "result", "notifications", "wants_snapshot")

    def __init__(self, record: bytes, result, notifications: list, wants_snapshot: bool = False):
        self.record = record
        self.deferred = Deferred()
        self.result = result
        self.notifications = notifications
        #: An explicit ``snapshot()`` request: it fails when the snapshot does (others only log it).
        self.wants_snapshot = wants_snapshot


class _Snapshot:
    """A snapshot in the making: the cut's txid and log offset, its paths, the walk so far."""

    __slots__ = ("txid", "keep_from", "paths", "position", "file", "waiters")

    def __init__(self, txid: int, keep_from: int, paths: list[str], waiters: list[_Commit]):
        self.txid = txid
        self.keep_from = keep_from
        self.paths = paths
        self.position = 0
        #: The file the walk is written to (log_format.SnapshotWriter, made by the worker).
        self.file = None
        self.waiters = waiters


# ---------------------------------------------------------------------------------------------------
# The shared core: tree, files, commit pipeline, sessions, listeners.

class _Core:
    def __init__(self, data_dir: Optional[str], reactor, sync: bool, snapshot_log_bytes: int):
        self.data_dir = data_dir
        self.reactor = reactor
        self.sync = sync
        self.snapshot_log_bytes = snapshot_log_bytes
        self.tree = Tree()
        self.started = data_dir is None
        self.closed = False
        self.failure: Optional[Failure] = None
        self.txid = 0
        self.last_now_ms = 0
        self.next_session = 1
        self.sessions: dict[int, EmbeddedMetadataStore] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self.listeners: list[tuple[int, Callable[[Notification], None]]] = []
        self.to_notify: deque[Notification] = deque()
        self.notifying = False
        # Durable mode only.
        self.pool: Optional[ThreadPool] = None
        self.shutdown_trigger = None
        self.lock_fd: Optional[int] = None
        self.log_fd: Optional[int] = None
        self.log_size = HEADER_SIZE
        self.pending: list[_Commit] = []
        self.flush_scheduled = False
        self.in_flight = False
        self.snapshot_wanted = False
        #: Snapshots that failed (encoding or disk) since start, the last reason, and the earliest
        #: time (reactor seconds) the size threshold may try again: a broken disk is not hammered.
        self.snapshot_failures = 0
        self.last_snapshot_error: Optional[str] = None
        self.snapshot_retry_at = 0.0
        #: The snapshot being made, the explicit requests the next one answers, and who waits for
        #: the current one to end (``snapshot_settled``).
        self.snapshot: Optional[_Snapshot] = None
        self.snapshot_waiters: list[_Commit] = []
        self.snapshot_settled_waiters: list[Deferred] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Deferred:
        if self.started or self.data_dir is None:
            return succeed(None)
        os.makedirs(self.data_dir, exist_ok=True)
        self.lock_fd = os.open(os.path.join(self.data_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self.lock_fd)
            self.lock_fd = None
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return fail(MetadataStoreError(f"{self.data_dir} is in use by another store"))
            return fail(e)
        self.pool = ThreadPool(minthreads=1, maxthreads=1, name="metadata-log")
        self.pool.start()
        # Twisted's pool threads are not daemons: stop ours with the reactor even if nobody closes us.
        self.shutdown_trigger = self.reactor.addSystemEventTrigger("during", "shutdown", self._on_shutdown)
        d = deferToThreadPool(self.reactor, self.pool, _load, self.data_dir)

        def loaded(result):
            self.tree, self.txid, self.log_fd, self.log_size = result
            self.started = True
            log.info("metadata store loaded from {dir}: {n} nodes, txid {txid}",
                     dir=self.data_dir, n=len(self.tree.nodes), txid=self.txid)

        def load_failed(f):
            self._release()
            return f

        return d.addCallbacks(loaded, load_failed)

    def _on_shutdown(self) -> None:
        # The owner should have closed the store (stopService) so that pending writes were flushed;
        # here we only make sure the process can exit.
        self.shutdown_trigger = None
        self._stop_worker()

    def _stop_worker(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
        if self.shutdown_trigger is not None:
            self.reactor.removeSystemEventTrigger(self.shutdown_trigger)
            self.shutdown_trigger = None

    def _release(self) -> None:
        self._stop_worker()
        for name in ("log_fd", "lock_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)        # closing the lock file releases the flock
                setattr(self, name, None)

    def abandon(self) -> None:
        """Stop as a crash would: no flush, no snapshot, no ephemeral removal, no notifications."""
        self.closed = True
        self._release()

    def check_usable(self, session: "EmbeddedMetadataStore") -> Optional[Exception]:
        if session.closed or self.closed:
            return StoreClosedError("metadata store session is closed")
        if not self.started:
            return StoreNotStartedError("call start() before using a durable metadata store")
        return None

    def check_writable(self, session: "EmbeddedMetadataStore") -> Optional[Exception]:
        """``check_usable`` for a write, which a failed store also refuses, before the tree changes:
        applied first and refused at the commit, it would be read back without ever being logged."""
        error = self.check_usable(session)
        if error is None and self.failure is not None:
            error = StoreFailedError(f"metadata store failed: {self.failure.getErrorMessage()}")
        return error

    # -- writes ------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        # The same int object for every write of one millisecond: a node keeps its times for
        # good, and a burst of creations would otherwise hold a 32-byte int per node (issue 14).
        now = int(self.reactor.seconds() * 1000)
        if now == self.last_now_ms:
            return self.last_now_ms
        self.last_now_ms = now
        return now

    def commit(self, ops: list[bytes], result, notifications: list[Notification],
               wants_snapshot: bool = False) -> Deferred:
        """
        Queue a change already applied to the tree; fire with ``result`` once ``ops`` are durable and
        after ``notifications`` have been delivered. Empty ``ops`` still wait their turn, so Deferreds
        fire in write order.
        """
        if self.failure is not None:
            return fail(StoreFailedError(f"metadata store failed: {self.failure.getErrorMessage()}"))
        if self.closed:
            return fail(StoreClosedError("metadata store is closed"))
        if self.data_dir is None:
            self.notify(notifications)
            return succeed(result)
        record = b""
        if ops:
            # The ops were encoded (and their paths checked) before the tree changed, so this
            # cannot fail on the caller's input.
            self.txid += 1
            record = encode_record(self.txid, ops)
        entry = _Commit(record, result, notifications, wants_snapshot)
        self.pending.append(entry)
        self._schedule_flush()
        return entry.deferred

    def request_snapshot(self) -> Deferred:
        self.snapshot_wanted = True
        return self.commit([], None, [], wants_snapshot=True)

    def _schedule_flush(self) -> None:
        # One batch in flight at a time; waiting for the end of the tick gathers the tick's writes.
        if not self.flush_scheduled and not self.in_flight:
            self.flush_scheduled = True
            self.reactor.callLater(0, self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.in_flight or not self.pending or self.pool is None:
            return
        batch, self.pending = self.pending, []
        data = b"".join(entry.record for entry in batch)
        # An explicit request is answered by the next snapshot to start, which covers it.
        self.snapshot_waiters += [entry for entry in batch if entry.wants_snapshot]
        if self.snapshot is None and self._snapshot_due(len(data)):
            # Everything applied to the tree is in the log or in this batch, which goes before any
            # later record: the cut covers txid ``self.txid`` and the log up to the batch's end.
            self.snapshot_wanted = False
            self._begin_snapshot(self.log_size + len(data))
        self.in_flight = True
        d = deferToThreadPool(self.reactor, self.pool, self._write, data)
        d.addCallbacks(self._written, self._write_failed, callbackArgs=(batch,), errbackArgs=(batch,))

    def _snapshot_due(self, batch_bytes: int) -> bool:
        if self.snapshot_wanted:
            return True
        return (self.log_size + batch_bytes > self.snapshot_log_bytes
                and self.reactor.seconds() >= self.snapshot_retry_at)

    def _write(self, data: bytes) -> None:
        """Worker thread: append a batch (the worker owns ``log_fd``: a snapshot may replace it)."""
        if data:
            log_format.append(self.log_fd, data, self.sync)

    def _written(self, _, batch: list[_Commit]) -> None:
        self.in_flight = False
        self.log_size += sum(len(entry.record) for entry in batch)
        if self.pending:
            # The next batch (what came while this one was written) goes to the worker before
            # this one's callbacks run: they are the rest of each caller's work (a topic's load,
            # its producer), and the disk would otherwise wait for all of it. Order holds: the
            # next batch completes in a later reactor call than these callbacks.
            self._flush()
        for entry in batch:
            self.notify(entry.notifications)
            if not entry.wants_snapshot:
                entry.deferred.callback(entry.result)
        if self.pending:
            self._schedule_flush()

    # -- snapshots: a consistent cut, encoded in slices, installed by the worker --------------------

    def _begin_snapshot(self, keep_from: int) -> None:
        """Open a cut at ``self.txid`` and walk it ``SNAPSHOT_SLICE_NODES`` nodes per reactor turn."""
        self.snapshot = _Snapshot(self.txid, keep_from, self.tree.begin_cut(), self.snapshot_waiters)
        self.snapshot_waiters = []
        self.reactor.callLater(0, self._snapshot_slice)

    def _snapshot_slice(self) -> None:
        snap = self.snapshot
        if snap is None:
            return
        if self.pool is None or self.failure is not None:
            # Closed, abandoned or failed meanwhile: the log has everything the disk can have.
            self._snapshot_done((StoreClosedError("metadata store is closed or failed"), 0), snap)
            return
        ops = []
        try:
            paths, position = snap.paths, snap.position
            end = min(len(paths), position + SNAPSHOT_SLICE_NODES)
            deadline = time.perf_counter() + SNAPSHOT_SLICE_SECONDS
            while position < end:
                step = min(end, position + SNAPSHOT_SLICE_STEP)
                ops += self.tree.cut_ops(paths[position:step])
                position = step
                if time.perf_counter() >= deadline:
                    break
            snap.position = end = position
        except Exception as e:
            # Only a bug can put an unencodable node in the tree (paths are checked before any
            # change); the log still has every write, so keep logging and say so loudly.
            log.failure("metadata snapshot could not be encoded; the log keeps every write")
            self._snapshot_done((e, 0), snap)
            return
        # The slice goes to the file before the next is encoded: the snapshot is in memory a
        # slice at a time (log_format.SnapshotWriter), in the worker's order with the log's batches.
        d = deferToThreadPool(self.reactor, self.pool, self._snapshot_append, snap, b"".join(ops))
        d.addCallback(self._snapshot_appended, snap)
        d.addErrback(lambda f: self._snapshot_done((f.value, 0), snap))

    def _snapshot_append(self, snap: "_Snapshot", ops: bytes):
        """Worker thread: ``ops`` onto the snapshot's file (made by the first slice); the error or None."""
        try:
            if snap.file is None:
                snap.file = log_format.SnapshotWriter(self.data_dir, snap.txid)
            snap.file.append(ops)
            return None
        except Exception as e:
            return e

    def _snapshot_appended(self, error, snap: "_Snapshot") -> None:
        if error is not None:
            self._snapshot_done((error, 0), snap)
        elif snap.position < len(snap.paths):
            self.reactor.callLater(0, self._snapshot_slice)
        elif self.pool is None or self.failure is not None:
            # A log write failed (the cut's own batch, maybe: its refused writes are in the cut)
            # or the store closed while the last slice was written: install nothing.
            self._snapshot_done((StoreClosedError("metadata store is closed or failed"), 0), snap)
        elif self.snapshot is snap:
            self.tree.end_cut()
            d = deferToThreadPool(self.reactor, self.pool, self._install, snap, snap.keep_from)
            d.addCallback(self._snapshot_done, snap)
            d.addErrback(lambda f: self._snapshot_done((f.value, 0), snap))

    def _install(self, snap: "_Snapshot", keep_from: int):
        """Worker thread: ``(error or None, snapshot bytes)``; queued behind the batches before it."""
        try:
            if snap.file is None:       # (a tree of no persistent node: nothing was appended)
                snap.file = log_format.SnapshotWriter(self.data_dir, snap.txid)
            size = snap.file.size
            self.log_fd = log_format.write_snapshot_keeping(self.data_dir, self.log_fd, snap.file, keep_from)
            return None, size
        except log_format.LogReplacedError as e:
            self.log_fd = e.log_fd
            return e, 0
        except Exception as e:
            # Before the snapshot's rename the old snapshot and the log are intact; after it the
            # log's records are covered by txid: either way the log keeps every write.
            return e, 0

    def _snapshot_done(self, outcome, snap: "_Snapshot") -> None:
        error, size = outcome
        if self.snapshot is snap:
            self.snapshot = None
            self.tree.end_cut()
        if error is not None and snap.file is not None:
            # (Nothing is writing it now: each step waits for the last.) Removed by the worker, in
            # its order; with no worker left (closed) only its descriptor is closed here: the file
            # is then what a crash leaves, which nothing reads, and it is not this thread's to
            # unlink once the data directory may be another store's.
            if self.pool is not None:
                self.pool.callInThread(snap.file.abandon)
            else:
                snap.file.abandon(unlink=False)
        failed = None
        if error is not None:
            failed = self._snapshot_failed(error)
        else:
            # The worker ran every batch written before this, and the log now holds what came after
            # the cut; later batches add to it as they complete.
            self.log_size = HEADER_SIZE + max(0, self.log_size - snap.keep_from)
            log.info("metadata snapshot written: {n} bytes, txid {txid}", n=size, txid=snap.txid)
        for entry in snap.waiters:
            if failed is not None:
                entry.deferred.errback(failed)
            else:
                entry.deferred.callback(entry.result)
        settled, self.snapshot_settled_waiters = self.snapshot_settled_waiters, []
        for d in settled:
            d.callback(None)
        if self.failure is not None or self.pool is None:
            # No snapshot will come: the requests waiting for the next one fail now.
            waiting, self.snapshot_waiters = self.snapshot_waiters, []
            for entry in waiting:
                entry.deferred.errback(failed or (
                    StoreFailedError("metadata store failed") if self.failure is not None
                    else StoreClosedError("metadata store is closed")))
        elif self.snapshot_wanted and self.snapshot_waiters:
            self.commit([], None, []).addErrback(lambda f: None)    # its flush starts the next one

    def _snapshot_failed(self, error: Exception) -> SnapshotFailedError:
        """Count and log a failed snapshot; the error its requests get."""
        self.snapshot_failures += 1
        self.last_snapshot_error = str(error) or type(error).__name__
        self.snapshot_retry_at = self.reactor.seconds() + SNAPSHOT_RETRY_SECONDS
        log.error("metadata snapshot failed ({n} so far): {reason}; writes go on to the log, "
                  "retrying in {retry}s", n=self.snapshot_failures, reason=self.last_snapshot_error,
                  retry=SNAPSHOT_RETRY_SECONDS)
        if isinstance(error, log_format.LogReplacedError):
            self.failure = Failure(error)
            log.error("metadata log replaced but not durably; the store accepts no more writes")
        return SnapshotFailedError(f"metadata snapshot failed: {self.last_snapshot_error}")

    def snapshot_settled(self) -> Deferred:
        """Fire once no snapshot is being made (at once if none is)."""
        if self.snapshot is None:
            return succeed(None)
        d = Deferred()
        self.snapshot_settled_waiters.append(d)
        return d

    def _write_failed(self, failure: Failure, batch: list[_Commit]) -> None:
        self.in_flight = False
        self.failure = failure
        log.failure("metadata log write failed; the store accepts no more writes", failure)
        error = StoreFailedError(f"metadata store failed: {failure.getErrorMessage()}")
        batch, self.pending = batch + self.pending, []
        # Requests for a snapshot among them fail here, not again when a snapshot ends.
        failed = {id(entry) for entry in batch}
        self.snapshot_waiters = [e for e in self.snapshot_waiters if id(e) not in failed]
        if self.snapshot is not None:
            self.snapshot.waiters = [e for e in self.snapshot.waiters if id(e) not in failed]
        for entry in batch:
            entry.deferred.errback(error)

    def drain(self) -> Deferred:
        """Fire once every write queued so far is on disk (or failed)."""
        d = self.commit([], None, [])
        return d.addErrback(lambda f: None)

    # -- listeners ---------------------------------------------------------------------------------

    def notify(self, notifications: list[Notification]) -> None:
        """Deliver in order; a listener's own writes queue behind what is being delivered."""
        self.to_notify.extend(notifications)
        if self.notifying:
            return
        self.notifying = True
        try:
            while self.to_notify:
                notification = self.to_notify.popleft()
                for _, listener in list(self.listeners):
                    try:
                        listener(notification)
                    except Exception:
                        log.failure("metadata listener {listener!r} failed on {n}",
                                    listener=listener, n=notification)
        finally:
            self.notifying = False

    # -- sessions ----------------------------------------------------------------------------------

    def add_session(self, session: "EmbeddedMetadataStore") -> int:
        sid = self.next_session
        self.next_session += 1
        self.sessions[sid] = session
        self.ephemerals[sid] = set()
        return sid

    def end_session(self, sid: int) -> Deferred:
        """Remove the session's ephemeral nodes and listeners; fires when that is settled in order."""
        self.sessions.pop(sid, None)
        paths = self.ephemerals.pop(sid, set())
        notifications = []
        for path in sorted(paths, reverse=True):
            if self.tree.remove_subtree(path):
                notifications += [Notification("deleted", path), Notification("children", parent_of(path))]
        self.listeners = [(owner, fn) for owner, fn in self.listeners if owner != sid]
        # Ephemeral nodes were never on disk, so there is nothing to log, but the Deferred still waits
        # its turn behind earlier writes.
        if self.failure is not None or not self.started or self.closed:
            self.notify(notifications)
            return succeed(None)
        return self.commit([], None, notifications)


# ---------------------------------------------------------------------------------------------------
# The session: IMetadataStore.

@implementer(IMetadataStore)
class EmbeddedMetadataStore:
    """
    An ``IMetadataStore`` over an in-process tree (see the module docstring for the full contract).

    ``data_dir`` None: memory only, usable at once. Otherwise durable under ``data_dir`` (created if
    missing, locked against a second store) and ``start()`` is required before use. ``reactor`` supplies
    time (``seconds``), ``callLater`` and, in durable mode, the thread hand-off (``callFromThread``).
    ``sync`` False skips fsync. ``snapshot_log_bytes`` is the log size past which the next write batch
    is replaced by a snapshot.
    """

    def __init__(self, data_dir: Optional[str], reactor, *, sync: bool = True,
                 snapshot_log_bytes: int = 16 * 1024 * 1024, _core: Optional[_Core] = None):
        self._core = _core if _core is not None else _Core(data_dir, reactor, sync, snapshot_log_bytes)
        self._owner = _core is None
        self.closed = False
        self.session_id = self._core.add_session(self)
        self._closing: Optional[Deferred] = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Deferred:
        """Load the tree from disk (durable mode); fires when the store is usable. Idempotent."""
        return self._core.start()

    def new_session(self) -> "EmbeddedMetadataStore":
        """Another client on the same tree, with its own session id, ephemeral nodes and listeners."""
        return EmbeddedMetadataStore(None, None, _core=self._core)

    def snapshot(self) -> Deferred:
        """Write a snapshot and empty the log now (durable mode); fires when done."""
        error = self._core.check_usable(self)
        if error is not None:
            return fail(error)
        if self._core.data_dir is None:
            return succeed(None)
        return self._core.request_snapshot()

    def close(self) -> Deferred:
        """
        End this session: its ephemeral nodes are removed (listeners hear "deleted") and its listeners
        dropped. Closing the store that owns the tree also closes every other session, waits for all
        queued writes, writes a snapshot and releases the files. Idempotent.
        """
        if self._closing is not None:
            return self._closing
        self.closed = True
        core = self._core
        if core.closed:
            self._closing = succeed(None)
            return self._closing
        if not self._owner:
            self._closing = core.end_session(self.session_id)
            return self._closing

        async def close_all():
            for session in list(core.sessions.values()):
                if session is not self:
                    await session.close()
            await core.end_session(self.session_id)
            if core.data_dir is not None and core.started and core.failure is None and core.log_fd is not None:
                await core.snapshot_settled()
                if core.log_size > HEADER_SIZE or core.pending:
                    await core.request_snapshot().addErrback(lambda f: None)
                await core.drain()
            core.closed = True
            core._release()

        self._closing = ensureDeferred(close_all())
        return self._closing

    def _abandon(self) -> None:
        """For tests: stop as if the process died (nothing flushed, no ephemeral removal)."""
        self.closed = True
        self._core.abandon()

    # -- reads -------------------------------------------------------------------------------------

    def _stat(self, path: str, node: Node) -> Stat:
        return Stat(path, node.version, node.ctime, node.mtime, node.owner is not None)

    def _read(self, path: str, fn):
        error = self._core.check_usable(self)
        if error is None:
            try:
                check_path(path)
            except ValueError as e:
                error = e
        if error is not None:
            return fail(error)
        return succeed(fn(self._core.tree.nodes.get(path)))

    def get(self, path: str) -> Deferred:
        """``(value, Stat)`` or None; reflects writes whose Deferreds have not fired yet."""
        return self._read(path, lambda node: None if node is None else (node.data(), self._stat(path, node)))

    def exists(self, path: str) -> Deferred:
        """``Stat`` or None."""
        return self._read(path, lambda node: None if node is None else self._stat(path, node))

    def get_children(self, path: str) -> Deferred:
        """Sorted child names; [] when the node is absent."""
        return self._read(path, lambda node: [] if node is None else node.child_names(path))

    # -- writes ------------------------------------------------------------------------------------

    def put(self, path: str, value: bytes, expected_version: Optional[int] = None,
            ephemeral: bool = False, sequential: bool = False) -> Deferred:
        """
        See ``IMetadataStore.put``. A put on an existing node keeps that node's ephemeral or persistent
        kind (as ZooKeeper's setData does). ``sequential`` always creates; it takes ``expected_version``
        None or -1 only. Fails with NoChildrenForEphemeralsError under an ephemeral node.
        """
        try:
            raw = value_bytes(value)
            if len(raw) > log_format.MAX_VALUE_BYTES:
                raise ValueError(f"metadata value of {len(raw)} bytes is over the "
                                 f"{log_format.MAX_VALUE_BYTES} a log record can hold")
            return self._core.commit(*self._change(path, raw, _kept(value, raw), expected_version,
                                                   ephemeral, sequential))
        except (MetadataStoreError, ValueError, TypeError) as e:
            return fail(e)

    def put_all(self, writes) -> Deferred:
        """
        See ``IMetadataStore.put_all``: the writes are checked against the tree first, then applied
        together and logged as one record, so a crash keeps all of them or none (a record is replayed
        whole or cut as torn). One fsync, and the Deferred fires once that record is durable.
        """
        checked = []
        for index, (path, value, version) in enumerate(writes):
            try:
                raw = value_bytes(value)
                self._check_group_write(path, raw, version, [w[0] for w in checked])
            except (MetadataStoreError, ValueError, TypeError) as e:
                e.failed_index = index
                return fail(e)
            checked.append((path, raw, _kept(value, raw), version))
        ops, stats, notifications = [], [], []
        for path, raw, kept, version in checked:
            # Checked above, on a tree the earlier writes of the group cannot have changed for it.
            write_ops, stat, write_notifications = self._change(path, raw, kept, version, False, False,
                                                                checked=True)
            ops += write_ops
            stats.append(stat)
            notifications += write_notifications
        return self._core.commit(ops, stats, notifications)

    def _check_group_write(self, path, value, version, earlier) -> None:
        """Why one write of a ``put_all`` would fail on the tree as it is (raised), else nothing."""
        error = self._core.check_writable(self)
        if error is not None:
            raise error
        check_path(path)
        if not isinstance(value, bytes):
            raise TypeError(f"metadata values are bytes, not {type(value).__name__}")
        if len(value) > log_format.MAX_VALUE_BYTES:
            raise ValueError(f"metadata value of {len(value)} bytes is over the "
                             f"{log_format.MAX_VALUE_BYTES} a log record can hold")
        if not isinstance(version, int) or version < -1:
            raise ValueError(f"put_all takes expected versions -1 or n >= 0, not {version!r}")
        for other in earlier:
            if other == path or other.startswith(path + "/") or path.startswith(other + "/"):
                raise ValueError(f"put_all paths must be distinct and unrelated: {other}, {path}")
        nodes = self._core.tree.nodes
        node = nodes.get(path)
        if version == -1:
            if node is not None:
                raise AlreadyExistsError(path)
            if path == "/":
                raise ValueError("cannot create the root")
            ancestor = parent_of(path)
            while ancestor not in nodes:
                ancestor = parent_of(ancestor)
            if nodes[ancestor].owner is not None:
                raise NoChildrenForEphemeralsError(f"{ancestor} is ephemeral")
        elif node is None:
            raise NotFoundError(path)
        elif node.version != version:
            raise BadVersionError(f"{path}: expected version {version}, found {node.version}")

    def _change(self, path, raw, kept, expected_version, ephemeral, sequential, checked=False):
        """Apply one put to the tree: ``(log ops, Stat, notifications)`` for ``commit``; raises first
        (changing nothing) when the put is refused. ``raw``: the value's bytes, logged; ``kept``:
        what the node holds (``_kept``). ``checked``: ``put_all`` checked the session and the path
        already (``_check_group_write``), and nothing ran since."""
        core = self._core
        if not checked:
            error = core.check_writable(self)
            if error is not None:
                raise error
            check_path(path)
        if sequential and expected_version not in (None, -1):
            raise ValueError("a sequential put creates a node: expected_version must be None or -1")
        nodes = core.tree.nodes
        now = core.now_ms()
        if sequential:
            parent_path = parent_of(path) if path != "/" else "/"
            parent = nodes.get(parent_path)
            seq = parent.seq if parent is not None else 0
            path = f"{path}{seq:010d}"
            check_path(path)    # the counter made it longer
            if path in nodes:   # only possible if someone made this name by hand
                raise AlreadyExistsError(path)
        node = nodes.get(path)
        if node is not None:
            if expected_version == -1:
                raise AlreadyExistsError(path)
            if expected_version is not None and expected_version != node.version:
                raise BadVersionError(f"{path}: expected version {expected_version}, found {node.version}")
            core.tree.preserve(path)
            node.value = kept
            node.version += 1
            node.mtime = now
            ops = [] if node.owner is not None else [node.set_op(path, raw)]
            return ops, self._stat(path, node), [Notification("modified", path)]
        if path == "/":
            raise ValueError("cannot create the root")
        if expected_version is not None and expected_version >= 0:
            raise NotFoundError(path)
        if expected_version is not None and expected_version < -1:
            raise ValueError(f"bad expected_version {expected_version}")
        return self._create(path, raw, kept, ephemeral, sequential, now)

    def _create(self, path: str, raw: bytes, kept, ephemeral: bool, sequential: bool, now: int):
        core = self._core
        nodes = core.tree.nodes
        # Check every missing ancestor first so that a refused create changes nothing.
        missing = []
        ancestor = parent_of(path)
        while ancestor not in nodes:
            missing.append(ancestor)
            ancestor = parent_of(ancestor)
        if nodes[ancestor].owner is not None:
            raise NoChildrenForEphemeralsError(f"{ancestor} is ephemeral")
        notifications: list[Notification] = []
        tree = core.tree
        for parent_path in reversed(missing):
            tree.preserve(parent_path)
            nodes[parent_path] = Node(b"", now)
            nodes[parent_of(parent_path)].add_child(parent_path)
            notifications += [Notification("created", parent_path),
                              Notification("children", parent_of(parent_path))]
        parent = nodes[parent_of(path)]
        if sequential:
            tree.preserve(parent_of(path))
            parent.seq += 1
        # Built after the counter moved: the parent's record carries it, so that sequential names never
        # repeat after a restart (even for ephemeral children, which are not logged themselves).
        ops = [nodes[p].set_op(p) for p in reversed(missing)]
        if sequential and not missing:
            ops.append(parent.set_op(parent_of(path)))
        tree.preserve(path)
        node = nodes[path] = Node(kept, now, self.session_id if ephemeral else None)
        parent.add_child(path)
        if ephemeral:
            core.ephemerals[self.session_id].add(path)
        else:
            ops.append(node.set_op(path, raw))
        notifications += [Notification("created", path), Notification("children", parent_of(path))]
        return ops, self._stat(path, node), notifications

    def delete(self, path: str, expected_version: Optional[int] = None) -> Deferred:
        """Remove one node (NotFoundError, BadVersionError, NotEmptyError). The root cannot go."""
        core = self._core
        error = self._removal_error(path)
        if error is not None:
            return fail(error)
        node = core.tree.nodes.get(path)
        if node is None:
            return fail(NotFoundError(path))
        if expected_version is not None and expected_version != node.version:
            return fail(BadVersionError(f"{path}: expected version {expected_version}, found {node.version}"))
        if node.children:
            return fail(NotEmptyError(path))
        return self._remove(path)

    def delete_recursive(self, path: str) -> Deferred:
        """Remove ``path`` and all below it in one logged transaction; no error when absent."""
        core = self._core
        error = self._removal_error(path)
        if error is not None:
            return fail(error)
        if path not in core.tree.nodes:
            return core.commit([], None, [])
        return self._remove(path)

    def _removal_error(self, path: str) -> Optional[Exception]:
        """Why this session cannot delete ``path`` whatever the tree holds (closed, failed, bad path,
        root), or None."""
        error = self._core.check_writable(self)
        if error is not None:
            return error
        try:
            check_path(path)
        except ValueError as e:
            return e
        if path == "/":
            return ValueError("cannot delete the root")
        return None

    def _remove(self, path: str) -> Deferred:
        """Remove ``path`` and its subtree from the tree; log it and announce every removed node."""
        core = self._core
        removed = core.tree.remove_subtree(path)
        notifications = []
        for removed_path, node in removed:
            if node.owner is not None:
                core.ephemerals.get(node.owner, set()).discard(removed_path)
            notifications += [Notification("deleted", removed_path),
                              Notification("children", parent_of(removed_path))]
        # One delete record covers the whole subtree on replay. An ephemeral node has no children and
        # was never logged, so it needs no record.
        ops = [encode_delete(path)] if removed[-1][1].owner is None else []
        return core.commit(ops, None, notifications)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """See the module docstring: direct calls, in order, once durable; dropped with the session."""
        self._core.listeners.append((self.session_id, listener))

    def register_session_listener(self, listener: Callable[[str], None]) -> None:
        """
        Accepted for the ZooKeeper store's sake (``zookeeper.py``: "suspended", "lost",
        "reconnected", "expired-new-session"), so that callers need not check the store's type. An
        embedded session lives as long as the process and is never lost: ``listener`` is never called.
        """

    def recreate_ephemerals(self, paths=None) -> Deferred:
        """The ZooKeeper store's call after a new session; an embedded session never needs it: []."""
        return succeed([])

