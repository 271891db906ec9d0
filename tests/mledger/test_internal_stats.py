"""The managed ledger and its cursors report their own internal stats (Pulsar's
ManagedLedgerInternalStats and CursorStats), so the admin API reads no private state."""

from twisted.trial import unittest

from pulsar_twisted.mledger.stats import iso_ms, position_text, ranges_text

from tests.mledger.test_support import ManagedLedgerHarness


class TextTests(unittest.TestCase):
    def test_position_and_ranges(self):
        """Positions print as ledger:entry, acknowledged ranges as Pulsar's RangeSet."""
        self.assertEqual(position_text((3, 7)), "3:7")
        self.assertEqual(ranges_text([((1, 2), (1, 5)), ((2, -1), (2, 3))]), "[(1:2..1:5], (2:-1..2:3]]")
        self.assertEqual(ranges_text([]), "[]")

    def test_iso_ms(self):
        """Milliseconds since the epoch in ISO 8601 UTC; 0 is unknown (empty)."""
        self.assertEqual(iso_ms(0), "")
        self.assertEqual(iso_ms(1_000_000_000_123), "2001-09-09T01:46:40.123Z")


class InternalStatsTests(ManagedLedgerHarness, unittest.TestCase):
    def test_ledger_stats(self):
        """Entries, size, ledgers and the last confirmed entry come from the ledger itself."""
        ml = self.open(max_entries_per_ledger=2)
        self.cursor(ml, "keep")   # holds the entries (without a cursor consumed ledgers go)
        positions = self.add(ml, 3)
        stats = ml.internal_stats()
        self.assertEqual(stats["numberOfEntries"], 3)
        self.assertEqual(stats["entriesAddedCounter"], 3)
        self.assertEqual(stats["totalSize"], ml.total_size())
        self.assertEqual(stats["lastConfirmedEntry"], position_text(positions[-1]))
        self.assertEqual(stats["state"], ml.state.name)
        self.assertEqual(stats["pendingAddEntriesCount"], 0)
        self.assertEqual([i["ledgerId"] for i in stats["ledgers"]],
                         [i["ledgerId"] for i in ml.ledgers_info()])
        self.assertEqual(sum(i["entries"] for i in stats["ledgers"]), 3)
        self.assertEqual(list(stats["cursors"]), ["keep"])

    def test_cursor_stats(self):
        """A cursor reports its positions, acknowledged ranges, state, ledger and properties."""
        ml = self.open()
        cursor = self.cursor(ml, "sub")
        positions = self.add(ml, 4)
        self.successResultOf(cursor.delete([positions[2]]))
        stats = ml.internal_stats()["cursors"]["sub"]
        self.assertEqual(stats, cursor.internal_stats())
        self.assertEqual(stats["markDeletePosition"], position_text(cursor.mark_delete_position))
        self.assertEqual(stats["readPosition"], position_text(cursor.read_position))
        self.assertEqual(stats["individuallyDeletedMessages"],
                         ranges_text(cursor.individually_deleted_ranges()))
        self.assertEqual(stats["totalNonContiguousDeletedMessagesRange"], 1)
        self.assertEqual(stats["numberOfEntriesSinceFirstNotAckedMessage"], 3)
        self.assertIn(stats["state"], ("OPEN", "NO_LEDGER"))
        self.assertIsInstance(stats["cursorLedger"], int)
        self.assertEqual(stats["properties"], {})
