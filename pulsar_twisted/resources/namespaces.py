"""
Namespace Policies documents (Pulsar's ``NamespaceResources``): ``/admin/policies/<tenant>/<ns>``.

Keys are a NamespaceName or ``"tenant/ns"``. Documents are dicts with Pulsar's field names (see
``policies.py`` for their model); every method returns a Deferred.
"""

from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.base import Documents

#: Notification kinds that change a namespace's policies.
_CHANGES = ("created", "modified", "deleted")


class NamespaceResources(Documents):
    """``NamespaceResources(store)`` over an IMetadataStore."""

    def path(self, namespace) -> str:
        return layout.namespace_path(namespace)

    def delete(self, namespace):
        """Remove the namespace's document and anything below it."""
        return self._nodes.delete_recursive(self.path(namespace))

    def list(self, tenant: str):
        """The namespace names (without the tenant) of ``tenant``."""
        return self._nodes.children(layout.tenant_path(tenant))

    def watch(self, callback) -> None:
        """Call ``callback(namespace, kind)`` ("tenant/ns"; "created", "modified" or "deleted")
        whenever a namespace's document changes in the store, whoever wrote it."""
        def notified(notification):
            # The kind first: every metadata write notifies every watcher (a topic creation
            # four times: two "created", two "children").
            if notification.kind in _CHANGES:
                namespace = layout.namespace_of_policies_path(notification.path)
                if namespace is not None:
                    callback(namespace, notification.kind)
        self.store.register_listener(notified)
