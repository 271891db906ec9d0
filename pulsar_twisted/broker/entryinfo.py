"""
What the broker needs to know of a stored entry, from its MessageMetadata (parsed once per dispatch
by ``wire.frames.entry_metadata``): how many messages it holds (permits are counted in messages)
and its key (Key_Shared routing). The payload itself is never decoded or re-encoded.
"""

from twisted.logger import Logger

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import FrameError, entry_metadata

log = Logger()


def lenient_metadata(data: bytes) -> api.MessageMetadata:
    """
    ``entry_metadata(data)`` for the dispatch and publish paths: bytes holding no readable metadata
    (a producer may send anything after a valid checksum, and the broker stores it as it came) give
    an empty MessageMetadata instead, read as one message, no key, no delivery time, not a chunk.
    Pulsar's dispatcher does the same with metadata it cannot peek: the entry goes out as it is and
    the consumer's client acks it with a validation error. So one bad entry neither stalls a
    subscription nor closes a connection. Each time is logged as a warning.
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
