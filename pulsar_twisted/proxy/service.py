"""
``ProxyService``: what the proxy's connections share, built once from the ProxyConfig.

* authentication of clients (``security.auth.AuthenticationService`` on the proxy's own
  ``authenticationProviders``) and, with ``authorizationEnabled``, lookup permissions from the
  configuration store (``security.authz``);
* the proxy's own credentials towards brokers (``brokerClientAuthenticationPlugin`` /
  ``...Parameters``) and TLS towards them (``tlsEnabledWithBroker``);
* broker discovery (``brokers.py``), the allowed relay targets (``targets.py``), the lookups
  (``lookup.py``) and their pools (``pool.py``);
* the limits: ``maxConcurrentInboundConnections`` (per IP: ``...PerIp``) checked before a byte
  is read, ``maxConcurrentLookupRequests`` per request;
* the metrics (``metrics.py``).
"""

import collections

from twisted.internet import defer, protocol
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.logger import Logger

from pulsar_twisted.client.auth import broker_client_authentication
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.config import ConfigError
from pulsar_twisted.proxy.lookup import ProxyLookups
from pulsar_twisted.proxy.metrics import ProxyMetrics
from pulsar_twisted.proxy.pool import BrokerPool, OnBehalf, tcp_connector
from pulsar_twisted.proxy.targets import AllowedTargets
from pulsar_twisted.security.auth import AuthenticationService, Credentials
from pulsar_twisted.security.endpoints import peer_certificate_of
from pulsar_twisted.security.tls import ClientTLS


def broker_tls(config):
    """``ClientTLS`` towards brokers with tlsEnabledWithBroker, else None; ConfigError."""
    if not config.tlsEnabledWithBroker:
        return None
    if not config.brokerClientTrustCertsFilePath:
        raise ConfigError("tlsEnabledWithBroker needs brokerClientTrustCertsFilePath")
    try:
        return ClientTLS(config.brokerClientTrustCertsFilePath, config.brokerClientCertificateFilePath or None,
                         config.brokerClientKeyFilePath or None)
    except Exception as e:
        raise ConfigError(f"brokerClientTrustCertsFilePath: cannot load ({e})")


class ProxyService:
    """Shared state of the proxy (see the module docstring)."""

    log = Logger()
    #: The largest frame relayed in the handshake phases (Pulsar's maxMessageSize + envelope).
    max_frame_size = 5 * 1024 * 1024 + 10 * 1024

    def __init__(self, config, clock, discovery, authz=None, connector=None, relay_connector=None,
                 resolve=None):
        self.config = config
        self.clock = clock
        self.authn = AuthenticationService(config, clock)
        self.authn.enabled = config.authenticationEnabled
        self.authz = authz
        self.refresh_seconds = max(1, config.authenticationRefreshCheckSeconds)
        self.forward_credentials = config.forwardAuthorizationCredentials
        self.own_auth = broker_client_authentication(config)
        self.tls_options = broker_tls(config)
        self.tls = self.tls_options is not None
        self.discovery = discovery
        self.lookups = ProxyLookups(discovery, self.tls)
        self.targets = AllowedTargets.from_config(config, resolve or _reactor_resolve(clock))
        self.metrics = ProxyMetrics(config.clusterName)
        self.connector = connector or tcp_connector(clock, self.tls_options)
        self.relay_connector = relay_connector or self._connect_relay
        self.max_connections = config.maxConcurrentInboundConnections
        self.max_connections_per_ip = config.maxConcurrentInboundConnectionsPerIp
        self.max_lookups = config.maxConcurrentLookupRequests
        self.pending_lookups = 0
        self.connections_by_ip = collections.Counter()
        self._shared_pool = None

    # ---------------------------------------------------------------- connections
    def admit(self, host: str) -> bool:
        """Whether a new client connection from ``host`` fits the limits (counted when not)."""
        over = (self.max_connections and self.metrics.active_connections >= self.max_connections) or (
            self.max_connections_per_ip and self.connections_by_ip[host] >= self.max_connections_per_ip)
        if over:
            self.metrics.rejected_connections += 1
            self.log.warn("refusing connection from {host}: maxConcurrentInboundConnections reached",
                          host=host)
            return False
        return True

    def connection_opened(self, host: str) -> None:
        self.metrics.new_connections += 1
        self.metrics.active_connections += 1
        self.connections_by_ip[host] += 1

    def connection_closed(self, host: str) -> None:
        self.metrics.active_connections -= 1
        self.connections_by_ip[host] -= 1
        if self.connections_by_ip[host] <= 0:
            del self.connections_by_ip[host]

    def authenticate(self, cnx, method: str, data: bytes) -> defer.Deferred:
        """Deferred of the client's Identity (None with authentication off), or failing with
        AuthenticationError. A password is checked off the reactor thread, within the per-address
        and proxy-wide caps (``security.hashing``, counted by the client's host)."""
        if not self.authn.enabled:
            return defer.succeed(None)
        return self.authn.authenticate_deferred(Credentials(
            method, data, peer_certificate_of(cnx.transport), cnx.peer, cnx.host))

    def pool_for(self, on_behalf: OnBehalf):
        """The broker pool of a client connection: shared without authentication, else its own
        (the pool's CONNECTs name the client). Returns (pool, owned)."""
        if on_behalf.role is None and on_behalf.data is None:
            if self._shared_pool is None:
                self._shared_pool = self._pool(on_behalf)
            return self._shared_pool, False
        return self._pool(on_behalf), True

    def _pool(self, on_behalf):
        return BrokerPool(self.clock, self.connector, on_behalf, self.tls, self.own_auth,
                          operation_timeout=float(self.config.operationTimeoutSeconds),
                          keep_alive_seconds=float(self.config.keepAliveIntervalSeconds))

    def close(self) -> None:
        if self._shared_pool is not None:
            self._shared_pool.close()
            self._shared_pool = None

    # ---------------------------------------------------------------- lookups
    def lookup_started(self, counter: str) -> None:
        """Count a request the proxy answers; TooManyRequests past maxConcurrentLookupRequests."""
        if self.max_lookups and self.pending_lookups >= self.max_lookups:
            self.metrics.rejected_lookup_requests += 1
            raise errors.TooManyRequests("Failed due to too many pending lookup requests")
        setattr(self.metrics, counter, getattr(self.metrics, counter) + 1)
        self.pending_lookups += 1

    def lookup_finished(self, result=None):
        self.pending_lookups -= 1
        return result

    async def check_lookup(self, role, topic: str) -> None:
        """With authorizationEnabled: AuthorizationError unless ``role`` may look ``topic`` up."""
        if self.authz is None or not self.authz.enabled:
            return
        await self.authz.check(parse_topic(topic), role, "lookup")

    # ---------------------------------------------------------------- relays
    def _connect_relay(self, host: str, port: int, relay) -> defer.Deferred:
        endpoint = HostnameEndpoint(self.clock, host, port, timeout=10)
        if self.tls_options is not None:
            endpoint = wrapClientTLS(self.tls_options.for_host(host), endpoint)
        return endpoint.connect(protocol.Factory.forProtocol(lambda: relay))


def _reactor_resolve(reactor):
    def resolve(host):
        return reactor.resolve(host)
    return resolve
