"""
Ledger handles: the single writer (``LedgerHandle``) and readers (``ReadOnlyLedgerHandle``).

Writer state machine (``WriterState``)::

    OPEN --close()--> CLOSING --pending adds done--> CLOSED
      |                  |
      +--fenced / not enough bookies / unauthorized / metadata failure--> ERRORED --close()--> CLOSED

Adds are the hot path: each is one small ``_PendingAdd`` (packed bytes, precomputed write set, an
ack bitmask over ensemble indices); the adds of one ``add_entries_notify`` go to each bookie in one
request answered to one ``_BookieAck`` (in-process client; a TCP client gets a Deferred per copy),
and those completing together are told to their waiter in one call; no coroutine and no
timer per entry (add timeouts are checked by one periodic check per handle while adds are in flight,
queued on the client's ``AddTimeouts``: one reactor call for all the handles of a client). An add's Deferred fires
when it has ``Qa`` acks *and* every earlier add has fired, so completions and the LAC advance in
entry order.

Ensemble changes (a bookie failed or timed out): the new segment starts at LAC + 1, which is also the
first pending entry; completions are held while the change is in progress, because an entry may
only be confirmed once the metadata says where its replicas are. When the metadata CAS succeeds,
every pending add whose write set includes a replaced index forgets that index's ack and is re-sent
to the replacement.
"""

