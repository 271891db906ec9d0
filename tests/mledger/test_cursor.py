"""Tests of durable and non-durable cursors."""

from twisted.internet import defer
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.bk_errors import BookieUnavailableError
from pulsar_twisted.common.position import EARLIEST, LATEST, Position
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.interfaces import (
    IManagedCursor, ManagedLedgerClosedError, ManagedLedgerFencedError)
from pulsar_twisted.mledger.rangeset import PositionRangeSet

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
        ds = self.with_adds_held(
            lambda: [c.delete([p]) if i % 2 else c.mark_delete(p) for i, p in enumerate(ps)])
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

    def _ack_during_fallback_node_write(self, node_write_succeeds: bool):
        """Acks made while the cursor writes its state to its node (no cursor ledger could be made)
        are persisted after that write, whether it succeeds or fails, and a close then finishes.
        They used to wait for the next ack to start their write: with none coming (the topic
        being unloaded), the ack never completed and the managed ledger's close waited for good
        (seen under the nemesis: "cursor sub-shared no_ledger: ... 1 waiting")."""
        from twisted.internet import defer
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
        from pulsar_twisted.testing.patching import patch_method
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 4)
        held = []
        real_put = type(self.store).put

        def put(path, value, expected_version=None, **kw):
            if path.endswith("/sub") and not held:
                held.append((defer.Deferred(), path, value, expected_version, kw))
                return held[0][0]
            return real_put(self.store, path, value, expected_version=expected_version, **kw)
        patch_method(self, self.store, "put", put)
        self.bk.fail_next_adds(1, BookieUnavailableError)
        self.bk.fail_next_creates(2)
        first = c.mark_delete(ps[0])        # its snapshot fails, no ledger: its node write is held
        self.assertEqual(len(held), 1)
        second = c.mark_delete(ps[2])       # made during that write
        d, path, value, expected_version, kw = held[0]
        if node_write_succeeds:
            real_put(self.store, path, value, expected_version=expected_version, **kw).chainDeferred(d)
            self.successResultOf(first)
        else:
            d.errback(MetadataUnavailableError("connection loss"))
            self.failureResultOf(first)
        self.successResultOf(second)
        self.assertEqual(c.mark_delete_position, ps[2])
        self.successResultOf(ml.close())

    def test_ack_during_a_fallback_node_write_that_succeeds(self):
        self._ack_during_fallback_node_write(True)

    def test_ack_during_a_fallback_node_write_that_fails(self):
        self._ack_during_fallback_node_write(False)

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

    def test_cursor_ledger_close_failing_is_logged_not_left_unhandled(self):
        """A cursor closing after a take-over finds its ledger recovered by the new owner: the
        ledger's close fails (fenced). That is logged; no Deferred is left holding the failure
        (it used to end as an "Unhandled error in Deferred" traceback in a broker's log)."""
        import gc
        from twisted.internet import defer
        from twisted.logger import globalLogPublisher
        from pulsar_twisted.common.bk_errors import LedgerFencedError
        from pulsar_twisted.testing.patching import patch_method
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 2)
        self.successResultOf(c.mark_delete(ps[0]))
        handle = c._ledger
        self.assertIsNotNone(handle)
        patch_method(self, handle, "close",
                     lambda: defer.fail(LedgerFencedError("recovered by another client")))
        self.successResultOf(ml.close())
        gc.collect()
        self.assertEqual(self.flushLoggedErrors(LedgerFencedError), [])
        self.assertTrue([e for e in events if "closing ledger" in e.get("log_format", "")
                         and "recovered by another client" in str(e.get("err"))])


