"""
``LogRate``: at most one line per period for a warning that a fault repeats many times a second.

While a bookie is paused, every reactor turn can time out a few more of its requests; while the
healthy bookies are too few, every ledger creation falls back to quarantined ones. A line each
filled the logs (up to 125 lines a second in a chaos run) and hid everything else. The first
occurrence is logged at once; those after it within ``period`` are counted and reported with the
next line.
"""


class LogRate:
    """``due(count)`` records ``count`` occurrences and returns how many to report if a line may be
    written now (those held back since the last line included), else None. Times come from
    ``clock.seconds()``."""

    __slots__ = ("clock", "period", "_last", "_held")

    def __init__(self, clock, period: float = 1.0):
        self.clock = clock
        self.period = period
        self._last = None
        self._held = 0

    def due(self, count: int = 1):
        self._held += count
        now = self.clock.seconds()
        if self._last is not None and now - self._last < self.period:
            return None
        self._last = now
        held, self._held = self._held, 0
        return held
