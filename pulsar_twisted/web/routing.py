"""
A small routing table for twisted.web: ``(method, path template) -> handler``, built once
(dispatch by table), and one leaf resource that matches requests against it, runs the handler
(which may return a Deferred or be a coroutine) and serialises its result as JSON.

Handlers are ``handler(request, **params)`` where params are the decoded ``{name}`` segments of
the template. They return:

* a JSON-serialisable value -> 200 with that JSON;
* ``None`` -> 204 No Content (what Pulsar answers to successful mutations and unset policies);
* a ``Response`` for anything else (other status, headers, raw bytes).

Errors become ``{"reason": "..."}`` with the status ``broker.admin.errors.http_status_of`` gives; unexpected
ones are logged with their traceback and answered 500. Nothing a client sends can raise out of
``render``.
"""

import json
import re
from urllib.parse import unquote

from twisted.internet import defer
from twisted.internet.interfaces import IPullProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource, server
from zope.interface import implementer

from pulsar_twisted.broker.admin.errors import AdminError, BadRequest, PreconditionFailed, http_status_of
from pulsar_twisted.web.headers import set_headers

_PARAM = re.compile(r"\{(\w+)\}")


class Response:
    """An explicit answer: ``Response(status, body=b"", headers=None, content_type=...)``. A
    ``list`` body is a page of bytes chunks, streamed (``ChunkProducer``) rather than joined."""

    def __init__(self, status: int, body=b"", headers=None, content_type: str = "application/json"):
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        self.content_type = content_type


class Route:
    def __init__(self, method: str, template: str, handler, doc=None):
        self.method = method
        self.template = template
        self.handler = handler
        self.doc = doc  # optional openapi.Operation describing it (else openapi.OPERATIONS)
        pattern = _PARAM.sub(lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(template).replace(
            r"\{", "{").replace(r"\}", "}"))
        self.regex = re.compile(f"^{pattern}/?$")


class Router:
    """The table: ``add("GET", "/admin/v2/tenants/{tenant}", handler)``."""

    def __init__(self):
        self.routes = []

    def add(self, method: str, template: str, handler, doc=None) -> None:
        self.routes.append(Route(method, template, handler, doc))

    def route(self, methods, template: str, doc=None):
        """Decorator form: ``@router.route("GET", "/x/{y}")`` (methods may be a tuple)."""
        if isinstance(methods, str):
            methods = (methods,)

        def register(handler):
            for method in methods:
                self.add(method, template, handler, doc)
            return handler
        return register

    def find(self, method: str, path: str):
        """``(route, raw params)`` (still percent-encoded); ``(None, allowed_methods)`` when the
        path exists for other methods; ``(None, None)`` when nothing matches."""
        allowed = []
        for route in self.routes:
            m = route.regex.match(path)
            if m is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return route, m.groupdict()
            allowed.append(route.method)
        return None, (allowed or None)

    def match(self, method: str, path: str):
        """``(handler, params)`` with params decoded (``decode_params``); ``(None,
        allowed_methods)`` when the path exists for other methods; ``(None, None)`` when nothing
        matches. BadRequest for a parameter that does not decode."""
        route, params = self.find(method, path)
        if route is None:
            return None, params
        return route.handler, decode_params(params)


#: Characters no name or number of Pulsar's admin API contains (NUL and the other controls).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A ``%`` that does not start an escape (``%zz``, a trailing ``%``): malformed, as servlets say.
_BROKEN_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def decode_params(params: dict) -> dict:
    """
    Path parameters percent-decoded as UTF-8, strictly: a malformed escape, invalid UTF-8 or a
    control character
    (``%00``...) is refused here (400 / 412), once for every route, rather than an odd name
    further down.
    """
    decoded = {}
    for name, value in params.items():
        if _BROKEN_ESCAPE.search(value):
            raise BadRequest(f"Path parameter {name} has a malformed percent-encoding")
        try:
            text = unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise BadRequest(f"Path parameter {name} is not valid UTF-8")
        if _CONTROL.search(text):
            # Pulsar's answer to a name it cannot parse (RestException PRECONDITION_FAILED).
            raise PreconditionFailed(f"Path parameter {name} contains control characters")
        decoded[name] = text
    return decoded


