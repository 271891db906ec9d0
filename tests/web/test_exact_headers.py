"""Response header names sent with their exact case (``pulsar_twisted/web/headers.py``): peek's
``X-Pulsar-PROPERTY-<key>`` keeps ``<key>`` as the producer wrote it."""

from twisted.internet import defer, protocol, reactor
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.web.headers import ExactCaseHeaders
from tests.web.support import WebTestCase

P = "/admin/v2/persistent/public/default"


class _RawClient(protocol.Protocol):
    """Sends one request and collects the raw answer until the server closes."""

    def __init__(self, request: bytes):
        self.request = request
        self.data = []
        self.done = defer.Deferred()

    def connectionMade(self):
        self.transport.write(self.request)

    def dataReceived(self, data):
        self.data.append(data)

    def connectionLost(self, reason):
        self.done.callback(b"".join(self.data))


class ExactCaseHeadersTests(TestCase):

    def test_exact_names_are_written_as_given_and_values_sanitised(self):
        headers = ExactCaseHeaders.replacing(Headers({b"content-type": [b"x/y"]}))
        headers.add_exact(b"X-Pulsar-PROPERTY-myKey", b"a\r\nb")
        headers.add_exact(b"X-Pulsar-PROPERTY-MYKEY", b"c")
        written = list(headers.getAllRawHeaders())
        self.assertIn((b"Content-Type", [b"x/y"]), written)
        self.assertIn((b"X-Pulsar-PROPERTY-myKey", [b"a b"]), written)
        self.assertIn((b"X-Pulsar-PROPERTY-MYKEY", [b"c"]), written)
        self.assertEqual(list(headers.copy().getAllRawHeaders()), written)

    def test_invalid_name_refused(self):
        from twisted.web.http_headers import InvalidHeaderName
        self.assertRaises(InvalidHeaderName, ExactCaseHeaders().add_exact, b"bad key", b"v")


class PeekPropertyCaseTests(WebTestCase):

    @defer.inlineCallbacks
    def test_property_key_case_survives(self):
        """A property ``myKey`` comes back as the header ``X-Pulsar-PROPERTY-myKey``, byte for byte;
        a key that cannot be a header name is left out instead of failing the answer."""
        client = yield self.producer("persistent://public/default/z", producer_id=1)
        yield self.expect("PUT", f"{P}/z/subscription/s", 204, {"ledgerId": -1, "entryId": -1})
        yield self.publish(client, 1, properties=[api.KeyValue(key="myKey", value="v1"),
                                                  api.KeyValue(key="bad key", value="v2"),
                                                  api.KeyValue(key="lower", value="v3")])
        path = f"{P}/z/subscription/s/position/1"
        code, body, response = yield self.get(path)        # treq: status and (case-folded) value
        self.assertEqual((code, body), (200, b"m0"))
        self.assertEqual(response.headers.getRawHeaders("X-Pulsar-PROPERTY-myKey"), ["v1"])

        raw = _RawClient(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        yield protocol.ClientCreator(reactor, lambda: raw).connectTCP(
            "127.0.0.1", self.port.getHost().port)
        answer = yield raw.done
        head = answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
        self.assertIn(b"X-Pulsar-PROPERTY-myKey: v1", head)
        self.assertIn(b"X-Pulsar-PROPERTY-lower: v3", head)
        self.assertIn(b"X-Pulsar-producer-name: p", head)
        self.assertFalse([line for line in head if b"bad" in line.lower()])
        self.assertIn(b"Content-Type: application/octet-stream", head)
