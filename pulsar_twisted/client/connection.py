"""
``ClientConnection``: the client end of one Pulsar binary-protocol connection.

It frames and dispatches (house style: protocols parse, services decide):

* the CONNECT/CONNECTED handshake (``when_connected()`` fires with the connection);
* a request table (``net.RequestTable``) for every command that has an answer (SUCCESS, ERROR,
  PRODUCER_SUCCESS, LOOKUP_RESPONSE, ...). Each request is failed with ``Timeout`` after the
  operation timeout, and all of them with ``ConnectError`` when the connection is lost;
* keep-alive (``net.KeepAlive``): the broker's PING is answered; after ``keep_alive_seconds``
  without any input we PING, and a connection still silent one interval later is aborted;
* commands addressed to producers and consumers, dispatched by table to the handler objects
  registered with ``register_producer`` / ``register_consumer``. Their contract:

  - producer handler: ``receipt_received(CommandSendReceipt)``, ``send_error_received(
    CommandSendError)``, ``closed_by_broker()``, ``connection_closed(connection)``;
  - consumer handler: ``message_received(CommandMessage, message_bytes)``, ``closed_by_broker()``,
    ``active_consumer_changed(is_active)``, ``reached_end_of_topic()``,
    ``connection_closed(connection)``.
"""

import enum
import itertools

from twisted.internet import defer, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.net.framing import KeepAlive, RequestTable
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import (
    FRAME_PADDING, FrameDecoder, FrameError, encode_command, encode_payload_command)
from pulsar_twisted.client import errors

T = api.BaseCommand
CLIENT_VERSION = "pulsar-twisted-0.1.0"
PROTOCOL_VERSION = 21
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

_connection_ids = itertools.count(1)


class ConnectionState(enum.StrEnum):
    """
    CONNECTING (no transport yet) -> HANDSHAKE (CONNECT sent) -> READY (CONNECTED received) ->
    CLOSED (lost, from any state; final). Requests and commands go out only while READY.
    """

    CONNECTING = "connecting"
    HANDSHAKE = "handshake"
    READY = "ready"
    CLOSED = "closed"


def command(kind: int, field: str = None, **fields) -> api.BaseCommand:
    """A ``BaseCommand`` of ``kind`` whose sub-command ``field`` has ``fields`` set."""
    cmd = T(type=kind)
    if field is not None:
        sub = getattr(cmd, field)
        sub.SetInParent()
        for name, value in fields.items():
            if value is None:
                continue
            target = getattr(sub, name)
            if hasattr(target, "CopyFrom") and not isinstance(value, (int, str, bytes)):
                target.CopyFrom(value)
            else:
                setattr(sub, name, value)
    return cmd


