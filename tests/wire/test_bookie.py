"""The bookie codecs: entry packing (BookKeeper header + CRC32C, verified on unpack) and the
status <-> error table."""

import struct

import crc32c
from hypothesis import given, strategies as st
from twisted.trial import unittest

from pulsar_twisted.common import bk_errors
from pulsar_twisted.common.bk_errors import DigestMismatchError
from pulsar_twisted.proto import bookie_pb2 as pb
from pulsar_twisted.wire.bookie import (
    ERROR_BY_STATUS, PREFIX_SIZE, error_for, pack_entry, packed_lac, status_for, unpack_entry)

u63 = st.integers(0, 2 ** 63 - 1)


class DigestTests(unittest.TestCase):

    @given(u63, u63, st.integers(-1, 2 ** 63 - 1), u63, st.binary(max_size=300))
    def test_round_trip(self, ledger_id, entry_id, lac, length, payload):
        """unpack(pack(x)) == x, and the LAC can be peeked without verifying."""
        packed = pack_entry(ledger_id, entry_id, lac, length, payload)
        self.assertEqual(len(packed), PREFIX_SIZE + len(payload))
        entry = unpack_entry(packed, ledger_id, entry_id)
        self.assertEqual(tuple(entry), (ledger_id, entry_id, lac, length, payload))
        self.assertEqual(packed_lac(packed), lac)

    def test_layout(self):
        """Header fields big-endian, then CRC32C of header+payload, then the payload."""
        packed = pack_entry(7, 3, 2, 11, b"hello")
        header = struct.pack(">QQqQ", 7, 3, 2, 11)
        self.assertEqual(packed[:32], header)
        self.assertEqual(packed[32:36], struct.pack(">I", crc32c.crc32c(header + b"hello")))
        self.assertEqual(packed[36:], b"hello")

    @given(st.binary(min_size=1, max_size=64), st.data())
    def test_any_flipped_bit_detected(self, payload, data):
        """Corrupting any bit of a packed entry is a DigestMismatchError."""
        packed = bytearray(pack_entry(1, 2, 1, 9, payload))
        position = data.draw(st.integers(0, len(packed) * 8 - 1))
        packed[position // 8] ^= 1 << (position % 8)
        self.assertRaises(DigestMismatchError, unpack_entry, bytes(packed))

    def test_wrong_ids_and_truncation(self):
        packed = pack_entry(1, 2, 1, 9, b"abc")
        self.assertRaises(DigestMismatchError, unpack_entry, packed, 5, 2)
        self.assertRaises(DigestMismatchError, unpack_entry, packed, 1, 3)
        self.assertRaises(DigestMismatchError, unpack_entry, packed[:20])
        self.assertRaises(DigestMismatchError, unpack_entry, packed[:-1])


class StatusTableTests(unittest.TestCase):

    def test_every_mapped_status_round_trips(self):
        """The error a client raises for a status is reported by the bookie as that same status."""
        for status in ERROR_BY_STATUS:
            self.assertEqual(status_for(error_for(status)("x")), status, pb.StatusCode.Name(status))

    def test_subclasses_take_their_parents_status(self):
        """status_for matches with isinstance, so a refinement of a mapped error keeps its status."""
        class Refined(bk_errors.LedgerFencedError):
            pass
        self.assertEqual(status_for(Refined("x")), pb.FENCED)

    def test_unexpected_errors(self):
        """Anything storage raises that is not in the table is ERROR; a client raises BKException for
        ERROR and for a status it does not know, ValueError for BAD_REQUEST."""
        self.assertEqual(status_for(RuntimeError("boom")), pb.ERROR)
        self.assertEqual(status_for(bk_errors.BKException("x")), pb.ERROR)
        self.assertIs(error_for(pb.ERROR), bk_errors.BKException)
        self.assertIs(error_for(12345), bk_errors.BKException)
        self.assertIs(error_for(pb.BAD_REQUEST), ValueError)
        self.assertEqual(status_for(ValueError("bad")), pb.BAD_REQUEST)
