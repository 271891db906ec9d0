"""Tests for the bookie's index table (pulsar_twisted.bookie.index_table) and LedgerIndex's use of it."""

import os

from twisted.trial import unittest

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.index import LedgerIndex

INLINE = formats.TABLE_INLINE_SLOTS


def header(key=b"key", fenced=False, lac=-1):
    return formats.encode_index_header(key, fenced, lac)


class TableFormatTests(unittest.TestCase):

    def test_header_round_trip_and_damage(self):
        """The table header decodes; short, junk, flipped and other-version headers do not."""
        good = formats.encode_table_header()
        self.assertEqual(len(good), formats.TABLE_RECORD_SIZE)
        formats.decode_table_header(good)
        flipped = bytearray(good)
        flipped[100] ^= 1
        for bad in (b"", good[:-1], b"junk" * 64, bytes(flipped)):
            self.assertRaises(formats.FormatError, formats.decode_table_header, bad)
        newer = bytearray(good)
        newer[5] = formats.TABLE_VERSION + 1
        with self.assertRaises(formats.UnknownVersionError):
            formats.decode_table_header(bytes(newer))

    def test_offsets(self):
        """Record 0 is the file header; a ledger's inline slots follow its index header."""
        self.assertEqual(formats.table_offset(0), formats.TABLE_RECORD_SIZE)
        self.assertEqual(formats.table_slot_offset(3, 2),
                         4 * formats.TABLE_RECORD_SIZE + formats.INDEX_HEADER_SIZE + 2 * formats.INDEX_SLOT.size)
        self.assertLessEqual(formats.INDEX_HEADER_SIZE + INLINE * formats.INDEX_SLOT.size,
                             formats.TABLE_RECORD_SIZE)
        self.assertTrue(formats.in_table(formats.TABLE_LEDGER_LIMIT - 1))
        self.assertFalse(formats.in_table(formats.TABLE_LEDGER_LIMIT))


