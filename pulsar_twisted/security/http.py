"""
Authentication and authorization of the HTTP service (admin REST v2, lookup, metrics).

Two guards, one per stage of a request:

* ``GuardedHTTPChannel`` (header time, before any byte of the body is read): a body announced
  larger than ``max_request_size(config)`` is refused with 413, a body from a caller without valid
  credentials (authentication on) with 401; a chunked body is counted and refused with 413 as
  soon as it passes the limit. The connection closes after the refusal, so the body is never
  spooled (twisted.web's ``Request`` writes bodies over 100 kB to a temporary file).
* ``SecuredResource`` (render time): with ``authenticationEnabled`` every request must prove a
  role (``Authorization: Bearer <token>``, ``Authorization: Basic <base64 user:pass>`` or, on
  HTTPS, a client certificate; without a proof ``anonymousUserRole`` when one is set, as Pulsar's
  AuthenticationFilter; 401 otherwise); with ``authorizationEnabled`` the role must then
  pass the Rule that ``policy_table.HTTP_RULES`` gives the matched route (403 otherwise). A route
  without an entry is refused; a path no route matches is answered by the router (404/405) once
  the caller is authenticated. ``/metrics`` follows ``authenticateMetricsEndpoint``.

Credentials are never logged; refusals log the peer, the path and the reason.
"""

import inspect
import json
from urllib.parse import unquote

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, resource, server

from pulsar_twisted.common.errors import AuthenticationError, AuthorizationError
from pulsar_twisted.security import policy_table
from pulsar_twisted.security.endpoints import peer_certificate_of

#: Room above maxMessageSize for the JSON around the largest payload an admin body carries.
REQUEST_SIZE_HEADROOM = 1024 * 1024


#: Pulsar's maxMessageSize default, for daemons whose configuration lacks the key (the proxy).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

#: Seconds a connection may stay silent between requests before it is closed: Jetty's default
#: idle timeout, which Pulsar's web services keep (twisted.web's own default is 12 hours). The
#: timer is off while a request is being answered, so long responses are not cut.
IDLE_TIMEOUT = 30.0

#: Seconds from a request's first byte to the end of its headers: a client that trickles its
#: headers a byte at a time (slowloris) is closed with 408, whatever the idle timer says.
HEADER_DEADLINE = 30.0


def max_request_size(config) -> int:
    """
    The largest HTTP request body accepted, in bytes: ``httpMaxRequestSize`` when positive.
    Pulsar's default (-1) means no limit; we take ``maxMessageSize`` + 1 MiB instead, as no admin
    body legitimately carries more than one message and its JSON.
    """
    configured = getattr(config, "httpMaxRequestSize", -1)
    if configured and configured > 0:
        return configured
    # The proxy's configuration has no maxMessageSize: Pulsar's default (5 MiB) bounds it.
    return getattr(config, "maxMessageSize", DEFAULT_MAX_MESSAGE_SIZE) + REQUEST_SIZE_HEADROOM


def _peer_host(transport) -> str:
    peer = transport.getPeer() if transport is not None else None
    return str(getattr(peer, "host", "") or "")


def authenticate_request(authn, authorization, certificate, peer: str, method_name):
    """
    The identity of an HTTP request (or a Deferred of it): through the authentication service's
    ``authenticate_http_deferred`` when it has one (passwords checked off the reactor thread),
    else ``authenticate_http``. AuthenticationError (raised or as a failure) when refused.
    """
    check = getattr(authn, "authenticate_http_deferred", None) or authn.authenticate_http
    if "method_name" in inspect.signature(check).parameters:
        return check(authorization, certificate, peer, method_name=method_name)
    return check(authorization, certificate, peer)


def _refusal_bytes(status: int, reason: str, authenticate: bool = False) -> bytes:
    body = json.dumps({"reason": reason}).encode()
    head = [b"HTTP/1.1 %d %s" % (status, http.RESPONSES.get(status, b"Refused")),
            b"Content-Type: application/json", b"Content-Length: %d" % len(body),
            b"Connection: close"]
    if authenticate:
        head.append(b'WWW-Authenticate: Bearer realm="pulsar"')
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class PendingIdentity:
    """
    An authentication still running (a password checked off the reactor thread), whose outcome
    both the channel (to refuse the body) and SecuredResource (to answer the request) wait for:
    the check runs once. ``outcome`` is ``[identity or Failure]`` once known, else None.
    """

    def __init__(self, deferred):
        self.outcome = None
        self._waiters = []
        deferred.addBoth(self._done)

    def _done(self, result):
        self.outcome = [result]
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self._fire(waiter, result)

    @staticmethod
    def _fire(waiter, result):
        if isinstance(result, Failure):
            waiter.errback(result)
        else:
            waiter.callback(result)

    def wait(self) -> defer.Deferred:
        """A new Deferred of the outcome."""
        waiter = defer.Deferred()
        if self.outcome is not None:
            self._fire(waiter, self.outcome[0])
        else:
            self._waiters.append(waiter)
        return waiter


