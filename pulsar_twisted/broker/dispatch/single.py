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
            self.send_entry(active, entry)

    def redeliver(self, consumer, positions) -> None:
        # The single active consumer re-reads from the first unacked message either way.
        if consumer is self.active:
            self._rewind()
            self.schedule_read()

    def reset(self) -> None:
        super().reset()


class FailoverDispatcher(ExclusiveDispatcher):
    def __init__(self, subscription, cursor, clock, config, partition: int = -1):
        super().__init__(subscription, cursor, clock, config)
        self.partition = partition
        self.failover_delay = config.activeConsumerFailoverDelayTimeMillis / 1000.0
        self._pending_switch = None

    def add_consumer(self, consumer) -> None:
        self.consumers.append(consumer)

    def consumer_ready(self, consumer) -> None:
        # A newcomer only takes over after a delay (Pulsar's activeConsumerFailoverDelayTimeMillis),
        # so the current active consumer can finish what it holds.
        if self.active is None:
            self._pick_active()
        else:
            consumer.sender.send_active_consumer_change(consumer.consumer_id, False)
            if self._choose() is not self.active:
                self._schedule_switch()
        self.schedule_read()

    def _schedule_switch(self) -> None:
        if self._pending_switch is None or not self._pending_switch.active():
            self._pending_switch = self.clock.callLater(self.failover_delay, self._pick_active)

    def remove_consumer(self, consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if consumer is self.active:
            self.active = None
            self._pick_active()

    def _choose(self):
        if not self.consumers:
            return None
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.name, c.consumer_id))
        best = [c for c in ordered if c.priority_level == ordered[0].priority_level]
        index = self.partition % len(best) if self.partition >= 0 else 0
        return best[index]

    def _pick_active(self) -> None:
        self._pending_switch = None
        chosen = self._choose()
        if chosen is self.active and chosen is not None:
            return
        self.active = chosen
        self._rewind()
        for consumer in self.consumers:
            consumer.sender.send_active_consumer_change(consumer.consumer_id, consumer is chosen)
        self.schedule_read()

    def close(self) -> None:
        super().close()
        if self._pending_switch is not None and self._pending_switch.active():
            self._pending_switch.cancel()
