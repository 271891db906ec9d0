"""
Tenants (Pulsar's ``TenantResources``): TenantInfo documents at ``/admin/policies/<tenant>``
(``{"adminRoles": [...], "allowedClusters": [...]}``). Every method returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.base import Documents
from pulsar_twisted.resources.checks import check_object, check_string_list


def check_tenant_info(info) -> dict:
    """A TenantInfo as stored: both lists present (an explicit null reads as unset, as Jackson
    gives an empty set). Whether the clusters exist is the caller's check."""
    info = check_object(info if info is not None else {}, "TenantInfo",
                        {"adminRoles": check_string_list, "allowedClusters": check_string_list})
    info["adminRoles"] = info.get("adminRoles") or []
    info["allowedClusters"] = info.get("allowedClusters") or []
    return info


class TenantResources(Documents):
    """``TenantResources(store)``: keys are tenant names."""

    def path(self, tenant: str) -> str:
        return layout.tenant_path(tenant)

    def list(self):
        return self._nodes.children(layout.POLICIES_ROOT)

    def delete(self, tenant: str):
        """Remove the tenant's node (``NotEmptyError`` while it has namespaces)."""
        return self._nodes.delete(self.path(tenant))
