"""
Namespace-bundle ownership: which broker serves which topics when several share one cluster.

Bundles. A namespace's topics are split into ``numBundles`` bundles (its policies'
``bundles.boundaries``, else an even split of ``numBundles``, default 4), contiguous ranges of the
32-bit hash space ``[0x00000000, 0xffffffff]``: bundle i holds hashes ``lower <= h < upper``, the last
one also ``h == 0xffffffff``. A topic's hash is **CRC32 (zlib, IEEE polynomial) of its full name**
(``persistent://tenant/ns/local``, partitions with their ``-partition-N`` suffix, so the partitions of
one topic spread over bundles). Pulsar's default is Murmur3-32 of the same string; CRC32 was chosen
because it is in the standard library and C-speed. Mixing this broker with Java brokers in one cluster
is not supported anyway, so the choice only has to be the same on every broker of the cluster.

Ownership. A bundle is owned by the broker holding the ephemeral node
``/namespace/<tenant>/<ns>/0x<lower>_0x<upper>`` (Pulsar's path); its value is the owner's URLs as
JSON (Pulsar's ``NamespaceEphemeralData``: ``nativeUrl``, ``nativeUrlTls``, ``httpUrl``,
``httpUrlTls``, ``disabled``). A broker asked about a topic whose bundle nobody owns creates the node
(the create is the lock: exactly one racing broker wins); the node vanishes with the owner's
ZooKeeper session, so a dead broker's bundles become free ``zooKeeperSessionTimeoutMillis`` later.

Losing a bundle. A broker learns that it lost a bundle when its node is deleted (store notification:
session expiry seen after reconnecting, or an admin) or when the periodic check (every
``check_interval`` seconds) finds the node gone or holding another broker's data. It then calls
``on_bundle_lost(bundle)``: the broker closes those topics, their clients reconnect and look up
again, and the next owner opens the managed ledgers, which fences this broker's ledgers.

Unloading (``release``; Pulsar's unload). The owner first rewrites its node with ``disabled: true``
(lookups anywhere answer ServiceNotReady, so that clients retry rather than reload the topics here),
closes the bundle's topics (``on_bundle_unload``, awaited), then deletes the node; the next lookup
places the bundle anew. Any broker asks the owner to unload by setting ``disabled`` in the owner's
node itself (``request_unload``; compare-and-set): the owner sees its own data disabled (store
notification, else the periodic check) and releases the bundle the same way.

Splitting (``replace``). The owner creates the halves' nodes first, then the caller rewrites the
boundaries in the namespace policies, then the parent's node goes: at every moment each hash of the
range is owned by this broker under the old or the new boundaries, so the loaded topics stay.

Placement. Without an owner, ``placement(bundle)`` (``broker/loadbalance``) may name another
broker: a non-authoritative lookup is redirected there without taking the bundle. As Pulsar's
NamespaceService does, the redirect carries the placement's ``authoritative`` flag: False when it
only forwards the lookup to the leader broker (which places the bundle), True when it names the
broker chosen to own it; the client's authoritative lookup there (or its producer/consumer) takes
the bundle without placing it again, so a lookup is redirected at most twice.

Only lookups, topic loads and the check consult the store; publishing and dispatch never do.
"""

import itertools
import json
import zlib
from dataclasses import dataclass

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from pulsar_twisted.broker.advertised import listeners_from_json
from pulsar_twisted.common import errors
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError, BadVersionError, MetadataStoreError, NotFoundError)
from pulsar_twisted.metadata.layout import namespace_of_policies_path, ownership_path
from pulsar_twisted.resources.base import CorruptMetadataError
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.policies import (
    DEFAULT_NUM_BUNDLES, FULL_RANGE_UPPER, boundaries_of_policies, even_boundaries)

log = Logger()


def topic_hash(topic: str) -> int:
    """The 32-bit hash placing ``topic`` (its full name) in a bundle: CRC32 (see the module doc)."""
    return zlib.crc32(topic.encode("utf-8")) & 0xFFFFFFFF


