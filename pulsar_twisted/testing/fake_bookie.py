"""
An in-memory bookie with programmable faults, for ledger-client tests.

``FakeBookie`` has the methods and error behaviour of ``pulsar_twisted.bookie.storage.BookieStorage``
(fencing, master-key checks, entry -1 = highest stored, LAC kept from adds), so it plugs into
``LocalBookieClient`` exactly where real storage does::

    clock = task.Clock()
    bookies = {f"b{i}": FakeBookie(f"b{i}", clock) for i in range(3)}
    client = LocalBookieClient(bookies)
    bookies["b1"].fail("add", after=2)           # third and later adds fail
    bookies["b2"].delay("read", 5.0)             # reads answer 5 s later on the clock
    bookies["b0"].hold("add"); ...; bookies["b0"].held[1].release()  # answer out of order

Operations that faults can target: "add", "read", "fence", "lac", "delete", or "any". ``read_lac``
is synchronous (as in BookieStorage), so only ``fail`` affects it.
"""

import collections
from typing import Dict, List, Optional

from twisted.internet import defer
from twisted.python.failure import Failure

from pulsar_twisted.common.bk_errors import (
    BookieReadOnlyError, BookieUnavailableError, LedgerFencedError, NoSuchEntryError, NoSuchLedgerError,
    UnauthorizedAccessError)

OPS = ("add", "read", "fence", "lac", "delete")


class _Fault:
    def __init__(self, op, kind, after, times, error=None, seconds=0.0):
        if op not in OPS + ("any",):
            raise ValueError(f"unknown op {op!r}")
        self.op = op
        self.kind = kind        # "fail", "hang", "delay", "hold"
        self.after = after      # matching calls to let through first
        self.times = times      # how many calls to affect (None: all)
        self.error = error
        self.seconds = seconds
        self.seen = 0

    def applies(self, op) -> bool:
        if self.op != "any" and self.op != op:
            return False
        self.seen += 1
        if self.seen <= self.after:
            return False
        return self.times is None or self.seen - self.after <= self.times


class _Ledger:
    __slots__ = ("entries", "master_key", "fenced", "lac")

    def __init__(self, master_key):
        self.entries: Dict[int, bytes] = {}
        self.master_key = master_key
        self.fenced = False
        self.lac = -1


