"""The ledger switch's failure paths (ManagedLedgerImpl._switch_ledger / _switch_to): take-overs and
crashes in the middle of a switch, failed closes, refused records, the ledger made ahead."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.testing.patching import patch_method

from tests.mledger.test_support import ManagedLedgerHarness, data


class SwitchFailureTests(ManagedLedgerHarness, unittest.TestCase):

    def test_takeover_between_record_and_close_reads_every_entry(self):
        """The switch wrote our node naming the next ledger, the full one's close never completed
        (the broker crashed): the full ledger is no longer the last one, so the new owner does not
        recover it, yet its last entry was acknowledged and must be readable."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        full = ml.current_ledger_id()
        patch_method(self, ml._current, "close", lambda: defer.Deferred())   # never completes
        self.add(ml, 10)
        recorded = [i["ledgerId"] for i in ml.ledgers_info()]
        self.assertEqual(recorded[0], full)
        self.assertEqual(len(recorded), 2)            # the next one is in the node already
        other = self.open(factory=self.new_factory(max_entries_per_ledger=10))
        self.assertEqual(other.number_of_entries(), 10)
        entries = self.successResultOf(other.read_entries(Position(-1, -1), 20))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(10)])

    def test_failed_close_of_the_full_ledger_leaves_entries_readable(self):
        """The full ledger's close did not record it closed (as the real client's close does
        when the metadata session expired: it completes locally): a later owner still reads its
        last entry."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        handle = ml._current
        patch_method(self, handle, "close", lambda: defer.succeed(None))    # not closed for real
        self.add(ml, 12)
        self.successResultOf(ml.close())
        other = self.open(factory=self.new_factory(max_entries_per_ledger=10))
        entries = self.successResultOf(other.read_entries(Position(-1, -1), 20))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(12)])
