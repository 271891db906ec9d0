"""
The compacted-ledger entry record (Pulsar's ``RawMessage``), as pure functions over bytes.

An entry of a compacted ledger is one message of the topic with the position it had there::

    [u32 size][MessageIdData of the original position][u32 size][message part as stored]

so that a compacted reader is given the original message ids, and the compactor can find where the
previous compaction stopped.
"""

import struct

from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.errors import InvalidMessage

_U32 = struct.Struct(">I")


def encode_compacted_entry(position, data: bytes) -> bytes:
    """The record for the message part ``data`` stored at ``position`` (``(ledger_id, entry_id)``)."""
    mid = api.MessageIdData(ledgerId=position[0], entryId=position[1]).SerializeToString()
    return _U32.pack(len(mid)) + mid + _U32.pack(len(data)) + data


def decode_compacted_entry(raw: bytes):
    """``(Position, message part)`` of a compacted-ledger entry (``InvalidMessage``, a ValueError,
    when malformed)."""
    try:
        (size,) = _U32.unpack_from(raw, 0)
        mid = api.MessageIdData.FromString(raw[4:4 + size])
        (length,) = _U32.unpack_from(raw, 4 + size)
        data = raw[8 + size:8 + size + length]
    except Exception as e:
        raise InvalidMessage(f"malformed compacted entry: {e}") from e
    if len(data) != length:
        raise InvalidMessage("truncated compacted entry")
    return Position(mid.ledgerId, mid.entryId), data
