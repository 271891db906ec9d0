"""
The bookie's side of the bookie protocol (``protocol/bookie.proto``).

``BookieServerProtocol`` only frames and decodes: each Request goes to a ``BookieRequestProcessor``,
which dispatches by a table (op name -> processor method, built once, BookKeeper's
``BookieRequestHandler`` -> ``*Processor``) and knows nothing of the transport. Every processor
returns a Deferred firing with a ``Response``; storage errors become status codes
(``wire.bookie.status_for``), so nothing raised by storage ever escapes ``dataReceived``.

A Request that does not parse closes that connection (the stream cannot be trusted any more); one
that parses but names no known op is answered BAD_REQUEST.

Backpressure: a connection with more than ``max_pending`` requests being processed pauses reading
from its transport until it is back under half of that, so a client pipelining faster than the
journal syncs cannot make the bookie buffer without bound.
"""

import shutil

from google.protobuf.message import DecodeError
from twisted.internet import defer
from twisted.internet.protocol import Factory
from twisted.logger import Logger

from pulsar_twisted.common.latency import LatencySummary
from pulsar_twisted.net.framing import DEFAULT_MAX_FRAME_SIZE, FramedProtocol
from pulsar_twisted.proto import bookie_pb2 as pb
from pulsar_twisted.wire.bookie import HEADER_SIZE, packed_lac, status_for

log = Logger()

VERSION = "pulsar-twisted-bookie/0.1"

def disk_space(paths) -> tuple[int, int]:
    """(free, total) bytes over the distinct filesystems holding ``paths`` (0, 0 if none exist)."""
    seen, free, total = set(), 0, 0
    for path in paths:
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            continue
        key = (usage.total, usage.free)   # a cheap stand-in for "same filesystem"
        if key not in seen:
            seen.add(key)
            free += usage.free
            total += usage.total
    return free, total


class BookieRequestProcessor:
    """
    Turns Requests into storage calls. ``storage`` has the ``BookieStorage`` methods; ``info`` is a
    callable returning the ``BookieInfo`` fields as a dict (the server supplies disk figures and its
    id). Keeps per-op counters (``counters[(op, status_name)]``) for the metrics endpoint.
    ``admission`` (a ``bookie.admission.LedgerAdmission``, cluster mode) is asked before the first
    add of a ledger the storage does not hold; None admits every ledger (standalone, tests).
    With a ``clock``, each request's time from arrival to answer is kept per ``(op, success)``
    in ``latencies`` (LatencySummary, ms: BookKeeper's ``bookkeeper_server_<OP>_REQUEST``).
    """

    def __init__(self, storage, info=None, admission=None, clock=None):
        self.storage = storage
        self.admission = admission
        self._info = info or (lambda: {"read_only": bool(storage.read_only), "version": VERSION})
        self.counters = {}
        self.clock = clock
        self.latencies = {}
        self._table = {
            "add_entry": self.process_add_entry,
            "read_entry": self.process_read_entry,
            "read_lac": self.process_read_lac,
            "delete_ledger": self.process_delete_ledger,
            "info": self.process_info,
        }

    def process(self, request) -> defer.Deferred:
        """Deferred[Response] for a decoded Request; never fails."""
        op = request.WhichOneof("op")
        handler = self._table.get(op)
        if handler is None:
            return defer.succeed(self._error(request.request_id, "unknown", pb.BAD_REQUEST,
                                             "request names no known operation"))
        try:
            d = handler(getattr(request, op))
        except Exception as e:
            d = defer.fail(e)
        d.addCallbacks(self._ok, self._failed, callbackArgs=(request.request_id, op),
                       errbackArgs=(request.request_id, op))
        if self.clock is not None:
            d.addCallback(self._timed, op, self.clock.seconds())
        return d

    def _timed(self, response, op, started):
        key = (op, response.status == pb.OK)
        summary = self.latencies.get(key)
        if summary is None:
            summary = self.latencies[key] = LatencySummary()
        summary.observe(max(self.clock.seconds() - started, 0.0) * 1000.0)
        return response

    def _count(self, op: str, status: int) -> None:
        key = (op, status)
        self.counters[key] = self.counters.get(key, 0) + 1

    def _ok(self, response, request_id, op):
        response.request_id = request_id
        self._count(op, pb.OK)
        return response

    def _failed(self, failure, request_id, op):
        status = status_for(failure.value)
        if status == pb.ERROR:
            if failure.check(OSError):
                # The disk's error (EIO on a failing disk), not a bug: a line, not a traceback.
                log.error("bookie request {op} failed: {err}", op=op, err=failure.getErrorMessage())
            else:
                log.failure("bookie request {op} failed", failure, op=op)
        return self._error(request_id, op, status, failure.getErrorMessage())

    def _error(self, request_id, op, status, message):
        self._count(op, status)
        return pb.Response(request_id=request_id, status=status, message=message)

    # -- one processor per op ------------------------------------------------------------------------

    def process_add_entry(self, req) -> defer.Deferred:
        body = req.body
        if len(body) < HEADER_SIZE:
            raise ValueError(f"entry body of {len(body)} bytes is shorter than the entry header")
        storage = self.storage
        ledger_id = req.ledger_id
        admission = self.admission
        if (admission is not None and not storage.has_ledger(ledger_id)
                and not storage.was_deleted(ledger_id)):
            d = admission.check(ledger_id, req.recovery_add)
            d.addCallback(lambda _: self._add(req, body))
        else:
            d = self._add(req, body)
        return d.addCallback(lambda _: pb.Response())

    def _add(self, req, body):
        # The bookie keeps the LAC the writer piggybacked, for read_lac, as LocalBookieClient does.
        return self.storage.add_entry(req.ledger_id, req.entry_id, body, req.master_key,
                                      lac=packed_lac(body), recovery_add=req.recovery_add)

    def process_read_entry(self, req) -> defer.Deferred:
        storage = self.storage
        ledger_id, entry_id = req.ledger_id, req.entry_id
        if req.fence:
            d = storage.fence_ledger(ledger_id, req.master_key)
            d.addCallback(lambda _: storage.read_entry(ledger_id, entry_id))
        else:
            d = storage.read_entry(ledger_id, entry_id)
        return d.addCallback(self._entry_read, ledger_id)

    def _entry_read(self, data, ledger_id):
        try:
            lac = self.storage.read_lac(ledger_id)
        except Exception:   # deleted between the read and now: the entry is still the answer
            lac = -1
        return pb.Response(body=data, lac=lac)

    def process_read_lac(self, req) -> defer.Deferred:
        return defer.succeed(pb.Response(lac=self.storage.read_lac(req.ledger_id)))

    def process_delete_ledger(self, req) -> defer.Deferred:
        return self.storage.delete_ledger(req.ledger_id).addCallback(lambda _: pb.Response())

    def process_info(self, req) -> defer.Deferred:
        return defer.succeed(pb.Response(info=pb.BookieInfo(**self._info())))


