"""The batch payload codec: round trips, the byte layout, and malformed batches."""

import struct

from hypothesis import given, settings, strategies as st
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.batch import decode_batch, encode_batch, single_metadata
from pulsar_twisted.wire.errors import InvalidMessage

member = st.tuples(st.binary(max_size=200), st.dictionaries(st.text(max_size=5), st.text(max_size=5),
                                                            max_size=3),
                   st.none() | st.text(max_size=8))


class BatchTests(unittest.SynchronousTestCase):

    @settings(max_examples=100, deadline=None)
    @given(st.lists(member, max_size=10))
    def test_round_trip(self, members):
        """decode(encode(members)) gives back every member's metadata and payload."""
        pairs = [(single_metadata(p, props, partition_key=key, sequence_id=i), p)
                 for i, (p, props, key) in enumerate(members)]
        decoded = decode_batch(encode_batch(pairs), len(pairs))
        self.assertEqual([(m.SerializeToString(), p) for m, p in decoded],
                         [(m.SerializeToString(), p) for m, p in pairs])

    def test_layout(self):
        """Each member is [u32 size][SingleMessageMetadata][payload]."""
        meta = single_metadata(b"abc", {"k": "v"}, partition_key="key", event_timestamp=5)
        raw = meta.SerializeToString()
        self.assertEqual(encode_batch([(meta, b"abc")]), struct.pack(">I", len(raw)) + raw + b"abc")
        parsed = api.SingleMessageMetadata.FromString(raw)
        self.assertEqual((parsed.payload_size, parsed.partition_key, parsed.event_time), (3, "key", 5))

    def test_malformed(self):
        """Too few members, a member past the end, or junk are InvalidMessage."""
        raw = encode_batch([(single_metadata(b"abc"), b"abc")])
        self.assertRaises(InvalidMessage, decode_batch, raw, 2)
        self.assertRaises(InvalidMessage, decode_batch, raw[:-1], 1)
        self.assertRaises(InvalidMessage, decode_batch, b"\x00\x00\x00\x05\xff\xff\xff\xff\xff", 1)
        self.assertRaises(InvalidMessage, decode_batch, b"", 1)
