"""
Shared connection helpers: length-prefixed framing with a size limit, a request table, and a
keep-alive timer.

``FramedProtocol`` turns a byte stream of ``[u32 big-endian length][payload]`` frames into
``frame_received(payload)`` calls and writes frames with ``send_frame``. A frame announced longer
than ``max_frame_size`` is never buffered: the connection is logged and closed at once, since the
peer is either broken or hostile and nothing later on the stream can be trusted.

``RequestTable`` is AMP's ``_outstandingRequests`` as an object: request id -> Deferred, with every
Deferred still waiting failed with one reason when the connection goes. Protocols that pipeline
requests (bookie client, broker-to-broker, our Pulsar client) share it; a request may carry a
deadline on the table's clock.

``KeepAlive`` is the PING/PONG idle timer both ends of a Pulsar connection run.

``STALL`` and ``STALL_GRACE``: a timer that decides a peer is silent (a keep-alive, a request
deadline) and runs more than ``STALL`` seconds late was held up by this process (SIGSTOP, a blocked
reactor), not by the peer. What the peer sent meanwhile still waits unread in the socket, and the
reactor runs due timers before it reads its sockets, so deciding at once would give up on peers
that did answer. Such a timer waits ``STALL_GRACE`` more (the reactor reads its sockets meanwhile),
once, then decides.
"""

import struct

from twisted.internet import defer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

#: Seconds a timer may run late before the lateness is taken for a stall of this process.
STALL = 1.0

#: Seconds a late timer (``STALL``) waits once more before deciding that a peer is silent.
STALL_GRACE = 0.2


class StallGrace:
    """The ``STALL`` / ``STALL_GRACE`` rule (module docstring) for one timer. ``due``: when the
    timer is meant to run, set when arming it. When it runs, ``wait_first(now, deciding)`` is True
    if it must run again ``STALL_GRACE`` later before deciding (``due`` is then that time), False
    to decide now; ``deciding``: it would give up on its peer now. One grace in a row: a reactor
    late at every turn still decides."""

    __slots__ = ("due", "_graced")

    def __init__(self):
        self.due = 0.0
        self._graced = False

    def wait_first(self, now: float, deciding: bool = True) -> bool:
        if deciding and now - self.due > STALL and not self._graced:
            self._graced = True
            self.due = now + STALL_GRACE
            return True
        self._graced = False
        return False

    def reset(self) -> None:
        """The timer was cancelled: the next lateness gets its grace again."""
        self._graced = False

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


class RequestTimeoutError(Exception):
    """A request waited past its deadline (the default error of ``RequestTable``)."""


def _default_timeout_error(request_id: int, timeout: float) -> Exception:
    return RequestTimeoutError(f"request {request_id} timed out after {timeout}s")


