"""
Hostile clients of the proxy (issue 12 items 2 and 3): a connection that does not complete CONNECT
within keepAliveIntervalSeconds is closed, as on the broker; client passwords (binary CONNECT and
HTTP Basic) are checked off the reactor thread, within the per-address and proxy-wide caps.

Everything runs on StringTransport and ``task.Clock``, except the two checks that a password is
hashed on a pool thread, which need the real reactor's thread pool (a bcrypt of 4 rounds, ms).
"""

import base64
import io
import threading

import bcrypt
from twisted.internet import defer, reactor
from twisted.internet.address import IPv4Address
from twisted.logger import capturedLogs
from twisted.trial import unittest
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proxy.connection import ProxyState
from pulsar_twisted.proxy.web import ProxyWebResource
from pulsar_twisted.security import auth
from pulsar_twisted.security.hashing import PasswordChecker
from pulsar_twisted.wire import frames
from tests.proxy.helpers import ProxyHarness
from tests.proxy.test_connection import AUTH, token
from tests.proxy.test_web import FakeAgent, _Response

T = api.BaseCommand
PASSWORD = b"s3cret"
#: The proxy with the basic provider (alice, bcrypt of 4 rounds) besides the token one of AUTH.
BASIC = dict(AUTH, authenticationProviders=["basic", "token"], basicAuthConf=base64.b64encode(
    b"alice:" + bcrypt.hashpw(PASSWORD, bcrypt.gensalt(4)) + b"\n").decode())


def basic_connect(client, password=PASSWORD, target=None):
    client.connect(target=target, method="basic", data=b"alice:" + password)


def closing_lines(events):
    return [e for e in events if "CONNECT not completed" in e.get("log_format", "")]


class ConnectDeadlineTests(unittest.TestCase):
    """keepAliveIntervalSeconds after accept, a client that has no CONNECTED yet is closed."""

    def test_silent_and_partial_frame_closed_at_the_deadline(self):
        harness = ProxyHarness(keepAliveIntervalSeconds=30)
        silent = harness.client("10.0.0.1")
        partial = harness.client("10.0.0.2")
        command = T(type=T.CONNECT, connect=api.CommandConnect(client_version="x", protocol_version=21))
        partial.protocol.dataReceived(frames.encode_command(command)[:7])
        with capturedLogs() as events:
            harness.clock.advance(29)
            self.assertFalse(silent.transport.disconnecting)
            self.assertFalse(partial.transport.disconnecting)
            harness.clock.advance(1)
        self.assertTrue(silent.transport.disconnected)
        self.assertTrue(partial.transport.disconnected)
        self.assertEqual(len(closing_lines(events)), 2)
        self.assertEqual(closing_lines(events)[0]["peer"], str(silent.transport.getPeer()))

    def test_completed_connect_cancels_the_deadline(self):
        harness = ProxyHarness(keepAliveIntervalSeconds=30)
        client = harness.client()
        harness.clock.advance(10)
        client.connect()
        self.assertEqual(client.protocol.state, ProxyState.LOOKUPS)
        self.assertFalse(client.protocol._deadline.active)
        with capturedLogs() as events:
            harness.clock.advance(25)   # past the deadline; pings keep the connection alive after
        self.assertEqual(closing_lines(events), [])
        self.assertFalse(client.transport.disconnecting)

    def test_relay_not_established_in_time_closed(self):
        """CONNECT with proxy_to_broker_url counts as done only once the broker answered."""
        harness = ProxyHarness(keepAliveIntervalSeconds=30)
        client = harness.client()
        client.connect(target="pulsar://b1:6650")
        self.assertEqual(client.protocol.state, ProxyState.CONNECTING)
        harness.clock.advance(30)
        self.assertTrue(client.transport.disconnected)

    def test_closed_connection_leaves_no_deadline(self):
        harness = ProxyHarness(keepAliveIntervalSeconds=30)
        client = harness.client()
        client.protocol.connectionLost(None)
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_no_deadline_with_keepalive_off(self):
        harness = ProxyHarness(keepAliveIntervalSeconds=0)
        silent = harness.client()
        harness.clock.advance(3600)
        self.assertFalse(silent.transport.disconnecting)


class HeldChecks:
    """``check_password`` replaced by checks that stay in flight until the test answers them."""

    def __init__(self, test):
        self.pending = []
        test.patch(auth, "check_password", self)

    def __call__(self, password, stored):
        d = defer.Deferred()
        self.pending.append(d)
        return d


