"""
Backlog quotas (Pulsar's ``BacklogQuotaManager`` and ``PersistentTopic.checkBacklogQuotaExceeded``).

A topic's backlog is measured on its slowest durable subscription: in bytes (``destination_storage``
quota, ``limitSize``: the estimated size after its mark-delete position, Pulsar's
``getEstimatedBacklogSize``) and in age (``message_age`` quota, ``limitTime``: seconds since the
publish time of its oldest unacknowledged message). A quota is exceeded when the backlog is at or
over the limit (Pulsar compares with ``>=``); a negative limit is no quota.

What an exceeded quota does, by its ``policy``, as Pulsar does it:

* ``producer_request_hold`` and ``producer_exception``: the periodic check disconnects the
  topic's producers, and a new producer is refused with ServerError
  ``ProducerBlockedQuotaExceededError`` (hold) or ``ProducerBlockedQuotaExceededException``
  (exception). The "hold" is on the client: Pulsar's clients keep the messages of a held
  producer pending and retry creating it until the backlog drops or the send timeout fails them,
  while on an exception they fail the pending sends at once. The broker side of both is refusal.
* ``consumer_backlog_eviction``: the slowest subscriptions lose their oldest messages
  (acknowledged for them) until the byte backlog is under 90% of the limit (Pulsar's reduction
  factor), or, for the age quota, until nothing older than the limit is left.
"""

import math

from twisted.logger import Logger

from pulsar_twisted.broker import ttl
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import (
    CONSUMER_BACKLOG_EVICTION, DESTINATION_STORAGE, MESSAGE_AGE, PRODUCER_EXCEPTION,
    PRODUCER_REQUEST_HOLD, BacklogQuota)

log = Logger()

#: Eviction brings the byte backlog down to this fraction of the limit (Pulsar's reductionFactor).
REDUCTION_FACTOR = 0.9
#: Eviction rounds per check: each skips a proportional share of the slowest subscription.
_MAX_EVICTION_ROUNDS = 100


class ProducerBlockedQuotaExceededError(errors.PulsarError):
    """A producer refused under ``producer_request_hold`` (the client holds and retries)."""

    code = api.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(errors.PulsarError):
    """A producer refused under ``producer_exception`` (the client fails its sends)."""

    code = api.ProducerBlockedQuotaExceededException


def backlog_size(topic) -> int:
    """The byte backlog the storage quota is measured on (``topic.backlog_size()``)."""
    return topic.backlog_size()


def size_exceeded(topic, quota: BacklogQuota) -> bool:
    if quota is None or quota.limit_size < 0 or not topic.persistent:
        return False
    return backlog_size(topic) >= quota.limit_size


async def oldest_backlog_age_ms(topic, now_ms: int) -> int:
    """Age of the oldest unacknowledged message over the durable subscriptions (0: none)."""
    oldest = None
    for subscription in topic.durable_subscriptions():
        position = subscription.cursor.nth_unacked_position(1)
        if position is None:
            continue
        published = await ttl.publish_time_at(topic.ledger, position)
        if oldest is None or published < oldest:
            oldest = published
    return 0 if oldest is None else max(0, now_ms - oldest)


class BacklogQuotaEnforcer:
    """
    Applies a topic's quotas (``topic.policies.backlog_quotas``, a dict type -> BacklogQuota).
    The age quota needs reads, so its verdict is kept from the last periodic check for the
    producer admission check, which must answer at once (Pulsar caches it the same way).
    """

    def __init__(self, clock):
        self.clock = clock
        self._age_exceeded = {}     # topic name -> (topic, policy)

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def check_new_producer(self, topic, quotas: dict) -> None:
        """Raise the ServerError Pulsar answers when ``topic`` may not get a new producer."""
        refused = None
        quota = quotas.get(DESTINATION_STORAGE)
        if quota is not None and quota.policy != CONSUMER_BACKLOG_EVICTION and size_exceeded(topic, quota):
            refused = quota.policy
        entry = self._age_exceeded.get(topic.name)
        if refused is None and entry is not None and entry[0] is topic:
            quota = quotas.get(MESSAGE_AGE)
            if quota is not None and quota.limit_time >= 0 and quota.policy != CONSUMER_BACKLOG_EVICTION:
                refused = quota.policy
        if refused is None:
            return
        message = f"Cannot create producer on topic with backlog quota exceeded: {topic.name}"
        if refused == PRODUCER_EXCEPTION:
            raise ProducerBlockedQuotaExceededException(message)
        raise ProducerBlockedQuotaExceededError(message)

    def forget(self, topic) -> None:
        entry = self._age_exceeded.get(topic.name)
        if entry is not None and entry[0] is topic:
            del self._age_exceeded[topic.name]

    async def enforce(self, topic, quotas: dict) -> None:
        """Check ``topic`` against its quotas now and act on the exceeded ones."""
        if not topic.persistent:
            return
        quota = quotas.get(DESTINATION_STORAGE)
        if size_exceeded(topic, quota):
            log.info("{topic}: backlog {size} bytes over quota {limit} ({policy})", topic=topic.name,
                     size=backlog_size(topic), limit=quota.limit_size, policy=quota.policy)
            if quota.policy == CONSUMER_BACKLOG_EVICTION:
                await self.evict_by_size(topic, quota.limit_size)
            else:
                self.disconnect_producers(topic)
        quota = quotas.get(MESSAGE_AGE)
        self.forget(topic)
        if quota is not None and quota.limit_time >= 0:
            age_ms = await oldest_backlog_age_ms(topic, self._now_ms())
            if age_ms > 0 and age_ms >= quota.limit_time * 1000:
                log.info("{topic}: oldest backlog message {age} s old, over quota {limit} s ({policy})",
                         topic=topic.name, age=age_ms // 1000, limit=quota.limit_time, policy=quota.policy)
                if quota.policy == CONSUMER_BACKLOG_EVICTION:
                    await self.evict_by_age(topic, quota.limit_time)
                else:
                    self._age_exceeded[topic.name] = (topic, quota.policy)
                    self.disconnect_producers(topic)

    @staticmethod
    def disconnect_producers(topic) -> None:
        """Pulsar disconnects them; they reconnect and are refused while the quota is exceeded."""
        for producer in list(topic.producers.values()):
            topic.evict_producer(producer)

    async def evict_by_size(self, topic, limit: int) -> None:
        """Skip the oldest messages of the slowest subscriptions until under 90% of ``limit``."""
        target = REDUCTION_FACTOR * limit
        for _ in range(_MAX_EVICTION_ROUNDS):
            size = backlog_size(topic)
            if size <= target:
                return
            slowest = max(topic.durable_subscriptions(), key=lambda s: s.cursor.estimated_backlog_size())
            entries = slowest.cursor.number_of_entries_in_backlog()
            if entries <= 0:
                return
            to_skip = max(1, math.ceil(entries * (1 - target / size)))
            skipped = await slowest.cursor.skip_unacked(to_skip)
            log.info("{sub}: backlog quota evicted {n} entries", sub=slowest.describe(), n=skipped)
            if not skipped:
                return

    async def evict_by_age(self, topic, limit_seconds: int) -> None:
        now_ms = self._now_ms()
        for subscription in topic.durable_subscriptions():
            await ttl.expire_subscription(topic, subscription, limit_seconds, now_ms)
