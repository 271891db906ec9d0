"""
``HandshakeDeadline``: close a server connection whose handshake is not done in time.

Pulsar closes a connection that has not completed CONNECT (authentication included) at its first
keep-alive check, ``keepAliveIntervalSeconds`` after accept. Without such a deadline a client that
sends nothing, or half a frame, holds one of the connection slots (counted from accept, before any
byte is read) forever. The broker and the proxy share this one mechanism; each decides what "done"
means and calls ``stop`` then.
"""

from twisted.logger import Logger


class HandshakeDeadline:
    """
    ``start()`` arms ``clock.callLater(seconds, ...)``; when it fires before ``stop()``, the
    deadline logs one line naming ``peer()`` and aborts ``transport()``. ``pending()`` is asked
    first: a False answer (the handshake finished meanwhile) skips the close. ``seconds`` of 0
    or less (keep-alive off) means no deadline.
    """

    log = Logger()

    def __init__(self, clock, seconds: float, transport, peer, pending=lambda: True):
        self.clock = clock
        self.seconds = seconds
        self._transport = transport
        self._peer = peer
        self._pending = pending
        self._call = None

    @property
    def active(self) -> bool:
        return self._call is not None and self._call.active()

    def start(self) -> None:
        if self.seconds and self.seconds > 0 and self._call is None:
            self._call = self.clock.callLater(self.seconds, self._expired)

    def stop(self) -> None:
        """Done (or the connection is gone): no deadline any more (idempotent)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _expired(self) -> None:
        self._call = None
        if not self._pending():
            return
        self.log.warn("{peer}: CONNECT not completed within {seconds}s (keepAliveIntervalSeconds); "
                      "closing", peer=self._peer(), seconds=self.seconds)
        self._transport().abortConnection()