class FakeBookie:
    """
    In-memory bookie storage. ``clock`` (an IReactorTime, usually ``task.Clock``) is only used by
    ``delay`` faults. ``available`` False makes every call fail with BookieUnavailableError;
    ``read_only`` True (or ``set_read_only``) makes adds fail with BookieReadOnlyError.
    ``calls`` counts calls per operation.
    """

    def __init__(self, bookie_id: str = "bookie", clock=None):
        self.bookie_id = bookie_id
        self.clock = clock
        self.available = True
        self.read_only = False
        self.calls = collections.Counter()
        self.held: List[HeldCall] = []  # answers parked by "hold" faults, in arrival order
        self.hung: List[defer.Deferred] = []
        self._faults: List[_Fault] = []
        self._ledgers: Dict[int, _Ledger] = {}
        self._deleted = set()   # as BookieStorage: a deleted ledger refuses adds and fences for good

    # -- fault programming -------------------------------------------------------------------------

    def fail(self, op: str, error: Optional[Exception] = None, after: int = 0,
             times: Optional[int] = None) -> None:
        """Fail ``op`` calls (after letting ``after`` through, ``times`` of them or all) with
        ``error`` (default BookieUnavailableError). A failed add stores nothing."""
        self._faults.append(_Fault(op, "fail", after, times,
                                   error=error or BookieUnavailableError(self.bookie_id)))

    def hang(self, op: str, after: int = 0, times: Optional[int] = None) -> None:
        """Never answer ``op`` calls (an add that hangs stores nothing)."""
        self._faults.append(_Fault(op, "hang", after, times))

    def delay(self, op: str, seconds: float, after: int = 0, times: Optional[int] = None) -> None:
        """Do the work now but answer ``seconds`` later on the clock."""
        self._faults.append(_Fault(op, "delay", after, times, seconds=seconds))

    def hold(self, op: str, after: int = 0, times: Optional[int] = None) -> None:
        """Do the work now but park the answer in ``held`` until ``release_held``."""
        self._faults.append(_Fault(op, "hold", after, times))

    def clear_faults(self) -> None:
        self._faults = []

    def release_held(self, calls: Optional[List["HeldCall"]] = None) -> None:
        """Deliver parked answers: ``calls`` (in that order) or all of them, in arrival order."""
        for call in list(self.held if calls is None else calls):
            call.release()

    # -- inspection helpers ------------------------------------------------------------------------

    def entry_ids(self, ledger_id: int) -> List[int]:
        ledger = self._ledgers.get(ledger_id)
        return sorted(ledger.entries) if ledger else []

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def was_deleted(self, ledger_id: int) -> bool:
        return ledger_id in self._deleted

    def ledger_ids(self) -> List[int]:
        return sorted(self._ledgers)

    def corrupt_entry(self, ledger_id: int, entry_id: int) -> None:
        """Flip the last byte of a stored entry (payload corruption on disk)."""
        entries = self._ledgers[ledger_id].entries
        data = bytearray(entries[entry_id])
        data[-1] ^= 0xFF
        entries[entry_id] = bytes(data)

    def drop_entry(self, ledger_id: int, entry_id: int) -> None:
        """Lose one stored entry."""
        del self._ledgers[ledger_id].entries[entry_id]

    # -- BookieStorage API -------------------------------------------------------------------------

    def add_entry(self, ledger_id, entry_id, data, master_key, lac=-1, recovery_add=False):
        return self._run("add", self._add, ledger_id, entry_id, data, master_key, lac, recovery_add,
                         key=(ledger_id, entry_id))

    def read_entry(self, ledger_id, entry_id):
        return self._run("read", self._read, ledger_id, entry_id, key=(ledger_id, entry_id))

    def read_lac(self, ledger_id) -> int:
        # Synchronous like BookieStorage.read_lac, so only "fail" faults can apply.
        self.calls["lac"] += 1
        for fault in [f for f in self._faults if f.applies("lac")]:
            if fault.kind == "fail":
                raise fault.error
        self._check_available()
        return self._ledger(ledger_id).lac

    def last_entry_id(self, ledger_id) -> int:
        # -1 for an unknown ledger too, as BookieStorage.last_entry_id answers.
        ledger = self._ledgers.get(ledger_id)
        return max(ledger.entries) if ledger is not None and ledger.entries else -1

    def fence_ledger(self, ledger_id, master_key):
        return self._run("fence", self._fence, ledger_id, master_key)

    def set_read_only(self, flag: bool) -> None:
        self.read_only = bool(flag)

    def is_fenced(self, ledger_id) -> bool:
        ledger = self._ledgers.get(ledger_id)
        return bool(ledger and ledger.fenced)

    def delete_ledger(self, ledger_id):
        return self._run("delete", self._delete, ledger_id)

    # -- internals ---------------------------------------------------------------------------------

    def _check_available(self):
        if not self.available:
            raise BookieUnavailableError(f"bookie {self.bookie_id} is down")

    def _ledger(self, ledger_id) -> _Ledger:
        try:
            return self._ledgers[ledger_id]
        except KeyError:
            raise NoSuchLedgerError(f"{self.bookie_id}: no ledger {ledger_id}") from None

    def _add(self, ledger_id, entry_id, data, master_key, lac, recovery_add):
        if self.read_only:      # like BookieStorage: recovery adds are refused too
            raise BookieReadOnlyError(self.bookie_id)
        if entry_id < 0:
            raise ValueError(f"entry id {entry_id} < 0")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._deleted:
                raise LedgerFencedError(f"{self.bookie_id}: ledger {ledger_id} was deleted")
            ledger = self._ledgers[ledger_id] = _Ledger(master_key)
        if ledger.master_key != master_key:
            raise UnauthorizedAccessError(f"{self.bookie_id}: wrong master key for {ledger_id}")
        if ledger.fenced and not recovery_add:
            raise LedgerFencedError(f"{self.bookie_id}: ledger {ledger_id} is fenced")
        ledger.entries[entry_id] = bytes(data)
        ledger.lac = max(ledger.lac, lac)

    def _read(self, ledger_id, entry_id):
        ledger = self._ledger(ledger_id)
        if entry_id == -1:
            if not ledger.entries:
                raise NoSuchEntryError(f"{self.bookie_id}: ledger {ledger_id} is empty")
            entry_id = max(ledger.entries)
        try:
            return ledger.entries[entry_id]
        except KeyError:
            raise NoSuchEntryError(f"{self.bookie_id}: no entry {ledger_id}:{entry_id}") from None

    def _fence(self, ledger_id, master_key):
        # Fencing a ledger the bookie never saw still records it fenced, so that a slow writer's
        # first add to this bookie is refused too (BookKeeper does the same).
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._deleted:
                raise NoSuchLedgerError(f"{self.bookie_id}: ledger {ledger_id} was deleted")
            ledger = self._ledgers[ledger_id] = _Ledger(master_key)
        if ledger.master_key != master_key:
            raise UnauthorizedAccessError(f"{self.bookie_id}: wrong master key for {ledger_id}")
        ledger.fenced = True

    def _delete(self, ledger_id):
        self._ledgers.pop(ledger_id, None)
        self._deleted.add(ledger_id)

    def _run(self, op, work, *args, key=None):
        self.calls[op] += 1
        # Every fault counts the call (so "after" means the same whatever else is programmed);
        # the first one that applies decides.
        applying = [f for f in self._faults if f.applies(op)]
        fault = applying[0] if applying else None
        if fault is not None and fault.kind == "fail":
            return defer.fail(fault.error)
        if fault is not None and fault.kind == "hang":
            d = defer.Deferred()
            self.hung.append(d)
            return d
        try:
            self._check_available()
            outcome = work(*args)
        except Exception:
            outcome = Failure()
        if fault is None:
            return defer.fail(outcome) if isinstance(outcome, Failure) else defer.succeed(outcome)
        d = defer.Deferred()
        if fault.kind == "hold":
            self.held.append(HeldCall(self, op, key, d, outcome))
        else:
            self.clock.callLater(fault.seconds, _deliver, d, outcome)
        return d


class HeldCall:
    """An answer parked by a "hold" fault. ``key`` is ``(ledger_id, entry_id)`` for adds and
    reads. ``release()`` delivers the real outcome; ``fail(error)`` replaces it with an error."""

    def __init__(self, bookie, op, key, deferred, outcome):
        self.bookie = bookie
        self.op = op
        self.key = key
        self.deferred = deferred
        self.outcome = outcome

    def release(self):
        self.bookie.held.remove(self)
        _deliver(self.deferred, self.outcome)

    def fail(self, error: Exception):
        self.bookie.held.remove(self)
        self.deferred.errback(Failure(error))


def _deliver(d, outcome):
    if isinstance(outcome, Failure):
        d.errback(outcome)
    else:
        d.callback(outcome)
