"""
The managed ledger (Pulsar's ``ManagedLedgerImpl``): one named, unbounded log made of a
sequence of ledgers, with the ledger list in the metadata store.

State machine (``State``)::

    INITIALIZING -> LEDGER_OPENED <-> CLOSING_LEDGER -> LEDGER_CLOSED -> CREATING_LEDGER -> LEDGER_OPENED
                    any -> FENCED (someone else owns it) | CLOSED | TERMINATED

Writes: ``add_entry`` wraps the data in an ``AddOp``. In LEDGER_OPENED it is sent to the
current ledger at once; otherwise it waits in ``_queued`` and is sent, in order, when the next
ledger is ready. Sent ops wait in ``_pending`` and complete in order (the ledger client
guarantees it). The op that fills the current ledger is flagged ``close_when_done``: when it
completes the ledger is closed and the next one recorded (Pulsar's ledger switch), adds queue meanwhile.
The next ledger is usually made ahead (``_make_next_ledger``, when the current one is nine tenths
full), and the full ledger's close and the next one's record are written at once: adds wait for
about one metadata write instead of three in a row (close, create, record).

Ownership: the ledger list is written by compare-and-set on the version last seen. A
BadVersion means another broker took the ledger over (it also fenced our last ledger when it
opened it with recovery): this instance goes FENCED and every pending and later add fails with
``ManagedLedgerFencedError``.
"""

import enum
import weakref
from bisect import bisect_left
from collections import deque
from types import MappingProxyType

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import LedgerFencedError, NoSuchLedgerError
from pulsar_twisted.common.position import EARLIEST, LATEST, Entry, Position
from pulsar_twisted.common.waiters import tell_done, tell_failed
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError
from pulsar_twisted.mledger import formats, offloads
from pulsar_twisted.mledger.cache import NO_ENTRY_CACHE, EntryCache
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.counters import ManagedLedgerCounters
from pulsar_twisted.mledger.stats import iso_ms, position_text
from pulsar_twisted.mledger.offload.offloader import OffloadedReadHandle
from pulsar_twisted.mledger.interfaces import (
    CursorNotFoundError, IManagedLedger, ManagedLedgerClosedError, ManagedLedgerError,
    ManagedLedgerFencedError,
)

log = Logger()

MB = 1024 * 1024

#: Trimmed ledgers forgotten (cache, read handle) and deleted per reactor turn: a trim of thousands
#: of consumed ledgers (a drained backlog, a retention expiry) must not hold the reactor for the
#: whole run, each deletion being a metadata delete and a bookie request.
TRIM_SLICE = 16

#: Seconds after which a close still in progress logs what it waits for (then again each period).
CLOSE_REPORT_AFTER = 20.0

#: After a failed ledger creation the adds that would start the next one are refused at once, with
#: no new attempt, for CREATE_RETRY_MIN seconds, doubling with each failure in a row up to
#: CREATE_RETRY_MAX (Pulsar refuses them for a fixed 10 s, WaitTimeAfterLedgerCreationFailureMs).
#: Without it a topic whose ledger cannot be made (fewer writable bookies than the ensemble, the
#: metadata store away) tried again for every add of its reconnecting producers, about 50 times a
#: second, each attempt a warning and metadata requests. The doubling keeps a short outage's
#: recovery within a second, the cap a long one's within 5 s of the bookies' return.
CREATE_RETRY_MIN = 0.5
CREATE_RETRY_MAX = 5.0

#: The empty map a managed ledger's rarely used maps start as (read-only: replaced by a dict on the
#: first insertion).
EMPTY = MappingProxyType({})


#: A ledger's custom metadata values shared by every managed ledger's (bytes are kept as given).
_APPLICATION = b"pulsar"
_COMPONENT = b"managed-ledger"


def _without(items: tuple, item) -> tuple:
    """``items`` without the first ``item`` (by equality, as ``list.remove``), unchanged if absent.
    ``items`` may be a lone listener (``_with_listener``)."""
    if not isinstance(items, tuple):
        return () if items == item else items
    if item not in items:
        return items
    listed = list(items)
    listed.remove(item)
    return listed[0] if len(listed) == 1 else tuple(listed)


def _with_listener(listeners, callback):
    """``listeners`` (an empty tuple, a lone callable or a tuple of them) plus ``callback``: a lone
    listener is kept as is, not in a 1-tuple (48 bytes per listener per loaded topic, issue 14)."""
    if not isinstance(listeners, tuple):
        return (listeners, callback)
    return (*listeners, callback) if listeners else callback


def _each_listener(listeners) -> tuple:
    return listeners if isinstance(listeners, tuple) else (listeners,)


_tuple_new = tuple.__new__


class ManagedLedgerTerminatedError(ManagedLedgerError):
    """The managed ledger was terminated: it accepts no more entries (Pulsar's topic termination)."""


class State(enum.Enum):
    INITIALIZING = "initializing"
    LEDGER_OPENED = "ledger_opened"
    CLOSING_LEDGER = "closing_ledger"
    LEDGER_CLOSED = "ledger_closed"
    CREATING_LEDGER = "creating_ledger"
    TERMINATED = "terminated"
    FENCED = "fenced"
    CLOSED = "closed"


class LedgerInfo:
    """One ledger of the list: entries and size are of confirmed entries; timestamp is its close time;
    offload: its ``formats.OffloadContext`` once an offload began (``offloads.py``), else None."""

    __slots__ = ("ledger_id", "entries", "size", "timestamp", "offload")

    def __init__(self, ledger_id, entries=0, size=0, timestamp=0, offload=None):
        self.ledger_id = ledger_id
        self.entries = entries
        self.size = size
        self.timestamp = timestamp
        self.offload = offload

    @property
    def offloaded(self) -> bool:
        """Whether its offload is complete (its objects may be read)."""
        return self.offload is not None and self.offload.complete


class AddOp:
    """One ``add_entry`` in flight: its bytes, the caller's Deferred and the ledger it went to."""

    __slots__ = ("ml", "data", "deferred", "ctx", "handle", "close_when_done", "done", "started")

    def __init__(self, ml, data, started, deferred, ctx=None):
        self.ml = ml
        self.data = data
        #: reactor time of ``add_entry``, for the add latency counters
        self.started = started
        #: a Deferred (``add_entry``) or the waiter of ``add_entry_notify``
        self.deferred = deferred
        #: ``add_entry_notify``'s ctx (None: the waiter is called as a Deferred)
        self.ctx = ctx
        self.handle = None
        self.close_when_done = False
        self.done = False

    def added(self, entry_id):
        self.ml._add_complete(self, entry_id)

    def failed(self, failure):
        self.ml._add_failed(self, failure)


class _HandleWaiter:
    """The managed ledgers' waiter on their handles (``LedgerHandle.add_entries_notify``), each
    add's AddOp its ctx: the handle's calls, with what a Deferred would do with an exception from
    them (log it) instead of letting it reach the handle's completion loop. Stateless: one serves
    every managed ledger (a handle's ops all belong to one)."""

    @staticmethod
    def adds_complete(entry_ids, ops):
        ml = ops[0].ml
        try:
            ml._adds_complete(ops, entry_ids)
        except Exception:
            log.failure("managed ledger {name}: completing adds failed", name=ml.name)

    @staticmethod
    def add_failed(failure, op):
        try:
            op.ml._add_failed(op, failure)
        except Exception:
            log.failure("managed ledger {name}: failing an add failed", name=op.ml.name)


_HANDLE_WAITER = _HandleWaiter()


