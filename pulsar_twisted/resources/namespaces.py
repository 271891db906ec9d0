"""
Namespace Policies documents (Pulsar's ``NamespaceResources``): ``/admin/policies/<tenant>/<ns>``.

``namespace`` arguments are a NamespaceName or ``"tenant/ns"``. Documents are dicts with Pulsar's
field names (see ``policies.py`` for their model); every method returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.base import JsonNodes, deferred

#: Notification kinds that change a namespace's policies.
_CHANGES = ("created", "modified", "deleted")


class NamespaceResources:
    """``NamespaceResources(store)`` over an IMetadataStore."""

    def __init__(self, store):
        self.store = store
        self._nodes = JsonNodes(store)

    def get(self, namespace):
        """The stored document, or None when the namespace does not exist (CorruptMetadataError
        when it is not JSON)."""
        d = self._nodes.read(layout.namespace_path(namespace))
        return d.addCallback(lambda node: None if node is None else node[0])

    def exists(self, namespace):
        return self._nodes.exists(layout.namespace_path(namespace))

    def create(self, namespace, document):
        """Store a new namespace's document (``AlreadyExistsError`` if it exists)."""
        return self._nodes.create(layout.namespace_path(namespace), document)

    def ensure(self, namespace, document):
        """Create the namespace with ``document`` unless it exists (True if this call did)."""
        return self._nodes.ensure(layout.namespace_path(namespace), document)

    def update(self, namespace, change):
        """Compare-and-set ``change(document) -> document`` (see ``JsonNodes.update``)."""
        return self._nodes.update(layout.namespace_path(namespace), change)

    def delete(self, namespace):
        """Remove the namespace's document and anything below it."""
        return self._nodes.delete_recursive(layout.namespace_path(namespace))

    @deferred
    async def list(self, tenant: str) -> list:
        """The namespace names (without the tenant) of ``tenant``."""
        return await self._nodes.children(layout.tenant_path(tenant))

    def watch(self, callback) -> None:
        """Call ``callback(namespace, kind)`` ("tenant/ns"; "created", "modified" or "deleted")
        whenever a namespace's document changes in the store, whoever wrote it."""
        def notified(notification):
            namespace = layout.namespace_of_policies_path(notification.path)
            if namespace is not None and notification.kind in _CHANGES:
                callback(namespace, notification.kind)
        self.store.register_listener(notified)