# ------------------------------------------------------------------------------------ parsing
#: Deepest nesting accepted in a JSON body (Pulsar's documents nest four levels at most).
MAX_JSON_DEPTH = 32
#: Integers outside Java's long, which Pulsar's Jackson refuses, are refused here too.
_LONG = 2 ** 63


def _bounded_int(text: str) -> int:
    value = int(text)
    if not -_LONG <= value < _LONG:
        raise BadRequest(f"Number {text[:40]} is out of range")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadRequest(f"Number {text[:40]} is out of range")
    return value


def _no_constant(name: str):
    raise BadRequest(f"{name} is not a JSON number")


def _depth(value) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_json(raw: bytes):
    """
    ``raw`` parsed as JSON, or BadRequest: malformed JSON or UTF-8, nesting deeper than
    MAX_JSON_DEPTH, integers outside a Java long, NaN/Infinity and floats that overflow. Every
    body of the admin API goes through here, so no route sees such input (and none answers 500).
    """
    try:
        value = json.loads(raw, parse_int=_bounded_int, parse_float=_finite_float,
                           parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest(f"JSON body nested deeper than {MAX_JSON_DEPTH} levels")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"Invalid JSON body: {e}")
    # Cheap test first: a body with few brackets cannot be deep.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise BadRequest(f"JSON body nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _read(request) -> bytes:
    return request.content.read() if request.content is not None else b""


def json_body(request, required: bool = True, default=None):
    """The request body parsed as JSON (``parse_json``; BadRequest for a missing body)."""
    raw = _read(request)
    if not raw.strip():
        if required:
            raise BadRequest("Request body is required")
        return default
    return parse_json(raw)


def text_or_json_body(request):
    """A body that Pulsar's clients send either as JSON (``"FULL"``, ``5``) or as plain text; a
    JSON document (``[``, ``{``) that ``parse_json`` refuses is a BadRequest, not text."""
    raw = _read(request)
    try:
        return parse_json(raw)
    except BadRequest:
        if raw.strip()[:1] in (b"[", b"{"):
            raise
    try:
        return raw.decode().strip()
    except UnicodeDecodeError:
        raise BadRequest("Request body is not valid UTF-8")


def query(request, name: str, default=None):
    values = request.args.get(name.encode())
    if not values:
        return default
    try:
        return values[0].decode()
    except UnicodeDecodeError:
        raise BadRequest(f"Query parameter {name} is not valid UTF-8")


def query_bool(request, name: str, default: bool = False) -> bool:
    value = query(request, name)
    if value is None:
        return default
    return value.lower() in ("true", "1", "yes")


