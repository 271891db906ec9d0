"""
``BookKeeperClient``: creates, opens and deletes ledgers (BookKeeper's ``BookKeeper`` object).

Bookie discovery follows BookKeeper's registration layout in the metadata store: a writable bookie
holds an ephemeral node ``/ledgers/available/<bookie_id>``, a read-only one
``/ledgers/available/readonly/<bookie_id>`` (``pulsar_twisted.resources.bookies``). The client keeps
both sets current from store notifications, so ensemble placement never waits on the store.
"""

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import NoSuchLedgerError, UnauthorizedAccessError
from pulsar_twisted.ledger.handle import LedgerEnv, LedgerHandle, ReadOnlyLedgerHandle
from pulsar_twisted.ledger.health import BookieHealth, QuarantineAwarePlacement
from pulsar_twisted.ledger.interfaces import ILedgerClient
from pulsar_twisted.resources.ledgers import (
    LedgerManager, LedgerMetadata, LedgerState, master_key, normalize_custom_metadata,
    password_digest)
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy, check_quorums
from pulsar_twisted.ledger.recovery import LedgerRecoveryOp, read_last_confirmed
from pulsar_twisted.metadata.interfaces import AlreadyExistsError
from pulsar_twisted.metadata.layout import AVAILABLE_PATH
from pulsar_twisted.resources.bookies import registered_bookies

log = Logger()

def health_check_options(config) -> dict:
    """``BookKeeperClient`` keyword arguments from a broker config's bookkeeperClientHealthCheck*
    keys (``BookKeeperClient(store, bookies, reactor, **health_check_options(config))``)."""
    return dict(
        health_check_enabled=config.bookkeeperClientHealthCheckEnabled,
        health_check_interval_seconds=config.bookkeeperClientHealthCheckIntervalSeconds,
        health_check_error_threshold_per_interval=(
            config.bookkeeperClientHealthCheckErrorThresholdPerInterval),
        health_check_quarantine_time_seconds=config.bookkeeperClientHealthCheckQuarantineTimeInSeconds)


