"""The fake bookie behaves like BookieStorage and its faults do what they say."""

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import (
    BookieUnavailableError, LedgerFencedError, NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.testing.fake_bookie import FakeBookie


class FakeBookieTests(unittest.TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.bookie = FakeBookie("b", self.clock)

    def test_storage_semantics(self):
        b = self.bookie
        self.failureResultOf(b.read_entry(1, 0), NoSuchLedgerError)
        self.successResultOf(b.add_entry(1, 0, b"zero", b"k", lac=-1))
        self.successResultOf(b.add_entry(1, 1, b"one", b"k", lac=0))
        self.assertEqual(self.successResultOf(b.read_entry(1, -1)), b"one")
        self.failureResultOf(b.read_entry(1, 5), NoSuchEntryError)
        self.assertEqual((b.read_lac(1), b.last_entry_id(1)), (0, 1))
        self.assertEqual(b.last_entry_id(42), -1)      # unknown: -1, as BookieStorage
        self.failureResultOf(b.add_entry(1, 2, b"x", b"other"), UnauthorizedAccessError)
        self.successResultOf(b.fence_ledger(1, b"k"))
        self.assertTrue(b.is_fenced(1))
        self.failureResultOf(b.add_entry(1, 2, b"x", b"k"), LedgerFencedError)
        self.successResultOf(b.add_entry(1, 2, b"x", b"k", recovery_add=True))
        self.successResultOf(b.fence_ledger(2, b"k"))       # unknown ledger: fenced anyway
        self.failureResultOf(b.add_entry(2, 0, b"x", b"k"), LedgerFencedError)
        self.successResultOf(b.delete_ledger(1))
        self.assertFalse(b.has_ledger(1))

    def test_fail_after_and_times(self):
        b = self.bookie
        b.fail("add", after=1, times=2)
        results = [b.add_entry(1, i, b"x", b"k") for i in range(4)]
        self.successResultOf(results[0])
        self.failureResultOf(results[1], BookieUnavailableError)
        self.failureResultOf(results[2], BookieUnavailableError)
        self.successResultOf(results[3])
        self.assertEqual(b.entry_ids(1), [0, 3])

    def test_delay_hold_hang(self):
        b = self.bookie
        b.delay("add", 3, times=1)
        d = b.add_entry(1, 0, b"x", b"k")
        self.assertEqual(b.entry_ids(1), [0])       # stored at once, answered later
        self.assertNoResult(d)
        self.clock.advance(3)
        self.successResultOf(d)
        b.hold("read", times=2)
        first, second = b.read_entry(1, 0), b.read_entry(1, 7)
        b.held[1].release()
        self.failureResultOf(second, NoSuchEntryError)
        self.assertNoResult(first)
        b.release_held()
        self.assertEqual(self.successResultOf(first), b"x")
        b.hang("add")
        self.assertNoResult(b.add_entry(1, 1, b"y", b"k"))
        self.assertEqual(b.entry_ids(1), [0])

    def test_unavailable(self):
        self.bookie.available = False
        self.failureResultOf(self.bookie.add_entry(1, 0, b"x", b"k"), BookieUnavailableError)
        self.assertRaises(BookieUnavailableError, self.bookie.read_lac, 1)
