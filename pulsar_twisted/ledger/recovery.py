"""
Opening a ledger that may still have a writer: fencing and recovery (BookKeeper's
``ReadLastConfirmedOp`` + ``LedgerRecoveryOp``), and the LAC read of a non-recovery open.

Recovery, in order:

1. Metadata OPEN -> IN_RECOVERY (CAS). From now on a writer's ensemble change or close fails its
   CAS and finds it is fenced. A ledger already IN_RECOVERY (an earlier recoverer died) is simply
   recovered again: every step is idempotent.
2. Fence on every bookie of the last segment (recovery read of entry -1), which also returns each
   bookie's highest entry. Once fenced, a bookie refuses the writer's adds, so no new entry can
   reach an ack quorum. We need answers that intersect every possible ack quorum
   (``DistributionSchedule.covers_ack_quorums``), otherwise an acked entry could hide on silent
   bookies. The LAC is the max piggybacked LAC seen, and at least the segment start - 1 (a segment
   starts at the writer's LAC + 1).
3. Read forward from LAC + 1, asking every replica of the entry's write set. Found anywhere: it is
   recovered and re-added to its whole write set with ``recovery_add`` (so it reaches Qw even if the
   writer died after Qa or fewer). Reported missing by more than ``Qw - Qa`` replicas: it can never
   have been acked, so the ledger ends before it. Neither: fail (LedgerRecoveryError) and leave the
   ledger IN_RECOVERY for a later attempt.
4. Close: CLOSED with the last recovered entry and its length (CAS); if someone else closed it
   meanwhile, theirs stands.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import (
    BookieUnavailableError, DigestMismatchError, LedgerRecoveryError, NoSuchEntryError, NoSuchLedgerError,
    UnauthorizedAccessError)
from pulsar_twisted.ledger.handle import ReadOnlyLedgerHandle
from pulsar_twisted.resources.ledgers import LedgerState
from pulsar_twisted.ledger.quorum import DistributionSchedule
from pulsar_twisted.metadata.interfaces import BadVersionError
from pulsar_twisted.wire.bookie import unpack_entry

log = Logger()

_ABSENT = (NoSuchEntryError, NoSuchLedgerError)

#: Entries of the tail read at once during recovery.
_READ_AHEAD = 16


def _with_timeout(d, env, timeout=None):
    timeout = env.read_timeout if timeout is None else timeout
    return d.addTimeout(timeout, env.clock) if timeout else d


class LedgerRecoveryOp:
    """
    Fence and close one ledger. ``run()`` fires with ``(metadata, version)`` of the closed ledger
    (possibly closed by someone else).
    """

    def __init__(self, env, ledger_id, master_key):
        self._env = env
        self._ledger_id = ledger_id
        self._key = master_key

    def run(self):
        return defer.Deferred.fromCoroutine(self._run())

    async def _run(self):
        manager = self._env.manager
        metadata, version = await manager.read(self._ledger_id)
        while metadata.state is LedgerState.OPEN:
            try:
                candidate = metadata.with_state(LedgerState.IN_RECOVERY)
                version = await manager.write(self._ledger_id, candidate, version)
                metadata = candidate
            except BadVersionError:
                metadata, version = await manager.read(self._ledger_id)
        if metadata.state is LedgerState.CLOSED:
            return metadata, version
        schedule = DistributionSchedule(
            metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
        first, _ = metadata.last_ensemble
        lac = max(await self._fence(metadata, schedule), first - 1)
        last, length = await self._read_forward(metadata, version, schedule, lac)
        log.info("ledger {ledger} recovered: LAC {lac}, last entry {last}",
                 ledger=self._ledger_id, lac=lac, last=last)
        return await self._close(metadata, version, last, length)

    async def _fence(self, metadata, schedule):
        """Fence the last segment's bookies; the highest LAC they piggybacked."""
        _, ensemble = metadata.last_ensemble
        client = self._env.bookie_client
        requests = [_with_timeout(client.read_entry(bookie, self._ledger_id, -1, fence=True,
                                                    master_key=self._key), self._env)
                    for bookie in ensemble]
        results = await defer.DeferredList(requests, consumeErrors=True)
        responded, lac = [], -1
        for index, (ok, value) in enumerate(results):
            if ok:
                try:
                    lac = max(lac, unpack_entry(value, self._ledger_id).lac)
                except DigestMismatchError:
                    log.warn("ledger {ledger}: corrupt last entry on {bookie}",
                             ledger=self._ledger_id, bookie=ensemble[index])
                    continue
                responded.append(index)
            elif value.check(*_ABSENT):
                responded.append(index)
            elif value.check(UnauthorizedAccessError):
                raise value.value
            else:
                log.warn("ledger {ledger}: fencing on {bookie} failed: {error}",
                         ledger=self._ledger_id, bookie=ensemble[index],
                         error=value.getErrorMessage())
        if not schedule.covers_ack_quorums(responded):
            raise LedgerRecoveryError(
                f"ledger {self._ledger_id}: only {len(responded)} of {len(ensemble)} bookies "
                f"answered the fencing, not enough to cover every ack quorum")
        return lac

    async def _read_forward(self, metadata, version, schedule, lac):
        """Recover entries after ``lac``; fires with (last entry id, ledger length)."""
        length = 0
        if lac >= 0:
            # The ledger length at the LAC is in that entry's header.
            reader = ReadOnlyLedgerHandle(self._env, self._ledger_id, metadata, version, self._key,
                                          last_add_confirmed=lac)
            length = (await reader.read_entry_unchecked(lac)).length
        entry_id = lac + 1
        readds = []
        # Up to _READ_AHEAD entries are read at once (a writer that pipelined its adds leaves a
        # tail as long as its adds in flight); the answers are still taken in entry order, and
        # those past the end are dropped, so the outcome is that of reading one by one.
        ahead = {}
        try:
            while True:
                for e in range(entry_id, entry_id + _READ_AHEAD):
                    if e not in ahead:
                        ahead[e] = defer.Deferred.fromCoroutine(
                            self._recovery_read(metadata, schedule, e))
                found = await ahead.pop(entry_id)
                if found is None:
                    break
                packed, entry = found
                readds.append(self._readd(metadata, schedule, entry_id, packed))
                length = entry.length
                entry_id += 1
        finally:
            for d in ahead.values():
                d.addErrback(lambda f: None)    # reads past the end (or past a failure)
        if readds:
            await defer.gatherResults(readds, consumeErrors=True).addErrback(
                lambda f: f.value.subFailure)
        return entry_id - 1, length

    async def _recovery_read(self, metadata, schedule, entry_id):
        """(packed, UnpackedEntry) if any replica has the entry; None if it provably was never
        acked; LedgerRecoveryError if the answers allow neither conclusion."""
        ensemble = metadata.ensemble_for(entry_id)
        bookies = [ensemble[i] for i in schedule.write_set(entry_id)]
        client = self._env.bookie_client
        results = await defer.DeferredList(
            [_with_timeout(client.read_entry(b, self._ledger_id, entry_id), self._env)
             for b in bookies], consumeErrors=True)
        missing = 0
        for bookie, (ok, value) in zip(bookies, results):
            if ok:
                try:
                    return value, unpack_entry(value, self._ledger_id, entry_id)
                except DigestMismatchError:
                    log.warn("ledger {ledger}: entry {entry} corrupt on {bookie}",
                             ledger=self._ledger_id, entry=entry_id, bookie=bookie)
            elif value.check(*_ABSENT):
                missing += 1
        if missing > schedule.max_missing_allowed:
            return None
        raise LedgerRecoveryError(
            f"ledger {self._ledger_id}: cannot tell whether entry {entry_id} was acked "
            f"({missing} of {len(bookies)} replicas say missing)")

    def _readd(self, metadata, schedule, entry_id, packed):
        """Write the entry to its whole write set (recovery add is allowed on fenced bookies);
        it must reach an ack quorum."""
        ensemble = metadata.ensemble_for(entry_id)
        client = self._env.bookie_client
        requests = [_with_timeout(client.add_entry(ensemble[i], self._ledger_id, entry_id,
                                                   self._key, packed, recovery_add=True),
                                  self._env, self._env.add_timeout)
                    for i in schedule.write_set(entry_id)]

        def check(results):
            acks = sum(1 for ok, _ in results if ok)
            if acks < schedule.ack_quorum:
                raise LedgerRecoveryError(
                    f"ledger {self._ledger_id}: re-adding entry {entry_id} got {acks} acks")
        return defer.DeferredList(requests, consumeErrors=True).addCallback(check)

    async def _close(self, metadata, version, last, length):
        manager = self._env.manager
        while True:
            candidate = metadata.with_closed(last, length)
            try:
                version = await manager.write(self._ledger_id, candidate, version)
                return candidate, version
            except BadVersionError:
                metadata, version = await manager.read(self._ledger_id)
                if metadata.state is LedgerState.CLOSED:
                    return metadata, version


async def read_last_confirmed(env, ledger_id, metadata):
    """LAC of an unclosed ledger as its last segment's bookies know it (no fencing): the max of
    their answers, at least the segment start - 1. BookieUnavailableError if none answers."""
    first, ensemble = metadata.last_ensemble
    client = env.bookie_client
    results = await defer.DeferredList(
        [_with_timeout(client.read_lac(b, ledger_id), env) for b in ensemble],
        consumeErrors=True)
    lac, answered = first - 1, 0
    for ok, value in results:
        if ok:
            answered += 1
            lac = max(lac, value)
        elif value.check(*_ABSENT):
            answered += 1
    if not answered:
        raise BookieUnavailableError(f"no bookie of ledger {ledger_id} answered for its LAC")
    return lac