class IndexTableTests(unittest.TestCase):

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        self.table_path = os.path.join(self.dir, "table")
        self.index = self.reopen()

    def reopen(self):
        """A new LedgerIndex over the directory, as after a restart (``load_all`` opens the table)."""
        if getattr(self, "index", None) is not None:
            self.index.close()
        self.index = LedgerIndex(self.dir)
        self.addCleanup(self.index.close)
        return self.index

    def idx_files(self):
        return sorted(n for n in os.listdir(self.dir) if n.endswith(".idx"))

    def test_small_ledger_has_no_file(self):
        """A ledger's header and first slots go in the table: no file of its own, and it loads back."""
        self.index.load_all()
        self.assertFalse(self.index.update(3, header(b"k3", True, 1), [(1, 0, 40, 5), (0, 0, 16, 4)]))
        self.index.sync()
        self.assertEqual(self.idx_files(), [])
        self.assertEqual(self.index.lookup(3, 0), (0, 16, 4))
        self.assertEqual(self.index.lookup(3, 1), (0, 40, 5))
        self.assertIsNone(self.index.lookup(3, 2))
        self.assertIsNone(self.index.lookup(4, 0))
        self.assertEqual(self.reopen().load_all(), {3: (b"k3", True, 1, 1)})
        self.assertEqual(self.index.lookup(3, 1), (0, 40, 5))

    def test_later_entries_in_the_ledgers_file(self):
        """Entries past the inline slots go in a file made for them; the table's header wins over the
        file's copy, and the last entry id counts both."""
        self.index.load_all()
        slots = [(e, 1, 16 + 30 * e, 10) for e in range(INLINE + 4)]
        self.assertTrue(self.index.update(9, header(lac=2), slots))
        self.assertFalse(self.index.update(9, header(fenced=True, lac=5), []))   # header only: the table
        self.index.sync()
        self.assertEqual(self.idx_files(), ["9.idx"])
        for e in range(INLINE + 4):
            self.assertEqual(self.index.lookup(9, e), (1, 16 + 30 * e, 10))
        self.assertEqual(self.reopen().load_all(), {9: (b"key", True, 5, INLINE + 3)})

    def test_fence_and_lac_in_the_files_copy_count(self):
        """A crash after a ledger's file was written and fdatasynced with its new header (fenced, a
        higher LAC) but before the table's fdatasync leaves the table's older header; the journal
        replays the fence, unless that journal file is lost. The fence and the LAC only ever grow,
        so load takes them from either copy: the fence is not lost (as it was not when the file
        was the only copy). The master key is the table's."""
        self.index.load_all()
        self.index.update(9, header(lac=2), [(e, 1, 16 + 30 * e, 10) for e in range(INLINE + 2)])
        self.index.sync()
        older = header(lac=2)
        self.index.update(9, header(fenced=True, lac=7), [(INLINE + 2, 1, 500, 10)])
        self.index.sync()
        self.index.close()
        with open(self.table_path, "r+b") as f:     # the table's write lost: its older header
            f.seek(formats.table_offset(9))
            f.write(older)
        self.assertEqual(self.reopen().load_all(), {9: (b"key", True, 7, INLINE + 2)})

    def test_ledger_from_before_the_table(self):
        """A ledger whose file holds everything (written before the table) loads, reads its first slots
        from the file, takes a header written later from the table, and a GC move of its first entries
        (no header) repoints them in its file."""
        self.index.load_all()
        with open(self.index.path(5), "wb") as f:
            f.write(header(b"old", False, 1))
            for e in range(3):
                f.write(formats.encode_slot(0, 16 + 20 * e, 7))
        self.assertEqual(self.reopen().load_all(), {5: (b"old", False, 1, 2)})
        self.assertEqual(self.index.lookup(5, 2), (0, 56, 7))
        self.index.update(5, None, [(1, 4, 99, 7)])
        self.index.sync()
        self.assertEqual(self.index.lookup(5, 1), (4, 99, 7))
        with open(self.index.path(5), "rb") as f:
            f.seek(formats.slot_offset(1))
            self.assertEqual(formats.decode_slot(f.read(formats.INDEX_SLOT.size)), (4, 99, 7))
        self.index.update(5, header(b"old", True, 2), [(3, 4, 130, 7)])
        self.index.sync()
        self.assertEqual(self.reopen().load_all(), {5: (b"old", True, 2, 3)})
        self.assertEqual([self.index.lookup(5, e) for e in range(4)],
                         [(0, 16, 7), (4, 99, 7), (0, 56, 7), (4, 130, 7)])

    def test_delete_clears_the_record_and_frees_blocks(self):
        """A deleted ledger's record reads as no ledger; once a block's records are all deleted the
        block is freed (a hole)."""
        self.index.load_all()
        per_block = 4096 // formats.TABLE_RECORD_SIZE
        ids = range(per_block - 1, 2 * per_block - 1)        # exactly the records of the second block
        for ledger_id in ids:
            self.index.update(ledger_id, header(), [(0, 0, 16, 1)])
        self.index.update(2 * per_block, header(), [(0, 0, 16, 1)])
        self.index.sync()
        for ledger_id in ids:
            self.index.delete(ledger_id)
        self.index.sync()
        self.assertIsNone(self.index.lookup(ids[0], 0))
        self.assertEqual(sorted(self.reopen().load_all()), [2 * per_block])
        if self.index._table._punch:
            with open(self.table_path, "rb") as f:
                self.assertEqual(os.lseek(f.fileno(), 4096, os.SEEK_DATA), 8192, "the block is a hole")

    def test_missing_empty_and_header_only_table(self):
        """No table, an empty one (a crash before its header) and a header-only one load as no ledgers."""
        self.assertEqual(self.index.load_all(), {})
        with open(self.table_path, "rb") as f:
            self.assertEqual(f.read(), formats.encode_table_header())
        self.assertEqual(self.reopen().load_all(), {})
        self.index.close()
        open(self.table_path, "wb").close()
        self.assertEqual(self.reopen().load_all(), {})
        self.index.update(2, header(), [(0, 0, 16, 1)])
        self.index.sync()
        self.assertEqual(sorted(self.reopen().load_all()), [2])

    def test_junk_and_truncated_table_moved_aside(self):
        """A table whose header is junk or truncated, and that holds nothing else (a crash while it was
        being made: its header is durable before any record is written), is moved to table.bad
        (logged) and a new one begun."""
        for damaged in (b"junk" * 64, formats.encode_table_header()[:100]):
            self.index.close()
            with open(self.table_path, "wb") as f:
                f.write(damaged)
            self.assertEqual(self.reopen().load_all(), {})
            with open(self.table_path + ".bad", "rb") as f:
                self.assertEqual(f.read(), damaged)
            self.index.update(2, header(), [(0, 0, 16, 1)])
            self.index.sync()
            self.assertEqual(sorted(self.reopen().load_all()), [2])
        self.flushLoggedErrors()

    def test_damaged_table_with_records_refused(self):
        """A table whose header is damaged but that holds records stops the load and is left as it is:
        its header was durable before any record was written, so this is no crash but a damaged disk
        (or not our file). Moving it aside would lose every ledger indexed in it alone (acknowledged
        entries unreadable, the ledger unknown) and bring back the older copies of headers in the
        ledgers' own files: a fence lost, so a stale writer could add again."""
        self.index.load_all()
        self.index.update(2, header(b"k2"), [(0, 0, 16, 1)])                          # in the table alone
        self.index.update(9, header(lac=2), [(e, 1, 16 + 30 * e, 10) for e in range(INLINE + 2)])
        self.index.update(9, header(fenced=True, lac=5), [])                            # the table's header
        self.index.sync()
        self.assertEqual(self.reopen().load_all(), {2: (b"k2", False, -1, 0), 9: (b"key", True, 5, INLINE + 1)})
        self.index.close()
        with open(self.table_path, "r+b") as f:
            f.seek(10)
            f.write(b"\xff")                                  # the header's padding: its CRC fails
        with open(self.table_path, "rb") as f:
            damaged = f.read()
        self.assertRaises(formats.FormatError, self.reopen().load_all)
        self.assertFalse(os.path.exists(self.table_path + ".bad"))
        with open(self.table_path, "rb") as f:
            self.assertEqual(f.read(), damaged)

    def test_newer_table_refused(self):
        """A table written by another version stops the load and is left as it is."""
        self.index.close()
        newer = bytearray(formats.encode_table_header())
        newer[5] = formats.TABLE_VERSION + 1
        with open(self.table_path, "wb") as f:
            f.write(bytes(newer))
        self.assertRaises(formats.UnknownVersionError, self.reopen().load_all)
        with open(self.table_path, "rb") as f:
            self.assertEqual(f.read(), bytes(newer))

    def test_damaged_and_torn_records(self):
        """A record with a junk header is skipped, even when the ledger's file has a copy of its header;
        a record torn by the end of the file loads what it holds; the others load."""
        self.index.load_all()
        for ledger_id in (1, 2, 3):
            self.index.update(ledger_id, header(), [(0, 0, 16, 1), (1, 0, 30, 1)])
        self.index.update(2, header(), [(INLINE, 0, 50, 1)])
        self.index.sync()
        self.index.close()
        with open(self.table_path, "r+b") as f:
            f.seek(formats.table_offset(2) + 10)
            f.write(b"junk")
            f.truncate(formats.table_slot_offset(3, 1) + 7)     # ledger 3's second slot torn
        loaded = self.reopen().load_all()
        self.assertEqual(sorted(loaded), [1, 3])
        self.assertEqual((loaded[1][3], loaded[3][3]), (1, 0))
        self.flushLoggedErrors()
