"""
Namespaces of the admin API (Pulsar's ``NamespacesBase``): creation and deletion, the Policies
document, its policy sub-resources (``NAMESPACE_POLICIES``) and backlog quotas. Every change goes
through ``change_policies``, which applies it to the loaded topics before answering.
"""

from pulsar_twisted.broker.admin.base import (
    DOMAINS, AdminArea, check_name, create_or_409, namespace_key, read_or_404, update_or_404)
from pulsar_twisted.broker.admin.errors import BadRequest, Conflict, NotAllowed, NotFound, PreconditionFailed
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.resources.checks import check_int
from pulsar_twisted.resources.policies import (
    NAMESPACE_POLICIES, OFFLOAD_DELETION_LAG, OFFLOAD_POLICIES, OFFLOAD_THRESHOLD_BYTES,
    OFFLOAD_THRESHOLD_SECONDS, OLD_OFFLOAD_DELETION_LAG, OLD_OFFLOAD_THRESHOLD,
    OLD_OFFLOAD_THRESHOLD_SECONDS, QUOTA_TYPES, PolicyField, check_backlog_quota,
    check_new_namespace, check_offload_policies, offload_setting, put_offload_policies,
    put_offload_setting, remove_offload_policies, with_defaults)

#: The single-value offload sub-resources: URL name -> (OffloadPoliciesImpl field, the old
#: Policies field it replaced, what GET answers when neither is set).
OFFLOAD_SETTINGS = {
    "offloadThreshold": (OFFLOAD_THRESHOLD_BYTES, OLD_OFFLOAD_THRESHOLD, -1),
    "offloadThresholdInSeconds": (OFFLOAD_THRESHOLD_SECONDS, OLD_OFFLOAD_THRESHOLD_SECONDS, -1),
    "offloadDeletionLagMs": (OFFLOAD_DELETION_LAG, OLD_OFFLOAD_DELETION_LAG, None),
}


