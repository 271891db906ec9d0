"""Reconnection delays: doubling from ``initial`` up to ``maximum`` seconds, as the Java client's
``Backoff`` does (without its random jitter, so tests on a ``task.Clock`` are exact). Used by our
client's producers and consumers and by the broker's geo-replicators (Pulsar's replicator back-off
is 0.1 s to 60 s too)."""


class Backoff:
    def __init__(self, initial: float = 0.1, maximum: float = 60.0):
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self) -> float:
        """The delay to wait now; the following one doubles."""
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial
