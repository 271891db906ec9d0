"""
Shared subscriptions: messages spread round-robin over the consumers that have permits.

Each consumer's sent-but-unacked positions are kept; when it leaves (or asks for redelivery) they
go into the replay set, with their redelivery count raised, and are sent again to whoever has
permits before any new entry. A consumer holding ``maxUnackedMessagesPerConsumer`` unacked
messages gets nothing more until it acks half of them; the subscription stops reading at
``maxUnackedMessagesPerSubscription``.
"""

import heapq

from pulsar_twisted.broker.delayed import DelayedDeliveryTracker
from pulsar_twisted.broker.dispatch.base import PersistentDispatcher
from pulsar_twisted.broker.entryinfo import lenient_metadata


#: Chunked messages being delivered at once on one subscription before the oldest is forgotten.
MAX_CHUNK_OWNERS = 10_000


class SharedDispatcher(PersistentDispatcher):
    tracks_pending = True

    def __init__(self, subscription, cursor, clock, config):
        super().__init__(subscription, cursor, clock, config)
        self.max_unacked_subscription = config.maxUnackedMessagesPerSubscription
        #: position -> routing hash (None for Shared): messages to send again before new ones.
        self.replay = {}
        self._next = 0
        self._replaying = False
        #: Set when a replay round delivered nothing (every replayed message's consumer is busy):
        #: new entries are read instead until something changes (flow, ack, consumers).
        self.replay_stalled = False
        #: Messages with a future deliver_at_time wait here (``delayed`` module), when enabled.
        self.delayed = (DelayedDeliveryTracker(clock, config.delayedDeliveryTickTimeMillis, self._delayed_due)
                        if config.delayedDeliveryEnabled else None)
        #: uuid -> consumer receiving the chunks of that chunked message (all go to one consumer).
        self.chunk_owners = {}

    def _delayed_due(self, positions) -> None:
        for position in positions:
            self.replay[position] = None
        self.wake()

    def hold_delayed(self, entry, metadata) -> bool:
        """True if ``entry`` is a delayed message not due yet (now held by the tracker)."""
        delayed = self.delayed
        return (delayed is not None and metadata.HasField("deliver_at_time")
                and delayed.hold(entry.position, metadata.deliver_at_time))

    def wake(self) -> None:
        """Something changed that may let waiting messages through."""
        self.replay_stalled = False
        self.schedule_read()

    def consumer_flow(self, consumer) -> None:
        self.wake()

    def consumer_ready(self, consumer) -> None:
        self.wake()

    # ---------------------------------------------------------------- consumers
    def remove_consumer(self, consumer) -> None:
        super().remove_consumer(consumer)
        self._to_replay(consumer.take_pending())
        if self.chunk_owners:
            for uuid in [u for u, c in self.chunk_owners.items() if c is consumer]:
                del self.chunk_owners[uuid]
        self.wake()

    def _to_replay(self, positions) -> None:
        counts = self.subscription.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1
            self.replay[position] = None

    def redeliver(self, consumer, positions) -> None:
        # consumer.msg_redelivered is counted by Consumer.redeliver (the messages it gave back).
        self._to_replay(consumer.take_pending(positions))
        self.wake()

    def acked(self, consumer, positions) -> None:
        for position in positions:
            if not consumer.acked(position):
                # Acked by someone else than the one it was sent to (e.g. after a redelivery).
                for other in self.consumers:
                    if other.acked(position):
                        break
            self.replay.pop(position, None)
        self.wake()

    def reset(self) -> None:
        super().reset()
        self.replay.clear()
        self.chunk_owners.clear()
        if self.delayed is not None:
            self.delayed.clear()
        for consumer in self.consumers:
            consumer.take_pending()

    def close(self) -> None:
        super().close()
        if self.delayed is not None:
            self.delayed.close()

    # ---------------------------------------------------------------- reading
    def blocked_on_unacked(self) -> bool:
        """Dispatch stopped because the subscription holds maxUnackedMessagesPerSubscription
        unacked messages (the stats' blockedSubscriptionOnUnackedMsgs)."""
        limit = self.max_unacked_subscription
        return bool(limit) and sum(c.unacked for c in self.consumers) >= limit

    def read_count(self) -> int:
        if self.blocked_on_unacked():
            return 0
        permits = 0
        for consumer in self.consumers:
            if consumer.available():
                permits += consumer.permits
        return min(permits, self.max_read)

    def start_read(self, count):
        if self.replay and not self.replay_stalled:
            positions = heapq.nsmallest(count, self.replay)
            taken = {position: self.replay.pop(position) for position in positions}
            self._replaying = True
            d = self.cursor.replay_entries(positions)
            d.addErrback(self._replay_failed, taken, self.epoch)
            return d
        self._replaying = False
        return self.cursor.read_entries(count)

    def _replay_failed(self, failure, taken, epoch):
        # Those positions are held nowhere else now: back into the replay set for the retry
        # (unless a seek reset the dispatcher meanwhile), else their messages are lost.
        if epoch == self.epoch and not self.closed:
            self.replay.update(taken)
        return failure

    def has_more(self) -> bool:
        return (bool(self.replay) and not self.replay_stalled) or self.cursor.has_more_entries()

    def dispatch(self, entries) -> None:
        sent = 0
        for entry in entries:
            metadata = lenient_metadata(entry.data)
            if self.hold_delayed(entry, metadata):
                continue
            if metadata.num_chunks_from_msg > 1:
                consumer = self._chunk_consumer(metadata)
            else:
                consumer = self.next_consumer()
            if consumer is None:
                self.replay[entry.position] = None
            else:
                self.send_entry(consumer, entry, metadata)
                sent += 1
        self.round_done(sent)

    def _chunk_consumer(self, metadata):
        """
        All chunks of one message go to the consumer that got its first chunk (what Pulsar's
        Shared dispatcher does since chunking is allowed there): a consumer can only assemble
        the chunks it receives. None while that consumer cannot take more (the chunk waits).
        """
        owners = self.chunk_owners
        uuid = metadata.uuid
        consumer = owners.get(uuid)
        if metadata.chunk_id == 0 or consumer is None or consumer.closed:
            consumer = self.next_consumer()
            if consumer is None:
                return None
            owners[uuid] = consumer
            if len(owners) > MAX_CHUNK_OWNERS:
                # Messages whose last chunk never came (their producer died) must not pile up:
                # forget the oldest; a straggler chunk of it may then reach another consumer,
                # whose client expires the incomplete message as Pulsar's does.
                del owners[next(iter(owners))]
        elif not consumer.available():
            return None
        if metadata.chunk_id >= metadata.num_chunks_from_msg - 1:
            del owners[uuid]
        return consumer

    def round_done(self, sent: int) -> None:
        if self._replaying and not sent:
            self.replay_stalled = True

    def next_consumer(self):
        """The next consumer in round-robin order that can take a message, or None."""
        consumers = self.consumers
        n = len(consumers)
        for i in range(n):
            index = (self._next + i) % n
            consumer = consumers[index]
            if consumer.available():
                self._next = (index + 1) % n
                return consumer
        return None
