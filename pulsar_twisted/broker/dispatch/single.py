"""
Exclusive and Failover subscriptions: one active consumer receives everything, in order.

Exclusive admits a single consumer (a second gets ConsumerBusy). Failover admits many and makes
one active: consumers sorted by priority level (lower first), then name; among those of the best
priority, a partition's consumer is ``partition % count``, a non-partitioned topic's the one a
hash ring of consumer names gives the topic name (``choose_active``).
Every consumer is told whether it is active (ACTIVE_CONSUMER_CHANGE). When the active consumer
changes or leaves, the cursor rewinds to the first unacknowledged message, so everything the old
one did not ack goes to the new one. As in Pulsar, redelivery counts are not tracked for these
types: MESSAGE.redelivery_count is 0 unless ``singleActiveConsumerRedeliveryCountEnabled`` is set
(``subscription.PersistentSubscription.redeliver``).
"""

import bisect

from pulsar_twisted.broker.dispatch.base import PersistentDispatcher
from pulsar_twisted.broker.dispatch.selectors import murmur3_31
from pulsar_twisted.common import errors


class ExclusiveDispatcher(PersistentDispatcher):
    def __init__(self, subscription, cursor, clock, config):
        super().__init__(subscription, cursor, clock, config)
        self.active = None

    def add_consumer(self, consumer) -> None:
        if self.consumers:
            raise errors.ConsumerBusy("Exclusive consumer is already connected")
        super().add_consumer(consumer)
        self.active = consumer

    def remove_consumer(self, consumer) -> None:
        super().remove_consumer(consumer)
        if consumer is self.active:
            self.active = None
            self._rewind()

    def _rewind(self) -> None:
        self.epoch += 1
        self.cursor.rewind()

    def read_count(self) -> int:
        active = self.active
        if active is None or not active.available():
            return 0
        return min(active.permits, self.max_read)

    def dispatch(self, entries) -> None:
        active = self.active
        if active is None:
            self._rewind()
            return
        for entry in entries:
            metadata = self.metadata_or_skip(entry)
            if metadata is not None:
                self.send_entry(active, entry, metadata)

    def redeliver(self, consumer, positions) -> None:
        # The single active consumer re-reads from the first unacked message either way.
        if consumer is self.active:
            self._rewind()
            self.schedule_read()

    def reset(self) -> None:
        super().reset()


#: Points per consumer on the ring that picks a non-partitioned topic's active consumer
#: (Pulsar's CONSUMER_CONSISTENT_HASH_REPLICAS).
RING_POINTS = 100


def choose_active(consumers, partition: int, topic_name: str = "", consistent: bool = False):
    """
    Failover's active consumer among ``consumers`` (None if there are none), the one rule for
    persistent and non-persistent topics alike (Pulsar's AbstractDispatcherSingleActiveConsumer):
    only consumers of the best (lowest) priority level count, sorted by name (then consumer id,
    so the choice is stable). A partition's (``partition`` >= 0) is ``partition % count``. A
    non-partitioned topic's, or any topic's with ``consistent`` (Pulsar's
    ``activeConsumerFailoverConsistentHashing``), is the owner of the first point at or after
    the hash of ``topic_name`` on a ring of 100 points per consumer (the hash of the name
    followed by the point number), so that the many non-partitioned topics of one set of
    consumers spread over them rather than all going to the first name.
    """
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name, c.consumer_id))
    best = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    if partition >= 0 and not consistent:
        return best[partition % len(best)]
    return best[_ring_index(best, topic_name)]


def _ring_index(consumers, topic_name: str) -> int:
    ring = {}
    for index, consumer in enumerate(consumers):
        for point in range(RING_POINTS):
            # A later consumer's point replaces an earlier one's on a collision, as in Pulsar.
            ring[murmur3_31(f"{consumer.name}{point}".encode())] = index
    points = sorted(ring)
    at = bisect.bisect_left(points, murmur3_31(topic_name.encode()))
    return ring[points[at if at < len(points) else 0]]