class BatchDeletedIndexesTests(ManagedLedgerHarness, unittest.TestCase):
    """Partly acknowledged batch entries (Pulsar's batchDeletedIndexes)."""

    def test_set_get_and_forget(self):
        """Bit sets are kept per entry; acking the entry whole or passing it forgets them."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 5)
        self.assertIsNone(c.batch_deleted_indexes(ps[1]))
        self.successResultOf(c.set_batch_deleted_indexes(ps[1], [0b1010]))
        self.successResultOf(c.set_batch_deleted_indexes(ps[2], 1 << 70))
        self.successResultOf(c.set_batch_deleted_indexes(ps[3], 0b111))
        self.assertEqual(c.batch_deleted_indexes(ps[1]), [0b1010])
        self.assertEqual(c.batch_deleted_indexes(ps[2]), [0, 1 << 6])
        self.assertEqual(c.batch_deleted_count(), 3)
        # a partly acked entry is not acknowledged: the backlog and reads still hold it
        self.assertFalse(c.is_acknowledged(ps[1]))
        self.assertEqual(c.number_of_entries_in_backlog(), 5)
        self.successResultOf(c.delete([ps[2]]))
        self.assertIsNone(c.batch_deleted_indexes(ps[2]))
        self.successResultOf(c.mark_delete(ps[1]))
        self.assertIsNone(c.batch_deleted_indexes(ps[1]))
        self.assertEqual(c.batch_deleted_count(), 1)
        # an empty set acknowledges the whole entry
        self.successResultOf(c.set_batch_deleted_indexes(ps[3], []))
        self.assertEqual(c.mark_delete_position, ps[3])
        self.assertEqual(c.batch_deleted_count(), 0)
        # at or below the mark-delete, or past the last entry: ignored
        self.successResultOf(c.set_batch_deleted_indexes(ps[0], [1]))
        self.successResultOf(c.set_batch_deleted_indexes(Position(ps[4].ledger_id, 99), [1]))
        self.assertEqual(c.batch_deleted_count(), 0)
        self.failureResultOf(c.set_batch_deleted_indexes(ps[4], -1), ValueError)

    def test_reset_forgets(self):
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 3)
        self.successResultOf(c.set_batch_deleted_indexes(ps[2], [3]))
        self.successResultOf(c.reset_cursor(ps[0]))
        self.assertEqual(c.batch_deleted_count(), 0)

    def test_restart_restores_bit_sets(self):
        """Clean and crash restarts: the bit sets of entries above the mark-delete come back."""
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml)
        ps = self.add(ml, 6)
        self.successResultOf(c.set_batch_deleted_indexes(ps[0], [0b110]))
        self.successResultOf(c.set_batch_deleted_indexes(ps[4], [-(1 << 63), 5]))
        self.successResultOf(c.delete([ps[2]]))
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory(max_entries_per_ledger=3)).get_cursor("sub")
        self.assertEqual(c2.batch_deleted_indexes(ps[0]), [0b110])
        self.assertEqual(c2.batch_deleted_indexes(ps[4]), [-(1 << 63), 5])
        self.assertEqual(c2.individually_deleted_ranges(), [(ps[1], ps[2])])  # (open, closed]
        # entries partly acked are read again (the broker sends their bit sets along)
        self.assertEqual([e.position for e in self.read(c2)], [ps[0], ps[1], ps[3], ps[4], ps[5]])
        # a crash (no close) of that owner: the last snapshot has the change made just now
        self.successResultOf(c2.set_batch_deleted_indexes(ps[0], [0b100]))
        c3 = self.open(factory=self.new_factory(max_entries_per_ledger=3)).get_cursor("sub")
        self.assertEqual(c3.batch_deleted_indexes(ps[0]), [0b100])
        self.assertEqual(c3.batch_deleted_count(), 2)

    def test_coalesced_with_other_acks(self):
        """Bit set changes during a snapshot write share the next one; every Deferred fires."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 50)
        before = c.persist_count
        ds = self.with_adds_held(lambda: [c.set_batch_deleted_indexes(p, [3]) for p in ps[:25]]
                                 + [c.delete([p]) for p in ps[25:40]])
        for d in ds:
            self.assertIsNone(self.successResultOf(d))
        self.assertEqual(c.persist_count - before, 2)
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.batch_deleted_count(), 25)

    def test_bounded_like_the_ranges(self):
        """Only max_unacked_ranges_to_persist bit sets are persisted, the lowest positions."""
        ml = self.open(max_unacked_ranges_to_persist=2)
        c = self.cursor(ml)
        ps = self.add(ml, 5)
        for p in reversed(ps[1:]):
            self.successResultOf(c.set_batch_deleted_indexes(p, [1]))
        self.assertEqual(c.batch_deleted_count(), 4)
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory(max_unacked_ranges_to_persist=2)).get_cursor("sub")
        self.assertEqual([p for p in ps if c2.batch_deleted_indexes(p)], ps[1:3])

    def test_kept_in_the_node_without_cursor_ledger(self):
        """When no cursor ledger can be made, the bit sets go to the cursor node."""
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 3)
        self.bk.fail_next_adds(1, BookieUnavailableError)
        self.bk.fail_next_creates(1)
        self.successResultOf(c.set_batch_deleted_indexes(ps[1], [0b10]))
        self.assertIsNone(c._ledger)
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.batch_deleted_indexes(ps[1]), [0b10])

    def test_non_durable_cursor_in_memory(self):
        ml = self.open()
        ps = self.add(ml, 3)
        r = ml.new_non_durable_cursor(EARLIEST)
        created = list(self.bk.created)
        self.successResultOf(r.set_batch_deleted_indexes(ps[1], [1]))
        self.assertEqual(r.batch_deleted_indexes(ps[1]), [1])
        self.successResultOf(r.mark_delete(ps[2]))
        self.assertEqual(r.batch_deleted_count(), 0)
        self.assertEqual(self.bk.created, created)


