"""
``AuthenticationTLS``: the CONNECT it sends, the TLS options it gives, bad files; and, against a
real standalone requiring client certificates, our client's role is the certificate's CN.
"""

import os
import shutil
import tempfile

from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client import errors
from pulsar_twisted.client.auth import AuthenticationTLS, AuthenticationToken
from pulsar_twisted.client.client import Client as AsyncClient
from pulsar_twisted.client.pool import tls_options
from pulsar_twisted.testing.certs import TestPKI
from tests.client.helpers import FakeBroker, T

try:
    from twisted.internet import task
    from pulsar_twisted.testing.process import StandaloneProcess, free_port
except ImportError:  # pragma: no cover
    StandaloneProcess = None

_STATE = {}


def pki():
    """A CA with a server certificate, a client one (CN client-a) and one of another CA."""
    if not _STATE:
        directory = tempfile.mkdtemp(prefix="pulsar-client-tls-")
        ca = TestPKI(os.path.join(directory, "ca"))
        other = TestPKI(os.path.join(directory, "other"), name="other")
        _STATE.update(directory=directory, ca=ca,
                      server=ca.issue("server", hosts=["127.0.0.1", "localhost"]),
                      client=ca.issue("client-a", client=True),
                      rogue=other.issue("rogue", client=True))
    return _STATE


class _FakeTLSProtocol:
    """What ``clientConnectionForTLS`` reads of a ``TLSMemoryBIOProtocol`` (ALPN lookup)."""

    class factory:
        wrappedFactory = None


class UnitTests(SynchronousTestCase):
    def test_connect_carries_method_without_data(self):
        """CONNECT names the "tls" method and carries no auth data, as the official clients."""
        p = pki()
        broker = FakeBroker(task.Clock(), handshake=False,
                            auth=AuthenticationTLS(p["client"].cert, p["client"].key))
        (connect,) = broker.commands(T.CONNECT)
        self.assertEqual(connect.connect.auth_method_name, "tls")
        self.assertFalse(connect.connect.HasField("auth_data"))

    def test_other_methods_still_send_data(self):
        """Token authentication still sends its data."""
        broker = FakeBroker(task.Clock(), handshake=False, auth=AuthenticationToken("tok"))
        (connect,) = broker.commands(T.CONNECT)
        self.assertEqual(connect.connect.auth_data, b"tok")

    def test_client_certificate_loaded(self):
        """The certificate and key are read from their PEM files; the CN is the role."""
        p = pki()
        leaf, chain = AuthenticationTLS(p["client"].cert, p["client"].key).client_certificate()
        self.assertEqual(leaf.getSubject().commonName, b"client-a")
        self.assertEqual(chain, [])

    def test_tls_options_present_certificate(self):
        """Every flavour of client TLS options carries the client certificate."""
        p = pki()
        own = AuthenticationTLS(p["client"].cert, p["client"].key).client_certificate()
        for verify_hostname, insecure in ((True, False), (False, False), (False, True)):
            options = tls_options("127.0.0.1", p["ca"].ca_cert, verify_hostname, insecure, own)
            connection = options.clientConnectionForTLS(_FakeTLSProtocol()) \
                if IOpenSSLClientConnectionCreator.providedBy(options) \
                else SSL.Connection(options.getContext(), None)
            # The certificate the handshake will present.
            self.assertEqual(connection.get_certificate().get_subject().CN, "client-a")

    def test_bad_files(self):
        """A missing or non-PEM file fails the client's construction, naming the file."""
        p = pki()
        missing = AuthenticationTLS("/nonexistent/cert.pem", p["client"].key)
        error = self.assertRaises(errors.InvalidConfiguration, AsyncClient,
                                  "pulsar+ssl://127.0.0.1:6651", reactor=task.Clock(),
                                  authentication=missing)
        self.assertIn("/nonexistent/cert.pem", str(error))
        junk = os.path.join(pki()["directory"], "junk.pem")
        with open(junk, "w") as f:
            f.write("not a certificate")
        self.assertRaises(errors.InvalidConfiguration,
                          AuthenticationTLS(junk, p["client"].key).client_certificate)
        self.assertRaises(errors.InvalidConfiguration,
                          AuthenticationTLS(p["client"].cert, junk).client_certificate)


_live = {"standalone": None, "remaining": 0}


class MutualTlsInteropTests(SynchronousTestCase):
    """Our blocking client against a standalone requiring trusted client certificates."""

    if StandaloneProcess is None:
        skip = "needs pulsar_twisted.testing.process"

    def setUp(self):
        p = pki()
        if _live["standalone"] is None:
            port = free_port()
            standalone = StandaloneProcess({
                "brokerServicePortTls": port, "webServicePortTls": free_port(),
                "tlsCertificateFilePath": p["server"].cert, "tlsKeyFilePath": p["server"].key,
                "tlsTrustCertsFilePath": p["ca"].ca_cert,
                "tlsRequireTrustedClientCertOnConnect": "true", "authenticationEnabled": "true",
                "authenticationProviders":
                    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"})
            standalone.tls_url = f"pulsar+ssl://127.0.0.1:{port}"
            standalone.start()
            _live.update(standalone=standalone,
                         remaining=len([n for n in dir(type(self)) if n.startswith("test_")]))
        self.standalone = _live["standalone"]
        self.addCleanup(self._done)

    @staticmethod
    def _done():
        _live["remaining"] -= 1
        if _live["remaining"] <= 0 and _live["standalone"] is not None:
            _live["standalone"].cleanup()
            _live["standalone"] = None
            shutil.rmtree(pki()["directory"], ignore_errors=True)
            _STATE.clear()

    def client(self, auth, timeout=10, **options):
        from pulsar_twisted.client.blocking import Client
        from tests.client.test_interop import _private_reactor
        client = Client(self.standalone.tls_url, operation_timeout_seconds=timeout,
                        reactor=_private_reactor(), authentication=auth,
                        tls_trust_certs_file_path=pki()["ca"].ca_cert, **options)
        self.addCleanup(client.close)
        return client

    def test_client_certificate_role(self):
        """With AuthenticationTLS our client connects and its role is the certificate's CN."""
        p = pki()
        for validate in (True, False):
            client = self.client(AuthenticationTLS(p["client"].cert, p["client"].key),
                                 tls_validate_hostname=validate)
            topic = f"tls-role-{validate}-{os.urandom(4).hex()}"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            producer.send(b"over mutual tls")
            message = consumer.receive(timeout_millis=5000)
            self.assertEqual(message.data(), b"over mutual tls")
            consumer.acknowledge(message)
        self.assertIn("authenticated as client-a (tls)", self.standalone.log_text())

    def test_without_or_with_untrusted_certificate_refused(self):
        """No client certificate, or one from another CA: the connection is refused."""
        p = pki()
        for auth in (None, AuthenticationToken("x"),
                     AuthenticationTLS(p["rogue"].cert, p["rogue"].key)):
            client = self.client(auth, timeout=3)
            self.assertRaises(errors.PulsarException, client.create_producer,
                              f"tls-refused-{os.urandom(4).hex()}")
        self.assertNotIn("authenticated as rogue", self.standalone.log_text())
