"""
``Consumer``: one subscription on one topic (or one partition), Deferred-based.

Flow control follows the Java client's ``ConsumerImpl``: after (re)subscribing we grant
``receiver_queue_size`` permits with FLOW; each message handed to the application (``receive``,
the listener) gives back one permit, and once half the queue's worth has been given back they are
sent in one FLOW. Batch entries are unpacked into individual ``Message`` objects whose ids carry
``batch_index``; the entry is acknowledged to the broker only when every index of it has been
acknowledged (no batch-index acks on the wire). Negative acks and the ack timeout ask the broker to
redeliver (REDELIVER_UNACKNOWLEDGED_MESSAGES: by id on Shared/Key_Shared subscriptions, everything
on Exclusive/Failover ones, as the Java client does). On connection loss or CLOSE_CONSUMER the
consumer resubscribes with backoff, drops its local queue (the broker redelivers what was not
acknowledged) and grants fresh permits.
"""

import collections

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.batch import decode_batch
from pulsar_twisted.wire.compression import decompress
from pulsar_twisted.wire.errors import CodecError
from pulsar_twisted.wire.frames import ChecksumMismatch, FrameError, split_message
from pulsar_twisted.client import errors
from pulsar_twisted.client import batch_ack
from pulsar_twisted.common.backoff import Backoff
from pulsar_twisted.client.batch_receive import PendingBatches, as_policy
from pulsar_twisted.client.chunking import ChunkAssembler
from pulsar_twisted.client.connection import T, command
from pulsar_twisted.client.message import Message
from pulsar_twisted.client.message_id import MessageId

Sub = api.CommandSubscribe
Ack = api.CommandAck
from pulsar_twisted.client.handler import (  # noqa: F401 (the states, re-exported)
    CLOSED, CLOSING, CONNECTING, FAILED, READY, ConnectionHandler)

_TYPES = {"Exclusive": Sub.Exclusive, "Shared": Sub.Shared, "Failover": Sub.Failover,
          "Key_Shared": Sub.Key_Shared, "KeyShared": Sub.Key_Shared}
_POSITIONS = {"Latest": Sub.Latest, "Earliest": Sub.Earliest}


def _enum(value, table, what):
    """An enum value from an int, a name, or an official-client enum member."""
    if isinstance(value, str):
        key = value
    else:
        key = getattr(value, "name", None)
        if key is None:
            return int(value)
    for name, number in table.items():
        if name.lower() == key.lower():
            return number
    raise errors.InvalidConfiguration(f"unknown {what} {value!r}")


def consumer_type(value) -> int:
    return _enum(value, _TYPES, "consumer type")


def initial_position(value) -> int:
    return _enum(value, _POSITIONS, "initial position")


