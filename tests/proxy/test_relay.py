"""The relay's backpressure (relay.splice): a full write buffer on one side pauses reading from
the other, on StringTransports and through real loopback sockets."""

from twisted.internet import defer, protocol, reactor
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pulsar_twisted.proxy.relay import PauseOther, next_frame, splice
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from pulsar_twisted.wire.frames import FrameError

T = api.BaseCommand


class SpliceTests(unittest.TestCase):
    def test_full_client_buffer_pauses_the_broker(self):
        """The client's transport pauses its producer: reading from the broker stops, and
        resumes when the client's buffer drains."""
        client, broker = StringTransport(), StringTransport()
        splice(client, broker)
        self.assertTrue(client.streaming and broker.streaming)
        client.producer.pauseProducing()
        self.assertEqual((broker.producerState, client.producerState), ("paused", "producing"))
        client.producer.resumeProducing()
        self.assertEqual(broker.producerState, "producing")

    def test_full_broker_buffer_pauses_the_client(self):
        client, broker = StringTransport(), StringTransport()
        splice(client, broker)
        broker.producer.pauseProducing()
        broker.producer.pauseProducing()      # repeated pauses count once
        self.assertEqual(client.producerState, "paused")
        broker.producer.resumeProducing()
        self.assertEqual(client.producerState, "producing")

    def test_stop_producing_closes_the_other_side(self):
        """One side's transport gone (Twisted stops the producer registered on it): the other
        side is closed, its own producer unregistered (see SplicedCloseTests)."""
        client, broker = StringTransport(), StringTransport()
        to_client, _ = splice(client, broker)
        to_client.stopProducing()
        self.assertTrue(broker.disconnecting)
        self.assertIsNone(broker.producer)


class NextFrameTests(unittest.TestCase):
    def test_frames_one_at_a_time(self):
        ping = frames.encode_command(T(type=T.PING, ping=api.CommandPing()))
        buffer = bytearray(ping + ping[:3])
        command, message, size = next_frame(buffer, 1000)
        self.assertEqual((command.type, message, size), (T.PING, None, len(ping)))
        del buffer[:size]
        self.assertIsNone(next_frame(buffer, 1000))

    def test_oversized_frame(self):
        self.assertRaises(FrameError, next_frame, bytearray(b"\x7f\x00\x00\x00"), 1000)


class _Sink(protocol.Protocol):
    """A peer that reads only when told (``reading``), recording what it got."""

    def __init__(self):
        self.received = bytearray()
        self.connected_d = defer.Deferred()

    def connectionMade(self):
        self.transport.pauseProducing()
        self.connected_d.callback(self)

    def dataReceived(self, data):
        self.received += data


class _Relay(protocol.Protocol):
    """One side of a loopback splice: bytes go to ``other``'s transport."""

    other = None

    def __init__(self, made):
        self.made = made

    def connectionMade(self):
        self.made.callback(self)

    def dataReceived(self, data):
        self.other.transport.write(data)


class LoopbackBackpressureTests(unittest.TestCase):
    """A fast sender, a spliced pair of real sockets, and a receiver that does not read: the
    relay stops reading from the sender instead of buffering everything."""

    @defer.inlineCallbacks
    def test_slow_receiver_pauses_the_sender(self):
        ports, relays = [], []
        for _ in range(2):
            made = defer.Deferred()
            factory = protocol.Factory.forProtocol(lambda made=made: _Relay(made))
            port = reactor.listenTCP(0, factory, interface="127.0.0.1")
            self.addCleanup(port.stopListening)
            ports.append(port)
            relays.append(made)
        sender = yield protocol.ClientCreator(reactor, _Sink).connectTCP(
            "127.0.0.1", ports[0].getHost().port)
        receiver = yield protocol.ClientCreator(reactor, _Sink).connectTCP(
            "127.0.0.1", ports[1].getHost().port)
        self.addCleanup(sender.transport.loseConnection)
        self.addCleanup(receiver.transport.loseConnection)
        from_sender = yield relays[0]
        to_receiver = yield relays[1]
        from_sender.other, to_receiver.other = to_receiver, from_sender
        to_sender, _ = splice(to_receiver.transport, from_sender.transport)
        chunk = b"x" * 65536
        for _ in range(400):                      # 25 MiB offered by the sender
            sender.transport.write(chunk)
        for _ in range(100):
            yield _later(0.01)
            if to_sender.paused:
                break
        self.assertTrue(to_sender.paused, "the receiver's full buffer did not pause the sender side")
        held = len(to_receiver.transport.dataBuffer) + sum(map(len, to_receiver.transport._tempDataBuffer))
        self.assertLess(held, 8 * 1024 * 1024)
        receiver.transport.resumeProducing()
        for _ in range(500):
            yield _later(0.01)
            if len(receiver.received) == 400 * 65536:
                break
        self.assertEqual(len(receiver.received), 400 * 65536)


