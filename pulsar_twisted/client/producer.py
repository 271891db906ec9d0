"""
``Producer``: publishes to one topic (or one partition), Deferred-based.

State machine (``state``): ``connecting`` -> ``ready`` <-> ``connecting`` (connection lost or
CLOSE_PRODUCER from the broker; we re-create the producer with backoff and resend every pending
message, in order, with its original sequence id so broker-side deduplication can drop what it
already stored) -> ``closing`` -> ``closed``; ``failed`` when the first creation fails for good.

Each ``send`` returns a Deferred firing with the ``MessageId`` of the SEND_RECEIPT. Pending messages
(sent or waiting in a batch, not yet acknowledged) are bounded by ``max_pending_messages``: past it
a send either waits for room (``block_if_queue_full``) or fails with ``ProducerQueueIsFull``. A
pending message older than ``send_timeout_ms`` fails all pending messages with ``Timeout``, as the
Java client does. Compression and batching produce exactly what the official clients read.
"""

import collections
import datetime
import random
import string

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.batch import encode_batch, single_metadata
from pulsar_twisted.wire.compression import NONE, compress
from pulsar_twisted.wire.compression import compression_type as _compression_type
from pulsar_twisted.wire.errors import UnknownCompression
from pulsar_twisted.wire.frames import FRAME_PADDING, encode_message, encode_payload_command
from pulsar_twisted.client import errors
from pulsar_twisted.common.backoff import Backoff
from pulsar_twisted.client.chunking import (
    ChunkMessageId, chunk_payload_size, chunk_uuid, split)
from pulsar_twisted.client.connection import DEFAULT_MAX_MESSAGE_SIZE, T, command
from pulsar_twisted.client.message_id import MessageId

from pulsar_twisted.client.handler import (  # noqa: F401 (the states, re-exported)
    CLOSED, CLOSING, CONNECTING, FAILED, READY, ConnectionHandler)

DEFAULT_BATCHING = "default"
KEY_BASED_BATCHING = "key_based"


class _Message:
    """One message handed to ``send`` and not yet acknowledged."""

    __slots__ = ("payload", "properties", "partition_key", "ordering_key", "event_timestamp",
                 "sequence_id", "deliver_at", "replicate_to", "deferred")

    def __init__(self, payload, properties, partition_key, ordering_key, event_timestamp,
                 sequence_id, deliver_at, replicate_to=None):
        self.payload = payload
        self.properties = properties
        self.partition_key = partition_key
        self.ordering_key = ordering_key
        self.event_timestamp = event_timestamp
        self.sequence_id = sequence_id
        self.deliver_at = deliver_at
        #: MessageMetadata.replicate_to: a tuple of cluster names, or None (the namespace's).
        self.replicate_to = replicate_to
        self.deferred = defer.Deferred()


#: What ``disable_replication=True`` puts in ``replicate_to``: the official C++ client's
#: ``MessageBuilder::disableReplication`` value, which the broker reads as "this cluster only".
LOCAL_ONLY = "__local__"


def replicate_to_field(replication_clusters=None, disable_replication: bool = False):
    """
    The ``replicate_to`` list of one message, as the official Python client builds it:
    ``disable_replication`` wins (``["__local__"]``), else ``replication_clusters`` when not
    empty, else None (no field: the namespace's clusters apply). A tuple, so that batching can
    compare two messages' lists.
    """
    if disable_replication:
        return (LOCAL_ONLY,)
    if replication_clusters:
        if isinstance(replication_clusters, str):
            raise ValueError("replication_clusters must be a list of cluster names")
        return tuple(str(cluster) for cluster in replication_clusters)
    return None


