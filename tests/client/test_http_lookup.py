"""
``http_lookup.HttpLookupService`` and ``http://`` / ``https://`` service URLs: requests, answers and
errors against an in-memory resource tree (treq's ``RequestTraversalAgent``, no sockets), the
operation timeout on a ``task.Clock``, and the default ``Agent`` against a real ``Site`` on
127.0.0.1 (plain and TLS). A ``Client`` on an ``http://`` URL then creates a producer through the
fake broker connection of the other client tests.
"""

import json

from twisted.internet import defer, reactor, task
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web import resource, server
from zope.interface.verify import verifyObject

from pulsar_twisted.client import errors
from pulsar_twisted.client.auth import AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from pulsar_twisted.client.client import Client
from pulsar_twisted.client.http_lookup import (
    HttpLookupService, authorization_header, error_for_status)
from pulsar_twisted.client.lookup import ILookupService, LookupService
from pulsar_twisted.client.pool import ServiceUrl, tls_options
from pulsar_twisted.proto import PulsarApi_pb2 as api

try:
    from treq.testing import RequestTraversalAgent
except ImportError:  # pragma: no cover - a test dependency
    RequestTraversalAgent = None

Mode = api.CommandGetTopicsOfNamespace


class CannedWeb(resource.Resource):
    """Answers GETs from ``routes``: uri (path?query) -> (status, body, headers); records requests."""

    isLeaf = True

    def __init__(self, routes=None):
        super().__init__()
        self.routes = dict(routes or {})
        self.requests = []     # (uri, headers dict)
        self.hold = False      # True: never answer (timeouts)

    def render_GET(self, request):
        self.requests.append((request.uri.decode(), {
            k.decode().lower(): v[0].decode()
            for k, v in request.requestHeaders.getAllRawHeaders()}))
        if self.hold:
            return server.NOT_DONE_YET
        status, body, headers = self.routes.get(
            request.uri.decode(), (404, {"reason": "no such route"}, {}))
        request.setResponseCode(status)
        for name, value in headers.items():
            request.setHeader(name, value)
        request.setHeader(b"content-type", b"application/json")
        return body if isinstance(body, bytes) else json.dumps(body).encode()


LOOKUP = "/lookup/v2/topic/persistent/public/default/t"
LOOKUP_ANSWER = {"brokerUrl": "pulsar://b1:6650", "brokerUrlTls": "pulsar+ssl://b1:6651",
                 "httpUrl": "http://b1:8080"}


class Base(SynchronousTestCase):
    if RequestTraversalAgent is None:
        skip = "needs treq (a test dependency)"

    def service(self, routes, url="http://web:8080", **kwargs):
        self.web = CannedWeb(routes)
        self.clock = task.Clock()
        self.agent = RequestTraversalAgent(self.web)
        return HttpLookupService(self.clock, ServiceUrl(url), agent=self.agent, **kwargs)

    def result(self, d):
        self.agent.flush()
        return self.successResultOf(d)

    def failure(self, d, *types):
        self.agent.flush()
        return self.failureResultOf(d, *types)


class ServiceUrlTests(SynchronousTestCase):
    def test_http_schemes(self):
        """http:// and https:// parse with Pulsar's web ports; https means TLS to brokers."""
        plain = ServiceUrl("http://a:8081,b")
        self.assertEqual((plain.http, plain.tls, plain.addresses), (True, False, ["a:8081", "b:8080"]))
        secure = ServiceUrl("https://h")
        self.assertEqual((secure.http, secure.tls, secure.addresses), (True, True, ["h:8443"]))
        self.assertEqual(ServiceUrl("pulsar://p").http, False)

    def test_http_base_round_robin(self):
        """http_base walks the hosts in turn; IPv6 hosts get brackets."""
        url = ServiceUrl("http://a:1,[::1]:2")
        self.assertEqual([url.http_base() for _ in range(3)],
                         ["http://a:1", "http://[::1]:2", "http://a:1"])

    def test_other_schemes_refused(self):
        """ftp:// is not a service URL."""
        self.assertRaises(errors.InvalidConfiguration, ServiceUrl, "ftp://h:1")


