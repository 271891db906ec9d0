"""
Shared connection helpers: length-prefixed framing with a size limit, and a request table.

``FramedProtocol`` turns a byte stream of ``[u32 big-endian length][payload]`` frames into
``frame_received(payload)`` calls and writes frames with ``send_frame``. A frame announced longer
than ``max_frame_size`` is never buffered: the connection is logged and closed at once, since the
peer is either broken or hostile and nothing later on the stream can be trusted.

``RequestTable`` is AMP's ``_outstandingRequests`` as an object: request id -> Deferred, with every
Deferred still waiting failed with one reason when the connection goes. Protocols that pipeline
requests (bookie client, broker-to-broker, our Pulsar client) share it.
"""

import struct

from twisted.internet import defer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

_LENGTH = struct.Struct(">I")
LENGTH_SIZE = _LENGTH.size

#: 5 MiB (Pulsar's maxMessageSize) + 1 MiB for the entry header, digest and envelope.
DEFAULT_MAX_FRAME_SIZE = 6 * 1024 * 1024


def encode_frame(payload: bytes) -> bytes:
    """``[u32 length][payload]`` as one bytes object (pure; for tests and small frames)."""
    return _LENGTH.pack(len(payload)) + payload


class FrameTooLargeError(Exception):
    """A frame longer than the limit was announced by the peer or offered to ``send_frame``."""


class FramedProtocol(Protocol):
    """
    Length-prefixed framing. Subclasses implement ``frame_received(payload: bytes)`` and may override
    ``frame_too_large(length)``. ``frame_received`` runs for each complete frame in arrival order; an
    exception escaping it is logged and closes the connection (never raised out of ``dataReceived``).
    """

    max_frame_size = DEFAULT_MAX_FRAME_SIZE

    _buffer = None
    _closing = False

    def dataReceived(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = bytearray()
        buffer += data
        offset = 0
        size = len(buffer)
        limit = self.max_frame_size
        # Frames are consumed by offset and the consumed prefix dropped once at the end: a burst of
        # small frames in one read costs one memmove, not one per frame.
        try:
            while size - offset >= LENGTH_SIZE and not self._closing:
                (length,) = _LENGTH.unpack_from(buffer, offset)
                if length > limit:
                    self._closing = True
                    self.frame_too_large(length)
                    return
                end = offset + LENGTH_SIZE + length
                if end > size:
                    break
                payload = bytes(buffer[offset + LENGTH_SIZE:end])
                offset = end
                try:
                    self.frame_received(payload)
                except Exception:
                    log.failure("frame handler failed on {peer}: closing the connection",
                                peer=self._peer())
                    self._closing = True
                    self.transport.loseConnection()
                    return
        finally:
            if self._closing:
                self._buffer = None
            elif offset:
                del buffer[:offset]

    def frame_received(self, payload: bytes) -> None:
        raise NotImplementedError

    def frame_too_large(self, length: int) -> None:
        """The peer announced a frame over the limit: log it and drop the connection."""
        log.warn("frame of {length} bytes from {peer} exceeds the limit of {limit}: closing the "
                 "connection", length=length, peer=self._peer(), limit=self.max_frame_size)
        self.transport.loseConnection()

    def close_malformed(self, reason: str) -> None:
        """For subclasses: the peer sent something that cannot be decoded; log and close."""
        log.warn("malformed frame from {peer} ({reason}): closing the connection", peer=self._peer(),
                 reason=reason)
        self._closing = True
        self.transport.loseConnection()

    def send_frame(self, payload: bytes) -> None:
        """Write one frame. FrameTooLargeError for a payload the peer would refuse."""
        if len(payload) > self.max_frame_size:
            raise FrameTooLargeError(f"frame of {len(payload)} bytes exceeds {self.max_frame_size}")
        self.transport.writeSequence((_LENGTH.pack(len(payload)), payload))

    def _peer(self) -> str:
        try:
            return str(self.transport.getPeer())
        except Exception:
            return "?"


class RequestTable:
    """
    Outstanding requests of one connection: ``request_id -> Deferred``. Ids increase from 1 and are
    never reused on one table (64-bit: they do not wrap in practice).

    ``fail_all(reason)`` fails every waiting Deferred with the same reason (AMP's
    ``failAllOutgoing``); after it, ``new`` hands out Deferreds that fail at once with that reason, so
    a request made on a dead connection never waits forever.
    """

    def __init__(self):
        self._pending = {}
        self._next_id = 1
        self._failed = None

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._pending

    def new(self) -> tuple[int, defer.Deferred]:
        """A fresh ``(request_id, Deferred)``; the Deferred fires through ``resolve``/``fail``."""
        request_id = self._next_id
        self._next_id += 1
        d = defer.Deferred()
        if self._failed is not None:
            d.errback(self._failed)
        else:
            self._pending[request_id] = d
        return request_id, d

    def pop(self, request_id: int):
        """Remove and return the Deferred for ``request_id`` (None if unknown or done)."""
        return self._pending.pop(request_id, None)

    def resolve(self, request_id: int, result) -> bool:
        """Fire the request's Deferred with ``result``; False if it is not waiting (late answer)."""
        d = self._pending.pop(request_id, None)
        if d is None:
            return False
        d.callback(result)
        return True

    def fail(self, request_id: int, reason) -> bool:
        """Fail one request; False if it is not waiting."""
        d = self._pending.pop(request_id, None)
        if d is None:
            return False
        d.errback(reason)
        return True

    def fail_all(self, reason) -> None:
        """Fail every waiting request (and every later ``new``) with ``reason`` (exception or
        Failure)."""
        if not isinstance(reason, Failure):
            reason = Failure(reason)
        self._failed = reason
        pending, self._pending = self._pending, {}
        for d in pending.values():
            d.errback(reason)
