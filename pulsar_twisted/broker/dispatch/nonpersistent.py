"""
Dispatchers of non-persistent subscriptions.

Nothing is stored, so nothing is read, replayed or rewound: the topic hands every published
entry to each subscription, whose dispatcher sends it to the one consumer that should have it if
that consumer can take it now (permits left, connection writable), and otherwise drops it and
counts it, as Pulsar's non-persistent dispatchers do. Which consumer should have it follows the
same rules as on persistent topics, from the same code: Exclusive admits one consumer; Failover
makes :func:`~pulsar_twisted.broker.dispatch.single.choose_active`'s consumer active, after the
failover delay for a newcomer, telling each consumer (ACTIVE_CONSUMER_CHANGE); Shared goes
round-robin over the consumers with permits; Key_Shared routes by key with the selectors of
``key_shared``.
"""

from pulsar_twisted.broker.dispatch.selectors import key_hash, selector_for
from pulsar_twisted.broker.dispatch.single import failover_switch
from pulsar_twisted.broker.entryinfo import lenient_metadata, sticky_key
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api


class NonPersistentDispatcher:
    """The consumers of one subscription and the send-or-drop step; subclasses choose the consumer."""

    def __init__(self, subscription, clock, config):
        self.subscription = subscription
        self.clock = clock
        self.consumers = []
        #: Messages dropped because their consumer could not take them (or there was none).
        self.dropped = 0

    def add_consumer(self, consumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def consumer_ready(self, consumer) -> None:
        """``consumer``'s SUBSCRIBE was answered."""

    def dispatch(self, position, data: bytes, count: int) -> None:
        """Send the entry at ``position`` (``count`` messages) to its consumer now, or drop it."""
        consumer = self.select(data)
        if consumer is None or not consumer.available():
            self.dropped += count
            self.subscription.msg_dropped += count
            return
        consumer.sender.send_message(consumer.consumer_id, position[0], position[1], 0, data,
                                     consumer.partition)
        consumer.sent(position, count, len(data), False)

    def select(self, data: bytes):
        """The consumer that should receive the entry ``data``, or None."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop: nothing more is dispatched and no timer stays behind."""


class NonPersistentExclusiveDispatcher(NonPersistentDispatcher):
    def add_consumer(self, consumer) -> None:
        if self.consumers:
            raise errors.ConsumerBusy("Exclusive consumer is already connected")
        super().add_consumer(consumer)

    @property
    def active(self):
        return self.consumers[0] if self.consumers else None

    def select(self, data: bytes):
        return self.active


class NonPersistentFailoverDispatcher(NonPersistentDispatcher):
    def __init__(self, subscription, clock, config, partition: int = -1):
        super().__init__(subscription, clock, config)
        self.switch = failover_switch(self, partition, config)

    def consumer_ready(self, consumer) -> None:
        self.switch.consumer_ready(consumer)

    def remove_consumer(self, consumer) -> None:
        super().remove_consumer(consumer)
        self.switch.consumer_removed(consumer)

    def _active_changed(self, active) -> None:
        # Nothing was kept for the previous active consumer, so there is nothing to hand over.
        pass

    @property
    def active(self):
        """The consumer the switch made active (the one stats name activeConsumerName)."""
        return self.switch.active

    def select(self, data: bytes):
        return self.switch.active

    def close(self) -> None:
        self.switch.cancel()


class NonPersistentSharedDispatcher(NonPersistentDispatcher):
    def __init__(self, subscription, clock, config):
        super().__init__(subscription, clock, config)
        self._next = 0

    def select(self, data: bytes):
        consumers = self.consumers
        n = len(consumers)
        for i in range(n):
            consumer = consumers[(self._next + i) % n]
            if consumer.available():
                self._next = (self._next + i + 1) % n
                return consumer
        return None


class NonPersistentKeySharedDispatcher(NonPersistentDispatcher):
    def __init__(self, subscription, clock, config, meta=None):
        super().__init__(subscription, clock, config)
        self.selector = selector_for(meta.mode if meta is not None else api.AUTO_SPLIT, config)

    def add_consumer(self, consumer) -> None:
        # The selector refuses a consumer first (ConsumerAssignError), before it is counted.
        self.selector.add(consumer)
        super().add_consumer(consumer)

    def remove_consumer(self, consumer) -> None:
        self.selector.remove(consumer)
        super().remove_consumer(consumer)

    def select(self, data: bytes):
        return self.selector.select(key_hash(sticky_key(lenient_metadata(data))))


def dispatcher_for(subscription, consumer, clock, config) -> NonPersistentDispatcher:
    """A new dispatcher of ``consumer``'s subscription type, for ``subscription``."""
    kind = consumer.sub_type
    if kind == api.CommandSubscribe.Exclusive:
        return NonPersistentExclusiveDispatcher(subscription, clock, config)
    if kind == api.CommandSubscribe.Failover:
        return NonPersistentFailoverDispatcher(subscription, clock, config, consumer.partition)
    if kind == api.CommandSubscribe.Shared:
        return NonPersistentSharedDispatcher(subscription, clock, config)
    return NonPersistentKeySharedDispatcher(subscription, clock, config, consumer.key_shared_meta)