class LookupTests(Base):
    def test_interface(self):
        """Both lookup services provide ILookupService."""
        verifyObject(ILookupService, self.service({}))
        verifyObject(ILookupService, LookupService(None, ServiceUrl("pulsar://h")))

    def test_lookup(self):
        """The lookup path names domain/tenant/ns/topic; brokerUrl is the address on http://."""
        svc = self.service({LOOKUP: (200, LOOKUP_ANSWER, {})})
        self.assertEqual(self.result(svc.lookup("persistent://public/default/t")),
                         ("b1:6650", "b1:6650"))
        uri, headers = self.web.requests[0]
        self.assertEqual(uri, LOOKUP)
        self.assertEqual(headers["accept"], "application/json")
        self.assertNotIn("authorization", headers)

    def test_lookup_https_takes_tls_url(self):
        """On https:// the broker's brokerUrlTls is used (brokerUrl when it has none)."""
        svc = self.service({LOOKUP: (200, LOOKUP_ANSWER, {})}, url="https://web:8443")
        self.assertEqual(self.result(svc.lookup("persistent://public/default/t"))[0], "b1:6651")
        svc = self.service({LOOKUP: (200, dict(LOOKUP_ANSWER, brokerUrlTls=""), {})},
                           url="https://web:8443")
        self.assertEqual(self.result(svc.lookup("persistent://public/default/t"))[0], "b1:6650")

    def test_lookup_quotes_local_name_and_listener(self):
        """Odd characters of the local name are percent-encoded; listenerName is a query."""
        path = "/lookup/v2/topic/non-persistent/ten/ns/a%3Ab%20c?listenerName=internal"
        svc = self.service({path: (200, LOOKUP_ANSWER, {})}, listener_name="internal")
        self.result(svc.lookup("non-persistent://ten/ns/a:b c"))
        self.assertEqual(self.web.requests[0][0], path)

    def test_lookup_follows_redirects(self):
        """A 307 naming another broker is followed; endless ones stop at max_redirects."""
        svc = self.service({
            LOOKUP: (307, {}, {b"location": b"/lookup/v2/topic/persistent/public/default/t2"}),
            LOOKUP + "2": (200, LOOKUP_ANSWER, {})})
        self.assertEqual(self.result(svc.lookup("persistent://public/default/t"))[0], "b1:6650")
        loop = self.service({LOOKUP: (307, {}, {b"location": LOOKUP.encode()})}, max_redirects=3)
        self.failure(loop.lookup("persistent://public/default/t"), errors.TooManyLookupRedirects)
        self.assertEqual(len(self.web.requests), 4)

    def test_lookup_bad_answers(self):
        """No broker URL, or a body that is not JSON, is a LookupError with a log line."""
        svc = self.service({LOOKUP: (200, {"httpUrl": "x"}, {})})
        self.failure(svc.lookup("persistent://public/default/t"), errors.LookupError_)
        svc = self.service({LOOKUP: (200, b"<html>", {})})
        self.failure(svc.lookup("persistent://public/default/t"), errors.LookupError_)
        self.failureResultOf(svc.lookup("persistent://only-two/parts"), errors.InvalidTopicName)

    def test_authentication_headers(self):
        """Token -> Bearer, basic -> Basic base64(user:pass), TLS plugins send no header."""
        self.assertEqual(authorization_header(AuthenticationToken("tok")), b"Bearer tok")
        self.assertEqual(authorization_header(AuthenticationToken(lambda: "fresh")),
                         b"Bearer fresh")
        self.assertEqual(authorization_header(AuthenticationBasic("u", "p")), b"Basic dTpw")
        self.assertIsNone(authorization_header(AuthenticationTLS("c", "k")))
        self.assertIsNone(authorization_header(None))
        svc = self.service({LOOKUP: (200, LOOKUP_ANSWER, {})},
                           authentication=AuthenticationToken("secret"))
        self.result(svc.lookup("persistent://public/default/t"))
        self.assertEqual(self.web.requests[0][1]["authorization"], "Bearer secret")


