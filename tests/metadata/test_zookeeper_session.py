"""
Session loss on a real ZooKeeper (PULSAR_TEST_ZK, skipped without it): the session listener API of
``ZooKeeperMetadataStore`` and the re-creation of its ephemeral nodes.

A session is expired for real with the usual trick: a second client connects with the first one's
session id and password (``client_id``) and closes, which ends the session on the server; the first
client then reconnects, is told its session expired, and kazoo opens a new one.
"""

import logging
import time
import uuid

from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SynchronousTestCase, TestCase

from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.zookeeper import (
    RECONNECT_MAX_DELAY,
    SESSION_LOST,
    SESSION_NEW,
    SESSION_SUSPENDED,
    ZooKeeperMetadataStore,
)
from tests.metadata.test_zookeeper import TEST_ROOT, _remove_tree, _zk_address


def expire_session(hosts: str, client_id) -> None:
    """Blocking: end the session ``client_id`` (id, password) on the server."""
    from kazoo.client import KazooClient
    other = KazooClient(hosts=hosts, client_id=client_id)
    other.start(timeout=10)
    other.stop()
    other.close()


async def wait_until(predicate, timeout: float, what: str):
    """Poll ``predicate`` on the real reactor until true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await task.deferLater(reactor, 0.05, lambda: None)


class ZooKeeperSessionLossTests(TestCase):
    """Listener states, a new session and re-made ephemeral nodes after a real expiry."""

    timeout = 60

    def setUp(self):
        self.hosts = _zk_address()
        self.root = f"{TEST_ROOT}/{uuid.uuid4().hex}"
        self.stores = []
        # kazoo reports the expiry on stderr through the logging module; the listener says it.
        kazoo_log = logging.getLogger("kazoo")
        self.addCleanup(kazoo_log.setLevel, kazoo_log.level)
        kazoo_log.setLevel(logging.CRITICAL)
        self.addCleanup(lambda: deferToThread(_remove_tree, self.hosts, self.root))

    async def make_store(self):
        store = ZooKeeperMetadataStore(self.hosts, reactor, root=self.root, session_timeout=4)
        self.stores.append(store)
        self.addCleanup(store.close)
        await store.start()
        return store

    async def expire(self, store):
        states, notifications = [], []
        store.register_session_listener(states.append)
        store.register_listener(notifications.append)
        old = store.session_id
        started = time.monotonic()
        await deferToThread(expire_session, self.hosts, store._client.client_id)
        await wait_until(lambda: SESSION_NEW in states, 30, "a new session")
        return old, states, notifications, time.monotonic() - started

    def test_expiry_reported_in_order(self):
        """A real expiry is reported as suspended, lost, then expired-new-session, with a new id."""
        async def go():
            store = await self.make_store()
            old, states, _, elapsed = await self.expire(store)
            self.assertEqual([s for s in states if s != SESSION_SUSPENDED], [SESSION_LOST, SESSION_NEW])
            self.assertNotEqual(store.session_id, old)
            self.assertEqual(store.session_id, store._client.client_id[0])
            self.assertEqual(store.session_losses, 1)
            self.assertLess(elapsed, 30)
        return Deferred.fromCoroutine(go())

    def test_store_works_after_new_session(self):
        """Reads and writes work in the new session; persistent data survived the loss."""
        async def go():
            store = await self.make_store()
            await store.put("/kept", b"v1")
            await self.expire(store)
            value, _ = await store.get("/kept")
            self.assertEqual(value, b"v1")
            stat = await store.put("/kept", b"v2", expected_version=0)
            self.assertEqual(stat.version, 1)
            await store.put("/eph2", b"x", ephemeral=True)
            self.assertTrue((await store.exists("/eph2")).ephemeral)
        return Deferred.fromCoroutine(go())

    def test_ephemerals_gone_and_recreated(self):
        """The session's ephemeral nodes vanish ("deleted" is notified) and recreate_ephemerals()
        makes them again, owned by the new session, with their latest value."""
        async def go():
            store = await self.make_store()
            await store.put("/reg/a", b"a0", ephemeral=True)
            await store.put("/reg/a", b"a1")                     # an update keeps the node ephemeral
            await store.put("/reg/b", b"b", ephemeral=True)
            await store.put("/reg/c", b"c", ephemeral=True)
            await store.delete("/reg/c")                         # deleted: not to be re-made
            await store.put("/reg/s-", b"s", ephemeral=True, sequential=True)
            self.assertEqual(store.owned_ephemerals(), {"/reg/a": b"a1", "/reg/b": b"b"})
            _, _, notifications, _ = await self.expire(store)
            self.assertIsNone(await store.exists("/reg/a"))
            await wait_until(lambda: any(n.kind == "deleted" and n.path == "/reg/a"
                                         for n in notifications), 20, "the deletion notification")
            made = await store.recreate_ephemerals()
            self.assertEqual(made, ["/reg/a", "/reg/b"])
            value, stat = await store.get("/reg/a")
            self.assertEqual(value, b"a1")
            self.assertTrue(stat.ephemeral)
            zstat = await deferToThread(store._client.exists, f"{self.root}/reg/a")
            self.assertEqual(zstat.ephemeralOwner, store.session_id)
            self.assertIsNone(await store.exists("/reg/c"))
        return Deferred.fromCoroutine(go())

    def test_recreate_leaves_another_clients_node(self):
        """A node another session created meanwhile is not taken over (it may be a lock)."""
        async def go():
            store = await self.make_store()
            rival = await self.make_store()
            await store.put("/lock", b"mine", ephemeral=True)
            await store.put("/mine-only", b"m", ephemeral=True)
            await self.expire(store)
            await rival.put("/lock", b"theirs", expected_version=-1, ephemeral=True)
            made = await store.recreate_ephemerals(["/lock"])
            self.assertEqual(made, [])
            self.assertEqual((await store.get("/lock"))[0], b"theirs")
            self.assertIsNone(await store.exists("/mine-only"))   # not asked for
        return Deferred.fromCoroutine(go())

    def test_close_is_not_a_loss(self):
        """Closing the store reports no session state to its listeners."""
        async def go():
            store = await self.make_store()
            states = []
            store.register_session_listener(states.append)
            await store.close()
            await task.deferLater(reactor, 0.3, lambda: None)
            self.assertEqual(states, [])
        return Deferred.fromCoroutine(go())


    def test_auditor_reelected(self):
        """An auditor whose session expired stops auditing, then is elected again in the new one."""
        from pulsar_twisted.ledger.autorecovery import AUDITOR_ELECTION_PATH, Auditor

        async def go():
            store = await self.make_store()
            auditor = Auditor(store, reactor, retry_delay=3600)
            auditor.start()
            self.addCleanup(auditor.stop)
            await wait_until(lambda: auditor.is_auditor, 10, "the election")
            states = []
            store.register_session_listener(lambda s: states.append((s, auditor.is_auditor)))
            await self.expire(store)
            self.assertIn((SESSION_LOST, False), states)
            await wait_until(lambda: auditor.is_auditor, 10, "the re-election")
            zstat = await deferToThread(store._client.exists, self.root + AUDITOR_ELECTION_PATH)
            self.assertEqual(zstat.ephemeralOwner, store.session_id)
        return Deferred.fromCoroutine(go())

    def test_bundle_ownership_dropped_and_reacquired(self):
        """A broker's bundles are lost (topics unloaded) on "lost", and acquired again afterwards in
        the new session, like free ones."""
        from pulsar_twisted.broker.ownership import BundleOwnership, NamespaceBundle

        async def go():
            store = await self.make_store()
            lost = []
            ownership = BundleOwnership(store, reactor, {"nativeUrl": "pulsar://b1:6650"},
                                        on_bundle_lost=lost.append, check_interval=0)
            # The first of the namespace's default bundles (a lookup re-reads the boundaries).
            bundle = NamespaceBundle("t/ns", 0, 0x40000000)
            self.assertIsNone(await ownership.acquire(bundle))
            await self.expire(store)
            self.assertEqual(lost, [bundle])
            self.assertFalse(ownership.owns(bundle))
            self.assertIsNone(await store.exists(bundle.path))    # not re-created behind its back
            self.assertIsNone(await ownership.acquire(bundle))
            self.assertTrue((await store.exists(bundle.path)).ephemeral)
            self.assertEqual(lost, [bundle])
        return Deferred.fromCoroutine(go())


class EmbeddedSessionApiTests(SynchronousTestCase):
    """The embedded store accepts the same calls and never reports a loss."""

    def test_noop(self):
        store = EmbeddedMetadataStore(None, task.Clock())
        states = []
        store.register_session_listener(states.append)
        self.assertEqual(self.successResultOf(store.recreate_ephemerals()), [])
        self.assertEqual(states, [])


class UnavailableTranslationTests(TestCase):
    """kazoo's "not reachable for now" errors become MetadataUnavailableError (which the broker
    answers as ServiceNotReady); refusals keep their own types."""

    def test_session_and_connection_errors(self):
        from kazoo import exceptions as kz

        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError, NotFoundError
        from pulsar_twisted.metadata.zookeeper import _translate
        for error in (kz.SessionExpiredError(), kz.ConnectionLoss(), kz.ConnectionClosedError("x"),
                      kz.OperationTimeoutError()):
            translated = _translate(error)
            self.assertIsInstance(translated, MetadataUnavailableError)
            self.assertIs(translated.__cause__, error)
        self.assertIsInstance(_translate(kz.NoNodeError()), NotFoundError)
        self.assertNotIsInstance(_translate(kz.AuthFailedError()), MetadataUnavailableError)


class UnansweredCallTests(SynchronousTestCase):
    """A call kazoo never answers (lost in its queue at a session expiry) is failed as unavailable
    after ``answer_limit``, so nothing waits on it for good; answers that come in time, or too
    late, are handled once."""

    class _Result:
        """kazoo's IAsyncResult as ``_call`` uses it: ``rawlink`` and ``get_nowait``."""

        def __init__(self):
            self.links = []
            self.value = None

        def rawlink(self, callback):
            self.links.append(callback)

        def get_nowait(self):
            return self.value

        def answer(self, value):
            self.value = value
            for callback in self.links:
                callback(self)

    def test_unanswered_call_fails_as_unavailable(self):
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError

        class Reactor(task.Clock):
            def callFromThread(self, f, *args):
                f(*args)

        clock = Reactor()
        store = ZooKeeperMetadataStore("127.0.0.1:1", clock, session_timeout=4)
        store._started = True
        lost, answered, late = self._Result(), self._Result(), self._Result()
        d_lost = store._call(lambda: lost)
        d_answered = store._call(lambda: answered)
        clock.advance(store.answer_limit / 2)
        d_late = store._call(lambda: late)
        answered.answer("fine")
        self.assertEqual(self.successResultOf(d_answered), "fine")
        clock.advance(store.answer_limit / 2 + 1)
        store._give_up_on_unanswered()
        self.failureResultOf(d_lost, MetadataUnavailableError)
        self.assertNoResult(d_late)         # not yet past its own limit
        lost.answer("too late")             # ignored: already failed
        clock.advance(store.answer_limit)
        store._give_up_on_unanswered()
        self.failureResultOf(d_late, MetadataUnavailableError)
        self.assertEqual(store._unanswered, {})


