"""
What opening a new managed ledger costs (issue 14, item 4: topic creation rate and memory): the
metadata writes on the way to a usable topic, and what an idle topic with a producer holds.
"""

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.cache import NO_ENTRY_CACHE
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.resources.ledgers import LedgerManager

from tests.mledger.test_support import ManagedLedgerHarness, data

NAME = "public/default/persistent/t"


class CountingStore:
    """An IMetadataStore wrapper recording the paths written, in order; ``before_put(path)`` runs
    first (a concurrent writer's change, say)."""

    def __init__(self, store):
        self._store = store
        self.puts = []
        self.before_put = None

    def put(self, path, value, expected_version=None, **kw):
        if self.before_put is not None:
            self.before_put(path)
        self.puts.append(path)
        return self._store.put(path, value, expected_version=expected_version, **kw)

    def __getattr__(self, name):
        return getattr(self._store, name)


class NewManagedLedgerTests(ManagedLedgerHarness, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.store = CountingStore(self.store)
        self.factory = self.new_factory()

    def test_one_metadata_write_creates_and_records(self):
        """A new managed ledger's node is created by the one write that records its first ledger."""
        ml = self.open(NAME)
        path = formats.ledger_path(NAME)
        self.assertEqual(self.store.puts, [path])
        ledgers, _, _ = formats.decode_ledger_info(self.successResultOf(self.store.get(path))[0])
        self.assertEqual([row[0] for row in ledgers], [ml.current_ledger_id()])
        self.assertEqual(ml.add_entry(data(0)).result.ledger_id, ml.current_ledger_id())

    def test_reopen_reads_what_was_created(self):
        """The node written at creation is a complete ledger list: the next owner recovers it."""
        ml = self.open(NAME)
        self.cursor(ml)  # keeps the entries from being trimmed as consumed
        self.add(ml, 3)
        self.successResultOf(ml.close())
        again = self.open(NAME, factory=self.new_factory())
        self.assertEqual(again.number_of_entries(), 3)

    def test_losing_the_creation_race_fences_and_drops_the_ledger(self):
        """Another broker creating the node between our read and our write: we are fenced and the
        ledger we created for nothing is deleted."""
        path = formats.ledger_path(NAME)

        def rival(written):
            if written == path and not self.store.puts:
                self.successResultOf(self.store._store.put(
                    path, formats.encode_ledger_info([], {}), expected_version=-1))
        self.store.before_put = rival
        self.failureResultOf(self.factory.open(NAME), ManagedLedgerFencedError)
        self.assertEqual(self.bk.ledger_ids(), [])

    def test_producer_only_topic_caches_nothing(self):
        """Entries are cached only while a cursor may read them (Pulsar's hasActiveCursors)."""
        ml = self.open(NAME)
        self.add(ml, 3)
        self.assertEqual(len(ml._cache), 0)
        # Not even an empty cache of its own (issue 14): the shared empty one.
        self.assertIs(ml._cache, NO_ENTRY_CACHE)
        self.cursor(ml)
        self.add(ml, 2, start=3)
        self.assertEqual(len(ml._cache), 2)
        self.assertIsNot(ml._cache, NO_ENTRY_CACHE)
        self.assertIs(ml._cache.budget, self.factory.cache_budget)
        self.assertEqual(len(NO_ENTRY_CACHE), 0)

    def test_ledger_client_is_the_factorys(self):
        """Not a slot of its own (issue 14: a smaller allocation block per managed ledger)."""
        ml = self.open(NAME)
        self.assertIs(ml.ledger_client, self.factory.ledger_client)
        self.assertNotIn("ledger_client", type(ml).__slots__)

    def test_idle_topic_holds_no_weak_set(self):
        """No WeakSet of non-durable cursors until there is one (~700 bytes per topic otherwise)."""
        ml = self.open(NAME)
        self.assertEqual(len(ml._non_durable), 0)
        self.assertNotIsInstance(ml._non_durable, set)
        cursor = ml.new_non_durable_cursor(ml.last_confirmed_entry())
        self.assertIn(cursor, ml._non_durable)


class HeldDeletes:
    """A store whose deletes stay pending until ``release()``."""

    def __init__(self, store):
        self._store = store
        self.held = []

    def delete(self, path, expected_version=None):
        d = defer.Deferred()
        self.held.append((path, d))
        return d

    def release(self):
        for path, d in self.held:
            self._store.delete(path).chainDeferred(d)

    def __getattr__(self, name):
        return getattr(self._store, name)


class LedgerIdTests(unittest.TestCase):
    def setUp(self):
        self.store = EmbeddedMetadataStore(None, task.Clock())

    def test_id_does_not_wait_for_the_node_deletion(self):
        """A ledger id is handed out as soon as its sequential node exists; ids stay unique."""
        held = HeldDeletes(self.store)
        manager = LedgerManager(held)
        first = self.successResultOf(manager.new_ledger_id())
        second = self.successResultOf(manager.new_ledger_id())
        self.assertNotEqual(first, second)
        # One node serves a whole block of ids (LedgerManager.new_ledger_id); a second block
        # is fetched ahead (PREFETCH_IDS).
        self.assertEqual(len(held.held), 2)
        held.release()
        self.assertEqual(self.successResultOf(self.store.get_children("/ledgers/idgen")), [])

