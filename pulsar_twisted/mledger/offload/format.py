"""
The two objects an offloaded ledger becomes. Pure functions over bytes: no Twisted, no I/O.

Keys, as Pulsar's blob-store offloader names them (``uid`` is the offload's UUID, a new one per
attempt, so that a retry never reads or overwrites a half-written earlier attempt)::

    <uid>-ledger-<ledger id>          the data object
    <uid>-ledger-<ledger id>-index    its index

Data object: a 16-byte header, then every entry of the ledger in order, each a record::

    header  b"PTOD" | version u16 | 0 u16 | ledger id u64
    record  length u32 | entry id u64 | crc32c(data) u32 | data

Index object (written after the data object is complete; its presence with a matching data length
says the data object is whole)::

    b"PTOI" | version u16 | 0 u16 | ledger id u64 | entries u64 | data length u64
    | offset u64 of each entry's record ... | crc32c of all the bytes before it u32

A reader takes the index once, then reads any run of entries with one ranged GET and checks each
record (entry id, length, checksum): a damaged or foreign object fails the read with
``FormatError``, never hands out other bytes as an entry.
"""

import struct

from crc32c import crc32c

DATA_MAGIC = b"PTOD"
INDEX_MAGIC = b"PTOI"
VERSION = 1

_HEADER = struct.Struct(">4sHHQ")
_RECORD = struct.Struct(">IQI")
_INDEX_HEAD = struct.Struct(">4sHHQQQ")
_CRC = struct.Struct(">I")

DATA_HEADER_SIZE = _HEADER.size
RECORD_HEADER_SIZE = _RECORD.size


class FormatError(ValueError):
    """Bytes that are not (or no longer) what the offloader wrote."""


def data_key(uid: str, ledger_id: int) -> str:
    return f"{uid}-ledger-{ledger_id}"


def index_key(uid: str, ledger_id: int) -> str:
    return f"{uid}-ledger-{ledger_id}-index"


def data_header(ledger_id: int) -> bytes:
    return _HEADER.pack(DATA_MAGIC, VERSION, 0, ledger_id)


def append_record(out: bytearray, entry_id: int, data: bytes) -> None:
    """Append one entry's record to ``out``."""
    out += _RECORD.pack(len(data), entry_id, crc32c(data))
    out += data


def encode_index(ledger_id: int, offsets, data_length: int) -> bytes:
    """``offsets``: the data object offset of each entry's record, entry 0 first."""
    offsets = list(offsets)
    body = _INDEX_HEAD.pack(INDEX_MAGIC, VERSION, 0, ledger_id, len(offsets), data_length)
    body += struct.pack(f">{len(offsets)}Q", *offsets)
    return body + _CRC.pack(crc32c(body))


class Index:
    """A decoded index: ``offsets[e]`` is where entry ``e``'s record starts; ``end(e)`` where it ends."""

    __slots__ = ("ledger_id", "offsets", "data_length")

    def __init__(self, ledger_id, offsets, data_length):
        self.ledger_id = ledger_id
        self.offsets = offsets
        self.data_length = data_length

    @property
    def entries(self) -> int:
        return len(self.offsets)

    def end(self, entry_id: int) -> int:
        nxt = entry_id + 1
        return self.offsets[nxt] if nxt < len(self.offsets) else self.data_length


def decode_index(data: bytes, ledger_id: int) -> Index:
    if len(data) < _INDEX_HEAD.size + _CRC.size:
        raise FormatError(f"index of ledger {ledger_id}: {len(data)} bytes is too short")
    body, (crc,) = data[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c(body) != crc:
        raise FormatError(f"index of ledger {ledger_id}: checksum mismatch")
    magic, version, _, lid, count, data_length = _INDEX_HEAD.unpack_from(body)
    if magic != INDEX_MAGIC or version != VERSION:
        raise FormatError(f"index of ledger {ledger_id}: not an index (magic {magic!r}, version {version})")
    if lid != ledger_id:
        raise FormatError(f"index of ledger {ledger_id} names ledger {lid}")
    if len(body) != _INDEX_HEAD.size + 8 * count:
        raise FormatError(f"index of ledger {ledger_id}: {count} entries do not fit {len(body)} bytes")
    offsets = struct.unpack_from(f">{count}Q", body, _INDEX_HEAD.size)
    if any(a >= b for a, b in zip(offsets, offsets[1:])) or (count and (
            offsets[0] != DATA_HEADER_SIZE or offsets[-1] + RECORD_HEADER_SIZE > data_length)):
        raise FormatError(f"index of ledger {ledger_id}: offsets out of order or out of the object")
    return Index(ledger_id, offsets, data_length)


def check_header(data: bytes, ledger_id: int) -> None:
    if len(data) < DATA_HEADER_SIZE:
        raise FormatError(f"data object of ledger {ledger_id}: no header")
    magic, version, _, lid = _HEADER.unpack_from(data)
    if magic != DATA_MAGIC or version != VERSION or lid != ledger_id:
        raise FormatError(f"data object of ledger {ledger_id}: header {magic!r} v{version} "
                          f"ledger {lid}")


def decode_records(data: bytes, first: int, last: int, ledger_id: int) -> list:
    """``[(entry_id, bytes)]`` of entries ``first..last`` from the bytes of their records."""
    out = []
    pos = 0
    view = memoryview(data)
    for expected in range(first, last + 1):
        if pos + RECORD_HEADER_SIZE > len(data):
            raise FormatError(f"ledger {ledger_id}: entry {expected} is cut short")
        length, entry_id, crc = _RECORD.unpack_from(data, pos)
        pos += RECORD_HEADER_SIZE
        if entry_id != expected or pos + length > len(data):
            raise FormatError(f"ledger {ledger_id}: found entry {entry_id} ({length} bytes) where "
                              f"entry {expected} should be")
        payload = bytes(view[pos:pos + length])
        if crc32c(payload) != crc:
            raise FormatError(f"ledger {ledger_id}: entry {entry_id}: checksum mismatch")
        out.append((entry_id, payload))
        pos += length
    return out
