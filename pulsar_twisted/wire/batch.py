"""
The batch payload format, as pure functions over bytes (no Twisted).

A batch entry's payload (after decompression) is, for each message,
``[u32 size of SingleMessageMetadata][SingleMessageMetadata][payload]`` with
``MessageMetadata.num_messages_in_batch`` giving the count: the format the Java and C++ clients
write and read. The producer builds it, the consumer splits it, and the broker does both when
compaction drops members of a batch.
"""

import struct

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.errors import InvalidMessage

_U32 = struct.Struct(">I")


def single_metadata(payload: bytes, properties=None, partition_key=None, ordering_key=None,
                    event_timestamp=None, sequence_id=None) -> api.SingleMessageMetadata:
    """The per-message header of one batch member."""
    meta = api.SingleMessageMetadata()
    meta.payload_size = len(payload)
    for key, value in (properties or {}).items():
        meta.properties.add(key=key, value=value)
    if partition_key is not None:
        meta.partition_key = partition_key
    if ordering_key is not None:
        meta.ordering_key = ordering_key
    if event_timestamp:
        meta.event_time = event_timestamp
    if sequence_id is not None:
        meta.sequence_id = sequence_id
    return meta


def encode_batch(members) -> bytes:
    """Concatenate ``(SingleMessageMetadata, payload)`` pairs in the batch format."""
    parts = []
    for meta, payload in members:
        raw = meta.SerializeToString()
        parts.append(_U32.pack(len(raw)))
        parts.append(raw)
        parts.append(payload)
    return b"".join(parts)


def decode_batch(payload: bytes, count: int):
    """The ``count`` ``(SingleMessageMetadata, payload)`` pairs of a batch payload (``InvalidMessage``
    when it does not hold them)."""
    out = []
    offset = 0
    view = memoryview(payload)
    try:
        for _ in range(count):
            (size,) = _U32.unpack_from(view, offset)
            offset += 4
            meta = api.SingleMessageMetadata()
            meta.ParseFromString(bytes(view[offset:offset + size]))
            offset += size
            end = offset + meta.payload_size
            if end > len(view):
                raise InvalidMessage("batch member runs past the payload")
            out.append((meta, bytes(view[offset:end])))
            offset = end
    except InvalidMessage:
        raise
    except Exception as e:
        raise InvalidMessage(f"batch does not decode: {e}") from e
    return out