import collections
import enum
import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import (
    BKException, BookieReadOnlyError, BookieUnavailableError, DigestMismatchError, LedgerClosedError,
    LedgerFencedError, NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.common.waiters import tell_done, tell_failed
from pulsar_twisted.ledger.interfaces import ILedgerHandle, LedgerEntry
from pulsar_twisted.resources.ledgers import LedgerMetadata, LedgerState
from pulsar_twisted.ledger.quorum import DistributionSchedule
from pulsar_twisted.metadata.interfaces import (
    BadVersionError, MetadataStoreError, MetadataUnavailableError, NotFoundError)
from pulsar_twisted.wire.bookie import pack_entry, unpack_entry

log = Logger()

# Errors after which a writer must stop: another party owns the ledger now, or our key is wrong.
# Anything else from a bookie is that bookie's problem and leads to an ensemble change.
_FATAL_ADD_ERRORS = (LedgerFencedError, UnauthorizedAccessError)

# Shared stand-ins for what an idle writer would otherwise hold per handle (issue 14: memory per
# loaded topic): no failed bookie, no add in flight, the segment list of a never-changed ledger.
_NO_FAILED = MappingProxyType({})
_NO_PENDING = ()
_FIRST_SEGMENT_ONLY = (0,)
_KEYS = {}      # master key -> the same bytes, shared by the handles (at most 64 kept)


@functools.lru_cache(maxsize=64)
def _schedule_of(ensemble_size, write_quorum, ack_quorum):
    """The DistributionSchedule of (E, Qw, Qa): immutable, so one per shape, shared by handles."""
    return DistributionSchedule(ensemble_size, write_quorum, ack_quorum)


@dataclass
class LedgerEnv:
    """What every handle of one client shares (built by ``BookKeeperClient``). Times in seconds;
    ``writable_bookies`` returns the ids currently registered as writable."""

    bookie_client: object
    clock: object
    manager: object
    placement: object
    writable_bookies: Callable[[], set]
    read_timeout: float = 5.0
    speculative_read_timeout: float = 2.0
    add_timeout: float = 30.0
    #: a ``ledger.health.BookieHealth`` told of failed and timed-out writes (None: nobody)
    health: object = None
    _add_timeouts: object = field(default=None, init=False, repr=False, compare=False)

    def add_timeouts(self) -> "AddTimeouts":
        """The add-timeout queue every writer of this client shares (made on first use)."""
        queue = self._add_timeouts
        if queue is None:
            queue = self._add_timeouts = AddTimeouts(self.clock)
        return queue


class AddTimeouts:
    """
    The add-timeout checks of every writer of one client, on one reactor call. A DelayedCall per
    writer cost about 400 bytes per loaded topic (issue 14); an entry here is two deque slots (its
    time, the same float as ``handle._timeout_at``, then the handle: no tuple per entry).

    ``schedule(handle, delay)`` calls ``handle._check_timeouts()`` ``delay`` seconds later, unless
    ``cancel(handle)`` came first; a handle has at most one live check (``handle._timeout_at``, its
    time, None when none). Writers ask with the same delay (the client's add timeout), so times
    arrive in order and the queue is a FIFO with the reactor call armed for its head; an earlier
    time (the timeout lowered meanwhile) is put in its place. A cancelled check stays queued (it
    is skipped) until its time or until no live check is left, when the queue is emptied and the
    reactor call cancelled.
    """

    __slots__ = ("clock", "_queue", "_call", "_call_at", "_live")

    def __init__(self, clock):
        self.clock = clock
        self._queue = collections.deque()   # time, handle, time, handle, ... in time order
        self._call = None
        self._call_at = None
        self._live = 0

    def __len__(self) -> int:
        """Live (scheduled, not cancelled nor run) checks."""
        return self._live

    def schedule(self, handle, delay: float) -> None:
        if handle._timeout_at is not None:
            self.cancel(handle)
        at = self.clock.seconds() + max(0.0, delay)
        handle._timeout_at = at
        self._live += 1
        queue = self._queue
        if queue and queue[-2] > at:
            index = len(queue)
            while index > 0 and queue[index - 2] > at:
                index -= 2
            queue.insert(index, handle)
            queue.insert(index, at)
        else:
            queue.append(at)
            queue.append(handle)
        if self._call is None or self._call_at > at:
            self._arm()

    def cancel(self, handle) -> None:
        if handle._timeout_at is None:
            return
        handle._timeout_at = None
        self._live -= 1
        if self._live == 0:
            self._queue.clear()
            self._arm()

    def _arm(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        queue = self._queue
        if queue:
            self._call_at = queue[0]
            self._call = self.clock.callLater(max(0.0, self._call_at - self.clock.seconds()), self._fire)

    def _fire(self) -> None:
        # self._call stays (inactive) while the checks run, so that the ones they schedule again
        # do not arm a call each; _arm at the end arms one for the new head.
        # Due: everything up to the time the call was armed for (the reactor's own arithmetic
        # may land a hair before it) and up to now.
        due = max(self.clock.seconds(), self._call_at)
        queue = self._queue
        while queue and queue[0] <= due:
            at = queue.popleft()
            handle = queue.popleft()
            if handle._timeout_at is not at:
                continue        # cancelled (and maybe scheduled again later)
            handle._timeout_at = None
            self._live -= 1
            try:
                handle._check_timeouts()
            except Exception:
                log.failure("ledger {ledger}: add timeout check failed", ledger=handle.ledger_id)
        self._arm()


class _ReadEntryOp:
    """
    Reads one entry from the replicas of its write set: one at a time, moving to the next on an
    error or a digest mismatch, and also (speculatively, keeping the first request open) when the
    current one has not answered within the speculative timeout. The first verified answer wins.
    A timer exists only while a request is outstanding, so local (synchronous) reads cost none.
    """

    __slots__ = ("env", "ledger_id", "entry_id", "replicas", "on_done", "next", "outstanding",
                 "done", "timer", "errors")

    def __init__(self, env, ledger_id, entry_id, replicas, on_done):
        self.env = env
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.replicas = replicas
        self.on_done = on_done      # called once with an UnpackedEntry or a Failure
        self.next = 0
        self.outstanding = 0
        self.done = False
        self.timer = None
        self.errors = []

    def start(self):
        self._send_next()

    def _send_next(self):
        bookie = self.replicas[self.next]
        self.next += 1
        self.outstanding += 1
        d = self.env.bookie_client.read_entry(bookie, self.ledger_id, self.entry_id)
        d.addCallbacks(self._answered, self._failed, callbackArgs=(bookie,), errbackArgs=(bookie,))
        if not self.done:
            self._arm_timer()

    def _arm_timer(self):
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        env = self.env
        more = self.next < len(self.replicas)
        delay = env.speculative_read_timeout if more and env.speculative_read_timeout else \
            env.read_timeout
        self.timer = env.clock.callLater(delay, self._timer_fired)

    def _timer_fired(self):
        self.timer = None
        if self.done:
            return
        if self.next < len(self.replicas):
            self._send_next()
        else:
            self.errors.append(BookieUnavailableError(
                f"read of {self.ledger_id}:{self.entry_id} timed out"))
            self._finish(Failure(self._best_error()))

    def _answered(self, packed, bookie):
        if self.done:
            return None
        try:
            entry = unpack_entry(packed, self.ledger_id, self.entry_id)
        except DigestMismatchError:
            log.warn("digest mismatch reading {ledger}:{entry} from {bookie}",
                     ledger=self.ledger_id, entry=self.entry_id, bookie=bookie)
            return self._failed(Failure(), bookie)
        self._finish(entry)
        return None

    def _failed(self, failure, bookie):
        self.outstanding -= 1
        self.errors.append(failure.value)
        if self.done:
            return None
        if self.next < len(self.replicas):
            self._send_next()
        elif self.outstanding == 0:
            self._finish(Failure(self._best_error()))
        return None

    def _best_error(self):
        # All replicas saying "no such entry" is an answer; one corrupt replica among failures is
        # worth reporting as such; otherwise the last transport-ish error.
        if all(isinstance(e, (NoSuchEntryError, NoSuchLedgerError)) for e in self.errors):
            return NoSuchEntryError(f"entry {self.ledger_id}:{self.entry_id} not found")
        for e in self.errors:
            if isinstance(e, DigestMismatchError):
                return e
        return self.errors[-1]

    def _finish(self, result):
        self.done = True
        if self.timer is not None:
            if self.timer.active():
                self.timer.cancel()
            self.timer = None
        self.on_done(result)


class _RangeRead:
    """Collects the reads of first..last into one Deferred (first error wins)."""

    __slots__ = ("first", "results", "remaining", "deferred", "ledger_id")

    def __init__(self, ledger_id, first, last):
        self.ledger_id = ledger_id
        self.first = first
        self.results = [None] * (last - first + 1)
        self.remaining = len(self.results)
        self.deferred = defer.Deferred()

    def done_one(self, result, entry_id):
        if self.deferred.called:
            return
        if isinstance(result, Failure):
            self.deferred.errback(result)
            return
        self.results[entry_id - self.first] = LedgerEntry(self.ledger_id, entry_id, result.payload)
        self.remaining -= 1
        if self.remaining == 0:
            self.deferred.callback(self.results)


class _BaseHandle:
    """Metadata bookkeeping and the read path shared by writers and readers."""

    # Slots (issue 14: memory per loaded topic), without ``__dict__`` (32 bytes more per handle;
    # tests stub a method with ``testing.patching.patch_method``).
    __slots__ = ("_env", "ledger_id", "_master_key", "_schedule", "metadata", "metadata_version",
                 "_segment_firsts", "__weakref__")

    def __init__(self, env: LedgerEnv, ledger_id: int, metadata: LedgerMetadata, version: int,
                 master_key: bytes):
        self._env = env
        self.ledger_id = ledger_id
        # Every ledger of a broker has the same few passwords: one key object for all of them.
        self._master_key = _KEYS.setdefault(master_key, master_key) if len(_KEYS) < 64 else master_key
        self._schedule = _schedule_of(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
        self._set_metadata(metadata, version)

    def _set_metadata(self, metadata, version):
        self.metadata = metadata
        self.metadata_version = version
        firsts = tuple(first for first, _ in metadata.ensembles)
        self._segment_firsts = _FIRST_SEGMENT_ONLY if firsts == _FIRST_SEGMENT_ONLY else firsts

    def _replicas(self, entry_id):
        """Bookie ids holding ``entry_id``, in write-set order."""
        firsts = self._segment_firsts
        index = len(firsts) - 1
        while index > 0 and firsts[index] > entry_id:
            index -= 1
        ensemble = self.metadata.ensembles[index][1]
        return [ensemble[i] for i in self._schedule.write_set(entry_id)]

    def read_entries(self, first: int, last: int):
        """See ILedgerHandle. NoSuchEntryError beyond the LAC; ValueError on a bad range."""
        if first < 0 or first > last:
            return defer.fail(ValueError(f"bad entry range {first}..{last}"))
        if last > self.last_add_confirmed:
            return defer.fail(NoSuchEntryError(
                f"entry {last} of ledger {self.ledger_id} is beyond LAC {self.last_add_confirmed}"))
        collector = _RangeRead(self.ledger_id, first, last)
        for entry_id in range(first, last + 1):
            op = _ReadEntryOp(self._env, self.ledger_id, entry_id, self._replicas(entry_id),
                              lambda result, e=entry_id: collector.done_one(result, e))
            op.start()
            if collector.deferred.called:
                break
        return collector.deferred

    def read_entry_unchecked(self, entry_id: int):
        """Read one entry without the LAC check (recovery needs entries past the known LAC).
        Deferred firing with the verified ``UnpackedEntry``."""
        d = defer.Deferred()

        def done(result):
            d.errback(result) if isinstance(result, Failure) else d.callback(result)
        _ReadEntryOp(self._env, self.ledger_id, entry_id, self._replicas(entry_id), done).start()
        return d


@implementer(ILedgerHandle)
class ReadOnlyLedgerHandle(_BaseHandle):
    """
    A reader's view of a ledger, up to ``last_add_confirmed``: the recorded last entry of a closed
    ledger, or the LAC learned from the bookies when opened without recovery. Adds fail with
    LedgerClosedError; ``close`` only releases the handle.
    """

    __slots__ = ("last_add_confirmed", "length", "_released")

    def __init__(self, env, ledger_id, metadata, version, master_key, last_add_confirmed,
                 length=None):
        super().__init__(env, ledger_id, metadata, version, master_key)
        self.last_add_confirmed = last_add_confirmed
        self.length = metadata.length if length is None else length
        self._released = False

    @property
    def closed(self):
        return self.metadata.state is LedgerState.CLOSED

    def add_entry(self, data):
        return defer.fail(LedgerClosedError(f"ledger {self.ledger_id} is open read-only"))

    def close(self):
        self._released = True
        return defer.succeed(None)


def _session_expired(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) is ZooKeeper's SessionExpiredError. The ZooKeeper
    store wraps kazoo's errors in MetadataStoreError keeping the original as ``__cause__``; the
    name is compared so that this module does not depend on kazoo."""
    seen = 0
    while error is not None and seen < 8:
        if type(error).__name__ == "SessionExpiredError":
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


class WriterState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    ERRORED = "errored"


#: A handle in these states has failed (or settled) every add: nothing more is sent.
_NOT_SENDING = (WriterState.ERRORED, WriterState.CLOSED)


class _PendingAdd:
    """One add in flight: ``deferred`` is its waiter (None once settled), with its ``ctx``
    (``add_entries_notify``)."""

    __slots__ = ("entry_id", "packed", "length", "deferred", "ctx", "write_set", "acked",
                 "ack_count", "sent_at")

    def __init__(self, entry_id, packed, length, deferred, ctx, write_set, sent_at):
        self.entry_id = entry_id
        self.packed = packed
        self.length = length
        self.deferred = deferred
        self.ctx = ctx
        self.write_set = write_set
        self.acked = 0          # bitmask over ensemble indices
        self.ack_count = 0
        self.sent_at = sent_at


class _BookieAck:
    """One bookie's answer to adds sent to it together, for ``IBookieClient`` implementations with
    ``add_entries_notify`` (the in-process client): the ``callback`` / ``errback`` a Deferred per
    add would have run, once for them all (storage stores or refuses such a batch whole)."""

    __slots__ = ("handle", "ops", "index", "bookie")

    def __init__(self, handle, ops, index, bookie):
        self.handle = handle
        self.ops = ops
        self.index = index
        self.bookie = bookie

    def callback(self, result):
        self.handle._adds_ok(self.ops, self.index, self.bookie)

    def errback(self, failure):
        self.handle._add_failed(failure, self.ops[0], self.index, self.bookie)


@implementer(ILedgerHandle)
class LedgerHandle(_BaseHandle):
    """
    The writer of a ledger (from ``BookKeeperClient.create_ledger``). ``last_add_confirmed`` is the
    last completed add; ``length`` the payload bytes of the completed adds. See the module docstring
    for the state machine and the ensemble-change rules.
    """

    __slots__ = ("state", "_error", "_lac", "_length", "_pending_length", "_next_entry_id", "_pending",
                 "_ensemble", "_ack_quorum", "_failed", "_changing", "_resending", "_completing",
                 "_timeout_at", "_close_waiters", "_close_started")

    def __init__(self, env, ledger_id, metadata, version, master_key):
        super().__init__(env, ledger_id, metadata, version, master_key)
        self.state = WriterState.OPEN
        self._error = None
        self._lac = -1
        self._length = 0
        self._pending_length = 0
        self._next_entry_id = 0
        #: Adds sent, oldest first: a deque while some are in flight, else an empty tuple (an empty
        #: deque holds a 760-byte block: the largest item of an idle topic).
        self._pending = _NO_PENDING
        self._ensemble = tuple(metadata.last_ensemble[1])
        self._ack_quorum = metadata.ack_quorum
        #: ensemble index -> bookie id awaiting replacement (a shared empty mapping while none)
        self._failed = _NO_FAILED
        self._changing = False
        self._resending = False
        self._completing = False
        #: When the add-timeout check is due (``AddTimeouts``), None while none is scheduled.
        self._timeout_at = None
        self._close_waiters = None  # list of Deferreds once close() was called
        self._close_started = False

    # -- ILedgerHandle ---------------------------------------------------------------------------

    @property
    def last_add_confirmed(self):
        return self._lac

    @property
    def length(self):
        return self._length

    @property
    def closed(self):
        return self.state is WriterState.CLOSED

    def add_entry(self, data):
        if self.state is not WriterState.OPEN:
            return defer.fail(self._refusal())
        d = defer.Deferred()
        self.add_entry_notify(data, d)
        return d

    def add_entry_notify(self, data, waiter) -> None:
        """``add_entry`` without a Deferred: ``waiter.callback(entry_id)`` or ``waiter.errback(failure)``
        is called when the Deferred would fire (a refusal at once), in the same order. ``waiter``: a
        Deferred, or any object with its ``callback`` / ``errback``."""
        self.add_entries_notify((data,), waiter, (None,))

    def add_entries_notify(self, datas, waiter, ctxs) -> None:
        """Add each of ``datas`` with the ctx at the same place of ``ctxs``, in order (the managed
        ledger's hot path: the adds of one read). With a ctx (not None), ``waiter.adds_complete(
        entry_ids, ctxs)`` once for the adds completing together (in entry order), or
        ``waiter.add_failed(failure, ctx)`` for each failure (a refusal at once); with None,
        ``waiter.callback(entry_id)`` / ``waiter.errback(failure)`` (``add_entry_notify``). Each
        bookie gets the entries of its write sets in one request when the bookie client takes
        them so (``add_entries_notify``: the in-process client)."""
        if self.state is not WriterState.OPEN:
            for ctx in ctxs:
                tell_failed(waiter, ctx, Failure(self._refusal()))
            return
        env = self._env
        now = env.clock.seconds()
        write_set = self._schedule.write_set
        ledger_id, lac = self.ledger_id, self._lac
        entry_id, length = self._next_entry_id, self._pending_length
        ops = []
        for data, ctx in zip(datas, ctxs):
            length += len(data)
            ops.append(_PendingAdd(entry_id, pack_entry(ledger_id, entry_id, lac, length, data),
                                   length, waiter, ctx, write_set(entry_id), now))
            entry_id += 1
        self._next_entry_id, self._pending_length = entry_id, length
        pending = self._pending
        if not pending:
            pending = self._pending = collections.deque()
        pending.extend(ops)
        self._send_all(ops)
        if self._timeout_at is None and env.add_timeout:
            self._arm_timeout()

    def close(self):
        """Wait for pending adds, then record CLOSED with the LAC and length (CAS). A fenced
        writer only closes locally: the recovering reader owns the metadata now."""
        if self.state is WriterState.CLOSED:
            return defer.succeed(None)
        d = defer.Deferred()
        if self._close_waiters is not None:
            self._close_waiters.append(d)
            return d
        self._close_waiters = [d]
        if self.state is WriterState.OPEN:
            self.state = WriterState.CLOSING
        self._maybe_finish_close()
        return d

    def debug_state(self) -> str:
        """One line on what this writer is doing, for a log line about something stuck."""
        failed = ",".join(f"{i}:{b}" for i, b in sorted(self._failed.items())) or "none"
        return (f"ledger {self.ledger_id} {self.state.value}: {len(self._pending)} adds pending, "
                f"lac {self._lac}, failed bookies {failed}, ensemble change "
                f"{'running' if self._changing else 'idle'}, close "
                f"{'writing' if self._close_started else ('asked' if self._close_waiters else 'no')}")

    # -- add path --------------------------------------------------------------------------------

    def _refusal(self):
        if self.state is WriterState.ERRORED:
            return self._error
        return LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def _send_all(self, ops):
        """Send new ``ops`` to the bookies of their write sets that are not failed: one request
        per bookie for them all with a client taking batches, else one per copy. A send refused
        at once may fail the handle (fenced): then no further copy goes out (one add at a time,
        the later adds would not have been sent at all, and a copy left on a bookie not yet
        fenced is one a new owner's recovery takes in)."""
        # (``self._failed`` is read at each send: a send refused at once marks its bookie failed.)
        if getattr(self._env.bookie_client, "add_entries_notify", None) is None:
            for op in ops:
                for index in op.write_set:
                    if self.state in _NOT_SENDING:
                        return
                    if index not in self._failed:
                        self._send(op, index)
            return
        schedule = self._schedule
        if schedule.ensemble_size == schedule.write_quorum:     # one write set: every bookie, all
            for index in ops[0].write_set:
                if self.state in _NOT_SENDING:
                    return
                if index not in self._failed:
                    self._send_batch(ops, index)
            return
        by_index = {}       # striped write sets: each bookie gets its own share, in entry order
        for op in ops:
            for index in op.write_set:
                by_index.setdefault(index, []).append(op)
        for index, share in by_index.items():
            if self.state in _NOT_SENDING:
                return
            if index not in self._failed:
                self._send_batch(share, index)

    def _send(self, op, index):
        """Send ``op`` to the bookie at ensemble ``index`` (a first send, or a re-send after an
        ensemble change)."""
        if getattr(self._env.bookie_client, "add_entries_notify", None) is not None:
            self._send_batch((op,), index)
            return
        bookie = self._ensemble[index]
        d = self._env.bookie_client.add_entry(bookie, self.ledger_id, op.entry_id, self._master_key,
                                              op.packed)
        d.addCallbacks(self._add_ok, self._add_failed, callbackArgs=(op, index, bookie),
                       errbackArgs=(op, index, bookie))

    def _send_batch(self, ops, index):
        """Send ``ops`` to the bookie at ensemble ``index`` in one request (in-process bookies:
        their answer comes to a small _BookieAck, no Deferred per copy)."""
        bookie = self._ensemble[index]
        self._env.bookie_client.add_entries_notify(
            _BookieAck(self, ops, index, bookie), bookie, self.ledger_id, self._master_key,
            [(op.entry_id, op.packed) for op in ops])

    def _add_ok(self, _, op, index, bookie):
        self._adds_ok((op,), index, bookie)

    def _adds_ok(self, ops, index, bookie):
        """The bookie at ensemble ``index`` stored ``ops``: count its acks, then complete what has
        its quorum."""
        # Answers from a bookie replaced meanwhile, or for an add already settled, are stale.
        if self._ensemble[index] != bookie:
            return
        bit = 1 << index
        quorum = self._ack_quorum
        ready = False
        for op in ops:
            if op.deferred is None or op.acked & bit:
                continue
            op.acked |= bit
            op.ack_count += 1
            if op.ack_count == quorum:
                ready = True
        if ready:
            self._complete_ready()

    def _add_failed(self, failure, op, index, bookie):
        if self._ensemble[index] != bookie or self.state in (WriterState.ERRORED,
                                                             WriterState.CLOSED):
            return None
        error = failure.value
        if isinstance(error, _FATAL_ADD_ERRORS):
            self._fail_handle(error)
            return None
        health = self._env.health
        if health is not None and not isinstance(error, BookieReadOnlyError):
            health.record_error(bookie)
        if index not in self._failed:
            log.warn("ledger {ledger}: bookie {bookie} failed entry {entry}: {error!r}",
                     ledger=self.ledger_id, bookie=bookie, entry=op.entry_id, error=error)
            self._mark_failed(index, bookie)
            self._maybe_start_change()
        return None

    def _mark_failed(self, index, bookie):
        """Record that the bookie at ensemble ``index`` needs replacing."""
        failed = self._failed
        if failed is _NO_FAILED:
            failed = self._failed = {}
        failed[index] = bookie

    def _complete_ready(self):
        """Fire, in entry order, every head-of-queue add that has its ack quorum."""
        if self._completing or self._changing:
            return
        self._completing = True
        try:
            quorum = self._ack_quorum
            while (self._pending and self._pending[0].ack_count >= quorum
                   and not self._changing and self.state is not WriterState.ERRORED):
                # The ready adds at the head are taken before their waiters hear (which may
                # close this handle: it then finds them done).
                pending, done = self._pending, []
                while pending and pending[0].ack_count >= quorum:
                    done.append(pending.popleft())
                self._lac = done[-1].entry_id
                self._length = done[-1].length
                # op.packed stays: with local bookies an add can complete while the rest of
                # its write set is still being sent.
                self._fire(done)
        finally:
            self._completing = False
        if not self._pending:
            self._pending = _NO_PENDING
            self._maybe_finish_close()

    @staticmethod
    def _fire(done):
        """Tell the waiters of the completed ``done``, in order (``common.waiters``)."""
        told = []
        for op in done:
            d, op.deferred = op.deferred, None
            told.append((d, op.ctx, op.entry_id))
        tell_done(told)

    def _fail_handle(self, error):
        """Move to ERRORED and fail every pending add, in order, with ``error``."""
        if self.state in (WriterState.ERRORED, WriterState.CLOSED):
            return
        log.warn("ledger {ledger} writer failed: {error!r}", ledger=self.ledger_id, error=error)
        self.state = WriterState.ERRORED
        self._error = error
        pending, self._pending = self._pending, _NO_PENDING
        self._cancel_timeout()
        for op in pending:
            d, op.deferred = op.deferred, None
            tell_failed(d, op.ctx, Failure(error))
        self._maybe_finish_close()

    # -- ensemble change -------------------------------------------------------------------------
    #: How long an ensemble change keeps trying a metadata store it cannot reach, and its first
    #: wait (doubling to 2 s): BookKeeper's zkTimeout is 10 s.
    METADATA_RETRY_SECONDS = 10.0
    METADATA_RETRY_FIRST = 0.1

    def _maybe_start_change(self):
        # Once close() is writing the metadata no add is pending, and a change would only race it.
        if self._changing or self._resending or not self._failed or self._close_started:
            return
        if self.state not in (WriterState.OPEN, WriterState.CLOSING):
            return
        self._changing = True
        replacing = dict(self._failed)
        d = defer.Deferred.fromCoroutine(self._change_ensemble(replacing))
        d.addCallbacks(self._ensemble_changed, self._ensemble_change_failed,
                       callbackArgs=(replacing,))

    async def _change_ensemble(self, replacing):
        env = self._env
        start = self._lac + 1
        ensemble = list(self._ensemble)
        writable = env.writable_bookies()
        for index in sorted(replacing):
            ensemble[index] = env.placement.replace_bookie(ensemble, index, writable,
                                                           exclude=set(replacing.values()))
        metadata, version = self.metadata, self.metadata_version
        clock = env.clock
        give_up_at = clock.seconds() + self.METADATA_RETRY_SECONDS
        delay = self.METADATA_RETRY_FIRST
        reread = False
        while True:
            try:
                if reread:
                    metadata, version = await env.manager.read(self.ledger_id)
                    if metadata.state is not LedgerState.OPEN:
                        raise LedgerFencedError(
                            f"ledger {self.ledger_id} is {metadata.state.value} in the metadata")
                    reread = False
                candidate = metadata.with_ensemble(start, ensemble)
                version = await env.manager.write(self.ledger_id, candidate, version)
                return candidate, version, ensemble
            except NotFoundError:
                # Recovered and deleted by the new owner: as fenced as a writer can be.
                raise LedgerFencedError(f"ledger {self.ledger_id} was deleted") from None
            except BadVersionError:
                # Only a recovering reader writes this ledger's metadata besides us: if it did, we
                # are fenced; otherwise re-apply our segment to what is there now.
                reread = True
            except MetadataUnavailableError as e:
                # The store is out of reach (ZooKeeper's ConnectionLoss, a session being
                # re-established): tried again for a while, as BookKeeper's ZooKeeper client
                # retries an operation on ConnectionLoss, instead of failing the writer (and
                # the topic with it) at the first lost connection. The write may have been
                # applied: the next attempt then meets BadVersion and re-reads, and the segment
                # it re-applies starts at the same entry, so it replaces itself.
                if (clock.seconds() + delay > give_up_at
                        or self.state not in (WriterState.OPEN, WriterState.CLOSING)):
                    raise
                log.info("ledger {ledger}: ensemble change waits for the metadata store ({error}); "
                         "trying again in {delay:.1f} s", ledger=self.ledger_id, error=e, delay=delay)
                await task.deferLater(clock, delay, lambda: None)
                delay = min(delay * 2, 2.0)
                reread = True

    def _ensemble_changed(self, result, replacing):
        metadata, version, ensemble = result
        self._changing = False
        if self.state in (WriterState.ERRORED, WriterState.CLOSED):
            self._maybe_finish_close()
            return
        log.info("ledger {ledger}: ensemble from entry {first} is {ensemble}",
                 ledger=self.ledger_id, first=metadata.last_ensemble[0], ensemble=ensemble)
        changed = [i for i, bookie in enumerate(ensemble) if self._ensemble[i] != bookie]
        self._ensemble = tuple(ensemble)
        self._set_metadata(metadata, version)
        for index, bookie in replacing.items():
            if self._failed.get(index) == bookie:
                del self._failed[index]
        if not self._failed:
            self._failed = _NO_FAILED
        now = self._env.clock.seconds()
        # Failures seen while re-sending only get recorded; the next change starts after the loop.
        self._resending = True
        try:
            for op in list(self._pending):
                if op.deferred is None:
                    continue
                for index in op.write_set:
                    if index in changed:
                        bit = 1 << index
                        if op.acked & bit:
                            op.acked &= ~bit
                            op.ack_count -= 1
                        if index not in self._failed:
                            self._send(op, index)
                op.sent_at = now
        finally:
            self._resending = False
        if self._failed:
            self._maybe_start_change()
        else:
            self._complete_ready()

    def _ensemble_change_failed(self, failure):
        self._changing = False
        if self.state in (WriterState.ERRORED, WriterState.CLOSED):
            self._maybe_finish_close()
            return
        error = failure.value
        if isinstance(error, MetadataUnavailableError):
            # The store is unreachable (connection lost, session expired): an outage, not a bug.
            # _fail_handle logs the error in one line.
            pass
        elif not isinstance(error, BKException):
            log.failure("ledger {ledger}: ensemble change failed", failure,
                        ledger=self.ledger_id)
        self._fail_handle(error)

    # -- add timeouts ----------------------------------------------------------------------------

    def _arm_timeout(self):
        self._env.add_timeouts().schedule(self, self._env.add_timeout)

    def _cancel_timeout(self):
        if self._timeout_at is not None:
            self._env.add_timeouts().cancel(self)

    def _check_timeouts(self):
        """Treat bookies that have not acked an add within the add timeout as failed (run by
        ``AddTimeouts``, which has cleared ``_timeout_at``)."""
        if self.state not in (WriterState.OPEN, WriterState.CLOSING) or not self._pending:
            return
        if not self._changing:
            deadline = self._env.clock.seconds() - self._env.add_timeout
            timed_out = {}      # ensemble index -> adds it left unanswered past the deadline
            for op in self._pending:
                if op.sent_at > deadline:
                    continue
                for index in op.write_set:
                    if not op.acked & (1 << index) and index not in self._failed:
                        if index not in timed_out:
                            log.warn("ledger {ledger}: bookie {bookie} timed out on entry {entry}",
                                     ledger=self.ledger_id, bookie=self._ensemble[index],
                                     entry=op.entry_id)
                        timed_out[index] = timed_out.get(index, 0) + 1
            health = self._env.health
            for index, count in timed_out.items():
                self._mark_failed(index, self._ensemble[index])
                if health is not None:
                    for _ in range(count):      # each timed-out request is one error, as in BK
                        health.record_error(self._ensemble[index])
            self._maybe_start_change()
        self._arm_timeout()

    # -- close -----------------------------------------------------------------------------------

    def _maybe_finish_close(self):
        if self._close_waiters is None or self._pending or self._changing:
            return
        if self.state is WriterState.CLOSED or self._close_started:
            return
        self._close_started = True
        self._cancel_timeout()
        if isinstance(self._error, LedgerFencedError):
            self._closed_locally()
            self._fire_close_waiters(None)
            return
        d = defer.Deferred.fromCoroutine(self._write_closed())
        d.addBoth(self._fire_close_waiters)

    async def _write_closed(self):
        manager = self._env.manager
        metadata, version = self.metadata, self.metadata_version
        try:
            while True:
                candidate = metadata.with_closed(self._lac, self._length)
                try:
                    version = await manager.write(self.ledger_id, candidate, version)
                    self._set_metadata(candidate, version)
                    return None
                except NotFoundError:
                    raise LedgerFencedError(f"ledger {self.ledger_id} was deleted") from None
                except BadVersionError:
                    metadata, version = await manager.read(self.ledger_id)
                    if metadata.state is LedgerState.CLOSED and \
                            metadata.last_entry_id == self._lac:
                        self._set_metadata(metadata, version)
                        return None
                    if metadata.state is not LedgerState.OPEN:
                        raise LedgerFencedError(
                            f"ledger {self.ledger_id} was recovered by another client")
        except MetadataStoreError as e:
            if not _session_expired(e):
                raise
            # Expected when a broker loses its ZooKeeper session: the ledger stays OPEN in the
            # metadata and whoever takes the topic over recovers (fences and closes) it. One line,
            # and the close completes locally: there is nothing the callers could do about it.
            log.warn("ledger {ledger}: not recorded as closed, the metadata session expired; "
                     "the next owner's recovery closes it", ledger=self.ledger_id)
            return None
        finally:
            self._closed_locally()

    def _closed_locally(self):
        self.state = WriterState.CLOSED

    def _fire_close_waiters(self, result):
        waiters, self._close_waiters = self._close_waiters, []
        for d in waiters:
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(None)
        return None
