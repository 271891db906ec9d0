"""
The proxy's own connections to brokers, for the lookups it answers itself.

``OnBehalf`` is who the proxy speaks for on a connection: the client's role (sent as
``original_principal``) and, with ``forwardAuthorizationCredentials``, the client's credentials
(``original_auth_method`` / ``original_auth_data``). ``ProxiedClientConnection`` is our client
library's connection with those fields in its CONNECT, and with the broker's AUTH_CHALLENGE
answered by ``OnBehalf.answer_challenge()``: the client's fresh credentials when they are
forwarded (the broker then tracks the client's, not the proxy's, see ``security/proxied.py``),
else the proxy's own.

``BrokerPool`` keeps one ready connection per broker address. The proxy holds one pool per
authenticated client connection (the CONNECT names one original principal, so connections cannot
be shared between clients: Pulsar's proxy has a ConnectionPool per ProxyConnection too) and one
shared pool when authentication is off. Dialling is an injected ``connector(address, tls,
factory)`` so tests need no sockets.
"""

from dataclasses import dataclass
from typing import Callable, Optional

from twisted.internet import defer, protocol
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.client.connection import ClientConnection, command
from pulsar_twisted.client.pool import broker_address, split_address
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import encode_command

T = api.BaseCommand
PROXY_VERSION = "pulsar-twisted-proxy-0.1.0"


@dataclass
class OnBehalf:
    """The client a broker connection is for (None role: authentication is off)."""

    role: Optional[str] = None
    method: str = ""
    data: Optional[bytes] = None
    supports_refresh: bool = False
    #: () -> Deferred[(method, data)]: the client's current credentials, challenging it first
    #: when they have expired (ProxyConnection.valid_client_credentials).
    refresh: Optional[Callable] = None

    def add_to(self, connect: api.CommandConnect) -> None:
        if self.role:
            connect.original_principal = self.role
        if self.data is not None:
            connect.original_auth_method = self.method
            # A string field in PulsarApi.proto (tokens and basic credentials are text).
            data = self.data
            connect.original_auth_data = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            connect.feature_flags.supports_auth_refresh = self.supports_refresh


def auth_response(method: str, data: bytes) -> bytes:
    """An AUTH_RESPONSE frame carrying ``data``."""
    response = command(T.AUTH_RESPONSE, "authResponse", client_version=PROXY_VERSION,
                       protocol_version=21)
    response.authResponse.response.auth_method_name = method
    response.authResponse.response.auth_data = data or b""
    return encode_command(response)


def answer_challenge(transport, own_auth, on_behalf: OnBehalf, log, peer) -> None:
    """
    The broker asked for fresh credentials. Forwarded client credentials are the ones it keeps
    fresh: answer with the client's current ones (refreshed from the client when expired).
    Otherwise answer with the proxy's own.
    """
    if on_behalf.data is not None and on_behalf.refresh is not None:
        d = defer.maybeDeferred(on_behalf.refresh)

        def send(credentials):
            method, data = credentials
            on_behalf.method, on_behalf.data = method, data
            transport.write(auth_response(method, data))

        d.addCallbacks(send, lambda f: log.info("{peer}: no fresh client credentials for the broker's "
                                                "challenge: {reason}", peer=peer, reason=f.getErrorMessage()))
        return
    if own_auth is not None:
        transport.write(auth_response(own_auth.auth_method_name, own_auth.auth_data()))


class ProxiedClientConnection(ClientConnection):
    """A client connection from the proxy to a broker, on behalf of ``on_behalf``."""

    def __init__(self, clock, on_behalf: OnBehalf, **settings):
        super().__init__(clock, client_version=PROXY_VERSION, **settings)
        self.on_behalf = on_behalf

    def connect_command(self):
        connect = super().connect_command()
        self.on_behalf.add_to(connect.connect)
        return connect

    def _handle_auth_challenge(self, cmd, message):
        answer_challenge(self.transport, self.auth, self.on_behalf, self.log, self.peer)


def tcp_connector(reactor, tls_options=None):
    """The production ``connector``: HostnameEndpoint, wrapped in TLS when asked."""

    def connect(address: str, tls: bool, factory):
        host, port = split_address(address)
        endpoint = HostnameEndpoint(reactor, host, port, timeout=10)
        if tls:
            endpoint = wrapClientTLS(tls_options.for_host(host), endpoint)
        return endpoint.connect(factory)

    return connect


class BrokerPool:
    """
    Ready connections to brokers by address, for one ``OnBehalf``. ``get(url)`` fires with a
    ``ProxiedClientConnection`` after its CONNECTED; a lost connection leaves the pool. A broker
    that accepts the connection but does not answer its CONNECT within ``operation_timeout``
    (stopped, hung, cut off behind the network) is given up: the connection is aborted, so that
    its waiters fail with ConnectError (the lookups then ask the next broker) and the next
    ``get`` dials again. Nothing else would bound that wait: the keep-alive starts only with
    CONNECTED, and each request's timeout only once it is sent.
    """

    log = Logger()

    def __init__(self, clock, connector, on_behalf: OnBehalf, tls: bool, auth=None,
                 operation_timeout: float = 30.0, keep_alive_seconds: float = 30.0):
        self.clock = clock
        self.connector = connector
        self.on_behalf = on_behalf
        self.tls = tls
        self.auth = auth
        self.operation_timeout = operation_timeout
        self.keep_alive_seconds = keep_alive_seconds
        self._connections = {}
        self._dialling = {}     # address -> Deferreds waiting for the connection being dialled
        self._closed = False

    def get(self, url: str) -> defer.Deferred:
        address = broker_address(url)
        found = self._connections.get(address)
        if found is not None:
            return found.when_connected()
        d = defer.Deferred()
        waiters = self._dialling.get(address)
        if waiters is not None:
            waiters.append(d)
        else:
            self._dialling[address] = [d]   # before dialling: a connector may answer at once
            self._dial(address)
        return d

    def _dial(self, address: str) -> None:
        factory = protocol.Factory.forProtocol(lambda: ProxiedClientConnection(
            self.clock, self.on_behalf, operation_timeout=self.operation_timeout,
            keep_alive_seconds=self.keep_alive_seconds, auth=self.auth))
        dialling = defer.maybeDeferred(self.connector, address, self.tls, factory)

        def connected(cnx):
            if self._closed:
                cnx.close()
                raise defer.CancelledError("pool closed")
            self._connections[address] = cnx
            cnx.when_closed().addCallback(lambda _: self._forget(address, cnx))
            cnx.bound_handshake(self.operation_timeout, f"broker {address}")
            return cnx.when_connected()

        def done(result):
            for waiter in self._dialling.pop(address, []):
                if isinstance(result, Failure):
                    waiter.errback(result)
                else:
                    waiter.callback(result)

        dialling.addCallback(connected)
        dialling.addBoth(done)

    def _forget(self, address, cnx):
        if self._connections.get(address) is cnx:
            del self._connections[address]

    def close(self) -> None:
        """Close every connection (the client connection this pool served has gone)."""
        self._closed = True
        for cnx in list(self._connections.values()):
            cnx.close()
        self._connections.clear()