class Consumer(ConnectionHandler):
    """
    A subscription ``subscription`` on ``topic``. ``client`` provides ``clock``,
    ``operation_timeout`` and ``connection_for(topic)``. Call ``start()`` (the client does).

    ``message_listener(consumer, message)`` when given receives every message instead of
    ``receive``. Timings are in milliseconds as in the official clients.
    """

    log = Logger()
    _handler_kind = "consumer"
    _connect_verb = "subscribing"

    def __init__(self, client, topic: str, subscription: str, consumer_id: int,
                 consumer_type_=Sub.Exclusive, initial_position_=Sub.Latest,
                 receiver_queue_size: int = 1000, consumer_name: str = None,
                 message_listener=None, ack_timeout_ms: int = 0, ack_timeout_tick_ms: int = 1000,
                 negative_ack_redelivery_delay_ms: int = 60000, properties: dict = None,
                 durable: bool = True, start_message_id: MessageId = None,
                 start_message_id_inclusive: bool = False, read_compacted: bool = False,
                 partition: int = -1, priority_level: int = None,
                 subscription_properties: dict = None, replicate_subscription_state: bool = False,
                 key_shared_allow_out_of_order: bool = False,
                 max_pending_chunked_message: int = 10,
                 auto_ack_oldest_chunked_message_on_queue_full: bool = False,
                 expire_time_of_incomplete_chunked_message_ms: int = 60000,
                 batch_index_ack_enabled: bool = False, dead_letter=None,
                 backoff: Backoff = None, batch_receive_policy=None):
        self.client = client
        self.clock = client.clock
        self.topic = topic
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.sub_type = consumer_type(consumer_type_)
        self.initial_position = initial_position(initial_position_)
        self.receiver_queue_size = max(1, receiver_queue_size)
        self.consumer_name = consumer_name
        self.message_listener = message_listener
        self.ack_timeout = ack_timeout_ms / 1000.0
        self.ack_timeout_tick = max(ack_timeout_tick_ms, 1) / 1000.0
        self.nack_delay = negative_ack_redelivery_delay_ms / 1000.0
        self.properties = dict(properties or {})
        self.durable = durable
        self.start_message_id = start_message_id
        self.start_inclusive = start_message_id_inclusive
        self.read_compacted = read_compacted
        self.partition = partition
        self.priority_level = priority_level
        self.subscription_properties = dict(subscription_properties or {})
        self.replicate_subscription_state = replicate_subscription_state
        self.key_shared_allow_out_of_order = key_shared_allow_out_of_order
        self.backoff = backoff or Backoff()
        self.batch_index_ack_enabled = batch_index_ack_enabled
        # Chunk reassembly, made on the first chunk (nothing to pay when no chunks arrive).
        self.chunk_settings = (max_pending_chunked_message,
                               auto_ack_oldest_chunked_message_on_queue_full,
                               expire_time_of_incomplete_chunked_message_ms / 1000.0)
        self._chunks = None
        self._chunk_timer = None
        self._chunk_keys = {}              # last chunk's (ledger, entry) -> every chunk's
        #: ``dlq.DeadLetterHandler`` shared by the consumers of one subscribe(), or None.
        self.dead_letter = dead_letter
        self._init_handler()
        self.is_active = None
        self.reached_end = False
        self._incoming = collections.deque()
        self._waiters = collections.deque()
        #: The limits of ``batch_receive`` (see ``batch_receive``), and its waiting calls.
        self.batch_receive_policy = as_policy(batch_receive_policy)
        self._batches = PendingBatches(self.clock, self._hand_out, self._incoming.append)
        self._permits = 0                  # processed messages not yet returned with FLOW
        self._batch_acks = {}              # (ledger, entry) -> batch indexes not yet acked
        self._unacked = collections.OrderedDict()   # (ledger, entry) -> delivery time
        self._nacks = {}                   # (ledger, entry) -> redelivery due time
        self._nack_call = None
        self._ack_timer = None
        self._last_dequeued = None
        self._skip_until = None            # ids <= this are dropped (readers, exclusive start)
        if start_message_id is not None and not start_message_id_inclusive \
                and start_message_id not in (MessageId.earliest, MessageId.latest):
            self._skip_until = start_message_id

    # ------------------------------------------------------------------ lifecycle
    # start() (subscribe; fires with ``self`` or fails with the broker's error), the reconnect
    # loop and connection_closed come from ConnectionHandler.

    def _subscribe_command(self, request_id):
        cmd = command(T.SUBSCRIBE, "subscribe", topic=self.topic, subscription=self.subscription,
                      subType=self.sub_type, consumer_id=self.consumer_id, request_id=request_id,
                      consumer_name=self.consumer_name, durable=self.durable,
                      initialPosition=self.initial_position, read_compacted=self.read_compacted,
                      priority_level=self.priority_level,
                      replicate_subscription_state=self.replicate_subscription_state)
        sub = cmd.subscribe
        start = self._resubscribe_start()
        if start is not None:
            start.to_proto(sub.start_message_id)
        for key, value in self.properties.items():
            sub.metadata.add(key=key, value=value)
        for key, value in self.subscription_properties.items():
            sub.subscription_properties.add(key=key, value=value)
        if self.sub_type == Sub.Key_Shared:
            sub.keySharedMeta.keySharedMode = api.AUTO_SPLIT
            sub.keySharedMeta.allowOutOfOrderDelivery = self.key_shared_allow_out_of_order
        return cmd

    def _resubscribe_start(self):
        """Where a non-durable subscription (a reader) starts: after what it already delivered."""
        if self.durable:
            return None
        if self._last_dequeued is not None:
            self._skip_until = self._last_dequeued
            return self._last_dequeued.ledger_entry()
        if self.start_message_id is not None:
            return self.start_message_id.ledger_entry() if self.start_message_id.is_batch() \
                else self.start_message_id
        return None

    def _attach(self, cnx):
        if self.state != CONNECTING:
            return
        request_id = cnx.new_request_id()
        cnx.register_consumer(self.consumer_id, self)
        d = cnx.send_request(self._subscribe_command(request_id), request_id)

        def subscribed(_):
            self._subscribed(cnx)

        def refused(failure):
            cnx.unregister_consumer(self.consumer_id, self)
            return failure

        d.addCallbacks(subscribed, refused)
        return d

    def _subscribed(self, cnx):
        if self.state != CONNECTING:
            cnx.unregister_consumer(self.consumer_id, self)
            self._send_close(cnx)
            return
        if not cnx.is_ready:
            self._schedule_reconnect()
            return
        self._became_ready(cnx)
        # Whatever was queued locally is redelivered by the broker to the new subscription.
        self._incoming.clear()
        self._batches.clear()
        if self._chunks is not None:
            self._chunks.clear()
        self._permits = 0
        self._send_flow(self.receiver_queue_size)
        self._fire_started()

    def _give_up(self, error):
        self._fail_waiters(error)

    # Called by the connection ------------------------------------------------------------
    def closed_by_broker(self):
        self._connection_gone()

    def active_consumer_changed(self, is_active):
        self.is_active = is_active

    def reached_end_of_topic(self):
        self.reached_end = True

    def message_received(self, cmd, message_bytes):
        mid = cmd.message_id
        ledger_id, entry_id = MessageId.from_proto(mid).entry_key()
        try:
            metadata_bytes, payload = split_message(message_bytes or b"", verify=True)
            metadata = api.MessageMetadata()
            metadata.ParseFromString(metadata_bytes)
        except ChecksumMismatch:
            self._discard(ledger_id, entry_id, Ack.ChecksumMismatch, 1)
            return
        except (FrameError, Exception):
            self._discard(ledger_id, entry_id, Ack.BatchDeSerializeError, 1)
            return
        batched = metadata.HasField("num_messages_in_batch")
        count = metadata.num_messages_in_batch if batched else 1
        message_id = None
        if metadata.num_chunks_from_msg > 1 and not batched:
            assembled = self._chunk_received(metadata, payload, ledger_id, entry_id)
            if assembled is None:
                return
            payload, message_id = assembled
        try:
            # Bounded by the announced size only: an honest message may inflate past
            # maxMessageSize (chunked, or very compressible), and the data comes from our broker.
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size, None)
        except CodecError:
            self._discard(ledger_id, entry_id, Ack.DecompressionError, count)
            return
        redelivery_count = cmd.redelivery_count
        if not batched:
            if message_id is None:
                message_id = MessageId(ledger_id, entry_id, -1, self.partition)
            message = Message(payload, message_id, metadata, self.topic, redelivery_count)
            if self.dead_letter is not None:
                self.dead_letter.received(self, message)
            self._deliver(message)
            return
        try:
            members = decode_batch(payload, count)
        except CodecError:
            self._discard(ledger_id, entry_id, Ack.BatchDeSerializeError, count)
            return
        wanted = range(count)
        if cmd.ack_set:
            # The broker acked some indexes already (batch-index acks): set bits are still due.
            wanted = [i for i in wanted if batch_ack.bit_is_set(cmd.ack_set, i)]
            for _ in range(count - len(wanted)):
                self._message_processed()
        self._batch_acks[(ledger_id, entry_id)] = set(wanted)
        for index in wanted:
            single, data = members[index]
            message_id = MessageId(ledger_id, entry_id, index, self.partition, count)
            message = Message(data, message_id, metadata, self.topic, redelivery_count, single)
            if self.dead_letter is not None:
                self.dead_letter.received(self, message)
            self._deliver(message)

    # ------------------------------------------------------------------ chunks
    def _chunk_received(self, metadata, payload, ledger_id, entry_id):
        """One chunk: ``(payload, ChunkMessageId)`` once its message is whole, else None."""
        if self._chunks is None:
            pending, auto_ack, expire = self.chunk_settings
            self._chunks = ChunkAssembler(self._discard_chunks, pending, auto_ack, expire)
        chunk_id = MessageId(ledger_id, entry_id, -1, self.partition)
        done = self._chunks.add(metadata, payload, chunk_id, self.clock.seconds())
        if done is None:
            # Each chunk took a permit; only the whole message is handed out.
            self._message_processed()
            self._arm_chunk_timer()
            return None
        self._chunk_keys[done[1].entry_key()] = done[1].entry_keys()
        return done

    def _discard_chunks(self, message_ids, ack):
        if ack and self.cnx is not None:
            cmd = command(T.ACK, "ack", consumer_id=self.consumer_id, ack_type=Ack.Individual)
            for message_id in message_ids:
                message_id.to_proto(cmd.ack.message_id.add(), with_batch=False)
            self.cnx.send_command(cmd)

    def _arm_chunk_timer(self):
        if self._chunk_timer is None and self._chunks and self._chunks.expire_seconds > 0:
            self._chunk_timer = self.clock.callLater(self._chunks.expire_seconds,
                                                     self._chunk_tick)

    def _chunk_tick(self):
        self._chunk_timer = None
        self._chunks.expire(self.clock.seconds())
        self._arm_chunk_timer()

    def _discard(self, ledger_id, entry_id, validation_error, count):
        """A corrupt entry: ack it with the reason (as the Java client does) and free its permits."""
        self.log.warn("consumer on {topic}: discarding corrupt entry {l}:{e}", topic=self.topic,
                      l=ledger_id, e=entry_id)
        if self.cnx is not None:
            cmd = command(T.ACK, "ack", consumer_id=self.consumer_id, ack_type=Ack.Individual,
                          validation_error=validation_error)
            MessageId(ledger_id, entry_id).to_proto(cmd.ack.message_id.add())
            self.cnx.send_command(cmd)
        for _ in range(count):
            self._message_processed()

    def _deliver(self, message):
        if self._skip_until is not None:
            if message.message_id() <= self._skip_until_in_partition():
                self._message_processed()
                return
        if self._waiters:
            self._hand_out(message)
            self._waiters.popleft().callback(message)
        elif self.message_listener is not None:
            self._hand_out(message)
            try:
                self.message_listener(self, message)
            except Exception:
                self.log.failure("message listener of {topic} raised", topic=self.topic)
        elif self._batches:
            self._batches.offer(message)
        else:
            self._incoming.append(message)

    def _skip_until_in_partition(self):
        skip = self._skip_until
        if skip.partition != self.partition:
            skip = MessageId(skip.ledger_id, skip.entry_id, skip.batch_index, self.partition)
        return skip

    # ------------------------------------------------------------------ receiving
    def _hand_out(self, message):
        """Bookkeeping for a message the application now holds."""
        self._last_dequeued = message.message_id()
        self._skip_until = None
        if self.ack_timeout > 0:
            key = message.message_id().entry_key()
            if key not in self._unacked:
                self._unacked[key] = self.clock.seconds()
            self._arm_ack_timer()
        self._message_processed()

    def _message_processed(self):
        self._permits += 1
        if self._permits >= max(1, self.receiver_queue_size // 2):
            permits, self._permits = self._permits, 0
            self._send_flow(permits)

    def _send_flow(self, permits):
        if self.cnx is not None and permits > 0:
            self.cnx.send_command(command(T.FLOW, "flow", consumer_id=self.consumer_id,
                                          messagePermits=permits))

    def receive(self, timeout: float = None) -> defer.Deferred:
        """
        The next message (a Deferred). ``timeout`` in seconds fails it with ``Timeout``;
        cancelling the Deferred gives up the wait.
        """
        if self.state in (CLOSING, CLOSED, FAILED):
            return defer.fail(errors.AlreadyClosed(f"consumer on {self.topic} is {self.state}"))
        if self._incoming:
            message = self._incoming.popleft()
            self._hand_out(message)
            return defer.succeed(message)
        d = defer.Deferred(lambda d: self._waiters.remove(d) if d in self._waiters else None)
        self._waiters.append(d)
        if timeout is not None:
            call = self.clock.callLater(timeout, self._receive_timed_out, d, timeout)
            d.addBoth(self._cancel_call, call)
        return d

    @staticmethod
    def _cancel_call(result, call):
        if call.active():
            call.cancel()
        return result

    def _receive_timed_out(self, d, timeout):
        if d in self._waiters:
            self._waiters.remove(d)
            d.errback(errors.Timeout(f"no message within {timeout}s"))

    def batch_receive(self, policy=None) -> defer.Deferred:
        """
        A list of messages (a Deferred), within ``policy`` (default: the consumer's
        ``batch_receive_policy``; ``max_num_messages`` capped at ``receiver_queue_size`` as the
        official clients do): at once if what is queued reaches a limit, else when arrivals reach
        one or when its timeout passes, with what came (possibly an empty list). Not with a
        message listener (``InvalidConfiguration``), as in the Java client.
        """
        if self.state in (CLOSING, CLOSED, FAILED):
            return defer.fail(errors.AlreadyClosed(f"consumer on {self.topic} is {self.state}"))
        if self.message_listener is not None:
            return defer.fail(errors.InvalidConfiguration(
                "batch_receive is not allowed on a consumer with a message listener"))
        try:
            policy = as_policy(policy) if policy is not None else self.batch_receive_policy
        except errors.PulsarException as e:
            return defer.fail(e)
        return self._batches.start(policy.capped(self.receiver_queue_size), self._incoming)

    def available_messages(self) -> int:
        """Messages received from the broker and not yet handed out."""
        return len(self._incoming)

    # ------------------------------------------------------------------ acknowledging
    @staticmethod
    def _id_of(message) -> MessageId:
        return message.message_id() if isinstance(message, Message) else message

    def acknowledge(self, message) -> defer.Deferred:
        """Acknowledge one message (a ``Message`` or ``MessageId``)."""
        message_id = self._id_of(message)
        key = message_id.entry_key()
        if message_id.is_batch():
            remaining = self._batch_acks.get(key)
            if remaining is not None:
                remaining.discard(message_id.batch_index)
                if remaining:
                    if self.batch_index_ack_enabled:
                        return self._send_ack(Ack.Individual, message_id, remaining)
                    return defer.succeed(None)
                del self._batch_acks[key]
        self._unacked.pop(key, None)
        self._nacks.pop(key, None)
        if self.dead_letter is not None:
            self.dead_letter.forget(self, key)
        chunk_keys = self._chunk_keys.pop(key, None)
        if chunk_keys is not None:
            return self._send_ack_keys(chunk_keys)
        return self._send_ack(Ack.Individual, message_id)

    def acknowledge_cumulative(self, message) -> defer.Deferred:
        """Acknowledge every message up to and including this one (not on Shared/Key_Shared)."""
        if self.sub_type in (Sub.Shared, Sub.Key_Shared):
            return defer.fail(errors.InvalidConfiguration(
                "cumulative acks are not allowed on Shared or Key_Shared subscriptions"))
        message_id = self._id_of(message)
        key = message_id.entry_key()
        target = message_id
        if message_id.is_batch():
            remaining = self._batch_acks.get(key)
            if remaining is not None:
                remaining.difference_update(range(message_id.batch_index + 1))
                if remaining and self.batch_index_ack_enabled:
                    # The broker keeps the rest of the entry as an ack set.
                    self._send_ack(Ack.Cumulative, message_id, remaining)
                    return self._forget_up_to(message_id.ledger_entry(), key, strict=True)
                if remaining:
                    # Part of the entry is still unacked: the broker can only move to the entry
                    # before it (the Java client's "previous batch" cumulative ack).
                    target = MessageId(message_id.ledger_id, message_id.entry_id - 1,
                                       -1, message_id.partition)
                else:
                    del self._batch_acks[key]
        self._forget_up_to(target, key)
        if target.entry_id < 0:
            return defer.succeed(None)
        return self._send_ack(Ack.Cumulative, target)

    def _forget_up_to(self, target, key, strict=False):
        limit = target.entry_key()
        for tracked in [k for k in self._unacked if (k < limit if strict else k <= limit)]:
            del self._unacked[tracked]
        for tracked in [k for k in self._batch_acks if k < key]:
            del self._batch_acks[tracked]
        if self.dead_letter is not None:
            self.dead_letter.forget_up_to(self, limit)
        for tracked in [k for k in self._chunk_keys if k <= limit]:
            del self._chunk_keys[tracked]
        return defer.succeed(None)

    def _send_ack(self, ack_type, message_id, remaining=None) -> defer.Deferred:
        """ACK ``message_id``'s entry; with ``remaining`` (batch indexes) as a batch-index ack."""
        if self.cnx is None:
            # Not connected: the broker redelivers unacked messages anyway; Java drops it too.
            return defer.succeed(None)
        cmd = command(T.ACK, "ack", consumer_id=self.consumer_id, ack_type=ack_type)
        data = message_id.to_proto(cmd.ack.message_id.add(), with_batch=False)
        if remaining is not None:
            data.ack_set.extend(batch_ack.to_words(remaining, message_id.batch_size))
        self.cnx.send_command(cmd)
        return defer.succeed(None)

    def _send_ack_keys(self, entry_keys) -> defer.Deferred:
        """One individual ACK for several entries (the chunks of a chunked message)."""
        if self.cnx is not None:
            cmd = command(T.ACK, "ack", consumer_id=self.consumer_id, ack_type=Ack.Individual)
            for ledger_id, entry_id in entry_keys:
                MessageId(ledger_id, entry_id, -1, self.partition).to_proto(
                    cmd.ack.message_id.add())
            self.cnx.send_command(cmd)
        return defer.succeed(None)

    def negative_acknowledge(self, message) -> None:
        """Ask for redelivery of this message after ``negative_ack_redelivery_delay_ms``."""
        key = self._id_of(message).entry_key()
        self._unacked.pop(key, None)
        self._batch_acks.pop(key, None)
        due = self.clock.seconds() + self.nack_delay
        self._nacks.setdefault(key, due)
        if self._nack_call is None:
            self._nack_call = self.clock.callLater(self.nack_delay, self._nack_timer)

    def _nack_timer(self):
        self._nack_call = None
        now = self.clock.seconds()
        due = [key for key, when in self._nacks.items() if when <= now]
        for key in due:
            del self._nacks[key]
        if due:
            self.redeliver(due)
        if self._nacks:
            delay = max(0.0, min(self._nacks.values()) - now)
            self._nack_call = self.clock.callLater(delay, self._nack_timer)

    def _arm_ack_timer(self):
        if self._ack_timer is None and self.ack_timeout > 0:
            self._ack_timer = self.clock.callLater(self.ack_timeout_tick, self._ack_tick)

    def _ack_tick(self):
        self._ack_timer = None
        limit = self.clock.seconds() - self.ack_timeout
        expired = [key for key, when in self._unacked.items() if when <= limit]
        for key in expired:
            del self._unacked[key]
            self._batch_acks.pop(key, None)
        if expired:
            self.log.debug("consumer on {topic}: {n} messages not acked in time; redelivering",
                           topic=self.topic, n=len(expired))
            self.redeliver(expired)
        if self._unacked:
            self._arm_ack_timer()

    def redeliver(self, entry_keys=None) -> None:
        """
        Ask the broker to redeliver ``entry_keys`` ((ledger, entry) pairs), or every unacked
        message when None or when the subscription is Exclusive/Failover (the Java client's rule).
        """
        if self.cnx is None:
            return
        cmd = command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, "redeliverUnacknowledgedMessages",
                      consumer_id=self.consumer_id)
        if entry_keys is not None and self.sub_type in (Sub.Shared, Sub.Key_Shared):
            if self.dead_letter is not None:
                # Messages redelivered max_redeliver_count times go to the dead-letter topic.
                entry_keys = self.dead_letter.divert(self, entry_keys)
            self._redeliver_ids(entry_keys)
            return
        cleared = len(self._incoming) + self._batches.clear()
        self._incoming.clear()
        self._unacked.clear()
        self._batch_acks.clear()
        self._chunk_keys.clear()
        if self.dead_letter is not None:
            self.dead_letter.forget_all(self)
        self.cnx.send_command(cmd)
        for _ in range(cleared):
            self._message_processed()

    def _redeliver_ids(self, entry_keys) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES for these entries (every chunk of chunked ones)."""
        if self.cnx is None or not entry_keys:
            return
        if self._chunk_keys:
            entry_keys = [k for key in entry_keys for k in self._chunk_keys.pop(key, [key])]
        cmd = command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES, "redeliverUnacknowledgedMessages",
                      consumer_id=self.consumer_id)
        for ledger_id, entry_id in entry_keys:
            MessageId(ledger_id, entry_id, -1, self.partition).to_proto(
                cmd.redeliverUnacknowledgedMessages.message_ids.add())
        self.cnx.send_command(cmd)

    def reconsume_later(self, message, delay_seconds: float = 0,
                        properties: dict = None) -> defer.Deferred:
        """
        Publish ``message`` to the retry-letter topic, delivered again after ``delay_seconds``,
        and acknowledge it here (needs ``enable_retry=True``; see ``dlq``).
        """
        if self.dead_letter is None:
            return defer.fail(errors.InvalidConfiguration(
                "reconsume_later needs a consumer subscribed with enable_retry=True"))
        return self.dead_letter.reconsume_later(self, message, delay_seconds, properties)

    def redeliver_unacknowledged_messages(self) -> None:
        self.redeliver(None)

    # ------------------------------------------------------------------ requests
    def _request(self, cmd, request_id):
        if self.state in (CLOSING, CLOSED, FAILED):
            return defer.fail(errors.AlreadyClosed(f"consumer on {self.topic} is {self.state}"))
        if self.cnx is None:
            return defer.fail(errors.ConnectError(f"consumer on {self.topic} is not connected"))
        return self.cnx.send_request(cmd, request_id)

    def _new_request_id(self):
        return self.cnx.new_request_id() if self.cnx is not None else 0

    def get_last_message_id(self) -> defer.Deferred:
        """Fires with the ``MessageId`` of the topic's last message (entry -1: empty)."""
        request_id = self._new_request_id()
        d = self._request(command(T.GET_LAST_MESSAGE_ID, "getLastMessageId",
                                  consumer_id=self.consumer_id, request_id=request_id), request_id)
        return d.addCallback(lambda answer: MessageId.from_proto(
            answer.getLastMessageIdResponse.last_message_id, self.partition))

    #: Fields of CONSUMER_STATS_RESPONSE handed out by ``get_broker_stats`` (Java's
    #: ``BrokerConsumerStats``).
    BROKER_STATS_FIELDS = ("msgRateOut", "msgThroughputOut", "msgRateRedeliver", "consumerName",
                           "availablePermits", "unackedMessages", "blockedConsumerOnUnackedMsgs",
                           "address", "connectedSince", "type", "msgRateExpired", "msgBacklog")

    def get_broker_stats(self) -> defer.Deferred:
        """
        Fires with the broker's stats of this consumer (CONSUMER_STATS, as the Java client's
        ``getBrokerConsumerStatsAsync``): a dict of ``BROKER_STATS_FIELDS``; the rates are the
        broker's over its last stats period. Fails with the broker's error.
        """
        request_id = self._new_request_id()
        d = self._request(command(T.CONSUMER_STATS, "consumerStats",
                                  consumer_id=self.consumer_id, request_id=request_id), request_id)

        def fields(answer):
            stats = answer.consumerStatsResponse
            return {name: getattr(stats, name) for name in self.BROKER_STATS_FIELDS}
        return d.addCallback(fields)

    def seek(self, target) -> defer.Deferred:
        """Move the subscription to a ``MessageId`` or a publish time (ms since the epoch)."""
        request_id = self._new_request_id()
        cmd = command(T.SEEK, "seek", consumer_id=self.consumer_id, request_id=request_id)
        if isinstance(target, MessageId):
            target.ledger_entry().to_proto(cmd.seek.message_id)
        else:
            cmd.seek.message_publish_time = int(target)
        d = self._request(cmd, request_id)

        def done(_):
            # What we hold is from before the seek; a reader restarts from the target.
            self._incoming.clear()
            self._batches.clear()
            self._unacked.clear()
            self._batch_acks.clear()
            self._last_dequeued = None
            if isinstance(target, MessageId):
                self.start_message_id = target
                self._skip_until = None
            elif not self.durable:
                self.start_message_id = None
            return None

        return d.addCallback(done)

    @defer.inlineCallbacks
    def has_message_available(self):
        """Whether a message after the last one handed out exists (readers use this)."""
        if self._incoming:
            return True
        last = yield self.get_last_message_id()
        if last.entry_id < 0 or last.ledger_id < 0:
            return False
        current = self._last_dequeued
        if current is None:
            start = self.start_message_id
            if start is None or start == MessageId.earliest:
                return True
            if start == MessageId.latest:
                return False
            if self.start_inclusive:
                return last.entry_key() >= start.entry_key()
            current = start
        if last.entry_key() != current.entry_key():
            return last.entry_key() > current.entry_key()
        if current.is_batch() and current.batch_size:
            return current.batch_index < current.batch_size - 1
        return last.batch_index > current.batch_index

    def unsubscribe(self) -> defer.Deferred:
        """Delete the subscription (fails with the broker's error if others are attached)."""
        request_id = self._new_request_id()
        d = self._request(command(T.UNSUBSCRIBE, "unsubscribe", consumer_id=self.consumer_id,
                                  request_id=request_id), request_id)
        return d.addCallback(lambda _: self._shut_down())

    # ------------------------------------------------------------------ closing
    def _send_close(self, cnx):
        request_id = cnx.new_request_id()
        d = cnx.send_request(command(T.CLOSE_CONSUMER, "close_consumer",
                                     consumer_id=self.consumer_id, request_id=request_id),
                             request_id)
        return d.addErrback(lambda f: None)

    def _fail_waiters(self, error):
        waiters, self._waiters = list(self._waiters), collections.deque()
        for d in waiters:
            d.errback(error)
        self._batches.fail(error)

    def _shut_down(self):
        self.state = CLOSED
        for call in (self._reconnect_call, self._nack_call, self._ack_timer, self._chunk_timer):
            if call is not None and call.active():
                call.cancel()
        self._reconnect_call = self._nack_call = self._ack_timer = self._chunk_timer = None
        if self.cnx is not None:
            self.cnx.unregister_consumer(self.consumer_id, self)
            self.cnx = None
        self._fail_waiters(errors.AlreadyClosed("consumer closed"))
        self._incoming.clear()
        self.client._forget(self)
        return None

    @defer.inlineCallbacks
    def close(self):
        """Close the consumer on the broker (its subscription stays, unacked messages too)."""
        if self.state in (CLOSING, CLOSED):
            return None
        cnx = self.cnx
        self.state = CLOSING
        if cnx is not None and cnx.is_ready:
            yield self._send_close(cnx)
        self._shut_down()
        if self.dead_letter is not None and getattr(self.dead_letter, "owner", None) is self:
            yield self.dead_letter.close()
        return None

    def topic_name(self) -> str:
        return self.topic

    def subscription_name(self) -> str:
        return self.subscription

    def has_reached_end_of_topic(self) -> bool:
        return self.reached_end
