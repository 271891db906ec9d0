"""
Offloading a managed ledger's sealed ledgers to tiered storage (Pulsar's ``asyncOffloadPrefix`` and
``maybeOffloadInBackground``), reading them back, and deleting them from the bookies after the lag.

The order that keeps every acknowledged entry readable, whatever fails or whoever takes over:

1. **Record the attempt.** The ledger's row gets an offload context with a NEW uid, not complete,
   written by compare-and-set like every change of the ledger list. A crash or a failure after this
   leaves objects that only an incomplete context names; nobody reads them.
2. **Copy.** Data object, then index (``offload/offloader.py``), from the bookies.
3. **Mark it complete** (with the time), by compare-and-set again. From then on reads may go to the
   objects, and the objects are never deleted while the ledger is in the list.
4. **Delete from the bookies**, ``offload_deletion_lag_ms`` later, during a trim that first writes
   the ledger list (so the completion is stored, whatever became of its own write): the ledger is
   deleted, then its row marked ``bkDeleted`` (Pulsar marks first: a delete that then fails, a
   ZooKeeper connection lost, leaves the ledger on the bookies for good, marked as gone).

Objects are deleted only when no stored context can name them as complete: a failed copy's (its
context is still incomplete), an earlier incomplete attempt's once a newer uid replaced it in the
list, and a trimmed or deleted ledger's. A failed step 3 deletes nothing: the write may have been
applied before the connection broke, and then the objects are the only copy after step 4 elsewhere.

A paused broker that wakes up and goes on is stopped by the compare-and-set of step 1 or 3: the new
owner changed the list's version, our write fails and fences this instance (``ledger.py``).
"""

import uuid

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.common.bk_errors import NoSuchLedgerError
from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger.offload.blobstore import BlobStoreError
from pulsar_twisted.mledger.interfaces import (
    ManagedLedgerClosedError, ManagedLedgerError, ManagedLedgerFencedError, OffloadAlreadyRunningError,
    OffloadNotConfiguredError)

log = Logger()

NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"


class OffloadState:
    """A managed ledger's offloads: one runs at a time (``lock``); ``status``, ``last_error`` and
    ``first_unoffloaded`` are of the last one asked for by hand (Pulsar's ``OffloadProcessStatus``)."""

    def __init__(self):
        #: Counters of /metrics' brk_ledgeroffloader_* (Pulsar's LedgerOffloaderStats): bytes
        #: copied out and read back, offloads that failed (of which on a blob-store write), reads
        #: from tiered storage that failed.
        self.offload_bytes = self.offload_errors = self.write_errors = 0
        self.read_bytes = self.read_errors = 0
        self.lock = defer.DeferredLock()
        #: An automatic offload was due while the lock was held: look again when it is released.
        self.again = False
        self.status = NOT_RUN
        self.last_error = ""
        self.first_unoffloaded = None

    def to_json(self) -> dict:
        pos = self.first_unoffloaded if self.status == SUCCESS else Position(-1, -1)
        return {"status": self.status, "lastError": self.last_error,
                "firstUnoffloadedMessage": {"ledgerId": pos[0], "entryId": pos[1]}}


def state_of(ml) -> OffloadState:
    states = ml.factory.offload_states
    state = states.get(ml)
    if state is None:
        state = states[ml] = OffloadState()
    return state


def status(ml) -> dict:
    state = ml.factory.offload_states.get(ml)
    return (state or OffloadState()).to_json()


# ------------------------------------------------------------------------------------ choosing
def _sealed(ml) -> list:
    """Ids of the ledgers that are closed and may be offloaded, oldest first: never the current
    ledger, nor the last of the list (the current, or the next one being recorded), nor an empty one."""
    ids = ml._ledger_ids[:-1]
    if ml._current is not None:
        current = ml._current.ledger_id
        ids = [lid for lid in ids if lid < current]
    return [lid for lid in ids if ml._ledgers[lid].entries > 0]


