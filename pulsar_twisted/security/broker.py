"""
The broker's security decisions for its binary-protocol connections, in one object that
``BrokerService`` holds (``broker.security``) and ``ServerConnection`` reaches through it:

* ``admit(host)``: ``brokerMaxConnections`` / ``brokerMaxConnectionsPerIp`` (the factory refuses
  the connection before any byte is read, as Pulsar's ConnectionController closes the channel);
* ``authenticate(cnx, connect)``: the role of a CONNECT, and an ``AuthSession`` that keeps it
  fresh: every ``authenticationRefreshCheckSeconds`` an expired proof gets an AUTH_CHALLENGE, and a
  connection that has not answered with a valid one by the next check is closed;
* ``authorize_command(cnx, type, topic=/namespace=)``: authorization of a command by the rule
  ``policy_table.BINARY_RULES`` gives it (``check_topic(cnx, topic, action)`` for PRODUCER,
  SUBSCRIBE and LOOKUP);
* ``lookup_started()`` / ``lookup_finished()``: ``maxConcurrentLookupRequest``.

Nothing here runs per message. Credentials are never logged: log lines carry the peer, the
method and the reason.
"""

import collections

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import InvalidTopicNameError, NamespaceName, parse_topic
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.security.auth import AuthenticationService, Credentials
from pulsar_twisted.security.authz import AuthorizationService
from pulsar_twisted.security.endpoints import peer_certificate_of
from pulsar_twisted.security.proxied import proxied_identity, roles_to_authorize
from pulsar_twisted.security.policy_table import BINARY_RULES, enforce

_COMMAND_OF_ACTION = {"lookup": api.BaseCommand.LOOKUP, "produce": api.BaseCommand.PRODUCER,
                      "consume": api.BaseCommand.SUBSCRIBE}

#: The challenge data Pulsar sends when it asks for fresh credentials (AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"


def host_of(cnx) -> str:
    """The client address of ``cnx`` without its port (what per-client limits count by)."""
    peer = cnx.transport.getPeer()
    return getattr(peer, "host", str(peer))


class AuthSession:
    """The authentication of one connection over its lifetime (refresh of expiring credentials)."""

    log = Logger()

    def __init__(self, cnx, security, identity, supports_refresh: bool):
        self.cnx = cnx
        self.security = security
        self.identity = identity
        self.supports_refresh = supports_refresh
        self.challenged_at = None
        self._call = None

    def start(self) -> None:
        if self.identity.expires_at is not None:
            self._schedule()

    def _schedule(self) -> None:
        self._call = self.security.clock.callLater(self.security.refresh_seconds, self.check)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def check(self) -> None:
        """One refresh check (Pulsar's ServerCnx.refreshAuthenticationCredentials)."""
        self._call = None
        cnx = self.cnx
        if cnx.state == "closed":
            return
        if self.challenged_at is not None:
            self.log.warn("{peer}: role {role} did not answer the authentication challenge; closing",
                          peer=cnx.peer, role=self.identity.role)
            cnx.transport.loseConnection()
            return
        expires_at = self.identity.expires_at
        if expires_at is not None and self.security.clock.seconds() >= expires_at:
            if not self.supports_refresh:
                self.log.info("{peer}: credentials of {role} expired and the client cannot refresh "
                              "them; closing", peer=cnx.peer, role=self.identity.role)
                cnx.transport.loseConnection()
                return
            self.log.info("{peer}: credentials of {role} expired; sending AUTH_CHALLENGE",
                          peer=cnx.peer, role=self.identity.role)
            self.challenged_at = self.security.clock.seconds()
            cnx.sender.send_auth_challenge(self.identity.method, REFRESH_AUTH_DATA,
                                           cnx.protocol_version)
        if self.identity.expires_at is not None:
            self._schedule()

    def answer(self, response) -> None:
        """An AUTH_RESPONSE: fresh credentials for the same role, or the connection closes."""
        cnx = self.cnx
        data = response.response
        credentials = Credentials(data.auth_method_name, data.auth_data,
                                  peer_certificate_of(cnx.transport), cnx.peer, host_of(cnx))
        d = self.security.authn.authenticate_deferred(credentials)
        d.addCallbacks(self._refreshed, self._refresh_refused, callbackArgs=(response,))

    def refreshed(self, response) -> None:
        """Hook: ``response`` (an AUTH_RESPONSE) refreshed the credentials (the proxy's session
        remembers them). The check may finish after ``answer`` returned (bcrypt off the reactor)."""

    def _refreshed(self, identity, response) -> None:
        cnx = self.cnx
        if cnx.state == "closed":
            return
        if identity.role != self.identity.role:
            self._refresh_refused(Failure(errors.AuthenticationError(
                f"Refreshed credentials name role {identity.role}, not {self.identity.role}")))
            return
        self.log.info("{peer}: credentials of {role} refreshed", peer=cnx.peer, role=identity.role)
        self.identity = identity
        self.challenged_at = None
        if self._call is None and identity.expires_at is not None:
            self._schedule()
        self.refreshed(response)

    def _refresh_refused(self, failure) -> None:
        cnx = self.cnx
        if not failure.check(errors.AuthenticationError):
            self.log.failure("{peer}: authentication refresh failed", failure, peer=cnx.peer)
        reason = str(failure.value) or failure.type.__name__
        if cnx.state == "closed":
            return
        self.log.warn("{peer}: authentication refresh refused: {reason}", peer=cnx.peer, reason=reason)
        cnx.sender.send_error(0, api.AuthenticationError, reason)
        cnx.transport.loseConnection()


