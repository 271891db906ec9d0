"""
Hostile HTTP input (issue 12, items 1, 2 and 6): each case is refused with a 4xx and Pulsar's
``{"reason": ...}``, leaves the state as it was, and bodies are judged from their headers, before
they are read. Unit cases drive the site's channel over a StringTransport; the attack-while-serving
case uses real sockets on the real reactor (tests/web/support.py).
"""

import base64
import json
import time

from twisted.internet import defer, protocol, reactor
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.security import jwt
from pulsar_twisted.security.http import REQUEST_SIZE_HEADROOM, max_request_size
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.web.site import make_site
from tests.web.support import WebTestCase, settle

SECRET = b"z" * 32
AUTH = dict(authenticationEnabled=True, authorizationEnabled=True, superUserRoles=["admin"],
            authenticationProviders=["token"],
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode())
SCHEMA = "/admin/v2/schemas/public/default/t/schema"


def token(role) -> bytes:
    return jwt.encode({"sub": role}, SECRET).encode()


def bearer(role):
    return {b"Authorization": [b"Bearer " + token(role)]}


class ChannelCase(unittest.TestCase):
    """The site's channels over StringTransports, on the harness's clock."""

    config = dict(AUTH, maxMessageSize=64 * 1024)

    def setUp(self):
        self.harness = BrokerHarness(**self.config)
        self.harness.clock.advance(1000)
        self.successResultOf(self.harness.start())
        admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                             self.harness.clock)
        self.site = make_site(admin, self.harness.broker, self.harness.config)
        self.site.reactor = self.harness.clock   # the channels' idle timeouts on the test clock
        self.channels = []
        self.limit = max_request_size(self.harness.config)

    def channel(self):
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5555))
        channel.makeConnection(transport)
        self.channels.append(channel)
        self.addCleanup(channel.connectionLost, None)
        return channel, transport

    def send_headers(self, channel, headers, method=b"POST", path=SCHEMA.encode()):
        lines = [method + b" " + path + b" HTTP/1.1", b"Host: x"] + headers
        channel.dataReceived(b"\r\n".join(lines) + b"\r\n\r\n")

    def answer(self, transport):
        head, _, body = transport.value().partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), json.loads(body)


