"""
Producers and consumers over every partition of a partitioned topic.

``PartitionedProducer`` routes each message with a ``routing.MessageRouter`` to one per-partition
``Producer``. ``MultiConsumer`` merges several ``Consumer`` objects (the partitions of a topic, or
a list of topics) into one receive queue and routes acks back by the message's topic. Its
per-partition consumers hand messages over as they arrive, so the merged queue is bounded only by
the broker's permits for each partition (receiver_queue_size each), as in the Java client's
``MultiTopicsConsumerImpl`` without its pause logic.
"""

import collections

from twisted.internet import defer

from pulsar_twisted.client import errors
from pulsar_twisted.client.message import Message


class _RouteInfo:
    __slots__ = ("_key", "_ordering_key")

    def __init__(self, key, ordering_key):
        self._key = key
        self._ordering_key = ordering_key

    def partition_key(self):
        return self._key or ""

    def ordering_key(self):
        return self._ordering_key or b""


class PartitionedProducer:
    """``send`` like ``Producer.send``; ``producers[i]`` publishes to partition ``i``."""

    def __init__(self, topic: str, producers, router):
        self.topic = topic
        self.producers = list(producers)
        self.router = router

    def choose_partition(self, partition_key=None, ordering_key=None) -> int:
        return self.router.choose(_RouteInfo(partition_key, ordering_key), len(self.producers))

    def send(self, payload, **kwargs) -> defer.Deferred:
        index = self.choose_partition(kwargs.get("partition_key"), kwargs.get("ordering_key"))
        return self.producers[index].send(payload, **kwargs)

    def flush(self) -> defer.Deferred:
        return defer.DeferredList([p.flush() for p in self.producers], consumeErrors=True)

    def close(self) -> defer.Deferred:
        return defer.DeferredList([p.close() for p in self.producers], consumeErrors=True)

    def is_connected(self) -> bool:
        return all(p.is_connected() for p in self.producers)

    @property
    def producer_name(self):
        return self.producers[0].producer_name if self.producers else None

    def topic_name(self) -> str:
        return self.topic

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self.producers)


class MultiConsumer:
    """One receive queue over ``consumers``; acks go back to the consumer of the message's topic."""

    def __init__(self, topic: str, consumers, clock, message_listener=None):
        self.topic = topic
        self.consumers = {c.topic: c for c in consumers}
        self.clock = clock
        self.message_listener = message_listener
        self.subscription = consumers[0].subscription if consumers else None
        self._incoming = collections.deque()
        self._waiters = collections.deque()
        self.closed = False
        for consumer in consumers:
            consumer.message_listener = self._on_message
            # Messages that arrived before the listener was set.
            while consumer._incoming:
                message = consumer._incoming.popleft()
                consumer._hand_out(message)
                self._on_message(consumer, message)

    def _on_message(self, consumer, message):
        if self._waiters:
            self._waiters.popleft().callback(message)
        elif self.message_listener is not None:
            self.message_listener(self, message)
        else:
            self._incoming.append(message)

    def receive(self, timeout: float = None) -> defer.Deferred:
        if self.closed:
            return defer.fail(errors.AlreadyClosed("consumer closed"))
        if self._incoming:
            return defer.succeed(self._incoming.popleft())
        d = defer.Deferred(lambda d: self._waiters.remove(d) if d in self._waiters else None)
        self._waiters.append(d)
        if timeout is not None:
            call = self.clock.callLater(timeout, self._timed_out, d, timeout)
            d.addBoth(lambda r: (call.active() and call.cancel(), r)[1])
        return d

    def _timed_out(self, d, timeout):
        if d in self._waiters:
            self._waiters.remove(d)
            d.errback(errors.Timeout(f"no message within {timeout}s"))

    def _consumer_of(self, message):
        topic = message.topic_name() if isinstance(message, Message) else None
        if topic is None:
            partition = message.partition
            for consumer in self.consumers.values():
                if consumer.partition == partition:
                    return consumer
        consumer = self.consumers.get(topic)
        if consumer is None:
            raise errors.InvalidMessage(f"message of {topic} is not from this consumer")
        return consumer

    def acknowledge(self, message):
        return self._consumer_of(message).acknowledge(message)

    def acknowledge_cumulative(self, message):
        return self._consumer_of(message).acknowledge_cumulative(message)

    def negative_acknowledge(self, message):
        return self._consumer_of(message).negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self):
        self._incoming.clear()
        for consumer in self.consumers.values():
            consumer.redeliver(None)

    def seek(self, target) -> defer.Deferred:
        self._incoming.clear()
        return defer.gatherResults([c.seek(target) for c in self.consumers.values()],
                                   consumeErrors=True).addCallback(lambda _: None)

    def unsubscribe(self) -> defer.Deferred:
        return defer.gatherResults([c.unsubscribe() for c in self.consumers.values()],
                                   consumeErrors=True).addCallback(lambda _: self._closed())

    def close(self) -> defer.Deferred:
        return defer.DeferredList([c.close() for c in self.consumers.values()],
                                  consumeErrors=True).addCallback(lambda _: self._closed())

    def _closed(self):
        self.closed = True
        waiters, self._waiters = list(self._waiters), collections.deque()
        for d in waiters:
            d.errback(errors.AlreadyClosed("consumer closed"))

    def is_connected(self) -> bool:
        return all(c.is_connected() for c in self.consumers.values())

    def topic_name(self) -> str:
        return self.topic

    def subscription_name(self) -> str:
        return self.subscription