class ZooKeeperRestartTests(TestCase):
    """A ZooKeeper (a private one the test kills -9 and starts again) down for longer than its
    clients' session timeout: once it is back, the store reconnects within the session timeout
    that ZooKeeper gives the sessions it restores, and keeps its session and its ephemeral nodes;
    its attempts never wait more than RECONNECT_MAX_DELAY apart. (Kazoo's default doubles the wait
    after each refused attempt, up to an hour: under the nemesis, with ZooKeeper killed and paused
    again and again, brokers and bookies came back 10-50 s after it and past their session
    timeout.) About 20 s; skipped without ZooKeeper."""

    timeout = 90

    def setUp(self):
        from pulsar_twisted.testing.cluster import ZooKeeperServer, ZooKeeperUnavailable
        kazoo_log = logging.getLogger("kazoo")
        self.addCleanup(kazoo_log.setLevel, kazoo_log.level)
        kazoo_log.setLevel(logging.CRITICAL)
        try:
            self.server = ZooKeeperServer.launch()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        self.addCleanup(self.server.stop)

    def test_session_kept_across_a_long_outage(self):
        async def go():
            store = ZooKeeperMetadataStore(self.server.hosts, reactor, root="/restart", session_timeout=4)
            self.addCleanup(store.close)
            await store.start()
            await store.put("/eph", b"x", ephemeral=True)
            session = store.session_id
            await deferToThread(self.server.kill9)
            await task.deferLater(reactor, 13, lambda: None)    # a dozen refused attempts
            await deferToThread(self.server.start)
            await wait_until(lambda: store._client.connected, 30, "the store to reconnect")
            self.assertEqual((store.session_losses, store.session_id), (0, session))
            self.assertTrue((await store.exists("/eph")).ephemeral)
            retry = store._client._connection.retry_sleeper
            self.assertEqual((retry.max_tries, retry.max_delay), (-1, RECONNECT_MAX_DELAY))
        return Deferred.fromCoroutine(go())


