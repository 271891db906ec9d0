"""Partition routing hashes: fixed vectors and the Java client's formulas."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client.routing import (
    MURMUR3_32_HASH, ROUND_ROBIN, SINGLE_PARTITION, MessageRouter, java_string_hash, key_hash,
    murmur3_32_hash)
from pulsar_twisted.wire.compression import compress, decompress


class _Msg:
    def __init__(self, key=""):
        self.key = key

    def partition_key(self):
        return self.key

    def ordering_key(self):
        return b""


class HashTests(SynchronousTestCase):
    def test_java_string_hash_vectors(self):
        """Values of Java's String.hashCode()."""
        self.assertEqual(java_string_hash("key"), 106079)
        self.assertEqual(java_string_hash(""), 0)
        self.assertEqual(java_string_hash("a"), 97)
        self.assertEqual(java_string_hash("hello world"), 1794106052)
        # Overflows to negative in Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE
        self.assertEqual(java_string_hash("polygenelubricants"), -2147483648)
        # Non-BMP characters hash as two UTF-16 code units.
        self.assertEqual(java_string_hash("\U0001F600"), 0xD83D * 31 + 0xDE00)

    def test_partition_by_java_hash(self):
        """partition = (hashCode & Integer.MAX_VALUE) % N."""
        router = MessageRouter()
        self.assertEqual(router.choose(_Msg("key"), 7), 106079 % 7)
        self.assertEqual(router.choose(_Msg("polygenelubricants"), 5), 0)
        for key in ("user-1", "order-42", "k"):
            expected = (java_string_hash(key) & 0x7FFFFFFF) % 12
            self.assertEqual(router.choose(_Msg(key), 12), expected)

    def test_murmur3(self):
        """Murmur3_32Hash: mmh3 32-bit seed 0 of UTF-8, & Integer.MAX_VALUE."""
        import mmh3
        self.assertEqual(murmur3_32_hash("key"), mmh3.hash(b"key", 0, signed=False) & 0x7FFFFFFF)
        self.assertEqual(murmur3_32_hash(""), 0)
        router = MessageRouter(hashing_scheme=MURMUR3_32_HASH)
        self.assertEqual(router.choose(_Msg("key"), 10), key_hash("key", MURMUR3_32_HASH) % 10)

    def test_round_robin_and_single(self):
        router = MessageRouter(ROUND_ROBIN)
        picks = [router.choose(_Msg(), 3) for _ in range(6)]
        self.assertEqual(sorted(picks), [0, 0, 1, 1, 2, 2])
        self.assertEqual(picks[:3], picks[3:])
        single = MessageRouter(SINGLE_PARTITION)
        self.assertEqual(len({single.choose(_Msg(), 4) for _ in range(10)}), 1)

    def test_custom_router(self):
        router = MessageRouter(custom=lambda msg, n: 42)
        self.assertEqual(router.choose(_Msg("key"), 5), 2)


class CompressionTests(SynchronousTestCase):
    def test_round_trips(self):
        """Every codec round-trips; LZ4 is a raw block (no frame magic), ZLIB has its header."""
        data = b"pulsar " * 500
        for codec in (0, 1, 2, 3, 4):
            self.assertEqual(decompress(codec, compress(codec, data), len(data)), data)
        self.assertNotEqual(compress(1, data)[:4], b"\x04\x22\x4d\x18")  # no LZ4 frame magic
        self.assertEqual(compress(2, data)[:1], b"\x78")                 # zlib header
        self.assertEqual(compress(3, data)[:4], b"\x28\xb5\x2f\xfd")     # zstd frame magic