class HeaderTimeTests(ChannelCase):
    """GuardedHTTPChannel: refusals written before any body byte is read."""

    def test_limit_from_config(self):
        """httpMaxRequestSize -1 (Pulsar's default): maxMessageSize + headroom; a positive value wins."""
        self.assertEqual(self.limit, 64 * 1024 + REQUEST_SIZE_HEADROOM)
        self.assertEqual(max_request_size(type("C", (), dict(httpMaxRequestSize=10,
                                                             maxMessageSize=5))()), 10)

    def test_oversized_content_length_refused_unread(self):
        """A 100 MB Content-Length, even with valid credentials: 413 at once, nothing spooled,
        the connection closing and what follows ignored."""
        channel, transport = self.channel()
        self.send_headers(channel, [b"Content-Length: 100000000", b"Authorization: Bearer " + token("admin")])
        status, body = self.answer(transport)
        self.assertEqual(status, 413)
        self.assertIn("exceeds the limit", body["reason"])
        self.assertIsNone(channel.requests[-1].content)   # never given a (temporary) file
        self.assertTrue(transport.disconnecting)
        transport.clear()
        channel.dataReceived(b"x" * 100000)
        self.assertEqual(transport.value(), b"")

    def test_unauthenticated_body_refused_unread(self):
        """A body without credentials (or with forged ones) under the size limit: 401 from the
        headers, before the body is read."""
        forged = jwt.encode({"sub": "admin"}, b"q" * 32).encode()
        for extra in ([], [b"Authorization: Bearer " + forged]):
            channel, transport = self.channel()
            self.send_headers(channel, [b"Content-Length: 50000"] + extra)
            status, body = self.answer(transport)
            self.assertEqual(status, 401)
            self.assertTrue(body["reason"])
            self.assertIn(b"WWW-Authenticate", transport.value())
            self.assertIsNone(channel.requests[-1].content)
            self.assertTrue(transport.disconnecting)

    def test_chunked_body_bounded(self):
        """A chunked body is counted: past the limit 413 and the connection closes, having held
        at most the limit."""
        channel, transport = self.channel()
        self.send_headers(channel, [b"Transfer-Encoding: chunked",
                                    b"Authorization: Bearer " + token("admin")])
        self.assertEqual(transport.value(), b"")
        chunk = b"x" * 65536
        for _ in range(self.limit // len(chunk) + 2):
            channel.dataReceived(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        status, body = self.answer(transport)
        self.assertEqual(status, 413)
        self.assertTrue(transport.disconnecting)
        content = channel.requests[-1].content
        content.seek(0, 2)
        self.assertLessEqual(content.tell(), self.limit)

    def test_authenticated_body_within_limit_served(self):
        """The guard lets a normal authenticated request through (and reuses its identity)."""
        channel, transport = self.channel()
        body = json.dumps({"type": "STRING", "schema": "", "properties": {}}).encode()
        self.send_headers(channel, [b"Content-Length: %d" % len(body),
                                    b"Authorization: Bearer " + token("admin"),
                                    b"Content-Type: application/json"])
        channel.dataReceived(body)
        self.harness.pump()
        self.assertIn(b"HTTP/1.1 200", transport.value())
        self.assertFalse(transport.disconnecting)


class ConfiguredLimitTests(ChannelCase):
    config = dict(AUTH, httpMaxRequestSize=1000)

    def test_http_max_request_size_honoured(self):
        """httpMaxRequestSize=1000: 1001 announced bytes are refused (413), 1000 are read."""
        channel, transport = self.channel()
        self.send_headers(channel, [b"Content-Length: 1001", b"Authorization: Bearer " + token("admin")])
        self.assertEqual(self.answer(transport)[0], 413)
        channel, transport = self.channel()
        self.send_headers(channel, [b"Content-Length: 1000", b"Authorization: Bearer " + token("admin")])
        self.assertEqual(transport.value(), b"")
        self.assertFalse(transport.disconnecting)


class _SlowAuthentication:
    """An authentication service whose checks finish when the test says (a password being
    hashed off the reactor thread)."""

    enabled = True

    def __init__(self):
        self.checks = []

    def authenticate_http_deferred(self, authorization, certificate, peer, method_name=None):
        self.checks.append(defer.Deferred())
        return self.checks[-1]


class AsynchronousCheckTests(ChannelCase):
    """A credential check still running at header time: the body is not read until it ends."""

    def slow_channel(self):
        channel, transport = self.channel()
        channel.authn = _SlowAuthentication()
        return channel, transport

    def test_refused_after_pause(self):
        """Reading pauses until the check fails, then 401 and the connection closes."""
        from pulsar_twisted.common.errors import AuthenticationError
        channel, transport = self.slow_channel()
        self.send_headers(channel, [b"Content-Length: 50000", b"Authorization: Basic eDp5"])
        self.assertEqual(transport.producerState, "paused")
        self.assertEqual(transport.value(), b"")
        [check] = channel.authn.checks
        check.errback(AuthenticationError("Unknown user or wrong password"))
        status, body = self.answer(transport)
        self.assertEqual((status, body["reason"]), (401, "Unknown user or wrong password"))
        self.assertTrue(transport.disconnecting)

    def test_accepted_after_pause(self):
        """When the check succeeds reading resumes and the request is served with that identity,
        without a second check."""
        from pulsar_twisted.security.auth import Identity
        channel, transport = self.slow_channel()
        body = json.dumps({"type": "STRING", "schema": "", "properties": {}}).encode()
        self.send_headers(channel, [b"Content-Length: %d" % len(body), b"Authorization: Basic eDp5",
                                    b"Content-Type: application/json"])
        [check] = channel.authn.checks
        check.callback(Identity("admin", "basic"))
        self.assertEqual(transport.producerState, "producing")
        channel.dataReceived(body)
        self.harness.pump()
        self.assertIn(b"HTTP/1.1 200", transport.value())
        self.assertEqual(len(channel.authn.checks), 1)


class HostileAdminTests(WebTestCase):
    """Malformed and unauthorized admin requests over real sockets: 4xx with a reason, state kept."""

    config = AUTH

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.expect("PUT", "/admin/v2/persistent/public/default/t", 204, headers=bearer("admin"))
        yield self.expect("POST", SCHEMA, 200, {"type": "STRING", "schema": "", "properties": {}},
                          headers=bearer("admin"))
        yield self.expect("POST", "/admin/v2/namespaces/public/default/messageTTL", 204, 60,
                          headers=bearer("admin"))

    @defer.inlineCallbacks
    def ttl(self):
        value = yield self.expect("GET", "/admin/v2/namespaces/public/default/messageTTL", 200,
                                  headers=bearer("admin"))
        return value

    @defer.inlineCallbacks
    def test_unauthorized_schema_writes_change_nothing(self):
        """bob's DELETE and POST of public's schema: 403, the schema still version 0."""
        yield self.expect("DELETE", SCHEMA, 403, headers=bearer("bob"))
        yield self.expect("POST", SCHEMA, 403, {"type": "JSON", "schema": "{}"}, headers=bearer("bob"))
        found = yield self.expect("GET", SCHEMA, 200, headers=bearer("admin"))
        self.assertEqual((found["type"], found["version"]), ("STRING", 0))

    @defer.inlineCallbacks
    def test_malformed_bodies_are_400(self):
        """Deep nesting, huge numbers, NaN, overflowing floats, invalid UTF-8, wrong JSON types:
        4xx with a reason, and the policy unchanged."""
        path = "/admin/v2/namespaces/public/default/messageTTL"
        bodies = [b"[" * 100000 + b"]" * 100000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
                  b"9" * 5000, b"18446744073709551616", b"1e999", b"NaN", b"\xff\xfe",
                  b'{"x": 1}', b"[1, 2]", b'"sixty"', b"true"]
        wrong = []
        for raw in bodies:
            status, content, _ = yield self.request("POST", path, raw=raw, headers=bearer("admin"))
            if not (400 <= status < 500 and isinstance(content, dict) and content.get("reason")):
                wrong.append((raw[:20], status, content))
        self.assertEqual(wrong, [])
        self.assertEqual((yield self.ttl()), 60)

    @defer.inlineCallbacks
    def test_deep_json_on_every_body_route(self):
        """A 100,000-deep array on document routes (partitions, subscriptions, permissions,
        schemas, tenants): 400 with a reason."""
        deep = b"[" * 100000 + b"]" * 100000
        paths = [("PUT", "/admin/v2/persistent/public/default/p/partitions"),
                 ("PUT", "/admin/v2/persistent/public/default/t/subscription/s"),
                 ("POST", "/admin/v2/persistent/public/default/t/permissions/r"),
                 ("POST", SCHEMA), ("PUT", "/admin/v2/tenants/evil")]
        for method, path in paths:
            status, content, _ = yield self.request(method, path, raw=deep, headers=bearer("admin"))
            self.assertEqual((path, status), (path, 400))
            self.assertIn("nested deeper", content["reason"])
        yield self.expect("GET", "/admin/v2/tenants/evil", 404, headers=bearer("admin"))

    @defer.inlineCallbacks
    def test_junk_in_paths_is_4xx(self):
        """NUL bytes, invalid UTF-8, broken percent-encoding and raw non-ASCII in an admin path:
        4xx with a reason, nothing created."""
        paths = ["/admin/v2/persistent/public/default/a%00b", "/admin/v2/persistent/public/default/%FF",
                 "/admin/v2/persistent/public/default/%C3%28", "/admin/v2/tenants/%00",
                 "/admin/v2/persistent/public/default/%zz", "/admin/v2/namespaces/public/%ED%A0%80"]
        wrong = []
        for path in paths:
            status, content, _ = yield self.request("PUT", path, headers=bearer("admin"))
            if not (400 <= status < 500 and content.get("reason")):
                wrong.append((path, status, content))
        self.assertEqual(wrong, [])
        topics = yield self.expect("GET", "/admin/v2/persistent/public/default", 200, headers=bearer("admin"))
        self.assertEqual(topics, ["persistent://public/default/t"])

    @defer.inlineCallbacks
    def test_metrics_public_by_default(self):
        """authenticateMetricsEndpoint=false (Pulsar's default): /metrics answers anyone."""
        status, _, _ = yield self.request("GET", "/metrics")
        self.assertEqual(status, 200)


class MetricsClosedTests(WebTestCase):
    config = dict(AUTH, authenticateMetricsEndpoint=True)

    @defer.inlineCallbacks
    def test_metrics_hide_topics_from_bob(self):
        """With authenticateMetricsEndpoint, bob gets 403 and no topic name; admin the metrics."""
        yield self.expect("PUT", "/admin/v2/persistent/public/default/secret-topic", 204,
                          headers=bearer("admin"))
        yield self.expect("GET", "/admin/v2/persistent/public/default/secret-topic/stats", 200,
                          headers=bearer("admin"))   # loaded, so /metrics lists it
        status, content, _ = yield self.request("GET", "/metrics", headers=bearer("bob"))
        self.assertEqual(status, 403)
        self.assertNotIn("secret-topic", json.dumps(content))
        status, content, _ = yield self.request("GET", "/metrics", headers=bearer("admin"))
        self.assertEqual(status, 200)
        self.assertIn(b"secret-topic", content)


class _Attacker(protocol.Protocol):
    """Announces a 100 MB body and starts sending it; records what the server answers."""

    def __init__(self, done):
        self.done = done
        self.data = b""

    def connectionMade(self):
        self.transport.write(b"POST /admin/v2/tenants/x HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Length: 100000000\r\n\r\n" + b"y" * 65536)

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason):
        self.done.callback(self.data)


class AttackWhileServingTests(WebTestCase):
    config = AUTH

    @defer.inlineCallbacks
    def test_healthy_client_served_during_body_attack(self):
        """20 connections announcing 100 MB bodies are each refused (413) and closed, while a
        healthy client's request is answered within a second."""
        finished = []
        for _ in range(20):
            done = defer.Deferred()
            finished.append(done)
            protocol.ClientCreator(reactor, _Attacker, done).connectTCP("127.0.0.1", self.port.getHost().port)
        started = time.monotonic()
        status, _, _ = yield self.request("GET", "/admin/v2/clusters", headers=bearer("alice"))
        elapsed = time.monotonic() - started
        self.assertEqual(status, 200)
        self.assertLess(elapsed, 1.0)
        answers = yield defer.gatherResults(finished)
        self.assertEqual({a.split(b" ")[1] for a in answers}, {b"413"})
        yield settle()


class SlowClientTests(ChannelCase):
    """Connections that hold the web port without finishing a request are closed: headers must be
    complete within HEADER_DEADLINE of their first byte (408), and a silent connection goes after
    IDLE_TIMEOUT (Jetty's idle timeout). A slow body after complete headers is not cut by either."""

    config = dict(maxMessageSize=64 * 1024)

    def test_trickled_headers_closed_with_408(self):
        from pulsar_twisted.security.http import HEADER_DEADLINE
        channel, transport = self.channel()
        for _ in range(int(HEADER_DEADLINE)):
            channel.dataReceived(b"G")          # one byte a second keeps the idle timer quiet
            self.harness.clock.advance(1)
        self.harness.clock.advance(1)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 408 "), transport.value()[:60])
        self.assertTrue(transport.disconnecting)

    def test_silent_connection_closed_after_idle_timeout(self):
        from pulsar_twisted.security.http import IDLE_TIMEOUT
        channel, transport = self.channel()
        self.harness.clock.advance(IDLE_TIMEOUT - 1)
        self.assertFalse(transport.disconnecting)
        self.harness.clock.advance(2)
        self.assertTrue(transport.disconnecting)

    def test_complete_request_then_slow_body_not_cut_by_header_deadline(self):
        from pulsar_twisted.security.http import HEADER_DEADLINE
        channel, transport = self.channel()
        self.send_headers(channel, [b"Content-Type: application/json", b"Content-Length: 40"],
                          method=b"PUT", path=b"/admin/v2/tenants/slow")
        for _ in range(int(HEADER_DEADLINE) + 5):
            channel.dataReceived(b" ")
            self.harness.clock.advance(1)
        self.assertFalse(transport.value().startswith(b"HTTP/1.1 408"))
        self.assertFalse(transport.disconnecting)

    def test_keep_alive_requests_each_get_their_own_deadline(self):
        channel, transport = self.channel()
        for _ in range(3):
            channel.dataReceived(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
            self.harness.clock.advance(5)
        self.assertNotIn(b" 408 ", transport.value())
        self.assertEqual(transport.value().count(b"HTTP/1.1 200"), 3, transport.value()[:300])
