"""The ledger switch's failure paths (ManagedLedgerImpl._switch_ledger / _switch_to): take-overs and
crashes in the middle of a switch, failed closes, refused records, the ledger made ahead."""

import gc

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import LedgerFencedError, NotEnoughBookiesError
from pulsar_twisted.common.position import Position
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.testing.patching import patch_method

from tests.mledger.test_support import ManagedLedgerHarness, data


class SwitchFailureTests(ManagedLedgerHarness, unittest.TestCase):

    def capture_handles(self):
        """Writer handles the ledger client makes from now on, in order."""
        handles = []
        real_create = self.bk.create_ledger

        def create(*a, **kw):
            return real_create(*a, **kw).addCallback(lambda h: handles.append(h) or h)
        self.patch(self.bk, "create_ledger", create)
        return handles

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

    def test_dropped_ledger_close_failure_is_handled(self):
        """Dropping the ledger made ahead: a failed close of it is logged, not left as an
        unhandled error in a Deferred, and the ledger is still deleted."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        handles = self.capture_handles()
        self.add(ml, 9)
        ahead = handles[-1]
        patch_method(self, ahead, "close",
                     lambda: defer.fail(LedgerFencedError("injected: close failed")))
        self.successResultOf(ml.close())
        gc.collect()
        self.assertEqual(self.flushLoggedErrors(LedgerFencedError), [])
        self.assertIn(ahead.ledger_id, self.bk.deleted)

    def test_switch_record_refused_deletes_the_next_ledger(self):
        """Another owner wrote our node: the switch's record is refused (BadVersion), so no node
        names the next ledger: it is deleted, not left behind."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        self.add(ml, 9)
        ahead = self.bk.created[-1]
        raw = self.successResultOf(self.store.get(ml.path))[0]
        self.successResultOf(self.store.put(ml.path, raw))      # someone else's write
        self.add(ml, 1, start=9)                                 # fills it: the switch
        self.failureResultOf(ml.add_entry(b"late"), ManagedLedgerFencedError)
        self.assertTrue(ml.is_fenced)
        self.assertIn(ahead, self.bk.deleted)

    def test_trim_during_a_failed_switch_keeps_the_last_recorded_ledger(self):
        """A trim while the switch's record is in flight (the full ledger closed, consumed): when
        the record then fails, our node must still name the full ledger, the last one it has had,
        or a new owner finds an empty list and no longer knows where the log ends."""
        ml = self.open(max_entries_per_ledger=10)
        cursor = self.cursor(ml)
        full = ml.current_ledger_id()
        held = []
        real_put = self.store.put

        def put(path, value, expected_version=None, **kw):
            if path == ml.path and not held:
                held.append(defer.Deferred())      # the switch's record: in flight
                return held[0]
            return real_put(path, value, expected_version=expected_version, **kw)
        self.patch(self.store, "put", put)
        self.add(ml, 10)
        self.assertEqual(len(held), 1)
        self.successResultOf(cursor.mark_delete(Position(full, 9)))   # everything consumed
        held[0].errback(MetadataUnavailableError("injected: record failed"))
        raw = self.successResultOf(self.store.get(ml.path))[0]
        self.assertIn(full, [row[0] for row in formats.decode_ledger_info(raw)[0]])
        other = self.open(factory=self.new_factory(max_entries_per_ledger=10))
        self.assertEqual(other.last_confirmed_entry(), Position(full, 9))

    def test_trim_after_a_failed_add_waits_for_the_next_ledger(self):
        """After a failed add with adds waiting, the ledger before the failed one is trimmed once
        the next ledger is recorded (not while it is being created)."""
        ml = self.open(max_entries_per_ledger=10)
        cursor = self.cursor(ml)
        first = ml.current_ledger_id()
        self.add(ml, 11)                            # the first ledger is full, one in the second
        second = ml.current_ledger_id()
        closing, making = defer.Deferred(), defer.Deferred()
        real_close, real_create = ml._current.close, self.bk.create_ledger
        patch_method(self, ml._current, "close", lambda: closing.addCallback(lambda _: real_close()))
        self.patch(self.bk, "create_ledger",
                   lambda *a, **kw: making.addCallback(lambda _: real_create(*a, **kw)))
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        self.failureResultOf(ml.add_entry(b"lost"))
        waiting = ml.add_entry(data(11))            # queued while the failed ledger closes
        closing.callback(None)                      # closed: the next ledger is being made
        self.successResultOf(cursor.mark_delete(Position(second, 0)))    # all consumed
        self.assertIn(first, [i["ledgerId"] for i in ml.ledgers_info()])
        making.callback(None)
        self.successResultOf(waiting)
        self.assertNotIn(first, [i["ledgerId"] for i in ml.ledgers_info()])
        self.flushLoggedErrors()
