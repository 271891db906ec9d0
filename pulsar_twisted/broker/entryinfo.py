"""
What the broker needs to know of a stored entry, from its MessageMetadata (parsed once per dispatch
by ``wire.frames.entry_metadata``): how many messages it holds (permits are counted in messages)
and its key (Key_Shared routing). The payload itself is never decoded or re-encoded.
"""

import base64
import binascii

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


#: The key of a message that has neither ordering key nor partition key (Pulsar's
#: ``Commands.NONE_KEY``): all such messages hash alike and so go to one consumer.
NONE_KEY = b"NONE_KEY"


def sticky_key(metadata: api.MessageMetadata) -> bytes:
    """
    The key Key_Shared routes by, as Pulsar's ``Commands.peekStickyKey``: the ordering key if
    set, else the partition key (base64-decoded when ``partition_key_b64_encoded``, as the Java
    client's ``keyBytes()`` sends byte keys), else ``NONE_KEY``. A flagged key that is not valid
    base64 is routed as ``NONE_KEY``, as Pulsar does when it cannot decode it.
    """
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        if metadata.partition_key_b64_encoded:
            text = metadata.partition_key
            try:
                # Java's decoder accepts base64 without its '=' padding; Python's needs it.
                return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
            except (binascii.Error, ValueError):
                return NONE_KEY
        return metadata.partition_key.encode()
    return NONE_KEY
