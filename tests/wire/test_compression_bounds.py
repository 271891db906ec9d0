"""Decompression bounded before it is done (issue 12): bombs cost their announced size, never more."""

import os
import tracemalloc
import zlib

from twisted.trial import unittest

from pulsar_twisted.wire import compression
from pulsar_twisted.wire.compression import LZ4, SNAPPY, ZLIB, ZSTD, compress, decompress
from pulsar_twisted.wire.errors import InvalidMessage


def zlib_bomb(size: int) -> bytes:
    return zlib.compress(b"\0" * size, 9)


class BoundTests(unittest.SynchronousTestCase):
    def test_round_trips_still_work(self):
        """Every codec still decodes honest data at its announced size."""
        data = os.urandom(1000) + b"x" * 5000
        for codec in (LZ4, ZLIB, ZSTD, SNAPPY):
            self.assertEqual(decompress(codec, compress(codec, data), len(data)), data)

    def test_zlib_bomb_inflates_only_announced_size(self):
        """A ZLIB stream of 128 MB announcing 1 KB is refused having produced ~1 KB."""
        bomb = zlib_bomb(128 << 20)
        tracemalloc.start()
        try:
            with self.assertRaises(InvalidMessage):
                decompress(ZLIB, bomb, 1024)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 4 << 20)

    def test_zstd_and_snappy_declared_size_checked(self):
        """ZSTD frames and SNAPPY blocks declaring more than announced are refused before inflating."""
        big = b"\0" * (4 << 20)
        for codec in (ZSTD, SNAPPY):
            with self.assertRaises(InvalidMessage):
                decompress(codec, compress(codec, big), 1024)

    def test_zstd_without_content_size_bounded(self):
        """A ZSTD stream that does not declare its size still stops at the announced size."""
        import zstandard
        stream = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (8 << 20))
        self.assertRaises(InvalidMessage, decompress, ZSTD, stream, 1024)

    def test_announced_size_bounded(self):
        """An announced size over max_size (maxMessageSize + padding by default) is refused unread."""
        self.assertRaises(InvalidMessage, decompress, LZ4, b"\0" * 16, 1 << 31)
        self.assertRaises(InvalidMessage, decompress, ZLIB, zlib_bomb(10), 100, max_size=50)
        self.assertRaises(InvalidMessage, decompress, ZLIB, zlib_bomb(10), -1)
        self.assertEqual(compression.DEFAULT_MAX_UNCOMPRESSED, 5 * 1024 * 1024 + 10 * 1024)
        big = b"y" * (6 << 20)
        self.assertEqual(decompress(ZLIB, compress(ZLIB, big), len(big), max_size=None), big)

    def test_garbage_is_invalid_message(self):
        """Bytes that are no stream of the codec are InvalidMessage, whatever the library raised."""
        for codec in (LZ4, ZLIB, ZSTD, SNAPPY):
            self.assertRaises(InvalidMessage, decompress, codec, b"\xff" * 64, 100)
        self.assertRaises(InvalidMessage, decompress, SNAPPY, b"\xff" * 6, 100)
