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
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import NoSuchLedgerError
from pulsar_twisted.metadata.layout import LEDGERS_ROOT
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
        self.deleted = 0

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
