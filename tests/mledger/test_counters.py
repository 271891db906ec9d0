"""ManagedLedgerCounters: both histograms in one list, read as Pulsar's two bucket lists."""

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.mledger.counters import ADD_LATENCY_BOUNDS_MS, ENTRY_SIZE_BOUNDS, ManagedLedgerCounters


class CountersTests(unittest.SynchronousTestCase):
    def test_buckets_of_adds(self):
        """Each add lands in one latency bucket and one size bucket; the lists read apart."""
        clock = task.Clock()
        counters = ManagedLedgerCounters(clock)
        self.assertEqual(counters.add_latency_buckets, [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1))
        self.assertEqual(counters.entry_size_buckets, [0] * (len(ENTRY_SIZE_BOUNDS) + 1))
        counters.add_done(None, 0.0, 100)           # 0 ms, 100 bytes
        clock.advance(0.003)
        counters.add_done(None, 0.0, 5000)          # 3 ms, 5000 bytes
        clock.advance(10)
        self.assertEqual(counters.add_done("r", 0.0, 2_000_000), "r")   # overflow both
        self.assertEqual(counters.add_latency_buckets, [1, 0, 1, 0, 0, 0, 0, 0, 0, 1])
        self.assertEqual(counters.entry_size_buckets, [1, 0, 0, 0, 0, 1, 0, 0, 1])
        self.assertEqual((counters.add_succeed, counters.add_bytes), (3, 2_005_100))
        counters.add_latency_buckets[0] = 99      # a copy: the counters are not changed
        self.assertEqual(counters.add_latency_buckets[0], 1)

    def test_ledger_switches(self):
        """A switch lands in a latency bucket of its own list, made on the first switch only."""
        clock = task.Clock()
        counters = ManagedLedgerCounters(clock)
        empty = [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1)
        self.assertEqual(counters.ledger_switch_buckets, empty)
        unswitched = len(counters._buckets)
        clock.advance(1.0)
        counters.ledger_switched(1.0)               # 0 ms
        counters.ledger_switched(0.998)             # 2 ms
        self.assertEqual(counters.ledger_switch_buckets, [1, 0, 1, 0, 0, 0, 0, 0, 0, 0])
        self.assertEqual(len(counters._buckets), unswitched + len(empty))
        counters.add_done(None, 1.0, 100)
        self.assertEqual(counters.entry_size_buckets, [1, 0, 0, 0, 0, 0, 0, 0, 0])
