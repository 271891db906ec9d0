"""
``twistd -n pulsar-broker -c conf/broker.conf``: one broker of a multi-process cluster.

Wiring, started in this order and stopped in reverse:

1. ``ZooKeeperMetadataStore`` on ``metadataStoreUrl`` (``zk:host:port[,host:port][/chroot]``), session
   timeout ``zooKeeperSessionTimeoutMillis``; bookies are discovered through the same store, or through
   a second one on ``bookkeeperMetadataServiceUri`` (``zk+null://host:port[/chroot]/ledgers``).
2. ``TcpBookieClient`` (TLS when ``bookkeeperTLSTrustCertsFilePath`` is set, presenting
   ``bookkeeperTLSCertificateFilePath`` with ``bookkeeperTLSClientAuthentication``; request deadline
   ``bookkeeperClientTimeoutInSeconds``) under a ``BookKeeperClient`` that follows the bookies'
   registrations; the ``ManagedLedgerFactory`` (E/Qw/Qa from ``managedLedgerDefault*``).
3. ``BrokerService`` with ``BundleOwnership`` (``ownership.py``): lookups answer Connect or Redirect
   by bundle owner, topic loads need the bundle, a lost bundle unloads its topics.
4. ``AdminService`` and the web site on ``webServicePort``; the TLS listeners when configured
   (``brokerServicePortTls`` / ``webServicePortTls``, ``security/endpoints.py``); the binary listener
   last, so that a broker accepting plain connections also accepts TLS ones.
5. The broker's registration: an ephemeral ``/loadbalance/brokers/<advertisedAddress>:<webServicePort>``
   holding its URLs (Pulsar's ``LocalBrokerData`` field names), re-created by the periodic check if a
   new ZooKeeper session lost it; then its candidacy for ``/loadbalance/leader`` (``leader.py``).

The TLS URLs (``pulsar+ssl://advertisedAddress:brokerServicePortTls``,
``https://advertisedAddress:webServicePortTls``, empty when the port is 0) go wherever the plain ones
go: the registration, the bundle ownership nodes (so a Redirect from another broker carries
``brokerServiceUrlTls``) and this broker's own lookup answers.

A graceful stop closes the listeners, unloads every topic, gives the bundles back (deletes their
nodes, so other brokers take them at once) and ends the ZooKeeper session.
"""

import json

from twisted.application import service
from twisted.internet import defer, endpoints, task
from twisted.logger import Logger

from pulsar_twisted.broker.leader import LeaderElection
from pulsar_twisted.broker.ownership import BundleOwnership, topic_hash
from pulsar_twisted.common.gctune import tune_garbage_collector
from pulsar_twisted.config import ConfigError
from pulsar_twisted.common.startup import chain_startup
from pulsar_twisted.metadata.layout import broker_path

log = Logger()


def metadata_store_location(config) -> tuple:
    """``(hosts, root)`` of the broker's ``metadataStoreUrl``; ConfigError naming the key."""
    from pulsar_twisted.cli.pulsar import CommandError, parse_metadata_store_url
    try:
        return parse_metadata_store_url(config.metadataStoreUrl)
    except CommandError as e:
        raise ConfigError(f"metadataStoreUrl: {e}")


def bookkeeper_store_location(config):
    """``(hosts, root)`` of ``bookkeeperMetadataServiceUri``, or None to use the broker's store."""
    if not config.bookkeeperMetadataServiceUri:
        return None
    from pulsar_twisted.bookie.tap import parse_metadata_service_uri
    try:
        return parse_metadata_service_uri(config.bookkeeperMetadataServiceUri)
    except ConfigError as e:
        raise ConfigError(str(e).replace("metadataServiceUri", "bookkeeperMetadataServiceUri", 1))


def bookie_tls_options(config):
    """``security.tls.ClientTLS`` from the bookkeeperTLS* keys, or None for plain TCP."""
    if not config.bookkeeperTLSTrustCertsFilePath:
        if config.bookkeeperTLSClientAuthentication:
            raise ConfigError("bookkeeperTLSClientAuthentication needs bookkeeperTLSTrustCertsFilePath "
                              "(TLS to bookies is on when the bookies' CA is given)")
        return None
    from pulsar_twisted.security.tls import ClientTLS
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


