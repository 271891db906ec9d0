"""
``ConnectionPool``: one ready connection per broker address, shared by every producer, consumer
and lookup of a client.

Addresses are ``(logical, physical)`` pairs of ``host:port``: normally the same broker; through a
proxy the physical address is the proxy and the logical one is sent as ``proxy_to_broker_url``.
A connection that is lost leaves the pool, so the next ``get_connection`` dials again. Dialling is
done by an injectable ``connector(address, factory) -> Deferred[Protocol]`` so tests need no
sockets; the default uses ``HostnameEndpoint`` (and ``wrapClientTLS`` for ``pulsar+ssl://``).
"""

from urllib.parse import urlparse

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from zope.interface import implementer
from twisted.logger import Logger

from pulsar_twisted.client import errors
from pulsar_twisted.client.connection import ClientConnection

DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651
DEFAULT_HTTP_PORT = 8080
DEFAULT_HTTPS_PORT = 8443

#: scheme -> (TLS, HTTP lookup, default port)
_SCHEMES = {"pulsar": (False, False, DEFAULT_PORT), "pulsar+ssl": (True, False, DEFAULT_TLS_PORT),
            "http": (False, True, DEFAULT_HTTP_PORT), "https": (True, True, DEFAULT_HTTPS_PORT)}


class ServiceUrl:
    """
    A parsed ``pulsar://host:port[,host2:port]``, ``pulsar+ssl://...``, ``http://...`` or
    ``https://...`` URL. ``tls``: brokers are reached over TLS (``pulsar+ssl``, and ``https`` as the
    Java client decides it); ``http``: lookups go over the web service (``http_lookup``).
    """

    def __init__(self, url: str):
        parsed = urlparse(url)
        if parsed.scheme not in _SCHEMES:
            raise errors.InvalidConfiguration(
                f"unsupported service URL {url!r} "
                "(expected pulsar://, pulsar+ssl://, http:// or https://)")
        self.url = url
        self.scheme = parsed.scheme
        self.tls, self.http, default = _SCHEMES[parsed.scheme]
        self.addresses = []
        for part in parsed.netloc.split(","):
            host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
            if not host:
                raise errors.InvalidConfiguration(f"no host in service URL {url!r}")
            self.addresses.append(f"{host.strip('[]')}:{int(port) if port else default}")
        self._next = 0

    def address(self) -> str:
        """The next host:port, round-robin over the URL's hosts."""
        address = self.addresses[self._next % len(self.addresses)]
        self._next += 1
        return address

    def http_base(self) -> str:
        """``scheme://host:port`` of the next host (IPv6 hosts in brackets), for HTTP lookups."""
        host, port = split_address(self.address())
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{port}"


def split_address(address: str):
    host, _, port = address.rpartition(":")
    return host, int(port)


def broker_address(url: str) -> str:
    """``host:port`` of a ``pulsar://`` / ``pulsar+ssl://`` broker URL from a lookup answer."""
    return ServiceUrl(url).addresses[0]


def tls_options(hostname: str, trust_certs_file: str = None, verify_hostname: bool = True,
                allow_insecure: bool = False, client_certificate=None):
    """
    A client TLS context factory trusting ``trust_certs_file`` (PEM) or the platform roots.
    ``client_certificate``: None or ``(PrivateCertificate, [intermediate Certificate])`` that
    the client presents (``auth.AuthenticationTLS.client_certificate()``).
    """
    from twisted.internet import ssl
    own = {}
    if client_certificate is not None:
        leaf, chain = client_certificate
        own = {"privateKey": leaf.privateKey.original, "certificate": leaf.original,
               "extraCertChain": [c.original for c in chain]}
    if allow_insecure:
        return ssl.CertificateOptions(verify=False, **own)
    trust = ssl.platformTrust()
    if trust_certs_file:
        with open(trust_certs_file, "rb") as f:
            pem = f.read()
        trust = ssl.trustRootFromCertificates(
            [ssl.Certificate.loadPEM(block) for block in _pem_blocks(pem)])
    if verify_hostname:
        if client_certificate is None:
            return ssl.optionsForClientTLS(hostname, trustRoot=trust)
        return ssl.optionsForClientTLS(
            hostname, trustRoot=trust, clientCertificate=client_certificate[0],
            extraCertificateOptions={"extraCertChain": own["extraCertChain"]})
    return _NoHostnameCheck(trust, own)