def to_offload_by_threshold(ml, now_ms: int) -> list:
    """Pulsar's automatic choice: walking from the newest ledger back, every sealed ledger not yet
    offloaded once the sizes summed pass ``offload_threshold_bytes`` (0: all of them), and every one
    closed more than ``offload_threshold_seconds`` ago."""
    cfg = ml.config
    by_size, by_age = cfg.offload_threshold_bytes, cfg.offload_threshold_seconds
    if by_size < 0 and by_age < 0:
        return []
    sealed = set(_sealed(ml))
    chosen = []
    summed = 0
    for lid in reversed(ml._ledger_ids):
        info = ml._ledgers[lid]
        summed += info.size
        if lid not in sealed or info.offloaded:
            continue
        over = by_size >= 0 and summed > by_size
        old = by_age >= 0 and info.timestamp and now_ms - info.timestamp > by_age * 1000
        if over or old:
            chosen.append(lid)
    return sorted(chosen)


# ------------------------------------------------------------------------------------ running
def offload_prefix(ml, position):
    """Offload every sealed ledger before ``position``'s ledger (Pulsar's asyncOffloadPrefix, which
    ``pulsar-admin topics offload`` asks for). Raises OffloadAlreadyRunningError while one asked for
    by hand runs; else the offload runs (after an automatic one, if one runs) and the returned
    Deferred fires with the first position not offloaded (OffloadNotConfiguredError without an
    offloader). Its outcome is what ``status`` tells."""
    state = state_of(ml)
    if state.status == RUNNING:
        raise OffloadAlreadyRunningError("Offload already running")
    if ml.config.offloader is None:
        # As Pulsar's NullLedgerOffloader: the request is taken, the offload fails.
        state.status, state.last_error = ERROR, (
            f"NullLedgerOffloader: no offload driver is configured for {ml.name} "
            f"(managedLedgerOffloadDriver, or the namespace's offload policies)")
        return defer.fail(OffloadNotConfiguredError(state.last_error))
    position = Position(*position)
    state.status, state.last_error, state.first_unoffloaded = RUNNING, "", None

    def done(first):
        state.status, state.first_unoffloaded = SUCCESS, first
        return first

    def failed(f):
        state.status, state.last_error = ERROR, f.getErrorMessage() or f.type.__name__
        log.warn("managed ledger {name}: offload up to {pos} failed: {err}",
                 name=ml.name, pos=str(position), err=state.last_error)
        return f

    d = _locked(ml, state, lambda: _offload_prefix(ml, position))
    return d.addCallbacks(done, failed)


def _locked(ml, state, run):
    """Run the coroutine function ``run`` under the state's lock; once released, an automatic
    offload that was due meanwhile runs."""
    def released(result):
        if state.again:
            state.again = False
            ml.maybe_offload()
        return result
    return state.lock.run(lambda: defer.Deferred.fromCoroutine(run())).addBoth(released)


async def _offload_prefix(ml, position):
    info = ml._ledgers.get(position[0])
    if info is None or not 0 <= position[1] < max(info.entries, 1):
        raise ManagedLedgerError(f"Invalid position for offload: {position}")
    offloader = ml.config.offloader
    for lid in _sealed(ml):
        if lid >= position[0]:
            break
        info = ml._ledgers.get(lid)
        if info is not None and not info.offloaded:
            await _offload_ledger(ml, offloader, lid)
    return first_unoffloaded(ml)


def first_unoffloaded(ml) -> Position:
    for lid in ml._ledger_ids:
        if not ml._ledgers[lid].offloaded:
            return Position(lid, 0)
    return Position(ml._last_confirmed[0], ml._last_confirmed[1] + 1)


def maybe_offload(ml) -> None:
    """After a ledger switch and at each retention check: offload what the thresholds choose, in the
    background, unless an offload runs already (the next switch or check comes back to it)."""
    cfg = ml.config
    if cfg.offloader is None or (cfg.offload_threshold_bytes < 0 and cfg.offload_threshold_seconds < 0):
        return
    state = state_of(ml)
    if state.lock.locked:
        state.again = True
        return
    if not to_offload_by_threshold(ml, ml._now_ms()):
        return

    async def run():
        # Ledgers sealed during the run are taken too; a failure ends it (the next switch or
        # retention check tries again).
        done = set()
        while True:
            chosen = [lid for lid in to_offload_by_threshold(ml, ml._now_ms()) if lid not in done]
            if not chosen:
                return
            await _offload_ledger(ml, ml.config.offloader, chosen[0])
            done.add(chosen[0])

    d = _locked(ml, state, run)
    d.addErrback(_automatic_failed, ml)


