"""
Authentication: who a client is.

``IAuthenticationProvider`` is one way of proving a role (Pulsar's ``AuthenticationProvider``):
``auth_method_name`` is the name clients send in CONNECT (``token``, ``basic``, ``tls``) and
``authenticate(credentials)`` returns an ``Identity`` (role, and when the proof expires) or raises
``AuthenticationError`` with a reason meant for the client and the log. Credentials never appear in
a reason or a log line.

``AuthenticationService`` holds the providers that ``authenticationProviders`` names (Pulsar's
class names or our short names) and answers for the binary protocol (method + data + the TLS peer
certificate) and for HTTP (the ``Authorization`` header). It is built at start-up, so a provider
whose key or password file is unusable stops the broker with a ``ConfigError`` naming the key.

Providers:

* ``TokenAuthenticationProvider``: JWT signed with ``tokenSecretKey`` (HS*) or the private key of
  ``tokenPublicKey`` (RS*/PS*/ES*); the role is the ``tokenAuthClaim`` claim, expiry is ``exp``.
* ``BasicAuthenticationProvider``: ``user:password`` against an htpasswd-style file
  (``basicAuthConf``: bcrypt ``$2y$``/``$2b$``/``$2a$``, Apache ``$apr1$``, ``{SHA}``, crypt).
* ``TlsAuthenticationProvider``: the role is the CN of the client certificate the TLS handshake
  verified (so only meaningful on the TLS listeners).
"""

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Optional

from twisted.logger import Logger
from zope.interface import Attribute, Interface, implementer

from pulsar_twisted.common.errors import AuthenticationError
from pulsar_twisted.config import ConfigError
from pulsar_twisted.security import jwt


@dataclass(frozen=True)
class Credentials:
    """What a client presented: ``method`` and ``data`` as sent, and the verified TLS certificate."""

    method: str
    data: bytes = b""
    #: ``cryptography.x509.Certificate`` of the peer, when the TLS handshake had one.
    peer_certificate: object = None
    peer: str = ""

    def __repr__(self):
        # Keep credentials out of tracebacks and log lines that format this object.
        return f"Credentials(method={self.method!r}, data=<{len(self.data)} bytes>, peer={self.peer!r})"


@dataclass(frozen=True)
class Identity:
    """An authenticated role. ``expires_at`` (epoch seconds) when the proof stops being valid."""

    role: str
    method: str
    expires_at: Optional[float] = None


class IAuthenticationProvider(Interface):
    """One way of authenticating clients."""

    auth_method_name = Attribute("The method name clients send (token, basic, tls).")

    def authenticate(credentials):
        """The ``Identity`` proven by ``credentials``; ``AuthenticationError(reason)`` otherwise."""


# ------------------------------------------------------------------------------------ token
@implementer(IAuthenticationProvider)
class TokenAuthenticationProvider:
    """JWT tokens, as Pulsar's ``AuthenticationProviderToken``."""

    auth_method_name = "token"

    def __init__(self, config, clock):
        self.clock = clock
        self.role_claim = config.tokenAuthClaim or "sub"
        self.audience_claim = config.tokenAudienceClaim or "aud"
        self.audience = config.tokenAudience
        try:
            if config.tokenSecretKey:
                self.key = jwt.read_key_spec(config.tokenSecretKey)
            elif config.tokenPublicKey:
                self.key = jwt.load_public_key(jwt.read_key_spec(config.tokenPublicKey))
            else:
                raise ConfigError("tokenSecretKey or tokenPublicKey: the token provider needs a key")
            self.algorithms = jwt.algorithms_for_key(self.key)
        except jwt.KeyFormatError as e:
            raise ConfigError(f"{'tokenSecretKey' if config.tokenSecretKey else 'tokenPublicKey'}: {e}")
        if config.tokenPublicKey and not config.tokenSecretKey:
            alg = config.tokenPublicAlg
            if alg and alg not in self.algorithms:
                raise ConfigError(f"tokenPublicAlg: {alg} does not match the key of tokenPublicKey")
            if alg:
                self.algorithms = (alg,)

    def authenticate(self, credentials):
        token = credentials.data
        if isinstance(token, bytes):
            token = token.decode("ascii", "replace")
        if token.startswith("Bearer "):
            token = token[len("Bearer "):]
        if not token:
            raise AuthenticationError("No token provided")
        try:
            claims = jwt.decode(token, self.key, now=self.clock.seconds(), algorithms=self.algorithms)
        except jwt.InvalidToken as e:
            raise AuthenticationError(f"Failed to authenticate token: {e}")
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"Token has no role in claim {self.role_claim!r}")
        if self.audience:
            audience = claims.get(self.audience_claim)
            audiences = audience if isinstance(audience, list) else [audience]
            if self.audience not in audiences:
                raise AuthenticationError("Token audience does not match this broker")
        exp = claims.get("exp")
        return Identity(role, self.auth_method_name, float(exp) if exp is not None else None)


