"""
Interop: TLS listeners, authentication providers, token refresh and authorization, seen through the
official client (``pulsar-client``) and HTTPS/HTTP requests against a real standalone.

Certificates are made at run time (``pulsar_twisted.testing.certs``); keys and tokens with our
``pulsar_twisted.security.jwt``.
"""

import atexit
import base64
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request

import bcrypt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from twisted.internet import defer
from twisted.trial import unittest as twisted_unittest

from pulsar_twisted.security import jwt
from pulsar_twisted.testing.certs import TestPKI
from pulsar_twisted.testing.process import StandaloneProcess, free_port
from tests.interop.test_core import InteropCase, _client_logger, pulsar

_DIR = tempfile.mkdtemp(prefix="pulsar-security-test-")
atexit.register(shutil.rmtree, _DIR, True)
_PKI = {}


def pki():
    """One CA with a server certificate (SAN 127.0.0.1, localhost) and client certificates, plus an
    unrelated CA (made once per test run)."""
    if not _PKI:
        ca = TestPKI(os.path.join(_DIR, "ca"))
        other = TestPKI(os.path.join(_DIR, "other"), name="other")
        _PKI.update(ca=ca, other=other, server=ca.issue("server", hosts=["127.0.0.1", "localhost"]),
                    client=ca.issue("client-a", client=True),
                    rogue=other.issue("rogue", client=True))
    return _PKI


SECRET = os.urandom(32)
#: What the official client raises for a refused CONNECT, exactly: the C++ client treats the
#: broker's AuthenticationError as a failed connection and retries it until the operation
#: timeout (as against Pulsar). Each test also checks the broker's log for the refusal's reason.
REFUSED = pulsar.Timeout if pulsar else ()
SECRET_SPEC = "data:;base64," + base64.b64encode(SECRET).decode()


def token(role, exp_in=None, key=SECRET, alg="HS256"):
    claims = {"sub": role}
    if exp_in is not None:
        claims["exp"] = int(time.time() + exp_in)
    return jwt.encode(claims, key, alg)


class SecureCase(InteropCase):
    """A standalone whose config is computed once per class (ports, certificates)."""

    extra_config = {}
    tls = False

    @property
    def standalone_config(self):
        cls = type(self)
        if "_config" not in cls.__dict__:
            config = {"brokerServicePortTls": free_port(), "webServicePortTls": free_port()} if cls.tls else {}
            if cls.tls:
                p = pki()
                config.update(tlsCertificateFilePath=p["server"].cert, tlsKeyFilePath=p["server"].key,
                              tlsTrustCertsFilePath=p["ca"].ca_cert)
            config.update(cls.extra_config)
            cls._config = config
        return cls._config

    def new_client(self, url=None, **options):
        if url is None and "authentication" not in options and type(self).needs_auth:
            return None  # each test builds its own clients
        options.setdefault("operation_timeout_seconds", 8)
        client = pulsar.Client(url or self.standalone.service_url, connection_timeout_ms=3000,
                               logger=_client_logger(os.path.join(self.standalone.directory, "client.log")),
                               **options)
        self.addCleanup(self._close_client, client)
        return client

    needs_auth = False

    @property
    def tls_url(self):
        return f"pulsar+ssl://127.0.0.1:{self.standalone_config['brokerServicePortTls']}"

    def round_trip(self, client, topic=None):
        topic = topic or self.topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"secret-hello")
        message = self.receive(consumer)
        self.assertEqual(message.data(), b"secret-hello")
        consumer.acknowledge(message)
        producer.close()
        consumer.close()

    def http(self, method, path, body=None, headers=None, https=False, context=None):
        if https:
            base = f"https://127.0.0.1:{self.standalone_config['webServicePortTls']}"
        else:
            base = self.standalone.web_service_url
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(base + path, data=data, method=method, headers=dict(headers or {}))
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


