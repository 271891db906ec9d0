"""
``IMetadataStore`` on ZooKeeper, through kazoo: the backend of multi-process clusters.

Each store is one ZooKeeper session (ephemeral nodes live and die with it). All paths are relative to
``root``, which ``start()`` creates if missing. Data calls use kazoo's asynchronous API: kazoo's own
threads complete them and the results are handed to the reactor with ``callFromThread``, so there is no
thread hop per call on our side and every Deferred fires in the reactor thread. Only the calls kazoo
offers synchronously (connect, recursive delete, stop) run in the reactor's thread pool.

Listeners: ZooKeeper 3.6+ has persistent recursive watches, but kazoo (2.11) does not expose them, so
``start()`` runs kazoo's ``TreeCache`` recipe over ``root`` and waits until it has read the tree (it
keeps a copy of the watched tree in memory). Changes from then on are notified. Like every ZooKeeper watch it reports the state it saw: a node changed
twice in quick succession may produce one "modified". "children" on the parent is derived from each
"created" and "deleted". Notifications reach listeners in ZooKeeper's order, in the reactor thread.

Session states. ``register_session_listener(cb)`` calls ``cb(state)`` in the reactor thread with one of
``SESSION_SUSPENDED`` ("suspended": the connection dropped; the session may survive, ephemeral nodes
still stand), ``SESSION_LOST`` ("lost": ZooKeeper expired the session; every ephemeral node of this
store is gone and other clients may already have taken what they held), ``SESSION_RECONNECTED``
("reconnected": the same session again, nothing lost) and ``SESSION_NEW`` ("expired-new-session":
kazoo opened a new session after a loss; ``session_id`` is the new one, the store works again). A
session loss is always reported as "lost" then "expired-new-session", in that order. kazoo reconnects
by itself; calls made while it does wait in its queue (suspended) or fail (lost) with
MetadataStoreError. The TreeCache re-reads the tree on reconnection, so nodes that vanished with the
old session are notified as "deleted" as well, possibly after "expired-new-session".

Ephemeral nodes this store created (not sequential ones: their names cannot be made again) are
remembered with their latest value until deleted; ``recreate_ephemerals()`` puts them back after a
new session, for owners that want their nodes back as they were (registrations), while owners whose
nodes are locks (bundle ownership) must not: another client may hold the lock by then.
"""

from __future__ import annotations

from typing import Callable, Optional

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.recipe.cache import TreeCache, TreeEvent, TreeNode
from twisted.internet import task
from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pulsar_twisted.metadata.embedded.store import (
    NoChildrenForEphemeralsError,
    StoreClosedError,
    StoreNotStartedError,
)
from pulsar_twisted.metadata.embedded.tree import check_path, parent_of
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError,
    BadVersionError,
    IMetadataStore,
    MetadataStoreError,
    MetadataUnavailableError,
    NotEmptyError,
    NotFoundError,
    Notification,
    Stat,
    value_bytes,
)

__all__ = ["ZooKeeperMetadataStore", "SESSION_SUSPENDED", "SESSION_LOST", "SESSION_RECONNECTED",
           "SESSION_NEW"]

SESSION_SUSPENDED = "suspended"
SESSION_LOST = "lost"
SESSION_RECONNECTED = "reconnected"
SESSION_NEW = "expired-new-session"

log = Logger()


def _on_reconnected(node) -> None:
    """kazoo's ``TreeNode.on_reconnected`` (kazoo 2.11), looping over a copy of the children.

    The TreeCache re-reads its tree on reconnection in its background thread, while ZooKeeper's watch
    events change the same tree from kazoo's event thread (``TreeNode._process_watch`` runs
    ``on_deleted``, which removes the node from its parent's children). kazoo's own loop over the
    live dict then raised "dictionary changed size during iteration" (printed, as kazoo has no
    listener for it) and the nodes after that point were not re-read, so none of them had a watch
    any more (kazoo forgets every watcher when its connection drops; the re-read sets them again)
    and their changes were never notified. A node removed meanwhile is
    re-read anyway (it is found gone, harmlessly); one added meanwhile is read by its creation."""
    node._refresh()
    for child in list(node._children.values()):
        child.on_reconnected()


TreeNode.on_reconnected = _on_reconnected

_ERRORS = {
    kz.NoNodeError: NotFoundError,
    kz.BadVersionError: BadVersionError,
    kz.NodeExistsError: AlreadyExistsError,
    kz.NotEmptyError: NotEmptyError,
    kz.NoChildrenForEphemeralsError: NoChildrenForEphemeralsError,
}


