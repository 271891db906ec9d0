"""Payload compression codecs: round trips, Pulsar's exact encodings, and the CodecError family."""

import zlib

from hypothesis import given, settings, strategies as st
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import compression
from pulsar_twisted.wire.errors import CodecError, InvalidMessage, UnknownCompression

CODECS = (compression.NONE, compression.LZ4, compression.ZLIB, compression.ZSTD, compression.SNAPPY)


class CompressionTests(unittest.SynchronousTestCase):

    @settings(max_examples=50, deadline=None)
    @given(st.sampled_from(CODECS), st.binary(max_size=4096))
    def test_round_trip(self, codec, data):
        """decompress(compress(x)) == x for every codec, given the uncompressed size."""
        packed = compression.compress(codec, data)
        self.assertEqual(compression.decompress(codec, packed, len(data)), data)

    def test_encodings(self):
        """ZLIB is a zlib stream with its header; LZ4 a raw block without a size prefix."""
        data = b"hello " * 20
        self.assertEqual(zlib.decompress(compression.compress(compression.ZLIB, data)), data)
        import lz4.block
        block = compression.compress(compression.LZ4, data)
        self.assertEqual(lz4.block.decompress(block, uncompressed_size=len(data)), data)

    def test_compression_type_names(self):
        """Names (any case), numbers and enum-like values with a ``name`` all resolve."""
        class Enum:
            name = "ZLib"
        self.assertEqual(compression.compression_type(None), api.NONE)
        self.assertEqual(compression.compression_type("snappy"), api.SNAPPY)
        self.assertEqual(compression.compression_type(api.ZSTD), api.ZSTD)
        self.assertEqual(compression.compression_type(Enum()), api.ZLIB)

    def test_unknown_types(self):
        """A type Pulsar does not define is UnknownCompression (a CodecError) when encoding."""
        self.assertRaises(UnknownCompression, compression.compression_type, "BROTLI")
        self.assertRaises(UnknownCompression, compression.compression_type, 99)
        self.assertRaises(UnknownCompression, compression.compress, 99, b"x")
        self.assertTrue(issubclass(UnknownCompression, CodecError))

    def test_bad_data_is_invalid_message(self):
        """Data that does not decompress, a wrong announced size, or an unknown codec in received
        metadata are InvalidMessage, whatever the library raised."""
        data = b"payload " * 10
        for codec in CODECS[1:]:
            self.assertRaises(InvalidMessage, compression.decompress, codec, b"\xff" * 12, 50)
            packed = compression.compress(codec, data)
            self.assertRaises(InvalidMessage, compression.decompress, codec, packed, len(data) - 1)
        self.assertRaises(InvalidMessage, compression.decompress, 99, b"x", 1)
        self.assertTrue(issubclass(InvalidMessage, CodecError))
        self.assertTrue(issubclass(CodecError, ValueError))
