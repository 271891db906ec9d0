"""The bookie protocol without sockets: server protocol + TcpBookieClient over iosim (and
StringTransport), on a FakeBookie whose answers the tests hold, fail and reorder."""

import struct

from twisted.internet import defer, task
from twisted.internet.testing import StringTransport
from twisted.test import iosim
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.bookie.protocol import (
    BookieRequestProcessor, BookieServerFactory, BookieServerProtocol)
from pulsar_twisted.common.bk_errors import (
    BKException, BookieReadOnlyError, BookieUnavailableError, LedgerFencedError, NoSuchEntryError,
    NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.ledger.bookies import IBookieClient
from pulsar_twisted.ledger import tcp
from pulsar_twisted.ledger.tcp import BookieClientProtocol, BookieTimeoutError, TcpBookieClient
from pulsar_twisted.net.framing import encode_frame
from pulsar_twisted.proto import bookie_pb2 as pb
from pulsar_twisted.testing.fake_bookie import FakeBookie
from pulsar_twisted.wire.bookie import pack_entry
from tests.logs import formatted_log_events as _captured_log

KEY = b"master-key"


def packed(ledger_id, entry_id, lac=-1, payload=None):
    payload = payload if payload is not None else b"payload-%d" % entry_id
    return pack_entry(ledger_id, entry_id, lac, len(payload), payload)


class _IOSimEndpoint:
    """A client endpoint that connects, through iosim, to a fresh server protocol."""

    def __init__(self, harness):
        self.harness = harness

    def connect(self, factory):
        h = self.harness
        h.connects += 1
        if h.refuse:
            return defer.fail(ConnectionRefusedError("refused by the test"))
        client = factory.buildProtocol(None)
        server = h.server_factory.buildProtocol(None)
        h.pump = iosim.connect(server, iosim.makeFakeServer(server), client,
                               iosim.makeFakeClient(client), greet=False)
        h.servers.append(server)
        return defer.succeed(client)


class Harness:
    """TcpBookieClient -> iosim -> BookieServerProtocol -> FakeBookie, on one Clock."""

    def __init__(self, **client_args):
        self.clock = task.Clock()
        self.bookie = FakeBookie("b", self.clock)
        self.processor = BookieRequestProcessor(self.bookie)
        self.server_factory = BookieServerFactory(self.processor)
        self.connects = 0
        self.refuse = False
        self.pump = None
        self.servers = []
        endpoint = _IOSimEndpoint(self)
        self.client = TcpBookieClient(self.clock, endpoint_factory=lambda bookie_id: endpoint,
                                      **client_args)

    def flush(self):
        if self.pump is not None:
            self.pump.flush()


class OperationTests(unittest.TestCase):

    def setUp(self):
        self.h = Harness()
        self.client = self.h.client

    def call(self, d):
        self.h.flush()
        return d

    def ok(self, d):
        return self.successResultOf(self.call(d))

    def test_interface(self):
        self.assertTrue(verifyObject(IBookieClient, self.client))

    def test_add_read_lac_delete(self):
        """Each op reaches the storage and answers as LocalBookieClient would."""
        self.assertIsNone(self.ok(self.client.add_entry("b", 7, 0, KEY, packed(7, 0))))
        self.assertIsNone(self.ok(self.client.add_entry("b", 7, 1, KEY, packed(7, 1, lac=0))))
        self.assertEqual(self.ok(self.client.read_entry("b", 7, 1)), packed(7, 1, lac=0))
        self.assertEqual(self.ok(self.client.read_entry("b", 7, -1)), packed(7, 1, lac=0))
        self.assertEqual(self.ok(self.client.read_entry_and_lac("b", 7, 0)), (packed(7, 0), 0))
        self.assertEqual(self.ok(self.client.read_lac("b", 7)), 0)
        self.assertIsNone(self.ok(self.client.delete_ledger("b", 7)))
        self.assertFalse(self.h.bookie.has_ledger(7))
        self.assertEqual(self.h.connects, 1)

    def test_fencing_read(self):
        """A recovery read fences the ledger; later non-recovery adds fail with LedgerFencedError,
        recovery adds go through."""
        self.ok(self.client.add_entry("b", 3, 0, KEY, packed(3, 0)))
        self.assertEqual(self.ok(self.client.read_entry("b", 3, -1, fence=True, master_key=KEY)),
                         packed(3, 0))
        self.assertTrue(self.h.bookie.is_fenced(3))
        self.failureResultOf(self.call(self.client.add_entry("b", 3, 1, KEY, packed(3, 1))),
                             LedgerFencedError)
        self.ok(self.client.add_entry("b", 3, 1, KEY, packed(3, 1), recovery_add=True))

    def test_errors_mapped(self):
        """Storage errors arrive as the same exception classes."""
        self.failureResultOf(self.call(self.client.read_entry("b", 1, 0)), NoSuchLedgerError)
        self.failureResultOf(self.call(self.client.read_lac("b", 1)), NoSuchLedgerError)
        self.ok(self.client.add_entry("b", 1, 0, KEY, packed(1, 0)))
        self.failureResultOf(self.call(self.client.read_entry("b", 1, 5)), NoSuchEntryError)
        self.failureResultOf(self.call(self.client.add_entry("b", 1, 1, b"other", packed(1, 1))),
                             UnauthorizedAccessError)
        self.h.bookie.set_read_only(True)
        self.failureResultOf(self.call(self.client.add_entry("b", 1, 1, KEY, packed(1, 1))),
                             BookieReadOnlyError)
        self.h.bookie.available = False
        self.failureResultOf(self.call(self.client.read_entry("b", 1, 0)), BookieUnavailableError)

    def test_disk_error_answered_without_a_traceback(self):
        """A read failing on the disk (EIO) is answered as an error and logged as a line, not as an
        unexpected failure with its traceback; anything else still logs its traceback."""
        self.ok(self.client.add_entry("b", 1, 0, KEY, packed(1, 0)))

        def failing(error):
            def read(*args, **kwargs):
                return defer.fail(error)
            return read
        self.patch(self.h.bookie, "read_entry", failing(OSError(5, "Input/output error")))
        self.failureResultOf(self.call(self.client.read_entry("b", 1, 0)), BKException)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.patch(self.h.bookie, "read_entry", failing(RuntimeError("a bug")))
        self.failureResultOf(self.call(self.client.read_entry("b", 1, 0)), BKException)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_short_body_is_bad_request(self):
        """An add whose body cannot hold an entry header is refused (ValueError), not stored."""
        self.failureResultOf(self.call(self.client.add_entry("b", 1, 0, KEY, b"tiny")), ValueError)
        self.assertFalse(self.h.bookie.has_ledger(1))

    def test_info(self):
        info = self.ok(self.client.info("b"))
        self.assertFalse(info["read_only"])
        self.assertIn("pulsar-twisted", info["version"])

    def test_pipelined_answers_out_of_order(self):
        """Many requests in flight, answered in reverse: each Deferred gets its own answer."""
        for i in range(10):
            self.ok(self.client.add_entry("b", 5, i, KEY, packed(5, i)))
        self.h.bookie.hold("read")
        reads = [self.client.read_entry("b", 5, i) for i in range(10)]
        self.h.flush()
        self.assertEqual(len(self.h.bookie.held), 10)
        self.assertEqual(self.client.in_flight("b"), 10)
        for d in reads:
            self.assertNoResult(d)
        self.h.bookie.release_held(list(reversed(self.h.bookie.held)))
        self.h.flush()
        self.assertEqual([self.successResultOf(d) for d in reads], [packed(5, i) for i in range(10)])
        self.assertEqual(self.client.in_flight("b"), 0)

    def test_flow_control(self):
        """At most max_in_flight requests are outstanding; the rest queue and go as slots free."""
        h = Harness(max_in_flight=3)
        h.bookie.hold("add")
        adds = [h.client.add_entry("b", 9, i, KEY, packed(9, i)) for i in range(8)]
        h.flush()
        self.assertEqual(len(h.bookie.held), 3)
        self.assertEqual(h.client.queued("b"), 5)
        h.bookie.release_held()
        h.flush()
        self.assertEqual(len(h.bookie.held), 3)
        h.bookie.clear_faults()
        while h.bookie.held:
            h.bookie.release_held()
            h.flush()
        self.assertEqual([self.successResultOf(d) for d in adds], [None] * 8)
        self.assertEqual(h.bookie.entry_ids(9), list(range(8)))

    def test_connection_loss_fails_pending(self):
        """Sent and queued requests fail with BookieUnavailableError when the connection goes; the
        next request reconnects."""
        h = Harness(max_in_flight=2)
        h.bookie.hang("add")
        adds = [h.client.add_entry("b", 1, i, KEY, packed(1, i)) for i in range(4)]
        h.flush()
        h.servers[-1].transport.loseConnection()
        h.flush()
        for d in adds:
            self.failureResultOf(d, BookieUnavailableError)
        h.bookie.clear_faults()
        d = h.client.add_entry("b", 1, 0, KEY, packed(1, 0))
        h.flush()
        self.successResultOf(d)
        self.assertEqual(h.connects, 2)

    def test_timeout(self):
        """A request unanswered within the timeout fails; its late answer is dropped."""
        h = Harness(request_timeout=5.0)
        h.bookie.hold("read")
        h.client.add_entry("b", 1, 0, KEY, packed(1, 0))
        h.flush()
        d = h.client.read_entry("b", 1, 0)
        h.flush()
        h.clock.advance(4.9)
        self.assertNoResult(d)
        h.clock.advance(0.2)
        self.failureResultOf(d, BookieTimeoutError)
        self.assertEqual(h.client.in_flight("b"), 0)
        h.bookie.release_held()
        h.flush()   # the late answer finds no request: ignored, connection stays
        h.bookie.clear_faults()
        d = h.client.read_entry("b", 1, 0)
        h.flush()
        self.assertEqual(self.successResultOf(d), packed(1, 0))
        self.assertEqual(h.connects, 1)

    def test_timeout_after_a_stall_reads_the_answers_first(self):
        """A deadline timer that runs late (the process was stopped, or its reactor stalled) does
        not fail requests whose answers came meanwhile and wait, unread, in the socket: the reactor
        runs due timers before it reads, so without a grace every such request timed out (chaos
        seed 74 and 75, pause-broker: healthy bookies failed, replaced and quarantined). A request
        still unanswered after the grace times out."""
        h = Harness(request_timeout=5.0)
        h.client.add_entry("b", 1, 0, KEY, packed(1, 0))
        h.flush()
        h.bookie.hold("read")
        answered = h.client.read_entry("b", 1, 0)
        h.flush()
        h.bookie.release_held()    # answered at once: the answer is in the socket, not yet read
        h.clock.advance(8.0)       # the process was stopped past the deadline
        self.assertNoResult(answered)
        h.flush()                  # the reactor reads its sockets
        self.assertEqual(self.successResultOf(answered), packed(1, 0))

        h.clock.advance(tcp.STALL_GRACE)   # the grace passes: nothing left to expire

        h.bookie.clear_faults()
        h.bookie.hang("read")
        unanswered = h.client.read_entry("b", 1, 0)
        h.flush()
        h.clock.advance(8.0)
        self.assertNoResult(unanswered)
        h.flush()
        h.clock.advance(tcp.STALL_GRACE)
        self.failureResultOf(unanswered, BookieTimeoutError)

        # A reactor late at every turn (each timer runs seconds late) still times requests out:
        # one grace, then the expiry.
        stuck = h.client.read_entry("b", 1, 0)
        h.flush()
        for _ in range(3):
            h.clock.advance(4.0)
        self.failureResultOf(stuck, BookieTimeoutError)

    def test_connect_backoff(self):
        """A failed connect fails the requests; until the backoff passes requests fail at once,
        then the client tries again (and the backoff grows)."""
        h = Harness(backoff_initial=1.0, backoff_max=4.0)
        h.refuse = True
        self.failureResultOf(h.client.read_lac("b", 1), BookieUnavailableError)
        self.failureResultOf(h.client.read_lac("b", 1), BookieUnavailableError)
        self.assertEqual(h.connects, 1)
        h.clock.advance(1.0)
        self.failureResultOf(h.client.read_lac("b", 1), BookieUnavailableError)
        self.assertEqual(h.connects, 2)
        h.clock.advance(1.0)   # backoff is now 2 s
        self.failureResultOf(h.client.read_lac("b", 1), BookieUnavailableError)
        self.assertEqual(h.connects, 2)
        h.refuse = False
        h.clock.advance(1.0)
        d = h.client.read_lac("b", 1)
        h.flush()
        self.failureResultOf(d, NoSuchLedgerError)   # reached the bookie
        self.assertEqual(h.connects, 3)

    def test_close(self):
        h = Harness()
        h.bookie.hang("add")
        d = h.client.add_entry("b", 1, 0, KEY, packed(1, 0))
        h.flush()
        closed = h.client.close()
        h.flush()
        self.failureResultOf(d, BookieUnavailableError)
        self.successResultOf(closed)


class ServerProtocolTests(unittest.TestCase):
    """The server end alone on a StringTransport."""

    def setUp(self):
        self.bookie = FakeBookie("b", task.Clock())
        self.protocol = BookieServerProtocol(BookieRequestProcessor(self.bookie), max_frame_size=1000)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def responses(self):
        data = self.transport.value()
        self.transport.clear()
        out = []
        while data:
            (length,) = struct.unpack(">I", data[:4])
            response = pb.Response()
            response.ParseFromString(data[4:4 + length])
            out.append(response)
            data = data[4 + length:]
        return out

    def test_unknown_op_is_bad_request(self):
        """A request with no op set is answered BAD_REQUEST; the connection stays."""
        self.protocol.dataReceived(encode_frame(pb.Request(request_id=42).SerializeToString()))
        [response] = self.responses()
        self.assertEqual((response.request_id, response.status), (42, pb.BAD_REQUEST))
        self.assertFalse(self.transport.disconnecting)

    def test_malformed_frame_closes_connection(self):
        """A frame that does not parse closes this connection, with a log line."""
        with _captured_log() as events:
            self.protocol.dataReceived(encode_frame(b"\xff\xff\xff\xff\x0f"))
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.responses(), [])
        self.assertTrue(any("malformed frame" in e for e in events), events)

    def test_oversize_frame_closes_connection(self):
        with _captured_log() as events:
            self.protocol.dataReceived(struct.pack(">I", 5000) + b"x" * 100)
        self.assertTrue(self.transport.disconnecting)
        self.assertTrue(any("exceeds the limit" in e for e in events), events)

    def test_other_connections_unaffected(self):
        """Closing one bad connection leaves the others serving."""
        factory = BookieServerFactory(BookieRequestProcessor(self.bookie))
        client, server, pump = iosim.connectedServerAndClient(
            lambda: factory.buildProtocol(None), lambda: BookieClientProtocol("b"))
        self.protocol.dataReceived(encode_frame(b"\xff\xff\xff\xff\x0f"))
        d = client.send_request(pb.Request(read_lac=pb.ReadLacRequest(ledger_id=1)))
        pump.flush()
        self.assertEqual(self.successResultOf(d).status, pb.NO_SUCH_LEDGER)

    def test_client_protocol_loss_fails_all(self):
        """BookieClientProtocol: losing the connection fails every waiting request."""
        factory = BookieServerFactory(BookieRequestProcessor(self.bookie))
        self.bookie.hang("read")
        client, server, pump = iosim.connectedServerAndClient(
            lambda: factory.buildProtocol(None), lambda: BookieClientProtocol("b"))
        ds = [client.send_request(pb.Request(read_entry=pb.ReadEntryRequest(ledger_id=1)))
              for _ in range(5)]
        pump.flush()
        self.assertEqual(len(factory.connections), 1)
        server.transport.loseConnection()
        pump.flush()
        for d in ds:
            self.failureResultOf(d, BookieUnavailableError)
        self.assertEqual(len(factory.connections), 0)
