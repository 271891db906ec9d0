"""
The broker's TLS listeners (``brokerServicePortTls``, ``webServicePortTls``) from its configuration.

``server_tls_context(config)`` builds one ``CertificateOptions`` from ``tlsCertificateFilePath``,
``tlsKeyFilePath``, ``tlsTrustCertsFilePath``, ``tlsProtocols`` and ``tlsCiphers``. With a trust
file the server asks every client for a certificate (so ``AuthenticationProviderTls`` can read
its CN) and checks it against the CA; ``tlsRequireTrustedClientCertOnConnect`` makes a missing one
fail the handshake, ``tlsAllowInsecureConnection`` accepts untrusted ones (Pulsar's meanings).

``peer_certificate_of(transport)`` is the verified client certificate of a connection (a
``cryptography`` certificate) or None for plain TCP and clients that sent none.
"""

from twisted.internet import endpoints, ssl

from pulsar_twisted.config import ConfigError
from pulsar_twisted.security.tls import load_private_certificate

_VERSIONS = [("TLSv1", ssl.TLSVersion.TLSv1_0), ("TLSv1.1", ssl.TLSVersion.TLSv1_1),
             ("TLSv1.2", ssl.TLSVersion.TLSv1_2), ("TLSv1.3", ssl.TLSVersion.TLSv1_3)]


def _pem_certificates(path: str) -> list:
    marker = b"-----END CERTIFICATE-----"
    with open(path, "rb") as f:
        pem = f.read()
    return [ssl.Certificate.loadPEM(block + marker) for block in pem.split(marker) if b"-----BEGIN" in block]


def _version_options(protocols) -> dict:
    if not protocols:
        return {}
    names = [name for name, _ in _VERSIONS]
    unknown = [p for p in protocols if p not in names]
    if unknown:
        raise ConfigError(f"tlsProtocols: unknown versions {unknown} (use {', '.join(names)})")
    indexes = sorted(names.index(p) for p in protocols)
    lowest, highest = _VERSIONS[indexes[0]][1], _VERSIONS[indexes[-1]][1]
    options = {"lowerMaximumSecurityTo": highest}
    if indexes[0] < names.index("TLSv1.2"):
        options["insecurelyLowerMinimumTo"] = lowest
    else:
        options["raiseMinimumTo"] = lowest
    return options


def server_tls_context(config) -> ssl.CertificateOptions:
    """The context factory of the broker's TLS listeners; ``ConfigError`` names a bad key."""
    from OpenSSL import SSL
    if not config.tlsCertificateFilePath or not config.tlsKeyFilePath:
        raise ConfigError("tlsCertificateFilePath, tlsKeyFilePath: a TLS listener needs both")
    try:
        private = load_private_certificate(config.tlsCertificateFilePath, config.tlsKeyFilePath)
    except (OSError, SSL.Error, ValueError) as e:
        raise ConfigError(f"tlsCertificateFilePath, tlsKeyFilePath: cannot load ({e})")
    kwargs = _version_options(config.tlsProtocols)
    if config.tlsCiphers:
        kwargs["acceptableCiphers"] = ssl.AcceptableCiphers.fromOpenSSLCipherString(
            ":".join(config.tlsCiphers))
    options = ssl.CertificateOptions(privateKey=private.privateKey.original,
                                     certificate=private.original, **kwargs)
    context = options.getContext()  # built once and cached by CertificateOptions
    if config.tlsTrustCertsFilePath:
        try:
            cas = _pem_certificates(config.tlsTrustCertsFilePath)
        except (OSError, SSL.Error, ValueError) as e:
            raise ConfigError(f"tlsTrustCertsFilePath: cannot load ({e})")
        store = context.get_cert_store()
        for ca in cas:
            store.add_cert(ca.original)
        mode = SSL.VERIFY_PEER
        if config.tlsRequireTrustedClientCertOnConnect:
            mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        insecure = config.tlsAllowInsecureConnection
        context.set_verify(mode, lambda conn, cert, errno, depth, ok: True if insecure else bool(ok))
        # Client verification with resumable sessions needs a session id context.
        context.set_session_id(b"pulsar-twisted")
    elif config.tlsRequireTrustedClientCertOnConnect:
        raise ConfigError("tlsRequireTrustedClientCertOnConnect: needs tlsTrustCertsFilePath")
    return options


def tls_server_endpoint(reactor, port: int, config, context=None):
    """An SSL4ServerEndpoint on ``bindAddress:port`` with ``server_tls_context(config)``."""
    return endpoints.SSL4ServerEndpoint(reactor, port, context or server_tls_context(config),
                                        interface=config.bindAddress)


def peer_certificate_of(transport):
    """The peer's certificate (``cryptography`` x509) of a TLS transport, else None."""
    get = getattr(transport, "getPeerCertificate", None)
    if get is None:
        return None
    try:
        certificate = get()
    except Exception:
        return None
    if certificate is None:
        return None
    return certificate.to_cryptography() if hasattr(certificate, "to_cryptography") else certificate


def tls_broker_url(config) -> str:
    """``pulsar+ssl://advertisedAddress:brokerServicePortTls`` (lookup answers), or ``""``."""
    if not config.brokerServicePortTls:
        return ""
    return f"pulsar+ssl://{config.advertisedAddress}:{config.brokerServicePortTls}"

