"""
The broker-wide publish buffer (Pulsar's ``maxMessagePublishBufferSizeInMB``): bytes received from
producers and not yet stored. Past the limit every connection stops being read, so the memory held
by in-flight publishes is bounded whatever the number of producers; reading resumes once the
buffer has drained to half the limit (the hysteresis keeps connections from flapping).
"""

from twisted.logger import Logger

log = Logger()


class PublishBuffer:
    """Counts in-flight publish bytes; throttles ``connections()`` (a callable giving the open
    connections, each with ``throttle()``/``unthrottle()``) when over ``limit`` bytes (0: none)."""

    def __init__(self, limit: int, connections):
        self.size = 0
        self.limit = limit
        self._connections = connections
        self._throttled = set()

    def started(self, size: int) -> None:
        """Account for a message received and not yet stored."""
        self.size += size
        if self.limit and self.size > self.limit and not self._throttled:
            log.debug("publish buffer full ({size} bytes): pausing all producers", size=self.size)
            for cnx in list(self._connections()):
                cnx.throttle()
                self._throttled.add(cnx)

    def finished(self, size: int) -> None:
        """Account for a message stored (or failed): resume reading once half drained."""
        self.size -= size
        if self._throttled and self.size <= self.limit // 2:
            throttled, self._throttled = self._throttled, set()
            for cnx in throttled:
                cnx.unthrottle()

    def forget(self, cnx) -> None:
        """``cnx`` closed: it is not resumed later."""
        self._throttled.discard(cnx)
