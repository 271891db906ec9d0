"""
``batch_receive``: hand the application a list of messages at once, as the official clients'
``Consumer.batchReceive`` (Java ``ConsumerBase``, C++ ``ConsumerImplBase``) does.

A ``BatchReceivePolicy`` bounds one batch by a number of messages, a number of payload bytes and a
timeout. A batch receive first takes what the consumer already holds; it completes at once when a
limit is reached, otherwise it waits for arrivals until a limit is reached or the timeout passes,
and then completes with what it has, possibly nothing (the Java and C++ clients complete with an
empty ``Messages`` too). The first message of a batch is always taken even if it alone exceeds
``max_num_bytes`` (Java's ``MessagesImpl.canAdd``), so an oversized message cannot block forever.

``PendingBatches`` is the per-consumer queue of waiting batch receives. While one waits, the owner
(``Consumer`` or ``MultiConsumer``) offers it each arriving message instead of queueing it; the
messages an op collects count as still queued (not handed out: no permits returned, no ack-timeout
tracking) until the op completes, so a reconnect or a redelivery drops them exactly as it drops the
local queue. Invariant: while an op waits the owner's queue is empty, since an op only waits after
it has taken the whole queue.
"""

import collections

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.client import errors

DEFAULT_MAX_NUM_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 100


