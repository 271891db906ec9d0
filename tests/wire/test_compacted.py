"""The compacted-ledger entry record (Pulsar's RawMessage)."""

import struct

from hypothesis import given, strategies as st
from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.compacted import decode_compacted_entry, encode_compacted_entry
from pulsar_twisted.wire.errors import InvalidMessage


class CompactedEntryTests(unittest.SynchronousTestCase):

    @given(st.integers(0, 2 ** 63 - 1), st.integers(0, 2 ** 63 - 1), st.binary(max_size=300))
    def test_round_trip(self, ledger_id, entry_id, data):
        """decode(encode(position, data)) == (position, data)."""
        raw = encode_compacted_entry((ledger_id, entry_id), data)
        self.assertEqual(decode_compacted_entry(raw), (Position(ledger_id, entry_id), data))

    def test_layout(self):
        """[u32 size][MessageIdData][u32 size][message part]."""
        mid = api.MessageIdData(ledgerId=3, entryId=4).SerializeToString()
        self.assertEqual(encode_compacted_entry((3, 4), b"data"),
                         struct.pack(">I", len(mid)) + mid + struct.pack(">I", 4) + b"data")

    def test_malformed(self):
        """Truncated or junk records are InvalidMessage, which is still a ValueError."""
        raw = encode_compacted_entry((3, 4), b"data")
        for bad in (raw[:-1], raw[:3], b"", b"\x00\x00\x00\x02\xff\xff"):
            self.assertRaises(InvalidMessage, decode_compacted_entry, bad)
        self.assertRaises(ValueError, decode_compacted_entry, raw[:-1])