class TreeCacheReconnectionTests(SynchronousTestCase):
    """kazoo's TreeCache re-reads the tree on reconnection (``TreeNode.on_reconnected``, in its
    background thread) while ZooKeeper's watch events change the same tree from kazoo's event
    thread (``TreeNode._process_watch`` runs ``on_deleted`` there, which removes the node from its
    parent). kazoo's loop over ``self._children.values()`` then raised "dictionary changed size
    during iteration" and the rest of the tree was not re-read: kazoo forgets its watchers when
    the connection drops, so those nodes were left without a watch and their changes were never
    notified. Chaos seed 78 (pause-bookie, partition-broker): once in a broker, once in a bookie,
    as the ephemeral nodes of their expired sessions were deleted."""

    def test_a_child_removed_during_the_refresh_does_not_stop_it(self):
        import pulsar_twisted.metadata.zookeeper  # noqa: F401  (applies the fix)
        from kazoo.recipe.cache import TreeNode

        refreshed = []

        class Pending:
            def rawlink(self, callback):
                pass        # never answered: only the requests matter here

        class Client:
            hook = None

            def get_async(self, path, watch=None):
                refreshed.append(path)
                return Pending()

            def get_children_async(self, path, watch=None):
                if self.hook is not None:
                    self.hook(path)
                return Pending()

        class Tree:
            _outstanding_ops = 0

            def _in_background(self, *args):
                pass

        tree = Tree()
        tree._client = Client()
        root = TreeNode.make_root(tree, "/r")
        for name in ("a", "b", "c"):
            root._children[name] = TreeNode(tree, f"/r/{name}", root)

        def watch_event_meanwhile(path):
            if path == "/r/a":              # the event thread deletes "b" while "a" is re-read
                root._children.pop("b", None)
        tree._client.hook = watch_event_meanwhile

        root.on_reconnected()
        self.assertIn("/r/c", refreshed)
