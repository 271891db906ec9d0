"""
Publish and dispatch rate limiting, as Pulsar does it.

Limits come from the namespace policies (``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate``, stored per cluster) or, where a namespace sets none, from the broker
configuration (``maxPublishRatePerTopicIn*``, ``dispatchThrottlingRatePer{Topic,Subscription}In*``).
``apply_policies`` (called by policies.py at topic load and on every change) puts on a topic:

- ``topic.publish_limiter``: a ``PublishRateLimiter``. Every published entry is counted
  (messages, bytes); when a period's budget is spent the connections of the topic's producers are
  throttled (``cnx.throttle()``: their reads pause, Pulsar's "publish rate limiting" disables
  auto-read the same way) until the period boundary where budget is back.
- ``topic.dispatch_limits``: a ``DispatchLimits`` holding the topic's limiter (shared by all its
  subscriptions) and one limiter per subscription. A dispatcher asks it how many entries it may
  read (``cap``): the smaller of its permits and the remaining messages of either budget; when a
  budget is spent it schedules its next read at the next period instead of spinning.

Both are None while no limit is set, so the hot paths cost one attribute test.

Accounting is after the fact, as Pulsar's (``tryDispatchPermit`` after sending; the publish
counters after receiving): an entry is never split, so a batch, or the frames already read from a
socket when its reads pause, may take a budget below zero. The debt is carried into the next
periods (a period refills at most one period's budget), so the rate averaged over a few periods
stays at the limit. ``relativeToPublishRate`` is not supported (logged; the absolute rate applies).
Non-persistent topics are publish-limited; their dispatch is not (nothing is read from storage).
"""

import weakref

from twisted.logger import Logger

from pulsar_twisted.resources.policies import UNLIMITED, RateLimit

log = Logger()

#: Periods are compared with this slack: a call scheduled for the boundary sees the new period
#: even when the float sum of the delays lands a hair before it.
_EPSILON = 1e-6
_UNLIMITED = 1 << 62