class PasswordCapTests(unittest.TestCase):
    """The proxy's Basic checks go through a PasswordChecker: capped per address, then proxy-wide."""

    def setUp(self):
        self.harness = ProxyHarness(keepAliveIntervalSeconds=30, **BASIC)
        self.provider = self.harness.service.authn.providers["basic"]
        self.provider.checker = PasswordChecker(self.harness.clock, max_per_host=1, max_pending=2)
        self.held = HeldChecks(self)

    def test_per_address_cap_refuses_at_once(self):
        first = self.harness.client("10.0.0.1")
        basic_connect(first)
        second = self.harness.client("10.0.0.1")
        basic_connect(second)
        [error] = second.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthenticationError)
        self.assertIn("too many password checks in progress from this address", error.error.message)
        self.assertTrue(second.transport.disconnecting)
        self.assertEqual(len(self.held.pending), 1)     # the refused one cost no hashing
        other = self.harness.client("10.0.0.2")
        basic_connect(other)
        self.assertEqual(len(self.held.pending), 2)
        self.held.pending[0].callback(True)
        [connected] = first.commands(T.CONNECTED)
        self.assertEqual(first.protocol.state, ProxyState.LOOKUPS)
        self.assertEqual(first.protocol.identity.role, "alice")

    def test_proxy_wide_cap(self):
        for n in range(2):
            basic_connect(self.harness.client(f"10.0.1.{n}"))
        third = self.harness.client("10.0.1.9")
        basic_connect(third)
        [error] = third.commands(T.ERROR)
        self.assertIn("too many password checks in progress on this broker", error.error.message)

    def test_second_connect_while_checking_refused(self):
        client = self.harness.client("10.0.0.1")
        basic_connect(client)
        basic_connect(client)
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.NotAllowedError)
        self.assertEqual(len(self.held.pending), 1)

    def test_wrong_password_refused(self):
        client = self.harness.client("10.0.0.1")
        basic_connect(client, password=b"nope")
        self.held.pending[0].callback(False)
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthenticationError)
        self.assertTrue(client.transport.disconnecting)

    def test_auth_response_checked_through_the_caps(self):
        """Credentials a client sends in AUTH_RESPONSE (the refresh path) take the same road."""
        client = self.harness.client("10.0.0.1")
        basic_connect(client)
        self.held.pending[0].callback(True)
        client.send(T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
            response=api.AuthData(auth_method_name="basic", auth_data=b"alice:other"))))
        self.assertEqual(len(self.held.pending), 2)
        self.assertEqual(self.provider.checker.by_host["10.0.0.1"], 1)
        self.held.pending[1].callback(False)
        self.assertTrue(client.transport.disconnecting)

    def test_deadline_during_the_check(self):
        """A check still running at the deadline: closed then, nothing written when it ends."""
        client = self.harness.client("10.0.0.1")
        basic_connect(client)
        self.harness.clock.advance(30)
        self.assertTrue(client.transport.disconnected)
        client.protocol.connectionLost(None)
        client.commands()
        self.held.pending[0].callback(True)
        self.assertEqual(client.commands(), [])
        self.assertEqual(self.provider.checker.pending, 0)


class OffTheReactorTests(unittest.TestCase):
    """On the real reactor the bcrypt runs on a pool thread, never the reactor's."""

    def setUp(self):
        self.threads = []
        self.checks = []
        real = auth.check_password

        def recording(password, stored):
            self.threads.append(threading.current_thread())
            return real(password, stored)

        self.patch(auth, "check_password", recording)

    def threaded_checker(self, service):
        checker = PasswordChecker(reactor)
        self.addCleanup(checker.stop)
        check = checker.check

        def spy(host, function, *args):
            d = check(host, function, *args)
            self.checks.append((host, d))
            return d

        checker.check = spy
        service.authn.providers["basic"].checker = checker

    def assert_off_reactor(self, host):
        self.assertEqual([h for h, _ in self.checks], [host])
        [thread] = self.threads
        self.assertIsNot(thread, threading.main_thread())

    def test_binary_connect(self):
        harness = ProxyHarness(**BASIC)
        self.threaded_checker(harness.service)
        client = harness.client("10.0.0.7")
        basic_connect(client)
        self.assertEqual(client.commands(T.CONNECTED), [])    # not answered inline
        [(_, d)] = self.checks

        def answered(_):
            self.assert_off_reactor("10.0.0.7")
            [connected] = client.commands(T.CONNECTED)
            self.assertEqual(client.protocol.identity.role, "alice")

        return d.addCallback(answered)

    def test_web_basic(self):
        harness = ProxyHarness(brokerWebServiceURL="http://b1:8080", **BASIC)
        self.threaded_checker(harness.service)
        agent = FakeAgent({"http://b1:8080/admin/v2/tenants": _Response(200, b'["public"]')})
        resource = ProxyWebResource(harness.service, harness.clock, agent=agent)
        request = DummyRequest([b"admin", b"v2", b"tenants"])
        request.uri = request.path = b"/admin/v2/tenants"
        request.content = io.BytesIO(b"")
        request.client = IPv4Address("TCP", "10.0.0.8", 4444)
        request.requestHeaders.setRawHeaders(
            b"authorization", [b"Basic " + base64.b64encode(b"alice:" + PASSWORD)])
        resource.render(request)
        self.assertEqual(agent.requests, [])
        [(_, d)] = self.checks

        def answered(_):
            self.assert_off_reactor("10.0.0.8")
            self.assertEqual(b"".join(request.written), b'["public"]')
            [(_, _, headers)] = agent.requests
            self.assertEqual(headers.getRawHeaders(b"x-original-principal"), [b"alice"])

        return d.addCallback(answered)


