"""
One set of tests for the whole ``IMetadataStore`` contract, run against every backend.

Mix ``MetadataStoreTestsMixin`` into a ``twisted.trial.unittest.TestCase`` and define:

- ``make_store()``: a fresh, started, empty store (or a Deferred firing with one). The test case cleans
  it up (``addCleanup``); the tests may close it themselves first, so ``close()`` must be idempotent.
- ``make_other_session(store)``: a second client over the same data with its own session (or a
  Deferred firing with one), also cleaned up by the test case.

The tests use the interface only: no backend may be assumed to answer synchronously, to deliver
notifications synchronously, or to number sequential nodes from zero. Listeners are registered before
the writes they are meant to hear, and only changes made after registration are asserted on.
"""

from __future__ import annotations

import re

from twisted.internet.defer import Deferred, maybeDeferred
from zope.interface.verify import verifyObject

from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError,
    BadVersionError,
    IMetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    Notification,
    Stat,
)

__all__ = ["MetadataStoreTestsMixin", "NotificationRecorder"]


class NotificationRecorder:
    """A listener that keeps every notification and can wait for a particular one."""

    def __init__(self):
        self.events: list[Notification] = []
        self._waiting: list[tuple[Notification, int, Deferred]] = []

    def __call__(self, notification: Notification) -> None:
        self.events.append(notification)
        still, ready = [], []
        for wanted, count, d in self._waiting:
            (ready if self.events.count(wanted) >= count else still).append((wanted, count, d))
        self._waiting = still
        for wanted, _, d in ready:
            d.callback(wanted)

    def wait_for(self, kind: str, path: str, count: int = 1) -> Deferred:
        """
        Fire when ``Notification(kind, path)`` has been seen ``count`` times (at once if it has). The
        waiter resumes inside the listener call, before any later notification is delivered, so wait
        for the last event you mean to assert on.
        """
        wanted = Notification(kind, path)
        d = Deferred()
        if self.events.count(wanted) >= count:
            d.callback(wanted)
        else:
            self._waiting.append((wanted, count, d))
        return d

    def kinds_for(self, path: str) -> list[str]:
        return [n.kind for n in self.events if n.path == path]


class _Record:
    """An immutable value with ``__bytes__`` (as LedgerMetadata): see ``interfaces``."""

    def __init__(self, data: bytes):
        self._data = data

    def __bytes__(self) -> bytes:
        return self._data


