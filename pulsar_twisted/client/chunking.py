"""
Chunked messages, as the Java client's ``ProducerImpl`` writes them and ``ConsumerImpl`` reads them.

A producer with chunking enabled (and batching off) splits a (compressed) payload larger than the
broker's ``max_message_size`` into chunks, each sent as its own message with the same sequence id
and a copy of the metadata carrying ``uuid`` (``<producer name>-<sequence id>``), ``chunk_id``,
``num_chunks_from_msg`` and ``total_chunk_msg_size`` (the compressed size). The broker stores each
chunk as one entry and knows nothing of chunking.

The consumer's ``ChunkAssembler`` puts them back together: chunks of one uuid must arrive in
order (chunk 0 opens a context, each next chunk must have the next id); the completed message's
id is a ``ChunkMessageId`` (the last chunk's id, with the first chunk's as
``first_chunk_message_id``) that remembers every chunk's entry so acknowledging it acknowledges
all of them. Pending (incomplete) messages are bounded by ``max_pending_chunked_message``: past it
the oldest is dropped, its chunks acknowledged (``auto_ack_oldest_chunked_message_on_queue_full``)
or left for redelivery; incomplete messages older than
``expire_time_of_incomplete_chunked_message_ms`` are dropped and their chunks acknowledged.
"""

import collections

from pulsar_twisted.client.message_id import MessageId


def chunk_payload_size(max_message_size: int, metadata_size: int, chunk_max_message_size: int = 0):
    """
    The payload bytes per chunk: the broker's limit less the metadata (Java reserves the
    metadata's serialized size so a chunk never exceeds the limit), and at most
    ``chunk_max_message_size`` when given (> 0). Never below one byte.
    """
    # 16 more bytes cover the chunk fields added to the metadata after it was measured, and the
    # magic/checksum/size words of the message part.
    size = max_message_size - metadata_size - 32
    if chunk_max_message_size and chunk_max_message_size > 0:
        size = min(size, chunk_max_message_size)
    return max(1, size)


def split(payload: bytes, chunk_size: int):
    """``payload`` in consecutive slices of ``chunk_size`` bytes (one empty slice for b"")."""
    if not payload:
        return [b""]
    return [payload[i:i + chunk_size] for i in range(0, len(payload), chunk_size)]


def chunk_uuid(producer_name: str, sequence_id: int) -> str:
    """The uuid Java gives every chunk of one message."""
    return f"{producer_name}-{sequence_id}"


class ChunkMessageId(MessageId):
    """
    The id of a reassembled chunked message: equal to (and ordered as) its last chunk's id, with
    ``first_chunk_message_id`` and ``chunk_ids`` (every chunk's ``MessageId``, in order).
    """

    __slots__ = ("first_chunk_message_id", "chunk_ids")

    def __init__(self, first: MessageId, last: MessageId, chunk_ids=()):
        super().__init__(last.ledger_id, last.entry_id, -1, last.partition)
        self.first_chunk_message_id = first
        self.chunk_ids = tuple(chunk_ids) or (first, last)

    def to_proto(self, message_id_data=None, with_batch: bool = True):
        data = super().to_proto(message_id_data, with_batch)
        self.first_chunk_message_id.to_proto(data.first_chunk_message_id)
        return data

    def entry_keys(self):
        return [c.entry_key() for c in self.chunk_ids]

    def __repr__(self):
        return (f"ChunkMessageId(first={self.first_chunk_message_id!r}, "
                f"last=({self.ledger_id}, {self.entry_id}), chunks={len(self.chunk_ids)})")


class _Context:
    __slots__ = ("uuid", "num_chunks", "total_size", "parts", "ids", "received_at", "last_chunk_id")

    def __init__(self, uuid, num_chunks, total_size, now):
        self.uuid = uuid
        self.num_chunks = num_chunks
        self.total_size = total_size
        self.parts = []
        self.ids = []
        self.received_at = now
        self.last_chunk_id = -1


class ChunkAssembler:
    """
    Reassembles chunks for one consumer.

    ``add(metadata, payload, message_id)`` returns ``(payload, ChunkMessageId)`` when the chunk
    completes its message, else None. Chunks that cannot be used are handed to
    ``discard(message_ids, ack)``: acknowledged (``ack`` True) or left for redelivery.
    ``expire(now)`` drops contexts older than the expiry (call it from a timer).
    """

    def __init__(self, discard, max_pending: int = 10, auto_ack_oldest: bool = False,
                 expire_seconds: float = 60.0):
        self.discard = discard
        self.max_pending = max(1, max_pending)
        self.auto_ack_oldest = auto_ack_oldest
        self.expire_seconds = expire_seconds
        self.contexts = collections.OrderedDict()   # uuid -> _Context, oldest first

    def __len__(self):
        return len(self.contexts)

    def add(self, metadata, payload: bytes, message_id: MessageId, now: float):
        uuid = metadata.uuid
        chunk_id = metadata.chunk_id
        context = self.contexts.get(uuid)
        if chunk_id == 0:
            if context is not None:
                # The producer resent the message from its start (reconnection): begin again.
                self._drop(uuid, ack=True)
            while len(self.contexts) >= self.max_pending:
                oldest = next(iter(self.contexts))
                self._drop(oldest, ack=self.auto_ack_oldest)
            context = _Context(uuid, metadata.num_chunks_from_msg,
                               metadata.total_chunk_msg_size, now)
            self.contexts[uuid] = context
        elif context is None or chunk_id != context.last_chunk_id + 1:
            if context is not None and chunk_id <= context.last_chunk_id:
                # A duplicate of a chunk we hold (a resend): its copy is not needed.
                self.discard([message_id], True)
                return None
            # A chunk whose start we never saw (or a gap): unusable; ack it only when old.
            expired = self.expire_seconds > 0 and \
                metadata.publish_time / 1000.0 + self.expire_seconds < now
            self.discard([message_id], expired)
            if context is not None:
                self._drop(uuid, ack=False)
            return None
        context.parts.append(payload)
        context.ids.append(message_id)
        context.last_chunk_id = chunk_id
        if chunk_id + 1 < context.num_chunks:
            return None
        del self.contexts[uuid]
        whole = b"".join(context.parts)
        return whole, ChunkMessageId(context.ids[0], context.ids[-1], context.ids)

    def _drop(self, uuid, ack):
        context = self.contexts.pop(uuid, None)
        if context is not None and context.ids:
            self.discard(list(context.ids), ack)

    def expire(self, now: float) -> int:
        """Drop (and ack) incomplete messages older than the expiry; returns how many."""
        if self.expire_seconds <= 0:
            return 0
        old = [u for u, c in self.contexts.items() if c.received_at + self.expire_seconds <= now]
        for uuid in old:
            self._drop(uuid, ack=True)
        return len(old)

    def clear(self):
        """Forget everything (resubscription: the broker redelivers the unacked chunks)."""
        self.contexts.clear()