class ClientConnection(protocol.Protocol):
    """
    One connection to a broker (or proxy).

    ``clock`` drives timeouts and keep-alive. ``auth`` is ``None`` or an object with
    ``auth_method_name`` and ``auth_data()`` (bytes). ``target_broker`` (``host:port``) is sent as
    ``proxy_to_broker_url`` when the connection goes through a proxy.
    """

    log = Logger()

    def __init__(self, clock, operation_timeout: float = 30.0, keep_alive_seconds: float = 30.0,
                 auth=None, target_broker: str = None, client_version: str = CLIENT_VERSION):
        self.clock = clock
        self.operation_timeout = operation_timeout
        self.keep_alive_seconds = keep_alive_seconds
        self.auth = auth
        self.target_broker = target_broker
        self.client_version = client_version
        self.connection_id = next(_connection_ids)
        self.state = ConnectionState.CONNECTING
        self.server_version = None
        self.protocol_version = 0
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.decoder = FrameDecoder(DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING)
        self.producers = {}
        self.consumers = {}
        self._requests = RequestTable(clock, self._timeout_error)
        self._connected_waiters = []
        self._closed_waiters = []
        self._close_reason = None
        self._keep_alive = KeepAlive(clock, keep_alive_seconds, self._send_ping,
                                     self._keep_alive_timeout)
        self._handlers = {
            T.CONNECTED: self._handle_connected,
            T.PING: self._handle_ping,
            T.PONG: self._handle_pong,
            T.ERROR: self._handle_error,
            T.SUCCESS: self._handle_response("success"),
            T.PRODUCER_SUCCESS: self._handle_producer_success,
            T.LOOKUP_RESPONSE: self._handle_response("lookupTopicResponse"),
            T.PARTITIONED_METADATA_RESPONSE: self._handle_response("partitionMetadataResponse"),
            T.GET_LAST_MESSAGE_ID_RESPONSE: self._handle_response("getLastMessageIdResponse"),
            T.GET_TOPICS_OF_NAMESPACE_RESPONSE: self._handle_response("getTopicsOfNamespaceResponse"),
            T.GET_SCHEMA_RESPONSE: self._handle_response("getSchemaResponse"),
            T.GET_OR_CREATE_SCHEMA_RESPONSE: self._handle_response("getOrCreateSchemaResponse"),
            T.CONSUMER_STATS_RESPONSE: self._handle_response("consumerStatsResponse"),
            T.ACK_RESPONSE: self._handle_response("ackResponse"),
            T.SEND_RECEIPT: self._handle_send_receipt,
            T.SEND_ERROR: self._handle_send_error,
            T.MESSAGE: self._handle_message,
            T.CLOSE_PRODUCER: self._handle_close_producer,
            T.CLOSE_CONSUMER: self._handle_close_consumer,
            T.ACTIVE_CONSUMER_CHANGE: self._handle_active_consumer_change,
            T.REACHED_END_OF_TOPIC: self._handle_reached_end_of_topic,
            T.AUTH_CHALLENGE: self._handle_auth_challenge,
        }

    # ------------------------------------------------------------------ public API
    def when_connected(self) -> defer.Deferred:
        """Fires with this connection after CONNECTED, or fails (handshake refused, lost)."""
        if self.state == ConnectionState.READY:
            return defer.succeed(self)
        if self.state == ConnectionState.CLOSED:
            return defer.fail(self._close_reason or errors.ConnectError("connection closed"))
        d = defer.Deferred()
        self._connected_waiters.append(d)
        return d

    def bound_handshake(self, seconds: float, address: str) -> None:
        """Abort this connection unless it is CONNECTED within ``seconds`` from now. A broker (or
        proxy) that accepted the TCP connection but does not answer CONNECT (stopped, hung, cut
        off behind the network) would otherwise hold whatever waits for it as long as it stays
        silent: the keep-alive starts only with CONNECTED, a request's timeout only once it is
        sent. The official clients bound the same wait (connectionTimeoutMs covers the handshake)."""
        def give_up():
            if not self.is_ready and self.transport is not None:
                self.log.info("{address} did not answer CONNECT within {timeout}s; dropping the "
                              "connection", address=address, timeout=seconds)
                self.transport.abortConnection()

        timer = self.clock.callLater(seconds, give_up)
        self.when_connected().addBoth(lambda _: timer.cancel() if timer.active() else None)

    def when_closed(self) -> defer.Deferred:
        """Fires (with None) once the connection is lost."""
        if self.state == ConnectionState.CLOSED:
            return defer.succeed(None)
        d = defer.Deferred()
        self._closed_waiters.append(d)
        return d

    @property
    def is_ready(self) -> bool:
        return self.state == ConnectionState.READY

    def new_request_id(self) -> int:
        return self._requests.next_id()

    def send_request(self, cmd: api.BaseCommand, request_id: int, timeout: float = None):
        """
        Write ``cmd`` (whose sub-command carries ``request_id``) and return a Deferred firing with
        the answering ``BaseCommand`` or failing with the broker's error as a ``PulsarException``.
        """
        if self.state != ConnectionState.READY:
            return defer.fail(errors.ConnectError("connection is not ready"))
        d = self._requests.wait(request_id, self.operation_timeout if timeout is None else timeout)
        self.transport.write(encode_command(cmd))
        return d

    def send_command(self, cmd: api.BaseCommand) -> None:
        """Write a command that has no answer (FLOW, ACK, REDELIVER, ...)."""
        if self.state == ConnectionState.READY:
            self.transport.write(encode_command(cmd))

    def send_payload(self, cmd: api.BaseCommand, message: bytes) -> None:
        """Write a SEND (``cmd``) with its message part."""
        self.transport.write(encode_payload_command(cmd, message))

    def write_raw(self, frame: bytes) -> bool:
        """Write a ready-made frame; False when the connection cannot take it."""
        if self.state != ConnectionState.READY:
            return False
        self.transport.write(frame)
        return True

    def register_producer(self, producer_id: int, handler) -> None:
        self.producers[producer_id] = handler

    def unregister_producer(self, producer_id: int, handler=None) -> None:
        if handler is None or self.producers.get(producer_id) is handler:
            self.producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, handler) -> None:
        self.consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int, handler=None) -> None:
        if handler is None or self.consumers.get(consumer_id) is handler:
            self.consumers.pop(consumer_id, None)

    def close(self) -> None:
        """Close the connection (requests in flight fail with ``ConnectError``)."""
        if self.transport is not None and self.state != ConnectionState.CLOSED:
            self.transport.loseConnection()

    # ------------------------------------------------------------------ transport events
    def connectionMade(self):
        self.peer = str(self.transport.getPeer())
        if hasattr(self.transport, "setTcpNoDelay"):
            try:
                self.transport.setTcpNoDelay(True)  # small, latency-bound frames
            except Exception:
                pass
        self.state = ConnectionState.HANDSHAKE
        self.transport.write(encode_command(self.connect_command()))
        self._keep_alive.start()

    def connect_command(self) -> api.BaseCommand:
        """The CONNECT this connection opens with (a proxy's connections add the original_* fields)."""
        connect = command(T.CONNECT, "connect", client_version=self.client_version,
                          protocol_version=PROTOCOL_VERSION)
        if self.auth is not None:
            connect.connect.auth_method_name = self.auth.auth_method_name
            data = self.auth.auth_data()
            if data is not None:   # TLS: the certificate is the credential, no data is sent
                connect.connect.auth_data = data
        if self.target_broker:
            connect.connect.proxy_to_broker_url = self.target_broker
        connect.connect.feature_flags.supports_auth_refresh = self.auth is not None
        return connect

    def dataReceived(self, data):
        self._keep_alive.received()
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            self.log.warn("{peer}: closing connection: {error}", peer=self.peer, error=e)
            self.transport.abortConnection()
            return
        for cmd, message in frames:
            if self.state == ConnectionState.CLOSED:
                return
            handler = self._handlers.get(cmd.type)
            if handler is None:
                self.log.debug("{peer}: ignoring command {type}", peer=self.peer, type=cmd.type)
                continue
            try:
                handler(cmd, message)
            except Exception:
                self.log.failure("{peer}: error handling {type}", peer=self.peer,
                                 type=T.Type.Name(cmd.type))

    def connectionLost(self, reason=protocol.connectionDone):
        previous = self.state
        self.state = ConnectionState.CLOSED
        self._keep_alive.stop()
        if self._close_reason is None:
            self._close_reason = errors.ConnectError(
                f"connection to {getattr(self, 'peer', '?')} lost: {reason.getErrorMessage()}")
        waiters, self._connected_waiters = self._connected_waiters, []
        for d in waiters:
            d.errback(self._close_reason)
        self._requests.fail_all(errors.ConnectError(str(self._close_reason)))
        if previous == ConnectionState.READY:
            for handler in list(self.producers.values()):
                handler.connection_closed(self)
            for handler in list(self.consumers.values()):
                handler.connection_closed(self)
        self.producers.clear()
        self.consumers.clear()
        closed, self._closed_waiters = self._closed_waiters, []
        for d in closed:
            d.callback(None)

    # ------------------------------------------------------------------ keep-alive
    def _send_ping(self) -> bool:
        if self.state != ConnectionState.READY:
            return False
        self.transport.write(encode_command(T(type=T.PING, ping=api.CommandPing())))
        return True

    def _keep_alive_timeout(self, idle: float) -> None:
        self.log.info("{peer}: broker silent for {idle}s after our ping; closing", peer=self.peer, idle=idle)
        self._close_reason = errors.ConnectError("keep-alive timeout")
        self.transport.abortConnection()

    def _handle_ping(self, cmd, message):
        self.transport.write(encode_command(T(type=T.PONG, pong=api.CommandPong())))

    def _handle_pong(self, cmd, message):
        pass    # any input already counted as the answer (KeepAlive.received)

    # ------------------------------------------------------------------ handshake
    def _handle_connected(self, cmd, message):
        connected = cmd.connected
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size") and connected.max_message_size > 0:
            self.max_message_size = connected.max_message_size
            self.decoder.max_frame_size = self.max_message_size + FRAME_PADDING
        self.state = ConnectionState.READY
        waiters, self._connected_waiters = self._connected_waiters, []
        for d in waiters:
            d.callback(self)

    def _handle_auth_challenge(self, cmd, message):
        if self.auth is None:
            return
        response = command(T.AUTH_RESPONSE, "authResponse", client_version=self.client_version,
                           protocol_version=PROTOCOL_VERSION)
        response.authResponse.response.auth_method_name = self.auth.auth_method_name
        response.authResponse.response.auth_data = self.auth.auth_data() or b""
        self.transport.write(encode_command(response))

    # ------------------------------------------------------------------ request table
    @staticmethod
    def _timeout_error(request_id: int, timeout: float) -> Exception:
        return errors.Timeout(f"request {request_id} timed out after {timeout}s")

    def _resolve(self, request_id, result=None, failure=None):
        if failure is not None:
            answered = self._requests.fail(request_id, failure)
        else:
            answered = self._requests.resolve(request_id, result)
        if not answered:
            self.log.debug("{peer}: answer to unknown request {id}", peer=getattr(self, "peer", "?"),
                           id=request_id)

    def _handle_response(self, field):
        def handle(cmd, message):
            sub = getattr(cmd, field)
            error = None
            # Responses that carry their own error fields (lookup, partitioned metadata, stats,
            # ack) fail the request here so callers only ever see successes.
            if field == "lookupTopicResponse" and sub.response == sub.Failed:
                error = errors.from_server_error(sub.error, sub.message)
            elif field == "partitionMetadataResponse" and sub.response == sub.Failed:
                error = errors.from_server_error(sub.error, sub.message)
            elif field == "consumerStatsResponse" and sub.HasField("error_code"):
                error = errors.from_server_error(sub.error_code, sub.error_message)
            elif field == "ackResponse" and sub.HasField("error"):
                error = errors.from_server_error(sub.error, sub.message)
            elif (field in ("getSchemaResponse", "getOrCreateSchemaResponse")
                  and sub.HasField("error_code")):
                error = errors.from_server_error(sub.error_code, sub.error_message)
            self._resolve(sub.request_id, cmd, Failure(error) if error is not None else None)
        return handle

    def _handle_error(self, cmd, message):
        error = cmd.error
        exc = errors.from_server_error(error.error, error.message)
        if self.state == ConnectionState.HANDSHAKE:
            # The broker refuses the CONNECT with request_id 0 (authentication, version).
            self._close_reason = exc
            self.transport.loseConnection()
            return
        self._resolve(error.request_id, failure=Failure(exc))

    def _handle_producer_success(self, cmd, message):
        success = cmd.producer_success
        if success.HasField("producer_ready") and not success.producer_ready:
            # Exclusive access mode queued us: a second PRODUCER_SUCCESS follows when ready.
            return
        self._resolve(success.request_id, cmd)

    # ------------------------------------------------------------------ producer/consumer commands
    def _handle_send_receipt(self, cmd, message):
        handler = self.producers.get(cmd.send_receipt.producer_id)
        if handler is not None:
            handler.receipt_received(cmd.send_receipt)

    def _handle_send_error(self, cmd, message):
        handler = self.producers.get(cmd.send_error.producer_id)
        if handler is not None:
            handler.send_error_received(cmd.send_error)

    def _handle_message(self, cmd, message):
        handler = self.consumers.get(cmd.message.consumer_id)
        if handler is not None:
            handler.message_received(cmd.message, message)

    def _handle_close_producer(self, cmd, message):
        handler = self.producers.pop(cmd.close_producer.producer_id, None)
        if handler is not None:
            handler.closed_by_broker()

    def _handle_close_consumer(self, cmd, message):
        handler = self.consumers.pop(cmd.close_consumer.consumer_id, None)
        if handler is not None:
            handler.closed_by_broker()

    def _handle_active_consumer_change(self, cmd, message):
        change = cmd.active_consumer_change
        handler = self.consumers.get(change.consumer_id)
        if handler is not None:
            handler.active_consumer_changed(change.is_active)

    def _handle_reached_end_of_topic(self, cmd, message):
        handler = self.consumers.get(cmd.reachedEndOfTopic.consumer_id)
        if handler is not None:
            handler.reached_end_of_topic()


class ClientConnectionFactory(protocol.Factory):
    """Builds ``ClientConnection`` objects with shared settings."""

    protocol = ClientConnection

    def __init__(self, clock, **settings):
        self.clock = clock
        self.settings = settings

    def buildProtocol(self, addr):
        cnx = ClientConnection(self.clock, **self.settings)
        cnx.factory = self
        return cnx
