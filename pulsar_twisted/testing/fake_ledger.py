"""
An in-memory ``ILedgerClient`` with programmable faults, for tests of the managed ledger and
of the broker.

Signatures are the real client's (``pulsar_twisted.ledger.interfaces``). Semantics kept:
entry ids assigned in order; adds complete in order; after one add fails every later add of
that handle fails too (a BookKeeper handle in error); ``open_ledger(recovery=True)`` fences
the ledger (its writer's next and pending adds fail with ``LedgerFencedError``) and closes it
at its last confirmed entry; ``open_ledger(recovery=False)`` of a ledger still open reads up
to the LAC the last stored add carried (one behind the writer's, as bookies know it), and a
reader's LAC is fixed when it is opened; reads beyond the LAC fail with ``NoSuchEntryError``,
bad ranges and bad quorums with ``ValueError``. The contract is checked against the real client
by ``testing.ledger_client_mixin``.

Faults and observation::

    client = FakeLedgerClient(clock)
    client.fail_next_adds(2, NotEnoughBookiesError)   # the next 2 adds (any ledger) fail
    client.fail_next_creates(1); client.fail_next_opens(1); client.fail_next_reads(1)
    client.add_delay = 0.5        # adds complete 0.5 s later on ``clock``
    client.pause_adds(); ...; client.resume_adds()     # hold completions, then release in order
    client.read_calls             # list of (ledger_id, first, last) read requests
    client.entries(ledger_id)     # stored confirmed entries (bytes)
"""

from twisted.internet import defer
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import (
    LedgerClosedError, LedgerFencedError, NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError,
    BKException)
from pulsar_twisted.ledger.interfaces import ILedgerClient, ILedgerHandle, LedgerEntry
from pulsar_twisted.ledger.quorum import check_quorums


class _StoredLedger:
    """What the 'bookies + ledger metadata' know about one ledger."""

    def __init__(self, ledger_id, password, ensemble, write_q, ack_q, custom_metadata):
        self.ledger_id = ledger_id
        self.password = password
        self.ensemble_size, self.write_quorum, self.ack_quorum = ensemble, write_q, ack_q
        self.custom_metadata = dict(custom_metadata or {})
        self.entries = []          # confirmed entries, index == entry id
        self.closed = False
        self.fenced = False
        self.last_entry_id = -1    # recorded at close
        self.bookie_lac = -1       # highest LAC piggybacked on a stored add (what read_lac finds)


@implementer(ILedgerHandle)
class FakeLedgerHandle:
    """
    A writer handle (from ``create_ledger``) or a read-only one (from ``open_ledger``, with the
    ``reader_lac`` it learned). A reader's ``closed`` says whether the ledger was closed when it
    was opened, as the real reader's metadata does.
    """

    def __init__(self, client, stored, writable, reader_lac=None):
        self._client = client
        self._stored = stored
        self._writable = writable
        self._reader_lac = reader_lac
        self.ledger_id = stored.ledger_id
        self.length = sum(len(e) for e in stored.entries)
        self.closed = stored.closed
        self._next_entry_id = len(stored.entries)
        self._pending = []         # [(entry_id, data, Deferred)] not yet completed, in order
        self._error = None         # once set, every later add fails with it

    @property
    def last_add_confirmed(self):
        if not self._writable:
            return self._reader_lac
        return len(self._stored.entries) - 1

    def add_entry(self, data: bytes):
        if not self._writable or self.closed:
            return defer.fail(LedgerClosedError(f"ledger {self.ledger_id} is closed"))
        if self._stored.fenced:
            return defer.fail(LedgerFencedError(f"ledger {self.ledger_id} is fenced"))
        if self._error is not None:
            return defer.fail(self._error)
        d = defer.Deferred()
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        # The LAC this add carries to the bookies: the writer's at the time it is sent.
        self._pending.append((entry_id, bytes(data), d, self._client._take_add_fault(),
                              self.last_add_confirmed))
        self._client.add_calls += 1
        if self._client._adds_paused:
            self._client._held.append(self)
        elif self._client.add_delay:
            self._client.clock.callLater(self._client.add_delay, self._complete_one)
        else:
            self._complete_one()
        return d

    def add_entries_notify(self, datas, waiter, ctxs):
        """The real handle's batch of adds (its conventions for ``waiter`` and ``ctxs``):
        ``add_entry`` of each, its outcome told to the waiter one add at a time."""
        for data, ctx in zip(datas, ctxs):
            if ctx is None:
                self.add_entry(data).addCallbacks(waiter.callback, waiter.errback)
            else:
                self.add_entry(data).addCallbacks(lambda entry_id, ctx=ctx: waiter.adds_complete([entry_id], [ctx]),
                                                  waiter.add_failed, errbackArgs=(ctx,))

    def _complete_one(self):
        """Complete the oldest pending add (completions are in order by construction)."""
        if not self._pending:
            return
        entry_id, data, d, fault, piggybacked_lac = self._pending.pop(0)
        if self._error is None:
            if self._stored.fenced:
                self._error = LedgerFencedError(f"ledger {self.ledger_id} is fenced")
            elif self._stored.closed:
                self._error = LedgerClosedError(f"ledger {self.ledger_id} is closed")
            elif fault is not None:
                self._error = fault
        if self._error is not None:
            d.errback(self._error)
            return
        self._stored.entries.append(data)
        self._stored.bookie_lac = max(self._stored.bookie_lac, piggybacked_lac)
        self.length += len(data)
        d.callback(entry_id)

    def read_entries(self, first: int, last: int):
        self._client.read_calls.append((self.ledger_id, first, last))
        fault = self._client._take("_read_faults")
        if fault is not None:
            return defer.fail(fault)
        if self._stored.ledger_id not in self._client._ledgers:
            return defer.fail(NoSuchLedgerError(str(self.ledger_id)))
        if first < 0 or last < first:
            return defer.fail(ValueError(f"bad entry range {first}..{last}"))
        if last > self.last_add_confirmed:
            return defer.fail(NoSuchEntryError(
                f"ledger {self.ledger_id} entries {first}..{last}, lac {self.last_add_confirmed}"))
        ents = self._stored.entries
        return defer.succeed([LedgerEntry(self.ledger_id, i, ents[i]) for i in range(first, last + 1)])

    def close(self):
        if self._writable and not self.closed:
            self.closed = True
            # Pending adds can no longer complete: BookKeeper fails them on close.
            while self._pending:
                d = self._pending.pop(0)[2]
                d.errback(LedgerClosedError(f"ledger {self.ledger_id} closed"))
            if not self._stored.closed:
                self._stored.closed = True
                self._stored.last_entry_id = self.last_add_confirmed
        # A reader's close only releases it (its ``closed`` stays what the ledger was).
        return defer.succeed(None)


