"""
twistd entry point: ``twistd -n pulsar-bookie -c conf/bookkeeper.conf``.

Builds from ``BookieConfig``: the metadata store named by ``metadataServiceUri`` (ZooKeeper; empty
means no registration, for standalone testing only), the ``BookieStorage``, and the
``BookieServer`` (bookie protocol on ``bookiePort`` or ``bookieEndpoint``, TLS when
``tlsCertificatePath`` is set, HTTP on ``httpServerPort``). Started in that order, stopped in
reverse.
"""

from urllib.parse import urlsplit

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.logger import Logger

from pulsar_twisted.config import BookieConfig, ConfigError
from pulsar_twisted.common.gctune import limit_malloc_arenas, tune_garbage_collector
from pulsar_twisted.common.startup import chain_startup
from pulsar_twisted.common.tapopts import config_options


Options = config_options(BookieConfig, what="BookKeeper")


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """``zk+null://h1:2181;h2:2181/ledgers`` -> (``"h1:2181,h2:2181"``, store root ``"/"``).
    The path names the ledgers root, which our layout fixes at ``<root>/ledgers``."""
    parts = urlsplit(uri)
    if not parts.scheme.split("+")[0] == "zk" or not parts.netloc:
        raise ConfigError(f"metadataServiceUri: expected zk+null://host:port[;host:port]/ledgers, "
                          f"got {uri!r}")
    hosts = parts.netloc.replace(";", ",")
    path = parts.path.rstrip("/")
    if path and not path.endswith("/ledgers"):
        raise ConfigError(f"metadataServiceUri: the path must end in /ledgers, got {parts.path!r}")
    root = path[:-len("/ledgers")] if path else ""
    return hosts, root or "/"


def listen_endpoint(config: BookieConfig, reactor):
    """The bookie-protocol server endpoint the configuration asks for."""
    if config.bookieEndpoint:
        return endpoints.serverFromString(reactor, config.bookieEndpoint)
    if config.tlsCertificatePath:
        from pulsar_twisted.security.tls import server_tls_options
        if not config.tlsKeyStore:
            raise ConfigError("tlsKeyStore: a key file is needed with tlsCertificatePath")
        options = server_tls_options(config.tlsCertificatePath, config.tlsKeyStore,
                                     config.tlsTrustStore or None, config.tlsClientAuthentication)
        return endpoints.SSL4ServerEndpoint(reactor, config.bookiePort, options)
    return endpoints.TCP4ServerEndpoint(reactor, config.bookiePort)


class BookieService(service.Service):
    """Metadata store (optional) + storage + bookie server, from a ``BookieConfig``."""

    log = Logger()

    def __init__(self, config: BookieConfig, reactor=None):
        if reactor is None:
            from twisted.internet import reactor as global_reactor
            reactor = global_reactor
        self.config = config
        self.reactor = reactor
        self.store = None
        self.server = None
        self.autorecovery = None
        self.ready = defer.Deferred()

    def startService(self):
        service.Service.startService(self)
        chain_startup(defer.ensureDeferred(self._start()), self.ready, self.reactor, self.log,
                      "pulsar-bookie")

    async def _start(self):
        from pulsar_twisted.bookie.server import BookieServer
        from pulsar_twisted.bookie.storage import BookieStorage
        config, reactor = self.config, self.reactor
        if config.metadataServiceUri:
            from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
            hosts, root = parse_metadata_service_uri(config.metadataServiceUri)
            self.store = ZooKeeperMetadataStore(hosts, reactor, root=root,
                                                session_timeout=config.zkTimeout / 1000.0)
            await self.store.start()
        else:
            self.log.warn("metadataServiceUri is empty: this bookie registers nowhere and no "
                          "BookKeeper client will discover it (standalone testing only)")
        storage = BookieStorage(
            config.journalDirectory, list(config.ledgerDirectories), reactor,
            journal_sync_data=config.journalSyncData,
            journal_max_group_wait_ms=config.journalMaxGroupWaitMSec,
            journal_buffered_writes_threshold=config.journalBufferedWritesThreshold,
            journal_buffered_entries_threshold=config.journalBufferedEntriesThreshold,
            journal_max_size_mb=config.journalMaxSizeMB,
            entry_log_size_limit=config.logSizeLimit,
            flush_interval_ms=config.flushInterval,
            gc_wait_time_ms=config.gcWaitTime)
        http = None
        if config.httpServerEnabled:
            http = f"tcp:{config.httpServerPort}:interface={config.httpServerHost}"
        self.server = BookieServer(
            storage, reactor, endpoint=listen_endpoint(config, reactor),
            bookie_id=config.bookieId or (None if config.bookiePort == 0 and not config.bookieEndpoint
                                          else f"{config.advertisedAddress}:{config.bookiePort}"),
            advertised_address=config.advertisedAddress, metadata_store=self.store,
            data_dirs=[config.journalDirectory, *config.ledgerDirectories],
            disk_check_interval=config.diskCheckInterval / 1000.0,
            disk_usage_threshold=config.diskUsageThreshold,
            disk_usage_lwm_threshold=config.diskUsageLwmThreshold, http_endpoint=http)
        await self.server.start()
        if config.autoRecoveryDaemonEnabled:
            self.autorecovery = make_autorecovery(config, self.store, reactor)
            self.autorecovery.startService()
        tune_garbage_collector()
        self.log.info("pulsar-bookie {bookie} ready", bookie=self.server.bookie_id)
        return self

    async def _stop(self):
        if self.autorecovery is not None:
            await self.autorecovery.stopService()
            await self.autorecovery.bookie_client.close()
        if self.server is not None:
            await self.server.stop()
        if self.store is not None:
            await self.store.close()

    def stopService(self):
        service.Service.stopService(self)
        return defer.ensureDeferred(self._stop())


def make_autorecovery(config: BookieConfig, store, reactor):
    """BookKeeper's auto-recovery daemon (autoRecoveryDaemonEnabled) over this bookie's metadata
    session, copying entries over TCP (TLS with this bookie's certificate when it has one)."""
    from pulsar_twisted.ledger.autorecovery import AutoRecoveryService
    from pulsar_twisted.ledger.client import BookKeeperClient
    from pulsar_twisted.ledger.tcp import TcpBookieClient
    if store is None:
        raise ConfigError("autoRecoveryDaemonEnabled needs metadataServiceUri")
    tls = None
    if config.tlsCertificatePath and config.tlsTrustStore:
        from pulsar_twisted.security.tls import ClientTLS
        tls = ClientTLS(config.tlsTrustStore, config.tlsCertificatePath, config.tlsKeyStore)
    bookie_client = TcpBookieClient(reactor, tls)
    service_ = AutoRecoveryService(store, BookKeeperClient(store, bookie_client, reactor), bookie_client,
                                   reactor, lost_bookie_recovery_delay=config.lostBookieRecoveryDelay)
    service_.bookie_client = bookie_client
    return service_


def make_bookie_service(options):
    limit_malloc_arenas()
    return BookieService(options.config)
