"""Tests for pulsar_twisted.bookie.formats: pure record codecs and the record scanner."""

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from pulsar_twisted.bookie import formats

ids = st.integers(min_value=0, max_value=2**63 - 1)


def journal_file(*records: bytes, file_id: int = 1) -> io.BytesIO:
    return io.BytesIO(formats.encode_journal_header(file_id) + b"".join(records))


class JournalRecordTests(unittest.TestCase):

    @settings(max_examples=50, deadline=None)
    @given(ids, ids, st.binary(max_size=300), st.integers(min_value=-1, max_value=2**63 - 1))
    def test_add_round_trip(self, ledger_id, entry_id, data, lac):
        """An ADD record scans back to its ids, lac and data."""
        record = formats.encode_add_record_header(ledger_id, entry_id, lac, data) + data
        scanned = list(formats.RecordScanner.journal(journal_file(record)))
        self.assertEqual(len(scanned), 1)
        offset, rtype, lid, eid, payload = scanned[0]
        self.assertEqual((offset, rtype, lid, eid), (16, formats.REC_ADD, ledger_id, entry_id))
        self.assertEqual(formats.decode_add_payload(payload), (lac, data))

    @settings(max_examples=100, deadline=None)
    @given(ids, ids, st.binary(max_size=300), st.integers(min_value=-1, max_value=2**63 - 1))
    def test_add_header_same_bytes_as_the_generic_encoder(self, ledger_id, entry_id, data, lac):
        """The ADD header, packed directly, is byte for byte the generic record header with the
        lac prefix."""
        self.assertEqual(formats.encode_add_record_header(ledger_id, entry_id, lac, data),
                         formats.encode_journal_record_header(formats.REC_ADD, ledger_id, entry_id, data,
                                                              formats.LAC.pack(lac)))

    def test_fixed_bytes(self):
        """The layout is the documented one (a fixed vector guards against accidental changes)."""
        record = formats.encode_journal_record(formats.REC_FENCE, 7, 0, b"key")
        self.assertEqual(record[:4], b"\0\0\0\x03")
        self.assertEqual(record[4], formats.REC_FENCE)
        self.assertEqual(record[5:13], (7).to_bytes(8, "big"))
        self.assertEqual(record[25:], b"key")
        self.assertEqual(formats.encode_journal_header(1), b"PTJR\0\x01\0\x10" + (1).to_bytes(8, "big"))

    def test_truncated_at_every_byte(self):
        """A file cut anywhere yields exactly the complete records before the cut, and the cut offset."""
        records = [formats.encode_journal_record(formats.REC_MASTER_KEY, i, 0, b"k" * i) for i in range(4)]
        whole = formats.encode_journal_header(1) + b"".join(records)
        ends = [16]
        for r in records:
            ends.append(ends[-1] + len(r))
        for cut in range(16, len(whole) + 1):
            scanner = formats.RecordScanner.journal(io.BytesIO(whole[:cut]))
            got = list(scanner)
            complete = max(i for i, end in enumerate(ends) if end <= cut)
            self.assertEqual(len(got), complete)
            self.assertEqual(scanner.valid_end, ends[complete])
            self.assertEqual(scanner.problem is None, cut == ends[complete])

    def test_crc_mismatch_stops(self):
        """A flipped payload byte stops the scan at that record, even if valid records follow."""
        good = formats.encode_journal_record(formats.REC_MASTER_KEY, 1, 0, b"abc")
        bad = bytearray(formats.encode_journal_record(formats.REC_MASTER_KEY, 2, 0, b"abc"))
        bad[-1] ^= 0xFF
        scanner = formats.RecordScanner.journal(journal_file(good, bytes(bad), good))
        self.assertEqual(len(list(scanner)), 1)
        self.assertEqual(scanner.problem, "CRC mismatch")
        self.assertEqual(scanner.valid_end, 16 + len(good))

    def test_junk_stops(self):
        """Junk after the header (unknown type, huge length) is not taken for records."""
        for junk in (b"\xff" * 40, b"\0\0\0\x01\x63" + bytes(30)):
            scanner = formats.RecordScanner.journal(journal_file(junk))
            self.assertEqual(list(scanner), [])
            self.assertEqual(scanner.valid_end, 16)
            self.assertIsNotNone(scanner.problem)

    def test_zero_filled_tail_stops(self):
        """A preallocated / zero-filled tail is not a record (type 0 is not a record type): the
        clean end of the file, not a problem; a header with any byte set is still junk."""
        record = formats.encode_journal_record(formats.REC_ADD, 3, 4, b"payload")
        scanner = formats.RecordScanner.journal(journal_file(record + bytes(100)))
        self.assertEqual([r[1:] for r in scanner], [(formats.REC_ADD, 3, 4, b"payload")])
        self.assertIsNone(scanner.problem)
        self.assertEqual(scanner.valid_end, formats.JOURNAL_HEADER.size + len(record))
        junk = bytearray(100)
        junk[5] = 1
        scanner = formats.RecordScanner.journal(journal_file(record + bytes(junk)))
        self.assertEqual(len(list(scanner)), 1)
        self.assertIsNotNone(scanner.problem)

    def test_headers(self):
        """Empty, short and junk file headers are refused; ours decode to the file id."""
        self.assertEqual(formats.decode_journal_header(formats.encode_journal_header(42)), 42)
        self.assertEqual(formats.decode_entry_log_header(formats.encode_entry_log_header(9)), 9)
        for data in (b"", b"PTJR", b"junkjunkjunkjunk", formats.encode_entry_log_header(1)):
            self.assertRaises(formats.FormatError, formats.decode_journal_header, data)
        bad_version = b"PTJR\0\x09\0\x10" + bytes(8)
        self.assertRaises(formats.FormatError, formats.decode_journal_header, bad_version)


