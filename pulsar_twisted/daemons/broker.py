"""
``twistd -n pulsar-broker -c conf/broker.conf``: one broker of a multi-process cluster.

One ordered tree (``tree.py``), started in this order and stopped in reverse:

1. ``ZooKeeperMetadataStore`` on ``metadataStoreUrl`` (``zk:host:port[,host:port][/chroot]``), session
   timeout ``metadataStoreSessionTimeoutMillis``; bookies are discovered through the same store, or through
   a second one on ``bookkeeperMetadataServiceUri`` (``zk+null://host:port[/chroot]/ledgers``).
2. ``TcpBookieClient`` (TLS when ``bookkeeperTLSTrustCertsFilePath`` is set, presenting
   ``bookkeeperTLSCertificateFilePath`` with ``bookkeeperTLSClientAuthentication``; request deadline
   ``bookkeeperClientTimeoutInSeconds``) under a ``BookKeeperClient`` that follows the bookies'
   registrations; the ``ManagedLedgerFactory`` (E/Qw/Qa from ``managedLedgerDefault*``).
3. ``BrokerService`` with ``BundleOwnership`` (``broker/ownership.py``): lookups answer Connect or
   Redirect by bundle owner, topic loads need the bundle, a lost bundle unloads its topics.
4. ``AdminService``; the listeners: web on ``webServicePort``, web TLS and binary TLS when configured
   (``webServicePortTls`` / ``brokerServicePortTls``), the plain binary listener last, so that a broker
   accepting plain connections also accepts TLS ones.
5. The broker's registration (``broker/registration.py``), then its candidacy for
   ``/loadbalance/leader`` (``broker/leader.py``), then the load manager
   (``broker/loadbalance/manager.py``: load reports in the registration node, placement of free
   bundles, automatic splits, shedding on the leader).

The TLS URLs go wherever the plain ones go: the registration, the bundle ownership nodes (so a
Redirect from another broker carries ``brokerServiceUrlTls``) and this broker's own lookup answers.

A graceful stop (the tree in reverse) leaves the election, closes the listeners, unloads every
topic, gives the bundles back (deletes their nodes, so other brokers take them at once) and ends the
ZooKeeper session.
"""


import json

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.leader import LeaderElection
from pulsar_twisted.broker.loadbalance.decisions import DecisionLog
from pulsar_twisted.broker.loadbalance.manager import LoadManager
from pulsar_twisted.broker.advertised import check_listener_config
from pulsar_twisted.broker.ownership import BundleOwnership, load_topics, unload_bundle
from pulsar_twisted.broker.registration import BrokerAddresses, BrokerRegistration
from pulsar_twisted.broker.service import BrokerService
from pulsar_twisted.config import BrokerConfig, ConfigError
from pulsar_twisted.daemons.gctune import limit_malloc_arenas
from pulsar_twisted.daemons.listeners import BrokerListeners
from pulsar_twisted.daemons.offloaders import start_offloaders
from pulsar_twisted.daemons.options import config_options
from pulsar_twisted.daemons.replication_client import use_replication_clients
from pulsar_twisted.daemons.owner_probe import owner_alive
from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import Step
from pulsar_twisted.ledger.client import BookKeeperClient, health_check_options
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.urls import (
    MetadataUrlError, parse_metadata_service_uri, parse_metadata_store_url)
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.security.endpoints import server_tls_context
from pulsar_twisted.security.tls import ClientTLS


# -------------------------------------------------------------------- configuration
def metadata_store_location(config) -> tuple:
    """``(hosts, root)`` of the broker's ``metadataStoreUrl``; ConfigError naming the key."""
    try:
        return parse_metadata_store_url(config.metadataStoreUrl)
    except MetadataUrlError as e:
        raise ConfigError(f"metadataStoreUrl: {e}")


def bookkeeper_store_location(config):
    """``(hosts, root)`` of ``bookkeeperMetadataServiceUri``, or None to use the broker's store."""
    if not config.bookkeeperMetadataServiceUri:
        return None
    try:
        return parse_metadata_service_uri(config.bookkeeperMetadataServiceUri)
    except MetadataUrlError as e:
        raise ConfigError(f"bookkeeperMetadataServiceUri: {e}")


def bookie_tls_options(config):
    """``security.tls.ClientTLS`` from the bookkeeperTLS* keys, or None for plain TCP."""
    if not config.bookkeeperTLSTrustCertsFilePath:
        if config.bookkeeperTLSClientAuthentication:
            raise ConfigError("bookkeeperTLSClientAuthentication needs bookkeeperTLSTrustCertsFilePath "
                              "(TLS to bookies is on when the bookies' CA is given)")
        return None
    cert = key = None
    if config.bookkeeperTLSClientAuthentication:
        cert, key = config.bookkeeperTLSCertificateFilePath, config.bookkeeperTLSKeyFilePath
        if not cert or not key:
            raise ConfigError("bookkeeperTLSClientAuthentication needs bookkeeperTLSCertificateFilePath "
                              "and bookkeeperTLSKeyFilePath")
    try:
        return ClientTLS(config.bookkeeperTLSTrustCertsFilePath, cert, key)
    except Exception as e:
        raise ConfigError(f"bookkeeperTLS*: cannot load the certificates: {e}")


