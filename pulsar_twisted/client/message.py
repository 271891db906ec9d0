"""
Received messages and the batch payload format.

A batch entry's payload (after decompression) is, for each message,
``[u32 size of SingleMessageMetadata][SingleMessageMetadata][payload]`` with
``MessageMetadata.num_messages_in_batch`` giving the count: the format the Java and C++ clients
write and read. ``encode_batch`` / ``decode_batch`` are pure functions over bytes.
"""

import struct

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client.errors import InvalidMessage

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
    """The ``count`` ``(SingleMessageMetadata, payload)`` pairs of a batch payload."""
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


class Message:
    """
    One message as the application sees it (the official client's method names).

    ``metadata`` is the entry's ``MessageMetadata``; ``single`` the batch member's
    ``SingleMessageMetadata`` when the message came in a batch (its fields win).
    """

    __slots__ = ("_data", "_message_id", "_metadata", "_single", "_redelivery_count", "_topic",
                 "_properties")

    def __init__(self, data: bytes, message_id, metadata: api.MessageMetadata, topic: str,
                 redelivery_count: int = 0, single: api.SingleMessageMetadata = None):
        self._data = data
        self._message_id = message_id
        self._metadata = metadata
        self._single = single
        self._redelivery_count = redelivery_count
        self._topic = topic
        self._properties = None

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def message_id(self):
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def properties(self) -> dict:
        if self._properties is None:
            source = self._single if self._single is not None else self._metadata
            self._properties = {kv.key: kv.value for kv in source.properties}
        return self._properties

    def partition_key(self) -> str:
        source = self._single if self._single is not None else self._metadata
        return source.partition_key if source.HasField("partition_key") else ""

    def ordering_key(self) -> bytes:
        source = self._single if self._single is not None else self._metadata
        return source.ordering_key if source.HasField("ordering_key") else b""

    def event_timestamp(self) -> int:
        """Event time in ms since the epoch, 0 when the producer gave none."""
        if self._single is not None:
            return self._single.event_time
        return self._metadata.event_time

    def publish_timestamp(self) -> int:
        """Publish time in ms since the epoch (the producer's clock)."""
        return self._metadata.publish_time

    def producer_name(self) -> str:
        return self._metadata.producer_name

    def sequence_id(self) -> int:
        if self._single is not None and self._single.HasField("sequence_id"):
            return self._single.sequence_id
        return self._metadata.sequence_id

    def schema_version(self) -> bytes:
        return self._metadata.schema_version

    def __repr__(self):
        return f"Message(id={self._message_id!r}, {len(self._data)} bytes)"
