"""
``LedgerAdmission``: a cluster bookie checks the metadata store before it takes a ledger it does not
hold yet.

A bookie learns of a ledger from its first add. Real BookKeeper bookies create the ledger on that
first add whatever it is: they never consult the ledger's metadata on the write path, and forget a
deleted ledger entirely once garbage collection (which compares local ledgers with the metadata
store) has removed it; so a writer that kept a stale handle can make such a bookie accept adds to a
ledger someone else recovered and deleted. Issue 11 saw exactly that. Here the storage remembers
what it deleted (``BookieStorage.was_deleted``), and in cluster mode this check covers the bookies
that never saw the ledger (a replacement chosen by a stale writer, a bookie whose disk was wiped):

- no metadata (deleted, or never created): the add is refused with LedgerFencedError, which makes
  the writer stop (its managed ledger fences itself);
- metadata that does not name this bookie in any ensemble: refused with BookieUnavailableError
  unless it is a recovery add (recovery and re-replication write to a bookie before, or without,
  recording it), so a writer whose ensemble change was not recorded replaces this bookie again.

Only the first add of an unknown ledger pays the metadata read: once the add went through the
storage holds the ledger. Concurrent first adds of one ledger share one read and are then applied
in arrival order. A positive answer is also kept (bounded) so a failed first add does not read
again.

A read not answered within ``READ_LIMIT`` seconds (the bookie cut off from ZooKeeper: its client
queues the read until it reconnects) fails the adds waiting on it as unavailable, at once, so
their writer replaces this bookie rather than timing it out, which costs every add of the ledger
the writer's add timeout and puts the bookie in quarantine. A late answer is dropped; the next
add reads again.
"""

from collections import OrderedDict

from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import (
    BookieUnavailableError, LedgerFencedError, NoSuchLedgerError)
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.resources.ledgers import LedgerManager

log = Logger()

_KEEP = 4096

#: Seconds a first add waits for the ledger's metadata (well under a writer's add timeout, 5 s).
READ_LIMIT = 2.0


class LedgerAdmission:
    """``check(ledger_id, recovery_add)`` -> Deferred firing (None) when this bookie may take the
    ledger, failing as the module docstring says. ``bookie_id`` is a callable (the id is known only
    once the server listens)."""

    def __init__(self, metadata_store, bookie_id, clock=None):
        if clock is None:
            from twisted.internet import reactor as clock
        self._manager = LedgerManager(metadata_store)
        self._bookie_id = bookie_id
        self._clock = clock
        self._admitted = OrderedDict()   # ledger_id -> True, most recent last
        self._reading = {}               # ledger_id -> [Deferred] waiting on one metadata read
        self.refused = 0
        self.unanswered = 0              # reads given up after READ_LIMIT

    def check(self, ledger_id: int, recovery_add: bool = False) -> defer.Deferred:
        if ledger_id in self._admitted:
            return defer.succeed(None)
        waiters = self._reading.get(ledger_id)
        d = defer.Deferred()
        d.addBoth(self._decide, ledger_id, recovery_add)
        if waiters is not None:
            waiters.append(d)
            return d
        waiters = self._reading[ledger_id] = [d]
        limit = self._clock.callLater(READ_LIMIT, self._give_up, ledger_id, waiters)
        self._manager.read(ledger_id).addBoth(self._read_done, ledger_id, waiters, limit)
        return d

    def _read_done(self, result, ledger_id, waiters, limit):
        if limit.active():
            limit.cancel()
        if self._reading.get(ledger_id) is waiters:
            del self._reading[ledger_id]
            for d in waiters:
                d.callback(result)
        elif isinstance(result, Failure):
            result.trap(Exception)     # given up already (_give_up): the late failure is dropped
        return None

    def _give_up(self, ledger_id, waiters):
        if self._reading.get(ledger_id) is not waiters:
            return
        del self._reading[ledger_id]
        self.unanswered += 1
        log.warn("bookie: the metadata of ledger {ledger} was not read within {limit:.0f} s (the "
                 "metadata store unreachable?): {n} adds refused as unavailable",
                 ledger=ledger_id, limit=READ_LIMIT, n=len(waiters))
        unanswered = Failure(MetadataUnavailableError(f"no answer within {READ_LIMIT:.0f} s"))
        for d in waiters:
            d.callback(unanswered)

    def _decide(self, result, ledger_id, recovery_add):
        if isinstance(result, Failure):
            if result.check(NoSuchLedgerError):
                self.refused += 1
                log.warn("bookie refuses an add to ledger {ledger}: it has no metadata (deleted?)",
                         ledger=ledger_id)
                raise LedgerFencedError(f"ledger {ledger_id} has no metadata: refusing adds")
            # The store is unreachable: the writer may try another bookie.
            raise BookieUnavailableError(
                f"cannot check ledger {ledger_id} in the metadata store: {result.getErrorMessage()}")
        metadata, _version = result
        me = self._bookie_id()
        if me not in metadata.all_bookies() and not recovery_add:
            self.refused += 1
            log.warn("bookie {bookie} refuses an add to ledger {ledger}: not in its ensembles {ens}",
                     bookie=me, ledger=ledger_id, ens=[list(e) for _, e in metadata.ensembles])
            raise BookieUnavailableError(
                f"bookie {me} is not in any ensemble of ledger {ledger_id}")
        self._admitted[ledger_id] = True
        if len(self._admitted) > _KEEP:
            self._admitted.popitem(last=False)
        return None