class TlsTests(SecureCase):
    tls = True

    def test_tls_with_hostname_validation(self):
        """pulsar+ssl:// with the CA trusted and the host name checked (SAN 127.0.0.1)."""
        client = self.new_client(self.tls_url, tls_trust_certs_file_path=pki()["ca"].ca_cert,
                                 tls_validate_hostname=True)
        self.round_trip(client)

    def test_tls_without_hostname_validation(self):
        client = self.new_client(self.tls_url, tls_trust_certs_file_path=pki()["ca"].ca_cert,
                                 tls_validate_hostname=False)
        self.round_trip(client)

    def test_untrusted_server_fails(self):
        """A client that does not trust the broker's CA cannot connect."""
        client = self.new_client(self.tls_url, tls_trust_certs_file_path=pki()["other"].ca_cert)
        # The client refuses the broker's certificate during the handshake: ConnectError.
        with self.assertRaises(pulsar.ConnectError):
            client.create_producer(self.topic())

    def test_https_admin(self):
        context = ssl.create_default_context(cafile=pki()["ca"].ca_cert)
        status, body = self.http("GET", "/admin/v2/tenants", https=True, context=context)
        self.assertEqual(status, 200)
        self.assertIn("public", json.loads(body))


class MutualTlsTests(SecureCase):
    tls = True
    needs_auth = True
    allow_broker_tracebacks = False
    extra_config = {"tlsRequireTrustedClientCertOnConnect": "true", "authenticationEnabled": "true",
                    "authenticationProviders":
                        "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"}

    def test_client_certificate_role(self):
        """AuthenticationTLS: the handshake checks the certificate, the role is its CN."""
        p = pki()
        client = self.new_client(self.tls_url, tls_trust_certs_file_path=p["ca"].ca_cert,
                                 authentication=pulsar.AuthenticationTLS(p["client"].cert, p["client"].key))
        self.round_trip(client)
        self.assertIn("authenticated as client-a (tls)", self.standalone.log_text())

    def test_missing_or_untrusted_client_certificate_fails(self):
        p = pki()
        for auth in (None, pulsar.AuthenticationTLS(p["rogue"].cert, p["rogue"].key)):
            options = {"authentication": auth} if auth else {"authentication": pulsar.AuthenticationToken("x")}
            client = self.new_client(self.tls_url, tls_trust_certs_file_path=p["ca"].ca_cert, **options)
            # The broker aborts the TLS handshake; the C++ client retries the connection until
            # its operation timeout, as against Pulsar: a Timeout, and nobody authenticated.
            with self.assertRaises(pulsar.Timeout):
                client.create_producer(self.topic())
        self.assertNotIn("authenticated as rogue", self.standalone.log_text())

    def test_https_admin_with_client_certificate(self):
        p = pki()
        context = ssl.create_default_context(cafile=p["ca"].ca_cert)
        context.load_cert_chain(p["client"].cert, p["client"].key)
        status, _ = self.http("GET", "/admin/v2/clusters", https=True, context=context)
        self.assertEqual(status, 200)
        bare = ssl.create_default_context(cafile=p["ca"].ca_cert)
        with self.assertRaises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            self.http("GET", "/admin/v2/clusters", https=True, context=bare)


