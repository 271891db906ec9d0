"""
Routes of /admin/v2 for clusters, tenants, namespaces (and their policies) and brokers.

Each handler parses the request (path parameters, query, JSON body), calls one AdminService
method and returns its result; the rules live in ``pulsar_twisted.broker.admin``.
"""

from pulsar_twisted.resources.policies import NAMESPACE_POLICIES
from pulsar_twisted.web.routing import json_body, query, query_bool, text_or_json_body

V2 = "/admin/v2"


def add_cluster_routes(router, admin) -> None:
    @router.route("GET", f"{V2}/clusters")
    def list_clusters(request):
        return admin.list_clusters()

    @router.route("GET", f"{V2}/clusters/{{cluster}}")
    def get_cluster(request, cluster):
        return admin.get_cluster(cluster)

    @router.route("PUT", f"{V2}/clusters/{{cluster}}")
    def create_cluster(request, cluster):
        return admin.create_cluster(cluster, json_body(request, required=False, default={}))

    @router.route("POST", f"{V2}/clusters/{{cluster}}")
    def update_cluster(request, cluster):
        return admin.update_cluster(cluster, json_body(request))

    @router.route("DELETE", f"{V2}/clusters/{{cluster}}")
    def delete_cluster(request, cluster):
        return admin.delete_cluster(cluster)


def add_broker_routes(router, admin) -> None:
    @router.route("GET", f"{V2}/brokers/health")
    def health(request):
        return admin.health_check()

    @router.route("GET", f"{V2}/brokers/leaderBroker")
    def leader(request):
        return admin.leader_broker()

    @router.route("GET", f"{V2}/brokers/ready")
    def ready(request):
        return "ok"

    @router.route("GET", f"{V2}/brokers/{{cluster}}")
    def brokers(request, cluster):
        return admin.list_brokers(cluster)

    @router.route("GET", f"{V2}/clusters/{{cluster}}/brokers")
    def brokers_of_cluster(request, cluster):
        return admin.list_brokers(cluster)


def add_tenant_routes(router, admin) -> None:
    @router.route("GET", f"{V2}/tenants")
    def list_tenants(request):
        return admin.list_tenants()

    @router.route("GET", f"{V2}/tenants/{{tenant}}")
    def get_tenant(request, tenant):
        return admin.get_tenant(tenant)

    @router.route("PUT", f"{V2}/tenants/{{tenant}}")
    def create_tenant(request, tenant):
        return admin.create_tenant(tenant, json_body(request, required=False, default={}))

    @router.route("POST", f"{V2}/tenants/{{tenant}}")
    def update_tenant(request, tenant):
        return admin.update_tenant(tenant, json_body(request))

    @router.route("DELETE", f"{V2}/tenants/{{tenant}}")
    def delete_tenant(request, tenant):
        return admin.delete_tenant(tenant, force=query_bool(request, "force"))