# ------------------------------------------------------------------------------------ basic
def apr1_hash(password: bytes, salt: bytes) -> str:
    """Apache's ``$apr1$`` MD5 crypt of ``password`` with ``salt`` (up to 8 characters)."""
    salt = salt[:8]
    magic = b"$apr1$"
    ctx = password + magic + salt
    final = hashlib.md5(password + salt + password).digest()
    for i in range(len(password), 0, -16):
        ctx += final[:min(16, i)]
    i = len(password)
    while i:
        ctx += b"\0" if i & 1 else password[:1]
        i >>= 1
    final = hashlib.md5(ctx).digest()
    for i in range(1000):
        step = (password if i & 1 else final)
        if i % 3:
            step += salt
        if i % 7:
            step += password
        step += final if i & 1 else password
        final = hashlib.md5(step).digest()
    itoa = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def to64(value, n):
        out = b""
        for _ in range(n):
            out += itoa[value & 0x3F:(value & 0x3F) + 1]
            value >>= 6
        return out

    f = final
    result = b""
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        result += to64((f[a] << 16) | (f[b] << 8) | f[c], 4)
    result += to64(f[11], 2)
    return (magic + salt + b"$" + result).decode("ascii")


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the htpasswd hash ``stored`` (constant-time comparisons)."""
    pw = password.encode("utf-8")
    if stored.startswith(("$2y$", "$2b$", "$2a$")):
        import bcrypt
        try:
            # bcrypt's library knows $2b$/$2a$; $2y$ (htpasswd -B) is the same algorithm.
            return bcrypt.checkpw(pw, ("$2b$" + stored[4:]).encode("ascii"))
        except ValueError:
            return False
    if stored.startswith("$apr1$"):
        salt = stored[len("$apr1$"):].split("$", 1)[0].encode("ascii")
        return hmac.compare_digest(apr1_hash(pw, salt), stored)
    if stored.startswith("{SHA}"):
        return hmac.compare_digest(base64.b64encode(hashlib.sha1(pw).digest()).decode(), stored[5:])
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
    except ImportError:  # Python 3.13 dropped it; crypt(3) hashes are then refused
        return False
    computed = crypt.crypt(password, stored)
    return computed is not None and hmac.compare_digest(computed, stored)


def parse_htpasswd(text: str) -> dict:
    """``{user: hash}`` from htpasswd lines (``#`` comments and blank lines ignored)."""
    users = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored:
            raise ValueError(f"line {number}: expected user:hash")
        users[user] = stored
    return users


@implementer(IAuthenticationProvider)
class BasicAuthenticationProvider:
    """``user:password`` against ``basicAuthConf``, as Pulsar's ``AuthenticationProviderBasic``."""

    auth_method_name = "basic"
    #: Successful checks remembered (bcrypt costs ~0.1 s of reactor time per check): a digest of
    #: user, password and stored hash, so a password change invalidates the entry.
    cache_size = 1024

    def __init__(self, config, clock):
        spec = config.basicAuthConf
        if not spec:
            raise ConfigError("basicAuthConf: the basic provider needs a password file")
        try:
            if os.path.exists(spec):
                with open(spec, encoding="utf-8") as f:
                    text = f.read()
            else:
                text = base64.b64decode(spec, validate=True).decode("utf-8")
            self.users = parse_htpasswd(text)
        except (OSError, binascii.Error, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"basicAuthConf: neither a readable file nor base64 of one ({e})")
        self._verified = {}

    def authenticate(self, credentials):
        try:
            text = credentials.data.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("Malformed basic credentials")
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthenticationError("Malformed basic credentials (expected user:password)")
        stored = self.users.get(user)
        if stored is None:
            raise AuthenticationError(f"Unknown user {user}")
        key = hashlib.sha256(f"{user}\0{password}\0{stored}".encode()).digest()
        if key not in self._verified:
            if not check_password(password, stored):
                raise AuthenticationError(f"Wrong password for user {user}")
            if len(self._verified) >= self.cache_size:
                self._verified.clear()
            self._verified[key] = True
        return Identity(user, self.auth_method_name)


# ------------------------------------------------------------------------------------ tls
def common_name(certificate) -> Optional[str]:
    """The CN of a ``cryptography`` certificate's subject, or None."""
    from cryptography.x509.oid import NameOID
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


@implementer(IAuthenticationProvider)
class TlsAuthenticationProvider:
    """The role is the CN of the verified client certificate (``AuthenticationProviderTls``)."""

    auth_method_name = "tls"

    def __init__(self, config, clock):
        self.clock = clock

    def authenticate(self, credentials):
        certificate = credentials.peer_certificate
        if certificate is None:
            raise AuthenticationError("No client certificate (TLS authentication needs the TLS port "
                                       "and a certificate signed by the broker's trusted CA)")
        role = common_name(certificate)
        if not role:
            raise AuthenticationError("Client certificate has no common name")
        expires = certificate.not_valid_after_utc.timestamp()
        return Identity(role, self.auth_method_name, expires)


# ------------------------------------------------------------------------------------ service
#: Pulsar's provider class names (and our short names) -> provider classes.
PROVIDERS = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": TokenAuthenticationProvider,
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": BasicAuthenticationProvider,
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": TlsAuthenticationProvider,
    "token": TokenAuthenticationProvider,
    "basic": BasicAuthenticationProvider,
    "tls": TlsAuthenticationProvider,
}


