"""The routing table and the leaf resource, without sockets (twisted.web's DummyRequest)."""

import json

from twisted.internet import defer
from twisted.trial import unittest
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.broker.admin.errors import Conflict
from pulsar_twisted.web.routing import Response, Router, RouterResource


def request(method: bytes, path: bytes, body: bytes = b""):
    req = DummyRequest(path.strip(b"/").split(b"/"))
    req.method = method
    req.path = path
    req.uri = path
    from io import BytesIO
    req.content = BytesIO(body)
    return req


class RouterTests(unittest.TestCase):
    def setUp(self):
        self.router = Router()
        self.router.add("GET", "/a/{x}/b", lambda request, x: {"x": x})
        self.router.add("PUT", "/a/{x}/b", lambda request, x: None)
        self.router.add("GET", "/boom", lambda request: 1 / 0)
        self.router.add("GET", "/conflict", lambda request: defer.fail(Conflict("taken")))

        async def coro(request):
            return Response(201, b"raw", {"X-Thing": "1"}, content_type="text/plain")
        self.router.add("GET", "/coro", coro)
        self.resource = RouterResource(self.router)

    def render(self, method, path):
        req = request(method, path)
        self.resource.render(req)
        return req

    def test_params_are_percent_decoded(self):
        req = self.render(b"GET", b"/a/hello%20world/b")
        self.assertEqual(json.loads(b"".join(req.written)), {"x": "hello world"})

    def test_none_is_204(self):
        self.assertEqual(self.render(b"PUT", b"/a/1/b").responseCode, 204)

    def test_wrong_method_is_405_with_allow(self):
        req = self.render(b"DELETE", b"/a/1/b")
        self.assertEqual(req.responseCode, 405)
        self.assertEqual(req.responseHeaders.getRawHeaders(b"allow"), [b"GET, PUT"])

    def test_unknown_path_is_404_json(self):
        req = self.render(b"GET", b"/zzz")
        self.assertEqual(req.responseCode, 404)
        self.assertEqual(json.loads(b"".join(req.written)), {"reason": "Not found"})

    def test_unexpected_error_is_500_and_logged(self):
        req = self.render(b"GET", b"/boom")
        self.assertEqual(req.responseCode, 500)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_admin_error_status(self):
        req = self.render(b"GET", b"/conflict")
        self.assertEqual(req.responseCode, 409)
        self.assertEqual(json.loads(b"".join(req.written)), {"reason": "taken"})

    def test_coroutine_and_response(self):
        req = self.render(b"GET", b"/coro")
        self.assertEqual(req.responseCode, 201)
        self.assertEqual(b"".join(req.written), b"raw")
        self.assertEqual(req.responseHeaders.getRawHeaders(b"x-thing"), [b"1"])

    def test_non_ascii_path(self):
        self.assertEqual(self.render(b"GET", "/a/é/b".encode()).responseCode, 400)


class HostileInputTests(unittest.TestCase):
    """parse_json and decode_params: malformed input is an AdminError (4xx), never an exception
    that would become a 500."""

    def test_parse_json_refusals(self):
        from pulsar_twisted.broker.admin.errors import BadRequest
        from pulsar_twisted.web.routing import MAX_JSON_DEPTH, parse_json
        refused = [b"[" * 100000 + b"]" * 100000, b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
                   b"9" * 5000, b"9223372036854775808", b"-9223372036854775809", b"1e999", b"NaN",
                   b"-Infinity", b"\xff", b"{", b'{"a": [1, Infinity]}']
        for raw in refused:
            with self.assertRaises(BadRequest, msg=raw[:30]):
                parse_json(raw)
        deep = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
        self.assertEqual(parse_json(b'{"a": [9223372036854775807, 1.5, null]}'),
                         {"a": [2 ** 63 - 1, 1.5, None]})
        self.assertIsInstance(parse_json(deep), list)

    def test_decode_params(self):
        from pulsar_twisted.broker.admin.errors import BadRequest, PreconditionFailed
        from pulsar_twisted.web.routing import decode_params
        self.assertEqual(decode_params({"t": "a%2Fb%20c%C3%A9"}), {"t": "a/b cé"})
        for value, error in (("%FF", BadRequest), ("%C3%28", BadRequest), ("%zz", BadRequest),
                             ("a%", BadRequest), ("a%00b", PreconditionFailed), ("%0A", PreconditionFailed)):
            with self.assertRaises(error, msg=value):
                decode_params({"t": value})