def add_namespace_routes(router, admin) -> None:
    ns = f"{V2}/namespaces/{{tenant}}/{{namespace}}"

    @router.route("GET", f"{V2}/namespaces/{{tenant}}")
    def list_namespaces(request, tenant):
        return admin.list_namespaces(tenant)

    @router.route("PUT", ns)
    def create_namespace(request, tenant, namespace):
        return admin.create_namespace(tenant, namespace, json_body(request, required=False))

    @router.route("GET", ns)
    def get_policies(request, tenant, namespace):
        return admin.get_policies(tenant, namespace)

    @router.route("DELETE", ns)
    def delete_namespace(request, tenant, namespace):
        return admin.delete_namespace(tenant, namespace, force=query_bool(request, "force"))

    @router.route("PUT", f"{ns}/unload")
    def unload(request, tenant, namespace):
        return admin.unload_namespace(tenant, namespace)

    @router.route("PUT", f"{ns}/{{bundle}}/unload")
    def unload_bundle(request, tenant, namespace, bundle):
        return admin.unload_bundle(tenant, namespace, bundle)

    @router.route("PUT", f"{ns}/{{bundle}}/split")
    def split_bundle(request, tenant, namespace, bundle):
        return admin.split_bundle(tenant, namespace, bundle, unload=query_bool(request, "unload"),
                                  algorithm=query(request, "splitAlgorithmName", "") or "")

    @router.route("GET", f"{ns}/topics")
    def topics(request, tenant, namespace):
        return admin.namespace_topics(tenant, namespace, query(request, "mode", "PERSISTENT"))

    # Policies stored as one value each: GET reads, POST (PUT for some in Pulsar) sets, DELETE removes.
    for name in NAMESPACE_POLICIES:
        _add_policy_routes(router, admin, f"{ns}/{name}", name)

    @router.route("GET", f"{ns}/backlogQuotaMap")
    def backlog_quota_map(request, tenant, namespace):
        return admin.get_backlog_quota_map(tenant, namespace)

    @router.route(("POST", "PUT"), f"{ns}/backlogQuota")
    def set_backlog_quota(request, tenant, namespace):
        return admin.set_backlog_quota(tenant, namespace, json_body(request),
                                       query(request, "backlogQuotaType"))

    @router.route("DELETE", f"{ns}/backlogQuota")
    def remove_backlog_quota(request, tenant, namespace):
        return admin.remove_backlog_quota(tenant, namespace, query(request, "backlogQuotaType"))

    _add_offload_routes(router, admin, ns)

    @router.route("GET", f"{ns}/permissions")
    def permissions(request, tenant, namespace):
        return admin.get_permissions(tenant, namespace)

    @router.route("POST", f"{ns}/permissions/{{role}}")
    def grant(request, tenant, namespace, role):
        return admin.grant_permission(tenant, namespace, role, json_body(request))

    @router.route("DELETE", f"{ns}/permissions/{{role}}")
    def revoke(request, tenant, namespace, role):
        return admin.revoke_permission(tenant, namespace, role)


def _add_policy_routes(router, admin, template: str, name: str) -> None:
    def get(request, tenant, namespace):
        return admin.get_namespace_policy(tenant, namespace, name)

    def set_(request, tenant, namespace):
        return admin.set_namespace_policy(tenant, namespace, name, text_or_json_body(request))

    def remove(request, tenant, namespace):
        return admin.remove_namespace_policy(tenant, namespace, name)

    router.add("GET", template, get)
    router.add("POST", template, set_)
    router.add("PUT", template, set_)
    router.add("DELETE", template, remove)


def _add_offload_routes(router, admin, ns: str) -> None:
    """Tiered storage: Pulsar's offloadThreshold and offloadThresholdInSeconds (GET, PUT),
    offloadDeletionLagMs (GET, PUT, DELETE), offloadPolicies (GET, POST) and
    removeOffloadPolicies (DELETE)."""
    for name in ("offloadThreshold", "offloadThresholdInSeconds", "offloadDeletionLagMs"):
        template = f"{ns}/{name}"

        def get(request, tenant, namespace, _name=name):
            return admin.get_offload_setting(tenant, namespace, _name)

        def put(request, tenant, namespace, _name=name):
            return admin.set_offload_setting(tenant, namespace, _name, text_or_json_body(request))

        router.add("GET", template, get)
        router.add("PUT", template, put)

    @router.route("DELETE", f"{ns}/offloadDeletionLagMs")
    def clear_deletion_lag(request, tenant, namespace):
        return admin.set_offload_setting(tenant, namespace, "offloadDeletionLagMs", None)

    @router.route("GET", f"{ns}/offloadPolicies")
    def get_offload_policies(request, tenant, namespace):
        return admin.get_offload_policies(tenant, namespace)

    @router.route("POST", f"{ns}/offloadPolicies")
    def set_offload_policies(request, tenant, namespace):
        return admin.set_offload_policies(tenant, namespace, json_body(request, required=False))

    @router.route("DELETE", f"{ns}/removeOffloadPolicies")
    def remove_offload_policies(request, tenant, namespace):
        return admin.remove_offload_policies(tenant, namespace)
