"""
Exclusive and Failover subscriptions: one active consumer receives everything, in order.

Exclusive admits a single consumer (a second gets ConsumerBusy). Failover admits many and makes
one active: consumers sorted by priority level (lower first), then name; among those of the best
priority, a partition's consumer is ``partition % count``, a non-partitioned topic's the first.
Every consumer is told whether it is active (ACTIVE_CONSUMER_CHANGE). When the active consumer
changes or leaves, the cursor rewinds to the first unacknowledged message, so everything the old
one did not ack goes to the new one. As in Pulsar, redelivery counts are not tracked for these
types.
"""

from pulsar_twisted.broker.dispatch.base import PersistentDispatcher
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


def choose_active(consumers, partition: int):
    """
    Failover's active consumer among ``consumers`` (None if there are none), the one rule for
    persistent and non-persistent topics alike (Pulsar's AbstractDispatcherSingleActiveConsumer):
    only consumers of the best (lowest) priority level count; sorted by name (then consumer id,
    so the choice is stable), a partition's is ``partition % count``, a non-partitioned topic's
    (``partition`` < 0) the first.
    """
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name, c.consumer_id))
    best = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    index = partition % len(best) if partition >= 0 else 0
    return best[index]


class FailoverSwitch:
    """
    Which of a Failover subscription's ``consumers`` (a list the owner keeps up to date) is
    active, over time. The first consumer ready becomes active at once. A consumer arriving while
    another is active is told it is inactive, and if :func:`choose_active` now prefers another
    consumer the switch happens ``delay`` seconds later (Pulsar's
    activeConsumerFailoverDelayTimeMillis), so the current active consumer can finish what it
    holds. An active consumer that leaves is replaced at once. On every change each consumer is
    told whether it is active (ACTIVE_CONSUMER_CHANGE), then ``changed(active)`` is called.
    """

    def __init__(self, consumers, partition: int, clock, delay: float, changed):
        self.consumers = consumers
        self.partition = partition
        self.clock = clock
        self.delay = delay
        self.active = None
        self._changed = changed
        self._pending = None

    def consumer_ready(self, consumer) -> None:
        if self.active is None:
            self.pick()
            return
        consumer.sender.send_active_consumer_change(consumer.consumer_id, False)
        if choose_active(self.consumers, self.partition) is not self.active:
            if self._pending is None or not self._pending.active():
                self._pending = self.clock.callLater(self.delay, self.pick)

    def consumer_removed(self, consumer) -> None:
        """``consumer`` was already taken out of ``consumers``."""
        if consumer is self.active:
            self.active = None
            self.pick()

    def pick(self) -> None:
        """Make :func:`choose_active`'s consumer active now, if it is not already."""
        self._pending = None
        chosen = choose_active(self.consumers, self.partition)
        if chosen is self.active and chosen is not None:
            return
        self.active = chosen
        for consumer in self.consumers:
            consumer.sender.send_active_consumer_change(consumer.consumer_id, consumer is chosen)
        self._changed(chosen)

    def cancel(self) -> None:
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None


class FailoverDispatcher(ExclusiveDispatcher):
    def __init__(self, subscription, cursor, clock, config, partition: int = -1):
        super().__init__(subscription, cursor, clock, config)
        self.partition = partition
        self.switch = FailoverSwitch(self.consumers, partition, clock,
                                     config.activeConsumerFailoverDelayTimeMillis / 1000.0,
                                     self._active_changed)

    def add_consumer(self, consumer) -> None:
        self.consumers.append(consumer)

    def consumer_ready(self, consumer) -> None:
        self.switch.consumer_ready(consumer)
        self.schedule_read()

    def remove_consumer(self, consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.switch.consumer_removed(consumer)

    def _active_changed(self, active) -> None:
        # Everything the previous active consumer did not acknowledge goes to the new one.
        self.active = active
        self._rewind()
        self.schedule_read()

    def close(self) -> None:
        super().close()
        self.switch.cancel()
