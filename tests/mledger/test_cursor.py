"""Tests of durable and non-durable cursors."""

from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.position import EARLIEST, LATEST, Position
from pulsar_twisted.ledger.interfaces import BookieUnavailableError
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.interfaces import IManagedCursor, ManagedLedgerFencedError

from tests.mledger.test_support import ManagedLedgerHarness, data


class PositionTests(ManagedLedgerHarness, unittest.TestCase):
    def test_interface(self):
        ml = self.open()
        verifyObject(IManagedCursor, self.cursor(ml))
        verifyObject(IManagedCursor, ml.new_non_durable_cursor(EARLIEST))

    def test_earliest_and_latest(self):
        """earliest reads everything; latest only what is added after it."""
        ml = self.open()
        self.add(ml, 3)
        early = self.cursor(ml, "early", "earliest")
        late = self.cursor(ml, "late", "latest")
        self.assertEqual(late.mark_delete_position, ml.last_confirmed_entry())
        self.add(ml, 1, start=3)
        self.assertEqual([e.data for e in self.read(early)], [data(i) for i in range(4)])
        self.assertEqual([e.data for e in self.read(late)], [data(3)])
        self.assertEqual(early.number_of_entries_in_backlog(), 4)
        self.assertEqual(late.number_of_entries_in_backlog(), 1)
        self.assertFalse(early.has_more_entries())

    def test_individual_acks_ranges_and_backlog(self):
        ml = self.open(max_entries_per_ledger=4)
        c = self.cursor(ml)
        ps = self.add(ml, 10)
        self.successResultOf(c.delete([ps[1], ps[2], ps[5]]))
        self.assertEqual(c.individually_deleted_ranges(),
                         [(Position(ps[1].ledger_id, 0), ps[2]), (Position(ps[5].ledger_id, 0), ps[5])])
        self.assertEqual(c.number_of_entries_in_backlog(), 7)
        self.assertTrue(c.is_acknowledged(ps[2]))
        self.assertFalse(c.is_acknowledged(ps[3]))
        self.successResultOf(c.delete([ps[0]]))
        self.assertEqual(c.mark_delete_position, ps[2])
        # acks that complete a ledger fold the mark-delete into the next ledger
        self.successResultOf(c.delete([ps[3], ps[4]]))
        self.assertEqual(c.mark_delete_position, ps[5])
        self.assertEqual(c.individually_deleted_ranges(), [])
        self.assertEqual(c.number_of_entries_in_backlog(), 4)

    def test_read_skips_acked_and_replay(self):
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 8)
        self.successResultOf(c.delete([ps[1], ps[2], ps[3], ps[6]]))
        got = self.read(c, 3)
        self.assertEqual([e.position for e in got], [ps[0], ps[4], ps[5]])
        self.assertEqual([e.position for e in self.read(c)], [ps[7]])
        replay = self.successResultOf(c.replay_entries([ps[7], ps[2], ps[0], ps[6]]))
        self.assertEqual([e.position for e in replay], [ps[0], ps[7]])

    def test_seek_rewind_reset(self):
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 7)
        self.read(c)
        c.rewind()
        self.assertEqual(c.read_position, ps[0])
        c.seek(ps[4])
        self.assertEqual([e.position for e in self.read(c)], ps[4:])
        self.successResultOf(c.delete([ps[5]]))
        self.successResultOf(c.reset_cursor(ps[3]))
        self.assertEqual(c.mark_delete_position, Position(ps[3].ledger_id, ps[3].entry_id - 1))
        self.assertEqual(c.individually_deleted_ranges(), [])
        self.assertEqual(c.number_of_entries_in_backlog(), 4)
        self.assertEqual([e.position for e in self.read(c)], ps[3:])
        # the ledger before ps[3] was trimmed once that reset was persisted
        self.successResultOf(c.reset_cursor(EARLIEST))
        self.assertEqual(c.number_of_entries_in_backlog(), 4)
        self.assertEqual(c.read_position, ps[3])
        self.successResultOf(c.reset_cursor(LATEST))
        self.assertEqual(c.number_of_entries_in_backlog(), 0)
        self.assertFalse(c.has_more_entries())

    def test_non_durable_cursor(self):
        ml = self.open()
        ps = self.add(ml, 4)
        r = ml.new_non_durable_cursor(ps[1])
        self.assertEqual([e.position for e in self.read(r)], ps[1:])
        r2 = ml.new_non_durable_cursor(ps[1], inclusive=False)
        self.assertEqual([e.position for e in self.read(r2)], ps[2:])
        self.successResultOf(r2.mark_delete(ps[3]))
        self.assertEqual(r2.number_of_entries_in_backlog(), 0)
        created = list(self.bk.created)
        self.assertEqual(self.bk.created, created)  # no cursor ledger for readers


    def test_unacked_positions_skip_and_nth(self):
        """nth_unacked_position / skip_unacked walk past acked entries and across ledgers."""
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 8)
        self.successResultOf(c.delete([ps[1], ps[4]]))
        self.assertEqual(c.unacked_positions(4), [ps[0], ps[2], ps[3], ps[5]])
        self.assertEqual(c.nth_unacked_position(3), ps[3])
        self.assertIsNone(c.nth_unacked_position(7))
        self.assertIsNone(c.nth_unacked_position(0))
        self.assertEqual(self.successResultOf(c.skip_unacked(3)), 3)
        self.assertEqual(c.mark_delete_position, ps[4])
        self.assertEqual(c.number_of_entries_in_backlog(), 3)
        # no individual acks: the skip is a plain mark-delete
        self.assertEqual(self.successResultOf(c.skip_unacked(2)), 2)
        self.assertEqual(c.mark_delete_position, ps[6])
        self.assertEqual(self.successResultOf(c.skip_unacked(10)), 1)
        self.assertEqual(c.mark_delete_position, ps[7])
        self.assertEqual(self.successResultOf(c.skip_unacked(1)), 0)

