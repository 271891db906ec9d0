"""
``ConnectionHandler``: the connect / reconnect state machine shared by ``Producer`` and
``Consumer``, as the Java client's ``ConnectionHandler`` + ``HandlerState`` share it.

States (``state``): ``connecting`` -> ``ready`` <-> ``connecting`` (connection lost, or the broker
closed the handle: reconnect with backoff) -> ``closing`` -> ``closed``; ``failed`` when the first
attempt fails for good or a fatal error ends the handle.

The first attempt (``start``) keeps retrying retriable errors while the next backoff still fits in
the client's ``operation_timeout`` counted from ``start``; a non-retriable error, or running out of
that time, fails the ``start`` Deferred. Once connected, every later failure is retried with backoff
forever, unless ``_is_fatal`` says otherwise (a terminated topic, a fenced producer).

A subclass provides ``client`` (``clock``, ``operation_timeout``, ``connection_for(topic)``),
``clock``, ``topic``, ``backoff`` and:

- ``_attach(cnx)``: register on the connection and send PRODUCER / SUBSCRIBE; its Deferred's
  failure goes to ``_connect_failed``. On success the subclass calls ``_became_ready(cnx)`` and then
  ``_fire_started()``.
- ``_give_up(error)``: fail whatever the application is waiting on (pending sends, receives).
- ``_handler_kind`` ("producer" / "consumer") and ``_connect_verb`` ("connecting" / "subscribing")
  for log lines.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.client import errors

CONNECTING, READY, CLOSING, CLOSED, FAILED = "connecting", "ready", "closing", "closed", "failed"


class ConnectionHandler:
    """The connect/reconnect half of a producer or consumer (see the module docstring)."""

    log = Logger()
    _handler_kind = "handler"
    _connect_verb = "connecting"

    def _init_handler(self):
        """Set the handler's state; called from the subclass's ``__init__``."""
        self.state = CONNECTING
        self.cnx = None
        self._reconnect_call = None
        self._started = None
        #: Whether the handle was ever ready (after that, failures are retried forever).
        self._connected_once = False
        self._first_attempt_at = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> defer.Deferred:
        """Connect; fires with ``self`` once ready, or fails with the error that ended it."""
        self._started = defer.Deferred()
        self._first_attempt_at = self.clock.seconds()
        self._connect()
        return self._started

    def is_connected(self) -> bool:
        return self.state == READY

    def _connect(self):
        self._reconnect_call = None
        if self.state != CONNECTING:
            return
        d = self.client.connection_for(self.topic)
        d.addCallback(self._attach)
        d.addErrback(self._connect_failed)

    def _became_ready(self, cnx):
        """The broker accepted us on ``cnx``: the state and backoff of a ready handle."""
        self.cnx = cnx
        self._connected_once = True
        self.backoff.reset()
        self.state = READY

    def _fire_started(self):
        started, self._started = self._started, None
        if started is not None:
            started.callback(self)

    def _is_fatal(self, error) -> bool:
        """Whether ``error`` after the first success ends the handle instead of a retry."""
        return False

    def _connect_failed(self, failure):
        if self.state != CONNECTING:
            return
        error = failure.value
        if not isinstance(error, errors.PulsarException):
            self.log.failure("{kind} on {topic}: unexpected error {verb}", failure,
                             kind=self._handler_kind, topic=self.topic, verb=self._connect_verb)
            error = errors.UnknownError(failure.getErrorMessage())
        if not self._connected_once:
            # Java's rule: give up when the next retry would land past the operation timeout.
            elapsed = self.clock.seconds() - self._first_attempt_at
            if not error.retriable or elapsed + self.backoff._next > self.client.operation_timeout:
                self.state = FAILED
                self._give_up(error)
                started, self._started = self._started, None
                if started is not None:
                    started.errback(error)
                return
        elif self._is_fatal(error):
            self.state = FAILED
            self._give_up(error)
            return
        self.log.info("{kind} on {topic}: {error}; retrying", kind=self._handler_kind,
                      topic=self.topic, error=error)
        self._schedule_reconnect()

    def _schedule_reconnect(self):
        if self._reconnect_call is None and self.state == CONNECTING:
            self._reconnect_call = self.clock.callLater(self.backoff.next(), self._connect)

    # Called by the connection ------------------------------------------------------------
    def connection_closed(self, cnx):
        if cnx is self.cnx:
            self._connection_gone()

    def _connection_gone(self):
        self.cnx = None
        if self.state == READY:
            self.state = CONNECTING
            self._schedule_reconnect()