def int_param(value: str, what: str) -> int:
    """A path or query integer (BadRequest unless it is one within a Java long, as Pulsar's)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{what} must be an integer")
    if not -_LONG <= number < _LONG:
        raise BadRequest(f"{what} is out of range")
    return number


# ------------------------------------------------------------------------------------ streaming
@implementer(IPullProducer)
class ChunkProducer:
    """
    Writes ``chunks`` (bytes) to ``request`` about ``budget`` bytes per call as the connection
    asks for more, then finishes it: a page of hundreds of MB (/metrics at 100k topics) is never
    written, buffered or joined by the transport in one reactor callback. The list is consumed:
    each entry is dropped once written, so the page is freed as it goes (freeing 670 MB of
    chunks at once took 75 ms).
    """

    def __init__(self, request, chunks: list, budget: int = 256 * 1024):
        self.request = request
        self.chunks = chunks
        self.budget = budget
        self._next = 0
        self._stopped = False

    def start(self) -> None:
        self.request.registerProducer(self, False)

    def resumeProducing(self) -> None:
        if self._stopped:
            return
        written = 0
        chunks = self.chunks
        while self._next < len(chunks) and written < self.budget:
            chunk = chunks[self._next]
            chunks[self._next] = None
            self._next += 1
            if chunk:
                self.request.write(chunk)
                written += len(chunk)
        if self._next >= len(chunks):
            self._stopped = True
            self.request.unregisterProducer()
            self.request.finish()

    def stopProducing(self) -> None:
        """The connection is gone: nothing more is written."""
        self._stopped = True


# ------------------------------------------------------------------------------------ resource
class RouterResource(resource.Resource):
    """A leaf resource answering every path by the ``router``'s table."""

    isLeaf = True
    log = Logger()

    def __init__(self, router: Router):
        super().__init__()
        self.router = router

    def render(self, request):
        try:
            method = request.method.decode("ascii")
            path = request.path.decode("ascii")
        except UnicodeDecodeError:
            self._write_error(request, 400, "Malformed request line")
            return server.NOT_DONE_YET
        try:
            handler, params = self.router.match(method, path)
        except AdminError as e:
            self._write_error(request, e.status, str(e))
            return server.NOT_DONE_YET
        if handler is None:
            if params:
                request.setHeader(b"Allow", ", ".join(sorted(set(params))).encode())
                self._write_error(request, 405, f"Method {method} not allowed")
            else:
                self._write_error(request, 404, "Not found")
            return server.NOT_DONE_YET
        finished = [False]
        request.notifyFinish().addBoth(lambda _: finished.__setitem__(0, True))
        d = defer.maybeDeferred(handler, request, **params)
        d.addCallback(lambda r: defer.ensureDeferred(r) if hasattr(r, "__await__")
                      and not isinstance(r, defer.Deferred) else r)
        d.addCallbacks(self._write_result, self._write_failure, callbackArgs=(request, finished),
                       errbackArgs=(request, finished))
        d.addErrback(lambda f: self.log.failure("writing an HTTP answer", f))
        return server.NOT_DONE_YET

    def _write_result(self, result, request, finished):
        if finished[0]:
            return
        if isinstance(result, Response):
            request.setResponseCode(result.status)
            # Exact-case names (peek's X-Pulsar-PROPERTY-<key>): web/headers.py.
            set_headers(request, result.headers)
            body = result.body
            if isinstance(body, list):
                request.setHeader(b"Content-Type", result.content_type.encode())
                ChunkProducer(request, body).start()
                return
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
            if body or result.status != 204:
                request.setHeader(b"Content-Type", result.content_type.encode())
                request.write(body)
        elif result is None:
            request.setResponseCode(204)
        else:
            request.setHeader(b"Content-Type", b"application/json")
            request.write(json.dumps(result).encode())
        request.finish()

    def _write_failure(self, failure: Failure, request, finished):
        owner = getattr(failure.value, "owner", None)
        owner_url = owner.get("httpUrl") if isinstance(owner, dict) else None
        if owner_url and not finished[0]:
            # Another broker owns the topic (ownership.NotOwnedError): Pulsar's 307 to it, so that
            # nothing of the topic is loaded on this broker.
            request.setResponseCode(307)
            request.setHeader(b"Location", owner_url.rstrip("/").encode() + request.uri)
            request.finish()
            return
        status = http_status_of(failure.value)
        if status in (501, 503) or (status >= 500 and isinstance(failure.value, AdminError)):
            # Service unavailable is an expected answer (a listener this broker lacks, a bundle
            # changing hands), as is not implemented (a documented gap, such as Pulsar IO on the
            # functions worker) and any 5xx an admin area raises on purpose (Pulsar's 500
            # "Failed to update cursor properties"): a log line, not a traceback.
            self.log.warn("{method} {path}: {reason}", method=request.method.decode("ascii", "replace"),
                          path=request.path.decode("ascii", "replace"), reason=str(failure.value))
            reason = str(failure.value)
        elif status >= 500:
            self.log.failure("{method} {path} failed", failure,
                             method=request.method.decode("ascii", "replace"),
                             path=request.path.decode("ascii", "replace"))
            reason = str(failure.value) or failure.value.__class__.__name__
        else:
            reason = str(failure.value)
        if not finished[0]:
            self._write_error(request, status, reason)

    @staticmethod
    def _write_error(request, status: int, reason: str) -> None:
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", b"application/json")
        request.write(json.dumps({"reason": reason}).encode())
        request.finish()