def _pem_blocks(pem: bytes):
    marker = b"-----END CERTIFICATE-----"
    return [block + marker for block in pem.split(marker) if b"-----BEGIN" in block]


@implementer(IOpenSSLClientConnectionCreator)
class _NoHostnameCheck:
    """Verifies the chain against ``trust`` but not the name (tlsHostnameVerificationEnable off)."""

    def __init__(self, trust, own=None):
        from twisted.internet import ssl
        from OpenSSL import SSL
        options = ssl.CertificateOptions(trustRoot=trust, **(own or {}))
        self._context = options.getContext()
        self._context.set_verify(SSL.VERIFY_PEER, lambda conn, cert, errno, depth, ok: bool(ok))

    def clientConnectionForTLS(self, tls_protocol):
        from OpenSSL import SSL
        connection = SSL.Connection(self._context, None)
        connection.set_app_data(tls_protocol)
        return connection


class ConnectionPool:
    """
    Ready connections by ``(logical, physical)`` address.

    ``connection_settings`` go to each ``ClientConnection`` (operation_timeout, keep_alive_seconds,
    auth). ``tls`` is a callable ``hostname -> context factory`` or None for plain TCP.
    """

    log = Logger()

    def __init__(self, reactor, connect_timeout: float = 10.0, tls=None, connector=None,
                 **connection_settings):
        self.reactor = reactor
        self.connect_timeout = connect_timeout
        self.tls = tls
        self.connection_settings = connection_settings
        self._connector = connector or self._tcp_connect
        self._connections = {}
        self._pending = {}
        self.closed = False

    def get_connection(self, logical: str, physical: str = None) -> defer.Deferred:
        """A ready connection to ``logical`` (through ``physical`` when given), reused when open."""
        if self.closed:
            return defer.fail(errors.AlreadyClosed("client is closed"))
        physical = physical or logical
        key = (logical, physical)
        cnx = self._connections.get(key)
        if cnx is not None and cnx.is_ready:
            return defer.succeed(cnx)
        d = defer.Deferred()
        waiters = self._pending.get(key)
        if waiters is not None:
            waiters.append(d)
            return d
        # The waiter is queued before dialling: a connector that answers synchronously
        # (an already-open transport, tests) hands the connection out at once.
        self._pending[key] = [d]
        self._dial(key)
        return d

    def _dial(self, key):
        logical, physical = key
        settings = dict(self.connection_settings)
        if logical != physical:
            settings["target_broker"] = logical
        cnx = ClientConnection(self.reactor, **settings)
        d = self._connector(physical, cnx)

        def dialled(proto):
            # The TCP connect is bounded by connect_timeout (the endpoint's); the handshake too.
            proto.bound_handshake(self.connect_timeout, physical)
            return proto.when_connected()
        d.addCallback(dialled)

        def ready(cnx):
            self._connections[key] = cnx
            cnx.when_closed().addCallback(lambda _: self._forget(key, cnx))
            for waiter in self._pending.pop(key, []):
                waiter.callback(cnx)

        def failed(failure):
            error = failure.value
            if not isinstance(error, errors.PulsarException):
                error = errors.ConnectError(f"cannot connect to {physical}: "
                                            f"{failure.getErrorMessage()}")
            for waiter in self._pending.pop(key, []):
                waiter.errback(error)

        d.addCallbacks(ready, failed)

    def _forget(self, key, cnx):
        if self._connections.get(key) is cnx:
            del self._connections[key]

    def _tcp_connect(self, address: str, cnx: ClientConnection) -> defer.Deferred:
        host, port = split_address(address)
        endpoint = HostnameEndpoint(self.reactor, host, port, timeout=self.connect_timeout)
        if self.tls is not None:
            # Our reactor as the TLS layer's clock: it schedules its write flushes on it, and
            # by default it would use the global reactor, which a private one never runs.
            endpoint = wrapClientTLS(self.tls(host), endpoint, clock=self.reactor)
        return connectProtocol(endpoint, cnx)

    def connections(self):
        return list(self._connections.values())

    def close(self) -> defer.Deferred:
        """Close every connection; fires when all are gone."""
        self.closed = True
        waits = []
        for cnx in list(self._connections.values()):
            waits.append(cnx.when_closed())
            cnx.close()
        self._connections.clear()
        return defer.DeferredList(waits)