class GuardedHTTPChannel(http.HTTPChannel):
    """
    An HTTPChannel that judges a request's body from its headers (size, then credentials) and
    counts chunked bodies. ``max_body`` and ``authn`` (an AuthenticationService, or None) are set
    by ``guard_site``. A refusal writes a complete answer and closes the connection; nothing more
    the client sends is parsed.
    """

    log = Logger()
    max_body = None
    authn = None
    _refused = False
    _lost = False
    _received = 0
    #: The request whose body is being received (None once it is complete).
    _receiving = None
    #: The pending call that closes a connection whose headers take too long (None when idle).
    _header_timer = None
    header_deadline = HEADER_DEADLINE
    #: True from a request's last header to the end of its body.
    _in_body = False

    def dataReceived(self, data):
        if self._header_timer is None and not (self._refused or self._in_body or self._lost
                                               or getattr(self, "_handlingRequest", False)):
            self._header_timer = self.callLater(self.header_deadline, self._headers_too_slow)
        super().dataReceived(data)

    def _headers_too_slow(self):
        self._header_timer = None
        self.log.info("{peer}: HTTP request headers not complete within {seconds} s: closed",
                      peer=_peer_host(self.transport), seconds=self.header_deadline)
        self._refused = True
        self.transport.write(_refusal_bytes(408, "Request headers not received in time", False))
        self.loseConnection()

    def _cancel_header_timer(self):
        if self._header_timer is not None:
            if self._header_timer.active():
                self._header_timer.cancel()
            self._header_timer = None

    def allHeadersReceived(self):
        self._cancel_header_timer()
        request = self.requests[-1]
        refusal = self._judge_size() or self._judge_credentials(request)
        if refusal is not None:
            self._refuse(*refusal)
            return
        self._in_body = True
        super().allHeadersReceived()
        decoder = self._transferDecoder
        if self.length is None and decoder is not None and self.max_body is not None:
            self._received = 0
            decoder.dataCallback = self._counted(decoder.dataCallback)
        pending = getattr(request, "pulsar_identity_pending", None)
        if pending is not None:
            # Credentials checked off the reactor thread: read no more of the body until then.
            self._receiving = request
            self.transport.pauseProducing()
            pending.wait().addBoth(self._credentials_judged, request)

    def _announces_body(self) -> bool:
        return bool(self.length) or (self.length is None and self._transferDecoder is not None)

    def _judge_size(self):
        """``(413, reason, False)`` for a Content-Length over ``max_body``, else None."""
        announced = self.length
        if self.max_body is not None and announced is not None and announced > self.max_body:
            return 413, f"Request body of {announced} bytes exceeds the limit of {self.max_body}", False
        return None

    def _judge_credentials(self, request):
        """``(401, reason, True)`` for a body whose credentials are refused at once, else None
        (then ``request.pulsar_identity`` holds the identity, or ``pulsar_identity_pending`` a
        check still running)."""
        if not self._announces_body() or self.authn is None or not self.authn.enabled:
            return None
        headers = request.requestHeaders
        try:
            certificate = peer_certificate_of(self.transport)
        except Exception as e:  # a certificate we cannot read: let render decide
            self.log.info("header-time authentication skipped: {error}", error=e)
            return None
        pending = PendingIdentity(defer.maybeDeferred(
            authenticate_request, self.authn, headers.getRawHeaders(b"authorization", [None])[0],
            certificate, _peer_host(self.transport),
            headers.getRawHeaders(b"x-pulsar-auth-method-name", [None])[0]))
        if pending.outcome is None:
            request.pulsar_identity_pending = pending
            return None
        result = pending.outcome[0]
        if isinstance(result, Failure):
            return (401, str(result.value), True) if result.check(AuthenticationError) else None
        request.pulsar_identity = result
        return None

    def _credentials_judged(self, result, request):
        """An asynchronous check finished: refuse the body still being sent, or read on."""
        if self._refused or self._lost:
            return
        if (isinstance(result, Failure) and result.check(AuthenticationError)
                and self._receiving is request):
            self._refuse(401, str(result.value), True)
            return
        self.transport.resumeProducing()

    def _counted(self, callback):
        def count(data):
            if self._refused:
                return
            self._received += len(data)
            if self._received > self.max_body:
                self._refuse(413, f"Request body exceeds the limit of {self.max_body} bytes", False)
                return
            callback(data)
        return count

    def _refuse(self, status: int, reason: str, authenticate: bool) -> None:
        self.log.info("{peer}: HTTP request refused before its body was read: {status} {reason}",
                      peer=_peer_host(self.transport), status=status, reason=reason)
        self._refused = True
        self.length = None   # lineReceived then switches to raw mode, where we drop everything
        self.transport.write(_refusal_bytes(status, reason, authenticate))
        self.loseConnection()

    def rawDataReceived(self, data):
        if self._refused:
            return
        super().rawDataReceived(data)

    def lineReceived(self, line):
        if self._refused:
            return
        super().lineReceived(line)

    def allContentReceived(self):
        if self._refused:
            return
        self._receiving = None
        self._in_body = False
        super().allContentReceived()

    def connectionLost(self, reason):
        self._lost = True
        self._cancel_header_timer()
        super().connectionLost(reason)