class PersistenceTests(ManagedLedgerHarness, unittest.TestCase):
    def test_mark_delete_coalescing(self):
        """Acks during a snapshot write share the next one; every Deferred fires."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 100)
        before = c.persist_count
        self.bk.pause_adds()
        ds = [c.delete([p]) if i % 2 else c.mark_delete(p) for i, p in enumerate(ps)]
        while self.bk._held:
            self.bk.resume_adds()
            self.bk.pause_adds()
        self.bk.resume_adds()
        for d in ds:
            self.assertIsNone(self.successResultOf(d))
        self.assertEqual(c.persist_count - before, 2)
        self.assertEqual(c.mark_delete_position, ps[-1])

    def test_restart_restores_cursor_exactly(self):
        """Clean restart: mark-delete and individual ranges come back; unacked entries are read again."""
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 9)
        self.successResultOf(c.mark_delete(ps[1]))
        self.successResultOf(c.delete([ps[3], ps[4], ps[7]]))
        self.read(c)
        ranges = c.individually_deleted_ranges()
        self.successResultOf(self.factory.shutdown())

        ml2 = self.open(factory=self.new_factory(max_entries_per_ledger=3))
        c2 = ml2.get_cursor("sub")
        self.assertEqual(c2.mark_delete_position, ps[1])
        self.assertEqual(c2.individually_deleted_ranges(), ranges)
        self.assertEqual(c2.number_of_entries_in_backlog(), 4)
        self.assertEqual([e.position for e in self.read(c2)], [ps[2], ps[5], ps[6], ps[8]])

    def test_crash_restart_restores_cursor_and_fences(self):
        """No close: the new owner reads the last snapshot; the old instance is fenced."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 5)
        self.successResultOf(c.delete([ps[0], ps[2]]))
        ml2 = self.open(factory=self.new_factory())
        c2 = ml2.get_cursor("sub")
        self.assertEqual(c2.mark_delete_position, ps[0])
        self.assertEqual([e.position for e in self.read(c2)], [ps[1], ps[3], ps[4]])
        self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerFencedError)
        self.failureResultOf(c.delete([ps[3]]), ManagedLedgerFencedError)
        # the new owner's cursor persists into a fresh ledger, the old one goes
        old_ledger = formats.decode_cursor_node(
            self.successResultOf(self.store.get(formats.cursor_path(ml.name, "sub")))[0])[0]
        self.successResultOf(c2.delete([ps[1]]))
        self.assertIn(old_ledger, self.bk.deleted)
        self.assertEqual(c2.mark_delete_position, ps[2])

    def test_cursor_ledger_rolls(self):
        ml = self.open(cursor_max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 10)
        first = c._ledger.ledger_id
        for p in ps:
            self.successResultOf(c.mark_delete(p))
        self.assertNotEqual(c._ledger.ledger_id, first)
        self.assertIn(first, self.bk.deleted)
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.mark_delete_position, ps[-1])

    def test_unacked_ranges_truncated(self):
        """Only max_unacked_ranges_to_persist ranges survive a restart (Pulsar's limit)."""
        ml = self.open(max_unacked_ranges_to_persist=2)
        c = self.cursor(ml)
        ps = self.add(ml, 10)
        self.successResultOf(c.delete([ps[1], ps[3], ps[5], ps[7]]))
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory(max_unacked_ranges_to_persist=2)).get_cursor("sub")
        self.assertEqual(c2.individually_deleted_ranges(),
                         [(Position(ps[1].ledger_id, 0), ps[1]), (ps[2], ps[3])])

    def test_cursor_ledger_write_failure_switches_ledger(self):
        """A failed snapshot write moves the cursor to a new ledger; the ack still succeeds."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 3)
        first = c._ledger.ledger_id
        self.bk.fail_next_adds(1, BookieUnavailableError)
        self.successResultOf(c.mark_delete(ps[1]))
        self.assertNotEqual(c._ledger.ledger_id, first)
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.mark_delete_position, ps[1])

    def test_cursor_falls_back_to_node(self):
        """When no cursor ledger can be made, the state goes to the cursor node."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 3)
        self.bk.fail_next_adds(1, BookieUnavailableError)
        self.bk.fail_next_creates(1)
        self.successResultOf(c.delete([ps[2]]))
        self.assertIsNone(c._ledger)
        ml2 = self.open(factory=self.new_factory())
        c2 = ml2.get_cursor("sub")
        self.assertEqual(c2.individually_deleted_ranges(), [(ps[1], ps[2])])

    def test_delete_cursor(self):
        ml = self.open(max_entries_per_ledger=2)
        c = self.cursor(ml)
        self.cursor(ml, "other")
        ps = self.add(ml, 4)
        self.successResultOf(c.mark_delete(ps[-1]))
        self.assertEqual(self.bk.deleted, [])
        cursor_ledger = ml.get_cursor("other")._ledger.ledger_id
        self.successResultOf(ml.delete_cursor("other"))
        self.assertIn(cursor_ledger, self.bk.deleted)
        self.assertIn(ps[0].ledger_id, self.bk.deleted)
        self.assertEqual(self.successResultOf(self.store.get_children(ml.path)), ["sub"])

    def test_stale_owner_without_cursor_ledger_cannot_overwrite(self):
        """A previous owner whose cursor had no ledger yet fails its node write (version moved)."""
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 3)
        self.successResultOf(self.factory.shutdown())
        a = self.open(factory=self.new_factory()).get_cursor("sub")
        b = self.open(factory=self.new_factory()).get_cursor("sub")
        ps = [Position(a.mark_delete_position.ledger_id, i) for i in range(3)]
        self.failureResultOf(a.mark_delete(ps[1]), ManagedLedgerFencedError)
        self.successResultOf(b.mark_delete(ps[2]))
        self.assertEqual(b.mark_delete_position, ps[2])