def session_timeout_millis(config) -> int:
    """The metadata session timeout: the deprecated ``zooKeeperSessionTimeoutMillis`` when it is
    positive (Pulsar lets it win), else ``metadataStoreSessionTimeoutMillis``."""
    if config.zooKeeperSessionTimeoutMillis > 0:
        return config.zooKeeperSessionTimeoutMillis
    return config.metadataStoreSessionTimeoutMillis


def check_config(config) -> None:
    """Everything that can be refused before start-up (ConfigError naming the key)."""
    metadata_store_location(config)
    bookkeeper_store_location(config)
    if session_timeout_millis(config) <= 0:
        raise ConfigError("metadataStoreSessionTimeoutMillis must be positive")
    check_listener_config(config)
    if config.brokerServicePortTls or config.webServicePortTls:
        # Missing or unreadable certificates stop start-up here, naming the key, rather than
        # after the broker has joined the cluster.
        server_tls_context(config)


def check_broker(config) -> None:
    """The options check of ``twistd pulsar-broker``: a cluster broker needs a metadata store."""
    if not config.metadataStoreUrl:
        raise ConfigError(
            "pulsar-broker joins a cluster: set metadataStoreUrl (zk:host:2181) in its configuration. "
            "For a single process with its own storage, run `twistd -n pulsar-standalone`.")
    check_config(config)


