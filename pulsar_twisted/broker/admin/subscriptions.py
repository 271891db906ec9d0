"""
Subscriptions of the admin API (Pulsar's ``PersistentTopicsBase``, subscription level): listing,
creation and deletion, skip, clear backlog, reset cursor, expiry, peek and the replicated
subscription status. On a partitioned topic each operation runs on every partition (Pulsar's
behaviour), except reset to a message id and peek, which name one partition.
"""

from pulsar_twisted.broker.admin.base import AdminArea, position_from
from pulsar_twisted.broker.admin.errors import (
    AdminError, BadRequest, Conflict, NotAllowed, NotFound, PreconditionFailed)
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import TopicName, subscription_name_problem
from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger.stats import iso_ms, position_text
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.checks import check_int
from pulsar_twisted.wire import frames
from pulsar_twisted.wire.compression import DEFAULT_MAX_UNCOMPRESSED, decompress
from pulsar_twisted.wire.errors import InvalidMessage
from pulsar_twisted.wire.frames import FrameError
from pulsar_twisted.wire.frames import entry_metadata


class SubscriptionsAdmin(AdminArea):
    """Subscriptions of topics (their cursors, for persistent ones)."""

    async def list_subscriptions(self, name: TopicName) -> list:
        partitions = 0 if name.partition_index >= 0 else await self.broker.partitions_of(name)
        if partitions:
            found = set()
            for i in range(partitions):
                try:
                    found.update(await self.list_subscriptions(name.partition(i)))
                except NotFound:
                    pass
            return sorted(found)
        topic = await self.load(name)
        return sorted(topic.subscriptions)

    async def _subscription(self, name: TopicName, sub: str):
        topic = await self.load(name)
        subscription = topic.subscriptions.get(sub)
        if subscription is None:
            raise NotFound("Subscription not found")
        return topic, subscription

    async def create_subscription(self, name: TopicName, sub: str, message_id=None) -> None:
        """A durable subscription at ``message_id`` (a dict {ledgerId, entryId}) or the end."""
        if subscription_name_problem(sub):
            # The shared rule (common.naming): non-empty, bounded, UTF-8, no NUL.
            raise PreconditionFailed("Subscription name is not valid")
        position = position_from(message_id) if message_id is not None else None

        async def create(topic_name):
            topic = await self.load(topic_name)
            if not topic_name.persistent:
                raise NotAllowed("Subscriptions of non-persistent topics exist only with consumers")
            if sub in topic.subscriptions:
                raise Conflict("Subscription already exists for topic")
            await self.broker.create_subscription(topic_name, sub, position)
        await self.each_partition(name, create)

    async def delete_subscription(self, name: TopicName, sub: str, force: bool = False) -> None:
        async def delete(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            try:
                await self.broker.delete_subscription(topic, sub, force=force)
            except errors.ConsumerBusy as e:
                raise PreconditionFailed(str(e))
        await self.each_partition(name, delete)

    async def skip_messages(self, name: TopicName, sub: str, count) -> None:
        """Acknowledge the next ``count`` unacknowledged messages (entries) of the subscription."""
        count = check_int(count, "numMessages", 0)

        async def skip(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            if not topic.persistent:
                raise NotAllowed("Skip is not supported on non-persistent topics")
            cursor = subscription.cursor
            if await cursor.skip_unacked(count):
                subscription.new_entries()
        await self.each_partition(name, skip)

    async def skip_all(self, name: TopicName, sub: str) -> None:
        """Clear the backlog: everything up to the last entry acknowledged."""
        async def clear(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            if not topic.persistent:
                return
            cursor = subscription.cursor
            last = topic.ledger.last_confirmed_entry()
            if last > cursor.mark_delete_position:
                await cursor.mark_delete(last)
        await self.each_partition(name, clear)

    async def reset_cursor_to_time(self, name: TopicName, sub: str, timestamp_ms) -> None:
        timestamp_ms = check_int(timestamp_ms, "timestamp")

        async def reset(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            if not topic_name.persistent:
                raise NotAllowed("Reset cursor is not supported on non-persistent topics")
            await subscription.seek_by_time(timestamp_ms)
        await self.each_partition(name, reset)

    async def reset_cursor_to_id(self, name: TopicName, sub: str, message_id, excluded=False) -> None:
        position = position_from(message_id)
        topic, subscription = await self._subscription(name, sub)
        if not name.persistent:
            raise NotAllowed("Reset cursor is not supported on non-persistent topics")
        if excluded:
            position = Position(position.ledger_id, position.entry_id + 1)
        await subscription.seek(position)

    async def expire_messages(self, name: TopicName, sub: str, seconds) -> None:
        """Acknowledge every message published more than ``seconds`` ago."""
        seconds = check_int(seconds, "expireTimeInSeconds", 0)

        async def expire(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            if not topic.persistent:
                return
            cursor = subscription.cursor
            cutoff_ms = int(self.clock.seconds() * 1000) - seconds * 1000
            first_kept = await topic.find_position_by_time(cutoff_ms + 1)
            last_expired = _previous_position(topic.ledger, first_kept)
            if last_expired is not None and last_expired > cursor.mark_delete_position:
                await cursor.mark_delete(last_expired)
                subscription.new_entries()
        await self.each_partition(name, expire)

    async def peek_message(self, name: TopicName, sub: str, n) -> tuple:
        """
        The ``n``-th (1-based) unacknowledged entry of the subscription as
        ``(headers: dict, payload: bytes)`` with Pulsar's X-Pulsar-* headers (payload decompressed).
        """
        n = check_int(n, "messagePosition", 1)
        topic, subscription = await self._subscription(name, sub)
        if not topic.persistent:
            raise NotAllowed("Peek is not supported on non-persistent topics")
        cursor = subscription.cursor
        position = cursor.nth_unacked_position(n)
        if position is None:
            raise NotFound("Message not found")
        entries = await topic.ledger.read_entries(position, 1)
        if not entries:
            raise NotFound("Message not found")
        return entry_response(entries[0].position, entries[0].data,
                              self.context.config.maxMessageSize + frames.FRAME_PADDING)


    # ------------------------------------------------------------ replicated subscriptions
    async def set_replicated_subscription_status(self, name: TopicName, sub: str, enabled) -> None:
        """
        Mark the subscription replicated (or not) on the topic or on every partition of a
        partitioned one (Pulsar's ``internalSetReplicatedSubscriptionStatus``). ``enabled`` is the
        request's JSON body: a boolean, else 400. 405 on a non-persistent topic; 404 for a missing
        topic or subscription; 500 "Failed to update cursor properties" when enabling on a broker
        with ``enableReplicatedSubscriptions=false`` (Pulsar's ``setReplicated`` then stores
        nothing and answers that).
        """
        if not isinstance(enabled, bool):
            # Pulsar's body is a Java boolean; Jackson's coercions (1, "true", null) are not
            # copied: anything but true/false is refused.
            raise BadRequest("Body must be a JSON boolean: true or false")
        if not name.persistent:
            raise NotAllowed("Cannot enable/disable replicated subscriptions on non-persistent topics")

        async def apply(topic_name):
            _topic, subscription = await self._replicated_subscription(topic_name, sub)
            if enabled and not self.context.config.enableReplicatedSubscriptions:
                raise CursorUpdateFailed("Failed to update cursor properties: "
                                         "enableReplicatedSubscriptions is false on this broker")
            await subscription.set_replicated(enabled)
        await self._every_partition(name, apply)

    async def replicated_subscription_status(self, name: TopicName, sub: str) -> dict:
        """``{topic name: replicated}`` for the topic, or one entry per partition of a partitioned
        one (Pulsar's ``internalGetReplicatedSubscriptionStatus``); 405 on a non-persistent topic,
        404 for a missing topic or subscription."""
        if not name.persistent:
            raise NotAllowed("Cannot get replicated subscriptions on non-persistent topics")
        status = {}

        async def read(topic_name):
            _topic, subscription = await self._replicated_subscription(topic_name, sub)
            status[str(topic_name)] = bool(subscription.replicated)
        await self._every_partition(name, read)
        return status

    async def _replicated_subscription(self, name: TopicName, sub: str):
        """The topic and its subscription with Pulsar's texts for these two routes."""
        topic = await self.load(name)
        subscription = topic.subscriptions.get(sub)
        if subscription is None:
            raise NotFound(f"Subscription {sub} not found for topic {name}")
        return topic, subscription

    async def _every_partition(self, name: TopicName, call) -> None:
        """``each_partition`` that, on a partitioned topic, goes on past a partition that lacks
        the topic or subscription and then answers Pulsar's 404 "Topic or subscription not found"
        (its broker calls every partition and waits for them all); any other failure stops."""
        partitions = 0 if name.partition_index >= 0 else await self.broker.partitions_of(name)
        if not partitions:
            await call(name)
            return
        await self.check_namespace(name)
        missing = False
        for i in range(partitions):
            try:
                await call(name.partition(i))
            except NotFound:
                missing = True
        if missing:
            raise NotFound("Topic or subscription not found")


class CursorUpdateFailed(AdminError):
    """Pulsar's 500 when ``PersistentSubscription.setReplicated`` reports nothing stored."""

    status = 500


def _previous_position(ledger, position):
    """The stored entry just before ``position`` (None if there is none)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    previous = None
    for info in ledger.ledgers_info():
        if info["ledgerId"] >= position.ledger_id:
            break
        if info["entries"] > 0:
            previous = Position(info["ledgerId"], info["entries"] - 1)
    return previous


# ------------------------------------------------------------------------------------ peek
def _decompress(kind: int, data: bytes, size: int, max_size: int) -> bytes:
    """The payload decoded with the codecs the clients use (one implementation of Pulsar's
    encodings, ``wire/compression.py``), never inflated past the announced size or ``max_size``;
    a payload that does not decode is a 412 naming why."""
    try:
        return decompress(kind, data, size, max_size)
    except InvalidMessage as e:
        raise PreconditionFailed(f"Message payload cannot be decoded: {e}")


def entry_response(position, data: bytes, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> tuple:
    """
    A stored entry as Pulsar's peek answers it: X-Pulsar-* headers and the (decoded) payload,
    inflated to at most ``max_size`` (maxMessageSize plus padding). Bytes that are no message
    are a 412, not a 500.
    """
    try:
        meta_bytes, payload = frames.split_message(data, verify=False)
        metadata = entry_metadata(data)
    except FrameError as e:
        raise PreconditionFailed(f"Stored entry is not a readable message: {e}")
    headers = {"X-Pulsar-Message-ID": position_text(position),
               "X-Pulsar-publish-time": iso_ms(metadata.publish_time)}
    if metadata.HasField("producer_name"):
        headers["X-Pulsar-producer-name"] = metadata.producer_name
    if metadata.HasField("sequence_id"):
        headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("event_time") and metadata.event_time:
        headers["X-Pulsar-event-time"] = iso_ms(metadata.event_time)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.HasField("compression") and metadata.compression != api.NONE:
        headers["X-Pulsar-compression"] = api.CompressionType.Name(metadata.compression)
    for kv in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    body = _decompress(metadata.compression if metadata.HasField("compression") else api.NONE,
                       payload, metadata.uncompressed_size, max_size)
    return headers, body