def _automatic_failed(failure, ml):
    if failure.check(ManagedLedgerClosedError, ManagedLedgerFencedError):
        # Closed (an unload, a shutdown) or taken over: the next owner's switch or check goes on.
        log.info("managed ledger {name}: automatic offload stopped: {err}", name=ml.name,
                 err=failure.getErrorMessage())
    else:
        log.warn("managed ledger {name}: automatic offload failed: {err}", name=ml.name,
                 err=failure.getErrorMessage())


#: The managed-ledger states (``ledger.State`` values) in which nothing is offloaded or deleted.
_STOPPED = frozenset({"closed", "fenced", "initializing"})


def _check_open(ml) -> None:
    if ml.state.value in _STOPPED:
        raise ManagedLedgerClosedError(f"managed ledger {ml.name} is {ml.state.value}: offload stopped")


async def _offload_ledger(ml, offloader, lid):
    """Steps 1-3 of the module text for ledger ``lid``."""
    _check_open(ml)
    info = ml._ledgers.get(lid)
    if info is None or info.offloaded:
        return
    earlier = info.offload
    context = _new_context(offloader)
    info.offload = context
    try:
        await ml._write_metadata()
    except Exception:
        if info.offload is context:
            info.offload = earlier
        raise
    if earlier is not None:
        # An incomplete earlier attempt, no longer named by the stored list.
        delete_objects(ml.factory, ml.name, lid, earlier)
    log.info("managed ledger {name}: offloading ledger {lid} ({n} entries, {size} bytes) as {uid}",
             name=ml.name, lid=lid, n=info.entries, size=info.size, uid=context.uid)
    started = ml.reactor.seconds()
    state = state_of(ml)
    try:
        handle = await ml._get_read_handle(lid)
        state.offload_bytes += await offloader.offload(handle, context.uid, info.entries - 1)
    except Exception as e:
        state.offload_errors += 1
        if isinstance(e, BlobStoreError):
            state.write_errors += 1
        # This uid was never recorded complete (only this run could): nobody reads its objects,
        # whether the ledger is still listed, was trimmed meanwhile or another owner took over.
        delete_objects(ml.factory, ml.name, lid, context)
        raise ManagedLedgerError(f"offloading ledger {lid}: {e}") from e
    if ml.state.value in _STOPPED or ml._ledgers.get(lid) is not info or info.offload is not context:
        # Closed, taken over or trimmed meanwhile: this run never marks it complete, so its
        # objects go (a trim's delete may also have come before the last of them).
        delete_objects(ml.factory, ml.name, lid, context)
        _check_open(ml)
        raise ManagedLedgerError(f"ledger {lid} left the ledger list during its offload")
    info.offload = context.replace(complete=True, timestamp=ml._now_ms())
    # A failure here is the caller's; the objects stay (module text) and the next metadata write
    # records the completion anyway.
    await ml._write_metadata()
    if ml.config.offload_read_tiered_first:
        ml._forget_read_handle(lid)
    log.info("managed ledger {name}: ledger {lid} offloaded in {s:.2f} s", name=ml.name, lid=lid,
             s=ml.reactor.seconds() - started)


def _new_context(offloader):
    from pulsar_twisted.mledger.formats import OffloadContext
    return OffloadContext(str(uuid.uuid4()), driver=offloader.driver_name, metadata=offloader.metadata)


# ------------------------------------------------------------------------------------ reading
def open_offloaded(ml, lid, context):
    """Deferred firing with the read handle of ledger ``lid``'s offloaded copy."""
    try:
        offloader = _offloader_of(ml.factory, context)
    except ManagedLedgerError as e:
        return defer.fail(ManagedLedgerError(f"ledger {lid} of {ml.name}: {e}"))
    return offloader.open(context.uid, lid)


