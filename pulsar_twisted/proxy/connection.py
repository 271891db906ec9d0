"""
``ProxyConnection``: the client side of one connection to the proxy, an explicit state machine.

START: only CONNECT is accepted, and it must be done (CONNECTED sent) within
``keepAliveIntervalSeconds`` of accept, else the connection is closed (``net.deadline``, as the
broker does): silent sockets and partial frames cannot hold a connection slot. The client is
authenticated by the proxy's own providers (a password checked off the reactor thread, within
the caps of ``security.hashing``; a second CONNECT meanwhile is refused), then either

* LOOKUPS (CONNECT without ``proxy_to_broker_url``): the proxy answers CONNECTED itself and serves
  LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA through its broker pool
  (``lookup.py``). Lookup answers name the owner with ``proxy_through_service_url`` set, so the
  client's producers and consumers come back here with ``proxy_to_broker_url``. The proxy keeps
  the client's credentials fresh in this phase as a broker does (``security.broker.AuthSession``:
  AUTH_CHALLENGE when they expire, the connection closed if no valid answer comes); or
* CONNECTING (CONNECT with ``proxy_to_broker_url``): the target is checked against the allowed
  ports/hosts/addresses, a ``BrokerRelay`` connects to it and does the broker handshake with the
  proxy's credentials plus the client's ``original_principal`` (and its credentials with
  ``forwardAuthorizationCredentials``); bytes the client sends meanwhile are held. Once the broker
  answers CONNECTED, the client gets that CONNECTED, the held bytes go to the broker, and the
  connection is RELAY: bytes pass both ways unparsed with backpressure (``relay.splice``).

CLOSED is final, from any state; it closes the relay or the connection's own broker pool.

House style: this class frames and routes; the decisions are ``ProxyService``'s and the lookups'.
"""

import enum

from twisted.internet import defer, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.client import errors as client_errors
from pulsar_twisted.common import errors
from pulsar_twisted.net.deadline import HandshakeDeadline
from pulsar_twisted.net.framing import KeepAlive
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proxy.pool import OnBehalf
from pulsar_twisted.proxy.relay import BrokerRelay, close_spliced, next_frame, splice
from pulsar_twisted.proxy.targets import TargetNotAllowed
from pulsar_twisted.security.broker import AuthSession
from pulsar_twisted.wire.frames import FrameError, encode_command

T = api.BaseCommand
SERVER_VERSION = "pulsar-twisted-proxy-0.1.0"
PROTOCOL_VERSION = 21
MAX_MESSAGE_SIZE = 5 * 1024 * 1024


class ProxyState(enum.StrEnum):
    START = "start"
    LOOKUPS = "lookups"
    CONNECTING = "connecting"
    RELAY = "relay"
    CLOSED = "closed"


def error_code(failure: Failure) -> int:
    """The ServerError code of a failure from a broker (client exception) or from us."""
    code = getattr(failure.value, "code", None)
    return code if isinstance(code, int) else api.ServiceNotReady


def error_message(failure: Failure) -> str:
    return str(failure.value) or failure.type.__name__


class ProxySender:
    """The commands the proxy itself writes to a client (one sender per connection)."""

    def __init__(self, transport):
        self.transport = transport

    def write(self, command: api.BaseCommand) -> None:
        self.transport.write(encode_command(command))

    def send_error(self, request_id: int, error: int, message: str) -> None:
        self.write(T(type=T.ERROR, error=api.CommandError(request_id=request_id, error=error,
                                                          message=message)))

    def send_auth_challenge(self, method: str, data: bytes, protocol_version: int) -> None:
        self.write(T(type=T.AUTH_CHALLENGE, authChallenge=api.CommandAuthChallenge(
            server_version=SERVER_VERSION, protocol_version=protocol_version,
            challenge=api.AuthData(auth_method_name=method, auth_data=data))))

    def send_connected(self, protocol_version: int) -> None:
        self.write(T(type=T.CONNECTED, connected=api.CommandConnected(
            server_version=SERVER_VERSION, protocol_version=protocol_version,
            max_message_size=MAX_MESSAGE_SIZE,
            feature_flags=api.FeatureFlags(supports_auth_refresh=True))))

    def send_lookup_error(self, request_id: int, code: int, message: str) -> None:
        self.write(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=api.CommandLookupTopicResponse(
            request_id=request_id, response=api.CommandLookupTopicResponse.Failed, error=code,
            message=message)))

    def send_lookup(self, request_id: int, broker_url: str) -> None:
        # The same URL in both fields: whether the proxy reaches the broker over TLS is its own
        # configuration, and the client connects to the proxy either way.
        self.write(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=api.CommandLookupTopicResponse(
            request_id=request_id, brokerServiceUrl=broker_url, brokerServiceUrlTls=broker_url,
            response=api.CommandLookupTopicResponse.Connect, authoritative=True,
            proxy_through_service_url=True)))

    def send_partitioned_error(self, request_id: int, code: int, message: str) -> None:
        self.write(T(type=T.PARTITIONED_METADATA_RESPONSE,
                     partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                         request_id=request_id, error=code, message=message,
                         response=api.CommandPartitionedTopicMetadataResponse.Failed)))

    def send_schema_error(self, request_id: int, code: int, message: str) -> None:
        self.write(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=api.CommandGetSchemaResponse(
            request_id=request_id, error_code=code, error_message=message)))

    def send_answer(self, answer: api.BaseCommand, field: str, request_id: int) -> None:
        """A broker's answer passed on with the client's request id."""
        command = T()
        command.CopyFrom(answer)
        getattr(command, field).request_id = request_id
        self.write(command)