class MetadataTests(Base):
    PARTS = "/admin/v2/persistent/public/default/t/partitions?checkAllowAutoCreation="

    def test_partitioned_metadata(self):
        """{"partitions": N} becomes N; auto_create travels as checkAllowAutoCreation."""
        svc = self.service({self.PARTS + "true": (200, {"partitions": 4}, {}),
                            self.PARTS + "false": (200, {"partitions": 0}, {})})
        self.assertEqual(self.result(svc.partitioned_metadata("persistent://public/default/t")), 4)
        self.assertEqual(self.result(svc.partitioned_metadata("persistent://public/default/t",
                                                              auto_create=False)), 0)

    def test_partitioned_metadata_bad_answer(self):
        """A missing or negative count is a LookupError."""
        for body in ({}, {"partitions": -1}, {"partitions": "3"}, [1]):
            svc = self.service({self.PARTS + "true": (200, body, {})})
            self.failure(svc.partitioned_metadata("persistent://public/default/t"),
                         errors.LookupError_)

    def test_topics_of_namespace(self):
        """The mode becomes ?mode=; the list comes back as the broker gave it."""
        topics = ["persistent://public/default/a", "persistent://public/default/b-partition-0"]
        base = "/admin/v2/namespaces/public/default/topics?mode="
        svc = self.service({base + "PERSISTENT": (200, topics, {}),
                            base + "ALL": (200, topics[:1], {})})
        self.assertEqual(self.result(svc.topics_of_namespace("public/default", Mode.PERSISTENT,
                                                             "persistent://public/default/.*")),
                         topics)
        self.assertEqual(self.result(svc.topics_of_namespace("public/default", Mode.ALL)),
                         topics[:1])
        svc = self.service({base + "PERSISTENT": (200, {"not": "a list"}, {})})
        self.failure(svc.topics_of_namespace("public/default"), errors.LookupError_)
        self.failureResultOf(svc.topics_of_namespace("no-slash"), errors.InvalidConfiguration)


class ErrorTests(Base):
    def test_status_mapping(self):
        """HTTP statuses map to the client's exceptions; 5xx is retriable."""
        cases = {401: errors.AuthenticationError, 403: errors.AuthorizationError,
                 404: errors.TopicNotFound, 400: errors.InvalidTopicName,
                 412: errors.NotAllowed, 429: errors.TooManyRequests,
                 500: errors.ServiceNotReady, 503: errors.ServiceNotReady,
                 418: errors.LookupError_}
        for status, cls in cases.items():
            self.assertIsInstance(error_for_status(status, "why"), cls, status)
        self.assertTrue(error_for_status(503, "x").retriable)
        self.assertFalse(error_for_status(403, "x").retriable)

    def test_errors_carry_reason(self):
        """The broker's {"reason"} is in the exception's text."""
        svc = self.service({LOOKUP: (403, {"reason": "role x cannot lookup"}, {})})
        error = self.failure(svc.lookup("persistent://public/default/t"),
                             errors.AuthorizationError).value
        self.assertIn("role x cannot lookup", str(error))
        svc = self.service({LOOKUP: (500, b"boom", {})})
        self.assertIn("boom", str(self.failure(svc.lookup("persistent://public/default/t"),
                                               errors.ServiceNotReady).value))

    def test_timeout(self):
        """No answer within operation_timeout fails with Timeout (on the injected clock)."""
        svc = self.service({}, operation_timeout=5)
        self.web.hold = True
        d = svc.lookup("persistent://public/default/t")
        self.agent.flush()
        self.assertNoResult(d)
        self.clock.advance(5.1)
        self.failureResultOf(d, errors.Timeout)


