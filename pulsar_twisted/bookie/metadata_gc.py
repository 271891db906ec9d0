"""
``MetadataGarbageCollector``: a cluster bookie deletes the ledgers whose metadata is gone
(BookKeeper's scan-and-compare garbage collector).

A client deletes a ledger on the bookies of its ensembles and then its metadata; a bookie that was
down meanwhile keeps the ledger. This pass finds such ledgers and deletes them locally, so that the
bookie never serves (NoSuchLedger) or takes (LedgerFenced, via ``BookieStorage.was_deleted``) entries
of a deleted ledger again.

Ordering makes it safe against ledgers being created meanwhile: the local ledger ids are taken
*before* the metadata is listed, and a client writes a ledger's metadata before its first add, so a
ledger held here before the listing has its metadata in the listing unless it was deleted. Each
ledger missing from the listing is then read once more on its own (as BookKeeper's
``verifyMetadataOnGc``) before it is deleted.

Absence proves something only in the right store: a pass runs only while the store holds the
cluster's ``/ledgers/INSTANCEID`` (written by ``pulsar initialize-cluster-metadata``), and the same
one as on this collector's first pass. A wrong chroot, or a store not initialized yet, lists no
ledger at all and would otherwise make the bookie delete everything (BookKeeper refuses to start
such a bookie: its cookie names the instance id).
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import NoSuchLedgerError
from pulsar_twisted.metadata.layout import INSTANCE_ID_PATH, LEDGERS_ROOT
from pulsar_twisted.resources.ledgers import LedgerManager

log = Logger()


def _ledger_id(child: str):
    if len(child) > 1 and child[0] == "L" and child[1:].isdigit():
        return int(child[1:])
    return None


class MetadataGarbageCollector:
    """``run()`` -> Deferred firing with the ids deleted. ``storage`` has the BookieStorage methods
    (``ledger_ids``, ``delete_ledger``); runs are serialized."""

    def __init__(self, storage, metadata_store):
        self.storage = storage
        self.store = metadata_store
        self._manager = LedgerManager(metadata_store)
        self._running = None
        self._instance_id = None    # the cluster's INSTANCEID on the first pass
        self.deleted = 0
        self.skipped = 0            # passes that deleted nothing because the layout was not ours

    def run(self) -> defer.Deferred:
        if self._running is not None:
            return self._running
        d = self._running = defer.Deferred.fromCoroutine(self._run())

        def done(result):
            self._running = None
            return result
        return d.addBoth(done)

    async def _run(self):
        local = list(self.storage.ledger_ids())     # before the listing: see the module docstring
        if not local:
            return []
        if not await self._same_cluster():
            self.skipped += 1
            return []
        listed = {_ledger_id(c) for c in await self.store.get_children(LEDGERS_ROOT)}
        deleted = []
        for ledger_id in local:
            if ledger_id in listed:
                continue
            try:
                await self._manager.read(ledger_id)
                continue
            except NoSuchLedgerError:
                pass
            await self.storage.delete_ledger(ledger_id)
            deleted.append(ledger_id)
        if deleted:
            self.deleted += len(deleted)
            log.info("bookie gc: deleted {n} ledgers whose metadata is gone: {ids}",
                     n=len(deleted), ids=deleted[:20])
        return deleted

    async def _same_cluster(self) -> bool:
        found = await self.store.get(INSTANCE_ID_PATH)
        if found is None:
            log.warn("bookie gc: the metadata store has no {path} (wrong chroot, or not "
                     "initialized): deleting nothing", path=INSTANCE_ID_PATH)
            return False
        instance = bytes(found[0])
        if self._instance_id is None:
            self._instance_id = instance
        elif instance != self._instance_id:
            log.warn("bookie gc: {path} changed ({old!r} -> {new!r}): another cluster's metadata; "
                     "deleting nothing", path=INSTANCE_ID_PATH, old=self._instance_id, new=instance)
            return False
        return True
