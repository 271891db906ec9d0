"""
``TcpBookieClient``: ``IBookieClient`` over the bookie protocol (``protocol/bookie.proto``).

One connection per bookie id (``host:port``), made on demand by the first request to that bookie.
Requests are pipelined on it; at most ``max_in_flight`` are outstanding per connection and further
ones wait in a FIFO queue, sent as answers come back (Deferred-based flow control: the caller just
sees a later callback). Statuses map to the ``pulsar_twisted.common.bk_errors`` errors exactly as
``LocalBookieClient`` raises them, so a ``BookKeeperClient`` cannot tell TCP from local bookies.

Failures: a connection that cannot be made, or is lost, fails every request sent or queued on it
with ``BookieUnavailableError``. After a failed connect the bookie is left alone for a backoff
(doubling from ``backoff_initial`` up to ``backoff_max``) during which requests fail at once: the
ledger handle wants a fast failure so it can change the ensemble, not a queue that waits for a dead
bookie. Each request also has a deadline (``request_timeout``) checked by one timer per connection,
not one per request; a timed-out request fails with ``BookieTimeoutError`` (a
``BookieUnavailableError``) and its late answer is dropped. A timer that runs more than ``STALL``
seconds late (this process was stopped, or its reactor stalled) expires nothing at once: the answers
that came meanwhile wait unread in the socket, and the reactor runs due timers before it reads, so
they would all time out; the requests still unanswered ``STALL_GRACE`` seconds later do
(``net.framing.StallGrace``, as the keep-alive).
"""

import enum
from collections import deque

from twisted.internet import defer, endpoints
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import BookieUnavailableError
from pulsar_twisted.common.lograte import LogRate
from pulsar_twisted.ledger.bookies import IBookieClient
from pulsar_twisted.net.framing import (
    DEFAULT_MAX_FRAME_SIZE, STALL_GRACE, FramedProtocol, RequestTable, StallGrace)
from pulsar_twisted.proto import bookie_pb2 as pb
from pulsar_twisted.wire.bookie import error_for

log = Logger()


class BookieTimeoutError(BookieUnavailableError):
    """A bookie did not answer a request within the request timeout."""

    code = "Timeout"


def split_bookie_id(bookie_id: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> (host, port); ValueError otherwise."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bookie id {bookie_id!r} is not host:port")
    return host.strip("[]"), int(port)


