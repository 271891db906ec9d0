"""
``twistd -n pulsar-bookie -c conf/bookkeeper.conf``: one BookKeeper storage server.

One ordered tree (``tree.py``) from ``BookieConfig``, started in this order and stopped in reverse:
the metadata store named by ``metadataServiceUri`` (ZooKeeper; empty means no registration, for
standalone testing only), the ``BookieStorage`` (``BookieStorage.from_config``), the
``BookieServer`` (bookie protocol on ``bookiePort`` or ``bookieEndpoint``, TLS when
``tlsCertificatePath`` is set, HTTP on ``httpServerPort``; it registers the bookie), and the
auto-recovery daemon when ``autoRecoveryDaemonEnabled``.
"""

from twisted.internet import endpoints

from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.config import BookieConfig, ConfigError
from pulsar_twisted.daemons.gctune import limit_malloc_arenas
from pulsar_twisted.daemons.options import config_options
from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import Step
from pulsar_twisted.ledger.autorecovery import AutoRecoveryService
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.urls import MetadataUrlError, parse_metadata_service_uri
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.security.tls import ClientTLS, server_tls_options
from pulsar_twisted.web.metrics import ReactorLagCollector


def metadata_service_location(config: BookieConfig) -> tuple:
    """``(hosts, root)`` of ``metadataServiceUri``; ConfigError naming the key."""
    try:
        return parse_metadata_service_uri(config.metadataServiceUri)
    except MetadataUrlError as e:
        raise ConfigError(f"metadataServiceUri: {e}")


def listen_endpoint(config: BookieConfig, reactor):
    """The bookie-protocol server endpoint the configuration asks for."""
    if config.bookieEndpoint:
        return endpoints.serverFromString(reactor, config.bookieEndpoint)
    if config.tlsCertificatePath:
        if not config.tlsKeyStore:
            raise ConfigError("tlsKeyStore: a key file is needed with tlsCertificatePath")
        options = server_tls_options(config.tlsCertificatePath, config.tlsKeyStore,
                                     config.tlsTrustStore or None, config.tlsClientAuthentication)
        return endpoints.SSL4ServerEndpoint(reactor, config.bookiePort, options)
    return endpoints.TCP4ServerEndpoint(reactor, config.bookiePort)


def make_autorecovery(config: BookieConfig, store, reactor) -> AutoRecoveryService:
    """BookKeeper's auto-recovery daemon (autoRecoveryDaemonEnabled) over this bookie's metadata
    session, copying entries over TCP (TLS with this bookie's certificate when it has one).
    Its ``bookie_client`` is to be closed once it has stopped."""
    if store is None:
        raise ConfigError("autoRecoveryDaemonEnabled needs metadataServiceUri")
    tls = None
    if config.tlsCertificatePath and config.tlsTrustStore:
        tls = ClientTLS(config.tlsTrustStore, config.tlsCertificatePath, config.tlsKeyStore)
    bookie_client = TcpBookieClient(reactor, tls)
    recovery = AutoRecoveryService(store, BookKeeperClient(store, bookie_client, reactor), bookie_client,
                                   reactor, lost_bookie_recovery_delay=config.lostBookieRecoveryDelay)
    recovery.bookie_client = bookie_client
    return recovery


class BookieService(Daemon):
    """Metadata store (optional) + storage + bookie server (+ auto-recovery), from a ``BookieConfig``.
    The parts are attributes once their step has started."""

    def __init__(self, config: BookieConfig, reactor=None):
        super().__init__("pulsar-bookie", reactor)
        self.config = config
        self.store = self.storage = self.server = self.autorecovery = None
        steps = [
            Step("metadata store", self._start_store, self._stop_store),
            Step("storage", self._start_storage, lambda: self.storage.stop()),
            Step("server", self._start_server, lambda: self.server.stop()),
        ]
        if config.autoRecoveryDaemonEnabled:
            steps.append(Step("auto-recovery", self._start_autorecovery, self._stop_autorecovery))
        for step in steps:
            step.setServiceParent(self)

    async def _start_store(self):
        config = self.config
        if not config.metadataServiceUri:
            self.log.warn("metadataServiceUri is empty: this bookie registers nowhere and no "
                          "BookKeeper client will discover it (standalone testing only)")
            return
        hosts, root = metadata_service_location(config)
        self.store = ZooKeeperMetadataStore(hosts, self.reactor, root=root,
                                            session_timeout=config.zkTimeout / 1000.0)
        await self.store.start()

    def _stop_store(self):
        if self.store is not None:
            return self.store.close()

    def _start_storage(self):
        self.storage = BookieStorage.from_config(self.config, self.reactor)
        return self.storage.start()

    def _start_server(self):
        config = self.config
        http = None
        if config.httpServerEnabled:
            http = f"tcp:{config.httpServerPort}:interface={config.httpServerHost}"
        self.server = BookieServer(
            self.storage, self.reactor, endpoint=listen_endpoint(config, self.reactor),
            bookie_id=config.bookieId or (None if config.bookiePort == 0 and not config.bookieEndpoint
                                          else f"{config.advertisedAddress}:{config.bookiePort}"),
            advertised_address=config.advertisedAddress, metadata_store=self.store,
            data_dirs=[config.journalDirectory, *config.ledgerDirectories],
            disk_check_interval=config.diskCheckInterval / 1000.0,
            disk_usage_threshold=config.diskUsageThreshold,
            disk_usage_lwm_threshold=config.diskUsageLwmThreshold, http_endpoint=http,
            own_storage=False)
        # The stall detector's figures (daemons/startup.py) on the bookie's own /metrics.
        self.server.metrics_registry.register(ReactorLagCollector(self.lag_monitor, None, "bookie_"))
        return self.server.start()

    def _start_autorecovery(self):
        self.autorecovery = make_autorecovery(self.config, self.store, self.reactor)
        self.autorecovery.startService()

    async def _stop_autorecovery(self):
        await self.autorecovery.stopService()
        await self.autorecovery.bookie_client.close()

    def announce(self) -> None:
        self.log.info("pulsar-bookie {bookie} ready", bookie=self.server.bookie_id)


BookieOptions = config_options(BookieConfig, what="BookKeeper")


def make_bookie_service(options) -> BookieService:
    limit_malloc_arenas()
    return BookieService(options.config)


#: The names twistd's ServiceMaker looks up in this module.
Options, makeService = BookieOptions, make_bookie_service
