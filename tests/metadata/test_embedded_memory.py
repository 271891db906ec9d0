"""
What the embedded store holds per node (issue 14: memory per loaded topic): a parent's children
are the very path strings that key the tree, not second copies of their last segments, and the
listings, removals and snapshots built on them are unchanged.
"""

from twisted.internet import reactor, task
from twisted.trial.unittest import TestCase

from pulsar_twisted.metadata.embedded.log_format import decode_records, encode_record
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.embedded.tree import Tree


def shares_keys(tree: Tree) -> bool:
    """Every child entry is the same object as its node's key in ``tree.nodes``."""
    keys = {path: path for path in tree.nodes}
    return all(child is keys[child] for node in tree.nodes.values() for child in node.children)


class ChildrenSharePathsTests(TestCase):

    async def filled(self, store):
        await store.put("/a/b/c", b"1")         # parents made on the way
        await store.put("/a/b/d", b"2")
        await store.put("/a/x", b"3")
        await store.put("/a/b/seq-", b"", sequential=True)
        await store.put("/top", b"4")
        await store.put("/a/b/e", b"", ephemeral=True)

    async def test_children_are_the_keys(self):
        store = EmbeddedMetadataStore(None, task.Clock())
        await self.filled(store)
        tree = store._core.tree
        self.assertTrue(shares_keys(tree))
        self.assertEqual(tree.nodes["/a/b"].children, {"/a/b/c", "/a/b/d", "/a/b/seq-0000000000", "/a/b/e"})

    async def test_listings_unchanged(self):
        store = EmbeddedMetadataStore(None, task.Clock())
        await self.filled(store)
        self.assertEqual(await store.get_children("/"), ["a", "top"])
        self.assertEqual(await store.get_children("/a"), ["b", "x"])
        self.assertEqual(await store.get_children("/a/b"), ["c", "d", "e", "seq-0000000000"])
        self.assertEqual(await store.get_children("/a/b/c"), [])
        self.assertEqual(await store.get_children("/missing"), [])

    async def test_removals_unchanged(self):
        store = EmbeddedMetadataStore(None, task.Clock())
        await self.filled(store)
        await store.delete("/a/x")
        self.assertEqual(await store.get_children("/a"), ["b"])
        await store.delete_recursive("/a/b")
        self.assertEqual(await store.get_children("/a"), [])
        self.assertIsNone(await store.exists("/a/b/c"))
        self.assertEqual(store._core.tree.nodes["/a"].children, frozenset())
        self.assertEqual(sorted(store._core.tree.nodes), ["/", "/a", "/top"])

    async def test_replayed_and_snapshotted_tree_shares_keys(self):
        data_dir = self.mktemp()
        store = EmbeddedMetadataStore(data_dir, reactor)
        await store.start()
        await self.filled(store)
        await store.close()                 # snapshot on a clean close
        again = EmbeddedMetadataStore(data_dir, reactor)
        self.addCleanup(again.close)
        await again.start()
        await again.put("/a/b/f", b"5")     # after the snapshot: in the log
        tree = again._core.tree
        self.assertTrue(shares_keys(tree))
        self.assertEqual(await again.get_children("/a/b"), ["c", "d", "f", "seq-0000000000"])
        # Snapshot order: every parent before its children, siblings by name.
        [(_, ops, _)] = list(decode_records(encode_record(1, tree.snapshot_ops()), 0))
        replayed = Tree()
        replayed.apply(ops)
        self.assertEqual(sorted(replayed.nodes), sorted(p for p in tree.nodes if p != "/a/b/e"))


class SharedTimesTests(TestCase):

    async def test_writes_of_one_millisecond_share_their_time(self):
        """Nodes written in the same millisecond hold one int for their times; the times are
        those of the reactor's clock as before."""
        clock = task.Clock()
        clock.advance(1_764_972_000.1234)
        store = EmbeddedMetadataStore(None, clock)
        first = await store.put("/a/one", b"")
        second = await store.put("/a/two", b"")
        nodes = store._core.tree.nodes
        self.assertEqual(first.created_ms, 1_764_972_000_123)
        self.assertIs(nodes["/a/one"].ctime, nodes["/a/two"].ctime)
        self.assertIs(nodes["/a/one"].mtime, nodes["/a/two"].mtime)
        clock.advance(0.002)
        third = await store.put("/a/one", b"x")
        self.assertEqual((third.created_ms, third.modified_ms), (1_764_972_000_123, 1_764_972_000_125))
        self.assertEqual((second.created_ms, second.modified_ms), (1_764_972_000_123, 1_764_972_000_123))


