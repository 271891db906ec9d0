"""
Partitioned topics (Pulsar's ``NamespaceResources.PartitionedTopicResources``): ``{"partitions": N}``
at ``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>``. Every method returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.base import CorruptMetadataError, JsonNodes
from pulsar_twisted.resources.policies import from_json


class PartitionedTopicResources:
    """``PartitionedTopicResources(store)`` over an IMetadataStore. ``name`` is a TopicName."""

    def __init__(self, store):
        self._nodes = JsonNodes(store)

    def partitions(self, name):
        """The partition count of ``name``'s partitioned topic (0: not a partitioned topic). A
        partition's name answers for its partitioned topic. A plain callback, not a coroutine:
        every lookup, partitioned-metadata request and topic load asks (issue 14, item 4)."""
        d = self._nodes.store.get(layout.partitioned_topic_path(name.partitioned_topic_name))
        return d.addCallback(self._count)

    @staticmethod
    def _count(node) -> int:
        if node is None:
            return 0
        try:
            document = from_json(node[0])
        except ValueError:
            raise CorruptMetadataError(f"corrupt partitioned-topic metadata: {node[1].path}")
        return int(document.get("partitions", 0))

    def create(self, name, partitions: int):
        """``AlreadyExistsError`` when the partitioned topic exists."""
        return self._nodes.create(layout.partitioned_topic_path(name), {"partitions": partitions})

    def set_partitions(self, name, partitions: int):
        """Compare-and-set the partition count (``NotFoundError`` when there is no such topic)."""
        def change(value):
            value["partitions"] = partitions
            return value
        return self._nodes.update(layout.partitioned_topic_path(name), change)

    def delete(self, name):
        return self._nodes.delete_recursive(layout.partitioned_topic_path(name))

    def list(self, tenant: str, namespace: str, domain: str):
        """The local names of the partitioned topics of one domain of a namespace."""
        return self._nodes.children(layout.partitioned_namespace_path(tenant, namespace, domain))

    def delete_namespace(self, tenant: str, namespace: str = ""):
        """Forget every partitioned topic of a namespace (or, without one, of a tenant)."""
        path = (layout.partitioned_namespace_path(tenant, namespace) if namespace
                else f"{layout.PARTITIONED_ROOT}/{tenant}")
        return self._nodes.delete_recursive(path)
