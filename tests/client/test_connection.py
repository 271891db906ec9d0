"""ClientConnection: handshake, request table, errors, keep-alive and dispatch."""

from twisted.internet import task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import errors
from pulsar_twisted.client.connection import CLIENT_VERSION, PROTOCOL_VERSION, ConnectionState, command
from pulsar_twisted.wire.frames import encode_command
from tests.client.helpers import FakeBroker, T


class HandshakeTests(SynchronousTestCase):
    def test_connect_sent_and_connected_fires(self):
        """CONNECT carries our version and protocol 21; CONNECTED makes the connection ready."""
        clock = task.Clock()
        broker = FakeBroker(clock, handshake=False)
        d = broker.cnx.when_connected()
        (connect,) = broker.commands()
        self.assertEqual(connect.type, T.CONNECT)
        self.assertEqual(connect.connect.protocol_version, PROTOCOL_VERSION)
        self.assertEqual(connect.connect.client_version, CLIENT_VERSION)
        self.assertNoResult(d)
        broker.feed(T(type=T.CONNECTED, connected=api.CommandConnected(
            server_version="x", protocol_version=21, max_message_size=1000)))
        self.assertIs(self.successResultOf(d), broker.cnx)
        self.assertEqual(broker.cnx.max_message_size, 1000)

    def test_states(self):
        """HANDSHAKE once CONNECT is written, READY on CONNECTED, CLOSED once lost."""
        broker = FakeBroker(task.Clock(), handshake=False)
        self.assertIs(broker.cnx.state, ConnectionState.HANDSHAKE)
        self.assertFalse(broker.cnx.is_ready)
        broker.feed(T(type=T.CONNECTED, connected=api.CommandConnected(
            server_version="x", protocol_version=21)))
        self.assertIs(broker.cnx.state, ConnectionState.READY)
        broker.lose()
        self.assertIs(broker.cnx.state, ConnectionState.CLOSED)
        self.failureResultOf(broker.cnx.when_connected(), errors.ConnectError)

    def test_handshake_error_fails_waiters(self):
        """An ERROR during the handshake (authentication) fails when_connected with its class."""
        broker = FakeBroker(task.Clock(), handshake=False)
        d = broker.cnx.when_connected()
        broker.feed(T(type=T.ERROR, error=api.CommandError(
            request_id=0, error=api.AuthenticationError, message="bad token")))
        self.assertTrue(broker.transport.disconnecting)
        broker.lose()
        failure = self.failureResultOf(d, errors.AuthenticationError)
        self.assertIn("bad token", str(failure.value))