class RequestTable:
    """
    Outstanding requests of one connection: ``request_id -> Deferred``. Ids increase from 1 and are
    never reused on one table (64-bit: they do not wrap in practice).

    A request may have a deadline: given a ``clock``, ``wait(request_id, timeout)`` fails the
    Deferred with ``timeout_error(request_id, timeout)`` (a callable returning the exception, so
    each protocol keeps its own error type) once ``timeout`` seconds pass without an answer; an
    answer after that is a late answer (``resolve`` returns False). Cancelling a waiting Deferred
    forgets the request.

    ``fail_all(reason)`` fails every waiting Deferred with the same reason (AMP's
    ``failAllOutgoing``); after it, ``new``/``wait`` hand out Deferreds that fail at once with that
    reason, so a request made on a dead connection never waits forever.
    """

    def __init__(self, clock=None, timeout_error=_default_timeout_error):
        self._clock = clock
        self._timeout_error = timeout_error
        self._pending = {}      # request_id -> (Deferred, IDelayedCall or None)
        self._next_id = 1
        self._failed = None

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._pending

    def next_id(self) -> int:
        """Reserve a request id, for protocols that build the request before ``wait`` on it."""
        request_id = self._next_id
        self._next_id += 1
        return request_id

    def wait(self, request_id: int, timeout: float = None) -> defer.Deferred:
        """
        A Deferred for the answer to ``request_id`` (from ``next_id``), fired through
        ``resolve``/``fail``; with a ``timeout`` (seconds, needs the clock) it fails on its own
        once that has passed.
        """
        d = defer.Deferred(lambda _: self._forget(request_id))
        if self._failed is not None:
            d.errback(self._failed)
            return d
        call = None
        if timeout:
            call = self._clock.callLater(timeout, self._timed_out, request_id, timeout)
        self._pending[request_id] = (d, call)
        return d

    def new(self, timeout: float = None) -> tuple[int, defer.Deferred]:
        """A fresh ``(request_id, Deferred)``: ``next_id`` and ``wait`` in one call."""
        request_id = self.next_id()
        return request_id, self.wait(request_id, timeout)

    def pop(self, request_id: int):
        """Remove and return the Deferred for ``request_id`` (None if unknown or done)."""
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return None
        d, call = entry
        if call is not None and call.active():
            call.cancel()
        return d

    def resolve(self, request_id: int, result) -> bool:
        """Fire the request's Deferred with ``result``; False if it is not waiting (late answer)."""
        d = self.pop(request_id)
        if d is None:
            return False
        d.callback(result)
        return True

    def fail(self, request_id: int, reason) -> bool:
        """Fail one request; False if it is not waiting."""
        d = self.pop(request_id)
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
        for d, call in pending.values():
            if call is not None and call.active():
                call.cancel()
            d.errback(reason)

    def _forget(self, request_id: int) -> None:
        self.pop(request_id)

    def _timed_out(self, request_id: int, timeout: float) -> None:
        entry = self._pending.pop(request_id, None)
        if entry is not None:
            entry[0].errback(self._timeout_error(request_id, timeout))


class KeepAlive:
    """
    The keep-alive of one connection (Pulsar's PING/PONG): every ``interval`` seconds, a
    connection idle for the whole interval is sent a PING (``send_ping()``, which returns False
    when the connection is not in a state to ping, e.g. before the handshake); a connection still
    silent one interval after a PING is given up (``on_timeout(idle_seconds)``, which closes it).
    Any input counts as an answer (``received()``), as in Pulsar, where every command clears the
    wait for the PONG. ``interval`` <= 0 turns it off. Times come from the injected ``clock``.
    """

    def __init__(self, clock, interval: float, send_ping, on_timeout):
        self.clock = clock
        self.interval = interval
        self._send_ping = send_ping
        self._on_timeout = on_timeout
        self._last_received = clock.seconds()
        self._ping_outstanding = False
        self._call = None
        self._stall = StallGrace()

    def start(self) -> None:
        """Start the timer (the connection is up; its first input is awaited from now)."""
        self._last_received = self.clock.seconds()
        self._schedule()

    def received(self) -> None:
        """The peer sent something: it is alive."""
        self._last_received = self.clock.seconds()
        self._ping_outstanding = False

    def stop(self) -> None:
        """The connection is gone: no more pings."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self) -> None:
        if self.interval and self.interval > 0:
            self._stall.due = self.clock.seconds() + self.interval
            self._call = self.clock.callLater(self.interval, self._tick)

    def _tick(self) -> None:
        self._call = None
        now = self.clock.seconds()
        if self._stall.wait_first(now, deciding=self._ping_outstanding):
            # This process did not run (the module docstring): the PONG may be in the socket.
            self._call = self.clock.callLater(STALL_GRACE, self._tick)
            return
        idle = now - self._last_received
        if idle >= self.interval:
            if self._ping_outstanding:
                self._on_timeout(idle)
                return
            if self._send_ping():
                self._ping_outstanding = True
        self._schedule()
