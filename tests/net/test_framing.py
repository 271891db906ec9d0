"""Length-prefixed framing, the request table and the keep-alive timer."""

import struct

from hypothesis import given, strategies as st
from twisted.internet import defer, task
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pulsar_twisted.net.framing import (
    STALL_GRACE, FramedProtocol, FrameTooLargeError, KeepAlive, RequestTable, RequestTimeoutError,
    encode_frame)
from tests.logs import formatted_log_events


class Recorder(FramedProtocol):
    def __init__(self, max_frame_size=1024, explode_on=None):
        self.max_frame_size = max_frame_size
        self.frames = []
        self.explode_on = explode_on

    def frame_received(self, payload):
        if payload == self.explode_on:
            raise RuntimeError("handler bug")
        self.frames.append(payload)


def connected(proto):
    transport = StringTransport()
    proto.makeConnection(transport)
    return transport


class FramingTests(unittest.SynchronousTestCase):

    @given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 50))
    def test_any_split_round_trips(self, payloads, chunk):
        """Frames come out whole and in order however the stream is cut."""
        proto = Recorder()
        connected(proto)
        stream = b"".join(encode_frame(p) for p in payloads)
        for i in range(0, len(stream), chunk):
            proto.dataReceived(stream[i:i + chunk])
        self.assertEqual(proto.frames, payloads)

    def test_fixed_bytes(self):
        self.assertEqual(encode_frame(b"ab"), b"\x00\x00\x00\x02ab")

    def test_send_frame(self):
        proto = Recorder()
        transport = connected(proto)
        proto.send_frame(b"hello")
        self.assertEqual(transport.value(), b"\x00\x00\x00\x05hello")
        self.assertRaises(FrameTooLargeError, proto.send_frame, b"x" * 2000)

    def test_oversize_closes_with_log(self):
        """A frame announced over the limit closes the connection before any of it is buffered."""
        proto = Recorder(max_frame_size=100)
        transport = connected(proto)
        with self.assertLogs_() as events:
            proto.dataReceived(encode_frame(b"ok") + struct.pack(">I", 101) + b"x" * 10)
        self.assertEqual(proto.frames, [b"ok"])
        self.assertTrue(transport.disconnecting)
        self.assertTrue(any("exceeds the limit" in e for e in events))
        proto.dataReceived(encode_frame(b"after"))
        self.assertEqual(proto.frames, [b"ok"])

    def test_handler_error_closes(self):
        """An exception in the handler is logged and closes the connection, not raised."""
        proto = Recorder(explode_on=b"bad")
        transport = connected(proto)
        proto.dataReceived(encode_frame(b"bad") + encode_frame(b"next"))
        self.assertTrue(transport.disconnecting)
        self.assertEqual(proto.frames, [])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def assertLogs_(self):
        return formatted_log_events()


