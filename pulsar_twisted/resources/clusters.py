"""
Clusters (Pulsar's ``ClusterResources``): ClusterData documents at ``/admin/clusters/<cluster>``
(``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``, ``brokerServiceUrlTls``). Every method
returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.metadata.layout import CLUSTERS_ROOT
from pulsar_twisted.resources.base import JsonNodes
from pulsar_twisted.resources.checks import check_object, check_str


def check_cluster_data(data) -> dict:
    return check_object(data if data is not None else {}, "ClusterData",
                        {"serviceUrl": check_str, "serviceUrlTls": check_str,
                         "brokerServiceUrl": check_str, "brokerServiceUrlTls": check_str})


class ClusterResources:
    """``ClusterResources(store)`` over an IMetadataStore."""

    def __init__(self, store):
        self._nodes = JsonNodes(store)

    def list(self):
        return self._nodes.children(CLUSTERS_ROOT)

    def get(self, cluster: str):
        """The ClusterData document, or None when the cluster does not exist."""
        d = self._nodes.read(layout.cluster_path(cluster))
        return d.addCallback(lambda node: None if node is None else node[0])

    def exists(self, cluster: str):
        return self._nodes.exists(layout.cluster_path(cluster))

    def create(self, cluster: str, data):
        return self._nodes.create(layout.cluster_path(cluster), data)

    def ensure(self, cluster: str, data):
        return self._nodes.ensure(layout.cluster_path(cluster), data)

    def update(self, cluster: str, change):
        return self._nodes.update(layout.cluster_path(cluster), change)

    def delete(self, cluster: str):
        return self._nodes.delete(layout.cluster_path(cluster))
