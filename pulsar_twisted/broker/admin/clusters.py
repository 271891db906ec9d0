"""Clusters of the admin API (Pulsar's ``ClustersBase``): ``/admin/v2/clusters[/{cluster}]``."""

from pulsar_twisted.broker.admin.base import (
    AdminArea, check_name, create_or_409, read_or_404, update_or_404)
from pulsar_twisted.broker.admin.errors import NotFound, PreconditionFailed
from pulsar_twisted.resources.clusters import check_cluster_data


class ClustersAdmin(AdminArea):
    """Cluster registrations (ClusterData documents)."""

    async def list_clusters(self) -> list:
        return await self.context.clusters.list()

    async def get_cluster(self, cluster: str) -> dict:
        check_name("Cluster", cluster)
        return await read_or_404(self.context.clusters.get(cluster), "Cluster does not exist")

    async def create_cluster(self, cluster: str, data) -> None:
        check_name("Cluster", cluster)
        await create_or_409(self.context.clusters.create(cluster, check_cluster_data(data)),
                            "Cluster already exists")

    async def update_cluster(self, cluster: str, data) -> None:
        check_name("Cluster", cluster)
        value = check_cluster_data(data)
        await update_or_404(self.context.clusters.update(cluster, lambda _: value),
                            "Cluster does not exist")

    async def delete_cluster(self, cluster: str) -> None:
        """Refused (412) while a tenant still allows the cluster."""
        check_name("Cluster", cluster)
        if not await self.context.clusters.exists(cluster):
            raise NotFound("Cluster does not exist")
        for tenant in await self.context.tenants.list():
            info = await self.tenant_info(tenant)
            if cluster in info.get("allowedClusters", []):
                raise PreconditionFailed(f"Cluster {cluster} is used by tenant {tenant}")
        await self.context.clusters.delete(cluster)
