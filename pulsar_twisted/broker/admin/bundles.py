"""
Namespace bundles in the admin API (Pulsar's ``NamespacesBase`` unload and split, and
``PersistentTopicsBase`` bundle range): unloading a namespace or one bundle, splitting a bundle on
demand, and naming the bundle of a topic.

Cluster brokers act through their ``BundleOwnership`` (``broker.ownership``): the owner releases
a bundle itself; a non-owner asks the owner to (``request_unload``) and waits until the bundle is
free. A split runs on the owner: a non-owner answers 307 to it (``NotOwnedError``), as Pulsar
redirects, and a free bundle is taken first. A standalone broker owns every bundle: unloading
closes the bundle's topics, splitting only rewrites the boundaries.
"""

import json

from twisted.internet import task

from pulsar_twisted.broker.admin.base import AdminArea, namespace_key, read_or_404
from pulsar_twisted.broker.admin.errors import Conflict, PreconditionFailed
from pulsar_twisted.broker.loadbalance import split as splits
from pulsar_twisted.broker.loadbalance.decisions import DecisionLog
from pulsar_twisted.broker.ownership import NotOwnedError, bundle_for, topic_hash, unload_bundle
from pulsar_twisted.resources.base import ConcurrentModificationError
from pulsar_twisted.resources.policies import DEFAULT_NUM_BUNDLES, boundaries_of_policies

#: How long an admin unload through another broker waits for the bundle to be free.
UNLOAD_WAIT_SECONDS = 30.0
_POLL = 0.05


def _disabled(raw: bytes) -> bool:
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("disabled"))


