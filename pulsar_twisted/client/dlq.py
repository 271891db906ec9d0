"""
Dead-letter and retry-letter topics, as the Java client's ``ConsumerImpl`` does them.

``DeadLetterPolicy(max_redeliver_count, dead_letter_topic=None, initial_subscription_name=None,
retry_letter_topic=None)`` names where messages go:

* dead letters: a message delivered with ``redelivery_count >= max_redeliver_count`` is remembered;
  when it is next negatively acknowledged or its ack times out, instead of asking the broker to
  redeliver it again we publish it to the DLQ topic (default ``<topic>-<subscription>-DLQ``) with
  its properties plus ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` and then acknowledge it on the
  original topic. As in Java this applies to Shared and Key_Shared subscriptions (Exclusive and
  Failover redeliver everything at once). If the DLQ publish fails the message is redelivered.
* retry letters (``enable_retry=True``): ``reconsume_later(message, delay_seconds)`` publishes it
  to ``<topic>-<subscription>-RETRY`` (delivered after the delay) with ``RECONSUMETIMES``,
  ``DELAY_TIME``, ``REAL_TOPIC``, ``RETRY_TOPIC`` and ``ORIGIN_MESSAGE_ID`` and acknowledges the
  original; the consumer also subscribes to the retry topic. Past ``max_redeliver_count``
  reconsumes the message goes to the DLQ instead.

The DLQ and retry producers are created on first use (batching off, chunking on, as Java's),
the DLQ one with ``initial_subscription_name`` so its messages are kept until someone reads them.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.client import errors

RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_SUFFIX = "-DLQ"
RETRY_SUFFIX = "-RETRY"
#: Java's ``RetryMessageUtil.MAX_RECONSUMETIMES``: the default when retry is on without a policy.
MAX_RECONSUMETIMES = 16


class DeadLetterPolicy:
    """Where and after how many redeliveries messages become dead letters (Pulsar's names)."""

    def __init__(self, max_redeliver_count: int, dead_letter_topic: str = None,
                 initial_subscription_name: str = None, retry_letter_topic: str = None):
        if int(max_redeliver_count) < 1:
            raise errors.InvalidConfiguration("max_redeliver_count must be at least 1")
        self.max_redeliver_count = int(max_redeliver_count)
        self.dead_letter_topic = dead_letter_topic
        self.initial_subscription_name = initial_subscription_name
        self.retry_letter_topic = retry_letter_topic

    def __repr__(self):
        return (f"DeadLetterPolicy({self.max_redeliver_count}, {self.dead_letter_topic!r}, "
                f"{self.initial_subscription_name!r})")


def java_id_string(message_id) -> str:
    """``ledger:entry:partition[:batch]``: Java's ``MessageIdImpl.toString()``, used in properties."""
    text = f"{message_id.ledger_id}:{message_id.entry_id}:{message_id.partition}"
    if message_id.batch_index >= 0:
        text += f":{message_id.batch_index}"
    return text


def from_policy(policy) -> DeadLetterPolicy:
    """Our policy from ours or the official client's ``ConsumerDeadLetterPolicy``-like object."""
    if policy is None or isinstance(policy, DeadLetterPolicy):
        return policy
    get = (lambda name: getattr(policy, name)() if callable(getattr(policy, name, None))
           else getattr(policy, name, None))
    return DeadLetterPolicy(get("max_redeliver_count"), get("dead_letter_topic") or None,
                            get("initial_subscription_name") or None)


class DeadLetterHandler:
    """
    The dead-letter/retry logic of one ``subscribe()`` (shared by its per-topic consumers).
    ``client`` provides ``create_producer``; ``topic`` is the (first) subscribed topic.
    """

    log = Logger()

    def __init__(self, client, topic: str, subscription: str, policy: DeadLetterPolicy = None,
                 enable_retry: bool = False):
        if policy is None:
            policy = DeadLetterPolicy(MAX_RECONSUMETIMES)
        self.client = client
        self.policy = policy
        self.enable_retry = enable_retry
        self.dlq_topic = policy.dead_letter_topic or f"{topic}-{subscription}{DLQ_SUFFIX}"
        self.retry_topic = policy.retry_letter_topic or f"{topic}-{subscription}{RETRY_SUFFIX}"
        #: The single consumer whose close() closes our producers (None: a MultiConsumer does).
        self.owner = None
        self._candidates = {}   # (consumer id, entry key) -> [Message] delivered too often
        self._producers = {}    # topic -> Deferred firing with its producer

    # ------------------------------------------------------------------ consumer hooks
    def received(self, consumer, message) -> None:
        """Called for every message delivered; remembers those redelivered too often."""
        if message.redelivery_count() >= self.policy.max_redeliver_count:
            key = (consumer.consumer_id, message.message_id().entry_key())
            self._candidates.setdefault(key, []).append(message)

    def forget(self, consumer, entry_key) -> None:
        self._candidates.pop((consumer.consumer_id, entry_key), None)

    def forget_up_to(self, consumer, entry_key) -> None:
        for key in [k for k in self._candidates if k[0] == consumer.consumer_id
                    and k[1] <= entry_key]:
            del self._candidates[key]

    def forget_all(self, consumer) -> None:
        for key in [k for k in self._candidates if k[0] == consumer.consumer_id]:
            del self._candidates[key]

    def divert(self, consumer, entry_keys):
        """
        Of ``entry_keys`` about to be redelivered, publish the dead letters to the DLQ (then ack
        them) and return the others.
        """
        keep = []
        for entry_key in entry_keys:
            messages = self._candidates.pop((consumer.consumer_id, entry_key), None)
            if messages is None:
                keep.append(entry_key)
                continue
            self._dead_letter(consumer, entry_key, messages)
        return keep

    # ------------------------------------------------------------------ publishing
    def _producer(self, topic, **conf):
        """Fires with the producer on ``topic``, created on first use (one creation at a time)."""
        entry = self._producers.get(topic)
        if entry is not None and not isinstance(entry, list):
            return defer.succeed(entry)
        d = defer.Deferred()
        if entry is not None:   # a creation in flight: wait for it
            entry.append(d)
            return d
        waiters = self._producers[topic] = [d]

        def made(producer):
            self._producers[topic] = producer
            for waiter in waiters:
                waiter.callback(producer)

        def failed(failure):
            self._producers.pop(topic, None)   # the next letter tries again
            for waiter in waiters:
                waiter.errback(failure)

        self.client.create_producer(topic, batching_enabled=False, chunking_enabled=True,
                                    block_if_queue_full=False, **conf).addCallbacks(made, failed)
        return d

    @staticmethod
    def _letter_properties(message) -> dict:
        properties = dict(message.properties())
        properties.setdefault(REAL_TOPIC, message.topic_name())
        properties.setdefault(ORIGIN_MESSAGE_ID, java_id_string(message.message_id()))
        return properties

    def _publish(self, producer_d, message, properties, **kwargs):
        key = message.partition_key() or None
        ordering_key = message.ordering_key() or None
        return producer_d.addCallback(lambda producer: producer.send(
            message.data(), properties=properties, partition_key=key, ordering_key=ordering_key,
            event_timestamp=message.event_timestamp() or None, **kwargs))

    def _dlq_producer(self):
        return self._producer(self.dlq_topic,
                              initial_subscription_name=self.policy.initial_subscription_name)

    def _dead_letter(self, consumer, entry_key, messages):
        sends = [self._publish(self._dlq_producer(), m, self._letter_properties(m))
                 for m in messages]
        d = defer.gatherResults(sends, consumeErrors=True)

        def published(_):
            self.log.info("{n} message(s) of {topic} sent to dead-letter topic {dlq}",
                          n=len(messages), topic=consumer.topic, dlq=self.dlq_topic)
            consumer._batch_acks.pop(entry_key, None)
            return consumer.acknowledge(messages[0])

        def failed(failure):
            if failure.check(defer.FirstError):
                failure = failure.value.subFailure
            self.log.warn("publishing to dead-letter topic {dlq} failed ({error}); redelivering",
                          dlq=self.dlq_topic, error=failure.getErrorMessage())
            consumer._redeliver_ids([entry_key])

        return d.addCallbacks(published, failed)

    def reconsume_later(self, consumer, message, delay_seconds: float = 0,
                        properties: dict = None) -> defer.Deferred:
        """Publish ``message`` to the retry topic (or the DLQ past the limit), then ack it."""
        if not self.enable_retry:
            return defer.fail(errors.InvalidConfiguration(
                "reconsume_later needs a consumer subscribed with enable_retry=True"))
        letter = self._letter_properties(message)
        letter.update(properties or {})
        times = 1
        if RECONSUMETIMES in letter:
            try:
                times = int(letter[RECONSUMETIMES]) + 1
            except ValueError:
                self.log.warn("bad {name} property {value!r}; starting again at 1",
                              name=RECONSUMETIMES, value=letter[RECONSUMETIMES])
        delay_ms = max(0, int(delay_seconds * 1000))
        letter[RECONSUMETIMES] = str(times)
        letter[DELAY_TIME] = str(delay_ms)
        letter[RETRY_TOPIC] = self.retry_topic
        if times > self.policy.max_redeliver_count:
            d = self._publish(self._dlq_producer(), message, letter)
        else:
            d = self._publish(self._producer(self.retry_topic), message, letter,
                              deliver_after=delay_ms if delay_ms else None)
        return d.addCallback(lambda _: consumer.acknowledge(message))

    @defer.inlineCallbacks
    def close(self):
        """Close the DLQ and retry producers (the consumers' close calls this)."""
        producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            if not isinstance(producer, list):
                yield producer.close()