class BatchReceivePolicy:
    """
    Limits of one ``batch_receive``: ``max_num_messages`` and ``max_num_bytes`` (payload bytes;
    <= 0: no limit) and ``timeout_ms`` (<= 0: wait until a limit is reached). At least one must
    be set (``InvalidConfiguration`` otherwise), as Java's ``BatchReceivePolicy.verify`` checks.
    """

    __slots__ = ("max_num_messages", "max_num_bytes", "timeout_ms")

    def __init__(self, max_num_messages: int = -1, max_num_bytes: int = DEFAULT_MAX_NUM_BYTES,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        try:
            self.max_num_messages = int(max_num_messages)
            self.max_num_bytes = int(max_num_bytes)
            self.timeout_ms = int(timeout_ms)
        except (TypeError, ValueError):
            raise errors.InvalidConfiguration(
                "batch receive policy limits must be integers, got "
                f"{max_num_messages!r}, {max_num_bytes!r}, {timeout_ms!r}") from None
        if self.max_num_messages <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise errors.InvalidConfiguration(
                "batch receive policy needs at least one of max_num_messages, max_num_bytes, "
                "timeout_ms above 0")

    def capped(self, receiver_queue_size: int) -> "BatchReceivePolicy":
        """
        This policy with ``max_num_messages`` at most ``receiver_queue_size``: a single consumer
        never holds more, so the Java and C++ clients cap it the same way.
        """
        if self.max_num_messages <= receiver_queue_size:
            return self
        return BatchReceivePolicy(receiver_queue_size, self.max_num_bytes, self.timeout_ms)

    def __eq__(self, other):
        return isinstance(other, BatchReceivePolicy) and (
            self.max_num_messages, self.max_num_bytes, self.timeout_ms) == (
            other.max_num_messages, other.max_num_bytes, other.timeout_ms)

    def __repr__(self):
        return (f"BatchReceivePolicy(max_num_messages={self.max_num_messages}, "
                f"max_num_bytes={self.max_num_bytes}, timeout_ms={self.timeout_ms})")


DEFAULT_POLICY = BatchReceivePolicy()


def as_policy(value) -> BatchReceivePolicy:
    """
    A ``BatchReceivePolicy`` from ours, None (the default policy), or the official client's
    ``pulsar.ConsumerBatchReceivePolicy`` (so code written for it can pass the same object).
    """
    if value is None:
        return DEFAULT_POLICY
    if isinstance(value, BatchReceivePolicy):
        return value
    inner = value.policy() if callable(getattr(value, "policy", None)) else value
    if callable(getattr(inner, "getMaxNumMessages", None)):
        return BatchReceivePolicy(inner.getMaxNumMessages(), inner.getMaxNumBytes(),
                                  inner.getTimeoutMs())
    raise errors.InvalidConfiguration(f"not a batch receive policy: {value!r}")


class _BatchOp:
    """One waiting batch receive: what it collected, its Deferred and its timeout call."""

    __slots__ = ("policy", "messages", "size", "deferred", "timer")

    def __init__(self, policy):
        self.policy = policy
        self.messages = []
        self.size = 0
        self.deferred = None
        self.timer = None

    def fits(self, message) -> bool:
        """Whether ``message`` may join (the first one always may)."""
        if not self.messages:
            return True
        policy = self.policy
        if 0 < policy.max_num_messages <= len(self.messages):
            return False
        return not (policy.max_num_bytes > 0
                    and self.size + len(message.data()) > policy.max_num_bytes)

    def add(self, message):
        self.messages.append(message)
        self.size += len(message.data())

    def full(self) -> bool:
        policy = self.policy
        return (0 < policy.max_num_messages <= len(self.messages)
                or 0 < policy.max_num_bytes <= self.size)


class PendingBatches:
    """
    The batch receives waiting on one consumer, oldest first.

    ``hand_out(message)`` is the owner's bookkeeping for a message the application now holds
    (permits, ack timeout); ``enqueue(message)`` puts one back in the owner's local queue.
    Falsy when nothing waits, so the owner's per-message check costs one ``len``.
    """

    log = Logger()

    def __init__(self, clock, hand_out, enqueue):
        self.clock = clock
        self.hand_out = hand_out
        self.enqueue = enqueue
        self._ops = collections.deque()

    def __len__(self):
        return len(self._ops)

    def start(self, policy: BatchReceivePolicy, queue) -> defer.Deferred:
        """
        A batch receive under ``policy``, first taking from ``queue`` (the owner's deque of
        received messages). Fires with a list of messages.
        """
        op = _BatchOp(policy)
        while queue and op.fits(queue[0]):
            op.add(queue.popleft())
        if op.full() or queue:
            # A limit was reached, or the next queued message does not fit: Java completes
            # at once here (hasEnoughMessagesForBatchReceive).
            return defer.succeed(self._take(op))
        op.deferred = defer.Deferred(lambda d: self._cancelled(op))
        if policy.timeout_ms > 0:
            op.timer = self.clock.callLater(policy.timeout_ms / 1000.0, self._timed_out, op)
        self._ops.append(op)
        return op.deferred

    def offer(self, message) -> None:
        """An arriving message: to the oldest waiting op, completing ops as they fill."""
        while self._ops:
            op = self._ops[0]
            if op.fits(message):
                op.add(message)
                if op.full():
                    self._complete(self._ops.popleft())
                return
            # It does not fit: this op is done, the message goes to the next one.
            self._complete(self._ops.popleft())
        self.enqueue(message)

    def clear(self) -> int:
        """Drop what the waiting ops collected (the broker redelivers it); the count dropped."""
        dropped = 0
        for op in self._ops:
            dropped += len(op.messages)
            op.messages = []
            op.size = 0
        return dropped

    def fail(self, error) -> None:
        """Fail every waiting op with ``error`` (the consumer closed or failed)."""
        ops, self._ops = list(self._ops), collections.deque()
        for op in ops:
            self._stop_timer(op)
            op.deferred.errback(error)

    # ------------------------------------------------------------------ internals
    def _take(self, op):
        for message in op.messages:
            self.hand_out(message)
        return op.messages

    def _complete(self, op):
        self._stop_timer(op)
        op.deferred.callback(self._take(op))

    def _timed_out(self, op):
        op.timer = None
        if op in self._ops:
            self._ops.remove(op)
            op.deferred.callback(self._take(op))

    def _cancelled(self, op):
        """The application gave up: what the op collected goes to the next op or the queue."""
        self._stop_timer(op)
        if op in self._ops:
            self._ops.remove(op)
            for message in op.messages:
                self.offer(message)
        op.messages = []

    @staticmethod
    def _stop_timer(op):
        if op.timer is not None and op.timer.active():
            op.timer.cancel()
        op.timer = None
