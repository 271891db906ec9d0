"""net.handback: writes kept during a storage hand-back go out, in order, when it ends."""

from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.test.proto_helpers import StringTransport
from twisted.trial import unittest

from pulsar_twisted.net import handback
from pulsar_twisted.net.handback import CoalescingWriter


class StringTransportTests(unittest.SynchronousTestCase):
    def test_outside_a_hand_back_writes_at_once(self):
        t = StringTransport()
        CoalescingWriter(t).write(b"abc")
        self.assertEqual(t.value(), b"abc")

    def test_inside_kept_then_written_in_order(self):
        """Inside a (nested) hand-back nothing is written; at the outermost end each writer's
        bytes go out in order (a non-TCP transport through its ``write``)."""
        a, b = StringTransport(), StringTransport()
        wa, wb = CoalescingWriter(a), CoalescingWriter(b)
        handback.begin()
        wa.write(b"1")
        handback.begin()
        wb.write(b"x")
        wa.write(b"2")
        handback.end()
        self.assertEqual((a.value(), b.value()), (b"", b""))
        handback.end()
        self.assertEqual((a.value(), b.value()), (b"12", b"x"))
        wa.write(b"3")
        self.assertEqual(a.value(), b"123")


class _Collect(protocol.Protocol):
    def connectionMade(self):
        self.factory.connected.callback(self)
        self.received = b""

    def dataReceived(self, data):
        self.received += data
        if len(self.received) >= self.factory.expect:
            self.factory.done.callback(self.received)


class TcpTests(unittest.TestCase):
    """Over a real TCP connection on 127.0.0.1 (the direct send path)."""

    timeout = 20

    @defer.inlineCallbacks
    def connect(self, expect):
        server_factory = protocol.Factory.forProtocol(protocol.Protocol)
        server_factory.connected = []
        built = server_factory.buildProtocol

        def build(addr):
            p = built(addr)
            server_factory.connected.append(p)
            return p
        server_factory.buildProtocol = build
        port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server_factory)
        self.addCleanup(port.stopListening)
        client_factory = protocol.Factory.forProtocol(_Collect)
        client_factory.connected, client_factory.done = defer.Deferred(), defer.Deferred()
        client_factory.expect = expect
        client = yield TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port).connect(client_factory)
        self.addCleanup(client.transport.loseConnection)
        while not server_factory.connected:
            yield defer.Deferred().addTimeout(0.01, reactor).addErrback(lambda _: None)
        server = server_factory.connected[0]
        self.addCleanup(server.transport.loseConnection)
        defer.returnValue((server.transport, client_factory.done))

    @defer.inlineCallbacks
    def test_sent_at_end_without_queueing_in_twisted(self):
        """At the end of the hand-back the bytes are sent directly: Twisted's buffer stays empty."""
        transport, done = yield self.connect(6)
        w = CoalescingWriter(transport)
        handback.begin()
        w.write(b"abc")
        w.write(b"def")
        handback.end()
        self.assertEqual((transport._tempDataLen, len(transport.dataBuffer) - transport.offset), (0, 0))
        self.assertEqual((yield done), b"abcdef")

    @defer.inlineCallbacks
    def test_after_queued_bytes_order_kept(self):
        """Bytes already queued in Twisted go first: the writer then queues behind them."""
        transport, done = yield self.connect(8)
        transport.write(b"queued")
        w = CoalescingWriter(transport)
        handback.begin()
        w.write(b"!!")
        handback.end()
        self.assertEqual((yield done), b"queued!!")

    @defer.inlineCallbacks
    def test_large_write_partly_sent_rest_queued(self):
        """More than one send takes: what is left is queued and still arrives, in order."""
        size = 8 * 1024 * 1024
        transport, done = yield self.connect(size)
        w = CoalescingWriter(transport)
        data = bytes(range(256)) * (size // 256)
        handback.begin()
        w.write(data)
        handback.end()
        self.assertEqual((yield done), data)


class PrivateAttributesGoneTests(unittest.TestCase):
    """Without Twisted's private buffer attributes the fast path is off: bytes go through
    transport.write, none is lost."""

    def test_falls_back_to_write(self):
        from twisted.internet import tcp

        from pulsar_twisted.net import handback
        written = []
        transport = tcp.Server.__new__(tcp.Server)     # no instance attributes (_tempDataLen...)
        transport.connected = 1
        transport.write = written.append
        transport.writeSomeData = lambda data: self.fail("fast path taken")
        writer = handback.CoalescingWriter(transport)
        handback.begin()
        writer.write(b"a")
        writer.write(b"b")
        handback.end()
        self.assertEqual(written, [b"ab"])