@implementer(ILedgerClient)
class FakeLedgerClient:
    """In-memory ledgers shared by every handle of this client (so 'another broker' over the
    same instance sees the same data, as it would over the same bookies)."""

    def __init__(self, clock=None, store=None):
        self.clock = clock
        #: The metadata store ``create_ledger``'s ``record`` writes go to (None: ``shares_store``
        #: is False and callers record their ledgers themselves). The fake's own ledgers are
        #: kept in memory either way.
        self.store = store
        self._ledgers = {}
        self._next_id = 1
        self.add_delay = 0
        self._adds_paused = False
        self._held = []
        self._add_faults = []
        self._create_faults = []
        self._open_faults = []
        self._read_faults = []
        self._delete_faults = []
        self.read_calls = []
        self.add_calls = 0
        self.created = []
        self.deleted = []
        self.opened = []           # (ledger_id, recovery)

    # -- faults --------------------------------------------------------------------------

    @staticmethod
    def _make(error, n):
        if isinstance(error, type):
            return [error(f"injected {error.__name__}") for _ in range(n)]
        return [error] * n

    def fail_next_adds(self, n=1, error=BKException):
        self._add_faults.extend(self._make(error, n))

    def fail_next_creates(self, n=1, error=BKException):
        self._create_faults.extend(self._make(error, n))

    def fail_next_opens(self, n=1, error=BKException):
        self._open_faults.extend(self._make(error, n))

    def fail_next_reads(self, n=1, error=BKException):
        self._read_faults.extend(self._make(error, n))

    def fail_next_deletes(self, n=1, error=BKException):
        self._delete_faults.extend(self._make(error, n))

    def _take(self, attr):
        faults = getattr(self, attr)
        return faults.pop(0) if faults else None

    def _take_add_fault(self):
        return self._take("_add_faults")

    def pause_adds(self):
        """Hold add completions until ``resume_adds``."""
        self._adds_paused = True

    def resume_adds(self):
        """Complete every held add, in the order they were issued."""
        self._adds_paused = False
        held, self._held = self._held, []
        for handle in held:
            handle._complete_one()

    # -- inspection ----------------------------------------------------------------------

    def ledger_ids(self):
        return sorted(self._ledgers)

    def entries(self, ledger_id):
        return list(self._ledgers[ledger_id].entries)

    def is_fenced(self, ledger_id):
        return self._ledgers[ledger_id].fenced

    def custom_metadata(self, ledger_id):
        return dict(self._ledgers[ledger_id].custom_metadata)

    # -- ILedgerClient -------------------------------------------------------------------

    def create_ledger(self, ensemble_size: int, write_quorum: int, ack_quorum: int,
                      password: bytes = b"", custom_metadata: dict = None, after: int = -1,
                      record=None):
        fault = self._take("_create_faults")
        if fault is not None:
            return defer.fail(fault)
        try:
            check_quorums(ensemble_size, write_quorum, ack_quorum)
        except ValueError:
            return defer.fail()
        lid = max(self._next_id, after + 1)
        self._next_id = lid + 1

        def create(stat=None):
            stored = _StoredLedger(lid, password, ensemble_size, write_quorum, ack_quorum,
                                   custom_metadata)
            self._ledgers[lid] = stored
            self.created.append(lid)
            handle = FakeLedgerHandle(self, stored, writable=True)
            return handle if record is None else (handle, stat)
        if record is None:
            return defer.succeed(create())
        # The record's write alone stands for the pair: a refused write creates no ledger.
        return self.store.put_all([record(lid)]).addCallback(lambda stats: create(stats[0]))

    def shares_store(self, store) -> bool:
        return self.store is not None and store is self.store

    def open_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True):
        fault = self._take("_open_faults")
        if fault is not None:
            return defer.fail(fault)
        stored = self._ledgers.get(ledger_id)
        if stored is None:
            return defer.fail(NoSuchLedgerError(f"ledger {ledger_id}"))
        if stored.password != password:
            return defer.fail(UnauthorizedAccessError(f"ledger {ledger_id}"))
        self.opened.append((ledger_id, recovery))
        if recovery and not stored.closed:
            stored.fenced = True
            stored.closed = True
            stored.last_entry_id = len(stored.entries) - 1
        lac = stored.last_entry_id if stored.closed else stored.bookie_lac
        return defer.succeed(FakeLedgerHandle(self, stored, writable=False, reader_lac=lac))

    def delete_ledger(self, ledger_id: int):
        fault = self._take("_delete_faults")
        if fault is not None:
            return defer.fail(fault)
        if self._ledgers.pop(ledger_id, None) is None:
            return defer.fail(NoSuchLedgerError(f"ledger {ledger_id}"))
        self.deleted.append(ledger_id)
        return defer.succeed(None)
