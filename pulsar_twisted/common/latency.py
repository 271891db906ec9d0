"""
A latency summary for /metrics (Prometheus "summary": count, sum, quantiles), shared by the broker
and the bookie. Pure: the caller measures, this only accumulates.
"""

from collections import deque


class LatencySummary:
    """Count and sum of latencies in ms, and quantiles over the last ``window`` observations
    (Pulsar's summaries use a sliding time window; a sliding count window is enough here)."""

    def __init__(self, window: int = 1024):
        self.count = 0
        self.sum_ms = 0.0
        self.recent = deque(maxlen=window)

    def observe(self, ms: float) -> None:
        self.count += 1
        self.sum_ms += ms
        self.recent.append(ms)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the recent observations (0.0 when there are none)."""
        if not self.recent:
            return 0.0
        ordered = sorted(self.recent)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]