class AuthenticationService:
    """
    The configured providers by method name. ``enabled`` mirrors ``authenticationEnabled``; when
    off, ``authenticate`` is never consulted by the broker and every client has role None.
    """

    log = Logger()

    def __init__(self, config, clock):
        self.clock = clock
        self.enabled = config.authenticationEnabled
        self.anonymous_role = config.anonymousUserRole or None
        self.providers = {}
        for name in config.authenticationProviders:
            cls = PROVIDERS.get(name)
            if cls is None:
                raise ConfigError(f"authenticationProviders: unknown provider {name!r} "
                                  f"(known: {', '.join(sorted(PROVIDERS))})")
            provider = cls(config, clock)
            self.providers[provider.auth_method_name] = provider
        if self.enabled and not self.providers and not self.anonymous_role:
            raise ConfigError("authenticationProviders: authenticationEnabled needs at least one provider")

    def authenticate(self, credentials: Credentials) -> Identity:
        """
        The identity ``credentials`` prove; ``AuthenticationError`` with the reason otherwise.

        A method that names no configured provider (none sent, "none", or e.g. "basic" on a broker
        with only the token provider) gets ``anonymousUserRole`` when one is set, as Pulsar's
        ``ServerCnx.handleConnect`` does: the client is then connected and meets authorization
        errors, instead of retrying a refused CONNECT until its operation timeout. A configured
        provider that refuses the credentials is never bypassed.
        """
        method = credentials.method or ""
        provider = self.providers.get(method) if method != "none" else None
        if provider is None:
            return self._anonymous(method)
        return provider.authenticate(credentials)

    def _anonymous(self, method: str) -> Identity:
        if self.anonymous_role:
            return Identity(self.anonymous_role, "none")
        if method in ("", "none"):
            raise AuthenticationError("Authentication required (no credentials sent)")
        raise AuthenticationError(f"Unsupported authentication method: {method} "
                                  "(no anonymous role, and no provider for it)")

    def authenticate_http(self, authorization: Optional[bytes], peer_certificate=None,
                          peer: str = "", method_name: Optional[bytes] = None) -> Identity:
        """
        The identity of an HTTP request, as Pulsar's ``AuthenticationService.authenticateHttpRequest``:

        * ``method_name`` (the ``X-Pulsar-Auth-Method-Name`` header) picks one provider, which
          decides alone (an unknown name is refused);
        * otherwise ``Authorization: Bearer <token>`` or ``Basic <base64>`` for the provider of
          that scheme, else the TLS client certificate (HTTPS); when none of them proves a role
          the request gets ``anonymousUserRole`` if one is set (Pulsar tries every provider and
          falls back to the anonymous role), and is refused (401) if not.
        """
        if method_name:
            return self._http_by_method(method_name.decode("ascii", "replace").strip(),
                                        authorization, peer_certificate, peer)
        try:
            return self._http_by_header(authorization, peer_certificate, peer)
        except AuthenticationError:
            if self.anonymous_role:
                return Identity(self.anonymous_role, "none")
            raise

    def _http_by_method(self, method, authorization, peer_certificate, peer) -> Identity:
        if method not in self.providers:
            raise AuthenticationError(f"Unsupported authentication method: [{method}].")
        credentials = _http_credentials(authorization, peer_certificate, peer)
        if credentials is None or credentials.method != method:
            credentials = Credentials(method, b"", peer_certificate, peer)
        return self.providers[method].authenticate(credentials)

    def _http_by_header(self, authorization, peer_certificate, peer) -> Identity:
        """The header's provider, then the TLS certificate (Pulsar tries each provider in turn);
        the first refusal's reason when neither proves a role."""
        refusal = None
        credentials = _http_credentials(authorization, peer_certificate, peer)
        if credentials is not None:
            provider = self.providers.get(credentials.method)
            try:
                if provider is None:
                    raise AuthenticationError(f"Unsupported authentication method: {credentials.method}")
                return provider.authenticate(credentials)
            except AuthenticationError as e:
                refusal = e
        if peer_certificate is not None and "tls" in self.providers:
            try:
                return self.providers["tls"].authenticate(Credentials("tls", b"", peer_certificate, peer))
            except AuthenticationError as e:
                refusal = refusal or e
        raise refusal or AuthenticationError("Authentication required (no credentials sent)")


def _http_credentials(authorization, peer_certificate, peer) -> Optional[Credentials]:
    """The credentials of an ``Authorization`` header (None without one)."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(b" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == b"bearer":
        return Credentials("token", value, peer_certificate, peer)
    if scheme == b"basic":
        try:
            decoded = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise AuthenticationError("Malformed Basic authorization header")
        return Credentials("basic", decoded, peer_certificate, peer)
    raise AuthenticationError("Unsupported Authorization scheme")
