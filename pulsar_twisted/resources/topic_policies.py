"""
STAND-IN for the core's TopicPoliciesResources (branch tp-admin only; replaced by main's module at
the merge). Same interface: ``get`` / ``update`` / ``delete`` of one JSON document per partitioned
topic name, with the namespace Policies field names.
"""

from pulsar_twisted.metadata.interfaces import NotFoundError
from pulsar_twisted.resources.base import JsonNodes, deferred

ROOT = "/admin/topic-policies"


def _base(topic_name):
    return topic_name.partitioned_topic_name if topic_name.partition_index >= 0 else topic_name


class TopicPoliciesResources:
    def __init__(self, store):
        self.store = store
        self._nodes = JsonNodes(store)

    def path(self, topic_name) -> str:
        name = _base(topic_name)
        return f"{ROOT}/{name.tenant}/{name.namespace}/{name.domain}/{name.local_name}"

    @deferred
    async def get(self, topic_name):
        node = await self._nodes.read(self.path(topic_name))
        return None if node is None else node[0]

    @deferred
    async def update(self, topic_name, changes: dict):
        path = self.path(topic_name)

        def change(document):
            for key, value in changes.items():
                if value is None:
                    document.pop(key, None)
                else:
                    document[key] = value
            return document
        if not await self._nodes.exists(path):
            await self._nodes.ensure(path, {})
        new = await self._nodes.update(path, change)
        if not new:
            try:
                await self._nodes.delete(path)
            except NotFoundError:
                pass
        return new

    def delete(self, topic_name):
        return self._nodes.delete(self.path(topic_name))