class RequestTableTests(unittest.SynchronousTestCase):

    def test_resolve_in_any_order(self):
        table = RequestTable()
        requests = [table.new() for _ in range(3)]
        self.assertEqual([r[0] for r in requests], [1, 2, 3])
        self.assertTrue(table.resolve(3, "c"))
        self.assertTrue(table.resolve(1, "a"))
        self.assertFalse(table.resolve(1, "again"))
        self.assertEqual(self.successResultOf(requests[0][1]), "a")
        self.assertEqual(self.successResultOf(requests[2][1]), "c")
        self.assertNoResult(requests[1][1])
        self.assertEqual(len(table), 1)

    def test_fail_all(self):
        """Every waiting request, and every later one, fails with the one reason."""
        table = RequestTable()
        ds = [table.new()[1] for _ in range(3)]
        table.fail_all(ConnectionError("gone"))
        for d in ds:
            self.failureResultOf(d, ConnectionError)
        self.failureResultOf(table.new()[1], ConnectionError)
        self.assertEqual(len(table), 0)

    def test_deadline(self):
        """A request with a timeout fails on the clock with the table's error; a late answer is
        refused and other requests are untouched."""
        clock = task.Clock()
        table = RequestTable(clock, lambda rid, t: TimeoutError(f"{rid} after {t}"))
        request_id, d = table.new(timeout=5)
        _, untimed = table.new()
        clock.advance(4.9)
        self.assertNoResult(d)
        clock.advance(0.1)
        self.assertEqual(str(self.failureResultOf(d, TimeoutError).value), "1 after 5")
        self.assertFalse(table.resolve(request_id, "late"))
        self.assertNoResult(untimed)
        self.assertEqual(len(table), 1)

    def test_default_timeout_error(self):
        clock = task.Clock()
        table = RequestTable(clock)
        d = table.wait(table.next_id(), 1)
        clock.advance(1)
        self.failureResultOf(d, RequestTimeoutError)

    def test_answer_cancels_deadline(self):
        """An answered request leaves no timer behind."""
        clock = task.Clock()
        table = RequestTable(clock)
        request_id, d = table.new(timeout=5)
        table.resolve(request_id, "ok")
        self.assertEqual(self.successResultOf(d), "ok")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_fail_all_cancels_deadlines(self):
        clock = task.Clock()
        table = RequestTable(clock)
        d = table.new(timeout=5)[1]
        table.fail_all(ConnectionError("gone"))
        self.failureResultOf(d, ConnectionError)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_cancel_forgets_request(self):
        """Cancelling a waiting Deferred removes the request and its timer."""
        clock = task.Clock()
        table = RequestTable(clock)
        request_id, d = table.new(timeout=5)
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        self.assertNotIn(request_id, table)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertFalse(table.resolve(request_id, "late"))

    def test_reserved_ids_are_not_waiting(self):
        """next_id reserves an id without a request; wait then registers it."""
        table = RequestTable()
        request_id = table.next_id()
        self.assertNotIn(request_id, table)
        d = table.wait(request_id)
        self.assertIn(request_id, table)
        self.assertEqual(table.next_id(), request_id + 1)
        table.resolve(request_id, "x")
        self.assertEqual(self.successResultOf(d), "x")


class KeepAliveTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.pings = []
        self.timeouts = []
        self.can_ping = True
        self.keep_alive = KeepAlive(self.clock, 30, self.ping, self.timeouts.append)
        self.keep_alive.start()

    def ping(self):
        if self.can_ping:
            self.pings.append(self.clock.seconds())
        return self.can_ping

    def test_idle_ping_then_timeout(self):
        """Idle for an interval: PING; still silent one interval later: given up, timer ends."""
        self.clock.advance(30)
        self.assertEqual(self.pings, [30])
        self.clock.advance(30)
        self.assertEqual(self.timeouts, [60])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_any_input_answers(self):
        """Input after the PING (a PONG or any command) keeps the connection."""
        for _ in range(3):
            self.clock.advance(30)
            self.keep_alive.received()
        self.assertEqual(self.pings, [30, 60, 90])
        self.assertEqual(self.timeouts, [])

    def test_busy_connection_not_pinged(self):
        """Input within the interval: no PING at all."""
        for _ in range(4):
            self.clock.advance(15)
            self.keep_alive.received()
        self.assertEqual(self.pings, [])

    def test_pong_read_after_a_stall_keeps_the_connection(self):
        """The process was stopped after the PING (the check runs 40 s late): the PONG that came
        meanwhile is still unread, so the check waits STALL_GRACE for the reactor to read it
        instead of closing a live connection; once, after which it decides."""
        self.clock.advance(30)
        self.assertEqual(self.pings, [30])
        self.clock.advance(70)                    # due at 60, runs at 100
        self.assertEqual(self.timeouts, [])
        self.keep_alive.received()                # the reactor reads the PONG
        self.clock.advance(STALL_GRACE)
        self.assertEqual(self.timeouts, [])
        self.clock.advance(30)
        self.assertEqual(self.pings, [30, 130.2])
        self.clock.advance(70)                    # stalled again, and nothing in the socket
        self.assertEqual(self.timeouts, [])
        self.clock.advance(STALL_GRACE)
        self.assertEqual(len(self.timeouts), 1)

    def test_no_ping_before_ready(self):
        """send_ping refusing (handshake not done) is not a PING waiting for its answer."""
        self.can_ping = False
        self.clock.advance(90)
        self.assertEqual((self.pings, self.timeouts), ([], []))

    def test_stop(self):
        self.keep_alive.stop()
        self.clock.advance(90)
        self.assertEqual((self.pings, self.timeouts), ([], []))

    def test_disabled(self):
        """An interval of 0 schedules nothing."""
        clock = task.Clock()
        KeepAlive(clock, 0, self.ping, self.timeouts.append).start()
        self.assertEqual(clock.getDelayedCalls(), [])
