"""Tests for pulsar_twisted.bookie.entrylog and .index: on-disk recovery of damaged files."""

import os

from twisted.trial import unittest

from pulsar_twisted.bookie import entrylog, formats
from pulsar_twisted.bookie.entrylog import EntryLogger, EntryLogMissing
from pulsar_twisted.bookie.index import LedgerIndex


class EntryLoggerTests(unittest.TestCase):

    def setUp(self):
        self.dirs = [self.mktemp(), self.mktemp()]

    def logger(self, size_limit=1 << 20) -> EntryLogger:
        logs = EntryLogger(self.dirs, size_limit)
        logs.open()
        self.addCleanup(logs.close)
        return logs

    def test_remove_log_unlinks_outside_the_read_lock(self):
        """Removing a log never holds the read lock while the file system frees it (reads wait on that
        lock on the reactor thread); a read of the removed log then fails with EntryLogMissing."""
        logs = self.logger(size_limit=300)
        placed = logs.append_entries({1: {i: bytes([i]) * 100 for i in range(5)}})
        entry_id, log_id, offset, length = placed[1][0]
        logs.read(log_id, offset, length, 1, entry_id)   # a cached read descriptor to drop
        self.assertNotEqual(log_id, logs.current_id)
        held = []
        real_unlink = os.unlink

        def unlink(path):
            held.append(logs._read_lock.locked())
            real_unlink(path)
        self.patch(entrylog.os, "unlink", unlink)
        logs.remove_log(log_id)
        self.assertTrue(held)
        self.assertFalse(any(held))
        self.assertRaises(EntryLogMissing, logs.read, log_id, offset, length, 1, entry_id)

    def test_append_read_roll(self):
        """Entries read back from where append_entries placed them; logs roll and alternate dirs."""
        logs = self.logger(size_limit=300)
        placed = logs.append_entries({1: {i: bytes([i]) * 100 for i in range(5)}})
        self.assertGreater(len({log_id for _, log_id, _, _ in placed[1]}), 1)
        for entry_id, log_id, offset, length in placed[1]:
            self.assertEqual(logs.read(log_id, offset, length, 1, entry_id), bytes([entry_id]) * 100)
        self.assertTrue(all(os.listdir(d) for d in self.dirs))
        self.assertRaises(EntryLogMissing, logs.read, 999, 16, 1, 1, 0)

    def test_usage_survives_restart(self):
        """Usage comes back from sidecars after a clean close, and from a scan without them."""
        logs = self.logger()
        logs.append_entries({1: {0: b"a" * 10}, 2: {0: b"b" * 20}})
        first = logs.current_id
        expected = dict(logs.usage[first])
        logs.close()
        self.assertEqual(self.logger().usage[first], expected)
        for d in self.dirs:
            for name in os.listdir(d):
                if name.endswith(".meta"):
                    os.unlink(os.path.join(d, name))
        self.assertEqual(self.logger().usage[first], expected)

    def test_damaged_logs(self):
        """Empty, header-only, junk and truncated logs: opening works; junk is never collectable."""
        logs = self.logger()
        logs.append_entries({1: {0: b"x" * 50, 1: b"y" * 50}})
        logs.abandon()   # crash: no sidecar
        d = self.dirs[0]
        files = {"a0.log": b"", "a2.log": formats.encode_entry_log_header(0xa2),
                 "a4.log": b"junk" * 20}
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        truncated = os.path.join(self.dirs[1], "1.log")
        os.truncate(truncated, os.path.getsize(truncated) - 10)
        logs = self.logger()
        self.assertEqual(logs.usage[0xa0], {})
        self.assertEqual(logs.usage[0xa2], {})
        self.assertIsNone(logs.usage[0xa4])
        self.assertEqual(logs.usage[1], {1: 24 + 50}, "the torn second record is not counted")


class LedgerIndexTests(unittest.TestCase):

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        self.index = LedgerIndex(self.dir)
        self.addCleanup(self.index.close)

    def test_update_lookup_load(self):
        """Slots written out of order read back; load_all returns headers and the last entry id."""
        header = formats.encode_index_header(b"key", True, 4)
        self.assertTrue(self.index.update(7, header, [(7, 1, 16, 10), (0, 0, 16, 3), (1, 0, 43, 3)]),
                        "entry 7 is past the table's inline slots: the ledger's file is made")
        self.index.sync()
        self.assertEqual(self.index.lookup(7, 7), (1, 16, 10))
        self.assertEqual(self.index.lookup(7, 0), (0, 16, 3))
        self.assertIsNone(self.index.lookup(7, 3))
        self.assertIsNone(self.index.lookup(7, 50))
        self.assertIsNone(self.index.lookup(8, 0))
        self.assertEqual(self.index.load_all(), {7: (b"key", True, 4, 7)})
        self.index.delete(7)
        self.index.sync()
        self.assertIsNone(self.index.lookup(7, 0))
        self.assertIsNone(self.index.lookup(7, 7))
        self.assertEqual(self.index.load_all(), {})

    def test_damaged_files(self):
        """Empty, short and junk index files are skipped; a zero-filled tail does not count as entries."""
        for name, data in (("1.idx", b""), ("2.idx", b"PTIX"), ("3.idx", b"junk" * 64)):
            with open(os.path.join(self.dir, name), "wb") as f:
                f.write(data)
        # Ledgers past the table's range: everything of theirs is in their files.
        big = formats.TABLE_LEDGER_LIMIT
        self.index.update(big + 4, formats.encode_index_header(b"", False, -1), [(2, 0, 16, 1)])
        with open(self.index.path(big + 4), "r+b") as f:
            f.truncate(formats.slot_offset(10))          # a crash extended the file, slots never written
        self.index.update(big + 5, formats.encode_index_header(b"", False, -1), [(0, 0, 16, 1)])
        with open(self.index.path(big + 5), "r+b") as f:
            f.truncate(formats.slot_offset(0) + 7)       # the only slot torn
        loaded = self.index.load_all()
        self.assertEqual(sorted(loaded), [big + 4, big + 5])
        self.assertEqual((loaded[big + 4][3], loaded[big + 5][3]), (2, -1))