class ClientAuthSession(AuthSession):
    """The broker's refresh rules on the proxy's client connection, also remembering the fresh
    credentials (they are forwarded to brokers with forwardAuthorizationCredentials)."""

    def refreshed(self, response):
        self.cnx.credentials_refreshed(response.response.auth_method_name,
                                       response.response.auth_data)


class ProxyConnection(protocol.Protocol):
    """One client connection to the proxy (see the module docstring)."""

    log = Logger()

    def __init__(self, service, clock):
        self.service = service
        self.clock = clock
        self.state = ProxyState.START
        self.peer = "?"
        self.host = "?"
        self.identity = None
        self.method, self.data = "", b""
        self.protocol_version = 0
        self.supports_refresh = False
        self.pool = None
        self._owns_pool = False
        self.relay = None
        self.session = None
        self._buffer = bytearray()
        self._fresh_waiters = []
        self._checking = False
        self._deadline = HandshakeDeadline(
            clock, service.config.keepAliveIntervalSeconds, lambda: self.transport,
            lambda: self.peer, lambda: self.state in (ProxyState.START, ProxyState.CONNECTING))
        self._keep_alive = KeepAlive(clock, service.config.keepAliveIntervalSeconds,
                                     self._send_ping, self._keep_alive_timeout)
        self._handlers = {
            T.CONNECT: self.handle_connect,
            T.PING: lambda c: self.sender.write(T(type=T.PONG, pong=api.CommandPong())),
            T.PONG: lambda c: None,
            T.AUTH_RESPONSE: self.handle_auth_response,
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_topics_of_namespace,
            T.GET_SCHEMA: self.handle_get_schema,
        }

    # ------------------------------------------------------------------ transport events
    def connectionMade(self):
        self.sender = ProxySender(self.transport)
        peer = self.transport.getPeer()
        self.peer, self.host = str(peer), getattr(peer, "host", str(peer))
        if hasattr(self.transport, "setTcpNoDelay"):
            try:
                self.transport.setTcpNoDelay(True)
            except Exception:
                pass
        self.service.connection_opened(self.host)
        self._deadline.start()

    def dataReceived(self, data):
        if self.state == ProxyState.RELAY:
            self.service.metrics.relayed(len(data))
            self.relay.transport.write(data)
            return
        self._keep_alive.received()
        self._buffer += data
        if self.state == ProxyState.CONNECTING:
            if len(self._buffer) > self.service.max_frame_size:
                self.log.warn("{peer}: too much data before the broker answered; closing", peer=self.peer)
                self.transport.loseConnection()
            return
        try:
            self._frames()
        except FrameError as e:
            self.log.warn("{peer}: closing connection: malformed frame: {error}", peer=self.peer, error=e)
            self.transport.loseConnection()

    def _frames(self):
        while self.state in (ProxyState.START, ProxyState.LOOKUPS):
            found = next_frame(self._buffer, self.service.max_frame_size)
            if found is None:
                return
            command, _, size = found
            del self._buffer[:size]
            self._dispatch(command)

    def _dispatch(self, command):
        handler = self._handlers.get(command.type)
        if self.state == ProxyState.START and command.type != T.CONNECT:
            self.log.warn("{peer}: {type} before CONNECT; closing", peer=self.peer,
                          type=T.Type.Name(command.type))
            self.transport.loseConnection()
            return
        if handler is None:
            # Producers and consumers go through a relayed connection (proxy_to_broker_url).
            self.sender.send_error(_request_id_of(command), api.NotAllowedError,
                                   f"Command {T.Type.Name(command.type)} is not supported by the proxy "
                                   "on a lookup connection")
            return
        try:
            handler(command)
        except Exception:
            self.log.failure("{peer}: error handling {type}", peer=self.peer, type=T.Type.Name(command.type))
            self.sender.send_error(_request_id_of(command), api.UnknownError, "Internal proxy error")

    def connectionLost(self, reason=protocol.connectionDone):
        previous, self.state = self.state, ProxyState.CLOSED
        self._keep_alive.stop()
        self._deadline.stop()
        if self.session is not None:
            self.session.stop()
        waiters, self._fresh_waiters = self._fresh_waiters, []
        for d in waiters:
            d.errback(client_errors.ConnectError("client connection closed"))
        if self._owns_pool and self.pool is not None:
            self.pool.close()
        if self.relay is not None and self.relay.transport is not None:
            if previous == ProxyState.RELAY:
                close_spliced(self.relay.transport)
            else:
                self.relay.transport.loseConnection()
        if previous != ProxyState.CLOSED:
            self.service.connection_closed(self.host)

    # ------------------------------------------------------------------ keep-alive
    def _send_ping(self) -> bool:
        if self.state != ProxyState.LOOKUPS:
            return False
        self.sender.write(T(type=T.PING, ping=api.CommandPing()))
        return True

    def _keep_alive_timeout(self, idle):
        self.log.info("{peer}: no answer to keep-alive ping; closing", peer=self.peer)
        self.transport.abortConnection()

    # ------------------------------------------------------------------ handshake
    def handle_connect(self, command):
        if self.state != ProxyState.START:
            self.sender.send_error(0, api.NotAllowedError, "Already connected")
            return
        if self._checking:
            self.sender.send_error(0, api.NotAllowedError, "CONNECT already in progress")
            return
        connect = command.connect
        self.protocol_version = min(connect.protocol_version, PROTOCOL_VERSION)
        self.supports_refresh = connect.feature_flags.supports_auth_refresh
        self.method, self.data = connect.auth_method_name, connect.auth_data
        self._checking = True
        d = self.service.authenticate(self, self.method, self.data)
        d.addCallbacks(self._authenticated, self._refused, callbackArgs=(connect,))

    def _refused(self, failure):
        self._checking = False
        if self.state == ProxyState.CLOSED:
            return
        self.log.warn("{peer}: authentication refused: {reason}", peer=self.peer,
                      reason=error_message(failure))
        self.sender.send_error(0, api.AuthenticationError, error_message(failure))
        self.transport.loseConnection()

    def _authenticated(self, identity, connect):
        self._checking = False
        if self.state != ProxyState.START:
            return      # closed (deadline, peer) while the credentials were being checked
        self.identity = identity
        self.on_behalf = OnBehalf(
            role=self.identity.role if self.identity is not None else None,
            method=self.method, data=self.data if self.service.forward_credentials and self.identity else None,
            supports_refresh=self.supports_refresh, refresh=self.valid_client_credentials)
        if connect.HasField("proxy_to_broker_url") and connect.proxy_to_broker_url:
            self.state = ProxyState.CONNECTING
            d = self.service.targets.check(connect.proxy_to_broker_url)
            d.addCallback(lambda target: self._open_relay(*target))
            d.addErrback(self._relay_failed, connect.proxy_to_broker_url)
            return
        self.state = ProxyState.LOOKUPS
        self._deadline.stop()
        self.pool, self._owns_pool = self.service.pool_for(self.on_behalf)
        self.sender.send_connected(self.protocol_version)
        self._keep_alive.start()
        if self.identity is not None:
            self.session = ClientAuthSession(self, self.service, self.identity, self.supports_refresh)
            self.session.start()

    def _open_relay(self, host: str, port: int):
        if self.state != ProxyState.CONNECTING:
            return None
        self.relay = BrokerRelay(self, self.service.own_auth, self.on_behalf, self.protocol_version,
                                 self.service.max_frame_size)
        connecting = self.service.relay_connector(host, port, self.relay)
        # A failed dial (refused, unreachable) never reaches the relay's handshake.
        connecting.addErrback(lambda f: self.relay._fail(client_errors.ConnectError(
            f"cannot connect to broker {host}:{port}: {f.getErrorMessage()}")) or None)
        return self.relay.handshake.addCallback(self._relay_ready)

    def _relay_ready(self, result):
        connected, rest = result
        if self.state != ProxyState.CONNECTING:
            self.relay.transport.loseConnection()
            return
        self.state = ProxyState.RELAY
        self._deadline.stop()
        self.log.info("{peer}: relaying to broker {broker} for {role}", peer=self.peer,
                      broker=self.relay.peer, role=self.on_behalf.role)
        self.sender.write(connected)
        if rest:
            self.relayed(len(rest))
            self.transport.write(rest)
        held, self._buffer = bytes(self._buffer), bytearray()
        if held:
            self.service.metrics.relayed(len(held))
            self.relay.transport.write(held)
        splice(self.transport, self.relay.transport)

    def _relay_failed(self, failure, target):
        if self.state == ProxyState.CLOSED:
            return None
        if failure.check(TargetNotAllowed):
            code, message = api.ServiceNotReady, f"Target broker is not allowed: {failure.value}"
        else:
            code, message = error_code(failure), error_message(failure)
        self.log.info("{peer}: cannot proxy to {target}: {reason}", peer=self.peer, target=target,
                      reason=message)
        self.sender.send_error(0, code, message)
        self.transport.loseConnection()
        return None

    def relayed(self, size: int) -> None:
        """Bytes the relay passed from the broker to this client (metrics)."""
        self.service.metrics.relayed(size)

    # ------------------------------------------------------------------ credentials
    def handle_auth_response(self, command):
        if self.session is None:
            self.log.info("{peer}: unexpected AUTH_RESPONSE ignored", peer=self.peer)
            return
        self.session.answer(command.authResponse)

    def credentials_refreshed(self, method: str, data: bytes) -> None:
        """The client answered a challenge with valid credentials (ClientAuthSession)."""
        self.method, self.data = method, data
        if self.on_behalf.data is not None:
            self.on_behalf.method, self.on_behalf.data = method, data
        waiters, self._fresh_waiters = self._fresh_waiters, []
        for d in waiters:
            d.callback((method, data))

    def valid_client_credentials(self) -> defer.Deferred:
        """
        The client's credentials for a broker's challenge (Pulsar's getValidClientAuthData):
        the current ones while they are valid, else fresh ones asked from the client first.
        """
        identity = self.session.identity if self.session is not None else self.identity
        expires = getattr(identity, "expires_at", None)
        if expires is None or self.clock.seconds() < expires or self.session is None:
            return defer.succeed((self.method, self.data))
        d = defer.Deferred()
        self._fresh_waiters.append(d)
        if self.session.challenged_at is None:
            self.session.challenged_at = self.clock.seconds()
            self.sender.send_auth_challenge(identity.method, b"PulsarAuthRefresh", self.protocol_version)
        return d

    # ------------------------------------------------------------------ lookups
    def _serve(self, counter: str, request_id: int, work, answer, fail):
        """Run one lookup-like request: counted and limited, answered or failed by request id."""
        try:
            self.service.lookup_started(counter)
        except errors.TooManyRequests as e:
            fail(request_id, api.TooManyRequests, str(e))
            return
        d = defer.Deferred.fromCoroutine(work())
        d.addBoth(self.service.lookup_finished)

        def failed(failure):
            if self.state != ProxyState.CLOSED:
                fail(request_id, error_code(failure), error_message(failure))

        d.addCallbacks(lambda result: answer(result) if self.state != ProxyState.CLOSED else None,
                       failed)

    def handle_lookup(self, command):
        request = command.lookupTopic

        async def work():
            await self.service.check_lookup(self.on_behalf.role, request.topic)
            return await self.service.lookups.lookup(self.pool, request.topic, request.authoritative)

        self._serve("lookup_requests", request.request_id, work,
                    lambda url: self.sender.send_lookup(request.request_id, url),
                    self.sender.send_lookup_error)

    def handle_partitioned_metadata(self, command):
        request = command.partitionMetadata

        async def work():
            await self.service.check_lookup(self.on_behalf.role, request.topic)
            return await self.service.lookups.partitioned_metadata(
                self.pool, request.topic, request.metadata_auto_creation_enabled)

        self._serve("partitions_metadata_requests", request.request_id, work,
                    lambda answer: self.sender.send_answer(answer, "partitionMetadataResponse",
                                                           request.request_id),
                    self.sender.send_partitioned_error)

    def handle_topics_of_namespace(self, command):
        request = command.getTopicsOfNamespace
        self._serve("get_topics_of_namespace_requests", request.request_id,
                    lambda: self.service.lookups.topics_of_namespace(self.pool, request),
                    lambda answer: self.sender.send_answer(answer, "getTopicsOfNamespaceResponse",
                                                           request.request_id),
                    self.sender.send_error)

    def handle_get_schema(self, command):
        request = command.getSchema
        self._serve("get_schema_requests", request.request_id,
                    lambda: self.service.lookups.schema(self.pool, request),
                    lambda answer: self.sender.send_answer(answer, "getSchemaResponse", request.request_id),
                    self.sender.send_schema_error)


def _request_id_of(command) -> int:
    for field, value in command.ListFields():
        if field.name != "type" and hasattr(value, "request_id"):
            return value.request_id
    return 0


class ProxyProtocolFactory(protocol.Factory):
    """A ``ProxyConnection`` per accepted connection, within the connection limits."""

    def __init__(self, service, clock):
        self.service = service
        self.clock = clock

    def buildProtocol(self, addr):
        if not self.service.admit(getattr(addr, "host", str(addr))):
            return None
        connection = ProxyConnection(self.service, self.clock)
        connection.factory = self
        return connection