def guard_site(site, config, security=None):
    """Make ``site`` build GuardedHTTPChannels bounded by ``config`` (and ``security.authn``)."""
    limit = max_request_size(config)
    authn = getattr(security, "authn", None)

    class Channel(GuardedHTTPChannel):
        max_body = limit

    Channel.authn = authn
    site.protocol = Channel
    site.timeOut = IDLE_TIMEOUT
    return site


def _decoded(params: dict):
    """Path parameters percent-decoded strictly, or None when one is not valid UTF-8."""
    try:
        return {k: unquote(v, errors="strict") for k, v in params.items()}
    except UnicodeDecodeError:
        return None


class SecuredResource(resource.Resource):
    """Authenticates, authorizes by the policy table, then hands the request to ``inner`` (a
    RouterResource: its ``router`` tells which route a request is for)."""

    isLeaf = True
    log = Logger()

    def __init__(self, inner, security):
        super().__init__()
        self.inner = inner
        self.security = security

    def render(self, request):
        peer = str(getattr(request.getClientAddress(), "host", "")) if hasattr(
            request, "getClientAddress") else ""
        try:
            path = request.path.decode("ascii")
            method = request.method.decode("ascii")
        except UnicodeDecodeError:
            return self._error(request, 400, "Malformed request line")
        route, params = self.inner.router.find(method, path)
        rule = policy_table.AUTHENTICATED
        if route is not None:
            rule = policy_table.http_rule(method, route.template)
            if rule is None:
                self.log.error("{method} {template} has no authorization rule: refused",
                               method=method, template=route.template)
                return self._error(request, 403, "No authorization rule for this route")
        if rule == policy_table.METRICS and not self.security.authenticate_metrics:
            return self.inner.render(request)   # Pulsar's default: /metrics is public
        d = defer.maybeDeferred(self._identity, request, peer)
        d.addCallback(lambda identity: defer.ensureDeferred(
            self._authorize(identity, request, rule, route, params)))
        finished = []
        request.notifyFinish().addBoth(finished.append)
        d.addCallbacks(self._allowed, self._refused, callbackArgs=(request, finished),
                       errbackArgs=(request, finished, peer, method, path))
        d.addErrback(lambda f: self.log.failure("answering {path}", f, path=path))
        return server.NOT_DONE_YET

    def _identity(self, request, peer):
        known = getattr(request, "pulsar_identity", None)
        if known is not None:
            return known
        pending = getattr(request, "pulsar_identity_pending", None)
        if pending is not None:
            return pending.wait()
        channel = getattr(request, "channel", None)
        certificate = peer_certificate_of(getattr(channel, "transport", None))
        return authenticate_request(self.security.authn, request.getHeader(b"authorization"),
                                    certificate, peer, request.getHeader(b"x-pulsar-auth-method-name"))

    async def _authorize(self, identity, request, rule, route, params):
        request.pulsar_role = role = identity.role
        if rule == policy_table.METRICS:
            if self.security.authz.enabled and not (
                    self.security.authz.is_super_user(role) or role in self.security.metrics_roles):
                raise AuthorizationError(f"Role {role} may not read the metrics")
            return identity
        decoded = _decoded(params) if route is not None else None
        if decoded is None:
            return identity   # no route, or undecodable parameters: the router refuses the request
        await policy_table.enforce(
            self.security.authz, rule, role, tenant=decoded.get("tenant"),
            namespace=decoded.get("namespace"), topic=decoded.get("topic"),
            domain=policy_table.domain_of(route.template))
        return identity

    def _allowed(self, identity, request, finished):
        if finished:
            return
        result = self.inner.render(request)
        if result is not server.NOT_DONE_YET:
            request.write(result)
            request.finish()

    def _refused(self, failure, request, finished, peer, method, path):
        if finished:
            return
        if failure.check(AuthenticationError):
            self.log.warn("{peer}: HTTP authentication refused for {method} {path}: {reason}",
                          peer=peer, method=method, path=path, reason=str(failure.value))
            request.setHeader(b"WWW-Authenticate", b'Bearer realm="pulsar"')
            self._error(request, 401, str(failure.value), finish=True)
        elif failure.check(AuthorizationError):
            self.log.info("{peer}: role {role} refused {method} {path}: {reason}", peer=peer,
                          role=getattr(request, "pulsar_role", None), method=method, path=path,
                          reason=str(failure.value))
            self._error(request, 403, str(failure.value), finish=True)
        else:
            self.log.failure("authorizing {method} {path}", failure, method=method, path=path)
            self._error(request, 500, "Internal error checking permissions", finish=True)

    @staticmethod
    def _error(request, status: int, reason: str, finish: bool = False):
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", b"application/json")
        body = json.dumps({"reason": reason}).encode()
        if finish:
            request.write(body)
            request.finish()
            return None
        return body


def secure(root, broker_service):
    """``root`` behind authentication when the broker has it enabled (else ``root`` itself)."""
    security = getattr(broker_service, "security", None)
    if security is None or not security.authn.enabled:
        return root
    return SecuredResource(root, security)