# -------------------------------------------------------------------- the tree
class BrokerClusterService(BrokerListeners, Daemon):
    """One cluster broker (see the module docstring). The parts are attributes once their step
    has started; ``ready`` fires once the broker listens, is registered and is a leader candidate."""

    def __init__(self, config: BrokerConfig, reactor=None):
        super().__init__("pulsar-broker", reactor, config.brokerShutdownTimeoutMs / 1000.0)
        self.config = config
        self.addresses = BrokerAddresses(config)
        self.store = self.bookie_store = self.bookie_client = self.ledger_client = None
        self.offloaders = self.ml_factory = self.broker = self.ownership = self.admin = None
        self.registration = self.leader = self.load_manager = None
        self._bookie_tls = None
        self._bookies_at_start = 0
        self.session_timeout = session_timeout_millis(config) / 1000.0
        # Bundle, registration and leader checks: well inside the session timeout.
        self.check_interval = max(0.5, min(5.0, self.session_timeout / 2))
        steps = [
            Step("metadata store", self._start_store, lambda: self.store.close()),
            Step("bookie metadata store", self._start_bookie_store, self._stop_bookie_store),
            Step("bookie client", self._start_bookie_client, lambda: self.bookie_client.close()),
            Step("ledger client", self._start_ledger_client),
            Step("offloaders", self._start_offloaders, lambda: self.offloaders.stopService()),
            Step("managed ledgers", self._start_managed_ledgers, lambda: self.ml_factory.shutdown()),
            Step("broker", self._start_broker),
            # Topics are unloaded (the broker step below stops) before the bundles are given back:
            # another broker must not open a ledger this one still writes.
            Step("bundle ownership", self._start_ownership, lambda: self.ownership.stop()),
            Step("broker service", lambda: self.broker.startService(), lambda: self.broker.stopService()),
            Step("admin", self._start_admin, lambda: self.admin.stopService()),
        ]
        steps += self.listening_services()
        steps += [
            Step("registration", self._start_registration, lambda: self.registration.stop()),
            Step("leader election", self._start_leader, lambda: self.leader.stop()),
            Step("load manager", self._start_load_manager, lambda: self.load_manager.stop()),
        ]
        for step in steps:
            step.setServiceParent(self)

    # ---------------------------------------------------------------- addresses
    @property
    def broker_id(self) -> str:
        return self.addresses.broker_id

    def urls(self) -> dict:
        """This broker's URLs under Pulsar's ``NamespaceEphemeralData`` names (ownership nodes)."""
        return self.addresses.urls()

    def broker_data(self) -> bytes:
        """The registration's value (``BrokerAddresses.broker_data``)."""
        return self.addresses.broker_data()

    # ---------------------------------------------------------------- steps
    async def _start_store(self):
        check_config(self.config)
        self._bookie_tls = bookie_tls_options(self.config)
        hosts, root = metadata_store_location(self.config)
        self.store = ZooKeeperMetadataStore(hosts, self.reactor, root=root,
                                            session_timeout=self.session_timeout)
        await self.store.start()

    async def _start_bookie_store(self):
        location = bookkeeper_store_location(self.config)
        if location is not None and location != metadata_store_location(self.config):
            hosts, root = location
            self.bookie_store = ZooKeeperMetadataStore(hosts, self.reactor, root=root,
                                                       session_timeout=self.session_timeout)
            await self.bookie_store.start()

    def _stop_bookie_store(self):
        if self.bookie_store is not None:
            return self.bookie_store.close()

    def _start_bookie_client(self):
        self.bookie_client = TcpBookieClient(
            self.reactor, self._bookie_tls,
            request_timeout=float(self.config.bookkeeperClientTimeoutInSeconds))

    async def _start_ledger_client(self):
        self.ledger_client = BookKeeperClient(self.bookie_store or self.store, self.bookie_client,
                                              self.reactor, **health_check_options(self.config))
        await self.ledger_client.start()
        self._bookies_at_start = bookies = len(self.ledger_client.writable_bookies)
        if bookies < self.config.managedLedgerDefaultEnsembleSize:
            self.log.warn("{n} writable bookies registered, fewer than managedLedgerDefaultEnsembleSize "
                          "({e}): topics cannot be created until more bookies join",
                          n=bookies, e=self.config.managedLedgerDefaultEnsembleSize)

    def _start_offloaders(self):
        self.offloaders = start_offloaders(self.config, self.reactor)

    def _start_managed_ledgers(self):
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.store, self.reactor,
                                               ManagedLedgerConfig.from_config(self.config),
                                               offloaders=self.offloaders)

    def _start_broker(self):
        self.broker = BrokerService(self.config, self.ml_factory, self.store, self.reactor,
                                    self.addresses.broker_url, self.addresses.broker_url_tls)
        use_replication_clients(self.broker, self.config, self.reactor)
        return self.broker.start()

    def _start_ownership(self):
        # One decisions log for the admin API's unloads and splits and the load manager's moves.
        self.broker.decisions = DecisionLog(self.reactor, self.config.loadBalancerDecisionsMaxEntries)
        self.ownership = BundleOwnership(
            self.store, self.reactor, self.urls(),
            on_bundle_lost=lambda bundle: unload_bundle(self.broker, bundle),
            on_bundle_unload=lambda bundle: unload_bundle(self.broker, bundle),
            on_bundle_taken=lambda bundle, topics: load_topics(self.broker, bundle, topics),
            owner_alive=lambda owner: owner_alive(self.reactor, owner),
            # Well inside the clients' operation timeout (30 s by default).
            hold_seconds=min(2 * self.session_timeout, 20.0),
            check_interval=self.check_interval)
        self.broker.ownership = self.ownership
        self.ownership.start()

    def _start_admin(self):
        self.admin = AdminService(self.broker, self.store, self.config, self.reactor,
                                  web_service_url=self.addresses.web_url)
        self.admin.startService()

    def _start_registration(self):
        self.registration = BrokerRegistration(self.store, self.reactor, self.broker_id,
                                               self.broker_data(), self.check_interval)
        return self.registration.start()

    def _start_leader(self):
        # The /loadbalance/leader node that /admin/v2/brokers/leaderBroker reports.
        self.leader = LeaderElection(self.store, self.reactor, self.broker_id, self.addresses.web_url,
                                     self.check_interval)
        return self.leader.start()

    def _start_load_manager(self):
        # Reports, placement of free bundles, automatic splits and (on the leader) shedding.
        self.load_manager = LoadManager(
            self.broker, self.ownership, self.store, self.reactor, self.config, self.broker_id,
            json.loads(self.broker_data()), registration=self.registration, leader=self.leader,
            decisions=self.broker.decisions)
        self.broker.load_manager = self.load_manager
        self.ownership.placement = self.load_manager.place
        self.load_manager.start()
        return self.load_manager.write_report(force=True)

    def announce(self) -> None:
        hosts, root = metadata_store_location(self.config)
        self.log.info("pulsar-broker {id} ready: {urls} (metadata {hosts}{root}, {n} bookies)",
                      id=self.broker_id,
                      urls=", ".join(u for u in self.urls().values() if u and isinstance(u, str)),
                      hosts=hosts, root="" if root == "/" else root,
                      n=self._bookies_at_start)

    def stopService(self):
        d = super().stopService()
        d.addCallback(lambda _: self.log.info("pulsar-broker {id} stopped", id=self.broker_id))
        return d


BrokerOptions = config_options(BrokerConfig, check_broker)


def make_broker_service(options) -> BrokerClusterService:
    limit_malloc_arenas()
    return BrokerClusterService(options.config)


#: The names twistd's ServiceMaker looks up in this module.
Options, makeService = BrokerOptions, make_broker_service
