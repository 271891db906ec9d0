"""The proxy's HTTP service (proxy/web.py): /metrics with Pulsar's proxy metric names, requests
forwarded to brokers with their headers, redirects followed, unreachable brokers skipped."""

import json

from twisted.internet import defer
from twisted.internet.error import ConnectionRefusedError
from twisted.trial import unittest
from twisted.web.http_headers import Headers
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.proxy.metrics import ProxyMetrics
from pulsar_twisted.proxy.web import ProxyWebResource, _Forwarder
from tests.proxy.helpers import ProxyHarness
from tests.proxy.test_connection import AUTH, token


class _Response:
    phrase = b"OK"

    def __init__(self, code, body=b"", headers=None):
        self.code = code
        self.headers = Headers(headers or {})
        self._body = body

    def deliverBody(self, protocol):
        from twisted.web.client import ResponseDone
        from twisted.python.failure import Failure
        protocol.dataReceived(self._body)
        protocol.connectionLost(Failure(ResponseDone()))


class FakeAgent:
    """Answers by URL: a _Response, or an exception to raise."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []

    def request(self, method, url, headers, body):
        self.requests.append((method, url.decode(), headers))
        answer = self.answers[url.decode()]
        return defer.fail(answer) if isinstance(answer, Exception) else defer.succeed(answer)


class _Discovery:
    def __init__(self, urls):
        self.urls = list(urls)
        self.gone = []

    def web_url(self):
        return defer.succeed(self.urls[0])

    def unreachable(self, url):
        self.gone.append(url)
        self.urls.remove(url)


class ForwarderTests(unittest.TestCase):
    def test_redirect_to_owner_followed(self):
        """A 307 to the bundle's owner is followed with the same method, headers and body."""
        agent = FakeAgent({
            "http://b1:8080/admin/v2/persistent/public/default/t/stats":
                _Response(307, headers={"Location": ["http://b2:8080/admin/v2/persistent/public/default/t/stats"]}),
            "http://b2:8080/admin/v2/persistent/public/default/t/stats": _Response(200, b'{"ok": 1}'),
        })
        forwarder = _Forwarder(agent, _Discovery(["http://b1:8080"]))
        headers = Headers({"Authorization": ["Bearer x"]})
        code, _, body = self.successResultOf(defer.Deferred.fromCoroutine(forwarder.forward(
            b"GET", b"/admin/v2/persistent/public/default/t/stats", headers, b"")))
        self.assertEqual((code, body), (200, b'{"ok": 1}'))
        self.assertEqual([r[2].getRawHeaders(b"authorization") for r in agent.requests], [[b"Bearer x"]] * 2)

    def test_unreachable_broker_skipped(self):
        agent = FakeAgent({"http://b1:8080/admin/v2/clusters": ConnectionRefusedError(),
                           "http://b2:8080/admin/v2/clusters": _Response(200, b"[]")})
        discovery = _Discovery(["http://b1:8080", "http://b2:8080"])
        code, _, _ = self.successResultOf(defer.Deferred.fromCoroutine(_Forwarder(agent, discovery).forward(
            b"GET", b"/admin/v2/clusters", Headers(), b"")))
        self.assertEqual((code, discovery.gone), (200, ["http://b1:8080"]))


class ResourceTests(unittest.TestCase):
    def render(self, resource, path, headers=None):
        request = DummyRequest(path.strip(b"/").split(b"/"))
        request.uri = request.path = path
        request.content = __import__("io").BytesIO(b"")
        for name, value in (headers or {}).items():
            request.requestHeaders.setRawHeaders(name, [value])
        result = resource.render(request)
        if isinstance(result, bytes):
            request.write(result)
            request.finish()
        return request

    def test_metrics_names(self):
        """/metrics: Pulsar's proxy metric names, types and cluster label."""
        harness = ProxyHarness(clusterName="c1")
        harness.client()
        harness.service.metrics.relayed(100)
        resource = ProxyWebResource(harness.service, harness.clock, agent=FakeAgent({}))
        text = b"".join(self.render(resource, b"/metrics").written).decode()
        self.assertIn("# TYPE pulsar_proxy_active_connections gauge", text)
        self.assertIn('pulsar_proxy_active_connections{cluster="c1"} 1.0', text)
        self.assertIn('pulsar_proxy_new_connections{cluster="c1"} 1.0', text)
        self.assertIn("# TYPE pulsar_proxy_rejected_connections counter", text)
        self.assertIn('pulsar_proxy_binary_ops{cluster="c1"} 1.0', text)
        self.assertIn('pulsar_proxy_binary_bytes{cluster="c1"} 100.0', text)

    def test_forwarded_with_principal_and_unauthenticated_refused(self):
        harness = ProxyHarness(brokerWebServiceURL="http://b1:8080", **AUTH)
        agent = FakeAgent({"http://b1:8080/admin/v2/tenants": _Response(200, b'["public"]')})
        resource = ProxyWebResource(harness.service, harness.clock, agent=agent)
        refused = self.render(resource, b"/admin/v2/tenants")
        self.assertEqual(refused.responseCode, 401)
        self.assertEqual(agent.requests, [])
        request = self.render(resource, b"/admin/v2/tenants",
                              {b"authorization": b"Bearer " + token("alice").encode()})
        self.assertEqual(b"".join(request.written), b'["public"]')
        [(_, _, headers)] = agent.requests
        self.assertEqual(headers.getRawHeaders(b"x-original-principal"), [b"alice"])
        self.assertTrue(headers.getRawHeaders(b"authorization")[0].startswith(b"Bearer "))


class MetricsTests(unittest.TestCase):
    def test_label_escaped(self):
        self.assertIn('{cluster="a\\"b"}', ProxyMetrics('a"b').exposition())