def _later(seconds):
    d = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


class _Side(protocol.Protocol):
    """The proxy's end of one of the spliced connections (reads nothing itself: the test drives
    the splice's close paths by hand)."""

    def __init__(self, made):
        self.made = made

    def connectionMade(self):
        self.made.callback(self)

    def relayed(self, size):
        pass


class _Watched(_Sink):
    """A _Sink that knows when its connection is closed."""

    lost = False

    def connectionLost(self, reason):
        self.lost = True


class SplicedCloseTests(unittest.TestCase):
    """One side of a splice goes while the other's write buffer is full (its producer paused): the
    other side is still closed once its peer has read what was buffered. Twisted's loseConnection
    closes a transport whose streaming producer is paused only once the producer is unregistered;
    left registered, the drained buffer resumes it instead and the connection stays open, no
    longer read, for good: a client never told that its broker has gone, or a broker still holding
    the producers and consumers of a client that has gone (until its keep-alive gives up)."""

    @defer.inlineCallbacks
    def spliced(self):
        """(client, client_side, broker, broker_side, to_client, to_broker) over real sockets;
        the client and broker peers do not read until resumed."""
        peers, sides = [], []
        for _ in range(2):
            made = defer.Deferred()
            port = reactor.listenTCP(0, protocol.Factory.forProtocol(lambda made=made: _Side(made)),
                                     interface="127.0.0.1")
            self.addCleanup(port.stopListening)
            peer = yield protocol.ClientCreator(reactor, _Watched).connectTCP(
                "127.0.0.1", port.getHost().port)
            side = yield made
            self.addCleanup(peer.transport.abortConnection)
            self.addCleanup(side.transport.abortConnection)
            peers.append(peer)
            sides.append(side)
        to_client, to_broker = splice(sides[0].transport, sides[1].transport)
        return peers[0], sides[0], peers[1], sides[1], to_client, to_broker

    @defer.inlineCallbacks
    def closed_after_drain(self, peer):
        """Whether ``peer``'s connection is closed within 5 s once it reads again."""
        peer.transport.resumeProducing()
        for _ in range(500):
            yield _later(0.01)
            if peer.lost:
                break
        return peer.lost

    def fill(self, side, producer):
        for _ in range(400):                      # 25 MiB the peer does not read
            side.transport.write(b"x" * 65536)
            if producer.paused:
                break
        self.assertTrue(producer.paused, "the peer's full buffer did not pause the other side")

    @defer.inlineCallbacks
    def test_broker_gone_closes_a_slow_client(self):
        """BrokerRelay's connection lost while the client's buffer is full: the client is closed."""
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure
        from pulsar_twisted.proxy.pool import OnBehalf
        from pulsar_twisted.proxy.relay import BrokerRelay, RelayState
        client, client_side, broker, broker_side, to_client, _ = yield self.spliced()
        self.fill(client_side, to_client)
        relay = BrokerRelay(client_side, None, OnBehalf(), 21, 1 << 20)
        relay.state = RelayState.SPLICED
        relay.connectionLost(Failure(ConnectionLost("broker killed")))
        self.assertTrue((yield self.closed_after_drain(client)),
                        "the client's connection stayed open after the broker's was lost")

    @defer.inlineCallbacks
    def test_client_gone_closes_a_stalled_broker(self):
        """The client's connection lost while the broker's buffer is full (a stalled broker): the
        connection to the broker is closed once it reads again."""
        from pulsar_twisted.proxy.connection import ProxyConnection, ProxyState
        from tests.proxy.helpers import ProxyHarness
        client, client_side, broker, broker_side, _, to_broker = yield self.spliced()
        self.fill(broker_side, to_broker)
        harness = ProxyHarness()
        connection = ProxyConnection(harness.service, harness.clock)
        connection.state = ProxyState.RELAY
        connection.relay = broker_side
        connection.connectionLost(None)
        self.assertTrue((yield self.closed_after_drain(broker)),
                        "the broker's connection stayed open after the client's was lost")

    @defer.inlineCallbacks
    def test_stop_producing_closes_a_paused_side(self):
        """Twisted's own close path (a transport lost stops the producer registered on it)."""
        client, client_side, broker, broker_side, to_client, to_broker = yield self.spliced()
        self.fill(client_side, to_client)
        to_broker.stopProducing()
        self.assertTrue((yield self.closed_after_drain(client)))
