"""
Records kept on the platform's metadata store: function state (every worker's, and the
instances' through their worker), and Pulsar IO's connector records (``io_worker.py``). A
restarted worker reads them again (``load_all``); instances' state outlives them.

Layout (one node per record, JSON unless said otherwise)::

    /functions/state/{tenant}/{namespace}/{name}/{key} {"value": base64 or null, "counter": n or
                                                       null, "version": n}
    /functions/io/{sources,sinks}/metadata/...         connector records (``root`` moved)

Function metadata, packages and assignments are not here: they live on the ``public/functions``
topics, as Pulsar keeps them (``platform.py``, ``worker.py``). ``put_package`` (bounded by
``MAX_PACKAGE_BYTES``, ZooKeeper's 1 MiB ``jute.maxbuffer``; larger answers 413) is for records
of this store's layout only.
"""

import base64
import json
from urllib.parse import quote, unquote

from pulsar_twisted.functions.errors import PackageTooLarge
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError

ROOT = "/functions"
MAX_PACKAGE_BYTES = 900 * 1024


def _seg(text: str) -> str:
    return quote(text, safe="")


def _function_path(kind: str, tenant: str, namespace: str, name: str, root: str = ROOT) -> str:
    return f"{root}/{kind}/{_seg(tenant)}/{_seg(namespace)}/{_seg(name)}"


class FunctionStore:
    """The records above over an ``IMetadataStore``; every method returns a Deferred (coroutines).
    ``root`` moves the whole layout (Pulsar IO keeps its sources and sinks under
    ``/functions/io/sources`` and ``/functions/io/sinks``)."""

    def __init__(self, store, root: str = ROOT):
        self.store = store
        self.root = root

    def _path(self, kind, tenant, namespace, name) -> str:
        return _function_path(kind, tenant, namespace, name, self.root)

    # ---------------------------------------------------------------- metadata
    async def put_record(self, tenant, namespace, name, record: dict) -> None:
        await self.store.put(self._path("metadata", tenant, namespace, name),
                             json.dumps(record, sort_keys=True).encode())

    async def get_record(self, tenant, namespace, name):
        found = await self.store.get(self._path("metadata", tenant, namespace, name))
        return None if found is None else json.loads(found[0])

    async def delete_function(self, tenant, namespace, name) -> None:
        """Metadata, package and state of the function, gone."""
        for kind in ("state", "packages", "metadata"):
            await self.store.delete_recursive(self._path(kind, tenant, namespace, name))

    async def load_all(self) -> list:
        """Every function record, as ``[(tenant, namespace, name, record)]`` sorted by name."""
        out = []
        base = f"{self.root}/metadata"
        for tenant in await self.store.get_children(base):
            for namespace in await self.store.get_children(f"{base}/{tenant}"):
                for name in await self.store.get_children(f"{base}/{tenant}/{namespace}"):
                    found = await self.store.get(f"{base}/{tenant}/{namespace}/{name}")
                    if found is not None:
                        out.append(tuple(unquote(x) for x in (tenant, namespace, name))
                                   + (json.loads(found[0]),))
        return out

    # ---------------------------------------------------------------- packages
    async def put_package(self, tenant, namespace, name, data: bytes) -> None:
        if len(data) > MAX_PACKAGE_BYTES:
            raise PackageTooLarge(f"Function package of {len(data)} bytes exceeds the "
                                  f"{MAX_PACKAGE_BYTES} bytes this worker stores")
        await self.store.put(self._path("packages", tenant, namespace, name), data)

    async def get_package(self, tenant, namespace, name):
        found = await self.store.get(self._path("packages", tenant, namespace, name))
        return None if found is None else found[0]

    # ---------------------------------------------------------------- state
    def _state_path(self, tenant, namespace, name, key):
        return f"{self._path('state', tenant, namespace, name)}/{_seg(key)}"

    async def get_state(self, tenant, namespace, name, key):
        """``{"value": bytes or None, "counter": int or None, "version": int}`` or None."""
        found = await self.store.get(self._state_path(tenant, namespace, name, key))
        if found is None:
            return None
        record = json.loads(found[0])
        value = record.get("value")
        return {"value": None if value is None else base64.b64decode(value),
                "counter": record.get("counter"), "version": found[1].version}

    async def put_state(self, tenant, namespace, name, key, value: bytes) -> None:
        record = {"value": base64.b64encode(value).decode(), "counter": None}
        await self.store.put(self._state_path(tenant, namespace, name, key),
                             json.dumps(record).encode())

    async def delete_state(self, tenant, namespace, name, key) -> None:
        try:
            await self.store.delete(self._state_path(tenant, namespace, name, key))
        except NotFoundError:
            pass

    async def incr_counter(self, tenant, namespace, name, key, amount: int) -> int:
        """Add ``amount`` atomically (versioned put, retried on a concurrent change): instances of
        one function share their counters, as Pulsar's table service does."""
        path = self._state_path(tenant, namespace, name, key)
        while True:
            found = await self.store.get(path)
            current, version = 0, -1
            if found is not None:
                current = json.loads(found[0]).get("counter") or 0
                version = found[1].version
            record = {"value": None, "counter": current + amount}
            try:
                await self.store.put(path, json.dumps(record).encode(), expected_version=version)
                return current + amount
            except (AlreadyExistsError, BadVersionError, NotFoundError):
                continue

