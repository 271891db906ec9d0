"""
Which namespaces exist, as the broker's request path asks it: every lookup, partition-metadata
request and topic load checks its namespace first.
"""

from twisted.internet import defer

from pulsar_twisted.common import errors


class KnownNamespaces:
    """
    ``check(namespace)`` fails with TopicNotFound unless the namespace exists. A namespace seen to
    exist is remembered until the store tells of its deletion (Pulsar answers from its watched
    policies cache likewise): one store read per namespace instead of one per request.
    ``namespaces``: a ``NamespaceResources``.
    """

    def __init__(self, namespaces):
        self.namespaces = namespaces
        self._seen = set()
        namespaces.watch(self._changed)

    def check(self, namespace) -> defer.Deferred:
        key = str(namespace)
        if key in self._seen:
            return defer.succeed(None)

        def found(exists):
            if not exists:
                raise errors.TopicNotFound(f"Namespace {namespace} does not exist")
            self._seen.add(key)
        return self.namespaces.exists(namespace).addCallback(found)

    def known(self, namespace) -> bool:
        """True when ``check(namespace)`` would pass at once (the namespace is known to exist):
        callers on the per-creation paths then skip its Deferred (issue 14, item 4)."""
        return str(namespace) in self._seen

    def _changed(self, namespace: str, kind: str) -> None:
        if kind == "deleted":
            self._seen.discard(namespace)