def _users_file():
    path = os.path.join(_DIR, "users.htpasswd")
    with open(path, "w") as f:
        f.write("basic-user:" + bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$") + "\n")
    return path


class TokenAndBasicTests(SecureCase):
    needs_auth = True
    extra_config = {"authenticationEnabled": "true", "authorizationEnabled": "true",
                    "superUserRoles": "admin",
                    "authenticationProviders":
                        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
                        "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
                    "tokenSecretKey": SECRET_SPEC, "basicAuthConf": _users_file(),
                    "authenticationRefreshCheckSeconds": 1}

    def client_as(self, role, **kw):
        return self.new_client(authentication=pulsar.AuthenticationToken(token(role, **kw)))

    def admin_headers(self, role="admin"):
        return {"Authorization": f"Bearer {token(role)}"}

    def test_token_accepted(self):
        self.round_trip(self.client_as("admin"))

    def test_expired_and_forged_tokens_refused(self):
        """Expired or wrongly signed tokens: AuthenticationError, and the broker logs no token."""
        for bad in (token("admin", exp_in=-60), token("admin", key=b"z" * 32)):
            client = self.new_client(authentication=pulsar.AuthenticationToken(bad),
                                     operation_timeout_seconds=3)
            with self.assertRaises(REFUSED):
                client.create_producer(self.topic())
            self.assertNotIn(bad, self.standalone.log_text())
        log = self.standalone.log_text()
        self.assertIn("authentication refused: Failed to authenticate token: token expired", log)
        self.assertIn("authentication refused: Failed to authenticate token: token signature does not verify", log)

    def test_basic(self):
        """AuthenticationBasic against a bcrypt ($2y$) htpasswd file; a wrong password is refused."""
        status, _ = self.http("POST", "/admin/v2/namespaces/public/default/permissions/basic-user",
                              ["produce", "consume"], self.admin_headers())
        self.assertEqual(status, 204)
        good = self.new_client(authentication=pulsar.AuthenticationBasic("basic-user", "s3cret"))
        self.round_trip(good)
        bad = self.new_client(authentication=pulsar.AuthenticationBasic("basic-user", "wrong"),
                              operation_timeout_seconds=3)
        with self.assertRaises(REFUSED):
            bad.create_producer(self.topic())
        self.assertIn("authentication refused", self.standalone.log_text()[self._log_offset:])

    def test_http_authentication(self):
        """No or bad credentials: 401; a non-admin role: 403; the super user (Bearer or Basic): 200."""
        self.assertEqual(self.http("GET", "/admin/v2/tenants")[0], 401)
        self.assertEqual(self.http("GET", "/admin/v2/tenants",
                                   headers={"Authorization": "Bearer nonsense"})[0], 401)
        self.assertEqual(self.http("GET", "/admin/v2/tenants", headers=self.admin_headers("joe"))[0], 403)
        self.assertEqual(self.http("GET", "/admin/v2/tenants", headers=self.admin_headers())[0], 200)
        basic = base64.b64encode(b"basic-user:s3cret").decode()
        self.assertEqual(self.http("GET", "/metrics", headers={"Authorization": f"Basic {basic}"})[0], 200)

    def test_permissions(self):
        """Grants through the admin API decide PRODUCER and SUBSCRIBE; revokes take them back."""
        topic = self.topic(domain="persistent")
        writer = self.client_as("writer")
        with self.assertRaises(pulsar.AuthorizationError):
            writer.create_producer(topic)
        local = topic.split("/")[-1]
        base = f"/admin/v2/persistent/public/default/{local}/permissions"
        self.assertEqual(self.http("POST", f"{base}/writer", ["produce"], self.admin_headers())[0], 204)
        status, body = self.http("GET", base, headers=self.admin_headers())
        self.assertEqual(json.loads(body), {"writer": ["produce"]})
        producer = writer.create_producer(topic)
        producer.send(b"one")
        reader = self.client_as("reader")
        with self.assertRaises(pulsar.AuthorizationError):
            reader.subscribe(topic, "sub")
        self.assertEqual(self.http("POST", "/admin/v2/namespaces/public/default/permissions/reader",
                                   ["consume"], self.admin_headers())[0], 204)
        consumer = reader.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        self.assertEqual(self.receive(consumer).data(), b"one")
        self.assertEqual(self.http("DELETE", f"{base}/writer", headers=self.admin_headers())[0], 204)
        with self.assertRaises(pulsar.AuthorizationError):
            self.client_as("writer").create_producer(topic)

    def test_tenant_admins(self):
        """A tenant's admin manages its namespaces over HTTP; other roles get 403."""
        status, _ = self.http("PUT", "/admin/v2/tenants/acme",
                              {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]},
                              self.admin_headers())
        self.assertEqual(status, 204)
        self.assertEqual(self.http("PUT", "/admin/v2/namespaces/acme/ns1", None,
                                   self.admin_headers("acme-admin"))[0], 204)
        self.assertEqual(self.http("GET", "/admin/v2/namespaces/acme", headers=self.admin_headers("acme-admin"))[0], 200)
        self.assertEqual(self.http("PUT", "/admin/v2/namespaces/acme/ns2", None, self.admin_headers("joe"))[0], 403)
        self.assertEqual(self.http("PUT", "/admin/v2/tenants/other", {"allowedClusters": ["standalone"]},
                                   self.admin_headers("acme-admin"))[0], 403)

    def test_token_refresh(self):
        """Tokens valid 2 s, checked every second: the client answers each AUTH_CHALLENGE with a fresh
        token from its supplier and stays connected across several expiries."""
        calls = []

        def supplier():
            calls.append(1)
            return token("admin", exp_in=2)

        client = self.new_client(authentication=pulsar.AuthenticationToken(supplier))
        topic = self.topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"before")
        time.sleep(5)
        producer.send(b"after")
        self.assertEqual([self.receive(consumer).data() for _ in range(2)], [b"before", b"after"])
        log = self.standalone.log_text()
        self.assertIn("sending AUTH_CHALLENGE", log)
        self.assertIn("credentials of admin refreshed", log)
        self.assertGreater(len(calls), 2)