class FailoverSwitch:
    """
    Which of a Failover subscription's ``consumers`` (a list the owner keeps up to date) is
    active, over time, as Pulsar's AbstractDispatcherSingleActiveConsumer decides it. Whenever a
    consumer arrives or leaves, :func:`choose_active`'s consumer becomes ``active`` at once: from
    then on nothing more is sent to the previous one. Delivery to the new one waits ``delay``
    seconds (activeConsumerFailoverDelayTimeMillis; counted from the first change not yet
    delivered), then every consumer is told whether it is active (ACTIVE_CONSUMER_CHANGE) and
    ``changed(active)`` is called (a persistent dispatcher rewinds to the first unacknowledged
    message and reads). Meanwhile ``pending`` is True, and ``held(active)`` was called at the
    change. So the previous active consumer can acknowledge what it holds before the rewind, and
    a consumer that subscribes just after another, as a client's consumers do again after their
    topic moved, takes over before anything was sent to the other: sent first to the consumer
    that happened to subscribe first, messages the preferred one then received in its turn could
    come back to it after later ones (acknowledged by the other, the acknowledgements lost with a
    broker), out of order. A newcomer that does not change the choice is told at once that it is
    not active. With ``delay`` <= 0 every change is delivered at once.
    """

    def __init__(self, consumers, partition: int, clock, delay: float, changed,
                 topic_name: str = "", consistent: bool = False, held=None):
        self.consumers = consumers
        self.partition = partition
        self.topic_name = topic_name
        self.consistent = consistent
        self.clock = clock
        self.delay = delay
        self.active = None
        self._changed = changed
        self._held = held
        self._pending = None

    @property
    def pending(self) -> bool:
        """A change waits for its delay: nothing is delivered meanwhile."""
        return self._pending is not None and self._pending.active()

    def consumer_ready(self, consumer) -> None:
        if self.choose() is self.active and self.active is not None:
            if consumer is not self.active and not self.pending:
                consumer.sender.send_active_consumer_change(consumer.consumer_id, False)
            return
        self._switch()

    def consumer_removed(self, consumer) -> None:
        """``consumer`` was already taken out of ``consumers``."""
        if self.choose() is not self.active or consumer is self.active:
            self._switch()

    def _switch(self) -> None:
        self.active = chosen = self.choose()
        if chosen is None:
            self.cancel()
            self._changed(None)
            return
        if self.delay <= 0:
            self.pick()
            return
        if self._held is not None:
            self._held(chosen)
        if not self.pending:
            self._pending = self.clock.callLater(self.delay, self.pick)

    def pick(self) -> None:
        """Deliver the current choice now: notices to every consumer, then ``changed``."""
        self.cancel()
        chosen = self.active = self.choose()
        for consumer in self.consumers:
            consumer.sender.send_active_consumer_change(consumer.consumer_id, consumer is chosen)
        self._changed(chosen)

    def choose(self):
        """The consumer :func:`choose_active` prefers now."""
        return choose_active(self.consumers, self.partition, self.topic_name, self.consistent)

    def cancel(self) -> None:
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None


def failover_switch(dispatcher, partition: int, config) -> FailoverSwitch:
    """The FailoverSwitch of a persistent or non-persistent Failover ``dispatcher``."""
    return FailoverSwitch(dispatcher.consumers, partition, dispatcher.clock,
                          config.activeConsumerFailoverDelayTimeMillis / 1000.0,
                          dispatcher._active_changed, dispatcher.subscription.topic.name,
                          config.activeConsumerFailoverConsistentHashing,
                          held=getattr(dispatcher, "_held", None))


class FailoverDispatcher(ExclusiveDispatcher):
    def __init__(self, subscription, cursor, clock, config, partition: int = -1):
        super().__init__(subscription, cursor, clock, config)
        self.partition = partition
        self.switch = failover_switch(self, partition, config)

    def add_consumer(self, consumer) -> None:
        self.consumers.append(consumer)

    def consumer_ready(self, consumer) -> None:
        self.switch.consumer_ready(consumer)
        self.schedule_read()

    def remove_consumer(self, consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.switch.consumer_removed(consumer)

    def _held(self, active) -> None:
        # The choice changed; its delivery waits for the failover delay. Nothing more goes to
        # the previous active consumer: a read in flight is dropped (read again after the rewind).
        self.active = active
        self.epoch += 1

    def read_count(self) -> int:
        if self.switch.pending:
            return 0
        return super().read_count()

    def _active_changed(self, active) -> None:
        # Everything the previous active consumer did not acknowledge goes to the new one.
        self.active = active
        self._rewind()
        self.schedule_read()

    def close(self) -> None:
        super().close()
        self.switch.cancel()