class NamespacesAdmin(AdminArea):
    """``NamespacesAdmin(context, topics)``; deleting a namespace deletes its topics through
    ``topics`` (a TopicsAdmin)."""

    def __init__(self, context, topics):
        super().__init__(context)
        self.topics = topics

    async def list_namespaces(self, tenant: str) -> list:
        check_name("Tenant", tenant)
        if not await self.context.tenants.exists(tenant):
            raise NotFound("Tenant does not exist")
        return [f"{tenant}/{ns}" for ns in await self.context.namespaces.list(tenant)]

    async def create_namespace(self, tenant: str, ns: str, policies=None) -> None:
        key = namespace_key(tenant, ns)
        info = await self.tenant_info(tenant)
        value = check_new_namespace(policies, self.cluster,
                                    self.context.config.defaultNumberOfNamespaceBundles)
        await self.check_clusters(value["replication_clusters"], info)
        await create_or_409(self.context.namespaces.create(key, value), "Namespace already exists")

    async def check_clusters(self, clusters, tenant_info) -> None:
        """412 unless every cluster exists and the tenant allows it."""
        known = set(await self.context.clusters.list())
        for cluster in clusters:
            if cluster not in known:
                raise PreconditionFailed(f"Invalid cluster id: {cluster}")
            allowed = tenant_info.get("allowedClusters")
            if allowed and cluster not in allowed:
                raise PreconditionFailed(f"Cluster {cluster} is not in the list of allowed clusters")

    async def get_policies(self, tenant: str, ns: str) -> dict:
        """The namespace's Policies with every default filled in (Pulsar's GET answer)."""
        stored = await read_or_404(self.context.namespaces.get(namespace_key(tenant, ns)),
                                   "Namespace does not exist")
        return with_defaults(stored, self.cluster)

    async def delete_namespace(self, tenant: str, ns: str, force: bool = False) -> None:
        """409 while it has topics, unless ``force`` (which deletes them first)."""
        key = namespace_key(tenant, ns)
        if not await self.context.namespaces.exists(key):
            raise NotFound("Namespace does not exist")
        topics = await self.topics.namespace_topics(tenant, ns, "ALL")
        partitioned = []
        for domain in DOMAINS:
            partitioned += await self.topics.list_partitioned_topics(domain, tenant, ns)
        if (topics or partitioned) and not force:
            raise Conflict("Cannot delete non empty namespace")
        for name in partitioned:
            await self.topics.delete_partitioned_topic(parse_topic(name), force=True)
        for name in topics:
            try:
                await self.topics.delete_topic(parse_topic(name), force=True)
            except NotFound:
                pass
        # Its topics' policies first: a failure after them leaves nothing a namespace made again
        # under this name would inherit.
        await self.broker.policies.topic_policies.delete_namespace(key)
        await self.context.namespaces.delete(key)
        await self.context.partitioned.delete_namespace(tenant, ns)

    # ---------------------------------------------------------------- policy sub-resources
    @staticmethod
    def _policy(name: str) -> PolicyField:
        spec = NAMESPACE_POLICIES.get(name)
        if spec is None:
            raise NotFound(f"Unknown policy {name}")
        return spec

    async def get_namespace_policy(self, tenant: str, ns: str, name: str):
        """The policy's value, or None when unset (Pulsar answers 204 No Content)."""
        spec = self._policy(name)
        policies = await self.get_policies(tenant, ns)
        value = policies.get(spec.field)
        if spec.per_cluster:
            value = (value or {}).get(self.cluster)
        return spec.default if value is None else value

    async def set_namespace_policy(self, tenant: str, ns: str, name: str, value) -> None:
        spec = self._policy(name)
        value = spec.check(value, name)
        if spec.field == "replication_clusters":
            await self.check_clusters(value, await self.tenant_info(tenant))
        await self.change_policies(tenant, ns, lambda p: self._put_field(p, spec, value))

    async def remove_namespace_policy(self, tenant: str, ns: str, name: str) -> None:
        spec = self._policy(name)
        if not spec.removable:
            raise NotAllowed(f"{name} cannot be removed")
        await self.change_policies(tenant, ns, lambda p: self._put_field(p, spec, None))

    def _put_field(self, policies: dict, spec: PolicyField, value) -> dict:
        if spec.per_cluster:
            rates = dict(policies.get(spec.field) or {})
            if value is None:
                rates.pop(self.cluster, None)
            else:
                rates[self.cluster] = value
            policies[spec.field] = rates
        elif value is None:
            policies.pop(spec.field, None)
        else:
            policies[spec.field] = value
        return policies

    async def change_policies(self, tenant: str, ns: str, change) -> dict:
        """Compare-and-set the stored Policies with ``change(document) -> document``."""
        key = namespace_key(tenant, ns)
        new = await update_or_404(self.context.namespaces.update(key, change), "Namespace does not exist")
        # Applied to the loaded topics before answering (the store's watch would also do it,
        # but a client acting on the 204 must find the policy in force).
        await self.broker.policies.refresh(key)
        return new

    # ---------------------------------------------------------------- backlog quotas
    async def get_backlog_quota_map(self, tenant, ns) -> dict:
        return (await self.get_policies(tenant, ns)).get("backlog_quota_map") or {}

    async def set_backlog_quota(self, tenant, ns, quota, quota_type=None) -> None:
        quota_type = quota_type or "destination_storage"
        if quota_type not in QUOTA_TYPES:
            raise BadRequest(f"Invalid backlogQuotaType {quota_type!r}")
        quota = check_backlog_quota(quota, "BacklogQuota")

        def change(p):
            p["backlog_quota_map"] = dict(p.get("backlog_quota_map") or {}, **{quota_type: quota})
            return p
        await self.change_policies(tenant, ns, change)

    async def remove_backlog_quota(self, tenant, ns, quota_type=None) -> None:
        quota_type = quota_type or "destination_storage"

        def change(p):
            quotas = dict(p.get("backlog_quota_map") or {})
            quotas.pop(quota_type, None)
            p["backlog_quota_map"] = quotas
            return p
        await self.change_policies(tenant, ns, change)

    # ---------------------------------------------------------------- tiered storage
    # Pulsar keeps a namespace's offload settings in its offload_policies object; the older
    # offload_threshold / offload_threshold_in_seconds / offload_deletion_lag_ms fields are
    # still read, and folded into the object by every write here (resources/policies.py).
    async def get_offload_setting(self, tenant: str, ns: str, name: str):
        """offloadThreshold / offloadThresholdInSeconds (-1 when unset) or offloadDeletionLagMs
        (None, Pulsar's 204, when unset)."""
        key, old_field, unset = OFFLOAD_SETTINGS[name]
        return offload_setting(await self.get_policies(tenant, ns), key, old_field, unset)

    async def set_offload_setting(self, tenant: str, ns: str, name: str, value) -> None:
        """Pulsar's PUT of a long (any value: negative ones disable); None clears (DELETE of
        offloadDeletionLagMs, the only one Pulsar lets clear)."""
        key, _, _ = OFFLOAD_SETTINGS[name]
        if value is not None:
            value = check_int(_as_long(value), name)
        await self.change_policies(tenant, ns, lambda p: put_offload_setting(p, key, value))

    async def get_offload_policies(self, tenant: str, ns: str):
        """The stored OffloadPoliciesImpl, or None (204) when the namespace has none."""
        return (await self.get_policies(tenant, ns)).get(OFFLOAD_POLICIES)

    async def set_offload_policies(self, tenant: str, ns: str, value) -> None:
        offload = check_offload_policies(value)
        await self.change_policies(tenant, ns, lambda p: put_offload_policies(p, offload))

    async def remove_offload_policies(self, tenant: str, ns: str) -> None:
        await self.change_policies(tenant, ns, remove_offload_policies)


def _as_long(value):
    """A long body as Pulsar's clients send it: JSON ``5`` or the text ``5``."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise BadRequest(f"Cannot read a long from {value!r}")
    return value
