"""
Clusters (Pulsar's ``ClusterResources``): ClusterData documents at ``/admin/clusters/<cluster>``
(``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``, ``brokerServiceUrlTls``). Every method
returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.base import Documents
from pulsar_twisted.resources.checks import check_object, check_str


def check_cluster_data(data) -> dict:
    return check_object(data if data is not None else {}, "ClusterData",
                        {"serviceUrl": check_str, "serviceUrlTls": check_str,
                         "brokerServiceUrl": check_str, "brokerServiceUrlTls": check_str})


class ClusterResources(Documents):
    """``ClusterResources(store)``: keys are cluster names."""

    def path(self, cluster: str) -> str:
        return layout.cluster_path(cluster)

    def list(self):
        return self._nodes.children(layout.CLUSTERS_ROOT)

    def delete(self, cluster: str):
        return self._nodes.delete(self.path(cluster))