class BookieServerProtocol(FramedProtocol):
    """One client connection: Request frames in, Response frames out (in completion order)."""

    def __init__(self, processor: BookieRequestProcessor, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_pending: int = 10_000):
        self.processor = processor
        self.max_frame_size = max_frame_size
        self.max_pending = max_pending
        self.pending = 0
        self.connected = False
        self._paused = False

    def connectionMade(self):
        self.connected = True
        if hasattr(self.transport, "setTcpNoDelay"):
            # BookKeeper's serverTcpNoDelay (on by default). With Nagle, an answer written while an
            # earlier one is unacknowledged (reads answered from disk come back from the read
            # thread in batches, each its own write) waits for the client's delayed ACK: ~40 ms
            # per batch, so reading a backlog went at ~16 ledgers a second whatever their size.
            self.transport.setTcpNoDelay(True)
        if self.factory is not None:
            self.factory.connections.add(self)

    def connectionLost(self, reason):
        self.connected = False
        if self.factory is not None:
            self.factory.connections.discard(self)

    def frame_received(self, payload: bytes) -> None:
        request = pb.Request()
        try:
            request.ParseFromString(payload)
        except DecodeError as e:
            self.close_malformed(f"undecodable request: {e}")
            return
        self.pending += 1
        if self.pending > self.max_pending and not self._paused:
            self._paused = True
            self.transport.pauseProducing()
        self.processor.process(request).addCallback(self._send_response)

    def _send_response(self, response) -> None:
        self.pending -= 1
        if self._paused and self.pending <= self.max_pending // 2:
            self._paused = False
            self.transport.resumeProducing()
        if self.connected:
            self.send_frame(response.SerializeToString())


class BookieServerFactory(Factory):
    """Builds ``BookieServerProtocol``s sharing one processor; tracks live connections so the server
    can drop them on stop."""

    def __init__(self, processor: BookieRequestProcessor, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self.processor = processor
        self.max_frame_size = max_frame_size
        self.connections = set()

    def buildProtocol(self, addr):
        protocol = BookieServerProtocol(self.processor, self.max_frame_size)
        protocol.factory = self
        return protocol

    def close_connections(self) -> None:
        for protocol in list(self.connections):
            protocol.transport.abortConnection()