class MetadataStoreTestsMixin:
    """The IMetadataStore contract; see the module docstring for what the test case must provide."""

    # Listener waits would otherwise hang for trial's default two minutes when an event never comes.
    timeout = 30

    def make_store(self):
        raise NotImplementedError

    def make_other_session(self, store):
        raise NotImplementedError

    async def _store(self):
        return await maybeDeferred(self.make_store)

    async def _other(self, store):
        return await maybeDeferred(self.make_other_session, store)

    async def assert_fails(self, d: Deferred, error_type):
        """Await ``d`` and check it failed with ``error_type``; return the exception."""
        try:
            result = await d
        except error_type as e:
            return e
        self.fail(f"expected {error_type.__name__}, got result {result!r}")

    # -- interface ---------------------------------------------------------------------------------

    async def test_provides_interface(self):
        """The store provides IMetadataStore and has a session id."""
        store = await self._store()
        self.assertTrue(verifyObject(IMetadataStore, store))
        self.assertIsNotNone(store.session_id)

    async def test_errors_are_deferred(self):
        """Contract violations come back as failed Deferreds, never as synchronous exceptions."""
        store = await self._store()
        d = store.put("/e/x", b"v", expected_version=3)
        self.assertIsInstance(d, Deferred)
        await self.assert_fails(d, NotFoundError)
        d = store.delete("/e/missing")
        self.assertIsInstance(d, Deferred)
        await self.assert_fails(d, NotFoundError)

    # -- reads and plain writes --------------------------------------------------------------------

    async def test_absent(self):
        """An absent node: get and exists give None, get_children gives []."""
        store = await self._store()
        self.assertIsNone(await store.get("/nothing/here"))
        self.assertIsNone(await store.exists("/nothing/here"))
        self.assertEqual(await store.get_children("/nothing/here"), [])

    async def test_put_get(self):
        """A put creates the node at version 0 with its parents; get returns value and Stat."""
        store = await self._store()
        stat = await store.put("/a/b/c", b"\x00value\xff")
        self.assertIsInstance(stat, Stat)
        self.assertEqual((stat.path, stat.version, stat.ephemeral), ("/a/b/c", 0, False))
        value, got = await store.get("/a/b/c")
        self.assertEqual(value, b"\x00value\xff")
        self.assertEqual(got, stat)
        self.assertEqual(await store.exists("/a/b/c"), stat)
        parent_value, parent = await store.get("/a/b")
        self.assertEqual((parent_value, parent.version, parent.ephemeral), (b"", 0, False))
        self.assertEqual(await store.get_children("/a"), ["b"])
        self.assertEqual(await store.get_children("/a/b"), ["c"])
        self.assertIn("a", await store.get_children("/"))

    async def test_empty_value(self):
        """An empty value is stored and read back as b""."""
        store = await self._store()
        await store.put("/empty", b"")
        value, stat = await store.get("/empty")
        self.assertEqual((value, stat.version), (b"", 0))

    async def test_record_values(self):
        """A record with ``__bytes__`` is stored as its bytes (put and put_all); reads return bytes.
        Anything else that is not bytes is refused (TypeError), a put_all saying which write."""
        store = await self._store()
        await store.put("/rec/one", _Record(b"\x00one"))
        await store.put_all([("/rec/two", _Record(b"two"), -1), ("/rec/one", _Record(b"1"), 0)])
        for path, expected in (("/rec/one", b"1"), ("/rec/two", b"two")):
            value, _ = await store.get(path)
            self.assertEqual(value, expected)
            self.assertIs(type(value), bytes)
        await self.assert_fails(store.put("/rec/bad", "text"), TypeError)
        await self.assert_fails(store.put("/rec/bad", 5), TypeError)
        e = await self.assert_fails(store.put_all([("/rec/three", b"", -1), ("/rec/bad", "text", -1)]),
                                    TypeError)
        self.assertEqual(e.failed_index, 1)
        self.assertIsNone(await store.get("/rec/three"))

    async def test_children_sorted(self):
        """get_children returns the child names, sorted, not paths."""
        store = await self._store()
        for name in ["zeta", "alpha", "mid", "beta"]:
            await store.put("/kids/" + name, name.encode())
        self.assertEqual(await store.get_children("/kids"), ["alpha", "beta", "mid", "zeta"])

    async def test_unconditional_update(self):
        """A put without expected_version overwrites and moves the version by one."""
        store = await self._store()
        first = await store.put("/u", b"1")
        second = await store.put("/u", b"2")
        self.assertEqual(second.version, first.version + 1)
        self.assertEqual(second.created_ms, first.created_ms)
        self.assertGreaterEqual(second.modified_ms, first.modified_ms)
        value, stat = await store.get("/u")
        self.assertEqual((value, stat.version), (b"2", 1))

    # -- compare and set ---------------------------------------------------------------------------

    async def test_create_if_absent(self):
        """expected_version -1 creates; a second create fails AlreadyExists and changes nothing."""
        store = await self._store()
        stat = await store.put("/cas/new", b"first", expected_version=-1)
        self.assertEqual(stat.version, 0)
        await self.assert_fails(store.put("/cas/new", b"second", expected_version=-1), AlreadyExistsError)
        value, stat = await store.get("/cas/new")
        self.assertEqual((value, stat.version), (b"first", 0))

    async def test_cas_update(self):
        """A put at the current version succeeds; at a stale one it fails BadVersion, changing nothing."""
        store = await self._store()
        await store.put("/cas/n", b"v0", expected_version=-1)
        stat = await store.put("/cas/n", b"v1", expected_version=0)
        self.assertEqual(stat.version, 1)
        await self.assert_fails(store.put("/cas/n", b"stale", expected_version=0), BadVersionError)
        await self.assert_fails(store.put("/cas/n", b"future", expected_version=7), BadVersionError)
        value, stat = await store.get("/cas/n")
        self.assertEqual((value, stat.version), (b"v1", 1))

    async def test_cas_update_absent(self):
        """A put with a version on an absent node fails NotFound and creates nothing."""
        store = await self._store()
        await self.assert_fails(store.put("/cas/absent", b"x", expected_version=0), NotFoundError)
        self.assertIsNone(await store.exists("/cas/absent"))

    async def test_cas_race_between_sessions(self):
        """Two sessions updating from the same version: exactly one wins."""
        store = await self._store()
        other = await self._other(store)
        await store.put("/race", b"0", expected_version=-1)
        d1 = store.put("/race", b"mine", expected_version=0)
        d2 = other.put("/race", b"theirs", expected_version=0)
        outcomes = []
        for d in (d1, d2):
            try:
                outcomes.append(await d)
            except BadVersionError:
                outcomes.append(None)
        winners = [o for o in outcomes if o is not None]
        self.assertEqual(len(winners), 1)
        self.assertEqual(winners[0].version, 1)

    # -- deletes -----------------------------------------------------------------------------------

    async def test_delete(self):
        """delete removes the node and its name from the parent's children."""
        store = await self._store()
        await store.put("/d/x", b"1")
        await store.put("/d/y", b"2")
        await store.delete("/d/x")
        self.assertIsNone(await store.get("/d/x"))
        self.assertEqual(await store.get_children("/d"), ["y"])

    async def test_delete_with_version(self):
        """delete with the wrong version fails BadVersion; with the right one it succeeds."""
        store = await self._store()
        await store.put("/dv", b"1")
        await store.put("/dv", b"2")
        await self.assert_fails(store.delete("/dv", expected_version=0), BadVersionError)
        self.assertIsNotNone(await store.exists("/dv"))
        await store.delete("/dv", expected_version=1)
        self.assertIsNone(await store.exists("/dv"))

    async def test_delete_absent(self):
        """delete of an absent node fails NotFound."""
        store = await self._store()
        await self.assert_fails(store.delete("/no/such"), NotFoundError)

    async def test_delete_not_empty(self):
        """delete of a node with children fails NotEmpty and removes nothing."""
        store = await self._store()
        await store.put("/ne/child", b"")
        await self.assert_fails(store.delete("/ne"), NotEmptyError)
        self.assertEqual(await store.get_children("/ne"), ["child"])

    async def test_delete_recursive(self):
        """delete_recursive removes a whole subtree and leaves its siblings."""
        store = await self._store()
        for path in ["/r/t/a", "/r/t/a/b", "/r/t/a/b/c", "/r/t/d", "/r/keep"]:
            await store.put(path, path.encode())
        await store.delete_recursive("/r/t")
        for path in ["/r/t", "/r/t/a", "/r/t/a/b/c", "/r/t/d"]:
            self.assertIsNone(await store.exists(path))
        self.assertEqual(await store.get_children("/r"), ["keep"])

    async def test_delete_recursive_absent(self):
        """delete_recursive of an absent path is not an error."""
        store = await self._store()
        self.assertIsNone(await store.delete_recursive("/not/there"))

    async def test_recreate_after_delete(self):
        """A node deleted and created again starts over at version 0."""
        store = await self._store()
        await store.put("/again", b"1")
        await store.put("/again", b"2")
        await store.delete("/again")
        stat = await store.put("/again", b"3", expected_version=-1)
        self.assertEqual(stat.version, 0)

    # -- sequential --------------------------------------------------------------------------------

    async def test_put_all_creates_and_updates_together(self):
        """put_all creates (parents too) and updates by version in one go, with a Stat per write."""
        store = await self._store()
        await store.put("/pa/ml", b"old")
        stats = await store.put_all([("/pa/deep/ledger", b"L", -1), ("/pa/ml", b"new", 0)])
        self.assertEqual([(s.path, s.version) for s in stats], [("/pa/deep/ledger", 0), ("/pa/ml", 1)])
        self.assertEqual((await store.get("/pa/deep/ledger"))[0], b"L")
        self.assertEqual((await store.get("/pa/ml"))[0], b"new")
        self.assertEqual(await store.get_children("/pa"), ["deep", "ml"])

    async def test_put_all_is_all_or_nothing(self):
        """A refused write of a put_all leaves every other write of it undone, and says which."""
        store = await self._store()
        await store.put("/pn/exists", b"x")
        await store.put("/pn/ml", b"v0")
        e = await self.assert_fails(
            store.put_all([("/pn/new", b"n", -1), ("/pn/exists", b"y", -1)]), AlreadyExistsError)
        self.assertEqual(e.failed_index, 1)
        e = await self.assert_fails(
            store.put_all([("/pn/new", b"n", -1), ("/pn/ml", b"v9", 5)]), BadVersionError)
        self.assertEqual(e.failed_index, 1)
        e = await self.assert_fails(
            store.put_all([("/pn/absent", b"n", 0), ("/pn/new", b"n", -1)]), NotFoundError)
        self.assertEqual(e.failed_index, 0)
        self.assertIsNone(await store.get("/pn/new"))
        self.assertEqual((await store.get("/pn/ml"))[0], b"v0")
        self.assertEqual((await store.get("/pn/exists"))[0], b"x")

    async def test_put_all_refuses_related_paths(self):
        """put_all paths must be distinct and none below another."""
        store = await self._store()
        await self.assert_fails(store.put_all([("/pr/a", b"", -1), ("/pr/a/b", b"", -1)]), ValueError)
        await self.assert_fails(store.put_all([("/pr/a", b"", -1), ("/pr/a", b"", -1)]), ValueError)
        self.assertIsNone(await store.get("/pr/a"))

    async def test_put_all_notifies_every_write(self):
        """Listeners hear each write of a put_all."""
        store = await self._store()
        recorder = NotificationRecorder()
        store.register_listener(recorder)
        await store.put("/pl/ml", b"")
        await recorder.wait_for("created", "/pl/ml")
        await store.put_all([("/pl/ledger", b"L", -1), ("/pl/ml", b"v", 0)])
        await recorder.wait_for("created", "/pl/ledger")
        await recorder.wait_for("modified", "/pl/ml")

    async def test_sequential_names_increase(self):
        """Sequential puts append a 10-digit counter that grows; the final path is in the Stat."""
        store = await self._store()
        paths = []
        for i in range(5):
            stat = await store.put("/seq/item-", str(i).encode(), sequential=True)
            paths.append(stat.path)
        for path in paths:
            self.assertRegex(path, r"^/seq/item-\d{10}$")
        self.assertEqual(paths, sorted(paths))
        self.assertEqual(len(set(paths)), 5)
        names = await store.get_children("/seq")
        self.assertEqual(names, [p.rsplit("/", 1)[1] for p in paths])
        value, _ = await store.get(paths[3])
        self.assertEqual(value, b"3")

    async def test_sequential_ephemeral(self):
        """Sequential and ephemeral combine (the leader-election pattern)."""
        store = await self._store()
        first = await store.put("/elect/n-", b"a", ephemeral=True, sequential=True)
        second = await store.put("/elect/n-", b"b", ephemeral=True, sequential=True)
        self.assertTrue(first.ephemeral and second.ephemeral)
        self.assertLess(int(re.sub(r"\D", "", first.path)), int(re.sub(r"\D", "", second.path)))

    # -- ephemeral nodes and sessions --------------------------------------------------------------

    async def test_ephemeral_gone_with_session(self):
        """Another session sees an ephemeral node until its owner's session closes."""
        store = await self._store()
        other = await self._other(store)
        self.assertNotEqual(store.session_id, other.session_id)
        stat = await other.put("/eph/owned", b"here", ephemeral=True)
        self.assertTrue(stat.ephemeral)
        await other.put("/eph/kept", b"persistent")
        seen = await store.exists("/eph/owned")
        self.assertIsNotNone(seen)
        self.assertTrue(seen.ephemeral)
        self.assertEqual(await store.get_children("/eph"), ["kept", "owned"])
        await other.close()
        self.assertIsNone(await store.exists("/eph/owned"))
        self.assertEqual(await store.get_children("/eph"), ["kept"])
        value, stat = await store.get("/eph/kept")
        self.assertEqual((value, stat.ephemeral), (b"persistent", False))

    async def test_ephemeral_update_stays_ephemeral(self):
        """Updating an ephemeral node keeps it ephemeral."""
        store = await self._store()
        other = await self._other(store)
        await other.put("/eph2/n", b"1", ephemeral=True)
        stat = await other.put("/eph2/n", b"2", expected_version=0)
        self.assertEqual((stat.version, stat.ephemeral), (1, True))
        await other.close()
        self.assertIsNone(await store.exists("/eph2/n"))

    async def test_ephemeral_deleted_by_other_session(self):
        """Any session may delete an ephemeral node; its owner closing later is harmless."""
        store = await self._store()
        other = await self._other(store)
        await other.put("/eph3/n", b"1", ephemeral=True)
        await store.delete("/eph3/n")
        self.assertIsNone(await store.exists("/eph3/n"))
        await store.put("/eph3/n", b"persistent now")
        await other.close()
        value, stat = await store.get("/eph3/n")
        self.assertEqual((value, stat.ephemeral), (b"persistent now", False))

    async def test_no_children_under_ephemeral(self):
        """A node cannot be created under an ephemeral node."""
        store = await self._store()
        await store.put("/eph4", b"", ephemeral=True)
        await self.assert_fails(store.put("/eph4/child", b""), MetadataStoreError)
        self.assertEqual(await store.get_children("/eph4"), [])

    async def test_closed_session_refuses(self):
        """A closed session's calls fail (as Deferreds); close is idempotent."""
        store = await self._store()
        other = await self._other(store)
        await other.close()
        await other.close()
        await self.assert_fails(other.put("/after/close", b""), Exception)
        self.assertIsNone(await store.exists("/after/close"))

    # -- listeners ---------------------------------------------------------------------------------

    async def test_listener_events(self):
        """A listener hears created, modified and deleted on the node, and children on its parent."""
        store = await self._store()
        recorder = NotificationRecorder()
        store.register_listener(recorder)
        await store.put("/l", b"")
        await recorder.wait_for("created", "/l")
        await store.put("/l/x", b"1")
        await recorder.wait_for("created", "/l/x")
        await recorder.wait_for("children", "/l")
        await store.put("/l/x", b"2")
        await recorder.wait_for("modified", "/l/x")
        await store.delete("/l/x")
        await recorder.wait_for("deleted", "/l/x")
        await recorder.wait_for("children", "/l", count=2)
        self.assertEqual(recorder.kinds_for("/l/x"), ["created", "modified", "deleted"])
        self.assertEqual(recorder.kinds_for("/l"), ["created", "children", "children"])

    async def test_listener_sees_other_session(self):
        """A listener hears changes made by another session, including its ephemeral nodes going."""
        store = await self._store()
        other = await self._other(store)
        recorder = NotificationRecorder()
        store.register_listener(recorder)
        await other.put("/lo/e", b"", ephemeral=True)
        await recorder.wait_for("created", "/lo/e")
        await other.close()
        await recorder.wait_for("deleted", "/lo/e")
        self.assertEqual(recorder.kinds_for("/lo/e"), ["created", "deleted"])

    async def test_listener_delete_recursive(self):
        """delete_recursive announces the deletion of every node in the subtree."""
        store = await self._store()
        recorder = NotificationRecorder()
        store.register_listener(recorder)
        await store.put("/lr/a/b", b"")
        await recorder.wait_for("created", "/lr/a/b")
        await store.delete_recursive("/lr/a")
        await recorder.wait_for("deleted", "/lr/a/b")
        await recorder.wait_for("deleted", "/lr/a")
        await recorder.wait_for("children", "/lr", count=2)    # /lr/a created, then deleted