class RealSocketTests(TestCase):
    """The default Agent (plain and TLS) against a real twisted.web Site on 127.0.0.1."""

    def serve(self, web, context=None):
        site = server.Site(web)
        if context is None:
            port = reactor.listenTCP(0, site, interface="127.0.0.1")
        else:
            port = reactor.listenSSL(0, site, context, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return port.getHost().port

    @defer.inlineCallbacks
    def test_http(self):
        """Lookup over a real connection; the client's auth header arrives; close drops the pool."""
        web = CannedWeb({LOOKUP: (200, LOOKUP_ANSWER, {})})
        port = self.serve(web)
        svc = HttpLookupService(reactor, ServiceUrl(f"http://127.0.0.1:{port}"),
                                operation_timeout=10,
                                authentication=AuthenticationBasic("u", "p"))
        self.addCleanup(svc.close)
        answer = yield svc.lookup("persistent://public/default/t")
        self.assertEqual(answer, ("b1:6650", "b1:6650"))
        self.assertEqual(web.requests[0][1]["authorization"], "Basic dTpw")

    @defer.inlineCallbacks
    def test_connection_refused(self):
        """Nobody listening: ConnectError (retriable), not a raw Twisted error."""
        port = self.serve(CannedWeb())
        yield defer.maybeDeferred(self._cleanups.pop()[0])   # stop listening now
        svc = HttpLookupService(reactor, ServiceUrl(f"http://127.0.0.1:{port}"),
                                operation_timeout=10)
        self.addCleanup(svc.close)
        with self.assertRaises(errors.ConnectError):
            yield svc.lookup("persistent://public/default/t")

    @defer.inlineCallbacks
    def test_https_trust(self):
        """https:// verifies the server against the trust file; an unknown CA is refused."""
        from twisted.internet import ssl
        from pulsar_twisted.testing.certs import TestPKI
        pki = TestPKI(self.mktemp())
        issued = pki.issue("server", hosts=["127.0.0.1", "localhost"])
        with open(issued.cert, "rb") as c, open(issued.key, "rb") as k:
            cert = ssl.PrivateCertificate.loadPEM(c.read() + k.read())
        port = self.serve(CannedWeb({LOOKUP: (200, LOOKUP_ANSWER, {})}), cert.options())
        url = ServiceUrl(f"https://127.0.0.1:{port}")

        def tls(trust):
            return lambda host: tls_options(host, trust, verify_hostname=True)

        svc = HttpLookupService(reactor, url, operation_timeout=10, tls=tls(pki.ca_cert))
        self.addCleanup(svc.close)
        answer = yield svc.lookup("persistent://public/default/t")
        self.assertEqual(answer[0], "b1:6651")
        other = TestPKI(self.mktemp())
        svc = HttpLookupService(reactor, url, operation_timeout=10, tls=tls(other.ca_cert))
        self.addCleanup(svc.close)
        with self.assertRaises(errors.ConnectError):
            yield svc.lookup("persistent://public/default/t")


class ClientOverHttpTests(Base):
    def test_client_uses_http_lookup(self):
        """Client("http://...") looks up over HTTP and connects to the broker it names."""
        from tests.client.helpers import FakeBroker
        routes = {"/admin/v2/persistent/public/default/t/partitions?checkAllowAutoCreation=true":
                  (200, {"partitions": 0}, {}), LOOKUP: (200, LOOKUP_ANSWER, {})}
        self.web = CannedWeb(routes)
        self.agent = RequestTraversalAgent(self.web)
        clock = task.Clock()
        dialled = []

        def connector(address, cnx):
            dialled.append(address)
            broker.cnx = cnx
            cnx.makeConnection(broker.transport)
            broker.feed(api.BaseCommand(type=api.BaseCommand.CONNECTED,
                                        connected=api.CommandConnected(server_version="fake",
                                                                       protocol_version=21)))
            return defer.succeed(cnx)

        broker = FakeBroker(clock, handshake=False)
        client = Client("http://web:8080", reactor=clock, connector=connector,
                        http_agent=self.agent)
        self.assertIsInstance(client.lookup, HttpLookupService)
        d = client.create_producer("t")
        for _ in range(3):
            self.agent.flush()
        self.assertNoResult(d)
        self.assertEqual(dialled, ["b1:6650"])
        request = [c for c in broker.commands() if c.type == api.BaseCommand.PRODUCER][0]
        broker.producer_success(request.producer.request_id)
        producer = self.successResultOf(d)
        self.assertEqual(producer.topic, "persistent://public/default/t")
        self.assertEqual([uri for uri, _ in self.web.requests],
                         [list(routes)[0], LOOKUP])
        close = client.close()
        self.assertEqual(
            [c.type for c in broker.commands()], [api.BaseCommand.CLOSE_PRODUCER])
        for c in broker.received:
            if c[0].type == api.BaseCommand.CLOSE_PRODUCER:
                broker.success(c[0].close_producer.request_id)
        broker.lose()   # the pool closed the transport; StringTransport does not report it
        self.successResultOf(close)


class AuthorizingAgentTests(SynchronousTestCase):
    """A daemon's admin calls carry its client credentials, read per request."""

    def test_header_added_per_request(self):
        from twisted.internet import defer
        from twisted.web.http_headers import Headers

        from pulsar_twisted.client.auth import AuthenticationBasic, AuthenticationToken
        from pulsar_twisted.client.http_lookup import AuthorizingAgent
        seen = []

        class Recorder:
            def request(self, method, uri, headers=None, bodyProducer=None):
                seen.append(headers.getRawHeaders(b"Authorization"))
                return defer.succeed(None)

        tokens = iter(["t1", "t2"])
        agent = AuthorizingAgent(Recorder(), AuthenticationToken(lambda: next(tokens)))
        given = Headers({b"Accept": [b"application/json"]})
        agent.request(b"GET", b"http://x/a", given)
        agent.request(b"GET", b"http://x/b")
        AuthorizingAgent(Recorder(), AuthenticationBasic("u", "p")).request(b"GET", b"http://x/")
        AuthorizingAgent(Recorder(), None).request(b"GET", b"http://x/")
        self.assertEqual(seen, [[b"Bearer t1"], [b"Bearer t2"], [b"Basic dTpw"], None])
        self.assertFalse(given.hasHeader(b"Authorization"))   # the caller's headers untouched