class EntryLogRecordTests(unittest.TestCase):

    @settings(max_examples=50, deadline=None)
    @given(ids, ids, st.binary(max_size=300))
    def test_round_trip(self, ledger_id, entry_id, data):
        """A record checks out for its own ids only, and not once any byte is flipped."""
        record = formats.encode_entry_log_record_header(ledger_id, entry_id, data) + data
        self.assertEqual(formats.check_entry_log_record(record, ledger_id, entry_id), data)
        self.assertIsNone(formats.check_entry_log_record(record, ledger_id, entry_id + 1))
        for i in (0, 10, len(record) - 1):
            flipped = bytearray(record)
            flipped[i] ^= 1
            self.assertIsNone(formats.check_entry_log_record(bytes(flipped), ledger_id, entry_id))
        self.assertIsNone(formats.check_entry_log_record(record[:-1], ledger_id, entry_id))

    def test_scan(self):
        """The entry log scanner yields offsets that index slots can use."""
        recs = [formats.encode_entry_log_record_header(1, i, b"d" * i) + b"d" * i for i in range(3)]
        f = io.BytesIO(formats.encode_entry_log_header(1) + b"".join(recs))
        got = list(formats.RecordScanner.entry_log(f))
        self.assertEqual([(lid, eid, data) for _, lid, eid, data in got], [(1, i, b"d" * i) for i in range(3)])
        self.assertEqual(got[1][0], 16 + len(recs[0]))


class IndexFormatTests(unittest.TestCase):

    @given(st.binary(max_size=formats.INDEX_MAX_KEY), st.booleans(), st.integers(-1, 2**63 - 1))
    def test_header_round_trip(self, key, fenced, lac):
        """Index headers keep key, fence flag and lac."""
        header = formats.encode_index_header(key, fenced, lac)
        self.assertEqual(len(header), formats.INDEX_HEADER_SIZE)
        self.assertEqual(formats.decode_index_header(header), (key, fenced, lac))

    def test_header_damage(self):
        """A damaged, short or foreign header is refused; an over-long key cannot be encoded."""
        header = bytearray(formats.encode_index_header(b"k", True, 5))
        header[20] ^= 1
        for data in (bytes(header), b"", bytes(128), b"x" * 200):
            self.assertRaises(formats.FormatError, formats.decode_index_header, data)
        self.assertRaises(ValueError, formats.encode_index_header, b"k" * 200, False, -1)

    def test_slots(self):
        """Log id 0 is representable; an all-zero or short slot is empty."""
        self.assertEqual(formats.decode_slot(formats.encode_slot(0, 16, 0)), (0, 16, 0))
        self.assertIsNone(formats.decode_slot(formats.EMPTY_SLOT))
        self.assertIsNone(formats.decode_slot(b""))

    def test_usage(self):
        """Usage sidecars round-trip and refuse damage."""
        data = formats.encode_usage({1: 100, 2**40: 5}, 1234)
        self.assertEqual(formats.decode_usage(data), ({1: 100, 2**40: 5}, 1234))
        for bad in (b"", data[:-1], data[:-1] + b"\0", b"junk" * 10):
            self.assertRaises(formats.FormatError, formats.decode_usage, bad)