class RateLimiter:
    """
    A budget of messages and bytes per period on ``clock``. Periods start when the limiter is
    made; each boundary adds one period's budget, capped at one period's budget (so an idle
    limiter does not bank bursts), and a debt (budget below zero, see the module docstring) is
    paid off first.
    """

    def __init__(self, clock, limit: RateLimit):
        self.clock = clock
        self.limit = limit
        self._msgs = limit.msgs
        self._bytes = limit.bytes
        self._period_start = clock.seconds()

    def update(self, limit: RateLimit) -> None:
        """New limits from now on; the budget left is kept, capped at the new period's."""
        if limit == self.limit:
            return
        self._refill()
        old, self.limit = self.limit, limit
        self._msgs = limit.msgs if old.msgs <= 0 else min(self._msgs, limit.msgs)
        self._bytes = limit.bytes if old.bytes <= 0 else min(self._bytes, limit.bytes)

    def _refill(self) -> None:
        limit = self.limit
        elapsed = self.clock.seconds() - self._period_start + _EPSILON
        if elapsed < limit.period:
            return
        periods = int(elapsed // limit.period)
        self._period_start += periods * limit.period
        if limit.msgs > 0:
            self._msgs = min(limit.msgs, self._msgs + periods * limit.msgs)
        if limit.bytes > 0:
            self._bytes = min(limit.bytes, self._bytes + periods * limit.bytes)

    def consume(self, msgs: int, size: int) -> bool:
        """Count ``msgs`` messages of ``size`` bytes; True if the budget is now spent."""
        self._refill()
        self._msgs -= msgs
        self._bytes -= size
        limit = self.limit
        return (limit.msgs > 0 and self._msgs <= 0) or (limit.bytes > 0 and self._bytes <= 0)

    def exhausted(self) -> bool:
        """No budget left in the current period (messages or bytes)."""
        self._refill()
        limit = self.limit
        return (limit.msgs > 0 and self._msgs <= 0) or (limit.bytes > 0 and self._bytes <= 0)

    def available_msgs(self) -> int:
        """Messages left in this period (a very large number without a message limit)."""
        self._refill()
        return max(self._msgs, 0) if self.limit.msgs > 0 else _UNLIMITED

    def until_next_period(self) -> float:
        """Seconds to the next period boundary (> 0)."""
        self._refill()
        return max(self._period_start + self.limit.period - self.clock.seconds(), _EPSILON)


class PublishRateLimiter:
    """
    A topic's publish rate. ``published(count, size)`` per stored entry; over budget, the
    connections of the topic's producers are throttled until the period boundary where the
    budget is positive again. A producer connection seen while throttled is throttled too.
    """

    def __init__(self, topic, clock, limit: RateLimit):
        self.topic = topic
        self.clock = clock
        self.limiter = RateLimiter(clock, limit)
        self._paused = set()
        self._resume_call = None

    @property
    def throttled(self) -> bool:
        return self._resume_call is not None

    def published(self, count: int, size: int) -> None:
        if self.limiter.consume(count, size):
            self._pause()

    def _pause(self) -> None:
        for cnx in {p.cnx for p in list(self.topic.producers.values())}:
            if cnx not in self._paused:
                self._paused.add(cnx)
                cnx.throttle()
        if self._resume_call is None:
            log.debug("{topic}: publish rate exceeded; producers paused", topic=self.topic.name)
            self._resume_call = self.clock.callLater(self.limiter.until_next_period(), self._resume)

    def _resume(self) -> None:
        self._resume_call = None
        if self.limiter.exhausted():
            # Still in debt (frames read after the pause, a large batch): wait another period.
            self._resume_call = self.clock.callLater(self.limiter.until_next_period(), self._resume)
            return
        self.release()

    def update(self, limit: RateLimit) -> None:
        self.limiter.update(limit)
        if self._resume_call is not None and not self.limiter.exhausted():
            self.release()

    def release(self) -> None:
        """Resume every connection this limiter paused (also when the limit is removed)."""
        if self._resume_call is not None and self._resume_call.active():
            self._resume_call.cancel()
        self._resume_call = None
        paused, self._paused = self._paused, set()
        for cnx in paused:
            cnx.unthrottle()


class DispatchLimits:
    """
    A topic's dispatch rates: the topic's limiter (all subscriptions together) and one limiter
    per subscription (made when the subscription first reads).
    """

    def __init__(self, clock, topic_limit: RateLimit, subscription_limit: RateLimit):
        self.clock = clock
        self.topic_limiter = None
        self.subscription_limit = UNLIMITED
        self._subscriptions = weakref.WeakKeyDictionary()
        self.update(topic_limit, subscription_limit)

    def update(self, topic_limit: RateLimit, subscription_limit: RateLimit) -> None:
        if not topic_limit.enabled:
            self.topic_limiter = None
        elif self.topic_limiter is None:
            self.topic_limiter = RateLimiter(self.clock, topic_limit)
        else:
            self.topic_limiter.update(topic_limit)
        self.subscription_limit = subscription_limit
        if not subscription_limit.enabled:
            self._subscriptions.clear()
        for limiter in self._subscriptions.values():
            limiter.update(subscription_limit)

    def limiter_of(self, subscription):
        """The subscription's limiter, or None without a per-subscription limit."""
        if not self.subscription_limit.enabled:
            return None
        limiter = self._subscriptions.get(subscription)
        if limiter is None:
            limiter = self._subscriptions[subscription] = RateLimiter(self.clock, self.subscription_limit)
        return limiter

    def cap(self, subscription, count: int):
        """
        ``(entries, wait)``: how many of ``count`` entries ``subscription`` may read now, and
        when none, the seconds until a budget is back (the next read's delay).
        """
        wait = 0.0
        for limiter in (self.topic_limiter, self.limiter_of(subscription)):
            if limiter is None:
                continue
            if limiter.exhausted():
                wait = max(wait, limiter.until_next_period())
            else:
                count = min(count, limiter.available_msgs())
        if wait > 0:
            return 0, wait
        return count, 0.0

    def dispatched(self, subscription, count: int, size: int) -> None:
        """Count an entry of ``count`` messages and ``size`` bytes sent to a consumer."""
        if self.topic_limiter is not None:
            self.topic_limiter.consume(count, size)
        limiter = self.limiter_of(subscription)
        if limiter is not None:
            limiter.consume(count, size)


def apply_policies(topic, policies) -> None:
    """
    Put ``policies``' rates (NamespacePolicies) in force on ``topic`` at once: limiters made,
    updated or removed; connections paused by a removed publish limit resumed; dispatchers
    waiting for a period retried under the new limits.
    """
    publish = policies.publish_rate
    current = topic.publish_limiter
    if publish.enabled:
        if current is None:
            topic.publish_limiter = PublishRateLimiter(topic, topic.clock, publish)
        else:
            current.update(publish)
    elif current is not None:
        topic.publish_limiter = None
        current.release()

    topic_rate, sub_rate = policies.topic_dispatch_rate, policies.subscription_dispatch_rate
    limits = topic.dispatch_limits
    if not (topic_rate.enabled or sub_rate.enabled):
        if limits is None:
            return
        topic.dispatch_limits = None
    elif limits is None:
        topic.dispatch_limits = DispatchLimits(topic.clock, topic_rate, sub_rate)
    else:
        limits.update(topic_rate, sub_rate)
    for subscription in list(topic.subscriptions.values()):
        dispatcher = getattr(subscription, "dispatcher", None)
        if dispatcher is not None and hasattr(dispatcher, "rate_limits_changed"):
            dispatcher.rate_limits_changed()
