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
from pulsar_twisted.client.batch_receive import PendingBatches, as_policy
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
    """
    One receive queue over ``consumers``; acks go back to the consumer of the message's topic.
    ``batch_receive_policy``: the default of ``batch_receive`` (None: the first consumer's).
    """

    def __init__(self, topic: str, consumers, clock, message_listener=None, subscription=None,
                 dead_letter=None, batch_receive_policy=None):
        self.topic = topic
        self.consumers = {}
        self.clock = clock
        self.message_listener = message_listener
        self.subscription = subscription or (consumers[0].subscription if consumers else None)
        self.dead_letter = dead_letter
        self._incoming = collections.deque()
        self._waiters = collections.deque()
        self.batch_receive_policy = batch_receive_policy
        # The per-topic consumers did the hand-out bookkeeping already; ``_incoming`` is rebound
        # by remove_consumer, hence the lambda.
        self._batches = PendingBatches(clock, lambda message: None,
                                       lambda message: self._incoming.append(message))
        self.closed = False
        for consumer in consumers:
            self.add_consumer(consumer)

    def add_consumer(self, consumer) -> None:
        """Merge ``consumer``'s messages into this one (pattern discovery adds topics)."""
        self.consumers[consumer.topic] = consumer
        consumer.message_listener = self._on_message
        # Messages that arrived before the listener was set.
        while consumer._incoming:
            message = consumer._incoming.popleft()
            consumer._hand_out(message)
            self._on_message(consumer, message)

    def remove_consumer(self, topic: str) -> defer.Deferred:
        """Close and forget the consumer of ``topic`` (its queued messages are dropped)."""
        consumer = self.consumers.pop(topic, None)
        if consumer is None:
            return defer.succeed(None)
        self._incoming = collections.deque(
            m for m in self._incoming if m.topic_name() != topic)
        return consumer.close()

    def _on_message(self, consumer, message):
        message._message_id.topic = consumer.topic
        if self._waiters:
            self._waiters.popleft().callback(message)
        elif self.message_listener is not None:
            self.message_listener(self, message)
        elif self._batches:
            self._batches.offer(message)
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

    def batch_receive(self, policy=None) -> defer.Deferred:
        """
        As ``Consumer.batch_receive``, over every topic's messages. ``policy`` defaults to this
        consumer's ``batch_receive_policy``, else that of its first per-topic consumer (which
        ``Client.subscribe`` gives the ``batch_receive_policy`` it was passed).
        """
        if self.closed:
            return defer.fail(errors.AlreadyClosed("consumer closed"))
        if self.message_listener is not None:
            return defer.fail(errors.InvalidConfiguration(
                "batch_receive is not allowed on a consumer with a message listener"))
        if policy is None:
            policy = self.batch_receive_policy
        if policy is None:
            first = next(iter(self.consumers.values()), None)
            policy = first.batch_receive_policy if first is not None else None
        try:
            policy = as_policy(policy)
        except errors.PulsarException as e:
            return defer.fail(e)
        return self._batches.start(policy, self._incoming)

    def _timed_out(self, d, timeout):
        if d in self._waiters:
            self._waiters.remove(d)
            d.errback(errors.Timeout(f"no message within {timeout}s"))

    def _consumer_of(self, message):
        topic = message.topic_name() if isinstance(message, Message) else message.topic
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

    def reconsume_later(self, message, delay_seconds: float = 0, properties: dict = None):
        """See ``Consumer.reconsume_later``."""
        return self._consumer_of(message).reconsume_later(message, delay_seconds, properties)

    def redeliver_unacknowledged_messages(self):
        self._incoming.clear()
        self._batches.clear()
        for consumer in self.consumers.values():
            consumer.redeliver(None)

    def seek(self, target) -> defer.Deferred:
        self._incoming.clear()
        self._batches.clear()
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
        if self.dead_letter is not None:
            self.dead_letter.close().addErrback(lambda f: None)
        waiters, self._waiters = list(self._waiters), collections.deque()
        for d in waiters:
            d.errback(errors.AlreadyClosed("consumer closed"))
        self._batches.fail(errors.AlreadyClosed("consumer closed"))

    def is_connected(self) -> bool:
        return all(c.is_connected() for c in self.consumers.values())

    def topic_name(self) -> str:
        return self.topic

    def subscription_name(self) -> str:
        return self.subscription
