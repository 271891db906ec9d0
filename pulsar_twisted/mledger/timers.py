"""
One reactor timer for many rarely firing ones (issue 14: memory per loaded topic).

Every managed ledger keeps a rollover timer armed for as long as its ledger is open (Pulsar's
``managedLedgerMaxLedgerRolloverTimeMinutes``, hours by default). A reactor ``DelayedCall`` per
managed ledger costs about 300 bytes and a slot in the reactor's heap; ``SharedTimers`` keeps them in
one heap of small entries instead and has a single ``DelayedCall`` armed, for the earliest. A timer
fires at the time it was scheduled for (the shared call is moved earlier whenever an earlier timer
arrives), so a ``task.Clock`` sees the same times as with one call per timer. The heap holds the
timers themselves, ordered by time (no ``(time, sequence, timer)`` tuple per entry): timers due at
the same time fire in no promised order.
"""

import heapq

from twisted.logger import Logger

log = Logger()


class SharedTimer:
    """
    One scheduled call: ``cancel()``, ``active()``, ``getTime()`` as a ``DelayedCall``. A bound
    method is kept as its function and object (``fn``, ``target``), not as a bound-method object
    (64 bytes per managed ledger, issue 14); ``target`` is None for any other callable.
    """

    __slots__ = ("time", "fn", "target", "owner")

    def __init__(self, owner, time, fn):
        self.owner = owner
        self.time = time
        target = getattr(fn, "__self__", None)
        func = getattr(fn, "__func__", None)
        if target is not None and func is not None:
            self.fn, self.target = func, target
        else:
            self.fn, self.target = fn, None

    def _run(self, fn) -> None:
        target = self.target
        self.target = None
        if target is None:
            fn()
        else:
            fn(target)

    def __lt__(self, other) -> bool:
        return self.time < other.time

    def active(self) -> bool:
        return self.fn is not None

    def getTime(self) -> float:
        return self.time

    def cancel(self) -> None:
        if self.fn is not None:
            self.fn = self.target = None
            self.owner._cancelled()


class SharedTimers:
    """``SharedTimers(reactor)``: ``call_later(delay, fn)`` returns a SharedTimer."""

    def __init__(self, reactor):
        self.reactor = reactor
        self._heap = []         # SharedTimers by time, cancelled ones included
        self._call = None       # the reactor DelayedCall armed for the earliest entry
        self._cancelled_count = 0

    def __len__(self) -> int:
        """Timers scheduled and not cancelled nor fired."""
        return len(self._heap) - self._cancelled_count

    def call_later(self, delay: float, fn) -> SharedTimer:
        timer = SharedTimer(self, self.reactor.seconds() + max(0.0, delay), fn)
        heapq.heappush(self._heap, timer)
        call = self._call
        if call is None or call.getTime() > timer.time:
            self._arm()
        return timer

    def _cancelled(self) -> None:
        self._cancelled_count += 1
        heap = self._heap
        if self._cancelled_count > 64 and self._cancelled_count * 2 > len(heap):
            # Mostly cancelled entries (ledgers closed and reopened): rebuild rather than let them pile up.
            self._heap = [timer for timer in heap if timer.fn is not None]
            heapq.heapify(self._heap)
            self._cancelled_count = 0
        elif heap and heap[0].fn is None:
            self._arm()

    def _arm(self) -> None:
        heap = self._heap
        while heap and heap[0].fn is None:
            heapq.heappop(heap)
            self._cancelled_count -= 1
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        if heap:
            self._call = self.reactor.callLater(max(0.0, heap[0].time - self.reactor.seconds()), self._fire)

    def _fire(self) -> None:
        self._call = None
        heap = self._heap
        now = self.reactor.seconds()
        while heap and heap[0].time <= now:
            timer = heapq.heappop(heap)
            fn, timer.fn = timer.fn, None
            if fn is None:
                self._cancelled_count -= 1
                continue
            try:
                timer._run(fn)
            except Exception:
                log.failure("shared timer call {fn!r} failed", fn=fn)
        self._arm()

    def stop(self) -> None:
        """Cancel everything (the factory shut down)."""
        for timer in self._heap:
            timer.fn = timer.target = None
        self._heap = []
        self._cancelled_count = 0
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
