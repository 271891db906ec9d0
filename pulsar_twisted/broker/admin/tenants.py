"""Tenants of the admin API (Pulsar's ``TenantsBase``): ``/admin/v2/tenants[/{tenant}]``."""

from pulsar_twisted.broker.admin.base import AdminArea, check_name, create_or_409, update_or_404
from pulsar_twisted.broker.admin.errors import Conflict, NotFound, PreconditionFailed
from pulsar_twisted.metadata.interfaces import NotEmptyError
from pulsar_twisted.resources.tenants import check_tenant_info


class TenantsAdmin(AdminArea):
    """``TenantsAdmin(context, namespaces)``: TenantInfo documents; deleting a tenant with force
    deletes its namespaces through ``namespaces`` (a NamespacesAdmin)."""

    def __init__(self, context, namespaces):
        super().__init__(context)
        self.namespaces = namespaces

    async def list_tenants(self) -> list:
        return await self.context.tenants.list()

    async def get_tenant(self, tenant: str) -> dict:
        return await self.tenant_info(tenant)

    async def _checked_info(self, info) -> dict:
        info = check_tenant_info(info)
        known = set(await self.context.clusters.list())
        unknown = [c for c in info["allowedClusters"] if c not in known]
        if unknown:
            raise PreconditionFailed(f"Clusters do not exist: {', '.join(unknown)}")
        return info

    async def create_tenant(self, tenant: str, info) -> None:
        check_name("Tenant", tenant)
        value = await self._checked_info(info)
        await create_or_409(self.context.tenants.create(tenant, value), "Tenant already exists")

    async def update_tenant(self, tenant: str, info) -> None:
        check_name("Tenant", tenant)
        value = await self._checked_info(info)
        await update_or_404(self.context.tenants.update(tenant, lambda _: value), "Tenant does not exist")

    async def delete_tenant(self, tenant: str, force: bool = False) -> None:
        """409 while it has namespaces, unless ``force`` (which deletes them first)."""
        check_name("Tenant", tenant)
        if not await self.context.tenants.exists(tenant):
            raise NotFound("Tenant does not exist")
        namespaces = await self.context.namespaces.list(tenant)
        if namespaces and not force:
            raise Conflict("The tenant still has active namespaces")
        for ns in namespaces:
            await self.namespaces.delete_namespace(tenant, ns, force=True)
        try:
            await self.context.tenants.delete(tenant)
        except NotEmptyError:
            raise Conflict("The tenant still has active namespaces")
        await self.context.partitioned.delete_namespace(tenant)