class BundlesAdmin(AdminArea):
    """``BundlesAdmin(context, decisions=None)``; ``decisions`` (a ``DecisionLog``, the load
    manager's in a cluster broker; else one of its own) records the splits and unloads asked
    through the API."""

    def __init__(self, context, decisions=None):
        super().__init__(context)
        self.decisions = decisions if decisions is not None else DecisionLog(
            context.clock, context.config.loadBalancerDecisionsMaxEntries)

    @property
    def ownership(self):
        """The broker's BundleOwnership, None standalone."""
        ownership = getattr(self.broker, "ownership", None)
        return ownership if hasattr(ownership, "release") else None

    async def bounds(self, tenant: str, ns: str) -> list:
        key = namespace_key(tenant, ns)
        policies = await read_or_404(self.context.namespaces.get(key), "Namespace does not exist")
        try:
            return boundaries_of_policies(policies)
        except (ValueError, TypeError):
            return boundaries_of_policies({"bundles": {"numBundles": DEFAULT_NUM_BUNDLES}})

    async def bundle(self, tenant: str, ns: str, range_name: str):
        """The NamespaceBundle ``range_name`` names, which must be a current bundle (412)."""
        bounds = await self.bounds(tenant, ns)
        try:
            bundle = splits.parse_range(f"{tenant}/{ns}", range_name)
        except ValueError:
            raise PreconditionFailed(f"Invalid bundle range {range_name}")
        if bundle not in splits.bundles_of(bundle.namespace, bounds):
            raise PreconditionFailed(f"Invalid bundle range {range_name}")
        return bundle

    # ---------------------------------------------------------------- unload
    async def unload_namespace(self, tenant: str, ns: str) -> None:
        """Unload every bundle of the namespace (those nobody owns are skipped)."""
        bounds = await self.bounds(tenant, ns)
        for bundle in splits.bundles_of(f"{tenant}/{ns}", bounds):
            await self._unload(bundle, "admin unload of the namespace")

    async def unload_bundle(self, tenant: str, ns: str, range_name: str) -> None:
        """Unload one bundle: its topics are closed where they are served and its ownership
        released, so that the next lookup places it anew. Nobody owning it is not an error."""
        await self._unload(await self.bundle(tenant, ns, range_name), "admin unload of the bundle")

    async def _unload(self, bundle, reason: str) -> None:
        ownership = self.ownership
        if ownership is None:
            await unload_bundle(self.broker, bundle)
            return
        if ownership.owns(bundle):
            await ownership.release(bundle)
        elif await ownership.request_unload(bundle):
            await self._wait_free(bundle)
        else:
            return
        self._record("unload", bundle, reason)

    async def _wait_free(self, bundle) -> None:
        """Until the owner released ``bundle`` (its node gone or taken anew), bounded."""
        waited = 0.0
        while waited < UNLOAD_WAIT_SECONDS:
            node = await self.context.store.get(bundle.path)
            if node is None or not _disabled(node[0]):
                return
            await task.deferLater(self.clock, _POLL, lambda: None)
            waited += _POLL
        raise Conflict(f"Namespace bundle {bundle} was not unloaded within {UNLOAD_WAIT_SECONDS:g}s")

    # ---------------------------------------------------------------- split
    async def split_bundle(self, tenant: str, ns: str, range_name: str, unload: bool = False,
                           algorithm: str = "") -> None:
        """Split a bundle in two (``algorithm``: range_equally_divide, the default, or
        topic_count_equally_divide); ``unload`` releases both halves afterwards."""
        bundle = await self.bundle(tenant, ns, range_name)
        algorithm = algorithm or self.context.config.defaultNamespaceBundleSplitAlgorithm
        if algorithm not in splits.ALGORITHMS:
            raise PreconditionFailed(f"Unsupported namespace bundle split algorithm {algorithm}, "
                                     f"supported: {', '.join(splits.ALGORITHMS)}")
        hashes = [topic_hash(name) for name in self.broker.topics]
        try:
            point = splits.split_point(bundle, algorithm, hashes)
        except splits.SplitRefused as e:
            raise PreconditionFailed(str(e))
        halves = await self._split(bundle, point)
        self._record("split", bundle, f"admin split ({algorithm}) into {halves[0].range_name} and "
                                      f"{halves[1].range_name}")
        if unload:
            for half in halves:
                await self._unload(half, "admin split with unload")

    async def _split(self, bundle, point):
        ownership = self.ownership
        maximum = self.context.config.loadBalancerNamespaceMaximumBundles
        try:
            if ownership is None:
                return await self._split_standalone(bundle, point, maximum)
            if not ownership.owns(bundle):
                owner = await ownership.acquire(bundle)
                if owner is not None:
                    raise NotOwnedError(f"Namespace bundle {bundle} is served by "
                                        f"{owner.get('nativeUrl')}", owner)
            return await splits.split_bundle(ownership, self.context.namespaces, bundle, point, maximum)
        except splits.SplitRefused as e:
            raise PreconditionFailed(str(e))
        except ConcurrentModificationError:
            raise Conflict("Concurrent modification")

    async def _split_standalone(self, bundle, point, maximum):
        def change(policies):
            bounds = splits.split_bounds(boundaries_of_policies(policies), bundle, point)
            if maximum and len(bounds) - 1 > maximum:
                raise splits.SplitRefused(f"namespace {bundle.namespace} has {maximum} bundles already")
            return splits.policies_with_bounds(policies, bounds)
        await self.context.namespaces.update(bundle.namespace, change)
        return splits.bundles_of(bundle.namespace, [bundle.lower, point, bundle.upper])

    # ---------------------------------------------------------------- topics
    async def bundle_range(self, name) -> str:
        """The range (``0x..._0x...``) of the bundle ``name`` (a TopicName) falls in."""
        await self.check_namespace(name)
        bounds = await self.bounds(name.tenant, name.namespace)
        return bundle_for(str(name.namespace_name), bounds, str(name)).range_name

    # ---------------------------------------------------------------- the load manager
    def load_decisions(self, kind: str = "") -> list:
        """The decisions log (oldest first), only those of ``kind`` when given."""
        return self.decisions.entries(kind)

    def _record(self, kind: str, bundle, reason: str) -> None:
        config = self.context.config
        self.decisions.record(kind, str(bundle), reason,
                              broker=f"{config.advertisedAddress}:{config.webServicePort}")
