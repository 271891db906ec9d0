"""Authentication providers, JWT codec and the authentication service (no sockets)."""

import base64
import datetime

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from twisted.internet import task
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.errors import AuthenticationError
from pulsar_twisted.config import ConfigError, StandaloneConfig
from pulsar_twisted.security import jwt
from pulsar_twisted.security.auth import (
    AuthenticationService, BasicAuthenticationProvider, Credentials, IAuthenticationProvider,
    TlsAuthenticationProvider, TokenAuthenticationProvider, apr1_hash, check_password)

SECRET = b"0123456789abcdef0123456789abcdef"
SECRET_SPEC = "data:;base64," + base64.b64encode(SECRET).decode()


def _der_public(key) -> str:
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return "data:;base64," + base64.b64encode(der).decode()


class JwtTests(unittest.TestCase):
    def test_round_trip_every_family(self):
        """HS256, RS256, PS256 and ES256 tokens verify with their key and carry their claims."""
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ec_key = ec.generate_private_key(ec.SECP256R1())
        for alg, key, check in (("HS256", SECRET, SECRET), ("RS256", rsa_key, rsa_key.public_key()),
                                ("PS256", rsa_key, rsa_key.public_key()),
                                ("ES256", ec_key, ec_key.public_key())):
            token = jwt.encode({"sub": "alice", "exp": 100}, key, alg)
            self.assertEqual(jwt.decode(token, check, now=50), {"sub": "alice", "exp": 100})

    def test_refusals(self):
        """Expired, not yet valid, tampered, wrong-key and alg-confused tokens are refused."""
        token = jwt.encode({"sub": "a", "exp": 100, "nbf": 10}, SECRET)
        self.assertRaises(jwt.InvalidToken, jwt.decode, token, SECRET, now=101)
        self.assertRaises(jwt.InvalidToken, jwt.decode, token, SECRET, now=5)
        self.assertRaises(jwt.InvalidToken, jwt.decode, token, b"another key", now=50)
        header, payload, sig = token.split(".")
        forged = jwt._b64url_encode(b'{"sub":"root","exp":100}')
        self.assertRaises(jwt.InvalidToken, jwt.decode, f"{header}.{forged}.{sig}", SECRET, now=50)
        none = jwt._b64url_encode(b'{"alg":"none"}')
        self.assertRaises(jwt.InvalidToken, jwt.decode, f"{none}.{payload}.", SECRET, now=50)
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        # An HS256 token "signed" with the public key's bytes must not pass an RSA check.
        pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
        confused = jwt.encode({"sub": "root"}, pem, "HS256")
        self.assertRaises(jwt.InvalidToken, jwt.decode, confused, rsa_key.public_key())
        for junk in ("", "a.b", "a.b.c", "...", "x" * 20000, b"\xff.\xfe.\xfd"):
            self.assertRaises(jwt.InvalidToken, jwt.decode, junk, SECRET)

    def test_key_specs_and_durations(self):
        self.assertEqual(jwt.read_key_spec(SECRET_SPEC), SECRET)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(SECRET)
        self.assertEqual(jwt.read_key_spec(f"file://{path}"), SECRET)
        self.assertRaises(jwt.KeyFormatError, jwt.read_key_spec, "file:///does/not/exist")
        self.assertEqual([jwt.parse_duration(t) for t in ("30", "30s", "2m", "1h", "1d", "1w", "1y")],
                         [30, 30, 120, 3600, 86400, 604800, 31536000])
        self.assertRaises(ValueError, jwt.parse_duration, "soon")


class ProviderTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1000)

    def test_token_provider_secret(self):
        """The role is the sub claim; exp becomes the identity's expiry; bad tokens say why."""
        provider = TokenAuthenticationProvider(StandaloneConfig(tokenSecretKey=SECRET_SPEC), self.clock)
        verifyObject(IAuthenticationProvider, provider)
        identity = provider.authenticate(Credentials("token", jwt.encode({"sub": "alice", "exp": 2000}, SECRET).encode()))
        self.assertEqual((identity.role, identity.expires_at), ("alice", 2000.0))
        expired = jwt.encode({"sub": "alice", "exp": 999}, SECRET).encode()
        e = self.assertRaises(AuthenticationError, provider.authenticate, Credentials("token", expired))
        self.assertIn("expired", str(e))
        self.assertNotIn(expired.decode(), str(e))
        self.assertRaises(AuthenticationError, provider.authenticate,
                          Credentials("token", jwt.encode({"sub": "a"}, b"wrong").encode()))
        self.assertRaises(AuthenticationError, provider.authenticate,
                          Credentials("token", jwt.encode({"role": "a"}, SECRET).encode()))

    def test_token_provider_public_keys(self):
        """RS256 and ES256 tokens verify against tokenPublicKey with tokenPublicAlg."""
        for alg, key in (("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
                         ("ES256", ec.generate_private_key(ec.SECP256R1()))):
            config = StandaloneConfig(tokenPublicKey=_der_public(key), tokenPublicAlg=alg)
            provider = TokenAuthenticationProvider(config, self.clock)
            self.assertEqual(provider.authenticate(
                Credentials("token", jwt.encode({"sub": "bob"}, key, alg).encode())).role, "bob")
            other = ec.generate_private_key(ec.SECP256R1()) if alg == "ES256" else \
                rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.assertRaises(AuthenticationError, provider.authenticate,
                              Credentials("token", jwt.encode({"sub": "bob"}, other, alg).encode()))

    def test_token_audience_and_claim(self):
        config = StandaloneConfig(tokenSecretKey=SECRET_SPEC, tokenAuthClaim="role", tokenAudience="pulsar")
        provider = TokenAuthenticationProvider(config, self.clock)
        ok = jwt.encode({"role": "r1", "aud": ["x", "pulsar"]}, SECRET).encode()
        self.assertEqual(provider.authenticate(Credentials("token", ok)).role, "r1")
        self.assertRaises(AuthenticationError, provider.authenticate,
                          Credentials("token", jwt.encode({"role": "r1", "aud": "x"}, SECRET).encode()))

    def test_basic_hashes(self):
        """bcrypt ($2y$ too), $apr1$, {SHA} and crypt entries are all checked."""
        bc = bcrypt.hashpw(b"pw1", bcrypt.gensalt(rounds=4)).decode()
        lines = [f"alice:{'$2y$' + bc[4:]}", f"bob:{apr1_hash(b'pw2', b'saltsalt')}",
                 "carol:{SHA}" + base64.b64encode(__import__("hashlib").sha1(b"pw3").digest()).decode()]
        spec = base64.b64encode("\n".join(lines).encode()).decode()
        provider = BasicAuthenticationProvider(StandaloneConfig(basicAuthConf=spec), self.clock)
        for user, pw in (("alice", "pw1"), ("bob", "pw2"), ("carol", "pw3")):
            self.assertEqual(provider.authenticate(Credentials("basic", f"{user}:{pw}".encode())).role, user)
            e = self.assertRaises(AuthenticationError, provider.authenticate,
                                  Credentials("basic", f"{user}:nope".encode()))
            self.assertNotIn("nope", str(e))
        for junk in (b"", b"nocolon", b"\xff\xfe", b"dave:pw"):
            self.assertRaises(AuthenticationError, provider.authenticate, Credentials("basic", junk))
        self.assertTrue(check_password("pw2", apr1_hash(b"pw2", b"ab")))

    def test_basic_file(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("# users\n\nu:" + apr1_hash(b"p", b"s1") + "\n")
        provider = BasicAuthenticationProvider(StandaloneConfig(basicAuthConf=path), self.clock)
        self.assertEqual(provider.authenticate(Credentials("basic", b"u:p")).role, "u")
        self.assertRaises(ConfigError, BasicAuthenticationProvider,
                          StandaloneConfig(basicAuthConf="!!not base64!!"), self.clock)

    def test_tls_provider(self):
        """The role is the CN of the peer certificate; no certificate, no role."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "svc-a")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, __import__("cryptography.hazmat.primitives.hashes", fromlist=["SHA256"]).SHA256()))
        provider = TlsAuthenticationProvider(StandaloneConfig(), self.clock)
        self.assertEqual(provider.authenticate(Credentials("tls", b"", cert)).role, "svc-a")
        self.assertRaises(AuthenticationError, provider.authenticate, Credentials("tls"))


class ServiceTests(unittest.TestCase):
    def service(self, **config):
        return AuthenticationService(StandaloneConfig(authenticationEnabled=True, **config), task.Clock())

    def test_pulsar_class_names(self):
        """Pulsar's provider class names map to ours; an unknown one is a ConfigError."""
        service = self.service(tokenSecretKey=SECRET_SPEC, authenticationProviders=[
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
            "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"])
        self.assertEqual(sorted(service.providers), ["tls", "token"])
        e = self.assertRaises(ConfigError, self.service, authenticationProviders=["com.example.Nope"])
        self.assertIn("authenticationProviders", str(e))
        self.assertRaises(ConfigError, self.service, authenticationProviders=["token"])  # no key

    def test_methods_and_anonymous(self):
        service = self.service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"])
        self.assertRaises(AuthenticationError, service.authenticate, Credentials(""))
        self.assertRaises(AuthenticationError, service.authenticate, Credentials("basic", b"a:b"))
        anon = self.service(anonymousUserRole="guest", authenticationProviders=[])
        self.assertEqual(anon.authenticate(Credentials("")).role, "guest")

    def test_http_headers(self):
        users = base64.b64encode(b"u:" + apr1_hash(b"p", b"x").encode()).decode()
        service = self.service(tokenSecretKey=SECRET_SPEC, basicAuthConf=users,
                               authenticationProviders=["token", "basic"])
        token = jwt.encode({"sub": "t"}, SECRET).encode()
        self.assertEqual(service.authenticate_http(b"Bearer " + token).role, "t")
        self.assertEqual(service.authenticate_http(b"Basic " + base64.b64encode(b"u:p")).role, "u")
        for bad in (None, b"", b"Basic !!", b"Digest x", b"Bearer junk", b"Basic " + base64.b64encode(b"u:q")):
            self.assertRaises(AuthenticationError, service.authenticate_http, bad)