class BatchDeletedIndexesFormatTests(unittest.TestCase):
    """The cursor formats' ``bi`` field (version 2) and reading version 1."""

    def test_round_trip(self):
        sets = {Position(3, 4): 0b1011, Position(2, 9): (1 << 63) | 1}
        snap = formats.decode_cursor_snapshot_full(
            formats.encode_cursor_snapshot(Position(2, 1), PositionRangeSet(), {}, 10, sets))
        self.assertEqual(snap.batch_indexes, sets)
        node = formats.decode_cursor_node_full(
            formats.encode_cursor_node(7, Position(2, 1), {}, PositionRangeSet(), 10, 0, sets))
        self.assertEqual((node.ledger_id, node.batch_indexes), (7, sets))
        # the words stored are Pulsar's (signed int64, as BatchedEntryDeletionIndexInfo.deleteSet)
        raw = formats.encode_cursor_snapshot(Position(2, 1), PositionRangeSet(), {}, 10, sets)
        self.assertIn(b'"bi":[[2,9,-9223372036854775807],[3,4,11]]', raw)

    def test_version_1_still_read(self):
        """Snapshots and nodes written before batch indexes were persisted load with none."""
        v1_snapshot = b'{"v":1,"md":[5,3],"ranges":[[5,6,7]],"props":{"k":1}}'
        self.assertEqual(formats.decode_cursor_snapshot_full(v1_snapshot),
                         (Position(5, 3), [(5, 6, 7)], {"k": 1}, {}))
        v1_node = b'{"v":1,"ledger":8,"md":[5,3],"props":{},"ranges":[],"active_ms":0}'
        self.assertEqual(formats.decode_cursor_node_full(v1_node), (8, Position(5, 3), {}, [], {}))
        self.assertEqual(formats.decode_cursor_node(v1_node), (8, Position(5, 3), {}, []))

    def test_bad_rows_rejected(self):
        for bi in ('"x"', '[[1,2]]', '[[1,2,"w"]]', '[[1,2,18446744073709551615]]', '[5]'):
            data = b'{"v":2,"md":[1,1],"bi":%s}' % bi.encode()
            self.assertRaises(formats.FormatError, formats.decode_cursor_snapshot_full, data)
        self.assertRaises(formats.FormatError, formats.decode_cursor_snapshot_full,
                          b'{"v":3,"md":[1,1]}')


class CursorPropertiesTests(ManagedLedgerHarness, unittest.TestCase):
    """``set_properties``: durable in the cursor node; node writes one at a time."""

    def test_properties_survive_a_restart(self):
        ml = self.open()
        c = self.cursor(ml)
        ps = self.add(ml, 3)
        self.successResultOf(c.mark_delete(ps[0]))
        self.successResultOf(c.set_properties({"pulsar.replicated.subscription": 1}))
        self.successResultOf(c.delete([ps[2]]))
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.properties, {"pulsar.replicated.subscription": 1})
        self.assertEqual(c2.mark_delete_position, ps[0])
        self.assertEqual([e.position for e in self.read(c2)], [ps[1]])

    def test_node_writes_wait_for_each_other(self):
        """Two writes in flight at once would carry the same expected version, and the second
        would find the cursor fenced: the second starts once the first is stored."""
        ml = self.open()
        c = self.cursor(ml)
        self.add(ml, 2)
        real_put = self.store.put
        held = []

        def put(path, data, expected_version=-1):
            d = defer.Deferred()
            held.append((d, path, data, expected_version))
            return d
        self.store.put = put
        first = c.set_properties({"k": 1})
        second = c.set_properties({"k": 2})
        self.assertEqual(len(held), 1)
        while held:
            d, path, data, version = held.pop(0)
            real_put(path, data, expected_version=version).chainDeferred(d)
        self.store.put = real_put
        self.successResultOf(first)
        self.successResultOf(second)
        self.successResultOf(self.factory.shutdown())
        c2 = self.open(factory=self.new_factory()).get_cursor("sub")
        self.assertEqual(c2.properties, {"k": 2})

    def test_a_closed_cursor_refuses(self):
        ml = self.open()
        c = self.cursor(ml)
        self.successResultOf(c.close())
        self.failureResultOf(c.set_properties({"k": 1}), ManagedLedgerClosedError)

    def test_another_owner_fences_it(self):
        ml = self.open()
        c = self.cursor(ml)
        self.add(ml, 1)
        self.open(factory=self.new_factory())       # a new owner rewrites the node
        self.failureResultOf(c.set_properties({"k": 1}), ManagedLedgerFencedError)
