"""
twistd entry points: ``twistd -n pulsar-standalone`` and ``twistd -n pulsar-broker``.

Standalone wires the very same pieces a cluster runs, in one process: the embedded metadata store,
one in-process bookie, the BookKeeper client, the managed-ledger factory and the broker, started
in that order (each needs the one before) and stopped in reverse.
"""

import os

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.logger import Logger

from pulsar_twisted.common.gctune import limit_malloc_arenas, tune_garbage_collector
from pulsar_twisted.config import BrokerConfig, ConfigError, StandaloneConfig
from pulsar_twisted.common.startup import chain_startup
from pulsar_twisted.common.tapopts import config_options


class StandaloneService(service.MultiService):
    """Metadata store + bookie + ledger client + managed ledgers + broker in one reactor."""

    log = Logger()

    def __init__(self, config, reactor=None):
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor as global_reactor
            reactor = global_reactor
        self.config = config
        self.reactor = reactor
        self.store = None
        self.bookie = None
        self.ledger_client = None
        self.ml_factory = None
        self.broker = None
        self.admin = None
        self.port = None
        self.web_port = None
        self.ready = defer.Deferred()

    def startService(self):
        super().startService()
        chain_startup(self._start(), self.ready, self.reactor, self.log, "pulsar-standalone")

    @defer.inlineCallbacks
    def _start(self):
        from pulsar_twisted.bookie.storage import BookieStorage
        from pulsar_twisted.broker.cnx import BrokerProtocolFactory
        from pulsar_twisted.broker.service import BrokerService
        from pulsar_twisted.ledger.bookies import LocalBookieClient
        from pulsar_twisted.ledger.client import BookKeeperClient
        from pulsar_twisted.resources.bookies import register_bookie
        from pulsar_twisted.metadata.embedded import EmbeddedMetadataStore
        from pulsar_twisted.mledger.factory import ManagedLedgerFactory

        config = self.config
        reactor = self.reactor
        if config.metadataStoreUrl:
            raise ConfigError("metadataStoreUrl: standalone runs on its embedded metadata store; "
                              "leave metadataStoreUrl empty")
        data = config.dataDirectory
        os.makedirs(data, exist_ok=True)
        self.store = EmbeddedMetadataStore(os.path.join(data, "metadata"), reactor)
        yield self.store.start()

        self.bookie = BookieStorage(
            config.journalDirectory, list(config.ledgerDirectories), reactor,
            journal_sync_data=config.journalSyncData,
            journal_max_group_wait_ms=config.journalMaxGroupWaitMSec,
            journal_buffered_writes_threshold=config.journalBufferedWritesThreshold,
            journal_buffered_entries_threshold=config.journalBufferedEntriesThreshold,
            journal_max_size_mb=config.journalMaxSizeMB,
            entry_log_size_limit=config.logSizeLimit,
            flush_interval_ms=config.flushInterval,
            write_cache_max_bytes=config.dbStorage_writeCacheMaxSizeMb * 1024 * 1024)
        yield self.bookie.start()
        bookie_id = f"{config.advertisedAddress}:3181"
        yield register_bookie(self.store, bookie_id)

        self.ledger_client = BookKeeperClient(self.store, LocalBookieClient({bookie_id: self.bookie}), reactor)
        yield self.ledger_client.start()
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.store, reactor,
                                               managed_ledger_config(config))
        broker_url = f"pulsar://{config.advertisedAddress}:{config.brokerServicePort}"
        from pulsar_twisted.security.endpoints import listen_tls, tls_broker_url
        self.broker = BrokerService(config, self.ml_factory, self.store, reactor, broker_url,
                                    tls_broker_url(config))
        yield self.broker.start()
        self.broker.startService()

        from pulsar_twisted.broker.admin import AdminService
        from pulsar_twisted.web.site import make_site
        self.admin = AdminService(self.broker, self.store, config, reactor)
        self.admin.startService()
        web_description = f"tcp:{config.webServicePort}:interface={config.bindAddress}"
        self.web_port = yield endpoints.serverFromString(reactor, web_description).listen(
            make_site(self.admin, self.broker, config))

        # brokerServicePortTls / webServicePortTls (security/endpoints.py). Opened before the plain
        # binary port, which is last: once it accepts connections, every listener does.
        self.tls_ports = yield defer.ensureDeferred(listen_tls(
            reactor, config, BrokerProtocolFactory(self.broker, reactor),
            make_site(self.admin, self.broker, config)))
        description = config.brokerServiceEndpoint or (
            f"tcp:{config.brokerServicePort}:interface={config.bindAddress}")
        endpoint = endpoints.serverFromString(reactor, description)
        self.port = yield endpoint.listen(BrokerProtocolFactory(self.broker, reactor))
        tune_garbage_collector()
        self.log.info("pulsar-standalone ready: {url}, http://{host}:{web} (data in {data})",
                      url=broker_url, host=config.advertisedAddress, web=config.webServicePort,
                      data=os.path.abspath(data))
        return self

    @defer.inlineCallbacks
    def stopService(self):
        yield defer.maybeDeferred(super().stopService)
        if self.port is not None:
            yield self.port.stopListening()
        if self.web_port is not None:
            yield self.web_port.stopListening()
        for tls_port in getattr(self, "tls_ports", ()):
            yield tls_port.stopListening()
        if self.admin is not None:
            yield defer.maybeDeferred(self.admin.stopService)
        if self.broker is not None:
            yield self.broker.stopService()
        if self.ml_factory is not None:
            yield self.ml_factory.shutdown()
        if self.bookie is not None:
            yield self.bookie.stop()
        if self.store is not None:
            yield self.store.close()


