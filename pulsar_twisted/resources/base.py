"""
JSON documents in the metadata store, read and written with versioned compare-and-set: the one
place where resource documents become bytes and back (Pulsar's ``BaseResources``).

Every public method returns a Deferred (so that ``inlineCallbacks`` and ``async`` callers alike can
wait on it). Failures are the metadata store's (``NotFoundError``, ``AlreadyExistsError``,
``NotEmptyError``), ``CorruptMetadataError`` for a node that is not JSON, and
``ConcurrentModificationError`` when an update lost every compare-and-set race.
"""

import functools

from twisted.internet import defer

from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError
from pulsar_twisted.resources.policies import from_json, to_json

#: Compare-and-set attempts of one update before it gives up.
UPDATE_ATTEMPTS = 5


class CorruptMetadataError(Exception):
    """A node whose bytes are not a JSON document."""


class ConcurrentModificationError(Exception):
    """An update kept losing its compare-and-set to concurrent writers."""


def deferred(method):
    """Expose a coroutine method as a method returning a Deferred."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        return defer.ensureDeferred(method(*args, **kwargs))
    return call


class JsonNodes:
    """``JsonNodes(store)``: JSON documents at arbitrary paths of an IMetadataStore."""

    def __init__(self, store):
        self.store = store

    @deferred
    async def read(self, path: str):
        """``(document, Stat)``, or None when there is no node."""
        node = await self.store.get(path)
        if node is None:
            return None
        try:
            return from_json(node[0]), node[1]
        except ValueError:
            raise CorruptMetadataError(f"corrupt metadata at {path}")

    @deferred
    async def exists(self, path: str) -> bool:
        return (await self.store.exists(path)) is not None

    def create(self, path: str, document):
        """Store a new node (``AlreadyExistsError`` if there is one)."""
        return self.store.put(path, to_json(document), expected_version=-1)

    @deferred
    async def ensure(self, path: str, document) -> bool:
        """Create the node unless it exists; True if this call created it. Losing the race to
        another writer is not a failure (the node exists either way)."""
        if await self.store.exists(path) is not None:
            return False
        try:
            await self.store.put(path, to_json(document), expected_version=-1)
            return True
        except AlreadyExistsError:
            return False

    @deferred
    async def update(self, path: str, change):
        """
        Read-modify-write: ``change(document)`` returns the new document, stored only if the node
        did not change meanwhile (else read again, up to UPDATE_ATTEMPTS). ``NotFoundError`` when
        there is no node; whatever ``change`` raises is raised unchanged. Returns the new document.
        """
        for _ in range(UPDATE_ATTEMPTS):
            current = await self.read(path)
            if current is None:
                raise NotFoundError(path)
            value, stat = current
            new = change(value)
            try:
                await self.store.put(path, to_json(new), expected_version=stat.version)
                return new
            except BadVersionError:
                continue
        raise ConcurrentModificationError(f"concurrent modification of {path}")

    def children(self, path: str):
        return self.store.get_children(path)

    def delete(self, path: str):
        return self.store.delete(path)

    def delete_recursive(self, path: str):
        return self.store.delete_recursive(path)


class Documents:
    """
    Typed access to one kind of document (Pulsar's ``BaseResources<T>``): a subclass names the
    node of each key in ``path(key)``; every method returns a Deferred.
    """

    def __init__(self, store):
        self.store = store
        self._nodes = JsonNodes(store)

    def path(self, key) -> str:
        raise NotImplementedError

    def get(self, key):
        """The stored document, or None when there is none (CorruptMetadataError when the node is
        not JSON)."""
        return self._nodes.read(self.path(key)).addCallback(lambda node: None if node is None else node[0])

    def exists(self, key):
        return self._nodes.exists(self.path(key))

    def create(self, key, document):
        """Store a new document (``AlreadyExistsError`` if there is one)."""
        return self._nodes.create(self.path(key), document)

    def ensure(self, key, document):
        """Create the document unless it exists (True if this call did)."""
        return self._nodes.ensure(self.path(key), document)

    def update(self, key, change):
        """Compare-and-set ``change(document) -> document`` (see ``JsonNodes.update``)."""
        return self._nodes.update(self.path(key), change)
