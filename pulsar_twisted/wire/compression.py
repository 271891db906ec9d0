"""
Payload compression with Pulsar's exact encodings (what the Java and C++ clients write and read).

LZ4 is a raw LZ4 *block* (no frame, no size prefix), ZLIB a zlib stream with its header, ZSTD a
zstd frame, SNAPPY a raw snappy block. The uncompressed size travels in
``MessageMetadata.uncompressed_size``: LZ4 blocks need it to decompress, and a mismatch marks the
message corrupt. Pure functions, no Twisted. Errors are ``wire.errors``: ``UnknownCompression`` for a
type that does not exist, ``InvalidMessage`` for data that does not decompress.
"""

import zlib

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.errors import InvalidMessage, UnknownCompression

NONE, LZ4, ZLIB, ZSTD, SNAPPY = api.NONE, api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY

_NAMES = {"NONE": NONE, "LZ4": LZ4, "ZLIB": ZLIB, "ZSTD": ZSTD, "SNAPPY": SNAPPY}


def compression_type(value) -> int:
    """A ``CompressionType`` from an int, a name (``"LZ4"``) or an official-client enum value
    (``UnknownCompression`` for anything else)."""
    if value is None:
        return NONE
    if isinstance(value, str):
        try:
            return _NAMES[value.upper()]
        except KeyError:
            raise UnknownCompression(f"unknown compression type {value!r}") from None
    name = getattr(value, "name", None)  # the official client's CompressionType enum
    if name is not None and name.upper() in _NAMES:
        return _NAMES[name.upper()]
    value = int(value)
    if value not in _NAMES.values():
        raise UnknownCompression(f"unknown compression type {value!r}")
    return value


def compress(codec: int, data: bytes) -> bytes:
    """``data`` encoded with ``codec`` (``NONE`` returns it unchanged; ``UnknownCompression`` for a
    codec that does not exist)."""
    if codec == NONE:
        return data
    if codec == LZ4:
        import lz4.block
        return lz4.block.compress(data, store_size=False)
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        import zstandard
        return zstandard.ZstdCompressor(level=3).compress(data)
    if codec == SNAPPY:
        import snappy
        return snappy.compress(data)
    raise UnknownCompression(f"unknown compression type {codec}")


def decompress(codec: int, data: bytes, uncompressed_size: int) -> bytes:
    """Inverse of ``compress``; ``InvalidMessage`` when the data or its size do not check out."""
    if codec == NONE:
        return data
    try:
        if codec == LZ4:
            import lz4.block
            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif codec == ZLIB:
            out = zlib.decompress(data)
        elif codec == ZSTD:
            import zstandard
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=uncompressed_size)
        elif codec == SNAPPY:
            import snappy
            out = snappy.uncompress(data)
        else:
            raise InvalidMessage(f"unknown compression type {codec}")
    except InvalidMessage:
        raise
    except Exception as e:
        raise InvalidMessage(f"cannot decompress ({api.CompressionType.Name(codec)}): {e}") from e
    if len(out) != uncompressed_size:
        raise InvalidMessage(f"uncompressed size {len(out)} != announced {uncompressed_size}")
    return out