class _Record:
    """An immutable value with ``__bytes__`` (as LedgerMetadata)."""

    def __init__(self, data: bytes):
        self.data = data
        self.encoded = 0

    def __bytes__(self) -> bytes:
        self.encoded += 1
        return self.data


class RecordValuesTests(TestCase):
    """A record given to ``put`` is kept as given (not a copy of its bytes) and is durable as
    its bytes: in the log, in snapshots and after a restart."""

    async def test_kept_as_given_and_encoded_once_per_write(self):
        store = EmbeddedMetadataStore(None, task.Clock())
        record = _Record(b"ledger json")
        await store.put("/ledgers/L1", record)
        self.assertIs(store._core.tree.nodes["/ledgers/L1"].value, record)
        self.assertEqual(record.encoded, 1)
        self.assertEqual((await store.get("/ledgers/L1"))[0], b"ledger json")
        data = bytearray(b"plain")
        await store.put("/ledgers/L2", data)
        data[:] = b"changed"            # a bytearray is copied, as before
        self.assertEqual((await store.get("/ledgers/L2"))[0], b"plain")

    async def test_durable_through_log_and_snapshot(self):
        data_dir = self.mktemp()
        store = EmbeddedMetadataStore(data_dir, reactor)
        await store.start()
        await store.put("/ledgers/L1", _Record(b"one"))
        await store.put_all([("/ledgers/L2", _Record(b"two"), -1), ("/ledgers/L1", _Record(b"one+"), 0)])
        store._abandon()                # a crash: the log alone
        again = EmbeddedMetadataStore(data_dir, reactor)
        await again.start()
        self.assertEqual((await again.get("/ledgers/L1"))[0], b"one+")
        self.assertEqual((await again.get("/ledgers/L2"))[0], b"two")
        await again.put("/ledgers/L3", _Record(b"three"))
        await again.close()             # a snapshot of the records' bytes
        third = EmbeddedMetadataStore(data_dir, reactor)
        self.addCleanup(third.close)
        await third.start()
        for path, value in (("/ledgers/L1", b"one+"), ("/ledgers/L2", b"two"), ("/ledgers/L3", b"three")):
            self.assertEqual((await third.get(path))[0], value)
            self.assertIsInstance(third._core.tree.nodes[path].value, bytes)

    async def test_cut_keeps_the_record_of_its_time(self):
        """A record replaced during a snapshot's walk goes in the snapshot as it was at the cut."""
        store = EmbeddedMetadataStore(None, task.Clock())
        await store.put("/ledgers/L1", _Record(b"before"))
        tree = store._core.tree
        paths = tree.begin_cut()
        await store.put("/ledgers/L1", _Record(b"after"))
        [(_, ops, _)] = list(decode_records(encode_record(1, tree.cut_ops(paths)), 0))
        tree.end_cut()
        self.assertEqual([op[2] for op in ops if op[1] == "/ledgers/L1"], [b"before"])

    async def test_bytes_subclass_stored_as_plain_bytes(self):
        class Tagged(bytes):
            pass
        store = EmbeddedMetadataStore(None, task.Clock())
        await store.put("/ledgers/L1", Tagged(b"x"))
        value, _ = await store.get("/ledgers/L1")
        self.assertIs(type(value), bytes)
        self.assertIs(type(store._core.tree.nodes["/ledgers/L1"].value), bytes)


class NodeSlotsTests(TestCase):

    async def test_owner_and_counter_share_a_slot_unused_by_most_nodes(self):
        """A persistent node that is no sequential parent holds None for its owner and counter
        (six slots, an 80-byte block: issue 14); ephemeral nodes and sequential parents keep
        theirs."""
        store = EmbeddedMetadataStore(None, task.Clock())
        await store.put("/p/leaf", b"")
        await store.put("/p/seq-", b"", sequential=True)
        await store.put("/p/seq-", b"", sequential=True)
        other = store.new_session()
        await other.put("/p/eph", b"", ephemeral=True)
        nodes = store._core.tree.nodes
        self.assertIsNone(nodes["/p/leaf"]._owner_seq)
        self.assertEqual((nodes["/p/leaf"].owner, nodes["/p/leaf"].seq), (None, 0))
        self.assertEqual((nodes["/p"].owner, nodes["/p"].seq), (None, 2))
        self.assertEqual((nodes["/p/eph"].owner, nodes["/p/eph"].seq), (other.session_id, 0))
        self.assertTrue((await other.exists("/p/eph")).ephemeral)
        self.assertFalse(hasattr(nodes["/p/leaf"], "__dict__"))
        self.assertEqual(len(type(nodes["/p/leaf"]).__slots__), 6)
        await other.close()
        self.assertIsNone(await store.exists("/p/eph"))
