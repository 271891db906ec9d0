"""
A managed ledger's operation counters, the source of Pulsar's ``pulsar_ml_*`` metrics (its
``ManagedLedgerMBean``): adds and reads that succeeded or failed, their entries and bytes, and the
add latency, entry size and ledger switch latency in Pulsar's buckets.

Pulsar's buckets (``StatsBuckets``) are not cumulative: bucket i counts values in
``(bounds[i-1], bounds[i]]``, the overflow one everything above the last bound. Pulsar resets them
every stats period; here they count since the managed ledger was opened (the collector turns the
plain counters into rates between scrapes). Per operation the cost is one ``bisect`` and a few
integer additions, in the Deferred callbacks the managed ledger attaches.
"""

from bisect import bisect_left

#: AddEntryLatencyBuckets bounds in ms and their ``quantile`` labels (Pulsar's names).
ADD_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
#: EntrySizeBuckets bounds in bytes (Pulsar's "1 MB" bound is 1_232_896).
ENTRY_SIZE_BOUNDS = (128.0, 512.0, 1024.0, 2048.0, 4096.0, 16384.0, 102400.0, 1232896.0)
_SIZE_FIRST = len(ADD_LATENCY_BOUNDS_MS) + 1    # index of the first size bucket in _buckets
#: Index of the first LedgerSwitchLatencyBuckets bucket (the add latency bounds, as Pulsar's), present
#: once a ledger switch was counted: a topic that never switched holds none.
_SWITCH_FIRST = _SIZE_FIRST + len(ENTRY_SIZE_BOUNDS) + 1


def bucket_labels(bounds) -> list:
    """Pulsar's ``quantile`` label of each bucket: ``"0.0_0.5"``, ``"0.5_1.0"``, ..."""
    lows = (0.0,) + tuple(bounds[:-1])
    return [f"{low}_{high}" for low, high in zip(lows, bounds)]


class ManagedLedgerCounters:
    """Counters of one managed ledger; the ``*_done`` / ``*_failed`` methods are Deferred
    callbacks that return what they are given."""

    # Both histograms live in one list (latency buckets, then size buckets): one list per managed
    # ledger instead of two (issue 14: memory per loaded topic).
    __slots__ = ("clock", "add_succeed", "add_errors", "add_bytes", "read_succeeded",
                 "read_errors", "read_entries", "read_bytes", "_buckets", "add_latency_sum_ms")

    def __init__(self, clock):
        self.clock = clock
        self.add_succeed = 0
        self.add_errors = 0
        self.add_bytes = 0
        self.read_succeeded = 0
        self.read_errors = 0
        self.read_entries = 0
        self.read_bytes = 0
        self._buckets = [0] * (_SIZE_FIRST + len(ENTRY_SIZE_BOUNDS) + 1)
        self.add_latency_sum_ms = 0.0

    @property
    def add_latency_buckets(self) -> list:
        return self._buckets[:_SIZE_FIRST]

    @property
    def entry_size_buckets(self) -> list:
        return self._buckets[_SIZE_FIRST:_SWITCH_FIRST]

    @property
    def ledger_switch_buckets(self) -> list:
        """Ledger switches by how long adds waited for them, in ms (``ledger_switched``)."""
        return self._buckets[_SWITCH_FIRST:] or [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1)

    def ledger_switched(self, started: float) -> None:
        """A ledger switch (rollover) that began at ``started`` is done: the next ledger takes adds."""
        buckets = self._buckets
        if len(buckets) == _SWITCH_FIRST:
            buckets.extend([0] * (len(ADD_LATENCY_BOUNDS_MS) + 1))
        latency_ms = max((self.clock.seconds() - started) * 1000.0, 0.0)
        buckets[_SWITCH_FIRST + bisect_left(ADD_LATENCY_BOUNDS_MS, latency_ms)] += 1

    def add_done(self, result, started: float, size: int):
        """One add of ``size`` bytes made at ``started`` succeeded (a Deferred callback returning
        ``result``)."""
        self.adds_done(((started, size),))
        return result

    def adds_done(self, adds) -> None:
        """Adds ``(started, size)`` succeeded now (the managed ledger's completions of one pass)."""
        now = self.clock.seconds()
        buckets = self._buckets
        latency_sum = nbytes = 0
        for started, size in adds:
            latency_ms = (now - started) * 1000.0
            if latency_ms < 0.0:
                latency_ms = 0.0    # a wall clock stepped back
            buckets[bisect_left(ADD_LATENCY_BOUNDS_MS, latency_ms)] += 1
            buckets[_SIZE_FIRST + bisect_left(ENTRY_SIZE_BOUNDS, size)] += 1
            latency_sum += latency_ms
            nbytes += size
        self.add_succeed += len(adds)
        self.add_bytes += nbytes
        self.add_latency_sum_ms += latency_sum

    def add_failed(self, failure):
        self.add_errors += 1
        return failure

    def read_done(self, result):
        """``result``: the managed ledger's ``(entries, next_position)``."""
        entries = result[0]
        self.read_succeeded += 1
        self.read_entries += len(entries)
        self.read_bytes += sum(len(e.data) for e in entries)
        return result

    def read_failed(self, failure):
        self.read_errors += 1
        return failure
