"""
Tenants (Pulsar's ``TenantResources``): TenantInfo documents at ``/admin/policies/<tenant>``
(``{"adminRoles": [...], "allowedClusters": [...]}``). Every method returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.metadata.layout import POLICIES_ROOT
from pulsar_twisted.resources.base import JsonNodes
from pulsar_twisted.resources.checks import check_object, check_string_list


def check_tenant_info(info) -> dict:
    """A TenantInfo as stored: both lists present (an explicit null reads as unset, as Jackson
    gives an empty set). Whether the clusters exist is the caller's check."""
    info = check_object(info if info is not None else {}, "TenantInfo",
                        {"adminRoles": check_string_list, "allowedClusters": check_string_list})
    info["adminRoles"] = info.get("adminRoles") or []
    info["allowedClusters"] = info.get("allowedClusters") or []
    return info


class TenantResources:
    """``TenantResources(store)`` over an IMetadataStore."""

    def __init__(self, store):
        self._nodes = JsonNodes(store)

    def list(self):
        return self._nodes.children(POLICIES_ROOT)

    def get(self, tenant: str):
        """The TenantInfo document, or None when the tenant does not exist."""
        d = self._nodes.read(layout.tenant_path(tenant))
        return d.addCallback(lambda node: None if node is None else node[0])

    def exists(self, tenant: str):
        return self._nodes.exists(layout.tenant_path(tenant))

    def create(self, tenant: str, info):
        return self._nodes.create(layout.tenant_path(tenant), info)

    def ensure(self, tenant: str, info):
        return self._nodes.ensure(layout.tenant_path(tenant), info)

    def update(self, tenant: str, change):
        return self._nodes.update(layout.tenant_path(tenant), change)

    def delete(self, tenant: str):
        """Remove the tenant's node (``NotEmptyError`` while it has namespaces)."""
        return self._nodes.delete(layout.tenant_path(tenant))