class _OpSend:
    """One SEND frame in flight: a single message or a batch."""

    __slots__ = ("sequence_id", "highest_sequence_id", "frame", "messages", "created_at", "done",
                 "batched", "chunk_ids")

    def __init__(self, sequence_id, highest_sequence_id, frame, messages, created_at, batched,
                 chunk_ids=None):
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.frame = frame
        self.messages = messages
        self.created_at = created_at
        self.batched = batched
        # Chunks of one message share a list collecting their ids; only the last chunk's op
        # holds the message (so counts and failures see it once).
        self.chunk_ids = chunk_ids
        self.done = defer.Deferred()


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _random_name() -> str:
    return "pulsar-twisted-" + "".join(random.choice(string.ascii_lowercase) for _ in range(8))


class Producer(ConnectionHandler):
    """
    A producer on ``topic``. ``client`` provides ``clock``, ``operation_timeout`` and
    ``connection_for(topic) -> Deferred[ClientConnection]`` (lookup + pool); ``producer_id`` is
    unique in the client. Use ``start()`` (the client does) before sending.
    """

    log = Logger()
    _handler_kind = "producer"
    _connect_verb = "connecting"

    def __init__(self, client, topic: str, producer_id: int, producer_name: str = None,
                 send_timeout_ms: int = 30000, max_pending_messages: int = 1000,
                 block_if_queue_full: bool = False, batching_enabled: bool = False,
                 batching_max_messages: int = 1000, batching_max_bytes: int = 128 * 1024,
                 batching_max_publish_delay_ms: float = 10, batching_type: str = DEFAULT_BATCHING,
                 initial_sequence_id: int = None, properties: dict = None,
                 access_mode: int = api.Shared, partition: int = -1, compression_type=None,
                 chunking_enabled: bool = False, chunk_max_message_size: int = 0,
                 initial_subscription_name: str = None, backoff: Backoff = None):
        if chunking_enabled and batching_enabled:
            raise errors.InvalidConfiguration(
                "batching and chunking of messages can't be enabled together")
        self.client = client
        self.clock = client.clock
        self.topic = topic
        self.producer_id = producer_id
        self.producer_name = producer_name
        self.user_provided_name = producer_name is not None
        self.send_timeout = send_timeout_ms / 1000.0
        self.max_pending_messages = max_pending_messages
        self.block_if_queue_full = block_if_queue_full
        self.batching_enabled = batching_enabled
        self.batching_max_messages = max(1, batching_max_messages)
        self.batching_max_bytes = batching_max_bytes
        self.batching_max_delay = batching_max_publish_delay_ms / 1000.0
        self.key_based_batching = batching_type in (KEY_BASED_BATCHING, "KeyBased", 1)
        try:
            self.compression = _compression_type(compression_type)
        except UnknownCompression as e:
            raise errors.InvalidConfiguration(str(e)) from None
        self.chunking_enabled = chunking_enabled
        self.chunk_max_message_size = chunk_max_message_size
        self.initial_subscription_name = initial_subscription_name
        self.properties = dict(properties or {})
        self.access_mode = access_mode
        self.partition = partition
        self.backoff = backoff or Backoff()
        self._init_handler()
        self.max_message_size = None
        self.last_sequence_id_published = -1
        self._initial_sequence_given = initial_sequence_id is not None
        self._next_sequence_id = (initial_sequence_id + 1) if initial_sequence_id is not None else 0
        self._pending = collections.deque()      # _OpSend in sequence order
        self._pending_count = 0                  # messages in _pending and in the batch
        self._blocked = collections.deque()      # _Message waiting for room
        self._batch = collections.OrderedDict()  # key -> [_Message] (one key unless key based)
        self._batch_count = 0
        self._batch_bytes = 0
        #: The replicate_to shared by every message of the open batch (entry-level metadata).
        self._batch_replicate_to = None
        self._batch_call = None
        self._timeout_call = None
        self._epoch = 0

    # ------------------------------------------------------------------ lifecycle
    # start() (create the producer on the broker; fires with ``self`` or fails with the error),
    # the reconnect loop and connection_closed come from ConnectionHandler.

    def _attach(self, cnx):
        if self.state != CONNECTING:
            return
        request_id = cnx.new_request_id()
        cmd = command(T.PRODUCER, "producer", topic=self.topic, producer_id=self.producer_id,
                      request_id=request_id, epoch=self._epoch,
                      producer_access_mode=self.access_mode)
        if self.producer_name is not None:
            cmd.producer.producer_name = self.producer_name
            cmd.producer.user_provided_producer_name = self.user_provided_name
        if self.initial_subscription_name:
            cmd.producer.initial_subscription_name = self.initial_subscription_name
        for key, value in self.properties.items():
            cmd.producer.metadata.add(key=key, value=value)
        cnx.register_producer(self.producer_id, self)
        d = cnx.send_request(cmd, request_id)

        def created(answer):
            self._created(answer.producer_success, cnx)

        def refused(failure):
            cnx.unregister_producer(self.producer_id, self)
            return failure

        d.addCallbacks(created, refused)
        return d

    def _created(self, success, cnx):
        if self.state != CONNECTING:
            # Closed while the PRODUCER request was in flight: do not leave it on the broker.
            cnx.unregister_producer(self.producer_id, self)
            self._send_close(cnx)
            return
        if not cnx.is_ready:
            self._schedule_reconnect()
            return
        self.producer_name = success.producer_name
        self.max_message_size = cnx.max_message_size
        if (not self._connected_once and not self._initial_sequence_given
                and success.last_sequence_id >= 0 and self._next_sequence_id == 0):
            # The broker's dedup state says where this (named) producer stopped: continue there.
            self.last_sequence_id_published = success.last_sequence_id
            self._next_sequence_id = success.last_sequence_id + 1
        self._became_ready(cnx)
        self._epoch += 1
        self.log.debug("producer {name} on {topic} ready; resending {n} pending",
                       name=self.producer_name, topic=self.topic, n=len(self._pending))
        for op in self._pending:
            cnx.write_raw(op.frame)
        self._arm_timeout()
        self._fire_started()

    def _give_up(self, error):
        self._fail_all(error)

    def _is_fatal(self, error) -> bool:
        # Java's ProducerImpl stops reconnecting on these: retrying cannot succeed.
        return isinstance(error, (errors.TopicTerminated, errors.ProducerFenced))

    # Called by the connection ------------------------------------------------------------
    def closed_by_broker(self):
        self.log.info("producer {name} on {topic} closed by the broker; reconnecting",
                      name=self.producer_name, topic=self.topic)
        self._connection_gone()

    def receipt_received(self, receipt):
        if not self._pending:
            self.log.debug("receipt {seq} with nothing pending", seq=receipt.sequence_id)
            return
        op = self._pending[0]
        sequence_id = receipt.sequence_id
        if sequence_id < op.sequence_id:
            return  # a duplicate answer to a message resent after reconnection
        if sequence_id > op.sequence_id:
            # A receipt for a later message: the broker lost one of ours. Reconnect and resend.
            self.log.warn("producer {name}: receipt for {got}, expected {want}; reconnecting",
                          name=self.producer_name, got=sequence_id, want=op.sequence_id)
            if self.cnx is not None:
                self.cnx.close()
            return
        self._pending.popleft()
        self.last_sequence_id_published = max(self.last_sequence_id_published,
                                              op.highest_sequence_id)
        mid = receipt.message_id
        ledger_id, entry_id = mid.ledgerId, mid.entryId
        if op.chunk_ids is not None:
            self._chunk_receipt(op, ledger_id, entry_id)
            return
        count = len(op.messages)
        for index, message in enumerate(op.messages):
            if op.batched:
                message_id = MessageId(ledger_id, entry_id, index, self.partition, count)
            else:
                message_id = MessageId(ledger_id, entry_id, -1, self.partition)
            message.deferred.callback(message_id)
        self._op_finished(op)

    def _chunk_receipt(self, op, ledger_id, entry_id):
        op.chunk_ids.append(MessageId(ledger_id, entry_id, -1, self.partition))
        for message in op.messages:   # the last chunk: the message is stored
            ids = op.chunk_ids
            message.deferred.callback(ChunkMessageId(ids[0], ids[-1], ids))
        self._op_finished(op)

    def send_error_received(self, send_error):
        error = errors.from_server_error(send_error.error, send_error.message)
        if isinstance(error, (errors.TopicTerminated,)):
            self._fail_all(error)
            return
        if isinstance(error, errors.NotAllowed) and self._pending \
                and self._pending[0].sequence_id == send_error.sequence_id:
            op = self._pending.popleft()
            self._fail_op(op, error)
            return
        # Anything else (checksum, persistence): reconnect and resend, as the Java client does.
        self.log.info("producer {name}: send error {error}; reconnecting",
                      name=self.producer_name, error=error)
        if self.cnx is not None:
            self.cnx.close()

    # ------------------------------------------------------------------ sending
    def send(self, payload: bytes, properties: dict = None, partition_key: str = None,
             ordering_key: bytes = None, event_timestamp: int = None, sequence_id: int = None,
             deliver_after=None, deliver_at=None, replication_clusters=None,
             disable_replication: bool = False) -> defer.Deferred:
        """
        Publish ``payload``; fires with its ``MessageId`` once the broker stored it.

        ``deliver_after`` (timedelta or ms) / ``deliver_at`` (ms since the epoch) delay delivery
        on Shared subscriptions; such messages are never batched, as in the Java client.
        ``replication_clusters`` (a list of cluster names) limits geo-replication of this message
        to those clusters; ``disable_replication=True`` keeps it in this cluster (both as the
        official client's ``send``).
        """
        if self.state in (CLOSING, CLOSED, FAILED):
            return defer.fail(errors.AlreadyClosed(f"producer on {self.topic} is {self.state}"))
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        deliver_at_ms = None
        if deliver_at is not None:
            deliver_at_ms = _ms(deliver_at) if not isinstance(deliver_at, datetime.datetime) \
                else int(deliver_at.timestamp() * 1000)
        elif deliver_after is not None:
            deliver_at_ms = int(self.clock.seconds() * 1000) + _ms(deliver_after)
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode("utf-8")
        message = _Message(bytes(payload), properties, partition_key, ordering_key,
                           event_timestamp, sequence_id, deliver_at_ms,
                           replicate_to_field(replication_clusters, disable_replication))
        if self._pending_count >= self.max_pending_messages:
            if not self.block_if_queue_full:
                return defer.fail(errors.ProducerQueueIsFull(
                    f"producer queue is full ({self.max_pending_messages} messages pending)"))
            self._blocked.append(message)
            return message.deferred
        self._enqueue(message)
        return message.deferred

    def _enqueue(self, message):
        if message.sequence_id is None:
            message.sequence_id = self._next_sequence_id
            self._next_sequence_id += 1
        else:
            self._next_sequence_id = max(self._next_sequence_id, message.sequence_id + 1)
        self._pending_count += 1
        if self.batching_enabled and message.deliver_at is None:
            self._add_to_batch(message)
        else:
            if self._batch_count:
                self._flush_batch()
            self._send_single(message)

    def _base_metadata(self, sequence_id):
        return api.MessageMetadata(producer_name=self.producer_name or "",
                                   sequence_id=sequence_id,
                                   publish_time=int(self.clock.seconds() * 1000))

    def _compress_into(self, metadata, payload):
        if self.compression != NONE:
            metadata.compression = self.compression
            metadata.uncompressed_size = len(payload)
            payload = compress(self.compression, payload)
        return payload

    def _send_single(self, message):
        metadata = self._base_metadata(message.sequence_id)
        for key, value in (message.properties or {}).items():
            metadata.properties.add(key=key, value=value)
        if message.partition_key is not None:
            metadata.partition_key = message.partition_key
        if message.ordering_key is not None:
            metadata.ordering_key = message.ordering_key
        if message.event_timestamp:
            metadata.event_time = message.event_timestamp
        if message.deliver_at is not None:
            metadata.deliver_at_time = message.deliver_at
        if message.replicate_to:
            metadata.replicate_to.extend(message.replicate_to)
        payload = self._compress_into(metadata, message.payload)
        if self.chunking_enabled:
            chunk_size = chunk_payload_size(self.max_message_size or DEFAULT_MAX_MESSAGE_SIZE,
                                            metadata.ByteSize(), self.chunk_max_message_size)
            if len(payload) > chunk_size:
                self._send_chunks(metadata, payload, message, chunk_size)
                return
        self._send_op(metadata, payload, [message], batched=False)

    def _send_chunks(self, metadata, payload, message, chunk_size):
        """One SEND per chunk, all with the message's sequence id (Java's chunked publish)."""
        chunks = split(payload, chunk_size)
        metadata.uuid = chunk_uuid(self.producer_name or "", message.sequence_id)
        metadata.num_chunks_from_msg = len(chunks)
        metadata.total_chunk_msg_size = len(payload)
        ids = []
        last = len(chunks) - 1
        for chunk_id, chunk in enumerate(chunks):
            metadata.chunk_id = chunk_id
            self._send_op(metadata, chunk, [message] if chunk_id == last else [], batched=False,
                          chunk_ids=ids, sequence_id=message.sequence_id)

    def _send_op(self, metadata, payload, messages, batched, chunk_ids=None, sequence_id=None):
        part = encode_message(metadata, payload)
        limit = (self.max_message_size or DEFAULT_MAX_MESSAGE_SIZE) + \
            (FRAME_PADDING if chunk_ids is not None else 0)
        if len(part) > limit:
            error = errors.MessageTooBig(f"message of {len(part)} bytes exceeds the broker's "
                                         f"limit of {limit} bytes")
            for message in messages:
                self._pending_count -= 1
                message.deferred.errback(error)
            self._unblock()
            return
        if sequence_id is None:
            first, last = messages[0].sequence_id, messages[-1].sequence_id
        else:
            first = last = sequence_id
        cmd = command(T.SEND, "send", producer_id=self.producer_id, sequence_id=first,
                      num_messages=max(1, len(messages)))
        if batched:
            cmd.send.highest_sequence_id = last
        self._queue(_OpSend(first, last, encode_payload_command(cmd, part), messages,
                            self.clock.seconds(), batched, chunk_ids))

    def _queue(self, op):
        """Put ``op`` in flight: pending in order, written now if connected (else by the
        reconnection), under the send timeout."""
        self._pending.append(op)
        if self.state == READY and self.cnx is not None:
            self.cnx.write_raw(op.frame)
        self._arm_timeout()

    def send_entry(self, metadata, payload: bytes, num_messages: int = 1) -> defer.Deferred:
        """
        Publish a message already made elsewhere, its ``metadata`` (a MessageMetadata: producer
        name, sequence id, batch, compression...) sent as it is: the geo-replicator's send, which
        republishes another cluster's entries (Java's ProducerImpl sending a replicated message).
        The SEND carries this producer's own next sequence id, so receipts match in order whatever
        the metadata's; a receiving broker deduplicates a replicated message by the metadata's
        producer name and sequence id. ``num_messages``: messages in the entry (a batch's count).
        Not batched with anything; the queue limit and send timeout apply as to ``send``.
        """
        if self.state in (CLOSING, CLOSED, FAILED):
            return defer.fail(errors.AlreadyClosed(f"producer on {self.topic} is {self.state}"))
        if self._pending_count >= self.max_pending_messages:
            return defer.fail(errors.ProducerQueueIsFull(
                f"producer queue is full ({self.max_pending_messages} messages pending)"))
        if self._batch_count:
            self._flush_batch()
        sequence_id = self._next_sequence_id
        self._next_sequence_id += 1
        message = _Message(payload, None, None, None, None, sequence_id, None)
        self._pending_count += 1
        part = encode_message(metadata, payload)
        # A chunk says so in its SEND, as the original producer's did: the receiving broker
        # deduplicates a chunk other than the last apart from whole messages (all the chunks of
        # a message carry its sequence id), and would drop the second as a duplicate otherwise.
        chunk = {"is_chunk": True} if metadata.num_chunks_from_msg > 1 else {}
        if metadata.HasField("marker_type"):
            # A broker's marker (replicated subscriptions): the SEND says so, as Java's does, so
            # that a receiving Pulsar broker does not deduplicate it by its sequence id.
            chunk["marker"] = True
        cmd = command(T.SEND, "send", producer_id=self.producer_id, sequence_id=sequence_id,
                      num_messages=max(1, num_messages), **chunk)
        self._queue(_OpSend(sequence_id, sequence_id, encode_payload_command(cmd, part), [message],
                            self.clock.seconds(), False))
        return message.deferred

    # ------------------------------------------------------------------ batching
    def _add_to_batch(self, message):
        size = len(message.payload)
        # A batch is one entry: it must also fit the broker's limit (Java's BatchMessageContainer
        # bounds it by maxMessageSize too). Member headers take ~16 bytes each.
        entry_limit = (self.max_message_size or DEFAULT_MAX_MESSAGE_SIZE) - 1024
        if self._batch_count and (
                self._batch_bytes + size > self.batching_max_bytes
                or self._batch_bytes + size + 16 * (self._batch_count + 1) > entry_limit
                or message.replicate_to != self._batch_replicate_to):
            # replicate_to is a field of the entry, not of its members: a message going to
            # other clusters starts a new batch. (The Java and C++ clients copy the first
            # message's list into the batch and lose the others'; a flush is what they do on a
            # schema or transaction change, and keeps every message's own list.)
            self._flush_batch()
        if not self._batch_count:
            self._batch_replicate_to = message.replicate_to
        key = (message.ordering_key or message.partition_key) if self.key_based_batching else None
        self._batch.setdefault(key, []).append(message)
        self._batch_count += 1
        self._batch_bytes += size
        if self._batch_count >= self.batching_max_messages or \
                self._batch_bytes >= self.batching_max_bytes or \
                self._batch_bytes + 16 * self._batch_count >= entry_limit:
            self._flush_batch()
        elif self._batch_call is None:
            self._batch_call = self.clock.callLater(self.batching_max_delay, self._batch_timer)

    def _batch_timer(self):
        self._batch_call = None
        self._flush_batch()

    def _flush_batch(self):
        if self._batch_call is not None:
            if self._batch_call.active():
                self._batch_call.cancel()
            self._batch_call = None
        if not self._batch_count:
            return
        groups = sorted(self._batch.values(), key=lambda ms: ms[0].sequence_id)
        self._batch = collections.OrderedDict()
        self._batch_count = 0
        self._batch_bytes = 0
        for messages in groups:
            self._send_batch(messages)

    def _send_batch(self, messages):
        first = messages[0]
        metadata = self._base_metadata(first.sequence_id)
        metadata.num_messages_in_batch = len(messages)
        metadata.highest_sequence_id = messages[-1].sequence_id
        # The entry's key is the first member's (the Java client's BatchMessageContainer): the
        # broker reads keys of entries, not of members, for Key_Shared dispatch.
        if first.partition_key is not None:
            metadata.partition_key = first.partition_key
        if first.ordering_key is not None:
            metadata.ordering_key = first.ordering_key
        if first.replicate_to:
            metadata.replicate_to.extend(first.replicate_to)   # the same for every member
        members = [(single_metadata(m.payload, m.properties, m.partition_key, m.ordering_key,
                                    m.event_timestamp, m.sequence_id), m.payload)
                   for m in messages]
        payload = self._compress_into(metadata, encode_batch(members))
        self._send_op(metadata, payload, messages, batched=True)

    def flush(self) -> defer.Deferred:
        """Send the open batch now; fires once every message pending at call time is settled."""
        self._flush_batch()
        return defer.DeferredList([op.done for op in self._pending], consumeErrors=True)

    # ------------------------------------------------------------------ completion and timeouts
    def _op_finished(self, op):
        self._pending_count -= len(op.messages)
        op.done.callback(None)
        self._unblock()
        self._arm_timeout()

    def _fail_op(self, op, error):
        self._pending_count -= len(op.messages)
        for message in op.messages:
            if not message.deferred.called:
                message.deferred.errback(error)
        op.done.callback(None)
        self._unblock()

    def _unblock(self):
        while self._blocked and self._pending_count < self.max_pending_messages \
                and self.state not in (CLOSING, CLOSED, FAILED):
            self._enqueue(self._blocked.popleft())

    def _fail_all(self, error):
        """Fail everything pending, batched and blocked with ``error``."""
        if self._batch_call is not None and self._batch_call.active():
            self._batch_call.cancel()
        self._batch_call = None
        batched = [m for ms in self._batch.values() for m in ms]
        self._batch = collections.OrderedDict()
        self._batch_count = self._batch_bytes = 0
        ops, self._pending = list(self._pending), collections.deque()
        blocked, self._blocked = list(self._blocked), collections.deque()
        for op in ops:
            self._pending_count -= len(op.messages)
            for message in op.messages:
                message.deferred.errback(error)
            op.done.callback(None)
        for message in batched:
            self._pending_count -= 1
            message.deferred.errback(error)
        if self.state in (CLOSING, CLOSED, FAILED):
            for message in blocked:
                message.deferred.errback(error)
        else:
            self._blocked.extend(blocked)
            self._unblock()

    def _arm_timeout(self):
        if self.send_timeout <= 0 or self._timeout_call is not None or not self._pending:
            return
        due = self._pending[0].created_at + self.send_timeout - self.clock.seconds()
        self._timeout_call = self.clock.callLater(max(0.0, due), self._check_timeout)

    def _check_timeout(self):
        self._timeout_call = None
        if not self._pending:
            return
        if self._pending[0].created_at + self.send_timeout <= self.clock.seconds():
            self.log.info("producer {name} on {topic}: send timed out; failing {n} messages",
                          name=self.producer_name, topic=self.topic, n=self._pending_count)
            self._fail_all(errors.Timeout(f"send to {self.topic} timed out after "
                                          f"{self.send_timeout}s"))
        self._arm_timeout()

    # ------------------------------------------------------------------ closing
    @property
    def pending_count(self) -> int:
        return self._pending_count

    def _send_close(self, cnx):
        request_id = cnx.new_request_id()
        d = cnx.send_request(command(T.CLOSE_PRODUCER, "close_producer",
                                     producer_id=self.producer_id, request_id=request_id),
                             request_id)
        d.addErrback(lambda f: None)  # the broker forgets producers of lost connections anyway
        return d

    @defer.inlineCallbacks
    def close(self):
        """Flush, wait for pending receipts (bounded by the send timeout), then close."""
        if self.state in (CLOSING, CLOSED):
            return None
        if self.state == READY and self._pending_count:
            yield self.flush()
        self.state = CLOSING
        for call in (self._reconnect_call, self._timeout_call, self._batch_call):
            if call is not None and call.active():
                call.cancel()
        self._reconnect_call = self._timeout_call = self._batch_call = None
        self._fail_all(errors.AlreadyClosed("producer closed"))
        cnx, self.cnx = self.cnx, None
        if cnx is not None:
            cnx.unregister_producer(self.producer_id, self)
            if cnx.is_ready:
                yield self._send_close(cnx)
        self.state = CLOSED
        self.client._forget(self)
        return None

    def topic_name(self) -> str:
        return self.topic

    def last_sequence_id(self) -> int:
        return self.last_sequence_id_published