def check_config(config) -> None:
    """Everything that can be refused before start-up (ConfigError naming the key)."""
    metadata_store_location(config)
    bookkeeper_store_location(config)
    if config.zooKeeperSessionTimeoutMillis <= 0:
        raise ConfigError("zooKeeperSessionTimeoutMillis must be positive")
    if config.brokerServicePortTls or config.webServicePortTls:
        # Missing or unreadable certificates stop start-up here, naming the key, rather than
        # after the broker has joined the cluster.
        from pulsar_twisted.security.endpoints import server_tls_context
        server_tls_context(config)


class BrokerClusterService(service.Service):
    """One cluster broker (see the module docstring). ``ready`` fires once it listens."""

    def __init__(self, config, reactor=None):
        if reactor is None:
            from twisted.internet import reactor as global_reactor
            reactor = global_reactor
        self.config = config
        self.reactor = reactor
        self.store = None
        self.bookie_store = None
        self.bookie_client = None
        self.ledger_client = None
        self.ml_factory = None
        self.broker = None
        self.ownership = None
        self.admin = None
        self.port = None
        self.web_port = None
        self.tls_ports = []
        self._registration_loop = None
        self.leader = None
        self.ready = defer.Deferred()

    # ---------------------------------------------------------------- urls
    @property
    def broker_id(self) -> str:
        return f"{self.config.advertisedAddress}:{self.config.webServicePort}"

    @property
    def broker_url(self) -> str:
        return f"pulsar://{self.config.advertisedAddress}:{self.config.brokerServicePort}"

    @property
    def web_url(self) -> str:
        return f"http://{self.config.advertisedAddress}:{self.config.webServicePort}"

    @property
    def broker_url_tls(self) -> str:
        """``pulsar+ssl://...:brokerServicePortTls``, or "" without a TLS binary listener."""
        from pulsar_twisted.security.endpoints import tls_broker_url
        return tls_broker_url(self.config)

    @property
    def web_url_tls(self) -> str:
        """``https://...:webServicePortTls``, or "" without a TLS web listener."""
        if not self.config.webServicePortTls:
            return ""
        return f"https://{self.config.advertisedAddress}:{self.config.webServicePortTls}"

    def urls(self) -> dict:
        """This broker's URLs under Pulsar's ``NamespaceEphemeralData`` names (ownership nodes)."""
        return {"nativeUrl": self.broker_url, "nativeUrlTls": self.broker_url_tls,
                "httpUrl": self.web_url, "httpUrlTls": self.web_url_tls}

    def broker_data(self) -> bytes:
        """The registration's value: Pulsar's LocalBrokerData names for what clients need."""
        return json.dumps({"webServiceUrl": self.web_url, "webServiceUrlTls": self.web_url_tls,
                           "pulsarServiceUrl": self.broker_url,
                           "pulsarServiceUrlTls": self.broker_url_tls,
                           "brokerVersionString": "pulsar-twisted",
                           "cluster": self.config.clusterName}, sort_keys=True).encode()

    # ---------------------------------------------------------------- lifecycle
    def startService(self):
        super().startService()
        chain_startup(defer.Deferred.fromCoroutine(self._start()), self.ready, self.reactor, log,
                      "pulsar-broker")

    async def _start(self):
        from pulsar_twisted.broker.admin import AdminService
        from pulsar_twisted.broker.cnx import BrokerProtocolFactory
        from pulsar_twisted.broker.service import BrokerService
        from pulsar_twisted.broker.tap import managed_ledger_config
        from pulsar_twisted.ledger.client import BookKeeperClient
        from pulsar_twisted.ledger.tcp import TcpBookieClient
        from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
        from pulsar_twisted.mledger.factory import ManagedLedgerFactory
        from pulsar_twisted.security.endpoints import listen_tls
        from pulsar_twisted.web.site import make_site

        config, reactor = self.config, self.reactor
        check_config(config)
        tls = bookie_tls_options(config)
        session_timeout = config.zooKeeperSessionTimeoutMillis / 1000.0
        hosts, root = metadata_store_location(config)
        self.store = ZooKeeperMetadataStore(hosts, reactor, root=root, session_timeout=session_timeout)
        await self.store.start()
        bookie_location = bookkeeper_store_location(config)
        if bookie_location is not None and bookie_location != (hosts, root):
            bookie_hosts, bookie_root = bookie_location
            self.bookie_store = ZooKeeperMetadataStore(bookie_hosts, reactor, root=bookie_root,
                                                       session_timeout=session_timeout)
            await self.bookie_store.start()

        self.bookie_client = TcpBookieClient(
            reactor, tls, request_timeout=float(config.bookkeeperClientTimeoutInSeconds))
        self.ledger_client = BookKeeperClient(self.bookie_store or self.store, self.bookie_client,
                                              reactor)
        await self.ledger_client.start()
        bookies = len(self.ledger_client.writable_bookies)
        if bookies < config.managedLedgerDefaultEnsembleSize:
            log.warn("{n} writable bookies registered, fewer than managedLedgerDefaultEnsembleSize "
                     "({e}): topics cannot be created until more bookies join",
                     n=bookies, e=config.managedLedgerDefaultEnsembleSize)
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.store, reactor,
                                               managed_ledger_config(config))

        self.broker = BrokerService(config, self.ml_factory, self.store, reactor, self.broker_url,
                                    self.broker_url_tls)
        await self.broker.start()
        check_interval = max(0.5, min(5.0, session_timeout / 2))
        self.ownership = BundleOwnership(
            self.store, reactor, self.urls(),
            on_bundle_lost=self._unload_bundle, check_interval=check_interval)
        self.broker.ownership = self.ownership
        self.ownership.start()
        self.store.register_session_listener(self._session_changed)
        self.broker.startService()

        self.admin = AdminService(self.broker, self.store, config, reactor, web_service_url=self.web_url)
        self.admin.startService()
        web = f"tcp:{config.webServicePort}:interface={config.bindAddress}"
        self.web_port = await endpoints.serverFromString(reactor, web).listen(
            make_site(self.admin, self.broker, config))
        if config.brokerServicePortTls or config.webServicePortTls:
            self.tls_ports = await listen_tls(reactor, config, BrokerProtocolFactory(self.broker, reactor),
                                              make_site(self.admin, self.broker, config))
        description = config.brokerServiceEndpoint or (
            f"tcp:{config.brokerServicePort}:interface={config.bindAddress}")
        self.port = await endpoints.serverFromString(reactor, description).listen(
            BrokerProtocolFactory(self.broker, reactor))

        await self._register()
        # The /loadbalance/leader node that /admin/v2/brokers/leaderBroker reports (leader.py).
        self.leader = LeaderElection(self.store, reactor, self.broker_id, self.web_url, check_interval)
        await self.leader.start()
        self._registration_loop = task.LoopingCall(self._check_registration)
        self._registration_loop.clock = reactor
        self._registration_loop.start(check_interval, now=False).addErrback(
            lambda f: log.failure("broker registration check stopped", f))
        tune_garbage_collector()
        log.info("pulsar-broker {id} ready: {urls} (metadata {hosts}{root}, {n} bookies)",
                 id=self.broker_id, urls=", ".join(u for u in self.urls().values() if u), hosts=hosts,
                 root="" if root == "/" else root, n=bookies)
        return self

    def _register(self):
        return self.store.put(broker_path(self.broker_id), self.broker_data(), ephemeral=True)

    def _check_registration(self):
        """Re-register after a ZooKeeper session expiry took the ephemeral node away."""
        d = self.store.exists(broker_path(self.broker_id))

        def checked(stat):
            if stat is None:
                log.warn("broker registration {id} was gone (new ZooKeeper session?): registering again",
                         id=self.broker_id)
                return self._register()
        d.addCallback(checked)
        d.addErrback(lambda f: log.warn("broker registration check failed: {error}",
                                        error=f.getErrorMessage()))
        return d

    def _session_changed(self, state):
        """A new ZooKeeper session: register again now (the periodic check is the safety net)."""
        if state == "expired-new-session" and self.running:
            self._check_registration()

    def _unload_bundle(self, bundle):
        namespace = bundle.namespace
        self.broker.unload_topics(
            lambda name: str(name.namespace_name) == namespace and bundle.includes(topic_hash(str(name))))

    def stopService(self):
        super().stopService()
        return defer.Deferred.fromCoroutine(self._stop())

    async def _stop(self):
        if self._registration_loop is not None and self._registration_loop.running:
            self._registration_loop.stop()
        if self.leader is not None:
            await self.leader.stop()
        for port in (self.port, self.web_port, *self.tls_ports):
            if port is not None:
                await port.stopListening()
        if self.admin is not None:
            await defer.maybeDeferred(self.admin.stopService)
        if self.broker is not None:
            # Topics first, then the bundles: another broker must not open a ledger we still write.
            await self.broker.stopService()
        if self.ownership is not None:
            await self.ownership.stop()
        if self.ml_factory is not None:
            await self.ml_factory.shutdown()
        if self.bookie_client is not None:
            await self.bookie_client.close()
        for store in (self.bookie_store, self.store):
            if store is not None:
                await store.close()
        log.info("pulsar-broker {id} stopped", id=self.broker_id)
