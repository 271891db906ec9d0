"""
Writes made while storage hands durable work back to the reactor, sent when the hand-back ends
instead of at the reactor's next poll.

A frame written to a Twisted TCP transport is only buffered: it goes out once the reactor has
polled the socket as writable, one more epoll round trip (``epoll_ctl`` to watch for writability,
``epoll_wait``, ``epoll_ctl`` to stop) per hand-back, which at a low publish rate is one per message,
and its latency. The journal brackets each hand-back (``begin()`` / ``end()``); a
``CoalescingWriter`` written to inside one keeps the bytes, in order, and ``end()`` sends each
writer's bytes with one ``send`` straight away when its transport has nothing queued (plain TCP,
open), else hands them to ``transport.write`` as usual. Outside a hand-back a writer is a plain
``transport.write``. Only the reactor thread uses this module.
"""

from twisted.internet import tcp
from twisted.logger import Logger

log = Logger()
_active = [0]
_pending = []       # writers holding bytes, in the order of their first write


def begin() -> None:
    """A hand-back starts (nested hand-backs flush at the outermost ``end``)."""
    _active[0] += 1


def end() -> None:
    """The hand-back is over: send what the writers kept."""
    _active[0] -= 1
    if _active[0]:
        return
    while _pending:
        writers = list(_pending)
        _pending.clear()
        for writer in writers:
            try:
                writer.flush()
            except Exception:
                log.failure("flushing writes after a hand-back failed")


class CoalescingWriter:
    """``write(data)`` for one transport: kept until the hand-back ends, if inside one."""

    __slots__ = ("transport", "_chunks")

    def __init__(self, transport):
        self.transport = transport
        self._chunks = []

    def write(self, data: bytes) -> None:
        if not _active[0]:
            if self._chunks:    # (only if a flush failed half way: keep the order)
                self.flush()
            self.transport.write(data)
            return
        if not self._chunks:
            _pending.append(self)
        self._chunks.append(data)

    def flush(self) -> None:
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        t = self.transport
        if type(t) is tcp.Server and _nothing_queued(t):
            # Nothing queued in Twisted: send now, as its doWrite would. A partial send queues the
            # rest; an error (peer gone) queues it all, and the reactor's poll then reports the loss.
            try:
                sent = t.writeSomeData(data)
            except Exception:
                sent = 0
            if isinstance(sent, int):
                if sent >= len(data):
                    return
                data = data[sent:]
        t.write(data)


def _nothing_queued(t) -> bool:
    """True when the TCP transport ``t`` is open with no byte waiting in Twisted's buffers. These
    are Twisted's private attributes (``abstract.FileDescriptor``): if a Twisted release renames
    them, the answer is False and every write takes the ordinary ``transport.write`` path."""
    try:
        return bool(t.connected and not t.disconnecting and not t._writeDisconnecting
                    and not t._tempDataLen and t.offset == len(t.dataBuffer))
    except AttributeError:
        return False