def _offloader_of(factory, context):
    """The offloader of the blob store ``context`` was written to; ManagedLedgerError saying why
    there is none (no registry, a store that cannot be made here)."""
    if factory.offloaders is None:
        raise ManagedLedgerError(f"offloaded with {context.driver}, and this broker has no offloaders")
    try:
        return factory.offloaders.for_context(context.driver, context.metadata)
    except Exception as e:
        raise ManagedLedgerError(str(e)) from e


def count_read(result, ml):
    """A read from tiered storage ended (``result``: its entries or a Failure): counted."""
    state = state_of(ml)
    if isinstance(result, Failure):
        state.read_errors += 1
    else:
        state.read_bytes += sum(len(le.data) for le in result)
    return result


def reads_offloaded(ml, info) -> bool:
    """Whether ledger ``info`` is read from tiered storage."""
    return info.offloaded and (info.offload.bk_deleted or ml.config.offload_read_tiered_first)


# ------------------------------------------------------------------------------------ deleting
def to_delete_from_bookies(ml, now_ms: int) -> list:
    """Offloaded ledgers whose bookie copy is past the deletion lag (never with a negative lag)."""
    lag = ml.config.offload_deletion_lag_ms
    if lag < 0:
        return []
    out = []
    for lid in _sealed(ml):
        info = ml._ledgers[lid]
        if info.offloaded and not info.offload.bk_deleted and now_ms - info.offload.timestamp >= lag:
            out.append(lid)
    return out


def delete_from_bookies(ml, lids):
    """Delete the offloaded ledgers ``lids`` from the bookies, then mark those gone (also those
    gone already) bkDeleted in memory; the caller's metadata write records it. Deferred firing
    with whether any was marked. Deleting before recording leaves nothing behind whatever fails:
    a ledger whose delete failed stays unmarked and the next trim deletes it again, and one deleted
    but not recorded (a crash, a lost write) is found gone by the next owner's trim. Meanwhile reads
    go to tiered storage (``ledger._get_read_handle`` falls back there when the bookies say no)."""
    if ml.state.value in _STOPPED or not lids:
        return defer.succeed(False)
    for lid in lids:
        ml._forget_read_handle(lid)
    deletes = [ml.ledger_client.delete_ledger(lid) for lid in lids]
    return defer.DeferredList(deletes, consumeErrors=True).addCallback(_deleted_from_bookies, ml, lids)


def _deleted_from_bookies(results, ml, lids) -> bool:
    gone = []
    for lid, (ok, value) in zip(lids, results):
        if not ok and not value.check(NoSuchLedgerError):
            log.warn("managed ledger {name}: offloaded ledger {lid} could not be deleted from the "
                     "bookies ({err}); the next trim tries again", name=ml.name, lid=lid,
                     err=value.getErrorMessage())
            continue
        info = ml._ledgers.get(lid)
        if info is not None and info.offloaded:
            info.offload = info.offload.replace(bk_deleted=True)
            gone.append(lid)
    if gone:
        log.info("managed ledger {name}: offloaded ledgers {ids} deleted from the bookies",
                 name=ml.name, ids=gone)
    return bool(gone)


def delete_objects(factory, name, lid, context):
    """Delete the objects of offload ``context`` of ledger ``lid``, logging a failure (a leftover
    object costs storage, never correctness). Deferred."""
    try:
        offloader = _offloader_of(factory, context)
    except ManagedLedgerError as e:
        log.warn("managed ledger {name}: ledger {lid}'s offloaded objects ({uid}) are not deleted: "
                 "{err}", name=name, lid=lid, uid=context.uid, err=e)
        return defer.succeed(None)
    return offloader.delete(context.uid, lid).addErrback(
        lambda f: log.warn("managed ledger {name}: deleting ledger {lid}'s offloaded objects ({uid}): "
                           "{err}", name=name, lid=lid, uid=context.uid, err=f.getErrorMessage()))
