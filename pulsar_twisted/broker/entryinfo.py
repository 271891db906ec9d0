"""
What the broker needs to know of a stored entry, from its MessageMetadata (parsed once per dispatch
by ``wire.frames.entry_metadata``): how many messages it holds (permits are counted in messages)
and its key (Key_Shared routing). The payload itself is never decoded or re-encoded.
"""

from twisted.logger import Logger

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import FrameError, entry_metadata

log = Logger()


def readable_metadata(data: bytes):
    """
    ``entry_metadata(data)``, or None for bytes holding no readable metadata. The broker stores
    what a producer sent after a valid checksum without parsing it (as Pulsar's publish path
    does), so persistent dispatchers meet such entries and skip them (``dispatch.base``).
    """
    try:
        return entry_metadata(data)
    except FrameError:
        return None


def lenient_metadata(data: bytes) -> api.MessageMetadata:
    """
    ``entry_metadata(data)`` where an entry must be handled anyway (the publish path's chunk
    check, non-persistent routing): unreadable metadata gives an empty MessageMetadata, read as
    one message, no key, no delivery time, not a chunk, with a warning each time.
    """
    try:
        return entry_metadata(data)
    except FrameError as e:
        log.warn("entry of {size} bytes has unreadable metadata ({error}): handled as one message "
                 "without key", size=len(data), error=e)
        return api.MessageMetadata()


def num_messages(metadata: api.MessageMetadata) -> int:
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


def sticky_key(metadata: api.MessageMetadata) -> bytes:
    """The key Key_Shared routes by: the ordering key if set, else the partition key (Pulsar's rule)."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        return metadata.partition_key.encode()
    return b""
