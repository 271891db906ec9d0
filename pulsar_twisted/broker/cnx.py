"""
The broker side of one client connection: frames in, commands dispatched by table, replies through
the connection's ``CommandSender``.

This module only parses and routes (house style: protocols parse, services decide). Topic, producer
and subscription rules live in ``BrokerService`` and the topic classes; the connection keeps what
is per connection: its producers and consumers by id, keep-alive, and the two kinds of
backpressure (its own write buffer, and too many publishes in flight).
"""

import enum
import itertools

from twisted.internet import interfaces, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import InvalidTopicNameError
from pulsar_twisted.common.position import Position
from pulsar_twisted.net.framing import KeepAlive
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import FRAME_PADDING, FrameDecoder, FrameError, TooLongFrame
from pulsar_twisted.broker import compaction, schema as schemas
from pulsar_twisted.broker.requests import KeySharedMeta, ProducerRequest, SchemaSpec, SubscribeRequest
from pulsar_twisted.broker.handshake import Handshake
from pulsar_twisted.broker.sender import CommandSender
from pulsar_twisted.broker.sends import ConnectionSends

T = api.BaseCommand
_SEND = T.SEND

_connection_ids = itertools.count(1)



def peer_text(address) -> str:
    """A client's address as Pulsar writes it (Netty's ``/host:port``): the stats' ``address``
    of producers and consumers, and log lines."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is None or port is None:
        return str(address)
    return f"/{host}:{port}"

class ConnectionState(enum.StrEnum):
    """
    START (accepted, waiting for CONNECT) -> CONNECTED (authenticated; every command allowed) ->
    CLOSED (lost, from any state; final).
    """

    START = "start"
    CONNECTED = "connected"
    CLOSED = "closed"


_CLOSED = ConnectionState.CLOSED
_CONNECTED = ConnectionState.CONNECTED


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def position_of(message_id) -> Position:
    """A MessageIdData as a Position: ids are uint64 on the wire, and -1 (earliest) wraps."""
    return Position(_signed(message_id.ledgerId), _signed(message_id.entryId))


def _key_values(pairs) -> dict:
    return {kv.key: kv.value for kv in pairs}


def schema_spec(schema: api.Schema) -> SchemaSpec:
    """A Schema from the wire as a plain SchemaSpec."""
    return SchemaSpec(schema.type, schema.schema_data, _key_values(schema.properties), schema.name)


def producer_request(request: api.CommandProducer) -> ProducerRequest:
    """CommandProducer as the plain request the service takes (absent fields as None / "")."""
    named = request.HasField("producer_name")
    return ProducerRequest(
        topic=request.topic, producer_id=request.producer_id, request_id=request.request_id,
        producer_name=request.producer_name if named else "",
        user_provided_name=bool(request.user_provided_producer_name and named),
        access_mode=request.producer_access_mode,
        topic_epoch=request.topic_epoch if request.HasField("topic_epoch") else None,
        metadata=_key_values(request.metadata),
        schema=schema_spec(request.schema) if request.HasField("schema") else None,
        initial_subscription=(request.initial_subscription_name
                              if request.HasField("initial_subscription_name") else ""))


def key_shared_meta(meta: api.KeySharedMeta) -> KeySharedMeta:
    return KeySharedMeta(meta.keySharedMode, tuple((r.start, r.end) for r in meta.hashRanges),
                         meta.allowOutOfOrderDelivery)


def subscribe_request(request: api.CommandSubscribe) -> SubscribeRequest:
    """CommandSubscribe as the plain request the service takes (Pulsar's SubscriptionOption)."""
    return SubscribeRequest(
        topic=request.topic, subscription=request.subscription, consumer_id=request.consumer_id,
        request_id=request.request_id, sub_type=request.subType, consumer_name=request.consumer_name,
        priority_level=request.priority_level, durable=request.durable,
        initial_position=request.initialPosition,
        start_message_id=(position_of(request.start_message_id)
                          if request.HasField("start_message_id") else None),
        metadata=_key_values(request.metadata),
        key_shared_meta=(key_shared_meta(request.keySharedMeta)
                         if request.HasField("keySharedMeta") else None),
        read_compacted=request.read_compacted, force_topic_creation=request.force_topic_creation,
        replicate_subscription_state=request.replicate_subscription_state,
        schema=schema_spec(request.schema) if request.HasField("schema") else None)


def _loggable(name) -> str:
    """A client-sent name cut for a log line (a refused 5 MB name must not become a 5 MB line)."""
    text = name if isinstance(name, str) else repr(name)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"


def _error_code(failure: Failure) -> int:
    """The ServerError code of a failed request. A metadata store that cannot be reached for now
    (session expired, connection lost) is ServiceNotReady, as in Pulsar: clients retry it, where an
    UnknownError would fail their lookup or producer for good."""
    if failure.check(errors.PulsarError):
        return failure.value.code
    if failure.check(MetadataUnavailableError):
        return api.ServiceNotReady
    return api.UnknownError


def _error_message(failure: Failure) -> str:
    return str(failure.value) or failure.type.__name__


@implementer(interfaces.IPushProducer)
class ServerConnection(protocol.Protocol):
    """One client connection to the broker."""

    log = Logger()

    def __init__(self, service, clock):
        self.service = service
        self.clock = clock
        config = service.config
        self.max_message_size = config.maxMessageSize
        self.decoder = FrameDecoder(config.maxMessageSize + FRAME_PADDING)
        self.keep_alive_seconds = config.keepAliveIntervalSeconds
        self.connection_id = next(_connection_ids)
        self.sender = None
        self.state = ConnectionState.START
        #: The authenticated role (None until CONNECT is accepted, or without authentication).
        self.role = None
        #: The client a proxy connects for (CONNECT's original_principal, security/proxied.py).
        self.original_principal = None
        self.protocol_version = 0
        self.client_version = ""
        self.producers = {}
        #: Topics where a WaitForExclusive producer of this connection is queued (access_modes).
        self.waiting_for_exclusive = set()
        #: Ids of producers the broker closed (CLOSE_PRODUCER sent) and the client has not yet
        #: recreated: their SENDs in flight are ignored (Pulsar's recentlyClosedProducers).
        self.closed_producer_ids = set()
        self.consumers = {}
        self.sends = ConnectionSends(self, config.maxPendingPublishRequestsPerConnection)
        self._throttle_reasons = 0
        self.writable = True
        self._keep_alive = KeepAlive(clock, self.keep_alive_seconds, self._send_ping,
                                     self._keep_alive_timeout)
        self.handshake = Handshake(self, clock, self.keep_alive_seconds)
        self._handlers = {
            T.CONNECT: self.handle_connect,
            T.PING: self.handle_ping,
            T.PONG: self.handle_pong,
            T.AUTH_RESPONSE: self.handle_auth_response,
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.PRODUCER: self.handle_producer,
            T.SEND: self.handle_send,
            T.CLOSE_PRODUCER: self.handle_close_producer,
            T.SUBSCRIBE: self.handle_subscribe,
            T.FLOW: self.handle_flow,
            T.ACK: self.handle_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            T.UNSUBSCRIBE: self.handle_unsubscribe,
            T.CLOSE_CONSUMER: self.handle_close_consumer,
            T.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            T.SEEK: self.handle_seek,
            T.CONSUMER_STATS: self.handle_consumer_stats,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics_of_namespace,
            T.GET_SCHEMA: self.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
        }

    # ------------------------------------------------------------------ transport events
    def connectionMade(self):
        self.sender = CommandSender(self.transport)
        self.peer = peer_text(self.transport.getPeer())
        if hasattr(self.transport, "setTcpNoDelay"):
            # Receipts and messages are small and latency-bound: Nagle would hold them back
            # until the client's delayed ACK (tens of ms per synchronous send).
            self.transport.setTcpNoDelay(True)
        self.transport.registerProducer(self, True)
        self.service.connection_opened(self)
        self._keep_alive.start()
        self.handshake.start()
        listener = getattr(self.factory, "listener_name", "")
        if listener:
            self.log.info("{peer} connected on a port of listener {listener}", peer=self.peer,
                          listener=listener)

    def dataReceived(self, data):
        self._keep_alive.received()
        try:
            frames = self.decoder.feed(data)
        except TooLongFrame as e:
            self.log.warn("{peer}: closing connection: {error} (maxMessageSize {limit})",
                          peer=self.peer, error=e, limit=self.max_message_size)
            self.transport.loseConnection()
            return
        except FrameError as e:
            self.log.warn("{peer}: closing connection: malformed frame: {error}", peer=self.peer, error=e)
            self.transport.loseConnection()
            return
        # SEND, the one command per message, skips the dispatch table (the same checks and the
        # same error handling as _dispatch, without its call and lookups); the SENDs of a read
        # go to their producers together (``ConnectionSends``), before any other command.
        sends = self.sends
        for command, message in frames:
            state = self.state
            if state is _CLOSED:
                return      # (accepting a SEND never closes: a flush or a command did)
            if command.type == _SEND and state is _CONNECTED:
                try:
                    sends.accept(command.send, message)
                except Exception:
                    self.log.failure("{peer}: error handling {type}", peer=self.peer, type="SEND")
                    self.sender.send_error(self._request_id_of(command), api.UnknownError,
                                           "Internal error handling the command")
            else:
                sends.flush()
                self._dispatch(command, message)
        sends.flush()

    def _dispatch(self, command, message):
        handler = self._handlers.get(command.type)
        if handler is None:
            self.log.warn("{peer}: unsupported command {type}", peer=self.peer, type=command.type)
            self.sender.send_error(self._request_id_of(command), api.NotAllowedError,
                                   f"Command {T.Type.Name(command.type) if command.type in T.Type.values() else command.type} is not supported")
            return
        if self.state != ConnectionState.CONNECTED and command.type != T.CONNECT:
            self.log.warn("{peer}: {type} before CONNECT; closing", peer=self.peer,
                          type=T.Type.Name(command.type))
            self.transport.loseConnection()
            return
        try:
            handler(command, message)
        except Exception:
            # A bug or a command missing required fields must not take the broker down: log it,
            # answer what we can, and keep serving.
            self.log.failure("{peer}: error handling {type}", peer=self.peer,
                             type=T.Type.Name(command.type))
            self.sender.send_error(self._request_id_of(command), api.UnknownError,
                                   "Internal error handling the command")

    @staticmethod
    def _request_id_of(command) -> int:
        for field, value in command.ListFields():
            if field.name != "type" and hasattr(value, "request_id"):
                return value.request_id
        return 0

    def connectionLost(self, reason):
        self.state = ConnectionState.CLOSED
        self._keep_alive.stop()
        self.handshake.stop()
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for topic in list(self.waiting_for_exclusive):
            topic.access.forget_waiting(self)
        self.waiting_for_exclusive.clear()
        for consumer in list(self.consumers.values()):
            consumer.subscription.remove_consumer(consumer)
        self.consumers.clear()
        self.service.connection_closed(self)

    # ------------------------------------------------------------------ IPushProducer (our writes)
    def pauseProducing(self):
        """The transport's write buffer is full: stop dispatching to this connection's consumers."""
        self.writable = False

    def resumeProducing(self):
        self.writable = True
        for consumer in list(self.consumers.values()):
            consumer.subscription.consumer_writable(consumer)

    def stopProducing(self):
        self.writable = False

    # ------------------------------------------------------------------ keep-alive
    def _send_ping(self) -> bool:
        if self.state != ConnectionState.CONNECTED:
            return False
        self.sender.send_ping()
        return True

    def _keep_alive_timeout(self, idle: float) -> None:
        self.log.info("{peer}: no answer to keep-alive ping in {seconds}s; closing",
                      peer=self.peer, seconds=self.keep_alive_seconds)
        self.transport.abortConnection()

    # ------------------------------------------------------------------ connection commands
    def handle_connect(self, command, message):
        self.handshake.connect(command.connect)

    def connected_as(self, role) -> None:
        """The handshake accepted CONNECT (``role``: None without authentication)."""
        self.role = role
        self.state = ConnectionState.CONNECTED

    def handle_ping(self, command, message):
        self.sender.send_pong()

    def handle_pong(self, command, message):
        pass    # any input already counted as the answer (KeepAlive.received)

    def handle_auth_response(self, command, message):
        # Fresh credentials answering our AUTH_CHALLENGE: the security service decides.
        self.service.auth_response(self, command.authResponse)

    # ------------------------------------------------------------------ lookup
    def handle_lookup(self, command, message):
        lookup = command.lookupTopic
        # The client's listener, else the one of the port this connection came in on (Pulsar's
        # connection-specific listener name, from bindAddresses).
        listener = lookup.advertised_listener_name.strip() or getattr(self.factory, "listener_name", "")
        d = self.service.lookup(lookup.topic, cnx=self, listener_name=listener,
                                authoritative=lookup.authoritative)
        d.addCallbacks(
            lambda urls: self.sender.send_lookup_response(
                lookup.request_id, urls[0], urls[1], redirect=getattr(urls, "redirect", False),
                authoritative=getattr(urls, "authoritative", True)),
            lambda f: self.sender.send_lookup_error(lookup.request_id, _error_code(f), _error_message(f)))

    def handle_partitioned_metadata(self, command, message):
        request = command.partitionMetadata
        d = self.service.partitioned_metadata(request.topic, request.metadata_auto_creation_enabled,
                                             cnx=self)
        d.addCallbacks(
            lambda n: self.sender.send_partitioned_metadata(request.request_id, n),
            lambda f: self.sender.send_partitioned_metadata_error(
                request.request_id, _error_code(f), _error_message(f)))

    def handle_get_topics_of_namespace(self, command, message):
        request = command.getTopicsOfNamespace
        d = self.service.topics_of_namespace(request.namespace, request.mode,
                                             request.topics_pattern if request.HasField("topics_pattern") else None,
                                             cnx=self)
        d.addCallbacks(
            lambda result: self.sender.send_topics_of_namespace(request.request_id, *result),
            lambda f: self.sender.send_error(request.request_id, _error_code(f), _error_message(f)))

    def handle_get_schema(self, command, message):
        request = command.getSchema
        d = schemas.get_schema(self.service, request.topic, request.schema_version, cnx=self)
        d.addCallbacks(
            lambda found: self.sender.send_get_schema(request.request_id, found.to_proto(),
                                                      schemas.encode_version(found.version)),
            lambda f: self.sender.send_get_schema_error(request.request_id, _error_code(f),
                                                        _error_message(f)))

    def handle_get_or_create_schema(self, command, message):
        request = command.getOrCreateSchema
        d = schemas.get_or_create_schema(self.service, request.topic, schema_spec(request.schema),
                                         cnx=self)
        d.addCallbacks(
            lambda version: self.sender.send_get_or_create_schema(request.request_id, version),
            lambda f: self.sender.send_get_or_create_schema_error(request.request_id, _error_code(f),
                                                                  _error_message(f)))

    # ------------------------------------------------------------------ producers
    def handle_producer(self, command, message):
        request = producer_request(command.producer)
        if request.producer_id in self.producers:
            existing = self.producers[request.producer_id]
            if existing.topic.name == request.topic:
                # The client retried a create that already succeeded: answer it again.
                self.sender.send_producer_success(request.request_id, existing.name,
                                                  existing.last_sequence_id, existing.schema_version)
            else:
                self.sender.send_error(request.request_id, api.ProducerBusy,
                                       f"Producer id {request.producer_id} is already in use")
            return
        d = self.service.create_producer(self, request)

        def created(producer):
            if self.state == ConnectionState.CLOSED:
                producer.topic.remove_producer(producer)
                return
            self.producers[request.producer_id] = producer
            self.closed_producer_ids.discard(request.producer_id)
            self.sender.send_producer_success(request.request_id, producer.name, producer.last_sequence_id,
                                              producer.schema_version, topic_epoch=producer.topic_epoch)

        def failed(failure):
            self.log.info("{peer}: producer on {topic} refused: {reason}", peer=self.peer,
                          topic=_loggable(request.topic), reason=_error_message(failure))
            self.sender.send_error(request.request_id, _error_code(failure), _error_message(failure))

        d.addCallbacks(created, failed)

    def handle_send(self, command, message):
        self.sends.accept(command.send, message)
        self.sends.flush()

    def publish_answered(self, size, count=1):
        """``count`` SENDs of ``size`` message bytes in all are settled (answered, or dropped by a
        closing producer): the producer calls this for each ``publish_messages`` item."""
        self.sends.answered(size, count)

    def throttle(self):
        """
        Add a reason to stop reading from this client (too many publishes in flight here, or a
        topic it publishes to has too many pending writes). Reading stops at the first reason and
        resumes when the last one is removed (Pulsar's throttle tracker).
        """
        self._throttle_reasons += 1
        if self._throttle_reasons == 1 and self.state != ConnectionState.CLOSED:
            self.transport.pauseProducing()

    def unthrottle(self):
        self._throttle_reasons -= 1
        if self._throttle_reasons == 0 and self.state != ConnectionState.CLOSED:
            self.transport.resumeProducing()

    def handle_close_producer(self, command, message):
        request = command.close_producer
        producer = self.producers.pop(request.producer_id, None)
        self.closed_producer_ids.discard(request.producer_id)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self.sender.send_success(request.request_id)

    def producer_closed_by_broker(self, producer):
        """The broker closed a producer (topic unloaded or deleted): tell the client to reconnect."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            self.closed_producer_ids.add(producer.producer_id)
            if self.state != ConnectionState.CLOSED:
                self.sender.send_close_producer(producer.producer_id)

    # ------------------------------------------------------------------ consumers
    def handle_subscribe(self, command, message):
        request = subscribe_request(command.subscribe)
        if request.consumer_id in self.consumers:
            existing = self.consumers[request.consumer_id]
            if existing.subscription.topic.name == request.topic:
                self.sender.send_success(request.request_id)
            else:
                self.sender.send_error(request.request_id, api.ConsumerBusy,
                                       f"Consumer id {request.consumer_id} is already in use")
            return
        d = schemas.check_subscribe_schema(self.service, request)
        d.addCallback(lambda _: self.service.subscribe(self, request))

        def subscribed(consumer):
            if self.state == ConnectionState.CLOSED:
                consumer.subscription.remove_consumer(consumer)
                return
            self.consumers[request.consumer_id] = consumer
            self.sender.send_success(request.request_id)
            consumer.subscription.consumer_ready(consumer)

        def failed(failure):
            self.log.info("{peer}: subscribe to {topic} ({sub}) refused: {reason}", peer=self.peer,
                          topic=_loggable(request.topic), sub=_loggable(request.subscription),
                          reason=_error_message(failure))
            self.sender.send_error(request.request_id, _error_code(failure), _error_message(failure))

        d.addCallbacks(subscribed, failed)

    def handle_flow(self, command, message):
        flow = command.flow
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            self.log.debug("{peer}: FLOW for unknown consumer {id}", peer=self.peer, id=flow.consumer_id)
            return
        consumer.flow(flow.messagePermits)

    def handle_ack(self, command, message):
        ack = command.ack
        consumer = self.consumers.get(ack.consumer_id)
        wants_response = ack.HasField("request_id")
        if consumer is None:
            if wants_response:
                self.sender.send_ack_response(ack.consumer_id, ack.request_id, api.ConsumerNotFound,
                                              "Consumer not found")
            return
        positions = [Position(m.ledgerId, m.entryId) for m in ack.message_id]
        d = consumer.acknowledge(ack.ack_type == api.CommandAck.Cumulative, positions, ack.message_id)
        if wants_response:
            d.addCallbacks(
                lambda _: self.sender.send_ack_response(ack.consumer_id, ack.request_id),
                lambda f: self.sender.send_ack_response(ack.consumer_id, ack.request_id,
                                                        _error_code(f), _error_message(f)))
        else:
            d.addErrback(lambda f: self.log.info("{peer}: ack on consumer {id} failed: {reason}",
                                                 peer=self.peer, id=ack.consumer_id,
                                                 reason=_error_message(f)))

    def handle_redeliver(self, command, message):
        request = command.redeliverUnacknowledgedMessages
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            return
        positions = [Position(m.ledgerId, m.entryId) for m in request.message_ids]
        consumer.redeliver(positions or None)

    def handle_unsubscribe(self, command, message):
        request = command.unsubscribe
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.sender.send_error(request.request_id, api.ConsumerNotFound, "Consumer not found")
            return
        d = consumer.subscription.unsubscribe(consumer, request.force)

        def done(_):
            self.consumers.pop(request.consumer_id, None)
            self.sender.send_success(request.request_id)

        d.addCallbacks(done, lambda f: self.sender.send_error(
            request.request_id, _error_code(f), _error_message(f)))

    def handle_close_consumer(self, command, message):
        request = command.close_consumer
        consumer = self.consumers.pop(request.consumer_id, None)
        if consumer is not None:
            consumer.subscription.remove_consumer(consumer)
        self.sender.send_success(request.request_id)

    def consumer_closed_by_broker(self, consumer):
        """The broker closed a consumer (seek, unload): the client resubscribes."""
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
            if self.state != ConnectionState.CLOSED:
                self.sender.send_close_consumer(consumer.consumer_id)

    def handle_get_last_message_id(self, command, message):
        request = command.getLastMessageId
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.sender.send_error(request.request_id, api.ConsumerNotFound, "Consumer not found")
            return
        d = compaction.last_message_id(consumer.subscription)

        def answer(result):
            (ledger_id, entry_id, batch_index) = result
            mark_delete = consumer.subscription.mark_delete_position()
            if entry_id >= 0 and mark_delete > (ledger_id, entry_id):
                # Past the last message only by markers it acknowledged (replicated
                # subscriptions): the last message, so that a client comparing the two (an
                # inclusive reader at "latest") still finds that message.
                mark_delete = Position(ledger_id, entry_id)
            self.sender.send_last_message_id(request.request_id, ledger_id, entry_id,
                                             consumer.partition, batch_index, mark_delete)

        d.addCallbacks(answer, lambda f: self.sender.send_error(
            request.request_id, _error_code(f), _error_message(f)))

    def handle_seek(self, command, message):
        request = command.seek
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.sender.send_error(request.request_id, api.ConsumerNotFound, "Consumer not found")
            return
        if request.HasField("message_id"):
            mid = request.message_id
            d = consumer.subscription.seek(position_of(mid))
        elif request.HasField("message_publish_time"):
            d = consumer.subscription.seek_by_time(request.message_publish_time)
        else:
            self.sender.send_error(request.request_id, api.NotAllowedError,
                                   "Message id and timestamp not present")
            return
        d.addCallbacks(lambda _: self.sender.send_success(request.request_id),
                       lambda f: self.sender.send_error(request.request_id, _error_code(f),
                                                        _error_message(f)))

    def handle_consumer_stats(self, command, message):
        request = command.consumerStats
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.sender.send_consumer_stats_error(request.request_id, api.ConsumerNotFound,
                                                  f"Consumer {request.consumer_id} not found")
            return
        self.sender.send_consumer_stats(request.request_id, **consumer.stats())


class BrokerProtocolFactory(protocol.Factory):
    """Builds a ``ServerConnection`` per accepted connection. ``listener_name``: the advertised
    listener of the port it serves (``bindAddresses``), "" for the main ports."""

    def __init__(self, service, clock, listener_name: str = ""):
        self.service = service
        self.clock = clock
        self.listener_name = listener_name

    def buildProtocol(self, addr):
        if not self.service.security.admit(getattr(addr, "host", str(addr))):
            return None  # over brokerMaxConnections(PerIp): Twisted closes the socket at once
        connection = ServerConnection(self.service, self.clock)
        connection.factory = self
        return connection