class RequestTableTests(SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.broker = FakeBroker(self.clock, operation_timeout=5)
        self.broker.read()

    def request(self):
        cnx = self.broker.cnx
        request_id = cnx.new_request_id()
        return request_id, cnx.send_request(
            command(T.LOOKUP, "lookupTopic", topic="t", request_id=request_id), request_id)

    def test_answer_resolves_by_request_id(self):
        """Answers are matched to requests by request id, whatever their order."""
        id1, d1 = self.request()
        id2, d2 = self.request()
        self.broker.success(id2)
        self.assertNoResult(d1)
        self.assertEqual(self.successResultOf(d2).success.request_id, id2)
        self.broker.feed(T(type=T.ERROR, error=api.CommandError(
            request_id=id1, error=api.ProducerBusy, message="busy producer")))
        failure = self.failureResultOf(d1, errors.ProducerBusy)
        self.assertEqual(str(failure.value), "busy producer")

    def test_connection_lost_fails_all(self):
        """Every request in flight fails with ConnectError when the connection goes."""
        _, d1 = self.request()
        _, d2 = self.request()
        self.broker.lose()
        self.failureResultOf(d1, errors.ConnectError)
        self.failureResultOf(d2, errors.ConnectError)
        self.failureResultOf(self.request()[1], errors.ConnectError)

    def test_timeout(self):
        """A request unanswered for the operation timeout fails with Timeout."""
        request_id, d = self.request()
        self.clock.advance(4.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.failureResultOf(d, errors.Timeout)
        self.broker.success(request_id)  # a late answer is ignored

    def test_lookup_failure_maps_error(self):
        """A Failed lookup response fails the request with the broker's error class."""
        request_id, d = self.request()
        self.broker.feed(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=api.CommandLookupTopicResponse(
            request_id=request_id, response=api.CommandLookupTopicResponse.Failed,
            error=api.TopicNotFound, message="no such topic")))
        self.assertIn("no such topic", str(self.failureResultOf(d, errors.TopicNotFound).value))


class KeepAliveTests(SynchronousTestCase):
    def test_ping_answered(self):
        """The broker's PING gets a PONG."""
        broker = FakeBroker(task.Clock())
        broker.read()
        broker.feed(T(type=T.PING, ping=api.CommandPing()))
        self.assertEqual([c.type for c in broker.commands()], [T.PONG])

    def test_idle_ping_then_close(self):
        """Idle for the interval: we PING; still silent one interval later: we abort."""
        clock = task.Clock()
        broker = FakeBroker(clock, keep_alive_seconds=30)
        broker.read()
        clock.advance(30)
        self.assertEqual([c.type for c in broker.commands()], [T.PING])
        self.assertFalse(broker.transport.disconnecting)
        clock.advance(30)
        self.assertTrue(broker.transport.disconnecting)

    def test_pong_keeps_alive(self):
        """An answered ping keeps the connection open."""
        clock = task.Clock()
        broker = FakeBroker(clock, keep_alive_seconds=30)
        for _ in range(4):
            clock.advance(30)
            self.assertEqual([c.type for c in broker.commands()][-1:], [T.PING])
            broker.feed(T(type=T.PONG, pong=api.CommandPong()))
        self.assertFalse(broker.transport.disconnecting)


class DispatchTests(SynchronousTestCase):
    def test_close_producer_dispatched(self):
        """CLOSE_PRODUCER reaches the registered producer and unregisters it."""
        broker = FakeBroker(task.Clock())
        calls = []

        class Handler:
            def closed_by_broker(self):
                calls.append("closed")

            def connection_closed(self, cnx):
                calls.append("lost")

        broker.cnx.register_producer(7, Handler())
        broker.feed(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(
            producer_id=7, request_id=1)))
        broker.lose()
        self.assertEqual(calls, ["closed"])

    def test_server_error_classes(self):
        """Every ServerError code maps to a PulsarException subclass carrying the message."""
        for code in api.ServerError.values():
            exc = errors.from_server_error(code, "m")
            self.assertIsInstance(exc, errors.PulsarException)
            self.assertEqual(str(exc), "m")
        self.assertIsInstance(errors.from_server_error(api.NotAllowedError, "x"), errors.NotAllowed)


class PoolHandshakeBoundTests(SynchronousTestCase):
    def test_silent_broker_given_up_after_the_connect_timeout(self):
        """A broker that accepts the TCP connection but never answers CONNECT (stopped, hung)
        fails the pool's waiters with ConnectError after connect_timeout, and the next request
        dials again; without the bound they waited for as long as it stayed silent (the
        keep-alive starts only with CONNECTED)."""
        from twisted.internet import defer
        from twisted.internet.testing import StringTransportWithDisconnection
        from pulsar_twisted.client.pool import ConnectionPool
        clock = task.Clock()
        dialled = []

        def connector(address, cnx):
            transport = StringTransportWithDisconnection()
            transport.protocol = cnx
            cnx.makeConnection(transport)
            dialled.append(cnx)
            return defer.succeed(cnx)

        pool = ConnectionPool(clock, connect_timeout=5, connector=connector)
        d = pool.get_connection("b1:6650")
        clock.advance(4.9)
        self.assertNoResult(d)
        clock.advance(0.2)
        self.failureResultOf(d, errors.ConnectError)
        self.assertFalse(dialled[0].transport.connected)
        again = pool.get_connection("b1:6650")
        self.assertEqual(len(dialled), 2)
        dialled[1].dataReceived(encode_command(T(type=T.CONNECTED, connected=api.CommandConnected(
            server_version="x", protocol_version=21))))
        self.assertIs(self.successResultOf(again), dialled[1])
        clock.advance(10)
        self.assertTrue(dialled[1].is_ready)          # a handshake that finished is left alone
