"""
Connections that a proxy opens on behalf of a client (Pulsar >= 3.0's rules for
``original_principal``), used by ``BrokerSecurity`` at CONNECT and at every authorization check.

A CONNECT may carry ``original_principal`` (the role the proxy authenticated its client as) and,
from a proxy with ``forwardAuthorizationCredentials``, ``original_auth_method`` /
``original_auth_data`` (the client's own credentials). The broker:

* accepts ``original_principal`` only from a role listed in ``proxyRoles``; a proxy role that
  sends none, a non-proxy role that sends one, and an original principal that is itself a proxy
  role are all refused with ``AuthorizationError("Invalid roles.")``, as Pulsar's
  ``AuthorizationService.isValidOriginalPrincipal`` does for the binary protocol;
* with ``authenticateOriginalAuthData``, authenticates the forwarded credentials and takes the
  original principal from them (a proxy cannot then name a client it has no proof for); the
  connection's refresh then tracks the *client's* credentials: when they expire the broker's
  AUTH_CHALLENGE travels through the proxy's relay to the client, whose AUTH_RESPONSE comes back
  the same way (Pulsar PR #19519 stores it as the original auth data);
* authorizes both roles: the proxy role and the original principal must each be allowed.

The proxy's own credentials are checked once, at CONNECT, and not refreshed on a proxied
connection: a challenge for them would reach the client, who cannot answer for the proxy (Pulsar
likewise refreshes only the original data when both are present, PIP-206). The proxy opens new
connections with fresh credentials instead.
"""

from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.security.auth import Credentials
from pulsar_twisted.security.endpoints import peer_certificate_of

log = Logger()

#: Pulsar's message for a refused role combination (ServerCnx answers AuthorizationError).
INVALID_ROLES = "Invalid roles."


def _refuse(cnx, role, original, reason: str):
    log.warn("{peer}: illegal combination of role {role} and originalPrincipal {original}: {reason}",
             peer=cnx.peer, role=role, original=original, reason=reason)
    raise errors.AuthorizationError(INVALID_ROLES)


def proxied_identity(security, cnx, connect, identity):
    """
    Check the ``original_principal`` of ``connect`` against ``identity`` (the role that
    authenticated), set ``cnx.original_principal``, and return the identity whose expiry the
    connection's refresh should follow: the forwarded client credentials when they were
    authenticated, ``identity`` for a direct client, or None (nothing to refresh) for a proxy
    whose client credentials are not checked here. ``AuthorizationError`` for a refused combination;
    ``AuthenticationError`` for forwarded credentials that do not authenticate.
    """
    proxy_roles = security.proxy_roles
    original = connect.original_principal if connect.HasField("original_principal") else ""
    role = identity.role
    if role not in proxy_roles:
        if original:
            _refuse(cnx, role, original, "only a proxy role may supply an originalPrincipal")
        cnx.original_principal = None
        return identity
    if not original:
        _refuse(cnx, role, original, "a proxy role must supply an originalPrincipal")
    if original in proxy_roles:
        _refuse(cnx, role, original, "the originalPrincipal cannot be a proxy role")
    tracked = None
    if security.authenticate_original and connect.HasField("original_auth_data"):
        credentials = Credentials(connect.original_auth_method, connect.original_auth_data.encode(),
                                  peer_certificate_of(cnx.transport), cnx.peer)
        tracked = security.authn.authenticate(credentials)
        if tracked.role != original:
            _refuse(cnx, role, original, f"the forwarded credentials are those of {tracked.role}")
    cnx.original_principal = original
    log.info("{peer}: proxy {role} connects on behalf of {original}", peer=cnx.peer, role=role,
             original=original)
    return tracked


def roles_to_authorize(cnx) -> list:
    """The roles that must all be allowed an operation on ``cnx``: its own, and the original
    principal a proxy connects for."""
    original = getattr(cnx, "original_principal", None)
    return [cnx.role] if not original else [cnx.role, original]
