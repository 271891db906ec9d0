"""
The proxy's HTTP service: ``/metrics`` answered here, everything else (the admin REST API
``/admin/v2/...``, HTTP lookups ``/lookup/v2/...``) forwarded to a broker's web service.

A forwarded request keeps its method, path, query, body and headers (``Authorization`` included,
so the broker authenticates the client itself), minus the hop-by-hop ones; ``X-Forwarded-For``
names the client and, when the proxy authenticated the request, ``X-Original-Principal`` its role
(Pulsar's AdminProxyHandler header). A broker's redirect (307 to the bundle's owner, 302/301/308)
is followed here, at most ``MAX_REDIRECTS`` times, so the client never needs to reach a broker.
With ``authenticationEnabled`` the proxy refuses unauthenticated requests itself (401) before any
broker sees them.
"""

import json
from io import BytesIO
from urllib.parse import urljoin

from twisted.internet import defer
from twisted.internet.error import ConnectError
from twisted.logger import Logger
from twisted.web import resource, server
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, FileBodyProducer, readBody
from twisted.web.http_headers import Headers

from pulsar_twisted.common import errors
from pulsar_twisted.proxy.lookup import FIRST_HOP_ATTEMPTS
from pulsar_twisted.proxy.metrics import CONTENT_TYPE
from pulsar_twisted.security.endpoints import peer_certificate_of
from pulsar_twisted.security.http import guard_site

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 307, 308)
#: Headers that describe one hop, not the request (RFC 9110 section 7.6.1), and those we set.
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
              b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length",
              b"x-original-principal"}


def forwarded_headers(request, role) -> Headers:
    """The headers a broker gets for ``request`` (see the module docstring)."""
    headers = Headers()
    for name, values in request.requestHeaders.getAllRawHeaders():
        if name.lower() not in HOP_BY_HOP:
            headers.setRawHeaders(name, values)
    client = request.getClientAddress()
    previous = request.getHeader(b"x-forwarded-for")
    here = getattr(client, "host", "")
    headers.setRawHeaders(b"X-Forwarded-For", [f"{previous.decode()}, {here}" if previous else here])
    if role:
        headers.setRawHeaders(b"X-Original-Principal", [role.encode()])
    return headers


class _Forwarder:
    """Sends one request to brokers, following redirects (``agent``: a twisted.web Agent)."""

    def __init__(self, agent, discovery):
        self.agent = agent
        self.discovery = discovery

    async def forward(self, method: bytes, uri: bytes, headers: Headers, body: bytes):
        """(code, headers, body) of the final answer; a broker from discovery that cannot be
        reached is reported and the next one tried (FIRST_HOP_ATTEMPTS in all)."""
        for attempt in range(FIRST_HOP_ATTEMPTS):
            base = await self.discovery.web_url()
            try:
                return await self._follow(method, urljoin(base, uri.decode("latin-1")), headers, body)
            except ConnectError:
                self.discovery.unreachable(base)
                if attempt == FIRST_HOP_ATTEMPTS - 1:
                    raise

    async def _follow(self, method, url, headers, body):
        for _ in range(MAX_REDIRECTS + 1):
            producer = FileBodyProducer(BytesIO(body)) if body else None
            response = await self.agent.request(method, url.encode(), headers, producer)
            data = await readBody(response)
            location = response.headers.getRawHeaders(b"location")
            if response.code not in REDIRECTS or not location:
                return response.code, response.headers, data
            url = urljoin(url, location[0].decode("latin-1"))
        return 502, Headers(), json.dumps({"reason": "too many redirects between brokers"}).encode()


class ProxyWebResource(resource.Resource):
    """The root of the proxy's site (leaf: every path is handled in ``render``)."""

    isLeaf = True
    log = Logger()

    def __init__(self, service, reactor, agent=None):
        super().__init__()
        self.service = service
        if agent is None:
            policy = BrowserLikePolicyForHTTPS(
                service.tls_options.trust_root if service.tls_options is not None else None)
            agent = Agent(reactor, contextFactory=policy, connectTimeout=10)
        self.forwarder = _Forwarder(agent, service.discovery)

    def render(self, request):
        if request.path.rstrip(b"/") == b"/metrics":
            request.setHeader(b"content-type", CONTENT_TYPE.encode())
            return self.service.metrics.exposition().encode()
        d = self._authenticate(request)
        d.addCallback(lambda role: self._forward(request, role))
        d.addErrback(self._refused, request)
        return server.NOT_DONE_YET

    def _forward(self, request, role):
        body = request.content.read() if request.content is not None else b""
        d = defer.Deferred.fromCoroutine(self.forwarder.forward(
            request.method, request.uri, forwarded_headers(request, role), body))
        d.addCallbacks(lambda answer: self._answer(request, *answer),
                       lambda f: self._failed(request, f))
        return d

    def _authenticate(self, request) -> defer.Deferred:
        """Deferred of the request's role (None with authentication off): a Basic password is
        checked off the reactor thread, within the per-address caps of ``security.hashing``."""
        authn = self.service.authn
        if not authn.enabled:
            return defer.succeed(None)
        channel = getattr(request, "channel", None)
        address = request.getClientAddress()
        d = authn.authenticate_http_deferred(request.getHeader(b"authorization"),
                                             peer_certificate_of(getattr(channel, "transport", None)),
                                             str(getattr(address, "host", "") or address))
        return d.addCallback(lambda identity: identity.role)

    def _refused(self, failure, request):
        if failure.check(errors.AuthenticationError):
            code, reason = 401, str(failure.value)
        else:
            self.log.failure("authenticating {uri} failed", failure, uri=request.uri)
            code, reason = 500, "Internal proxy error while authenticating"
        if getattr(request, "_disconnected", False):
            return
        body = self._error(request, code, reason)
        request.write(body)
        request.finish()

    @staticmethod
    def _error(request, code: int, reason: str) -> bytes:
        request.setResponseCode(code)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"reason": reason}).encode()

    def _answer(self, request, code, headers, body):
        if getattr(request, "_disconnected", False):
            return
        request.setResponseCode(code)
        for name, values in headers.getAllRawHeaders():
            if name.lower() not in HOP_BY_HOP:
                request.responseHeaders.setRawHeaders(name, values)
        request.write(body)
        request.finish()

    def _failed(self, request, failure):
        self.log.info("forwarding {method} {uri} failed: {reason}", method=request.method,
                      uri=request.uri, reason=failure.getErrorMessage())
        if getattr(request, "_disconnected", False):
            return
        request.write(self._error(request, 502, f"no broker answered: {failure.getErrorMessage()}"))
        request.finish()


def make_proxy_site(service, reactor, agent=None) -> server.Site:
    """The proxy's site, on the broker's guarded channels: a request body is refused from its
    headers (413 over the size limit, 401 without valid credentials) before any of it is read."""
    site = server.Site(ProxyWebResource(service, reactor, agent))
    site.displayTracebacks = False
    return guard_site(site, service.config, service)

