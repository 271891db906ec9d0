"""
What the broker needs to know of a stored entry, parsed from its MessageMetadata once per dispatch:
how many messages it holds (permits are counted in messages) and its key (Key_Shared routing).
The payload itself is never decoded or re-encoded.
"""

import struct

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MessageMetadata = api.MessageMetadata


def entry_metadata(data: bytes) -> api.MessageMetadata:
    """The MessageMetadata of a stored message part (magic and checksum skipped, not verified)."""
    offset = 0
    if _U16.unpack_from(data, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        offset = 6 + _U32.unpack_from(data, 2)[0]
    if _U16.unpack_from(data, offset)[0] == MAGIC_CRC32C:
        offset += 6
    size = _U32.unpack_from(data, offset)[0]
    offset += 4
    return _MessageMetadata.FromString(data[offset:offset + size])


def num_messages(metadata: api.MessageMetadata) -> int:
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


def sticky_key(metadata: api.MessageMetadata) -> bytes:
    """The key Key_Shared routes by: the ordering key if set, else the partition key (Pulsar's rule)."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        return metadata.partition_key.encode()
    return b""