def managed_ledger_config(config):
    """The broker's managedLedger* keys as a ManagedLedgerConfig."""
    from pulsar_twisted.mledger.config import ManagedLedgerConfig
    return ManagedLedgerConfig(
        ensemble_size=config.managedLedgerDefaultEnsembleSize,
        write_quorum=config.managedLedgerDefaultWriteQuorum,
        ack_quorum=config.managedLedgerDefaultAckQuorum,
        max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
        min_rollover_time_ms=config.managedLedgerMinLedgerRolloverTimeMinutes * 60_000,
        max_rollover_time_ms=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60_000,
        # -1 means "forever" for both retention limits, as in Pulsar.
        retention_time_ms=(config.defaultRetentionTimeInMinutes * 60_000
                           if config.defaultRetentionTimeInMinutes >= 0 else -1),
        retention_size_mb=config.defaultRetentionSizeInMB,
        cursor_max_entries_per_ledger=config.managedLedgerCursorMaxEntriesPerLedger,
        max_unacked_ranges_to_persist=config.managedLedgerMaxUnackedRangesToPersist,
        cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024)


def check_standalone(config):
    if config.metadataStoreUrl:
        raise ConfigError("metadataStoreUrl: standalone runs on its embedded metadata store; "
                          "leave metadataStoreUrl empty (use pulsar-broker for a cluster)")


def check_broker(config):
    if not config.metadataStoreUrl:
        raise ConfigError(
            "pulsar-broker joins a cluster: set metadataStoreUrl (zk:host:2181) in its configuration. "
            "For a single process with its own storage, run `twistd -n pulsar-standalone`.")
    from pulsar_twisted.broker.cluster import check_config
    check_config(config)


StandaloneOptions = config_options(StandaloneConfig, check_standalone)
BrokerOptions = config_options(BrokerConfig, check_broker)


def make_standalone_service(options):
    limit_malloc_arenas()
    return StandaloneService(options.config)


def make_broker_service(options):
    from pulsar_twisted.broker.cluster import BrokerClusterService
    limit_malloc_arenas()
    return BrokerClusterService(options.config)
