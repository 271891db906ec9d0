"""
Authentication and authorization of the HTTP service (admin REST v2, lookup, metrics).

``SecuredResource`` wraps the router's resource. With ``authenticationEnabled`` every request
must prove a role: ``Authorization: Bearer <token>``, ``Authorization: Basic <base64 user:pass>``
or, on HTTPS, a client certificate (``tls`` provider); without a proof the request gets
``anonymousUserRole`` when one is set (Pulsar's AuthenticationFilter), else 401 with the reason. With
``authorizationEnabled`` the request must then be allowed (403 otherwise), by these rules
(Pulsar's, simplified where noted):

* clusters and brokers: reading needs a role, changing needs a super user;
* the tenant list and tenant creation/update/deletion: super user; reading a tenant: its admins;
* namespaces of a tenant and the topics in them: the tenant's admins (and super users), except
  ``GET .../namespaces/{t}/{ns}/topics`` and ``GET .../{topic}/partitions`` and
  ``/lookup/v2/topic/...``, which a role that may produce or consume there may also use (the
  official client calls them with an ``http://`` service URL);
* ``/admin/v3/{functions,sources,sinks}/{tenant}/...``: the tenant's admins (and super users);
* ``/metrics`` and anything else: any authenticated role.

Pulsar's topic-level grant routes live with the other routes (``web/permissions.py``).

Credentials are never logged; refusals log the peer, the path and the reason.
"""

import json
from urllib.parse import unquote

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import resource, server

from pulsar_twisted.common.errors import AuthenticationError, AuthorizationError
from pulsar_twisted.common.naming import InvalidTopicNameError, NON_PERSISTENT, PERSISTENT, parse_topic
from pulsar_twisted.security.endpoints import peer_certificate_of

_DOMAINS = (PERSISTENT, NON_PERSISTENT)


def _topic(domain, tenant, ns, local):
    try:
        return parse_topic(f"{domain}://{tenant}/{ns}/{unquote(local)}")
    except InvalidTopicNameError:
        return None


async def check_http_access(authorization, method: str, path: str, role) -> None:
    """AuthorizationError unless ``role`` may ``method`` ``path`` (rules in the module doc)."""
    if not authorization.enabled:
        return
    parts = [p for p in path.split("/") if p]
    read = method in ("GET", "HEAD")
    if parts[:2] == ["lookup", "v2"] and len(parts) >= 7 and parts[3] in _DOMAINS:
        name = _topic(parts[3], parts[4], parts[5], parts[6])
        if name is not None:
            if not await authorization.allowed(name, role, "lookup"):
                raise AuthorizationError(f"Role {role} is not authorized to lookup {name}")
        return
    if parts[:2] == ["admin", "v3"] and len(parts) >= 4:
        # Functions (and, later, sources and sinks) of a tenant: its admins, as Pulsar allows
        # (Pulsar also lets a role granted the namespace's "functions" action; not yet here).
        await authorization.check_tenant_admin(parts[3], role)
        return
    if parts[:2] != ["admin", "v2"] or len(parts) < 3:
        return
    kind = parts[2]
    if kind in ("clusters", "brokers", "broker-stats"):
        if not read:
            authorization.check_super_user(role)
        return
    if kind == "tenants":
        if len(parts) == 4 and read:
            await authorization.check_tenant_admin(parts[3], role)
        else:
            authorization.check_super_user(role)
        return
    if kind == "namespaces" and len(parts) >= 4:
        if read and len(parts) == 6 and parts[5] == "topics":
            # Pattern consumers list a namespace's topics with the role they consume with.
            name = _topic(PERSISTENT, parts[3], parts[4], "_")
            if name is not None and await authorization.allowed(name, role, "consume"):
                return
        await authorization.check_tenant_admin(parts[3], role)
        return
    if kind in _DOMAINS and len(parts) >= 4:
        if read and len(parts) == 7 and parts[6] == "partitions":
            # The official client reads partitioned metadata here with an http:// service URL.
            name = _topic(kind, parts[3], parts[4], parts[5])
            if name is not None and await authorization.allowed(name, role, "lookup"):
                return
        await authorization.check_tenant_admin(parts[3], role)
        return


class SecuredResource(resource.Resource):
    """Authenticates, authorizes, then hands the request to ``inner`` (a leaf resource)."""

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
        try:
            channel = getattr(request, "channel", None)
            certificate = peer_certificate_of(getattr(channel, "transport", None))
            identity = self.security.authn.authenticate_http(
                request.getHeader(b"authorization"), certificate, peer,
                method_name=request.getHeader(b"x-pulsar-auth-method-name"))
        except AuthenticationError as e:
            self.log.warn("{peer}: HTTP authentication refused for {method} {path}: {reason}",
                          peer=peer, method=method, path=path, reason=str(e))
            request.setHeader(b"WWW-Authenticate", b'Bearer realm="pulsar"')
            return self._error(request, 401, str(e))
        request.pulsar_role = identity.role
        d = defer.ensureDeferred(check_http_access(self.security.authz, method, path, identity.role))
        finished = []
        request.notifyFinish().addBoth(finished.append)

        def allowed(_):
            if finished:
                return
            result = self.inner.render(request)
            if result is not server.NOT_DONE_YET:
                request.write(result)
                request.finish()

        def refused(failure):
            if finished:
                return
            if failure.check(AuthorizationError):
                self.log.info("{peer}: role {role} refused {method} {path}: {reason}", peer=peer,
                              role=identity.role, method=method, path=path, reason=str(failure.value))
                self._error(request, 403, str(failure.value), finish=True)
            else:
                self.log.failure("authorizing {method} {path}", failure, method=method, path=path)
                self._error(request, 500, "Internal error checking permissions", finish=True)

        d.addCallbacks(allowed, refused)
        d.addErrback(lambda f: self.log.failure("answering {path}", f, path=path))
        return server.NOT_DONE_YET

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
