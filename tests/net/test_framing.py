"""Length-prefixed framing and the request table."""

import struct

from hypothesis import given, strategies as st
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pulsar_twisted.net.framing import (
    FramedProtocol, FrameTooLargeError, RequestTable, encode_frame)


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
        from contextlib import contextmanager
        from twisted.logger import formatEvent, globalLogPublisher

        @contextmanager
        def capture():
            events = []

            def observer(event):
                events.append(formatEvent(event))
            globalLogPublisher.addObserver(observer)
            try:
                yield events
            finally:
                globalLogPublisher.removeObserver(observer)
        return capture()


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