def load_topics(broker, bundle, topics) -> None:
    """Load ``topics`` (names) of ``bundle``, which this broker just took (the
    ``on_bundle_taken`` of a cluster broker's BundleOwnership): topics that no longer exist are
    not created, failures are logged and left to the clients' own retries."""
    for topic in topics:
        if not topic.startswith("persistent://"):
            continue    # a non-persistent topic has nothing to recover: it exists with its clients
        d = broker.get_topic(topic, create=False)
        d.addErrback(lambda f, topic=topic: log.info(
            "{topic} not loaded ahead of its clients: {error}", topic=topic,
            error=f.getErrorMessage()))


def unload_bundle(broker, bundle) -> defer.Deferred:
    """Unload the topics of ``broker`` (a BrokerService) that fall in ``bundle`` (the
    ``on_bundle_lost`` / ``on_bundle_unload`` of a cluster broker's BundleOwnership): their clients
    are told to reconnect. Fires once every one is closed."""
    namespace = bundle.namespace
    keys = [key for key, topic in list(broker.topics.items())
            if str(topic.topic_name.namespace_name) == namespace and bundle.includes(topic_hash(key))]
    return defer.gatherResults([broker.unload_topic(key) for key in keys]).addCallback(lambda _: None)


@dataclass(frozen=True)
class NamespaceBundle:
    """One hash range of a namespace (``namespace`` is "tenant/ns")."""

    namespace: str
    lower: int
    upper: int

    @property
    def range_name(self) -> str:
        return "0x%08x_0x%08x" % (self.lower, self.upper)

    @property
    def path(self) -> str:
        return ownership_path(self.namespace, self.range_name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range_name}"

    def includes(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or (
            hash_value == self.upper == FULL_RANGE_UPPER)


def bundle_for(namespace: str, bounds: list, topic: str) -> NamespaceBundle:
    """The bundle of ``bounds`` (sorted ints, see above) that ``topic`` hashes into."""
    h = topic_hash(topic)
    lo, hi = 0, len(bounds) - 2
    while lo < hi:      # the last i with bounds[i] <= h
        mid = (lo + hi + 1) // 2
        if bounds[mid] <= h:
            lo = mid
        else:
            hi = mid - 1
    return NamespaceBundle(namespace, bounds[lo], bounds[lo + 1])


def is_bundle_of(bounds: list, bundle: NamespaceBundle) -> bool:
    """``bundle`` is one of ``bounds``' bundles. Read after finding a bundle's node absent, the
    boundaries show the split that freed it, if any: a split writes them before deleting the
    parent's node, and ZooKeeper orders one session's reads."""
    return any(lower == bundle.lower and upper == bundle.upper for lower, upper in zip(bounds, bounds[1:]))


class StaleBundleError(errors.ServiceNotReady):
    """The bundle a lookup computed from cached boundaries was split meanwhile (retryable)."""


class NotOwnedError(errors.ServiceNotReady):
    """Another broker owns the topic's bundle. ServiceNotReady on the binary protocol (the client
    looks the topic up again); the admin API answers 307 to ``owner["httpUrl"]`` (as Pulsar)."""

    def __init__(self, message: str, owner: dict):
        super().__init__(message)
        self.owner = owner


class LookupResult(tuple):
    """``(broker_url, broker_url_tls)`` plus ``redirect``: True when another broker owns the topic
    (binary LOOKUP answers Redirect), False when the asking client should connect here."""

    def __new__(cls, broker_url: str, broker_url_tls: str = "", redirect: bool = False,
                http_url: str = "", http_url_tls: str = "", listeners=None,
                authoritative: bool = True, placed: bool = False):
        self = super().__new__(cls, (broker_url, broker_url_tls))
        self.redirect = redirect
        #: The answer's ``authoritative`` flag: False when the lookup is only forwarded to the
        #: leader broker for placement (the client asks there without the flag).
        self.authoritative = authoritative
        #: True for a placement's redirect (the bundle is free; HTTP lookup answers 307), False
        #: for an owner's URLs.
        self.placed = placed
        self.http_url = http_url
        self.http_url_tls = http_url_tls
        #: The serving broker's advertised listeners (``{name: AdvertisedListener}``), or None
        #: when they are this broker's own (``BrokerService.listeners``).
        self.listeners = listeners
        return self


class IOwnership(Interface):
    """Who serves a topic. Methods take a ``TopicName`` and return Deferreds."""

    def lookup(name, authoritative=False):
        """Deferred[LookupResult]: this broker (taking the bundle if it is free) or the owner;
        ``authoritative``: the client was redirected here, take a free bundle (no placement)."""

    def check_owned(name):
        """Deferred firing once this broker owns ``name``'s bundle (taking it if free), with a
        token for ``still_owns``; ``errors.ServiceNotReady`` when another broker owns it."""

    def still_owns(token):
        """True while the ownership ``check_owned`` found is held without interruption (a bundle
        lost and taken again gives a new token: what was opened under the old one is stale)."""


@implementer(IOwnership)
class LocalOwnership:
    """Standalone: this broker owns every bundle; nothing is written to the store."""

    def __init__(self, broker_url: str, broker_url_tls: str = ""):
        self.result = LookupResult(broker_url, broker_url_tls)

    def lookup(self, name, authoritative: bool = False):
        return defer.succeed(self.result)

    def check_owned(self, name):
        return defer.succeed(None)

    def still_owns(self, token) -> bool:
        return True


@implementer(IOwnership)
class BundleOwnership:
    """
    Ephemeral-node ownership over an ``IMetadataStore`` (see the module docstring).

    ``urls``: this broker's ``nativeUrl``, ``nativeUrlTls``, ``httpUrl``, ``httpUrlTls`` (the node's
    value, also how this broker recognises its own nodes). ``on_bundle_lost(bundle)`` is called once
    per bundle this broker stops owning. Call ``start()`` / ``stop()``.
    """

    #: Topics remembered per bundle for ``on_bundle_taken`` (a bound on what one take-over loads).
    max_wanted_topics = 10000
    #: Seconds a redirected lookup keeps its bundle wanted.
    wanted_seconds = 120.0

    def __init__(self, store, clock, urls: dict, on_bundle_lost=None, check_interval: float = 5.0,
                 on_bundle_unload=None, placement=None, on_bundle_taken=None, owner_alive=None,
                 hold_seconds: float = 0.0):
        self.store = store
        self.namespaces = NamespaceResources(store)
        self.clock = clock
        self.urls = {"nativeUrl": urls.get("nativeUrl", ""), "nativeUrlTls": urls.get("nativeUrlTls", ""),
                     "httpUrl": urls.get("httpUrl", ""), "httpUrlTls": urls.get("httpUrlTls", ""),
                     "disabled": False, "advertisedListeners": urls.get("advertisedListeners") or {}}
        self._value = json.dumps(self.urls, sort_keys=True).encode()
        self.on_bundle_lost = on_bundle_lost
        #: ``on_bundle_unload(bundle)`` -> Deferred: close the bundle's topics (a graceful unload);
        #: ``on_bundle_lost`` is used when it is None.
        self.on_bundle_unload = on_bundle_unload
        #: ``placement(bundle)`` -> Deferred[urls dict of the chosen broker, or None: this one];
        #: the dict's ``authoritative`` (default True) is the redirect's flag.
        self.placement = placement
        self.check_interval = check_interval
        #: path -> Deferreds waiting for the release of that owned bundle (disabled, topics closing).
        self._unloading = {}
        #: path -> NamespaceBundle, the bundles this broker holds.
        self.owned = {}
        #: path -> number of the acquisition (a bundle lost and taken again gets a new one).
        self._acquired = {}
        self._acquisitions = itertools.count(1)
        self._bounds = {}           # namespace -> bounds, dropped when its policies change
        #: ``on_bundle_taken(bundle, topic_names)``: called once this broker took a bundle as soon
        #: as its owner's node vanished, with the topics it had redirected clients to that owner for
        #: (see ``_take_over``).
        self.on_bundle_taken = on_bundle_taken
        #: path -> (bundle, {topic name: when last redirected}) of bundles other brokers own.
        self._wanted = {}
        #: ``owner_alive(owner data) -> Deferred[bool]``: False when the owner certainly is not
        #: running (its port refuses connections); lookups for its bundles then wait up to
        #: ``hold_seconds`` for its node to vanish instead of sending clients to it (``_lookup``).
        self.owner_alive = owner_alive
        self.hold_seconds = hold_seconds
        self._deletion_waiters = {}     # path -> [Deferred fired with True once it is deleted]
        self._alive_until = {}          # owner nativeUrl -> until when it counts as alive
        self._check_loop = None
        self._stopped = False
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self.check_interval > 0:
            self._check_loop = task.LoopingCall(self.check_now)
            self._check_loop.clock = self.clock
            self._check_loop.start(self.check_interval, now=False).addErrback(
                lambda f: log.failure("bundle ownership check loop stopped", f))

    def stop(self) -> defer.Deferred:
        """Stop checking and give every bundle back (delete the nodes) so that other brokers can
        take them at once instead of after the session timeout."""
        self._stopped = True
        if self._check_loop is not None and self._check_loop.running:
            self._check_loop.stop()
        owned, self.owned = list(self.owned.values()), {}
        self._acquired.clear()
        ds = [self.store.delete(b.path).addErrback(lambda f: None) for b in owned]
        return defer.gatherResults(ds).addCallback(lambda _: None)

    # ---------------------------------------------------------------- queries
    def bundle_of(self, name) -> defer.Deferred:
        """Deferred[NamespaceBundle] of a TopicName."""
        namespace = str(name.namespace_name)
        bounds = self._bounds.get(namespace)
        if bounds is not None:
            return defer.succeed(bundle_for(namespace, bounds, str(name)))
        return defer.Deferred.fromCoroutine(self._load_bundle(namespace, str(name)))

    async def _load_bundle(self, namespace, topic):
        return bundle_for(namespace, await self._read_bounds(namespace), topic)

    async def _read_bounds(self, namespace) -> list:
        """The namespace's boundaries read from the store now (and cached)."""
        bounds = even_boundaries(DEFAULT_NUM_BUNDLES)
        try:
            policies = await self.namespaces.get(namespace)
            if policies is not None:
                bounds = boundaries_of_policies(policies)
        except (CorruptMetadataError, ValueError, TypeError, AttributeError) as e:
            log.warn("namespace {ns}: {error}; using {n} even bundles", ns=namespace,
                     error=e, n=DEFAULT_NUM_BUNDLES)
        self._bounds[namespace] = bounds
        return bounds

    def owns(self, bundle: NamespaceBundle) -> bool:
        return bundle.path in self.owned

    def lookup(self, name, authoritative: bool = False) -> defer.Deferred:
        """Deferred[LookupResult]. ``authoritative``: the client was sent here by another broker's
        placement, so a free bundle is taken here rather than placed again (no redirect loop)."""
        return defer.Deferred.fromCoroutine(self._lookup(name, authoritative))

    async def _lookup(self, name, authoritative=False, retry=True):
        try:
            return await self._lookup_once(name, authoritative)
        except StaleBundleError:
            if not retry:
                raise
            return await self._lookup(name, authoritative, retry=False)     # boundaries read now

    async def _lookup_once(self, name, authoritative):
        bundle = await self.bundle_of(name)
        owner = placed = None
        if not authoritative and self.placement is not None and bundle.path not in self.owned:
            owner = placed = await self._placed(bundle)
        if owner is None:
            owner = await self.acquire(bundle)
        if owner is not None and await self._owner_is_dead(owner):
            # Sent to a dead owner, the client would fail to connect and retry on its backoff,
            # which by the session expiry has grown to seconds: better answer once the bundle is
            # free (or give up waiting and redirect as usual).
            log.info("lookup of {topic}: owner {owner} refuses connections; waiting for its "
                     "bundle {bundle} to be released", topic=str(name),
                     owner=owner.get("nativeUrl"), bundle=str(bundle))
            if await self._node_deleted(bundle.path):
                owner, placed = await self.acquire(bundle), None
        if owner is None:
            return LookupResult(self.urls["nativeUrl"], self.urls["nativeUrlTls"],
                                http_url=self.urls["httpUrl"], http_url_tls=self.urls["httpUrlTls"])
        self._want(bundle, str(name))
        placed = placed is not None and owner is placed
        return LookupResult(owner.get("nativeUrl", ""), owner.get("nativeUrlTls", ""),
                            redirect=True, http_url=owner.get("httpUrl", ""),
                            http_url_tls=owner.get("httpUrlTls", ""),
                            listeners=listeners_from_json(owner.get("advertisedListeners")),
                            authoritative=bool(owner.get("authoritative", True)) if placed else True,
                            placed=placed)

    async def _placed(self, bundle):
        """The chosen broker's data when the bundle is free and placement names another broker
        (with ``authoritative``: False when that broker is the leader asked to place it)."""
        if await self.store.get(bundle.path) is not None:
            return None         # owned (or being unloaded): acquire() tells by whom
        try:
            chosen = await self.placement(bundle)
        except Exception:
            # No placement (reports unreadable...) must not fail the lookup: take it here.
            log.failure("placing bundle {bundle} failed; taking it here", bundle=str(bundle))
            return None
        if chosen is None or self._is_mine(chosen):
            return None
        return chosen

    def check_owned(self, name) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._check_owned(name))

    async def _check_owned(self, name):
        bundle = await self.bundle_of(name)
        try:
            owner = await self.acquire(bundle)
        except StaleBundleError:
            bundle = await self.bundle_of(name)
            owner = await self.acquire(bundle)
        if owner is not None:
            # Pulsar's answer to a producer/consumer on a broker that does not serve the topic:
            # the client treats it as retryable and looks the topic up again.
            raise NotOwnedError(
                f"Namespace bundle {bundle} is served by {owner.get('nativeUrl')}, not this broker",
                owner)
        return (bundle.path, self._acquired.get(bundle.path))

    def still_owns(self, token) -> bool:
        if token is None:
            return False
        path, acquisition = token
        return path in self.owned and self._acquired.get(path) == acquisition

    async def acquire(self, bundle: NamespaceBundle):
        """None when this broker owns ``bundle`` (now or already); else the owner's data (dict)."""
        if bundle.path in self._unloading:
            raise errors.ServiceNotReady(f"Namespace bundle {bundle} is being unloaded")
        if bundle.path in self.owned:
            return None
        if self._stopped:
            raise errors.ServiceNotReady("broker is shutting down")
        for _ in range(3):
            node = await self.store.get(bundle.path)
            if node is not None:
                owner = self._parse(node[0], bundle)
                if owner.get("disabled"):
                    # Being unloaded (Pulsar's disabled NamespaceEphemeralData): retry later.
                    raise errors.ServiceNotReady(f"Namespace bundle {bundle} is being unloaded")
                if owner == self.urls:
                    # Ours (created before a reconnect that kept the session, or by a racing call).
                    self._owned(bundle)
                    return None
                return owner
            if not is_bundle_of(await self._read_bounds(bundle.namespace), bundle):
                # Split meanwhile (see ``is_bundle_of``): the cached boundaries were stale.
                raise StaleBundleError(f"Namespace bundle {bundle} was split; look the topic up again")
            try:
                await self.store.put(bundle.path, self._value, expected_version=-1, ephemeral=True)
            except AlreadyExistsError:
                continue        # another broker won the race: read who
            self._owned(bundle)
            return None
        raise errors.ServiceNotReady(f"ownership of bundle {bundle} keeps changing")

    def _owned(self, bundle):
        self._wanted.pop(bundle.path, None)
        if bundle.path not in self.owned:
            self.owned[bundle.path] = bundle
            self._acquired[bundle.path] = next(self._acquisitions)
            log.info("this broker now owns bundle {bundle}", bundle=str(bundle))

    def _is_mine(self, owner: dict) -> bool:
        """``owner`` names this broker (its ``disabled`` flag aside)."""
        return all(owner.get(k) == self.urls[k]
                   for k in ("nativeUrl", "nativeUrlTls", "httpUrl", "httpUrlTls"))

    @staticmethod
    def _parse(raw: bytes, bundle) -> dict:
        try:
            data = json.loads(raw)
            if isinstance(data, dict):
                owner = {k: data.get(k, "" if k != "disabled" else False)
                         for k in ("nativeUrl", "nativeUrlTls", "httpUrl", "httpUrlTls", "disabled")}
                # Pulsar's NamespaceEphemeralData field; absent in nodes of older brokers.
                owner["advertisedListeners"] = data.get("advertisedListeners") or {}
                return owner
        except ValueError:
            pass
        log.warn("bundle {bundle}: unreadable ownership data {raw!r}", bundle=str(bundle), raw=raw[:200])
        return {"nativeUrl": "", "nativeUrlTls": "", "httpUrl": "", "httpUrlTls": "", "disabled": True,
                "advertisedListeners": {}}

    #: Seconds an owner found alive is not probed again (a probe is a TCP connection: redirected
    #: lookups of many topics must not each cost one).
    alive_seconds = 1.0

    async def _owner_is_dead(self, owner) -> bool:
        if self.owner_alive is None or self.hold_seconds <= 0 or self._stopped:
            return False
        url = owner.get("nativeUrl", "")
        if self._alive_until.get(url, 0) > self.clock.seconds():
            return False
        try:
            alive = await self.owner_alive(owner)
        except Exception:
            return False    # cannot tell: redirect as usual
        if alive:
            if len(self._alive_until) > 1000:
                self._alive_until.clear()
            self._alive_until[url] = self.clock.seconds() + self.alive_seconds
        return not alive

    def _node_deleted(self, path) -> defer.Deferred:
        """Deferred[bool]: True once the node at ``path`` is deleted (or found gone), False after
        ``hold_seconds``."""
        d = defer.Deferred()
        waiters = self._deletion_waiters.setdefault(path, [])
        waiters.append(d)

        def fire(deleted):
            if d in waiters:
                waiters.remove(d)
                if not waiters:
                    self._deletion_waiters.pop(path, None)
            if not d.called:
                d.callback(deleted)
        timer = self.clock.callLater(self.hold_seconds, fire, False)
        d.addBoth(lambda result: (timer.cancel() if timer.active() else None, result)[1])
        # Deleted between the read that found the owner and now: no notification will come.
        self.store.get(path).addCallbacks(lambda node: fire(True) if node is None else None,
                                          lambda f: fire(False))
        return d

    def _fire_deletion_waiters(self, path) -> None:
        for d in self._deletion_waiters.pop(path, []):
            if not d.called:
                d.callback(True)

    # ---------------------------------------------------------------- taking orphaned bundles
    def _want(self, bundle, topic: str) -> None:
        """Remember that clients were sent to another broker for ``topic`` of ``bundle``."""
        entry = self._wanted.get(bundle.path)
        if entry is None:
            entry = self._wanted[bundle.path] = (bundle, {})
        topics = entry[1]
        if topic in topics or len(topics) < self.max_wanted_topics:
            topics[topic] = self.clock.seconds()

    def _take_over(self, path) -> None:
        """
        The node of a bundle this broker sent clients away for was deleted (its owner's session
        expired, or it gave the bundle back): take the bundle now, like the lookup those clients
        will retry would, and hand its recently wanted topics to ``on_bundle_taken`` so that they
        are loaded (managed ledgers recovered, the old owner fenced) before the clients come back.
        The clients retry on their own backoff; without this, ownership and the topic load only
        start with that retry. With several brokers the creation of the node decides, as for
        lookups: the others find an owner and carry on redirecting.
        """
        bundle, topics = self._wanted.pop(path)
        horizon = self.clock.seconds() - self.wanted_seconds
        names = sorted(t for t, at in topics.items() if at >= horizon)
        if self._stopped or not names:
            return

        async def take():
            # With a load manager, its placement decides (a graceful unload moves load away on
            # purpose); taking the bundle here is only for when it names this broker.
            if self.placement is not None and await self._placed(bundle) is not None:
                return False
            return await self.acquire(bundle) is None

        def taken(ours):
            if not ours:
                return
            log.info("took bundle {bundle} as its owner left; loading {n} topics its clients use",
                     bundle=str(bundle), n=len(names))
            if self.on_bundle_taken is not None:
                self.on_bundle_taken(bundle, names)
        d = defer.Deferred.fromCoroutine(take())
        d.addCallback(taken)
        d.addErrback(lambda f: log.warn("could not take bundle {bundle}: {error}",
                                        bundle=str(bundle), error=f.getErrorMessage()))

    # ---------------------------------------------------------------- losing bundles
    def _on_notification(self, notification) -> None:
        path = notification.path
        if notification.kind == "deleted" and path in self.owned and path not in self._unloading:
            self._lost(path, "its ownership node was deleted")
        elif notification.kind == "modified" and path in self.owned and path not in self._unloading:
            self.store.get(path).addCallback(self._maybe_requested, path).addErrback(
                lambda f: log.warn("reading {path}: {error}", path=path, error=f.getErrorMessage()))
        elif notification.kind == "deleted" and path in self._wanted:
            self._take_over(path)
        elif notification.kind == "modified" and namespace_of_policies_path(path) is not None:
            # Bundle splits change the boundaries; reread them on the next lookup.
            self._bounds.pop(namespace_of_policies_path(path), None)
        if notification.kind == "deleted" and path in self._deletion_waiters:
            self._fire_deletion_waiters(path)

    def _on_session(self, state: str) -> None:
        # "lost" (metadata/zookeeper.py): every ownership node went with the session and another
        # broker may take the bundles now; stop serving them at once rather than at the next check.
        # They are not re-created on the new session: the next lookup acquires them like free ones.
        if state == "lost" and self.owned:
            for path in list(self.owned):
                self._lost(path, "the ZooKeeper session expired")

    def check_now(self) -> defer.Deferred:
        """Compare every owned bundle with its node; lose those that are gone or someone else's."""
        return defer.Deferred.fromCoroutine(self._check())

    async def _check(self):
        for path in list(self.owned):
            try:
                node = await self.store.get(path)
            except MetadataStoreError as e:
                # Cannot tell (store unreachable): keep serving; the session's fate decides.
                log.warn("bundle ownership check of {path} failed: {error}", path=path, error=e)
                return
            if path not in self.owned or path in self._unloading:
                continue
            if node is not None and self._maybe_requested(node, path):
                continue
            if node is None:
                self._lost(path, "its ownership node is gone (ZooKeeper session expired?)")
            elif self._parse(node[0], path) != self.urls:
                self._lost(path, "another broker owns it now")

    def _maybe_requested(self, node, path) -> bool:
        """True (and the release started) when ``node`` is this broker's, disabled by another
        broker's ``request_unload``."""
        bundle = self.owned.get(path)
        if node is None or bundle is None or path in self._unloading:
            return False
        owner = self._parse(node[0], bundle)
        if not (owner.get("disabled") and self._is_mine(owner)):
            return False
        log.info("bundle {bundle}: unload requested through its ownership node", bundle=str(bundle))
        self.release(bundle).addErrback(
            lambda f: log.failure("unloading bundle {bundle}", f, bundle=str(bundle)))
        return True

    # ---------------------------------------------------------------- unloading and splitting
    def release(self, bundle: NamespaceBundle) -> defer.Deferred:
        """Gracefully unload an owned bundle (see the module doc); Deferred[bool] firing once its
        node is gone (False: this broker did not own it, nothing happened)."""
        path = bundle.path
        if path not in self.owned:
            return defer.succeed(False)
        d = defer.Deferred()
        waiters = self._unloading.get(path)
        if waiters is not None:
            waiters.append(d)
            return d
        # Marked before the first write: its own "modified" notification must not look like
        # another broker's request.
        self._unloading[path] = [d]
        defer.Deferred.fromCoroutine(self._release(path)).addBoth(self._released, path)
        return d

    def _released(self, result, path):
        for d in self._unloading.pop(path, []):
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)

    async def _release(self, path):
        bundle = self.owned[path]
        node = await self.store.get(path)
        if node is not None:
            disabled = json.dumps(dict(self.urls, disabled=True), sort_keys=True).encode()
            try:
                await self.store.put(path, disabled, expected_version=node[1].version)
            except (BadVersionError, NotFoundError):
                pass            # another broker's request got there first: disabled all the same
        log.info("unloading bundle {bundle}", bundle=str(bundle))
        if self.on_bundle_unload is not None:
            await self.on_bundle_unload(bundle)
        elif self.on_bundle_lost is not None:
            self.on_bundle_lost(bundle)
        self.owned.pop(path, None)
        self._acquired.pop(path, None)
        try:
            await self.store.delete(path)
        except NotFoundError:
            pass
        log.info("bundle {bundle} unloaded", bundle=str(bundle))
        return True

    async def request_unload(self, bundle: NamespaceBundle) -> bool:
        """Unload ``bundle`` wherever it is owned: here at once, elsewhere by disabling its node
        (the owner releases it). False when nobody owns it (Pulsar answers that with success)."""
        if bundle.path in self.owned:
            await self.release(bundle)
            return True
        node = await self.store.get(bundle.path)
        if node is None:
            return False
        owner = self._parse(node[0], bundle)
        if owner.get("disabled"):
            return True         # already being unloaded
        try:
            await self.store.put(bundle.path, json.dumps(dict(owner, disabled=True), sort_keys=True).encode(),
                                 expected_version=node[1].version)
        except (BadVersionError, NotFoundError):
            pass                # it changed hands or went meanwhile: unloaded enough
        return True

    async def replace(self, parent: NamespaceBundle, children, commit) -> None:
        """Split an owned ``parent`` into ``children``: their nodes are taken, ``commit()`` (a
        coroutine function writing the new boundaries) runs, then the parent's node goes. When
        ``commit`` fails the children are given back and the parent stays."""
        if parent.path not in self.owned:
            raise errors.ServiceNotReady(f"Namespace bundle {parent} is not owned by this broker")
        taken = []
        try:
            for child in children:
                await self.store.put(child.path, self._value, expected_version=-1, ephemeral=True)
                taken.append(child)
            await commit()
        except BaseException:
            for child in taken:
                await self.store.delete(child.path).addErrback(lambda f: None)
            raise
        for child in children:
            self._owned(child)
        self._bounds.pop(parent.namespace, None)
        self.owned.pop(parent.path, None)
        self._acquired.pop(parent.path, None)
        await self.store.delete(parent.path).addErrback(lambda f: None)

    def _lost(self, path, reason) -> None:
        bundle = self.owned.pop(path, None)
        self._acquired.pop(path, None)
        if bundle is None:
            return
        log.warn("this broker lost bundle {bundle}: {reason}; unloading its topics",
                 bundle=str(bundle), reason=reason)
        if self.on_bundle_lost is not None:
            try:
                self.on_bundle_lost(bundle)
            except Exception:
                log.failure("unloading the topics of bundle {bundle} failed", bundle=str(bundle))
