"""
Authentication plugins of our client, named as the official client's: ``AuthenticationToken``
(a token, or a callable returning the current one: it is called again on each AUTH_CHALLENGE, so
a refreshing supplier keeps long-lived connections alive) and ``AuthenticationBasic``.

A plugin is any object with ``auth_method_name`` and ``auth_data() -> bytes`` (what
``ClientConnection`` sends in CONNECT and AUTH_RESPONSE; None sends no auth data). A plugin that
also has ``client_certificate()`` (``AuthenticationTLS``) gives the TLS options of
``pulsar+ssl://`` connections the certificate the client presents.
"""

import json

from pulsar_twisted.client import errors

#: The plugin names a Pulsar config may give (``brokerClientAuthenticationPlugin`` and the like).
TOKEN_PLUGINS = {"org.apache.pulsar.client.impl.auth.AuthenticationToken", "token"}
BASIC_PLUGINS = {"org.apache.pulsar.client.impl.auth.AuthenticationBasic", "basic"}


class AuthenticationToken:
    """``token``: a JWT string, or a callable returning one."""

    auth_method_name = "token"

    def __init__(self, token):
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode() if isinstance(token, str) else bytes(token)

    def __repr__(self):
        return "AuthenticationToken(<hidden>)"


class AuthenticationBasic:
    """``username`` and ``password`` (the broker's basic provider)."""

    auth_method_name = "basic"

    def __init__(self, username: str, password: str):
        self._data = f"{username}:{password}".encode()

    def auth_data(self) -> bytes:
        return self._data

    def __repr__(self):
        return "AuthenticationBasic(<hidden>)"


class AuthenticationTLS:
    """
    A TLS client certificate: ``cert_file_path`` (PEM, the leaf first, then any intermediates)
    and ``key_file_path`` (its PEM private key). The broker's TLS provider takes the role from the
    certificate's CN; CONNECT carries only the method name "tls" and no data, as the Java and C++
    clients send it. Only meaningful on ``pulsar+ssl://`` URLs.
    """

    auth_method_name = "tls"

    def __init__(self, cert_file_path: str, key_file_path: str):
        self.cert_file_path = cert_file_path
        self.key_file_path = key_file_path

    def auth_data(self):
        return None

    def client_certificate(self):
        """
        ``(PrivateCertificate, [intermediate Certificate, ...])`` read from the files;
        ``InvalidConfiguration`` naming the file when one is missing or not PEM of a key/cert.
        """
        from twisted.internet import ssl
        pems = []
        for path in (self.cert_file_path, self.key_file_path):
            try:
                with open(path, "rb") as f:
                    pems.append(f.read())
            except OSError as e:
                raise errors.InvalidConfiguration(
                    f"cannot read TLS client certificate file {path!r}: {e.strerror}") from None
        cert_pem, key_pem = pems
        marker = b"-----END CERTIFICATE-----"
        blocks = [b + marker for b in cert_pem.split(marker) if b"-----BEGIN CERTIFICATE" in b]
        if not blocks:
            raise errors.InvalidConfiguration(
                f"no PEM certificate in {self.cert_file_path!r}")
        try:
            leaf = ssl.PrivateCertificate.loadPEM(blocks[0] + b"\n" + key_pem)
            chain = [ssl.Certificate.loadPEM(block) for block in blocks[1:]]
        except Exception as e:
            raise errors.InvalidConfiguration(
                f"bad TLS client certificate or key ({self.cert_file_path!r}, "
                f"{self.key_file_path!r}): {e}") from None
        return leaf, chain

    def __repr__(self):
        return f"AuthenticationTLS({self.cert_file_path!r}, <key>)"


def _read_file_url(url: str) -> str:
    with open(url[len("file://"):], encoding="utf-8") as f:
        return f.read().strip()


def from_plugin(plugin: str, params: str):
    """The plugin a Pulsar config names (``brokerClientAuthenticationPlugin`` and its
    ``...Parameters``), or None when ``plugin`` is empty; ValueError saying what is wrong.
    Tokens: ``token:<jwt>``, ``file:///path`` (read at each use, so a rotated file is picked up
    by the next connection), a bare JWT or ``{"token": ...}``; basic: ``{"userId", "password"}``."""
    if not plugin:
        return None
    if plugin in TOKEN_PLUGINS:
        text = (params or "").strip()
        if text.startswith("{"):
            text = json.loads(text).get("token", "")
        if text.startswith("token:"):
            return AuthenticationToken(text[len("token:"):])
        if text.startswith("file://"):
            return AuthenticationToken(lambda: _read_file_url(text))
        if text:
            return AuthenticationToken(text)
        raise ValueError("the token plugin needs token:<jwt> or file:///path")
    if plugin in BASIC_PLUGINS:
        try:
            values = json.loads(params)
            return AuthenticationBasic(values["userId"], values["password"])
        except (ValueError, KeyError, TypeError):
            raise ValueError('the basic plugin needs {"userId": ..., "password": ...}')
    raise ValueError(f"unsupported plugin {plugin!r} (AuthenticationToken or AuthenticationBasic)")


def broker_client_authentication(config):
    """The credentials a daemon uses as a client of brokers (a proxy towards them, a broker's
    geo-replicators towards other clusters): ``from_plugin`` of ``brokerClientAuthenticationPlugin``
    and ``...Parameters``, or None; ConfigError naming the keys for values it cannot use."""
    from pulsar_twisted.config import ConfigError
    try:
        return from_plugin(config.brokerClientAuthenticationPlugin,
                           config.brokerClientAuthenticationParameters)
    except ValueError as e:
        raise ConfigError(f"brokerClientAuthenticationPlugin/Parameters: {e}")
