"""
A persistent topic's storage write histograms: write latency and entry size, in Pulsar's buckets
(``pulsar_storage_write_latency_le_*``, ``pulsar_entry_size_le_*`` on /metrics).

Buckets are Pulsar's ``StatsBuckets``: bucket i counts the values ``bounds[i-1] < v <= bounds[i]``
(NOT cumulative, unlike Prometheus histograms), the last one (``overflow``) everything above the
last bound. Latency is the time from ``ManagedLedger.add_entry`` to its success on the topic's
clock, bucketed in whole microseconds against Pulsar's bounds (0.5 ms ... 1 s); the sum is exposed
in milliseconds. Failed writes are not counted (Pulsar records only completed adds).

Per write the cost is one ``bisect`` on a tuple and a few integer additions; counts and sums are
only read at scrape time.
"""

from bisect import bisect_left

#: Pulsar's ENTRY_LATENCY_BUCKETS_USEC (0.5, 1, 5, 10, 20, 50, 100, 200, 1000 ms).
WRITE_LATENCY_BOUNDS_US = (500, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 1_000_000)
WRITE_LATENCY_SUFFIXES = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")

#: Pulsar's ENTRY_SIZE_BUCKETS_BYTES (its "1 MB" bound is 1_232_896, kept as is).
ENTRY_SIZE_BOUNDS = (128, 512, 1024, 2048, 4096, 16_384, 102_400, 1_232_896)
ENTRY_SIZE_SUFFIXES = ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")
_SIZE_FIRST = len(WRITE_LATENCY_BOUNDS_US) + 1  # index of the first size bucket in _buckets


class _WriteHistograms:
    """What both kinds expose: ``latency_buckets``, ``size_buckets``, ``latency_sum_ms()``,
    ``size_sum``, and from them ``count`` and ``metrics()``."""

    __slots__ = ()

    @property
    def count(self) -> int:
        """Writes recorded (the same for both histograms)."""
        return sum(self.latency_buckets)

    def metrics(self) -> list:
        """``(metric name, value)`` pairs, Pulsar's names, in exposition order."""
        out = [(f"pulsar_storage_write_latency_le_{s}", n)
               for s, n in zip(WRITE_LATENCY_SUFFIXES, self.latency_buckets)]
        count = self.count
        out.append(("pulsar_storage_write_latency_count", count))
        out.append(("pulsar_storage_write_latency_sum", self.latency_sum_ms()))
        out.extend((f"pulsar_entry_size_le_{s}", n) for s, n in zip(ENTRY_SIZE_SUFFIXES, self.size_buckets))
        out.append(("pulsar_entry_size_count", count))
        out.append(("pulsar_entry_size_sum", self.size_sum))
        return out


class LedgerWriteStats(_WriteHistograms):
    """
    A persistent topic's histograms read from its managed ledger's counters (mledger/counters.py):
    they record every add of the topic, at the same instants (the topic's publish calls add_entry,
    whose completion the counters see just before the topic does), in the same bounds. Made when
    read (scrape time), so a loaded topic holds no histograms of its own (issue 14: 270 bytes).
    """

    __slots__ = ("_counters",)

    def __init__(self, counters):
        self._counters = counters

    @property
    def latency_buckets(self) -> list:
        return self._counters.add_latency_buckets

    @property
    def size_buckets(self) -> list:
        return self._counters.entry_size_buckets

    def latency_sum_ms(self) -> float:
        return self._counters.add_latency_sum_ms

    @property
    def size_sum(self) -> int:
        return self._counters.add_bytes


class StorageWriteStats(_WriteHistograms):
    """
    The histograms of one topic (whose managed ledger keeps no counters: ``LedgerWriteStats``
    otherwise). ``written(result, started, size)`` is a Deferred callback (returns
    ``result``) recording one successful write that started at ``started`` (``clock.seconds()``)
    and stored ``size`` bytes.
    """

    # Both histograms in one list (latency buckets, then size buckets): one list per topic
    # instead of two (issue 14: memory per loaded topic).
    __slots__ = ("clock", "_buckets", "latency_sum_us", "size_sum")

    def __init__(self, clock):
        self.clock = clock
        self._buckets = [0] * (_SIZE_FIRST + len(ENTRY_SIZE_BOUNDS) + 1)
        self.latency_sum_us = 0
        self.size_sum = 0

    @property
    def latency_buckets(self) -> list:
        return self._buckets[:_SIZE_FIRST]

    @property
    def size_buckets(self) -> list:
        return self._buckets[_SIZE_FIRST:]

    def written(self, result, started: float, size: int):
        latency_us = int((self.clock.seconds() - started) * 1_000_000)
        if latency_us < 0:
            latency_us = 0      # a wall clock stepped back: count it as instantaneous
        buckets = self._buckets
        buckets[bisect_left(WRITE_LATENCY_BOUNDS_US, latency_us)] += 1
        self.latency_sum_us += latency_us
        buckets[_SIZE_FIRST + bisect_left(ENTRY_SIZE_BOUNDS, size)] += 1
        self.size_sum += size
        return result

    # ---------------------------------------------------------------- read at scrape time
    def latency_sum_ms(self) -> float:
        return self.latency_sum_us / 1000.0


#: (metric name, help) of every family ``StorageWriteStats.metrics`` yields, for the collector.
STORAGE_METRICS_HELP = (
    [(f"pulsar_storage_write_latency_le_{s}",
      f"Entry writes whose storage latency is in Pulsar's bucket le_{s} (ms; not cumulative)")
     for s in WRITE_LATENCY_SUFFIXES]
    + [("pulsar_storage_write_latency_count", "Entry writes measured"),
       ("pulsar_storage_write_latency_sum", "Sum of the entry write latencies in milliseconds")]
    + [(f"pulsar_entry_size_le_{s}",
        f"Entries written whose size is in Pulsar's bucket le_{s} (bytes; not cumulative)")
       for s in ENTRY_SIZE_SUFFIXES]
    + [("pulsar_entry_size_count", "Entries written"),
       ("pulsar_entry_size_sum", "Sum of the sizes of the entries written in bytes")])