class WebRefusalTests(unittest.TestCase):
    def test_web_basic_over_the_cap_is_401(self):
        harness = ProxyHarness(brokerWebServiceURL="http://b1:8080", **BASIC)
        harness.service.authn.providers["basic"].checker = PasswordChecker(harness.clock, max_per_host=1)
        HeldChecks(self)
        agent = FakeAgent({})
        resource = ProxyWebResource(harness.service, harness.clock, agent=agent)
        requests = []
        for _ in range(2):
            request = DummyRequest([b"admin"])
            request.uri = request.path = b"/admin"
            request.content = io.BytesIO(b"")
            request.client = IPv4Address("TCP", "10.0.0.9", 4444)
            request.requestHeaders.setRawHeaders(
                b"authorization", [b"Basic " + base64.b64encode(b"alice:" + PASSWORD)])
            resource.render(request)
            requests.append(request)
        self.assertEqual(requests[1].responseCode, 401)
        self.assertIn(b"too many password checks", b"".join(requests[1].written))
        self.assertEqual(agent.requests, [])

    def test_token_still_works(self):
        harness = ProxyHarness(brokerWebServiceURL="http://b1:8080", **BASIC)
        client = harness.client()
        client.connect(method="token", data=token("bob").encode())
        self.assertEqual(client.protocol.identity.role, "bob")


class HeaderTimeBodyTests(unittest.TestCase):
    """The proxy's web port judges a request body from its headers, as the broker's does
    (security/http.GuardedHTTPChannel): nothing is read, spooled or forwarded before."""

    def setUp(self):
        from pulsar_twisted.proxy.web import make_proxy_site
        self.harness = ProxyHarness(brokerWebServiceURL="http://b1:8080", **AUTH)
        self.agent = FakeAgent({})
        self.site = make_proxy_site(self.harness.service, self.harness.clock, agent=self.agent)
        self.site.reactor = self.harness.clock

    def send(self, headers):
        from twisted.internet.testing import StringTransport
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5555))
        channel.makeConnection(transport)
        self.addCleanup(channel.connectionLost, None)
        lines = [b"POST /admin/v2/tenants/acme HTTP/1.1", b"Host: x"] + headers
        channel.dataReceived(b"\r\n".join(lines) + b"\r\n\r\n")
        head, _, body = transport.value().partition(b"\r\n\r\n")
        return channel, transport, int(head.split(b" ")[1]), body

    def test_oversized_body_refused_from_its_headers(self):
        """A 100 MB Content-Length with valid credentials: 413 at once, no body file, nothing
        forwarded, the connection closing."""
        channel, transport, status, body = self.send(
            [b"Content-Length: 100000000", b"Authorization: Bearer " + token("alice").encode()])
        self.assertEqual(status, 413)
        self.assertIn(b"exceeds the limit", body)
        self.assertIsNone(channel.requests[-1].content)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.agent.requests, [])

    def test_unauthenticated_body_refused_unread(self):
        """A body without credentials: 401 from the headers, before it is read or forwarded."""
        channel, transport, status, _ = self.send([b"Content-Length: 50000"])
        self.assertEqual(status, 401)
        self.assertIsNone(channel.requests[-1].content)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.agent.requests, [])