class BookieClientProtocol(FramedProtocol):
    """
    The client end of one bookie connection: ``send_request(request)`` -> Deferred[Response]. The
    Response's ``request_id`` finds the waiting Deferred (answers may come in any order). On
    connection loss every waiting Deferred fails with BookieUnavailableError.
    """

    def __init__(self, bookie_id: str = "?", max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self.bookie_id = bookie_id
        self.max_frame_size = max_frame_size
        self.requests = RequestTable()
        self.on_lost = None     # callable(protocol, reason), set by the owning connection
        self.on_answer = None   # callable(), after each answer (frees a flow-control slot)

    def send_request(self, request) -> defer.Deferred:
        """Assign ``request.request_id``, send it, and return Deferred[Response]."""
        request_id, d = self.requests.new()
        if d.called:   # connection already lost: d has failed
            return d
        request.request_id = request_id
        self.send_frame(request.SerializeToString())
        return d

    def frame_received(self, payload: bytes) -> None:
        response = pb.Response()
        try:
            response.ParseFromString(payload)
        except Exception as e:
            self.close_malformed(f"undecodable response: {e}")
            return
        if not self.requests.resolve(response.request_id, response):
            log.debug("bookie {bookie}: answer to unknown or expired request {id}",
                      bookie=self.bookie_id, id=response.request_id)
        if self.on_answer is not None:
            self.on_answer()

    def connectionLost(self, reason=None):
        if reason is None or reason.check(ConnectionDone):
            message = f"connection to bookie {self.bookie_id} closed"
        else:
            message = f"connection to bookie {self.bookie_id} lost: {reason.getErrorMessage()}"
        self.requests.fail_all(BookieUnavailableError(message))
        if self.on_lost is not None:
            self.on_lost(self, reason)


class _State(enum.Enum):
    IDLE = "idle"               # not connected; the next request connects
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"         # a connect failed; requests fail until retry_at


class _Op:
    """A request not yet sent (queued) or in flight, with its deadline."""

    __slots__ = ("request", "deferred", "deadline", "sent")

    def __init__(self, request, deferred, deadline):
        self.request = request
        self.deferred = deferred
        self.deadline = deadline
        self.sent = None        # the protocol's Deferred once sent


class _BookieConnection:
    """
    The connection to one bookie and its state machine (IDLE -> CONNECTING -> CONNECTED, back to
    IDLE on loss; CONNECTING -> BACKOFF on failure, BACKOFF -> IDLE once the backoff has passed).
    """

    def __init__(self, client: "TcpBookieClient", bookie_id: str):
        self.client = client
        self.bookie_id = bookie_id
        self.state = _State.IDLE
        self.protocol = None
        self.queue = deque()        # _Op not yet sent, in order
        self.in_flight = deque()    # _Op sent, in send order (= deadline order)
        self.backoff = client.backoff_initial
        self.retry_at = 0.0
        self.timer = None
        self.stall = StallGrace()   # the deadline timer's lateness rule
        self._timeout_log = LogRate(client.clock)
        self._connecting = None

    # -- requests ----------------------------------------------------------------------------------

    def submit(self, request) -> defer.Deferred:
        client = self.client
        now = client.clock.seconds()
        if self.state is _State.BACKOFF:
            if now < self.retry_at:
                return defer.fail(BookieUnavailableError(
                    f"bookie {self.bookie_id} is unreachable (retrying in "
                    f"{self.retry_at - now:.1f}s)"))
            self.state = _State.IDLE
        op = _Op(request, defer.Deferred(), now + client.request_timeout)
        self.queue.append(op)
        if self.state is _State.IDLE:
            self._connect()
        elif self.state is _State.CONNECTED:
            self._pump()
        self._arm_timer()
        return op.deferred

    def _pump(self) -> None:
        """Send queued requests while there are free slots."""
        limit = self.client.max_in_flight
        protocol = self.protocol
        queue, in_flight = self.queue, self.in_flight
        while queue and self.state is _State.CONNECTED:
            if len(protocol.requests) >= limit:
                return
            op = queue.popleft()
            if op.deferred.called:   # timed out while queued
                continue
            try:
                op.sent = protocol.send_request(op.request)
            except Exception:
                op.deferred.errback()
                continue
            in_flight.append(op)
            op.sent.addBoth(self._answered, op)

    def _answered(self, result, op) -> None:
        if op.deferred.called:   # timed out already
            return None
        if isinstance(result, Failure):
            op.deferred.errback(result)
        else:
            op.deferred.callback(result)
        return None

    def _after_answer(self) -> None:
        in_flight = self.in_flight
        while in_flight and in_flight[0].deferred.called:
            in_flight.popleft()
        if self.queue:
            self._pump()

    # -- deadlines ---------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        if self.timer is not None or self.client.request_timeout <= 0:
            return
        first = self._first_deadline()
        if first is None:
            return
        now = self.client.clock.seconds()
        delay = max(0.0, first - now)
        self.stall.due = now + delay
        self.timer = self.client.clock.callLater(delay, self._expire)

    def _first_deadline(self):
        for ops in (self.in_flight, self.queue):
            while ops and ops[0].deferred.called:
                ops.popleft()
        deadlines = [ops[0].deadline for ops in (self.in_flight, self.queue) if ops]
        return min(deadlines) if deadlines else None

    def _expire(self) -> None:
        self.timer = None
        now = self.client.clock.seconds()
        if self.stall.wait_first(now):
            # This process did not run for a while: the answers that came meanwhile are still in
            # the socket (the reactor runs due timers before it reads). Let it read them first;
            # a call made now runs after the reactor's next pass over its sockets.
            self.timer = self.client.clock.callLater(STALL_GRACE, self._expire)
            return
        expired = 0
        for ops in (self.in_flight, self.queue):
            while ops and (ops[0].deferred.called or ops[0].deadline <= now):
                op = ops.popleft()
                if op.deferred.called:
                    continue
                expired += 1
                if op.sent is not None and self.protocol is not None:
                    self.protocol.requests.pop(op.request.request_id)
                op.deferred.errback(BookieTimeoutError(
                    f"bookie {self.bookie_id} did not answer within {self.client.request_timeout}s"))
        if expired:
            count = self._timeout_log.due(expired)
            if count is not None:
                log.warn("bookie {bookie}: {count} requests timed out (at most one line a second)",
                         bookie=self.bookie_id, count=count)
            if self.queue and self.state is _State.CONNECTED:
                self._pump()
        self._arm_timer()

    # -- connection --------------------------------------------------------------------------------

    def _connect(self) -> None:
        self.state = _State.CONNECTING
        client = self.client
        try:
            endpoint = client.endpoint_for(self.bookie_id)
            factory = Factory.forProtocol(lambda: BookieClientProtocol(self.bookie_id,
                                                                       client.max_frame_size))
            d = endpoint.connect(factory)
        except Exception:
            d = defer.fail()
        self._connecting = d
        d.addCallbacks(self._connected, self._connect_failed)

    def _connected(self, protocol) -> None:
        self._connecting = None
        if self.state is not _State.CONNECTING:   # closed meanwhile
            protocol.transport.loseConnection()
            return
        self.state = _State.CONNECTED
        self.protocol = protocol
        self.backoff = self.client.backoff_initial
        protocol.on_lost = self._lost
        protocol.on_answer = self._after_answer
        if self.client.no_delay:
            try:
                protocol.transport.setTcpNoDelay(True)
            except Exception:
                pass
        log.debug("connected to bookie {bookie}", bookie=self.bookie_id)
        self._pump()

    def _connect_failed(self, failure) -> None:
        self._connecting = None
        if self.state is not _State.CONNECTING:
            return
        now = self.client.clock.seconds()
        self.state = _State.BACKOFF
        self.retry_at = now + self.backoff
        log.warn("cannot connect to bookie {bookie}: {error} (next try in {backoff}s)",
                 bookie=self.bookie_id, error=failure.getErrorMessage(), backoff=self.backoff)
        self.backoff = min(self.backoff * 2, self.client.backoff_max)
        self._fail_waiting(BookieUnavailableError(
            f"cannot connect to bookie {self.bookie_id}: {failure.getErrorMessage()}"))

    def _lost(self, protocol, reason) -> None:
        if protocol is not self.protocol:
            return
        self.protocol = None
        if self.state is _State.CONNECTED:
            self.state = _State.IDLE
        # The protocol failed its own table; ops still queued here fail too.
        self._fail_waiting(BookieUnavailableError(f"connection to bookie {self.bookie_id} lost"))

    def _fail_waiting(self, error) -> None:
        ops = list(self.in_flight) + list(self.queue)
        self.in_flight.clear()
        self.queue.clear()
        for op in ops:
            if not op.deferred.called:
                op.deferred.errback(error)
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None
        self.stall.reset()

    def close(self) -> defer.Deferred:
        """Drop the connection; waiting requests fail. Deferred fires once the socket is closed."""
        state, self.state = self.state, _State.IDLE
        if self._connecting is not None:
            self._connecting.cancel()
        protocol, self.protocol = self.protocol, None
        self._fail_waiting(BookieUnavailableError(f"client closed its connection to {self.bookie_id}"))
        if protocol is None or state is not _State.CONNECTED:
            return defer.succeed(None)
        done = defer.Deferred()
        previous = protocol.on_lost

        def lost(p, reason):
            if previous is not None:
                previous(p, reason)
            done.callback(None)
        protocol.on_lost = lost
        protocol.transport.loseConnection()
        return done


@implementer(IBookieClient)
class TcpBookieClient:
    """
    ``IBookieClient`` over TCP (or TLS) connections to bookies named ``host:port``.

    ``tls_options``: None for plain TCP; else either an object with ``for_host(hostname)`` returning
    an ``IOpenSSLClientConnectionCreator`` (``security.tls.ClientTLS``: checks the bookie's
    certificate against its host name), or a connection creator used for every bookie.
    ``endpoint_factory(bookie_id) -> IStreamClientEndpoint`` replaces the default endpoints (tests).
    Times are in seconds; ``request_timeout`` 0 disables the deadline.
    """

    def __init__(self, reactor, tls_options=None, *, request_timeout: float = 30.0,
                 connect_timeout: float = 10.0, max_in_flight: int = 1000,
                 backoff_initial: float = 0.1, backoff_max: float = 10.0,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, endpoint_factory=None,
                 no_delay: bool = True):
        self.reactor = reactor
        self.clock = reactor
        self.tls_options = tls_options
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.max_in_flight = max_in_flight
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.max_frame_size = max_frame_size
        self.no_delay = no_delay
        self._endpoint_factory = endpoint_factory
        self._connections = {}

    def endpoint_for(self, bookie_id: str):
        """The client endpoint reaching ``bookie_id``."""
        if self._endpoint_factory is not None:
            return self._endpoint_factory(bookie_id)
        host, port = split_bookie_id(bookie_id)
        endpoint = endpoints.HostnameEndpoint(self.reactor, host, port, timeout=self.connect_timeout)
        if self.tls_options is None:
            return endpoint
        options = self.tls_options
        if hasattr(options, "for_host"):
            options = options.for_host(host)
        return endpoints.wrapClientTLS(options, endpoint)

    def _connection(self, bookie_id: str) -> _BookieConnection:
        connection = self._connections.get(bookie_id)
        if connection is None:
            connection = self._connections[bookie_id] = _BookieConnection(self, bookie_id)
        return connection

    def _call(self, bookie_id, request) -> defer.Deferred:
        try:
            d = self._connection(bookie_id).submit(request)
        except Exception:
            return defer.fail()
        return d.addCallback(_check_status, bookie_id)

    # -- IBookieClient -------------------------------------------------------------------------------

    def add_entry(self, bookie_id, ledger_id, entry_id, master_key, packed, recovery_add=False):
        request = pb.Request(add_entry=pb.AddEntryRequest(
            ledger_id=ledger_id, entry_id=entry_id, master_key=master_key, body=packed,
            recovery_add=recovery_add))
        return self._call(bookie_id, request).addCallback(lambda _: None)

    def read_entry(self, bookie_id, ledger_id, entry_id, fence=False, master_key=b""):
        request = pb.Request(read_entry=pb.ReadEntryRequest(
            ledger_id=ledger_id, entry_id=entry_id, fence=fence, master_key=master_key))
        return self._call(bookie_id, request).addCallback(lambda r: r.body)

    def read_entry_and_lac(self, bookie_id, ledger_id, entry_id):
        """Deferred[(bytes, int)]: the entry and the LAC the bookie piggybacks on it."""
        request = pb.Request(read_entry=pb.ReadEntryRequest(ledger_id=ledger_id, entry_id=entry_id))
        return self._call(bookie_id, request).addCallback(lambda r: (r.body, r.lac))

    def read_lac(self, bookie_id, ledger_id):
        request = pb.Request(read_lac=pb.ReadLacRequest(ledger_id=ledger_id))
        return self._call(bookie_id, request).addCallback(lambda r: r.lac)

    def delete_ledger(self, bookie_id, ledger_id):
        request = pb.Request(delete_ledger=pb.DeleteLedgerRequest(ledger_id=ledger_id))
        return self._call(bookie_id, request).addCallback(lambda _: None)

    def info(self, bookie_id) -> defer.Deferred:
        """Deferred[dict]: the bookie's free/total disk bytes, read-only flag, version and id."""
        request = pb.Request(info=pb.InfoRequest())
        return self._call(bookie_id, request).addCallback(
            lambda r: {f.name: getattr(r.info, f.name) for f in pb.BookieInfo.DESCRIPTOR.fields})

    # -- lifecycle ---------------------------------------------------------------------------------

    def disconnect(self, bookie_id: str) -> defer.Deferred:
        """Close the connection to one bookie (the next request reconnects)."""
        connection = self._connections.pop(bookie_id, None)
        return connection.close() if connection is not None else defer.succeed(None)

    def close(self) -> defer.Deferred:
        """Close every connection; waiting requests fail with BookieUnavailableError."""
        connections, self._connections = list(self._connections.values()), {}
        return defer.gatherResults([c.close() for c in connections], consumeErrors=True)

    def in_flight(self, bookie_id: str) -> int:
        """Requests sent to ``bookie_id`` and not yet answered (testing/metrics)."""
        connection = self._connections.get(bookie_id)
        if connection is None or connection.protocol is None:
            return 0
        return len(connection.protocol.requests)

    def queued(self, bookie_id: str) -> int:
        """Requests waiting for a free slot on ``bookie_id``'s connection."""
        connection = self._connections.get(bookie_id)
        return 0 if connection is None else sum(1 for op in connection.queue if not op.deferred.called)


def _check_status(response, bookie_id):
    status = response.status
    if status == pb.OK:
        return response
    raise error_for(status)(f"bookie {bookie_id}: {response.message or pb.StatusCode.Name(status)}")
