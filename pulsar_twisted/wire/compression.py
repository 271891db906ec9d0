"""
Payload compression with Pulsar's exact encodings (what the Java and C++ clients write and read).

LZ4 is a raw LZ4 *block* (no frame, no size prefix), ZLIB a zlib stream with its header, ZSTD a
zstd frame, SNAPPY a raw snappy block. The uncompressed size travels in
``MessageMetadata.uncompressed_size``: LZ4 blocks need it to decompress, and a mismatch marks the
message corrupt. Pure functions, no Twisted. Errors are ``wire.errors``: ``UnknownCompression`` for a
type that does not exist, ``InvalidMessage`` for data that does not decompress.

Decompression is bounded before it is done: the announced size must be within ``max_size``
(callers pass maxMessageSize plus frame padding) and no codec ever produces more than the
announced size (a 127 KB ZLIB bomb announcing 1 KB costs 1 KB, not 251 MB): ZLIB and ZSTD stream
at most ``size + 1`` bytes out, LZ4 blocks are sized by the announcement, and a SNAPPY block's own
length header is checked against it before anything is allocated.
"""

import io
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


#: Bound on the announced size when the caller gives none: Pulsar's default maxMessageSize (5 MB)
#: plus the frame padding the broker allows on top of it.
DEFAULT_MAX_UNCOMPRESSED = 5 * 1024 * 1024 + 10 * 1024


def _zlib(data: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, size + 1)
    if len(out) > size or inflater.unconsumed_tail:
        raise InvalidMessage(f"ZLIB data inflates past the announced {size} bytes")
    return out + inflater.flush()


def _zstd(data: bytes, size: int) -> bytes:
    import zstandard
    declared = zstandard.frame_content_size(data)
    if declared > size:     # -1: the frame does not say; the bounded read below decides
        raise InvalidMessage(f"ZSTD frame declares {declared} bytes, announced {size}")
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
        out = r.read(size + 1)
    return out


def _snappy_length(data: bytes) -> int:
    """The uncompressed length a raw snappy block starts with (a little-endian base-128 varint)."""
    value = 0
    for i, byte in enumerate(data[:5]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value
    raise InvalidMessage("SNAPPY block has no valid length header")


def _snappy(data: bytes, size: int) -> bytes:
    declared = _snappy_length(data)
    if declared != size:
        raise InvalidMessage(f"SNAPPY block declares {declared} bytes, announced {size}")
    import snappy
    return snappy.uncompress(data)


def _lz4(data: bytes, size: int) -> bytes:
    import lz4.block
    return lz4.block.decompress(data, uncompressed_size=size)


_DECODERS = {LZ4: _lz4, ZLIB: _zlib, ZSTD: _zstd, SNAPPY: _snappy}


def decompress(codec: int, data: bytes, uncompressed_size: int,
               max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> bytes:
    """
    Inverse of ``compress``; ``InvalidMessage`` when the data or its size do not check out, when
    the announced ``uncompressed_size`` is over ``max_size`` (None: no bound but the announced
    size), or when the data would inflate past the announced size (checked as it inflates).
    """
    if codec == NONE:
        return data
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise InvalidMessage(f"unknown compression type {codec}")
    if uncompressed_size < 0 or (max_size is not None and uncompressed_size > max_size):
        raise InvalidMessage(f"announced uncompressed size {uncompressed_size} is over the "
                             f"{max_size}-byte limit")
    try:
        out = decoder(data, uncompressed_size)
    except InvalidMessage:
        raise
    except Exception as e:
        raise InvalidMessage(f"cannot decompress ({api.CompressionType.Name(codec)}): {e}") from e
    if len(out) != uncompressed_size:
        raise InvalidMessage(f"uncompressed size {len(out)} != announced {uncompressed_size}")
    return out
