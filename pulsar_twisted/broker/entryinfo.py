"""
What the broker needs to know of a stored entry, from its MessageMetadata (parsed once per dispatch
by ``wire.frames.entry_metadata``): how many messages it holds (permits are counted in messages)
and its key (Key_Shared routing). The payload itself is never decoded or re-encoded.
"""

from pulsar_twisted.proto import PulsarApi_pb2 as api


def num_messages(metadata: api.MessageMetadata) -> int:
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


def sticky_key(metadata: api.MessageMetadata) -> bytes:
    """The key Key_Shared routes by: the ordering key if set, else the partition key (Pulsar's rule)."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        return metadata.partition_key.encode()
    return b""