class BrokerSecurity:
    """Authentication, authorization and connection limits of one broker."""

    log = Logger()

    def __init__(self, config, clock, store):
        self.clock = clock
        self.authn = AuthenticationService(config, clock)
        self.authz = AuthorizationService(config, store)
        self.refresh_seconds = max(1, config.authenticationRefreshCheckSeconds)
        self.max_connections = config.brokerMaxConnections
        self.max_connections_per_ip = config.brokerMaxConnectionsPerIp
        self.max_lookups = config.maxConcurrentLookupRequest
        self.proxy_roles = frozenset(config.proxyRoles)
        self.authenticate_original = config.authenticateOriginalAuthData
        #: /metrics: public unless authenticateMetricsEndpoint; then super users and metricsRoles.
        self.authenticate_metrics = config.authenticateMetricsEndpoint
        self.metrics_roles = frozenset(config.metricsRoles)
        self.pending_lookups = 0
        self.connections_by_ip = collections.Counter()
        self.connection_count = 0
        self.sessions = {}

    # ---------------------------------------------------------------- connection limits
    def admit(self, host: str) -> bool:
        """Whether a new connection from ``host`` fits the limits (logged when it does not)."""
        if self.max_connections and self.connection_count >= self.max_connections:
            self.log.warn("refusing connection from {host}: brokerMaxConnections ({limit}) reached",
                          host=host, limit=self.max_connections)
            return False
        if self.max_connections_per_ip and self.connections_by_ip[host] >= self.max_connections_per_ip:
            self.log.warn("refusing connection from {host}: brokerMaxConnectionsPerIp ({limit}) reached",
                          host=host, limit=self.max_connections_per_ip)
            return False
        return True

    _host = staticmethod(host_of)

    def connection_opened(self, cnx) -> None:
        self.connection_count += 1
        self.connections_by_ip[self._host(cnx)] += 1

    def connection_closed(self, cnx) -> None:
        self.connection_count -= 1
        host = self._host(cnx)
        self.connections_by_ip[host] -= 1
        if self.connections_by_ip[host] <= 0:
            del self.connections_by_ip[host]
        session = self.sessions.pop(cnx, None)
        if session is not None:
            session.stop()

    # ---------------------------------------------------------------- authentication
    def authenticate(self, cnx, connect) -> defer.Deferred:
        """
        Deferred role of a CONNECT (None with authentication off); fails with
        AuthenticationError. Costly checks (bcrypt) run off the reactor thread, within the
        per-address and broker-wide caps of the provider's ``PasswordChecker``.
        """
        if not self.authn.enabled:
            return defer.succeed(None)
        credentials = Credentials(connect.auth_method_name, connect.auth_data,
                                  peer_certificate_of(cnx.transport), cnx.peer, self._host(cnx))
        d = self.authn.authenticate_deferred(credentials)
        return d.addCallback(self._authenticated, cnx, connect)

    def _authenticated(self, identity, cnx, connect):
        self.log.info("{peer}: authenticated as {role} ({method})", peer=cnx.peer,
                      role=identity.role, method=identity.method)
        if cnx.state == "closed":
            return identity.role    # gone while checking: no session to keep fresh
        # A proxy's connection: the roles checked and which credentials are kept fresh (proxied.py).
        tracked = proxied_identity(self, cnx, connect, identity)
        old = self.sessions.pop(cnx, None)
        if old is not None:
            old.stop()
        if tracked is not None:
            session = AuthSession(cnx, self, tracked, connect.feature_flags.supports_auth_refresh)
            self.sessions[cnx] = session
            session.start()
        return identity.role

    def auth_response(self, cnx, response) -> None:
        """An AUTH_RESPONSE from ``cnx``."""
        session = self.sessions.get(cnx)
        if session is None:
            self.log.info("{peer}: unexpected AUTH_RESPONSE ignored", peer=cnx.peer)
            return
        session.answer(response)

    # ---------------------------------------------------------------- authorization
    def authorize_command(self, cnx, command_type: int, topic: str = None,
                          namespace: str = None) -> defer.Deferred:
        """
        Deferred failing with AuthorizationError unless the role of ``cnx`` passes the rule
        ``policy_table.BINARY_RULES`` gives ``command_type``, for ``topic`` (a full name) or
        ``namespace`` (``tenant/ns``); InvalidTopicName for a name that does not parse. A command
        with no rule is refused. With authorization off it has already fired (no coroutine: every
        lookup, partitioned-metadata request and producer asks, issue 14 item 4).
        """
        rule = BINARY_RULES.get(command_type)
        if rule is None:
            return defer.fail(errors.AuthorizationError(f"Command {command_type} has no authorization rule"))
        if not self.authz.enabled:
            return defer.succeed(None)
        return defer.ensureDeferred(self._enforce(cnx, command_type, rule, topic, namespace))

    async def _enforce(self, cnx, command_type: int, rule, topic, namespace) -> None:
        try:
            if topic is not None:
                name = parse_topic(topic)
                where = dict(tenant=name.tenant, namespace=name.namespace, topic=str(name), domain=None)
            else:
                ns = NamespaceName.parse(namespace or "")
                where = dict(tenant=ns.tenant, namespace=ns.namespace)
        except InvalidTopicNameError as e:
            raise errors.InvalidTopicName(str(e))
        # A proxy's connection: the proxy role and the original principal must both pass (proxied.py).
        for role in roles_to_authorize(cnx):
            try:
                await enforce(self.authz, rule, role, **where)
            except errors.AuthorizationError as e:
                self.log.info("{peer}: role {role} refused {command}: {reason}", peer=cnx.peer,
                              role=role, command=api.BaseCommand.Type.Name(command_type), reason=str(e))
                raise

    def allows_unchecked(self, command_type: int) -> bool:
        """True when ``authorize_command`` would pass ``command_type`` for any connection without
        checking anything (authorization off, the command has a rule): the per-creation paths
        then answer without a Deferred for the check (issue 14, item 4)."""
        return not self.authz.enabled and command_type in BINARY_RULES

    def authorized(self, cnx, command_type: int, **where) -> defer.Deferred:
        """``authorize_command``; nothing to check without a connection (a call from the admin
        API, which the HTTP rules authorized)."""
        if cnx is None:
            return defer.succeed(None)
        return self.authorize_command(cnx, command_type, **where)

    def check_topic(self, cnx, topic: str, action: str) -> defer.Deferred:
        """Deferred failing with AuthorizationError unless the role of ``cnx`` may ``action``
        (lookup, produce, consume) on ``topic``: the rule of LOOKUP, PRODUCER or SUBSCRIBE.
        Already fired with authorization off."""
        return self.authorize_command(cnx, _COMMAND_OF_ACTION[action], topic=topic)

    # ---------------------------------------------------------------- lookups
    def lookup_started(self) -> None:
        """Count a lookup in flight; TooManyRequests past maxConcurrentLookupRequest."""
        if self.max_lookups and self.pending_lookups >= self.max_lookups:
            raise errors.TooManyRequests("Failed due to too many pending lookup requests")
        self.pending_lookups += 1

    def lookup_finished(self, result=None):
        self.pending_lookups -= 1
        return result
