"""
Topic-level policies (Pulsar's PIP-39 ``TopicPolicies``): ``/admin/topic-policies/<tenant>/<ns>/
<domain>/<topic>``, one JSON document per topic, keyed by its partitioned base name (a partition
has its partitioned topic's policies, as in Pulsar).

A document holds only the policies set on the topic, with the field names (and value shapes) of
the namespace Policies document (``policies.NAMESPACE_POLICIES``), so that the namespace's
parsers resolve it over the namespace's values (``NamespacePolicies.from_json(..., base=...)``).
Pulsar stores them as events in each namespace's ``__change_events`` topic; here they are
metadata, read once per namespace by each broker and watched, like the namespace's own.
"""

from twisted.logger import Logger

from pulsar_twisted.metadata import layout
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError
from pulsar_twisted.resources.base import (
    UPDATE_ATTEMPTS, ConcurrentModificationError, CorruptMetadataError, Documents, deferred)
from pulsar_twisted.resources.policies import to_json

log = Logger()

#: Notification kinds that change a topic's policies.
_CHANGES = ("created", "modified", "deleted")


class TopicPoliciesResources(Documents):
    """``TopicPoliciesResources(store)``: keys are TopicNames (any partition of a topic names
    its partitioned topic's document)."""

    def path(self, name) -> str:
        return layout.topic_policies_path(name)

    @deferred
    async def update(self, name, changes: dict) -> dict:
        """Set each ``field: value`` of ``changes`` (``None`` removes the field; a callable gets
        the field's current value, or None, and returns the new one: a map's entry changed
        within the same compare-and-set, not over another writer's): the node made when missing
        and deleted once empty. Returns the new document. An unreadable document is replaced
        (logged)."""
        path = self.path(name)
        for _ in range(UPDATE_ATTEMPTS):
            current = await self._read(path)
            document = dict(current[0]) if current is not None else {}
            for key, value in changes.items():
                if callable(value):
                    value = value(document.get(key))
                if value is None:
                    document.pop(key, None)
                else:
                    document[key] = value
            try:
                if current is None:
                    if document:
                        await self._nodes.create(path, document)
                elif not document:
                    await self.store.delete(path, expected_version=current[1].version)
                else:
                    await self.store.put(path, to_json(document),
                                         expected_version=current[1].version)
                return document
            except (AlreadyExistsError, NotFoundError, BadVersionError):
                continue
        raise ConcurrentModificationError(f"concurrent modification of {path}")

    async def _read(self, path):
        """``(document, stat)`` or None; an unreadable node (not a JSON object) reads as an empty
        document with a warning, so that one bad node neither stops its namespace's topics nor
        resists being written again."""
        try:
            node = await self._nodes.read(path)
        except CorruptMetadataError:
            node = None
            raw = await self.store.get(path)
            if raw is not None:
                log.warn("topic policies at {path} are not JSON; ignored", path=path)
                return {}, raw[1]
        if node is not None and not isinstance(node[0], dict):
            log.warn("topic policies at {path} are not a JSON object; ignored", path=path)
            return {}, node[1]
        return node

    @deferred
    async def read(self, name):
        """``get`` for the broker: an unreadable document reads as none (logged)."""
        node = await self._read(self.path(name))
        return node[0] if node is not None and node[0] else None

    @deferred
    async def delete(self, name) -> None:
        """Forget every policy of the topic (it was deleted)."""
        try:
            await self.store.delete(self.path(name))
        except NotFoundError:
            pass

    @deferred
    async def delete_namespace(self, namespace) -> None:
        """Forget the policies of every topic of ``namespace`` (it was deleted: a namespace made
        again with its name must not find them)."""
        try:
            await self.store.delete_recursive(layout.topic_policies_namespace_path(namespace))
        except NotFoundError:
            pass

    @deferred
    async def of_namespace(self, namespace) -> dict:
        """``{"domain://tenant/ns/topic": document}`` of every topic of ``namespace`` with
        policies."""
        documents = {}
        root = layout.topic_policies_namespace_path(namespace)
        for domain in await _children(self.store, root):
            for topic in await _children(self.store, f"{root}/{domain}"):
                node = await self._read(f"{root}/{domain}/{topic}")
                if node is not None and node[0]:
                    documents[f"{domain}://{namespace}/{topic}"] = node[0]
        return documents

    def watch(self, callback) -> None:
        """Call ``callback(namespace, topic, kind)`` ("tenant/ns", "domain://tenant/ns/topic";
        "created", "modified" or "deleted") whenever a topic's policies change in the store."""
        def notified(notification):
            if notification.kind in _CHANGES:
                found = layout.topic_of_policies_path(notification.path)
                if found is not None:
                    callback(found[0], found[1], notification.kind)
        self.store.register_listener(notified)


async def _children(store, path) -> list:
    try:
        return list(await store.get_children(path))
    except NotFoundError:
        return []
