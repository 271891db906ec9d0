"""
Review regressions of the cursor's read position: a read in flight must not undo a rewind,
seek or reset that happened while it was reading.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.testing.patching import patch_method

from tests.mledger.test_support import ManagedLedgerHarness, data


class ReadInFlightTests(ManagedLedgerHarness, unittest.TestCase):
    def slow_reads(self, ml):
        """Make storage reads wait until ``release()``; returns ``release``."""
        held, slowed = [], [True]
        original = ml._read_from_ledger

        def slow(lid, first, last):
            if not slowed[0]:
                return original(lid, first, last)
            d = defer.Deferred()
            held.append((d, original(lid, first, last)))
            return d

        patch_method(self, ml, "_read_from_ledger", slow)

        def release(stop=False):
            """Let the held reads complete; ``stop``: and read at once from now on."""
            for d, result in held:
                result.chainDeferred(d)
            del held[:]
            if stop:
                slowed[0] = False
        return release

    def test_rewind_during_read(self):
        """A rewind while a read is in flight: the next read starts at the first unacked entry."""
        ml = self.open(cache_size_bytes=0)
        c = self.cursor(ml)
        self.add(ml, 5)
        release = self.slow_reads(ml)
        d = c.read_entries(3)
        c.rewind()
        release()
        self.assertEqual(len(self.successResultOf(d)), 3)
        release(stop=True)
        d = c.read_entries(10)
        self.assertEqual([e.data for e in self.successResultOf(d)], [data(i) for i in range(5)])

    def test_reset_cursor_during_read(self):
        """A seek (reset_cursor) back to an earlier entry while a read is in flight holds."""
        ml = self.open(cache_size_bytes=0)
        c = self.cursor(ml)
        ps = self.add(ml, 5)
        self.successResultOf(c.mark_delete(ps[1]))
        release = self.slow_reads(ml)
        d = c.read_entries(3)
        self.successResultOf(c.reset_cursor(ps[0]))
        release()
        self.successResultOf(d)
        self.assertEqual(c.read_position, ps[0])