class OurClientTests(twisted_unittest.TestCase):
    """
    Our own client (pulsar_twisted.client, Deferred API on trial's reactor: the blocking facade
    would run the global reactor in a thread) over TLS with token authentication and refresh.
    """

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def setUp(self):
        self.tls_port = free_port()
        self.standalone = StandaloneProcess({
            "brokerServicePortTls": self.tls_port, "tlsCertificateFilePath": pki()["server"].cert,
            "tlsKeyFilePath": pki()["server"].key, "authenticationEnabled": "true",
            "authenticationProviders": "token", "tokenSecretKey": SECRET_SPEC,
            "authenticationRefreshCheckSeconds": 1})
        self.addCleanup(self.standalone.cleanup)
        self.standalone.start()

    @defer.inlineCallbacks
    def test_tls_token_and_refresh(self):
        from twisted.internet import reactor, task
        from pulsar_twisted.client.auth import AuthenticationToken
        from pulsar_twisted.client.client import Client
        client = Client(f"pulsar+ssl://127.0.0.1:{self.tls_port}", reactor=reactor,
                        operation_timeout_seconds=10, tls_trust_certs_file_path=pki()["ca"].ca_cert,
                        tls_validate_hostname=True,
                        authentication=AuthenticationToken(lambda: token("ours", exp_in=2)))
        self.addCleanup(client.close)
        topic = f"ours-{os.urandom(4).hex()}"
        consumer = yield client.subscribe(topic, "s")
        producer = yield client.create_producer(topic)
        yield producer.send(b"a")
        yield task.deferLater(reactor, 4, lambda: None)
        yield producer.send(b"b")
        first = yield consumer.receive(5)
        second = yield consumer.receive(5)
        self.assertEqual([first.data(), second.data()], [b"a", b"b"])
        self.assertIn("credentials of ours refreshed", self.standalone.log_text())


class PublicKeyTokenTests(SecureCase):
    """tokenPublicKey with RS256 (Pulsar's default tokenPublicAlg)."""

    needs_auth = True
    alg = "RS256"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    extra_config = {"authenticationEnabled": "true", "authenticationProviders": "token",
                    "tokenPublicAlg": "RS256",
                    "tokenPublicKey": "data:;base64," + base64.b64encode(key.public_key().public_bytes(
                        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()}

    def test_key_pair_token(self):
        good = self.new_client(authentication=pulsar.AuthenticationToken(
            token("svc", key=self.key, alg=self.alg)))
        self.round_trip(good)
        other = ec.generate_private_key(ec.SECP256R1()) if self.alg.startswith("ES") else \
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
        bad = self.new_client(authentication=pulsar.AuthenticationToken(token("svc", key=other, alg=self.alg)),
                              operation_timeout_seconds=3)
        with self.assertRaises(REFUSED):
            bad.create_producer(self.topic())
        self.assertIn("authentication refused", self.standalone.log_text()[self._log_offset:])


class EcPublicKeyTokenTests(PublicKeyTokenTests):
    alg = "ES256"
    key = ec.generate_private_key(ec.SECP256R1())
    extra_config = dict(PublicKeyTokenTests.extra_config, tokenPublicAlg="ES256",
                        tokenPublicKey="data:;base64," + base64.b64encode(key.public_key().public_bytes(
                            serialization.Encoding.DER,
                            serialization.PublicFormat.SubjectPublicKeyInfo)).decode())
