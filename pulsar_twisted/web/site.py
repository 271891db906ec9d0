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

from twisted.web import server

from pulsar_twisted.web.broker_stats import add_bookie_routes, add_broker_stats_routes
from pulsar_twisted.web.metrics import add_metrics_routes, make_page
from pulsar_twisted.web.openapi import add_openapi_route
from pulsar_twisted.web.namespaces import (
    add_broker_routes, add_cluster_routes, add_namespace_routes, add_tenant_routes)
from pulsar_twisted.web.routing import Router, RouterResource
from pulsar_twisted.security.http import guard_site, secure
from pulsar_twisted.web.permissions import add_topic_permission_routes
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
    add_broker_stats_routes(router, admin_service)
    add_bookie_routes(router, admin_service)
    add_openapi_route(router)  # last: the document describes the whole table
    return router


def make_site(admin_service, broker_service, config, metrics_collectors=()) -> server.Site:
    """
    A Site answering /admin/v2/..., /lookup/v2/... and /metrics from ``admin_service`` (an
    ``AdminService`` over ``broker_service``). ``broker_service`` is accepted for the routes that
    will need it directly; today every route goes through the admin service.
    """
    # Behind authentication/authorization when the broker has them on (security/http.py).
    router = make_router(admin_service, config, metrics_collectors)
    site = server.Site(secure(RouterResource(router), broker_service))
    site.displayTracebacks = False
    # Bodies judged by size and credentials from their headers, before they are read.
    guard_site(site, config, getattr(broker_service, "security", None))
    return site
