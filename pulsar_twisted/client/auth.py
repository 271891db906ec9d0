"""
Authentication plugins of our client, named as the official client's: ``AuthenticationToken``
(a token, or a callable returning the current one: it is called again on each AUTH_CHALLENGE, so
a refreshing supplier keeps long-lived connections alive) and ``AuthenticationBasic``.

A plugin is any object with ``auth_method_name`` and ``auth_data() -> bytes`` (what
``ClientConnection`` sends in CONNECT and AUTH_RESPONSE). TLS client certificates
(``AuthenticationTLS``) need the connection's TLS options and are not offered here yet.
"""


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