@implementer(ILedgerClient)
class BookKeeperClient:
    """
    An ILedgerClient over an IMetadataStore (ledger metadata, ids, bookie registrations) and an
    IBookieClient (entries). ``reactor`` supplies the clock for timeouts. ``placement`` is an
    IEnsemblePlacementPolicy (default: random), wrapped so that quarantined bookies are chosen
    last (``ledger.health``; the ``health_check_*`` arguments are Pulsar's
    bookkeeperClientHealthCheck* keys, with its defaults; ``health`` is the BookieHealth). Call
    ``start()`` before use (the first create/open does it if you did not).
    """

    def __init__(self, metadata_store, bookie_client, reactor, *, read_timeout_ms=5000,
                 add_timeout_ms=30000, speculative_read_timeout_ms=2000, placement=None,
                 health_check_enabled=True, health_check_interval_seconds=60,
                 health_check_error_threshold_per_interval=5,
                 health_check_quarantine_time_seconds=1800):
        self._store = metadata_store
        self._manager = LedgerManager(metadata_store)
        self.writable_bookies = frozenset()
        self.readonly_bookies = frozenset()
        self.health = BookieHealth(
            reactor, enabled=health_check_enabled, interval=health_check_interval_seconds,
            error_threshold=health_check_error_threshold_per_interval,
            quarantine_time=health_check_quarantine_time_seconds)
        placement = placement if placement is not None else RandomPlacementPolicy()
        self.env = LedgerEnv(
            bookie_client=bookie_client, clock=reactor, manager=self._manager,
            placement=QuarantineAwarePlacement(placement, self.health), health=self.health,
            writable_bookies=lambda: self.writable_bookies,
            read_timeout=(read_timeout_ms or 0) / 1000.0,
            speculative_read_timeout=(speculative_read_timeout_ms or 0) / 1000.0,
            add_timeout=(add_timeout_ms or 0) / 1000.0)
        self._ready = False
        self._last_keys = None
        self._listening = False
        self._refreshing = False
        self._refresh_again = False

    # -- bookie discovery ------------------------------------------------------------------------

    def start(self):
        """Load the bookie registrations and follow their changes. Deferred; idempotent."""
        if self._ready:
            return defer.succeed(None)
        if not self._listening:
            self._listening = True
            self._store.register_listener(self._on_notification)
        # Concurrent first calls may each load the registrations: harmless, and simpler than
        # sharing one Deferred among them.
        d = defer.Deferred.fromCoroutine(self._load_bookies())
        d.addCallback(lambda _: setattr(self, "_ready", True))
        return d

    def _on_notification(self, notification):
        if notification.path.startswith(AVAILABLE_PATH):
            self._refresh_bookies()

    def _refresh_bookies(self):
        # Coalesce bursts of notifications into at most one refresh in flight plus one queued.
        if self._refreshing:
            self._refresh_again = True
            return defer.succeed(None)
        self._refreshing = True
        d = defer.Deferred.fromCoroutine(self._load_bookies())

        def done(result):
            self._refreshing = False
            if self._refresh_again:
                self._refresh_again = False
                self._refresh_bookies()
            return result
        return d.addBoth(done)

    async def _load_bookies(self):
        self.writable_bookies, self.readonly_bookies = await registered_bookies(self._store)

    # -- ILedgerClient ---------------------------------------------------------------------------

    def create_ledger(self, ensemble_size, write_quorum, ack_quorum, password=b"",
                      custom_metadata=None, after=-1, record=None):
        """See ILedgerClient. ValueError on bad quorums; NotEnoughBookiesError."""
        try:
            check_quorums(ensemble_size, write_quorum, ack_quorum)
        except ValueError:
            return defer.fail()
        if not self._ready:
            return self.start().addCallback(lambda _: self._create(
                ensemble_size, write_quorum, ack_quorum, password, custom_metadata, after, record))
        try:
            return self._create(ensemble_size, write_quorum, ack_quorum, password, custom_metadata,
                                after, record)
        except Exception:
            return defer.fail()

    def shares_store(self, store) -> bool:
        """See ILedgerClient: the store given to this client (brokers with a separate bookie
        metadata store keep ledgers apart from managed ledgers)."""
        return store is self._store

    def _keys(self, password):
        """``(master key, its digest)`` of ``password``: two hashes, the same for every ledger
        of a broker (one managed-ledger password), so the last one is kept."""
        cached = self._last_keys
        if cached is None or cached[0] != password:
            key = master_key(password)
            cached = self._last_keys = (password, key, password_digest(key))
        return cached[1], cached[2]

    # _create and its steps are plain callbacks, not a coroutine: one runs per topic creation
    # (issue 14, item 4), and the ledger id is usually held already.
    def _create(self, ensemble_size, write_quorum, ack_quorum, password, custom, after, record):
        """A Deferred of the new ledger's handle (``(handle, stat)`` with ``record``); raises
        NotEnoughBookiesError."""
        env = self.env
        ensemble = env.placement.new_ensemble(ensemble_size, self.writable_bookies)
        key, digest = self._keys(password)
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=ack_quorum,
            ensembles=((0, tuple(ensemble)),), password_digest=digest,
            ctime_ms=int(env.clock.seconds() * 1000),
            custom_metadata=normalize_custom_metadata(custom))
        return self._create_with_id(metadata, key, after, record)

    def _create_with_id(self, metadata, key, after, record):
        ledger_id = self._manager.held_ledger_id(after)
        if ledger_id is not None:
            return self._store_metadata(ledger_id, metadata, key, after, record)
        d = self._manager.new_ledger_id(after)
        return d.addCallback(self._store_metadata, metadata, key, after, record)

    def _store_metadata(self, ledger_id, metadata, key, after, record):
        d = self._write_metadata(ledger_id, metadata, record)
        return d.addCallbacks(self._metadata_stored, self._id_taken,
                              callbackArgs=(ledger_id, metadata, key, record),
                              errbackArgs=(ledger_id, metadata, key, after, record))

    def _write_metadata(self, ledger_id, metadata, record):
        if record is None:
            return self._manager.create(ledger_id, metadata)
        # One commit for the ledger and its owner's record of it (a new topic's first ledger and
        # its managed ledger's node: issue 14).
        return self._manager.create_with(ledger_id, metadata, record(ledger_id))

    def _metadata_stored(self, result, ledger_id, metadata, key, record):
        # Not logged, not even at debug level (which the daemons' log keeps): one line per new topic
        # was a tenth of its creation's CPU. Ledger ids and ensembles are in the managed ledger's
        # internal stats and in the ledger's metadata.
        if record is None:
            return LedgerHandle(self.env, ledger_id, metadata, result, key)
        version, stat = result
        return LedgerHandle(self.env, ledger_id, metadata, version, key), stat

    def _id_taken(self, failure, ledger_id, metadata, key, after, record):
        failure.trap(AlreadyExistsError)
        # A loop in a coroutine, not _create_with_id again: a held id that is taken fails at once
        # (the embedded store checks before it writes), so a callback per taken id would nest one
        # stack level per id and a run of ~150 of them ended in RecursionError. Rare: the cost
        # of a coroutine does not matter here.
        return defer.Deferred.fromCoroutine(
            self._create_past_taken(failure.value, ledger_id, metadata, key, after, record))

    async def _create_past_taken(self, error, ledger_id, metadata, key, after, record):
        """Create on further ids after ``ledger_id`` was found taken (``error``)."""
        while True:
            if record is not None and getattr(error, "failed_index", 0) != 0:
                raise error     # the caller's write was refused: nothing was created
            # Only possible if ids were handed out by another scheme before; take the next.
            log.warn("ledger id {ledger} already in use, trying another", ledger=ledger_id)
            ledger_id = await self._manager.new_ledger_id(after)
            try:
                result = await self._write_metadata(ledger_id, metadata, record)
            except AlreadyExistsError as e:
                error = e
                continue
            return self._metadata_stored(result, ledger_id, metadata, key, record)

    def open_ledger(self, ledger_id, password=b"", recovery=True):
        """See ILedgerClient. UnauthorizedAccessError on a wrong password; NoSuchLedgerError."""
        return defer.Deferred.fromCoroutine(self._open(ledger_id, password, recovery))

    async def _open(self, ledger_id, password, recovery):
        await self.start()
        env = self.env
        metadata, version = await self._manager.read(ledger_id)
        key = master_key(password)
        if password_digest(key) != metadata.password_digest:
            raise UnauthorizedAccessError(f"wrong password for ledger {ledger_id}")
        if metadata.state is not LedgerState.CLOSED:
            if recovery:
                metadata, version = await LedgerRecoveryOp(env, ledger_id, key).run()
            else:
                lac = await read_last_confirmed(env, ledger_id, metadata)
                return ReadOnlyLedgerHandle(env, ledger_id, metadata, version, key, lac)
        return ReadOnlyLedgerHandle(env, ledger_id, metadata, version, key,
                                    metadata.last_entry_id, metadata.length)

    def delete_ledger(self, ledger_id):
        """
        Delete the ledger on every bookie of every segment, then its metadata. A bookie that cannot
        be reached is logged and skipped: the metadata still goes, since a ledger whose deletion
        waits on a dead bookie would never go (its GC drops ledgers that have no metadata).
        """
        return defer.Deferred.fromCoroutine(self._delete(ledger_id))

    async def _delete(self, ledger_id):
        metadata, _ = await self._manager.read(ledger_id)
        bookies = sorted(metadata.all_bookies())
        client = self.env.bookie_client
        results = await defer.DeferredList(
            [client.delete_ledger(b, ledger_id) for b in bookies], consumeErrors=True)
        for bookie, (ok, value) in zip(bookies, results):
            if not ok and not value.check(NoSuchLedgerError):
                log.warn("ledger {ledger}: delete on bookie {bookie} failed: {error}",
                         ledger=ledger_id, bookie=bookie, error=value.getErrorMessage())
        await self._manager.delete(ledger_id)

