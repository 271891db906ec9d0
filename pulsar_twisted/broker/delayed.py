"""
Delayed delivery for Shared and Key_Shared subscriptions (Pulsar's InMemoryDelayedDeliveryTracker).

An entry whose MessageMetadata.deliver_at_time is later than now + ``delayedDeliveryTickTimeMillis``
is not sent when read: its position is held here, and handed back to the dispatcher (which sends
it as a replay) once due. Exclusive and Failover subscriptions deliver such messages at once, as
Pulsar does (their single consumer must see the topic in order).

Memory is what bounds this, not permits (held entries take none), so each held message is one
Python int packing ``(deliver_at_ms, ledger_id, entry_id)`` in a heap: ints are not tracked by the
garbage collector and a list of them costs the int plus one pointer (about 60 bytes a message,
``scripts/bench_delayed.py`` measures it), against Pulsar's 24 bytes in off-heap longs.

The tracker keeps nothing durable: held entries are unacknowledged entries after the cursor's
mark-delete position, so after a restart the dispatcher reads them again and holds them again.
The timer ticks at most once per ``tick`` (Pulsar's tick time), so many messages due close
together are released in one round.
"""

import heapq

from pulsar_twisted.common.position import Position

_SHIFT = 64
_MASK = (1 << _SHIFT) - 1


class DelayedDeliveryTracker:
    """
    Positions held until their delivery time. ``release(positions)`` is called (from the clock)
    with the positions that became due.
    """

    def __init__(self, clock, tick_ms: int, release):
        self.clock = clock
        self.tick_ms = max(1, tick_ms)
        self.release = release
        self._heap = []
        self._timer = None
        self._timer_at = None
        self._last_tick_ms = 0

    def __len__(self) -> int:
        return len(self._heap)

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def hold(self, position, deliver_at_ms: int) -> bool:
        """Hold ``position`` if it is not due yet (True); False: deliver it now."""
        if deliver_at_ms <= self._now_ms() + self.tick_ms:
            return False
        packed = (deliver_at_ms << (2 * _SHIFT)) | (position[0] << _SHIFT) | position[1]
        heap = self._heap
        heapq.heappush(heap, packed)
        if heap[0] == packed or self._timer is None:
            # A new earliest message (else the timer already set is early enough).
            self._update_timer()
        return True

    def _update_timer(self) -> None:
        if not self._heap:
            self._cancel()
            return
        first_ms = self._heap[0] >> (2 * _SHIFT)
        now = self._now_ms()
        # Not more often than once per tick (Pulsar's remainingTickDelay).
        at_ms = max(first_ms - self.tick_ms, self._last_tick_ms + self.tick_ms, now)
        if self._timer is not None and self._timer.active():
            if self._timer_at <= at_ms:
                return
            self._timer.cancel()
        self._timer_at = at_ms
        self._timer = self.clock.callLater((at_ms - now) / 1000.0, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self._now_ms()
        self._last_tick_ms = now
        cutoff = (now + self.tick_ms + 1) << (2 * _SHIFT)
        heap = self._heap
        due = []
        while heap and heap[0] < cutoff:
            packed = heapq.heappop(heap)
            due.append(Position((packed >> _SHIFT) & _MASK, packed & _MASK))
        self._update_timer()
        if due:
            self.release(due)

    def next_delivery_ms(self):
        """When the earliest held message is due (ms), or None."""
        return self._heap[0] >> (2 * _SHIFT) if self._heap else None

    def clear(self) -> None:
        """Forget everything (the cursor was moved: what is after it will be read again)."""
        self._heap = []
        self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    close = clear
