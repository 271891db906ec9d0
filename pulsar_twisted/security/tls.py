"""
TLS context factories from PEM files (certificate, private key, CA), for servers and clients.

Server: ``server_tls_options(cert, key, ca_file=None, require_client_cert=False)`` returns a
``CertificateOptions`` for ``SSL4ServerEndpoint`` / ``listenSSL``. With ``require_client_cert`` (mutual
TLS, BookKeeper's ``tlsClientAuthentication``) a peer that presents no certificate, or one not
signed by the CA in ``ca_file``, fails the handshake.

Client: ``ClientTLS(ca_file, cert_file=None, key_file=None)``; ``for_host(hostname)`` gives the
connection creator for one server, which checks the server's certificate against ``ca_file`` AND
against ``hostname`` (DNS name or IP address in its subjectAltName), and presents the client
certificate when one is configured.
"""

from twisted.internet import ssl


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def load_private_certificate(cert_file: str, key_file: str) -> ssl.PrivateCertificate:
    """The certificate in ``cert_file`` with the key in ``key_file`` (both PEM)."""
    return ssl.PrivateCertificate.loadPEM(_read(cert_file) + b"\n" + _read(key_file))


def load_ca(ca_file: str) -> ssl.Certificate:
    """The CA certificate in ``ca_file`` (PEM)."""
    return ssl.Certificate.loadPEM(_read(ca_file))


def server_tls_options(cert_file: str, key_file: str, ca_file: str = None,
                       require_client_cert: bool = False) -> ssl.CertificateOptions:
    """Server-side options; ``require_client_cert`` needs ``ca_file`` (ValueError otherwise)."""
    private = load_private_certificate(cert_file, key_file)
    if not require_client_cert:
        return ssl.CertificateOptions(privateKey=private.privateKey.original,
                                      certificate=private.original)
    if not ca_file:
        raise ValueError("client authentication needs a CA file to check client certificates")
    # trustRoot turns peer verification on, and with it requireCertificate (its default, True, which
    # Twisted refuses to be passed alongside): a peer sending no certificate fails the handshake.
    return ssl.CertificateOptions(privateKey=private.privateKey.original,
                                  certificate=private.original, trustRoot=load_ca(ca_file))


class ClientTLS:
    """Client-side TLS settings; ``for_host`` builds the per-server connection creator."""

    def __init__(self, ca_file: str, cert_file: str = None, key_file: str = None):
        self.trust_root = load_ca(ca_file)
        self.client_certificate = (load_private_certificate(cert_file, key_file)
                                   if cert_file and key_file else None)

    def for_host(self, hostname: str):
        """An ``IOpenSSLClientConnectionCreator`` verifying the server as ``hostname``."""
        return ssl.optionsForClientTLS(hostname, trustRoot=self.trust_root,
                                       clientCertificate=self.client_certificate)