#: kazoo's errors that mean "not reachable for now" rather than "refused".
_UNAVAILABLE = (kz.SessionExpiredError, kz.ConnectionLoss, kz.ConnectionClosedError,
                kz.OperationTimeoutError, kz.SessionMovedError)


def _translate(error: BaseException) -> BaseException:
    """Map kazoo's exceptions to the interface's; others become MetadataStoreError with the cause
    (MetadataUnavailableError for a lost session or connection)."""
    if isinstance(error, (MetadataStoreError, ValueError, TypeError)):
        return error
    for kazoo_type, ours in _ERRORS.items():
        if isinstance(error, kazoo_type):
            return ours(str(error) or kazoo_type.__name__)
    kind = MetadataUnavailableError if isinstance(error, _UNAVAILABLE) else MetadataStoreError
    translated = kind(f"zookeeper: {type(error).__name__}: {error}")
    translated.__cause__ = error
    return translated


#: Seconds between two attempts to reach ZooKeeper at most (a quarter of the session timeout, if less).
RECONNECT_MAX_DELAY = 1.0


@implementer(IMetadataStore)
class ZooKeeperMetadataStore:
    """
    An ``IMetadataStore`` session on ZooKeeper at ``hosts`` ("h1:2181,h2:2181"), under ``root``.
    ``session_timeout`` is in seconds. Call ``start()`` (connects, creates ``root``) before use; calls
    before it, or after ``close()``, fail with StoreNotStartedError / StoreClosedError.
    """

    def __init__(self, hosts: str, reactor, root: str = "/", session_timeout: float = 30):
        check_path(root)
        self.hosts = hosts
        self.root = root
        self._prefix = "" if root == "/" else root
        self._reactor = reactor
        # Reconnect every second or so for as long as it takes, as ZooKeeper's own client does.
        # Kazoo's default doubles the wait after every refused attempt (up to an hour) and resets
        # it only on success: after a ZooKeeper restart of a few seconds its clients came back
        # 10-50 s later, past their session timeout, and a broker held bundles another had taken.
        retry = dict(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.2,
                     max_delay=min(RECONNECT_MAX_DELAY, session_timeout / 4))
        self._client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=retry)
        self._started = False
        self._closed = False
        self._listeners: list[Callable[[Notification], None]] = []
        self._tree_cache: Optional[TreeCache] = None
        self._cache_ready = False
        self._ready = Deferred()
        self.session_id: Optional[int] = None
        self._session_listeners: list[Callable[[str], None]] = []
        self._session_lost = False
        #: full path -> latest value of the (non-sequential) ephemeral nodes this store created.
        self._ephemerals: dict[str, bytes] = {}
        self.session_losses = 0
        #: Calls kazoo has not answered yet: Deferred -> when it was made (``_call``); a call still
        #: unanswered after ``answer_limit`` is failed as unavailable (``_give_up_on_unanswered``).
        self._unanswered: dict[Deferred, float] = {}
        self.answer_limit = 2 * session_timeout + 5
        self._unanswered_sweep = None

    # -- plumbing ----------------------------------------------------------------------------------

    def _in_thread(self, fn, *args, **kwargs) -> Deferred:
        d = deferToThreadPool(self._reactor, self._reactor.getThreadPool(), fn, *args, **kwargs)
        return d.addErrback(lambda f: Failure(_translate(f.value)))

    def _full(self, path: str) -> str:
        check_path(path)
        return self._prefix + path if path != "/" else (self._prefix or "/")

    def _relative(self, full: str) -> str:
        return full[len(self._prefix):] or "/"

    def _stat(self, path: str, zstat) -> Stat:
        return Stat(path, zstat.version, zstat.ctime, zstat.mtime, zstat.ephemeralOwner != 0)

    def _call(self, method, *args, **kwargs) -> Deferred:
        """Run a kazoo ``*_async`` method; fire a Deferred with its result in the reactor thread."""
        if self._closed:
            return fail(StoreClosedError("zookeeper metadata store is closed"))
        if not self._started:
            return fail(StoreNotStartedError("call start() first"))
        d = Deferred()
        try:
            async_result = method(*args, **kwargs)
        except Exception as e:
            return fail(_translate(e))
        self._unanswered[d] = self._reactor.seconds()

        def completed(result):
            # In a kazoo thread (or in ours, if it had already completed).
            try:
                value = result.get_nowait()
            except Exception as e:
                self._reactor.callFromThread(self._answered, d, Failure(_translate(e)))
            else:
                self._reactor.callFromThread(self._answered, d, value)

        async_result.rawlink(completed)
        return d

    def _answered(self, d: Deferred, result) -> None:
        if self._unanswered.pop(d, None) is None:
            return      # given up on already (_give_up_on_unanswered)
        if isinstance(result, Failure):
            d.errback(result)
        else:
            d.callback(result)

    def _give_up_on_unanswered(self) -> None:
        """Fail, as unavailable, the calls kazoo has not answered within ``answer_limit``.

        ZooKeeper answers a call, or kazoo fails it when the connection drops or the session
        expires, well within two session timeouts. A call older than that was lost on the way (a
        request added to kazoo's queue just as it is replaced at a session expiry is never
        answered), and whatever waits on it (a topic's load, a managed ledger's close) would wait
        for good. As for a connection loss, its outcome is unknown: the caller reads again before
        it relies on it."""
        deadline = self._reactor.seconds() - self.answer_limit
        late = [d for d, made in self._unanswered.items() if made < deadline]
        if not late:
            return
        log.warn("zookeeper: {n} calls unanswered after {limit:.0f} s: failed as unavailable",
                 n=len(late), limit=self.answer_limit)
        for d in late:
            del self._unanswered[d]
            d.errback(MetadataUnavailableError(
                f"zookeeper: no answer within {self.answer_limit:.0f} s (outcome unknown)"))

    def _guard(self, fn, *args) -> Deferred:
        """Run ``fn`` turning synchronous errors (bad paths) into a failed Deferred."""
        try:
            return fn(*args)
        except Exception as e:
            return fail(_translate(e))

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Deferred:
        """Connect and make sure ``root`` exists."""
        def connect():
            self._client.start()
            if self._prefix:
                self._client.ensure_path(self._prefix)
            return self._client.client_id[0]

        def connected(session_id):
            self.session_id = session_id
            self._started = True
            self._unanswered_sweep = task.LoopingCall(self._give_up_on_unanswered)
            self._unanswered_sweep.clock = self._reactor
            self._unanswered_sweep.start(max(1.0, self.answer_limit / 4), now=False)
            # Added once connected: the first CONNECTED is start-up, not a reconnection.
            self._client.add_listener(self._kazoo_state)
            log.info("zookeeper metadata store connected to {hosts} (session {sid:#x}), root {root}",
                     hosts=self.hosts, sid=session_id, root=self.root)
            self._tree_cache = TreeCache(self._client, self._prefix or "/")
            self._tree_cache.listen(self._cache_event)
            return self._in_thread(self._tree_cache.start)

        def watching(_):
            return self._ready

        return self._in_thread(connect).addCallback(connected).addCallback(watching)

    def close(self) -> Deferred:
        """End the session (the server removes its ephemeral nodes) and disconnect. Idempotent."""
        if self._closed:
            return succeed(None)
        self._closed = True
        cache, self._tree_cache = self._tree_cache, None
        if self._unanswered_sweep is not None and self._unanswered_sweep.running:
            self._unanswered_sweep.stop()

        def stop():
            if cache is not None:
                cache.close()
            self._client.stop()
            self._client.close()

        return self._in_thread(stop)

    # -- reads -------------------------------------------------------------------------------------

    def get(self, path: str) -> Deferred:
        """``(value, Stat)`` or None."""
        def go():
            d = self._call(self._client.get_async, self._full(path))
            d.addCallback(lambda r: (r[0], self._stat(path, r[1])))
            return d.addErrback(lambda f: f.trap(NotFoundError) and None)
        return self._guard(go)

    def exists(self, path: str) -> Deferred:
        """``Stat`` or None."""
        def go():
            d = self._call(self._client.exists_async, self._full(path))
            return d.addCallback(lambda zstat: None if zstat is None else self._stat(path, zstat))
        return self._guard(go)

    def get_children(self, path: str) -> Deferred:
        """Sorted child names; [] when absent."""
        def go():
            d = self._call(self._client.get_children_async, self._full(path))
            d.addCallback(sorted)
            return d.addErrback(lambda f: f.trap(NotFoundError) and [])
        return self._guard(go)

    # -- writes ------------------------------------------------------------------------------------

    def put(self, path: str, value: bytes, expected_version: Optional[int] = None,
            ephemeral: bool = False, sequential: bool = False) -> Deferred:
        """See ``IMetadataStore.put``; an update keeps the node's kind, as ZooKeeper's setData does."""
        return self._guard(self._put, path, value, expected_version, ephemeral, sequential)

    def _put(self, path, value, expected_version, ephemeral, sequential) -> Deferred:
        value = value_bytes(value)
        full = self._full(path)
        if sequential and expected_version not in (None, -1):
            raise ValueError("a sequential put creates a node: expected_version must be None or -1")

        def create():
            d = self._call(self._client.create_async, full, value, ephemeral=ephemeral,
                           sequence=sequential, makepath=True, include_data=True)
            if ephemeral and not sequential:
                d.addCallback(self._remember, full, value)
            return d.addCallback(lambda r: self._stat(self._relative(r[0]), r[1]))

        def update(version):
            d = self._call(self._client.set_async, full, value, version=version)
            if full in self._ephemerals:
                d.addCallback(self._remember, full, value)
            return d.addCallback(lambda zstat: self._stat(path, zstat))

        if sequential or expected_version == -1:
            return create()
        if expected_version is not None:
            return update(expected_version)

        # Unconditional: update, or create when absent; a racing create or delete means try again.
        def retry_create(f):
            f.trap(NotFoundError)
            return create().addErrback(retry_update)

        def retry_update(f):
            f.trap(AlreadyExistsError)
            return update(-1).addErrback(retry_create)

        return update(-1).addErrback(retry_create)

    def put_all(self, writes) -> Deferred:
        """
        See ``IMetadataStore.put_all``: one ZooKeeper multi (create / setData with a version). A
        multi cannot create parents, so when a create finds none they are made (``ensure_path``,
        outside the multi: empty persistent nodes, as ``put`` makes them) and the multi is sent
        once more. A create's Stat has version 0 and the reactor's time (a multi's create answers
        only the path).
        """
        def go():
            prepared = []
            for index, (path, value, version) in enumerate(writes):
                try:
                    value = value_bytes(value)
                except TypeError as e:
                    e.failed_index = index
                    raise
                if not isinstance(version, int) or version < -1:
                    raise ValueError(f"put_all takes expected versions -1 or n >= 0, not {version!r}")
                for other, _, _ in prepared:
                    full = self._full(path)
                    if other == full or other.startswith(full + "/") or full.startswith(other + "/"):
                        raise ValueError(f"put_all paths must be distinct and unrelated: {path}")
                prepared.append((self._full(path), value, version))
            return self._multi(prepared, make_parents=True)
        return self._guard(go)

    def _multi(self, prepared, make_parents: bool) -> Deferred:
        transaction = self._client.transaction()
        for full, value, version in prepared:
            if version == -1:
                transaction.create(full, value)
            else:
                transaction.set_data(full, value, version)
        d = self._call(transaction.commit_async)

        def committed(results):
            for index, result in enumerate(results):
                if isinstance(result, Exception) and not isinstance(
                        result, (kz.RolledBackError, kz.RuntimeInconsistency)):
                    if (make_parents and isinstance(result, kz.NoNodeError)
                            and prepared[index][2] == -1):
                        return self._make_parents(prepared).addCallback(
                            lambda _: self._multi(prepared, make_parents=False))
                    error = _translate(result)
                    error.failed_index = index
                    raise error
            now = int(self._reactor.seconds() * 1000)
            return [Stat(self._relative(full), 0, now, now) if version == -1
                    else self._stat(self._relative(full), result)
                    for (full, _, version), result in zip(prepared, results)]
        return d.addCallback(committed)

    def _make_parents(self, prepared) -> Deferred:
        parents = sorted({full.rsplit("/", 1)[0] for full, _, version in prepared if version == -1})
        return gatherResults([self._call(self._client.ensure_path_async, parent)
                              for parent in parents if parent], consumeErrors=True).addErrback(
            lambda f: f.value.subFailure)

    def delete(self, path: str, expected_version: Optional[int] = None) -> Deferred:
        """Remove one node (NotFoundError, BadVersionError, NotEmptyError)."""
        def go():
            full = self._full(path)
            if path == "/":
                raise ValueError("cannot delete the root")
            version = -1 if expected_version is None else expected_version
            d = self._call(self._client.delete_async, full, version=version)
            return d.addCallback(self._forget, full)
        return self._guard(go)

    def _remember(self, result, full: str, value: bytes):
        self._ephemerals[full] = value
        return result

    def _forget(self, _, full: str) -> None:
        self._ephemerals.pop(full, None)

    def delete_recursive(self, path: str) -> Deferred:
        """Remove ``path`` and its subtree (not atomic: node by node, as ZooKeeper offers)."""
        def go():
            full = self._full(path)
            if path == "/":
                raise ValueError("cannot delete the root")
            if self._closed:
                raise StoreClosedError("zookeeper metadata store is closed")
            # kazoo only offers recursive delete synchronously.
            for known in [p for p in self._ephemerals if p == full or p.startswith(full + "/")]:
                del self._ephemerals[known]
            return self._in_thread(self._client.delete, full, recursive=True).addCallback(lambda _: None)
        return self._guard(go)

    # -- session ---------------------------------------------------------------------------------

    def register_session_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(state)`` on session state changes (see the module docstring)."""
        self._session_listeners.append(listener)

    def owned_ephemerals(self) -> dict:
        """Path (relative to ``root``) -> value of the ephemeral nodes this store created and
        has not deleted (sequential ones excepted)."""
        return {self._relative(full): value for full, value in self._ephemerals.items()}

    def recreate_ephemerals(self, paths=None) -> Deferred:
        """
        Put back, in this (new) session, the remembered ephemeral nodes (all, or those of ``paths``,
        relative to ``root``) that are missing. A node that exists already is left alone: after a
        session loss it may now belong to another client. Fires with the sorted list of paths
        re-created; a path whose create failed is logged and left out.
        """
        wanted = self.owned_ephemerals()
        if paths is not None:
            wanted = {p: v for p, v in wanted.items() if p in set(paths)}

        async def go():
            made = []
            for path, value in sorted(wanted.items()):
                try:
                    await self.put(path, value, expected_version=-1, ephemeral=True)
                except AlreadyExistsError:
                    continue
                except MetadataStoreError as e:
                    log.warn("zookeeper: cannot re-create ephemeral node {path}: {error}",
                             path=path, error=e)
                    continue
                made.append(path)
            if made:
                log.info("zookeeper: re-created ephemeral nodes {paths} in session {sid:#x}",
                         paths=made, sid=self.session_id or 0)
            return made
        return Deferred.fromCoroutine(go())

    def _kazoo_state(self, state) -> None:
        # In a kazoo thread, which must not block: hand over to the reactor. The session id is read
        # here because kazoo sets it before announcing CONNECTED.
        client_id = self._client.client_id
        self._reactor.callFromThread(self._session_state, state, client_id[0] if client_id else None)

    def _session_state(self, state, session_id) -> None:
        if self._closed:
            return
        if state == KazooState.SUSPENDED:
            events = [SESSION_SUSPENDED]
            log.warn("zookeeper session {sid:#x} suspended (connection lost); reconnecting",
                     sid=self.session_id or 0)
        elif state == KazooState.LOST:
            if self._session_lost:
                return
            self._session_lost = True
            self.session_losses += 1
            events = [SESSION_LOST]
            log.warn("zookeeper session {sid:#x} lost (expired): its ephemeral nodes are gone",
                     sid=self.session_id or 0)
        elif state == KazooState.CONNECTED:
            if session_id is not None and session_id != self.session_id:
                old, self.session_id = self.session_id, session_id
                # kazoo may report the new session without a LOST first (expiry noticed during
                # the connect): the loss is announced all the same, once.
                events = [] if self._session_lost else [SESSION_LOST]
                if not self._session_lost:
                    self.session_losses += 1
                events.append(SESSION_NEW)
                self._session_lost = False
                log.warn("zookeeper session {old:#x} replaced by a new session {sid:#x}",
                         old=old or 0, sid=session_id)
            else:
                events = [SESSION_RECONNECTED]
                log.info("zookeeper session {sid:#x} reconnected", sid=self.session_id or 0)
        else:
            return
        for event in events:
            for listener in list(self._session_listeners):
                try:
                    listener(event)
                except Exception:
                    log.failure("session listener {listener!r} failed on {state}",
                                listener=listener, state=event)

    # -- listeners ---------------------------------------------------------------------------------

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Call ``listener`` for changes under ``root`` seen from now on (see the module docstring)."""
        self._listeners.append(listener)

    def _cache_event(self, event) -> None:
        # In kazoo's cache thread.
        self._reactor.callFromThread(self._deliver, event.event_type, event.event_data)

    def _deliver(self, event_type, data) -> None:
        if self._closed:
            return
        if event_type == TreeEvent.INITIALIZED:
            if not self._cache_ready:
                self._cache_ready = True
                self._ready.callback(None)
            return
        # Nodes the cache finds while first reading the tree existed before we listened: not changes.
        if not self._cache_ready or data is None:
            return
        kind = {TreeEvent.NODE_ADDED: "created", TreeEvent.NODE_UPDATED: "modified",
                TreeEvent.NODE_REMOVED: "deleted"}.get(event_type)
        if kind is None:
            log.info("zookeeper watch: {event}", event=event_type)
            return
        path = self._relative(data.path)
        notifications = [Notification(kind, path)]
        if kind != "modified" and path != "/":
            notifications.append(Notification("children", parent_of(path)))
        for notification in notifications:
            for listener in list(self._listeners):
                try:
                    listener(notification)
                except Exception:
                    log.failure("metadata listener {listener!r} failed on {n}", listener=listener, n=notification)
