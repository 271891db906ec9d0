"""
``twistd -n pulsar-proxy -c conf/proxy.conf``: the Pulsar proxy (``pulsar_twisted.proxy``).

One ordered tree (``tree.py``), started in this order and stopped in reverse:

1. with ``metadataStoreUrl``: the ZooKeeper metadata store, where brokers are discovered
   (``/loadbalance/brokers``); without it, ``brokerServiceURL`` / ``brokerWebServiceURL``. With
   ``authorizationEnabled``, the configuration store (``configurationMetadataStoreUrl``, else the
   same store) for lookup permissions;
2. the ``ProxyService`` (authentication, credentials towards brokers, limits, metrics);
3. the listeners: web (``webServicePort``), web TLS, binary TLS (``servicePortTls``), and the
   plain binary port (``servicePort``) last: its opening is the readiness signal.

Stopping closes the listeners first, then the proxy's broker connections, then the store.
"""

from twisted.internet import endpoints

from pulsar_twisted.config import ConfigError, ProxyConfig
from pulsar_twisted.daemons.options import config_options
from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import ListeningService, Step
from pulsar_twisted.metadata.urls import MetadataUrlError, parse_metadata_store_url
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.proxy.brokers import RegisteredBrokers, StaticBrokers
from pulsar_twisted.proxy.connection import ProxyProtocolFactory
from pulsar_twisted.client.auth import broker_client_authentication
from pulsar_twisted.proxy.service import ProxyService, broker_tls
from pulsar_twisted.proxy.targets import parse_networks, parse_ports
from pulsar_twisted.proxy.web import make_proxy_site
from pulsar_twisted.security.authz import AuthorizationService
from pulsar_twisted.security.endpoints import server_tls_context, tls_server_endpoint


def _store_location(config, key: str):
    try:
        return parse_metadata_store_url(getattr(config, key))
    except MetadataUrlError as e:
        raise ConfigError(f"{key}: {e}")


def check_proxy(config) -> None:
    """Everything refused before start-up (ConfigError naming the key)."""
    if config.metadataStoreUrl:
        _store_location(config, "metadataStoreUrl")
    elif not (config.brokerServiceURLTLS if config.tlsEnabledWithBroker else config.brokerServiceURL):
        raise ConfigError("pulsar-proxy needs brokers: set metadataStoreUrl (zk:host:2181) or "
                          "brokerServiceURL" + ("TLS" if config.tlsEnabledWithBroker else ""))
    if config.configurationMetadataStoreUrl:
        _store_location(config, "configurationMetadataStoreUrl")
    if config.authorizationEnabled and not (config.metadataStoreUrl or config.configurationMetadataStoreUrl):
        raise ConfigError("authorizationEnabled: the proxy reads permissions from "
                          "configurationMetadataStoreUrl (or metadataStoreUrl); set one")
    try:
        parse_ports(config.brokerProxyAllowedTargetPorts)
    except ValueError as e:
        raise ConfigError(f"brokerProxyAllowedTargetPorts: {e}")
    try:
        parse_networks(config.brokerProxyAllowedIPAddresses)
    except ValueError as e:
        raise ConfigError(f"brokerProxyAllowedIPAddresses: {e}")
    broker_client_authentication(config)
    broker_tls(config)
    if config.servicePortTls or config.webServicePortTls:
        server_tls_context(config)
    if not (config.servicePort or config.servicePortTls):
        raise ConfigError("servicePort, servicePortTls: the proxy needs a binary listener")


class ProxyDaemon(Daemon):
    """The proxy's tree (module docstring); ``proxy`` is the ProxyService once started."""

    def __init__(self, config: ProxyConfig, reactor=None):
        super().__init__("pulsar-proxy", reactor)
        self.config = config
        self.store = self.config_store = self.proxy = None
        self._tls_context = None
        steps = [
            Step("metadata store", self._start_store, self._stop_stores),
            Step("proxy", self._start_proxy, lambda: self.proxy.close()),
        ]
        if config.webServicePort:
            steps.append(ListeningService("web", self._web_endpoint, self._site))
        if config.webServicePortTls:
            steps.append(ListeningService(
                "web TLS", lambda: self._tls_endpoint(config.webServicePortTls), self._site))
        if config.servicePortTls:
            steps.append(ListeningService(
                "binary TLS", lambda: self._tls_endpoint(config.servicePortTls), self._binary_factory))
        if config.servicePort:
            steps.append(ListeningService("binary", self._binary_endpoint, self._binary_factory))
        for step in steps:
            step.setServiceParent(self)

    # ---------------------------------------------------------------- steps
    async def _open_store(self, key):
        hosts, root = _store_location(self.config, key)
        store = ZooKeeperMetadataStore(hosts, self.reactor, root=root,
                                       session_timeout=self.config.zooKeeperSessionTimeoutMillis / 1000.0)
        await store.start()
        return store

    async def _start_store(self):
        check_proxy(self.config)
        if self.config.metadataStoreUrl:
            self.store = await self._open_store("metadataStoreUrl")
        if self.config.authorizationEnabled:
            if self.config.configurationMetadataStoreUrl:
                self.config_store = await self._open_store("configurationMetadataStoreUrl")
            else:
                self.config_store = self.store

    async def _stop_stores(self):
        for store in {id(s): s for s in (self.config_store, self.store) if s is not None}.values():
            await store.close()

    def _start_proxy(self):
        config = self.config
        if self.store is not None:
            discovery = RegisteredBrokers(self.store, self.reactor, config.tlsEnabledWithBroker)
        else:
            discovery = StaticBrokers(config, config.tlsEnabledWithBroker)
        authz = AuthorizationService(config, self.config_store) if self.config_store is not None else None
        self.proxy = ProxyService(config, self.reactor, discovery, authz=authz)

    # ---------------------------------------------------------------- listeners
    def _site(self):
        return make_proxy_site(self.proxy, self.reactor)

    def _binary_factory(self):
        return ProxyProtocolFactory(self.proxy, self.reactor)

    def _web_endpoint(self):
        return endpoints.serverFromString(
            self.reactor, f"tcp:{self.config.webServicePort}:interface={self.config.bindAddress}")

    def _binary_endpoint(self):
        return endpoints.serverFromString(
            self.reactor, f"tcp:{self.config.servicePort}:interface={self.config.bindAddress}")

    def _tls_endpoint(self, port: int):
        if self._tls_context is None:
            self._tls_context = server_tls_context(self.config)
        return tls_server_endpoint(self.reactor, port, self.config, self._tls_context)

    def announce(self) -> None:
        config = self.config
        self.log.info("pulsar-proxy ready: binary {binary}, web {web}, brokers from {brokers}",
                      binary=", ".join(str(p) for p in (config.servicePort, config.servicePortTls) if p),
                      web=", ".join(str(p) for p in (config.webServicePort, config.webServicePortTls) if p),
                      brokers=config.metadataStoreUrl or config.brokerServiceURL or config.brokerServiceURLTLS)


ProxyOptions = config_options(ProxyConfig, check_proxy)


def make_proxy_service(options) -> ProxyDaemon:
    return ProxyDaemon(options.config)


#: The names twistd's ServiceMaker looks up in this module.
Options, makeService = ProxyOptions, make_proxy_service