@implementer(IManagedLedger)
class ManagedLedgerImpl:
    """
    A managed ledger. Built and initialized by ``ManagedLedgerFactory.open``; do not construct
    directly. ``reactor`` provides ``callLater`` and ``seconds`` (a ``task.Clock`` in tests).
    """

    # Slots (issue 14: memory per loaded topic): with more than 30 attributes an instance's
    # values no longer fit the class's shared keys and every managed ledger carried its own
    # 1.6 KB dict. No ``__dict__`` either: with one, every instance still had a 16-byte block
    # for its (empty) values and a larger header; tests stub a method with
    # ``testing.patching.patch_method``.
    __slots__ = (
        "factory", "name", "config", "store", "reactor", "properties",
        "cursors", "counters", "_non_durable", "_creating_cursors", "_new_cursors", "_state",
        "_ledgers", "_ledger_ids", "_total_entries", "_total_size", "_terminated_at",
        "_last_confirmed", "_current", "_current_created", "_current_sent", "_rollover_call",
        "_next_ledger", "_pending", "_queued", "_drain_waiters", "_read_handles",
        "_opening_handles", "_cache", "_meta_version", "_meta_writing", "_meta_waiters",
        "_trimming", "_trim_waiters", "_listeners", "_notify_call", "_throttle_listeners",
        "_throttled", "_fenced_listeners", "_close_waiters", "_handing",
        "__weakref__",
    )

    def __init__(self, factory, name: str, config: ManagedLedgerConfig, ledger_client,
                 metadata_store, reactor):
        self.factory = factory
        self.name = name
        self.config = config
        if ledger_client is not factory.ledger_client:
            raise ValueError("a managed ledger uses its factory's ledger client")
        self.store = metadata_store
        self.reactor = reactor
        self.properties = EMPTY     # replaced, never changed in place (set_properties)
        #: name -> durable cursor: the shared EMPTY until the first (producers-only topics, most of
        #: a broker's, have none), then a dict (``_add_cursor``).
        self.cursors = EMPTY
        #: Non-durable cursors, weakly held; an empty tuple until the first (a WeakSet costs ~700 bytes).
        self._non_durable = ()
        # Rarely used queues and maps start empty and shared (tuples, EMPTY) and are made on first
        # use: an idle topic's managed ledger would otherwise hold a dozen empty containers.
        self._creating_cursors = EMPTY
        self._new_cursors = EMPTY
        self._state = State.INITIALIZING
        self._ledgers = {}
        self._ledger_ids = []
        self._total_entries = 0
        self._total_size = 0
        #: Adds and reads counted for /metrics (``pulsar_ml_*``, mledger/counters.py).
        self.counters = ManagedLedgerCounters(reactor)
        self._terminated_at = None
        self._last_confirmed = Position(-1, -1)
        self._current = None
        self._current_created = 0.0
        self._current_sent = 0
        #: The rollover timer: at max_rollover_time, or at min_rollover_time once the ledger is full.
        self._rollover_call = None
        #: The ledger made ahead for the next switch: None, or a Deferred firing with its handle
        #: (None if it could not be made), not yet recorded in our node (``_make_next_ledger``).
        self._next_ledger = None
        #: Sent adds, oldest first: a deque while some are in flight, else an empty tuple (an
        #: empty deque holds a 760-byte block).
        self._pending = ()
        # Ops waiting for a ledger (only while one is being created): a list while some wait, else
        # an empty tuple (not a deque: an idle topic would hold an empty deque's 760 bytes).
        self._queued = ()
        self._drain_waiters = ()
        #: ledger id -> open read handle; the shared EMPTY until the first (``_keep_read_handle``).
        self._read_handles = EMPTY
        self._opening_handles = EMPTY
        #: The shared empty NO_ENTRY_CACHE until the first entry is cached (``_add_complete``).
        self._cache = NO_ENTRY_CACHE
        self._meta_version = None
        self._meta_writing = False
        self._meta_waiters = ()
        self._trimming = False
        self._trim_waiters = ()
        self._listeners = ()
        self._notify_call = None
        self._throttle_listeners = ()
        self._throttled = False
        self._fenced_listeners = ()
        self._close_waiters = None    # a close is in progress: [Deferred] fired when it is done
        #: The AddOps being handed to their handle (``_hand_over``), else None.
        self._handing = None

    # -- small helpers ---------------------------------------------------------------------

    @property
    def ledger_client(self):
        """The factory's ledger client: read from it, not a slot (one slot fewer puts a managed
        ledger in a 368-byte allocation block instead of 384, issue 14)."""
        return self.factory.ledger_client

    @property
    def path(self) -> str:
        """The managed ledger's metadata path: computed when needed (only metadata reads and
        writes need it), not a ~120-byte string held per loaded topic (issue 14)."""
        return formats.ledger_path(self.name)

    @property
    def state(self) -> State:
        return self._state

    def _now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def _add_ledger_info(self, info: LedgerInfo):
        self._ledgers[info.ledger_id] = info
        ids = self._ledger_ids
        if not ids or ids[-1] < info.ledger_id:
            ids.append(info.ledger_id)
        else:
            ids.insert(bisect_left(ids, info.ledger_id), info.ledger_id)
        self._total_entries += info.entries
        self._total_size += info.size

    def _remove_ledger_info(self, ledger_id: int):
        info = self._ledgers.pop(ledger_id)
        self._ledger_ids.remove(ledger_id)
        self._total_entries -= info.entries
        self._total_size -= info.size
        return info

    def _check_writable(self):
        st = self._state
        if st is State.FENCED:
            return ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
        if st is State.TERMINATED:
            return ManagedLedgerTerminatedError(f"managed ledger {self.name} is terminated")
        if st is State.CLOSED or st is State.INITIALIZING:
            return ManagedLedgerClosedError(f"managed ledger {self.name} is not open")
        return None

    # -- initialization --------------------------------------------------------------------

    def initialize(self):
        """Load the ledger list, recover the last ledger, start a new one, load the cursors.
        Deferred firing with self."""
        try:
            d = self.store.get(self.path)
        except Exception:
            return defer.fail()
        return d.addCallback(self._node_read)

    def _node_read(self, res):
        if res is not None:
            return defer.Deferred.fromCoroutine(self._open_existing(res))
        # A new managed ledger: plain callbacks, not a coroutine (one runs per topic creation,
        # issue 14 item 4). Its node is created by the write that records its first ledger
        # (expected version -1: a concurrent creator makes that write fail and fences us), one
        # metadata write fewer on the way to a usable topic than creating an empty node first.
        # No cursors to load (the node did not exist) and nothing to trim (it holds only the
        # ledger it writes to); not logged: the broker logs the topic it belongs to already,
        # and with many new topics the line (even at debug level, which the daemons' log keeps)
        # cost a tenth of a topic's creation.
        self._meta_version = -1
        self._last_confirmed = self._compute_last_confirmed()
        return self._create_ledger(grouped=True).addCallback(self._first_ledger_started)

    def _first_ledger_started(self, _):
        """Self once the ledger an open starts is ready for writes; why not, raised."""
        if self._state is State.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self.name} is owned by someone else")
        if self._state is not State.LEDGER_OPENED:
            raise ManagedLedgerError(f"could not start a ledger for {self.name}")
        return self

    async def _open_existing(self, res):
        """``initialize`` of a managed ledger whose node exists (``res``: its value and Stat)."""
        data, stat = res
        ledgers, self.properties, self._terminated_at = formats.decode_ledger_info(data)
        self._meta_version = stat.version
        for lid, entries, size, ts, offload in ledgers:
            self._add_ledger_info(LedgerInfo(lid, entries, size, ts, offload))
        if self._ledger_ids:
            await self._recover_last_ledger()
        self._last_confirmed = self._compute_last_confirmed()
        if self._terminated_at is not None:
            # As Pulsar's ManagedLedgerImpl: a terminated ledger's last entry is the terminated
            # position, also when recovery just dropped the empty ledger it points into (a topic
            # terminated before any write). Computing it from the remaining ledgers would move it
            # back, behind every cursor's mark-delete, so a later mark-delete (a compaction of the
            # empty topic) was refused as "after the last entry".
            self._terminated_at = Position(*self._terminated_at)
            self._last_confirmed = self._terminated_at
            # Claim the version like a new ledger would, so a stale owner is fenced all the same.
            await self._write_metadata()
            self._state = State.TERMINATED
        else:
            await self._create_ledger(grouped=True)
            self._first_ledger_started(None)
        await self._load_cursors()
        log.info("managed ledger {name} opened: {n} ledgers, last confirmed {lce}",
                 name=self.name, n=len(self._ledger_ids), lce=str(self._last_confirmed))
        self._trim_in_background()
        return self

    async def _recover_last_ledger(self):
        """Open the last ledger with recovery: fences a previous owner and tells its real end."""
        lid = self._ledger_ids[-1]
        try:
            handle = await self.ledger_client.open_ledger(lid, self.config.password, recovery=True)
        except NoSuchLedgerError:
            log.warn("managed ledger {name}: last ledger {lid} does not exist, dropped",
                     name=self.name, lid=lid)
            self._remove_ledger_info(lid)
            return
        info = self._remove_ledger_info(lid)
        info.entries = handle.last_add_confirmed + 1
        info.size = handle.length
        if not info.timestamp:
            info.timestamp = self._now_ms()
        if info.entries == 0:
            # Pulsar drops an empty last ledger (created, never written before the crash).
            self._delete_ledger_quietly(lid)
            return
        self._add_ledger_info(info)
        self._keep_read_handle(lid, handle)

    def _compute_last_confirmed(self) -> Position:
        for lid in reversed(self._ledger_ids):
            entries = self._ledgers[lid].entries
            if entries > 0:
                return Position(lid, entries - 1)
        if self._ledger_ids:
            return Position(self._ledger_ids[-1], -1)
        return Position(-1, -1)

    async def _load_cursors(self):
        from pulsar_twisted.mledger.cursor import ManagedCursorImpl
        for child in await self.store.get_children(self.path):
            name = formats.name_from_segment(child)
            cursor = ManagedCursorImpl(self, name, EARLIEST)
            await cursor._recover()
            self._add_cursor(name, cursor)

    # -- ledger creation, rollover, closing --------------------------------------------------

    def _create_ledger(self, grouped=False):
        """Create the next ledger and record it; Deferred firing (None) when done either way.
        ``grouped`` (the first ledger of an open): when no metadata write of ours is in flight and
        the ledger client keeps its metadata in our store, the ledger's metadata and our node
        naming it are one atomic write (``record``): one durable commit instead of two in a row."""
        self._state = State.CREATING_LEDGER
        record = None
        if (grouped and not self._meta_writing and not self._meta_waiters
                and self.ledger_client.shares_store(self.store)):
            record = self._record_of
        d = self.ledger_client.create_ledger(
            self.config.ensemble_size, self.config.write_quorum, self.config.ack_quorum,
            self.config.password, custom_metadata=self._custom_metadata(), after=self._after(),
            record=record)
        if record is None:
            d.addCallbacks(self._ledger_created, self._create_failed)
        else:
            d.addCallbacks(self._ledger_created_and_recorded, self._create_and_record_failed)
        return d

    def _custom_metadata(self) -> dict:
        return {"application": _APPLICATION, "component": _COMPONENT,
                "pulsar/managed-ledger": self.name.encode("utf-8")}

    def _after(self) -> int:
        """The id a new ledger's must be above: every ledger this managed ledger has had (ids
        come from blocks that other brokers hold too, so "newer" is not "greater" unless asked for,
        and positions order by ledger id)."""
        return max(self._ledger_ids[-1] if self._ledger_ids else -1, self._last_confirmed.ledger_id)

    def _record_of(self, ledger_id):
        """The write of our node with ``ledger_id`` appended (``create_ledger``'s ``record``)."""
        infos = [self._ledgers[lid] for lid in self._ledger_ids]
        infos.append(LedgerInfo(ledger_id))
        value = formats.encode_ledger_info(infos, self.properties, self._terminated_at)
        return self.path, value, self._meta_version

    def _ledger_created_and_recorded(self, result):
        handle, stat = result
        # Our node names the ledger now, whatever happened meanwhile.
        self._add_ledger_info(LedgerInfo(handle.ledger_id))
        self._meta_version = stat.version
        return self._ledger_recorded(None, handle)

    def _create_and_record_failed(self, failure):
        if failure.check(BadVersionError, NotFoundError, AlreadyExistsError):
            # Our node was changed (or made) by someone else: fenced, and no ledger was created.
            log.warn("managed ledger {name}: metadata changed by someone else, fencing",
                     name=self.name)
            self._set_fenced()
            return None
        return self._create_failed(failure)

    def _ledger_created(self, handle):
        if self._state is not State.CREATING_LEDGER:
            # Closed or fenced meanwhile: nobody will write it.
            self._drop_ledger(handle)
            return None
        info = LedgerInfo(handle.ledger_id)
        self._add_ledger_info(info)
        # The ledger is recorded before it is written, so a crash cannot leave data in a
        # ledger the list does not know.
        d = self._write_metadata()
        d.addCallbacks(self._ledger_recorded, self._record_failed,
                       callbackArgs=(handle,), errbackArgs=(handle,))
        return d

    def _ledger_recorded(self, _, handle):
        if self._state is not State.CREATING_LEDGER:
            self._close_quietly(handle)  # recorded but unused: an empty ledger the next open drops
            return None
        backoff = self.factory.creation_backoff
        if backoff:
            backoff.pop(self, None)
        self._current = handle
        self._current_created = self.reactor.seconds()
        self._current_sent = 0
        if self._last_confirmed.entry_id < 0:
            self._last_confirmed = Position(handle.ledger_id, -1)
        self._state = State.LEDGER_OPENED
        self._rollover_call = self._call_later(self.config.max_rollover_time_ms / 1000.0, self._check_rollover)
        self._flush_queued()
        return None

    def _record_failed(self, failure, handle):
        if self._state is State.FENCED:
            if self._meta_version == -1 or failure.check(ManagedLedgerFencedError):
                # Lost the creation of a new managed ledger, or our write naming the ledger was
                # refused (BadVersion: another owner wrote our node) or never sent: no list will
                # ever name this ledger (a switch's record: the ledger made ahead).
                self._drop_ledger(handle)
            else:
                # Fenced while a write of unknown outcome was naming it: the next open drops it.
                self._close_quietly(handle)
            return None
        if handle.ledger_id in self._ledgers:
            self._remove_ledger_info(handle.ledger_id)
        self._drop_ledger(handle)
        return self._create_failed(failure)

    def _create_failed(self, failure):
        backoff = self.factory.creation_backoff
        delay = min(CREATE_RETRY_MAX, backoff[self][1] * 2) if self in backoff else CREATE_RETRY_MIN
        backoff[self] = (self.reactor.seconds() + delay, delay, failure.getErrorMessage())
        log.warn("managed ledger {name}: could not create a ledger: {err}; adds are refused for "
                 "{delay:.1f} s before the next attempt", name=self.name, err=failure.getErrorMessage(),
                 delay=delay)
        if self._state is State.CREATING_LEDGER:
            self._state = State.LEDGER_CLOSED
        error = ManagedLedgerError(f"could not create a ledger: {failure.getErrorMessage()}")
        queued, self._queued = list(self._queued), ()
        self._fail_ops(queued, error)
        return None

    def _flush_queued(self):
        queued = self._queued
        while queued and self._state is State.LEDGER_OPENED:
            self._send(queued.pop(0))
        if not self._queued:
            self._queued = ()

    def _send(self, op: AddOp):
        self._register(op)
        self._hand_over([op])

    def _register(self, op: AddOp):
        """``op`` goes to the current ledger: count it (rolling over after the last entry of a
        full ledger) and queue it as pending; ``_hand_over`` then sends it."""
        handle = self._current
        op.handle = handle
        sent = self._current_sent = self._current_sent + 1
        most = self.config.max_entries_per_ledger
        if sent >= most - most // 10:
            self._nearly_full(op, sent, most)
        pending = self._pending
        if not pending:
            pending = self._pending = deque()
        pending.append(op)

    def _hand_over(self, ops):
        """Send registered ``ops`` (one ledger's, in order) to their handle: in one call to a
        handle that takes several (``add_entries_notify``), each AddOp its waiter. Returns None,
        or, when one of them failed at once, how many after it were given back (``_give_back``)."""
        handle = ops[0].handle
        add = getattr(handle, "add_entries_notify", None)
        # (A hand-over may start another: completing an add at once can roll over and send the
        # queued adds to the next ledger.)
        outer, self._handing = self._handing, ops
        try:
            if add is not None:
                add([op.data for op in ops], _HANDLE_WAITER, ops)
            else:
                for op in ops:
                    handle.add_entry(op.data).addCallbacks(op.added, op.failed)
                    if self._handing is not ops:
                        break
        finally:
            kept, self._handing = self._handing, outer
        return None if kept is ops else len(ops) - len(kept)

    def _give_back(self, op) -> None:
        """``op`` failed while its hand-over was under way (its ledger refused it, or failed
        while the hand-over was being sent): the adds handed over after it are taken back, as if
        not made yet. One at a time they would have come after this failure and found this
        managed ledger (and its caller) in the state it leaves; ``add_entries_notify`` returns
        them untaken to its caller, who decides their fate again. The handle's answers for them
        are ignored (``done``)."""
        handing = self._handing
        index = handing.index(op) + 1
        later = handing[index:]
        self._handing = handing[:index]
        if not later:
            return
        for o in later:
            o.done = True
        given_back = set(map(id, later))
        self._pending = deque(o for o in self._pending if id(o) not in given_back)

    def _nearly_full(self, op: AddOp, sent: int, most: int):
        """``_send``, from nine tenths of a full ledger (``most`` entries) on: make the next ledger
        ahead, when the current one will be rolled as soon as it is full; roll it once full."""
        elapsed_ms = (self.reactor.seconds() - self._current_created) * 1000
        old_enough = elapsed_ms >= self.config.min_rollover_time_ms
        if sent < most:
            if sent == most - most // 10 and old_enough:
                self._make_next_ledger()
        elif old_enough:
            # This is the last entry of the ledger; later adds queue until the next one.
            op.close_when_done = True
            self._state = State.CLOSING_LEDGER
        elif sent == most:
            # Full but younger than min_rollover_time: roll when it is old enough (one timer: the
            # max_rollover_time one is later).
            self._cancel_timers()
            delay = (self.config.min_rollover_time_ms - elapsed_ms) / 1000.0
            self._rollover_call = self._call_later(delay, self._check_rollover)

    def _make_next_ledger(self):
        """Start creating the ledger the next switch will record (once: ``_next_ledger``). It is
        not in our node until the switch records it, so a crash in between leaves it behind, empty
        and unnamed (its custom metadata names this managed ledger); a close or a fence deletes it."""
        if self._next_ledger is not None:
            return self._next_ledger
        d = self._next_ledger = self.ledger_client.create_ledger(
            self.config.ensemble_size, self.config.write_quorum, self.config.ack_quorum,
            self.config.password, custom_metadata=self._custom_metadata(), after=self._after())
        d.addCallbacks(self._next_ledger_made, self._next_ledger_failed, errbackArgs=(d,))
        return d

    def _next_ledger_made(self, handle):
        if self._state in (State.CLOSED, State.FENCED, State.TERMINATED):
            # Nobody will record it (the close, fence or termination found it still being made).
            self._drop_ledger(handle)
            return None
        return handle

    def _next_ledger_failed(self, failure, made):
        log.warn("managed ledger {name}: could not make the next ledger: {err}",
                 name=self.name, err=failure.getErrorMessage())
        if self._next_ledger is made:
            self._next_ledger = None    # made ahead: the switch tries again
        return None

    def _drop_next_ledger(self):
        """Closed, fenced or terminated: delete the ledger made ahead, if any (never recorded)."""
        d, self._next_ledger = self._next_ledger, None
        if d is not None:
            d.addCallback(lambda handle: handle is not None and self._drop_ledger(handle))

    def _drop_ledger(self, handle):
        """Close and delete a ledger that no node names. The delete waits for the close: a close
        still writing the ledger's metadata when the delete removes it fails (NotFound)."""
        lid = handle.ledger_id
        self._close_quietly(handle).addCallback(lambda _: self._delete_ledger_quietly(lid))

    def _close_quietly(self, handle):
        """``handle.close()`` with its failure logged, not left in a Deferred nobody waits for
        (an unhandled error at garbage collection); fires None either way."""
        return handle.close().addErrback(self._close_failed, handle)

    def _add_cursor(self, name, cursor):
        if self.cursors is EMPTY:
            self.cursors = {}
        self.cursors[name] = cursor

    def _keep_read_handle(self, ledger_id, handle):
        if self._read_handles is EMPTY:
            self._read_handles = {}
        self._read_handles[ledger_id] = handle

    def _call_later(self, delay: float, fn):
        """A rollover timer: on the factory's shared timers (one reactor call for every managed
        ledger's, mledger/timers.py), or on the reactor for a factory without them."""
        timers = getattr(self.factory, "timers", None)
        if timers is None:
            return self.reactor.callLater(delay, fn)
        return timers.call_later(delay, fn)

    def _check_rollover(self):
        """Timer: roll a non-empty ledger past max_rollover_time, or a full one past min_rollover_time."""
        self._cancel_timers()
        if self._state is not State.LEDGER_OPENED:
            return
        elapsed_ms = (self.reactor.seconds() - self._current_created) * 1000
        sent = self._current_sent
        full = sent >= self.config.max_entries_per_ledger and elapsed_ms >= self.config.min_rollover_time_ms
        old = sent > 0 and elapsed_ms >= self.config.max_rollover_time_ms
        if full or old:
            self._state = State.CLOSING_LEDGER
            if self._pending:
                self._pending[-1].close_when_done = True
            else:
                self._switch_ledger()
        else:
            self._rollover_call = self._call_later(self.config.max_rollover_time_ms / 1000.0, self._check_rollover)

    def _cancel_timers(self):
        call, self._rollover_call = self._rollover_call, None
        if call is not None and call.active():
            call.cancel()

    def _switch_ledger(self):
        """The current ledger is full or old and its adds are all complete (state CLOSING_LEDGER):
        close it and record the next one (made ahead, or now), then send the queued adds.

        The close and the record are metadata writes with no order between them (the full
        ledger's entries are all confirmed, so our node's count of them is exact), so they run at
        once; the next ledger takes adds once both are durable. A crash or a take-over between the
        record and the close leaves the full ledger open and no longer last in our node, where no
        new owner's recovery looks: reads open such ledgers with recovery (``_get_read_handle``).
        In Pulsar the three steps (close, create, record) follow one another, and adds wait for
        all three."""
        old = self._current
        self._cancel_timers()
        info = self._ledgers.get(old.ledger_id)
        if info is not None:
            info.timestamp = self._now_ms()
        closed = self._close_quietly(old)
        closed.addCallback(lambda _: self._old_ledger_closed(old))
        self._state = State.CREATING_LEDGER
        made, self._next_ledger = self._make_next_ledger(), None
        made.addCallback(self._switch_to, closed, self.reactor.seconds())

    def _switch_to(self, handle, closed, started):
        """The next ledger is made (``handle``; None: it could not be): record it, and open it for
        adds once that and the close of the full ledger (``closed``) are done. ``started``: when
        adds began to wait (for the LedgerSwitchLatencyBuckets)."""
        if self._state is not State.CREATING_LEDGER:
            # Closed or fenced meanwhile (the ledger made ahead is dropped by that).
            if handle is not None:
                self._drop_ledger(handle)
            return None
        if handle is None:
            # Made neither ahead nor now (logged): as a failed creation, the queued adds fail.
            return self._create_failed(Failure(ManagedLedgerError("could not make the next ledger")))
        self._add_ledger_info(LedgerInfo(handle.ledger_id))
        d = self._write_metadata()
        d.addCallback(lambda _: closed)
        d.addCallbacks(self._ledger_recorded, self._record_failed,
                       callbackArgs=(handle,), errbackArgs=(handle,))
        d.addCallback(self._switched, handle, started)
        return None

    def _switched(self, _, handle, started):
        if self._current is handle:
            self.counters.ledger_switched(started)
        # The full ledger may be trimmable now; its write comes after the switch's, not before.
        self._trim_in_background()
        self.maybe_offload()

    def _close_failed(self, failure, handle):
        log.warn("managed ledger {name}: closing ledger {lid} failed: {err}",
                 name=self.name, lid=handle.ledger_id, err=failure.getErrorMessage())

    def _old_ledger_closed(self, handle):
        """A switch's full ledger is closed: it is read from now on (never empty: full or old)."""
        if self._current is handle:
            self._current = None
        if handle.ledger_id in self._ledgers:
            self._keep_read_handle(handle.ledger_id, handle)

    def _close_failed_ledger(self):
        """After a failed add (state CLOSING_LEDGER): close the current ledger, then start the
        next when adds wait."""
        handle = self._current
        self._cancel_timers()
        # Made ahead on the ensemble that failed, maybe: the next one is chosen afresh.
        self._drop_next_ledger()
        self._close_quietly(handle).addCallback(lambda _: self._failed_ledger_closed(handle))

    def _failed_ledger_closed(self, handle):
        lid = handle.ledger_id
        if self._current is handle:
            self._current = None
        info = self._ledgers.get(lid)
        if info is not None:
            info.timestamp = self._now_ms()
            if info.entries == 0:
                # Nothing was confirmed in it (first add failed): forget it, as Pulsar does.
                self._remove_ledger_info(lid)
                self._delete_ledger_quietly(lid)
            else:
                self._keep_read_handle(lid, handle)
        if self._state is not State.CLOSING_LEDGER:
            return
        self._state = State.LEDGER_CLOSED
        if self._queued:
            # Trimmed once the next ledger is recorded: while it is created, the ledger before the
            # failed one is kept (_ledgers_to_trim).
            self._create_ledger().addCallback(lambda _: self._trim_in_background())
            return
        # Else the next ledger waits for the next add: while bookies are down, eager creation
        # would leave one empty ledger per failure (issue 11: hundreds).
        self._trim_in_background()

    # -- adds --------------------------------------------------------------------------------

    def add_entry(self, data: bytes):
        """Append ``data``; Deferred firing with its Position once durable. Completions are in
        order; a fenced/closed/terminated ledger fails the add at once."""
        d = defer.Deferred()
        self.add_entry_notify(data, d)
        return d

    def add_entry_notify(self, data: bytes, waiter, ctx=None) -> None:
        """``add_entry`` without a Deferred (the broker's publish path): ``waiter.callback(position)``
        or ``waiter.errback(failure)`` when the Deferred would fire, in the same order; an exception
        from the waiter is logged, as a Deferred would keep it, and the other adds go on.

        With a ``ctx`` (not None), Pulsar's ``asyncAddEntry(data, callback, ctx)``:
        ``waiter.adds_complete(positions, ctxs)`` (for the adds completing together) or
        ``waiter.add_failed(failure, ctx)`` instead (``common.waiters``), so one waiter (the
        topic) serves every add and the caller needs no object of its own per add. ``waiter``
        may also be a Deferred (``add_entry``)."""
        self.add_entries_notify((data,), waiter, (ctx,))

    def add_entries_notify(self, datas, waiter, ctxs) -> int:
        """``add_entry_notify(data, waiter, ctx)`` for each of ``datas`` with the ctx at the same
        place of ``ctxs``, in order (a topic's publishes of one read); what goes to the current
        ledger goes to its handle in one call (``_hand_over``). Returns how many of ``datas``
        (the first ones) it took: all, unless one failed at once (refused here, or by its ledger
        while being handed over): it stops there, and the ones after it are not made
        (``_give_back``), so that the caller, whose state the failure may have changed (a topic
        fences itself on a failed write), decides their fate as it would have one at a time."""
        now = self.reactor.seconds()
        run = []            # registered AddOps of the current ledger, not yet handed over
        run_handle = None   # the ledger they go to, and whether it takes several in one call
        together = False
        taken = 0
        for data, ctx in zip(datas, ctxs):
            taken += 1
            st = self._state
            if st is State.LEDGER_OPENED:
                op = AddOp(self, data, now, waiter, ctx)
                self._register(op)
                if op.handle is not run_handle:
                    run_handle = op.handle
                    together = hasattr(run_handle, "add_entries_notify")
                run.append(op)
                if not together or self._state is not State.LEDGER_OPENED:
                    # Handed over now: after this last entry of its ledger the next add waits
                    # for the next ledger.
                    given_back = self._hand_over(run)
                    run, run_handle = [], None
                    if given_back is not None:
                        return self._added(taken - given_back)
                continue
            error = self._check_writable()
            if error is None and st is State.LEDGER_CLOSED:
                error = self._creation_refused(now)
            if error is not None:
                self.counters.add_errors += 1
                tell_failed(waiter, ctx, Failure(error))
                return self._added(taken)
            op = AddOp(self, data, now, waiter, ctx)
            if not self._queued:
                self._queued = []
            self._queued.append(op)
            if st is State.LEDGER_CLOSED:
                failed = self.counters.add_errors
                self._create_ledger()
                if self.counters.add_errors != failed:
                    # The ledger was made at once and an add sent to it (or its creation)
                    # failed at once, failing every queued add, this one included: stop here,
                    # as for a failure during a hand-over.
                    return self._added(taken)
        if run:
            taken -= self._hand_over(run) or 0
        return self._added(taken)

    def _creation_refused(self, now: float):
        """The error refusing an add that would start a ledger creation while the last one's
        failure is too recent (the factory's ``creation_backoff``), else None."""
        backoff = self.factory.creation_backoff
        if not backoff:
            return None
        entry = backoff.get(self)
        if entry is None or now >= entry[0]:
            return None
        return ManagedLedgerError(f"managed ledger {self.name}: waiting {entry[0] - now:.1f} s before "
                                  f"creating a ledger again; the last attempt failed: {entry[2]}")

    def _added(self, taken: int) -> int:
        """After adds: throttle the writers if too many are pending now; returns ``taken``."""
        if (not self._throttled and self._throttle_listeners
                and len(self._pending) + len(self._queued) >= self.config.max_pending_adds):
            self._set_throttled(True)
        # The counters are updated by _add_complete / _fail_ops just before the Deferred fires
        # (no callback of their own on every add).
        return taken

    def _add_complete(self, op: AddOp, entry_id: int):
        self._adds_complete((op,), (entry_id,))

    def _adds_complete(self, ops, entry_ids):
        """``ops`` (of one ledger, in entry order) are stored as ``entry_ids``: the bookkeeping of
        them all, then their waiters, in order, then the listeners and a rollover once."""
        pending = self._pending
        done = []
        timings = []     # (started, size) of each, for the counters
        size_sum = 0
        info = None
        caching = self.cursors or self._non_durable
        for op, entry_id in zip(ops, entry_ids):
            if op.done:
                continue
            op.done = True
            if pending and pending[0] is op:
                pending.popleft()
            else:
                pending.remove(op)
            lid = op.handle.ledger_id
            if info is None or info.ledger_id != lid:
                info = self._ledgers.get(lid)
            # Position(lid, entry_id) without NamedTuple's Python-level __new__ (once per entry)
            pos = _tuple_new(Position, (lid, entry_id))
            size = len(op.data)
            size_sum += size
            if info is not None:
                info.entries = entry_id + 1
                info.size += size
            if caching:
                # As Pulsar: an entry nobody may read soon is not cached (a topic with producers
                # only would otherwise hold its last entries for good).
                cache = self._cache
                if cache is NO_ENTRY_CACHE:
                    cache = self._cache = EntryCache(self.config.cache_size_bytes,
                                                     getattr(self.factory, "cache_budget", None))
                cache.insert(pos, op.data)
            timings.append((op.started, size))
            done.append((op, pos))
        if not done:
            return
        self.counters.adds_done(timings)
        self._total_entries += len(done)
        self._total_size += size_sum
        self._last_confirmed = done[-1][1]
        if self._throttled and len(pending) + len(self._queued) <= self.config.max_pending_adds // 2:
            self._set_throttled(False)
        # Fire before rolling over: rolling may complete later adds synchronously, which
        # must not overtake these.
        tell_done([(op.deferred, op.ctx, pos) for op, pos in done])
        if self._listeners:
            self._entries_added()
        if not pending:
            if self._pending is pending:
                self._pending = ()   # an idle topic keeps no empty deque
            self._fire_drained()
        last = done[-1][0]
        if last.close_when_done and self._state is State.CLOSING_LEDGER and self._current is last.handle:
            self._switch_ledger()

    def _add_failed(self, op: AddOp, failure):
        if op.done:
            return
        if self._handing is not None and op in self._handing:
            self._give_back(op)
        if failure.check(LedgerFencedError, NoSuchLedgerError):
            # Recovered (fenced) or deleted by a new owner: this instance must stop writing.
            log.warn("managed ledger {name}: ledger {lid} fenced by another owner ({err})",
                     name=self.name, lid=op.handle.ledger_id, err=failure.getErrorMessage())
            self._set_fenced()
            return
        handle = op.handle
        # A ledger handle in error fails every later add too: fail them all now, in order,
        # and move to a new ledger for the adds that come next (queued ones included).
        doomed = [o for o in self._pending if o.handle is handle]
        for o in doomed:
            self._pending.remove(o)
        # The adds queued meanwhile (a rollover in progress) came after the failed one: they
        # fail too, or they would be stored after a gap.
        doomed.extend(self._queued)
        self._queued = ()
        log.warn("managed ledger {name}: add to ledger {lid} failed ({err}); {n} adds failed",
                 name=self.name, lid=handle.ledger_id, err=failure.getErrorMessage(), n=len(doomed))
        rolling = self._current is handle and self._state in (State.LEDGER_OPENED, State.CLOSING_LEDGER)
        if rolling:
            self._state = State.CLOSING_LEDGER
        error = ManagedLedgerError(f"add to ledger {handle.ledger_id} failed: {failure.getErrorMessage()}")
        self._fail_ops(doomed, error)
        if not self._pending:
            self._fire_drained()
        if rolling and self._current is handle:
            self._close_failed_ledger()

    def _fail_ops(self, ops, error):
        """Fail ``ops`` (already taken off the queues) in order."""
        for o in ops:
            o.done = True
        counters = self.counters
        for o in ops:
            counters.add_errors += 1
            tell_failed(o.deferred, o.ctx, Failure(error))

    def _set_fenced(self):
        """Another owner took over: no add, cursor write or metadata write from here on; pending
        and queued adds fail in order; the factory forgets us; then the fenced listeners run."""
        if self._state is State.CLOSED:
            # Fenced while closing (a bundle-loss unload raced the new owner's recovery): the
            # close waits for the adds in flight, which the bookies now refuse one by one; fail
            # them all here, or the close, and every producer waiting for its publishes, hangs.
            self._stop_writing()
            return
        if self._state is State.FENCED:
            return
        self._state = State.FENCED
        self._cancel_timers()
        self._drop_next_ledger()
        self._stop_writing()
        self.factory._forget(self)
        listeners, self._fenced_listeners = _each_listener(self._fenced_listeners), ()
        for cb in listeners:
            self._call_fenced_listener(cb)

    def _stop_writing(self):
        """Pending and queued adds fail in order with ManagedLedgerFencedError; cursors stop."""
        error = ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
        doomed = list(self._pending) + list(self._queued)
        self._pending = ()
        self._queued = ()
        self._fail_ops(doomed, error)
        self._fire_drained()
        for cursor in list(self.cursors.values()) + list(self._new_cursors.values()):
            cursor._stop_fenced()

    def _cursor_fenced(self, cursor):
        """A cursor lost a compare-and-set on its node: the whole managed ledger is someone else's."""
        log.warn("managed ledger {name}: cursor {cursor} metadata changed by someone else, fencing",
                 name=self.name, cursor=cursor.name)
        self._set_fenced()

    def add_fenced_listener(self, callback):
        """``callback(self)`` once this instance is FENCED (see IManagedLedger.add_fenced_listener)."""
        if self._state is State.FENCED:
            self._call_fenced_listener(callback)
        else:
            self._fenced_listeners = _with_listener(self._fenced_listeners, callback)

    def remove_fenced_listener(self, callback):
        self._fenced_listeners = _without(self._fenced_listeners, callback)

    def _call_fenced_listener(self, callback):
        try:
            callback(self)
        except Exception:
            log.failure("managed ledger {name}: fenced listener failed", name=self.name)

    def _fire_drained(self):
        waiters, self._drain_waiters = self._drain_waiters, ()
        for d in waiters:
            d.callback(None)

    def _wait_drained(self):
        """Deferred firing once every sent add has completed."""
        if not self._pending:
            return defer.succeed(None)
        d = defer.Deferred()
        self._drain_waiters = (*self._drain_waiters, d)
        return d

    def _set_throttled(self, throttled: bool):
        self._throttled = throttled
        for cb in self._throttle_listeners:
            try:
                cb(throttled)
            except Exception:
                log.failure("throttle listener failed")

    def add_throttle_listener(self, callback):
        """Call ``callback(True)`` when adds in flight reach ``max_pending_adds`` (pause the
        producers) and ``callback(False)`` once they drop to half of it."""
        self._throttle_listeners = (*self._throttle_listeners, callback)

    @property
    def pending_adds_count(self) -> int:
        return len(self._pending) + len(self._queued)

    def add_new_entries_listener(self, callback):
        """``callback()`` runs right after the first add of a reactor turn completes (after its
        own Deferred has fired), and once more at the end of that turn if later adds completed in
        it: a waiting reader hears of a lone entry at once, and of a burst at most twice."""
        self._listeners = _with_listener(self._listeners, callback)

    def remove_new_entries_listener(self, callback):
        self._listeners = _without(self._listeners, callback)

    def _entries_added(self):
        # Leading edge at once, the rest of the turn coalesced: notifying one reactor turn later
        # (as before) put a whole turn, often with a journal fsync in it, between an entry's
        # receipt and its dispatch to a waiting consumer (issue 14, end-to-end latency).
        # The turn's end compares the last entry with the one announced (the call's argument: no
        # flag per managed ledger, whose size class this would push up by 16 bytes).
        if self._notify_call is None:
            self._notify_call = self.reactor.callLater(0, self._notify_turn_end, self._last_confirmed)
            self._notify_listeners()

    def _notify_turn_end(self, announced):
        self._notify_call = None
        if self._last_confirmed != announced:
            self._notify_listeners()

    def _notify_listeners(self):
        for cb in _each_listener(self._listeners):
            try:
                cb()
            except Exception:
                log.failure("managed ledger {name}: new-entries listener failed", name=self.name)

    # -- metadata ------------------------------------------------------------------------------

    def _encode_info(self) -> bytes:
        infos = (self._ledgers[lid] for lid in self._ledger_ids)
        return formats.encode_ledger_info(infos, self.properties, self._terminated_at)

    def _write_metadata(self):
        """Write the in-memory ledger list by CAS. Writes are serialized and coalesced: the
        returned Deferred fires once a write that started after this call has succeeded."""
        d = defer.Deferred()
        if self._state is State.FENCED:
            d.errback(ManagedLedgerFencedError(f"managed ledger {self.name} is fenced"))
            return d
        self._meta_waiters = (*self._meta_waiters, d)
        if not self._meta_writing:
            self._run_metadata_write()
        return d

    def _run_metadata_write(self):
        waiters, self._meta_waiters = self._meta_waiters, ()
        self._meta_writing = True
        d = self.store.put(self.path, self._encode_info(), expected_version=self._meta_version)
        d.addCallbacks(self._metadata_written, self._metadata_failed,
                       callbackArgs=(waiters,), errbackArgs=(waiters,))

    def _metadata_written(self, stat, waiters):
        self._meta_version = stat.version
        self._meta_writing = False
        for w in waiters:
            w.callback(None)
        if self._meta_waiters and not self._meta_writing:
            self._run_metadata_write()

    def _metadata_failed(self, failure, waiters):
        self._meta_writing = False
        if failure.check(BadVersionError, NotFoundError, AlreadyExistsError):
            log.warn("managed ledger {name}: metadata changed by someone else, fencing",
                     name=self.name)
            self._set_fenced()
            error = ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
            waiters = (*waiters, *self._meta_waiters)
            self._meta_waiters = ()
            for w in waiters:
                w.errback(error)
            return
        for w in waiters:
            w.errback(failure)
        if self._meta_waiters and not self._meta_writing:
            self._run_metadata_write()

    def set_properties(self, properties: dict):
        """Replace the managed ledger's properties; Deferred firing once persisted."""
        self.properties = dict(properties)
        return self._write_metadata()

    # -- reads -------------------------------------------------------------------------------

    def _entries_in(self, lid: int) -> int:
        info = self._ledgers.get(lid)
        return info.entries if info is not None else 0

    def _normalize(self, pos) -> Position:
        """The first stored entry at or after ``pos``, else the position after the last entry."""
        ids = self._ledger_ids
        if not ids:
            lce = self._last_confirmed
            if pos <= lce:
                # Every ledger is gone: trimmed (nobody needed them), the last one dropped empty
                # after a failed add. Nothing is stored up to the last entry.
                return Position(lce[0], lce[1] + 1)
            return Position(pos[0], max(pos[1], 0))
        lid0 = pos[0]
        i = bisect_left(ids, lid0)
        n = len(ids)
        while i < n:
            lid = ids[i]
            entries = self._ledgers[lid].entries
            if lid == lid0:
                e = pos[1] if pos[1] > 0 else 0
                if e < entries:
                    return Position(lid, e)
            elif entries > 0:
                return Position(lid, 0)
            i += 1
        last = ids[-1]
        return Position(last, self._ledgers[last].entries)

    def next_position(self, position) -> Position:
        """The entry after ``position`` (IManagedLedger.next_position)."""
        return self._normalize(Position(position[0], position[1] + 1))

    def last_confirmed_entry(self) -> Position:
        return self._last_confirmed

    def first_position(self) -> Position:
        if not self._ledger_ids:
            return Position(self._last_confirmed.ledger_id, 0)
        return self._normalize(Position(self._ledger_ids[0], 0))

    def number_of_entries(self) -> int:
        return self._total_entries

    def total_size(self) -> int:
        return self._total_size

    def ledgers_info(self):
        """For internal stats: ``[{"ledgerId", "entries", "size", "timestamp"}, ...]``."""
        return [{"ledgerId": i.ledger_id, "entries": i.entries, "size": i.size,
                 "timestamp": i.timestamp, "offloaded": i.offloaded}
                for i in (self._ledgers[lid] for lid in self._ledger_ids)]

    # -- tiered storage (offloads.py) --------------------------------------------------------

    def offloaded_size(self) -> int:
        """Bytes of the ledgers whose offload is complete (topic stats' offloadedStorageSize)."""
        return sum(i.size for i in self._ledgers.values() if i.offloaded)

    def offload_prefix(self, position):
        """Offload the sealed ledgers before ``position``'s (``offloads.offload_prefix``)."""
        return offloads.offload_prefix(self, position)

    def offload_status(self) -> dict:
        return offloads.status(self)

    def maybe_offload(self) -> None:
        """Offload what the thresholds choose, in the background (``offloads.maybe_offload``)."""
        if self._state not in (State.CLOSED, State.FENCED, State.INITIALIZING):
            offloads.maybe_offload(self)

    def internal_stats(self) -> dict:
        """Pulsar's ManagedLedgerInternalStats of this ledger and its durable cursors (the
        admin API's ``internalStats`` without the topic's schema and compaction ledgers)."""
        ledgers = self.ledgers_info()
        current = ledgers[-1] if ledgers else {"entries": 0, "size": 0, "timestamp": 0}
        return {
            "entriesAddedCounter": self.number_of_entries(),
            "numberOfEntries": self.number_of_entries(),
            "totalSize": self.total_size(),
            "currentLedgerEntries": current["entries"],
            "currentLedgerSize": current["size"],
            "lastLedgerCreatedTimestamp": iso_ms(current.get("timestamp", 0)),
            "waitingCursorsCount": 0,
            "pendingAddEntriesCount": self.pending_adds_count,
            "lastConfirmedEntry": position_text(self.last_confirmed_entry()),
            "state": self.state.name,
            "ledgers": [{"ledgerId": i["ledgerId"], "entries": i["entries"], "size": i["size"],
                         "offloaded": i["offloaded"], "underReplicated": False} for i in ledgers],
            "cursors": {name: cursor.internal_stats() for name, cursor in list(self.cursors.items())},
        }

    def current_ledger_id(self):
        return self._current.ledger_id if self._current is not None else None

    def read_entries(self, start, count: int):
        """Up to ``count`` entries from ``start`` on, across ledgers. Deferred -> [Entry]."""
        d = self._read(start, count, None)
        d.addCallback(lambda r: r[0])
        return d

    def _read(self, start, count, cursor):
        """Deferred firing with ``(entries, next_position)``; with ``cursor``, entries it has
        acknowledged are skipped (and not counted)."""
        d = defer.Deferred()
        d.addCallbacks(self.counters.read_done, self.counters.read_failed)
        self._read_step(start, count, cursor, [], d)
        return d

    def _read_step(self, pos, remaining, cursor, result, d):
        try:
            while True:
                pos = self._normalize(pos)
                if cursor is not None:
                    pos = cursor._first_unacked_from(pos)
                if remaining <= 0 or pos > self._last_confirmed:
                    d.callback((result, pos))
                    return
                lid, first = pos
                last = min(first + remaining - 1, self._entries_in(lid) - 1)
                if last < first:
                    # Nothing stored at a position the ledger list says is not past the last
                    # entry (a list and a last entry that disagree): end the read here rather
                    # than loop on the reactor for good.
                    log.warn("managed ledger {name}: no entry at {pos} before the last one {lce}: "
                             "read ends there", name=self.name, pos=str(pos), lce=str(self._last_confirmed))
                    d.callback((result, pos))
                    return
                entries = self._cached_range(lid, first, last)
                if entries is None:
                    rd = self._read_from_ledger(lid, first, last)
                    rd.addCallbacks(self._read_chunk_done, d.errback,
                                    callbackArgs=(Position(lid, last + 1), remaining, cursor, result, d))
                    return
                remaining = self._take_entries(entries, remaining, cursor, result)
                pos = Position(lid, last + 1)
        except Exception:
            d.errback()

    def _read_chunk_done(self, entries, next_pos, remaining, cursor, result, d):
        remaining = self._take_entries(entries, remaining, cursor, result)
        self._read_step(next_pos, remaining, cursor, result, d)

    @staticmethod
    def _take_entries(entries, remaining, cursor, result):
        if cursor is None:
            result.extend(entries)
            return remaining - len(entries)
        for entry in entries:
            if not cursor.is_acknowledged(entry.position):
                result.append(entry)
                remaining -= 1
        return remaining

    def _cached_range(self, lid, first, last):
        """Entries ``first..last`` of ``lid`` if all are in the cache, else None."""
        cache = self._cache
        out = []
        for e in range(first, last + 1):
            pos = Position(lid, e)
            data = cache.get(pos)
            if data is None:
                return None
            out.append(Entry(pos, data))
        return out

    def _read_from_ledger(self, lid, first, last):
        """Read ``first..last`` of ledger ``lid`` (cache first). Deferred -> [Entry]."""
        cached = self._cached_range(lid, first, last)
        if cached is not None:
            return defer.succeed(cached)
        d = self._get_read_handle(lid)
        d.addCallback(self._read_handle_entries, lid, first, last)
        d.addCallback(lambda les: [Entry(Position(le.ledger_id, le.entry_id), le.data) for le in les])
        return d

    def _read_handle_entries(self, handle, lid, first, last):
        d = handle.read_entries(first, last)
        info = self._ledgers.get(lid)
        if info is not None and info.offloaded:
            tiered = isinstance(handle, OffloadedReadHandle)
            if tiered:
                d.addBoth(offloads.count_read, self)
            if not (tiered and info.offload.bk_deleted):
                # The other copy when one fails: a damaged or unreachable object while the bookies
                # still have the ledger, or a ledger the bookies no longer have (deleted after its
                # offload, not yet recorded) read bookkeeper-first.
                d.addErrback(self._read_other_copy, lid, first, last, tiered, info.offload)
        return d

    def _read_other_copy(self, failure, lid, first, last, tiered, context):
        self._forget_read_handle(lid)
        d = self._open_other_copy(failure, lid, tiered, context)
        return d.addCallback(lambda handle: handle.read_entries(first, last))

    def _open_other_copy(self, failure, lid, tiered, context):
        """After the offloaded copy (``tiered``) or the bookies' failed to open or read: a Deferred
        opening the other."""
        log.warn("managed ledger {name}: ledger {lid}: the {copy} failed ({err}); reading the "
                 "{other}", name=self.name, lid=lid, err=failure.getErrorMessage(),
                 copy="offloaded copy" if tiered else "bookies' copy",
                 other="bookies' copy" if tiered else "offloaded copy")
        if tiered:
            return self.ledger_client.open_ledger(lid, self.config.password, recovery=True)
        return offloads.open_offloaded(self, lid, context)

    def _forget_read_handle(self, lid):
        if lid in self._read_handles:
            del self._read_handles[lid]

    def _get_read_handle(self, lid):
        if self._current is not None and self._current.ledger_id == lid:
            return defer.succeed(self._current)
        handle = self._read_handles.get(lid)
        if handle is not None:
            return defer.succeed(handle)
        d = defer.Deferred()
        waiters = self._opening_handles.get(lid)
        if waiters is not None:
            waiters.append(d)
            return d
        if not self._opening_handles:
            self._opening_handles = {}
        self._opening_handles[lid] = [d]

        def opened(handle):
            if lid in self._ledgers:
                self._keep_read_handle(lid, handle)
            for w in self._opening_handles.pop(lid, []):
                w.callback(handle)

        def failed(f):
            for w in self._opening_handles.pop(lid, []):
                w.errback(f)

        # With recovery, as Pulsar's getLedgerHandle (withRecovery(!readOnly)): a ledger before the
        # current one is usually closed (then the open reads its metadata alone), but not always:
        # a switch records the next ledger while the full one's close is still being written, a
        # crash or a take-over in between leaves it open, and so does a close that could not be
        # recorded (the client completes it locally when its metadata session expired). A new
        # owner recovers only the last ledger of the list; read without recovery, an open ledger
        # ends at the LAC its bookies know, one entry short of what was acknowledged.
        info = self._ledgers.get(lid)
        tiered = info is not None and offloads.reads_offloaded(self, info)
        if tiered:
            opening = offloads.open_offloaded(self, lid, info.offload)
        else:
            opening = self.ledger_client.open_ledger(lid, self.config.password, recovery=True)
        if info is not None and info.offloaded and not (tiered and info.offload.bk_deleted):
            # Tiered storage first and the bookies' copy while it lasts; or bookkeeper-first (or
            # deleted from the bookies and not yet recorded) and the offloaded copy.
            opening.addErrback(self._open_other_copy, lid, tiered, info.offload)
        opening.addCallbacks(opened, failed)
        return d

    async def _read_positions(self, positions):
        """Entries at the given sorted positions (skipping ones no longer stored)."""
        out = []
        run = []
        for pos in positions:
            if pos > self._last_confirmed or pos[1] < 0 or pos[1] >= self._entries_in(pos[0]):
                continue
            if run and run[-1][0] == pos[0] and run[-1][1] + 1 == pos[1]:
                run.append(pos)
                continue
            if run:
                out.extend(await self._read_from_ledger(run[0][0], run[0][1], run[-1][1]))
            run = [pos]
        if run:
            out.extend(await self._read_from_ledger(run[0][0], run[0][1], run[-1][1]))
        return out

    # -- counting ------------------------------------------------------------------------------

    def _count_entries_after(self, pos) -> int:
        """Entries stored strictly after ``pos``."""
        ids = self._ledger_ids
        total = 0
        for i in range(bisect_left(ids, pos[0]), len(ids)):
            lid = ids[i]
            entries = self._ledgers[lid].entries
            if lid == pos[0]:
                total += max(0, entries - (pos[1] + 1))
            else:
                total += entries
        return total

    def estimated_backlog_size(self, cursor) -> int:
        """Bytes after ``cursor``'s mark-delete position (the partly consumed ledger pro rata)."""
        md = cursor.mark_delete_position
        ids = self._ledger_ids
        total = 0
        for i in range(bisect_left(ids, md[0]), len(ids)):
            info = self._ledgers[ids[i]]
            if info.ledger_id == md[0]:
                if info.entries > 0:
                    left = max(0, info.entries - (md[1] + 1))
                    total += info.size * left // info.entries
            else:
                total += info.size
        return total

    # -- cursors -------------------------------------------------------------------------------

    def _resolve_initial(self, initial_position):
        if initial_position in ("earliest", EARLIEST):
            first = self._ledger_ids[0] if self._ledger_ids else self._last_confirmed.ledger_id
            return Position(first, -1)
        if initial_position in ("latest", LATEST):
            return self._last_confirmed
        raise ValueError(f"initial position must be 'latest' or 'earliest', not {initial_position!r}")

    def open_cursor(self, name: str, initial_position="latest", properties=None):
        """Deferred firing with durable cursor ``name``: restored if it exists, else created with
        its mark-delete at the last entry ("latest") or before the first ("earliest")."""
        from pulsar_twisted.mledger.cursor import ManagedCursorImpl
        cursor = self.cursors.get(name)
        if cursor is not None:
            return defer.succeed(cursor)
        error = self._check_open()
        if error is not None:
            return defer.fail(error)
        waiters = self._creating_cursors.get(name)
        d = defer.Deferred()
        if waiters is not None:
            waiters.append(d)
            return d
        try:
            md = self._resolve_initial(initial_position)
        except ValueError as e:
            return defer.fail(e)
        if not self._creating_cursors:
            self._creating_cursors = {}
        self._creating_cursors[name] = [d]
        cursor = ManagedCursorImpl(self, name, md, properties)
        # Held back from trimming already while its first snapshot is written.
        if not self._new_cursors:
            self._new_cursors = {}
        self._new_cursors[name] = cursor

        def created(_):
            self._new_cursors.pop(name, None)
            self._add_cursor(name, cursor)
            for w in self._creating_cursors.pop(name):
                w.callback(cursor)

        def failed(f):
            self._new_cursors.pop(name, None)
            for w in self._creating_cursors.pop(name):
                w.errback(f)

        cursor._create().addCallbacks(created, failed)
        return d

    def _check_open(self):
        if self._state in (State.CLOSED, State.INITIALIZING):
            return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        if self._state is State.FENCED:
            return ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
        return None

    def get_cursor(self, name: str):
        """The durable cursor ``name``, or None."""
        return self.cursors.get(name)

    def new_non_durable_cursor(self, start_position, name=None, inclusive=True):
        """An in-memory cursor whose next read is ``start_position`` (inclusive) or the entry after
        it; EARLIEST / LATEST markers resolve to the first entry / after the last one."""
        from pulsar_twisted.mledger.cursor import NonDurableCursor
        if start_position == EARLIEST:
            md = self._resolve_initial("earliest")
        elif start_position == LATEST:
            md = self._last_confirmed
        elif inclusive:
            md = Position(start_position[0], start_position[1] - 1)
        else:
            md = Position(start_position[0], start_position[1])
        cursor = NonDurableCursor(self, name, md)
        if not self._non_durable:
            self._non_durable = weakref.WeakSet()
        self._non_durable.add(cursor)
        return cursor

    def delete_cursor(self, name: str):
        cursor = self.cursors.get(name)
        if cursor is not None:
            del self.cursors[name]
        if cursor is None:
            return defer.fail(CursorNotFoundError(name))
        d = defer.Deferred.fromCoroutine(cursor._delete())
        d.addCallback(lambda _: self._trim_in_background())
        return d

    def _cursor_read(self, cursor):
        """A cursor moved its read position: entries before every reader leave the cache."""
        slowest = None
        for c in self.cursors.values():
            rp = c._read_position
            if slowest is None or rp < slowest:
                slowest = rp
        for c in self._non_durable:
            rp = c._read_position
            if slowest is None or rp < slowest:
                slowest = rp
        if slowest is not None:
            self._cache.evict_before(slowest)

    def _cursor_persisted(self, cursor):
        """A durable cursor's mark-delete became durable: ledgers may now be trimmable."""
        ids = self._ledger_ids
        if len(ids) > 1 and cursor.mark_delete_position[0] >= ids[0]:
            self._trim_in_background()

    # -- trimming ------------------------------------------------------------------------------

    def _ledgers_to_trim(self):
        ids = self._ledger_ids
        if len(ids) < 2:
            return []
        if self.cursors or self._new_cursors:
            slowest = min(c.mark_delete_position
                          for c in list(self.cursors.values()) + list(self._new_cursors.values()))
        else:
            slowest = self._last_confirmed
        cfg = self.config
        now = self._now_ms()
        size_to_delete = 0
        out = []
        current = self._current.ledger_id if self._current is not None else None
        last = len(ids) - 1        # never the last (current or about to be followed) ledger
        if self._state is State.CREATING_LEDGER:
            # The last id may be the next ledger, its record still in flight (a switch, once the
            # full ledger is closed): should that record fail, the one before it is our node's
            # last ledger again, and a trim must not have removed it (an empty list: a new owner
            # would not know where the log ends).
            last -= 1
        for lid in ids[:last]:
            if lid == current:
                break
            info = self._ledgers[lid]
            consumed = lid < slowest[0] or (lid == slowest[0] and slowest[1] >= info.entries - 1)
            if not consumed:
                break
            # Pulsar: delete when past the time limit OR over the size limit (-1 = unlimited).
            size_to_delete += info.size
            over_quota = cfg.retention_size_mb >= 0 and \
                self._total_size - size_to_delete >= cfg.retention_size_mb * MB
            expired = cfg.retention_time_ms >= 0 and now - info.timestamp > cfg.retention_time_ms
            if not (expired or over_quota):
                break
            out.append(lid)
        return out

    def trim_consumed_ledgers(self):
        """Delete the ledgers every durable cursor has consumed and retention lets go. Runs are
        serialized; Deferred fires after a run that started after this call. (Pulsar also runs
        this on a timer for time-based retention: the broker should call it periodically.)"""
        d = defer.Deferred()
        self._trim_waiters = (*self._trim_waiters, d)
        if not self._trimming:
            self._run_trim()
        return d

    def _trim_in_background(self):
        self.trim_consumed_ledgers().addErrback(
            lambda f: log.warn("managed ledger {name}: trimming failed: {err}",
                               name=self.name, err=f.getErrorMessage()))

    def _run_trim(self):
        self._trimming = True
        waiters, self._trim_waiters = self._trim_waiters, ()
        d = self._do_trim()

        def done(result):
            self._trimming = False
            for w in waiters:
                if isinstance(result, defer.Failure):
                    w.errback(result)
                else:
                    w.callback(result)
            if self._trim_waiters and not self._trimming:
                self._run_trim()

        d.addBoth(done)

    def _do_trim(self):
        if self._state in (State.CLOSED, State.FENCED, State.INITIALIZING):
            return defer.succeed([])
        # Offloaded ledgers past the deletion lag leave the bookies first (offloads.py, step 4);
        # those gone are recorded bkDeleted with the trim's write (or one of their own). Their
        # completion must be stored before: a write of the ledger list that starts now carries it
        # (the completion's own write may still be in flight, or have failed).
        if offloads.to_delete_from_bookies(self, self._now_ms()):
            d = self._write_metadata()
            d.addCallback(lambda _: offloads.delete_from_bookies(
                self, offloads.to_delete_from_bookies(self, self._now_ms())))
            return d.addCallback(self._trim_and_record)
        return self._trim_and_record(False)

    def _trim_and_record(self, marked: bool):
        if self._state in (State.CLOSED, State.FENCED, State.INITIALIZING):
            return defer.succeed([])
        doomed = self._ledgers_to_trim()
        if not doomed:
            return self._write_metadata().addCallback(lambda _: doomed) if marked else defer.succeed([])
        removed = [self._remove_ledger_info(lid) for lid in doomed]

        def recorded(_):
            first_left = self._ledger_ids[0] if self._ledger_ids else None
            if first_left is not None:
                for c in list(self._non_durable):
                    c._ledgers_trimmed(first_left)
            log.info("managed ledger {name}: trimmed ledgers {ids}", name=self.name, ids=doomed)
            deleted = defer.Deferred()
            self._delete_trimmed(removed, deleted)
            return deleted.addCallback(lambda _: doomed)

        def failed(f):
            if self._state is not State.FENCED:
                for info in removed:
                    self._add_ledger_info(info)
            return f

        return self._write_metadata().addCallbacks(recorded, failed)

    def _delete_trimmed(self, infos: list, done: defer.Deferred) -> None:
        """Forget and delete the trimmed ledgers ``infos`` (from the bookies unless gone from there
        already, from tiered storage if offloaded), ``TRIM_SLICE`` per reactor turn (the first slice
        at once); ``done`` fires once every deletion is issued. They are out of the metadata already,
        so no read reaches them meanwhile."""
        for info in infos[:TRIM_SLICE]:
            lid = info.ledger_id
            self._cache.invalidate_ledger(lid)
            self._forget_read_handle(lid)
            if info.offload is None or not info.offload.bk_deleted:
                self._delete_ledger_quietly(lid)
            if info.offload is not None:
                offloads.delete_objects(self.factory, self.name, lid, info.offload)
        rest = infos[TRIM_SLICE:]
        if rest:
            self.reactor.callLater(0, self._delete_trimmed, rest, done)
        else:
            done.callback(None)

    def _delete_ledger_quietly(self, lid):
        self.ledger_client.delete_ledger(lid).addErrback(
            lambda f: log.warn("managed ledger {name}: could not delete ledger {lid}: {err}",
                               name=self.name, lid=lid, err=f.getErrorMessage()))

    # -- closing -------------------------------------------------------------------------------

    def close(self):
        """Stop accepting adds (queued ones fail with ManagedLedgerClosedError), wait for the
        adds in flight, flush and close the cursors, close the current ledger. Deferred; a close
        while one is in progress fires when that one is done."""
        return defer.Deferred.fromCoroutine(self._close())

    def when_closed(self):
        """Deferred firing once the close in progress (if any) is done: the factory then opens
        a new instance instead of handing out this closed one."""
        if self._close_waiters is None:
            return defer.succeed(None)
        d = defer.Deferred()
        self._close_waiters.append(d)
        return d

    async def _close(self):
        if self._state is State.CLOSED:
            # Closed, or closing: a second close (a shutdown, a delete) waits for the first.
            return await self.when_closed()
        self._close_waiters = []
        # [step, its report call, the ledger being closed]: a close still going after
        # CLOSE_REPORT_AFTER says what it waits for (each period), as the factory's next open of
        # this name waits for it.
        step = ["", None, None]
        step[1] = self.reactor.callLater(CLOSE_REPORT_AFTER, self._report_slow_close, step, 1)
        try:
            await self._close_steps(step)
        finally:
            if step[1].active():
                step[1].cancel()
            waiters, self._close_waiters = self._close_waiters, None
            for d in waiters:
                d.callback(None)

    def _report_slow_close(self, step, periods):
        what = step[0]
        if what == "drain":
            handles = {id(op.handle): op.handle for op in self._pending if op.handle is not None}
            what = f"{len(self._pending)} adds in flight; " + "; ".join(
                h.debug_state() for h in handles.values() if hasattr(h, "debug_state"))
        elif what == "cursors":
            what = "closing cursors; " + "; ".join(c.debug_state() for c in list(self.cursors.values()))
        elif what == "ledger":
            handle = step[2]
            what = "closing the current ledger; " + (
                handle.debug_state() if hasattr(handle, "debug_state") else f"ledger {handle.ledger_id}")
        log.warn("managed ledger {name}: close not done after {seconds:.0f} s: {what}",
                 name=self.name, seconds=periods * CLOSE_REPORT_AFTER, what=what)
        step[1] = self.reactor.callLater(CLOSE_REPORT_AFTER, self._report_slow_close, step, periods + 1)

    async def _close_steps(self, step):
        fenced = self._state is State.FENCED
        self._state = State.CLOSED
        self._cancel_timers()
        self._drop_next_ledger()
        queued, self._queued = list(self._queued), ()
        self._fail_ops(queued, ManagedLedgerClosedError(f"managed ledger {self.name} closed"))
        step[0] = "drain"
        await self._wait_drained()
        step[0] = "cursors"
        results = await defer.DeferredList(
            [c.close() for c in list(self.cursors.values())], consumeErrors=True)
        for ok, f in results:
            if not ok and not fenced:
                log.warn("managed ledger {name}: closing a cursor failed: {err}",
                         name=self.name, err=f.getErrorMessage())
        if self._current is not None:
            handle, self._current = self._current, None
            step[0], step[2] = "ledger", handle
            try:
                await handle.close()
            except Exception as e:
                log.warn("managed ledger {name}: closing ledger failed: {err}", name=self.name, err=e)
        if self._notify_call is not None and self._notify_call.active():
            self._notify_call.cancel()
        self._notify_call = None
        self._cache.clear()
        self.factory._forget(self)
        log.info("managed ledger {name} closed", name=self.name)
        return None

    def terminate(self):
        """No more adds after the ones in flight; the ledger stays terminated across restarts.
        Deferred firing with the last Position."""
        return defer.Deferred.fromCoroutine(self._terminate())

    async def _terminate(self):
        if self._state is State.TERMINATED:
            return self._last_confirmed
        error = self._check_writable()
        if error is not None:
            raise error
        self._state = State.TERMINATED
        self._cancel_timers()
        self._drop_next_ledger()
        queued, self._queued = list(self._queued), ()
        self._fail_ops(queued, ManagedLedgerTerminatedError(f"managed ledger {self.name} terminated"))
        await self._wait_drained()
        if self._current is not None:
            handle, self._current = self._current, None
            await handle.close()
            self._keep_read_handle(handle.ledger_id, handle)
        self._terminated_at = self._last_confirmed
        await self._write_metadata()
        return self._last_confirmed

    @property
    def is_fenced(self) -> bool:
        """True once another owner took this managed ledger over (see add_fenced_listener)."""
        return self._state is State.FENCED

    @property
    def is_terminated(self) -> bool:
        return self._state is State.TERMINATED
