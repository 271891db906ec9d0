"""
The broker's HTTP service: admin REST API v2, HTTP lookup and /metrics in one twisted.web Site.

Wiring (in ``broker/tap.py``, after ``BrokerService.start()``)::

    from twisted.internet import endpoints
    from pulsar_twisted.broker.admin.service import AdminService
    from pulsar_twisted.web.site import make_site

    admin = AdminService(broker, store, config, reactor)
    admin.startService()          # rate sampling; stop it in stopService
    site = make_site(admin, broker, config)
    web_port = yield endpoints.serverFromString(
        reactor, f"tcp:{config.webServicePort}:interface={config.bindAddress}").listen(site)
"""

from twisted.web import resource, server

from pulsar_twisted.web.broker_stats import add_bookie_routes, add_broker_stats_routes
from pulsar_twisted.web.metrics import add_metrics_routes, make_page
from pulsar_twisted.web.openapi import add_openapi_route
from pulsar_twisted.web.namespaces import (
    add_broker_routes, add_cluster_routes, add_namespace_routes, add_tenant_routes)
from pulsar_twisted.web.functions import add_function_routes
from pulsar_twisted.web.routing import Router, RouterResource
from pulsar_twisted.security.http import guard_site, secure
from pulsar_twisted.web.permissions import add_topic_permission_routes
from pulsar_twisted.web.topic_policies import add_topic_policy_routes
from pulsar_twisted.web.topics import add_lookup_routes, add_topic_routes


def make_router(admin_service, config, metrics_collectors=()) -> Router:
    """The whole routing table (useful on its own to list or test the routes).
    ``metrics_collectors``: collectors added to /metrics (the standalone's bookie)."""
    router = Router()
    add_cluster_routes(router, admin_service)
    add_broker_routes(router, admin_service)
    add_tenant_routes(router, admin_service)
    add_namespace_routes(router, admin_service)
    add_topic_routes(router, admin_service)
    add_lookup_routes(router, admin_service)
    add_metrics_routes(router, make_page(admin_service, config.clusterName, metrics_collectors))
    add_topic_permission_routes(router, admin_service)
    add_topic_policy_routes(router, admin_service)
    add_broker_stats_routes(router, admin_service)
    add_bookie_routes(router, admin_service)
    add_openapi_route(router)  # last: the document describes the whole table
    return router


class _ByPrefix(resource.Resource):
    """``/admin/v3/...`` (the functions worker's API) to its own table, everything else to the
    v2 table: the v3 API is the worker's, with its own document in Pulsar, so the v2 OpenAPI
    document (built from the v2 table) does not list it."""

    isLeaf = True

    def __init__(self, v2, v3):
        super().__init__()
        self.v2, self.v3 = v2, v3
        #: What ``security.http.SecuredResource`` asks which route a request is for.
        self.router = _PrefixRouter(v2.router, v3.router)

    def render(self, request):
        target = self.v3 if request.path.startswith(b"/admin/v3/") else self.v2
        return target.render(request)


class _PrefixRouter:
    """``find`` over the two tables, chosen by the same prefix as ``_ByPrefix.render``."""

    def __init__(self, v2, v3):
        self.v2, self.v3 = v2, v3

    def find(self, method: str, path: str):
        return (self.v3 if path.startswith("/admin/v3/") else self.v2).find(method, path)


def make_v3_router(functions_worker) -> Router:
    """The v3 table: ``functions_worker()`` gives the FunctionsWorker, or None (web/functions.py)."""
    router = Router()
    add_function_routes(router, functions_worker)
    return router


def _no_worker():
    return None


_no_worker.disabled = True


def make_site(admin_service, broker_service, config, metrics_collectors=(),
              functions_worker=_no_worker) -> server.Site:
    """
    A Site answering /admin/v2/..., /lookup/v2/... and /metrics from ``admin_service`` (an
    ``AdminService`` over ``broker_service``), and /admin/v3/functions/... from
    ``functions_worker()`` (503 while it gives None). ``broker_service`` is accepted for the routes
    that will need it directly; today every route goes through the admin service.
    """
    # Behind authentication/authorization when the broker has them on (security/http.py).
    router = make_router(admin_service, config, metrics_collectors)
    both = _ByPrefix(RouterResource(router), RouterResource(make_v3_router(functions_worker)))
    site = server.Site(secure(both, broker_service))
    site.displayTracebacks = False
    # Bodies judged by size and credentials from their headers, before they are read.
    guard_site(site, config, getattr(broker_service, "security", None))
    return site
