"""
Routes of Pulsar's topic-level grants:
GET/POST/DELETE ``/admin/v2/{persistent,non-persistent}/{tenant}/{namespace}/{topic}/permissions[/{role}]``.
The rules live in ``pulsar_twisted.broker.admin.permissions``.
"""

from twisted.internet import defer

from pulsar_twisted.common.naming import NON_PERSISTENT, PERSISTENT
from pulsar_twisted.web.routing import json_body


def add_topic_permission_routes(router, admin) -> None:
    for domain in (PERSISTENT, NON_PERSISTENT):
        base = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/permissions"

        def get(request, tenant, namespace, topic, _domain=domain):
            return defer.ensureDeferred(admin.topic_permissions(
                admin.topic_name(_domain, tenant, namespace, topic)))

        def grant(request, tenant, namespace, topic, role, _domain=domain):
            name = admin.topic_name(_domain, tenant, namespace, topic)
            return defer.ensureDeferred(admin.grant_topic_permission(name, role, json_body(request)))

        def revoke(request, tenant, namespace, topic, role, _domain=domain):
            name = admin.topic_name(_domain, tenant, namespace, topic)
            return defer.ensureDeferred(admin.revoke_topic_permission(name, role))

        router.add("GET", base, get)
        router.add("POST", base + "/{role}", grant)
        router.add("DELETE", base + "/{role}", revoke)
