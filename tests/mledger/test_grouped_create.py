"""
A managed ledger's first ledger and its node naming that ledger are one atomic metadata write
(issue 14, item 4: topic creations per second): ``create_ledger(record=...)`` puts both with
``IMetadataStore.put_all``, so a new topic waits for one durable commit instead of two in a row,
and a crash keeps both or neither (never a node naming a ledger that does not exist, or a ledger
some other writer owns).
"""

import random

from twisted.internet import reactor, task
from twisted.trial import unittest

from pulsar_twisted.ledger.bookies import LocalBookieClient
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import LEDGERS_ROOT
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.resources.bookies import register_bookie
from pulsar_twisted.resources.ledgers import ledger_path
from pulsar_twisted.testing.fake_bookie import FakeBookie

from tests.mledger.test_support import data

NAME = "public/default/persistent/t"
ML_PATH = formats.ledger_path(NAME)


class RecordingStore:
    """An IMetadataStore wrapper recording the writes (``put`` paths, ``put_all`` path lists), not
    counting the ledger-id nodes; ``before_put_all(writes)`` runs first (a rival's change)."""

    def __init__(self, store):
        self._store = store
        self.writes = []
        self.before_put_all = None

    def put(self, path, value, expected_version=None, **kw):
        if not path.startswith(LEDGERS_ROOT + "/idgen"):
            self.writes.append(path)
        return self._store.put(path, value, expected_version=expected_version, **kw)

    def put_all(self, writes):
        if self.before_put_all is not None:
            self.before_put_all(writes)
        self.writes.append([path for path, _, _ in writes])
        return self._store.put_all(writes)

    def __getattr__(self, name):
        return getattr(self._store, name)


class GroupedCreateTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.memory = EmbeddedMetadataStore(None, self.clock)
        self.store = RecordingStore(self.memory)
        self.bookies = {f"b{i}": FakeBookie(f"b{i}", self.clock) for i in range(3)}
        for bookie_id in self.bookies:
            self.successResultOf(register_bookie(self.memory, bookie_id))

    def factory(self, ledger_store=None):
        client = BookKeeperClient(ledger_store or self.store, LocalBookieClient(self.bookies),
                                  self.clock, placement=RandomPlacementPolicy(random.Random(1)))
        return ManagedLedgerFactory(client, self.store, self.clock,
                                    ManagedLedgerConfig(min_rollover_time_ms=0))

    def ledgers(self, store=None):
        children = self.successResultOf((store or self.memory).get_children(LEDGERS_ROOT))
        return sorted(int(c[1:]) for c in children if c.startswith("L"))

    def listed(self):
        value, _ = self.successResultOf(self.memory.get(ML_PATH))
        return [row[0] for row in formats.decode_ledger_info(value)[0]]

    def test_new_topic_is_one_write(self):
        """A new managed ledger: its first ledger's metadata and its node, in one put_all."""
        ml = self.successResultOf(self.factory().open(NAME))
        lid = ml.current_ledger_id()
        self.assertEqual(self.store.writes, [[ledger_path(lid), ML_PATH]])
        self.assertEqual(self.ledgers(), [lid])
        self.assertEqual(self.listed(), [lid])
        self.assertEqual(self.successResultOf(ml.add_entry(data(0))).ledger_id, lid)

    def test_reopen_is_one_write_too(self):
        """Opening an existing managed ledger records its new ledger the same way (by version)."""
        ml = self.successResultOf(self.factory().open(NAME))
        self.successResultOf(ml.open_cursor("sub", "earliest"))
        first = self.successResultOf(ml.add_entry(data(0)))
        self.successResultOf(ml.close())
        self.store.writes.clear()
        again = self.successResultOf(self.factory().open(NAME))
        lid = again.current_ledger_id()
        self.assertGreater(lid, first.ledger_id)
        self.assertIn([ledger_path(lid), ML_PATH], self.store.writes)
        self.assertNotIn(ML_PATH, self.store.writes)       # the cursor's own node is written
        self.assertEqual(self.listed(), [first.ledger_id, lid])

    def test_rival_node_fences_and_leaves_no_ledger(self):
        """Another broker makes the node first: we are fenced and no ledger was created."""
        def rival(writes):
            self.successResultOf(self.memory.put(
                ML_PATH, formats.encode_ledger_info([], {}), expected_version=-1))
        self.store.before_put_all = rival
        self.failureResultOf(self.factory().open(NAME), ManagedLedgerFencedError)
        self.assertEqual(self.ledgers(), [])
        self.assertEqual(self.listed(), [])

    def test_taken_ledger_id_is_skipped(self):
        """An id whose metadata exists already (an older id scheme's writer): another id is taken,
        the other ledger's metadata is left alone and our node never names it."""
        taken = []

        def rival(writes):
            if not taken:
                path = writes[0][0]
                taken.append(int(path.rsplit("L", 1)[1]))
                self.successResultOf(self.memory.put(path, b"someone else's", expected_version=-1))
        self.store.before_put_all = rival
        ml = self.successResultOf(self.factory().open(NAME))
        lid = ml.current_ledger_id()
        self.assertNotEqual(lid, taken[0])
        self.assertEqual(self.listed(), [lid])
        self.assertEqual(self.successResultOf(self.memory.get(ledger_path(taken[0])))[0],
                         b"someone else's")

    def test_separate_ledger_store_is_two_writes(self):
        """Ledger metadata in another store (a separate bookie metadata service): no put_all."""
        bookie_store = EmbeddedMetadataStore(None, self.clock)
        for bookie_id in self.bookies:
            self.successResultOf(register_bookie(bookie_store, bookie_id))
        ml = self.successResultOf(self.factory(ledger_store=bookie_store).open(NAME))
        lid = ml.current_ledger_id()
        self.assertEqual(self.store.writes, [ML_PATH])
        self.assertEqual(self.ledgers(bookie_store), [lid])
        self.assertEqual(self.ledgers(), [])
        self.assertEqual(self.listed(), [lid])


class CrashAfterCreateTests(unittest.TestCase):
    """Durable store on the real reactor: a broker killed right after a topic's creation leaves a
    managed ledger that loads."""

    async def test_killed_after_create_loads(self):
        """Killed (no flush, no close) right after the open fired: the next open recovers it."""
        data_dir = self.mktemp()
        bookies = {f"b{i}": FakeBookie(f"b{i}", reactor) for i in range(3)}

        async def start():
            store = EmbeddedMetadataStore(data_dir, reactor)
            await store.start()
            for bookie_id in bookies:
                await register_bookie(store, bookie_id)
            client = BookKeeperClient(store, LocalBookieClient(bookies), reactor)
            return store, ManagedLedgerFactory(client, store, reactor,
                                               ManagedLedgerConfig(min_rollover_time_ms=0))

        store, factory = await start()
        ml = await factory.open(NAME)
        first = ml.current_ledger_id()
        store._abandon()
        factory.timers.stop()   # the dead process's timers
        store, factory = await start()
        self.addCleanup(store.close)
        again = await factory.open(NAME)
        self.assertGreater(again.current_ledger_id(), first)
        position = await again.add_entry(data(1))
        self.assertEqual(position.ledger_id, again.current_ledger_id())
        ledgers = [row[0] for row in formats.decode_ledger_info((await store.get(ML_PATH))[0])[0]]
        # The empty first ledger was dropped on recovery (as Pulsar does), the new one recorded.
        self.assertEqual(ledgers, [again.current_ledger_id()])
        await factory.shutdown()


class FakeClientRecordTests(unittest.TestCase):
    """The fake ledger client given the store makes the record write too (its ledgers stay in
    memory), so managed-ledger tests on it take the grouped path."""

    def test_fake_client_records(self):
        from pulsar_twisted.testing.fake_ledger import FakeLedgerClient
        clock = task.Clock()
        store = RecordingStore(EmbeddedMetadataStore(None, clock))
        bk = FakeLedgerClient(clock, store=store)
        self.assertTrue(bk.shares_store(store))
        self.assertFalse(FakeLedgerClient(clock).shares_store(store))
        factory = ManagedLedgerFactory(bk, store, clock, ManagedLedgerConfig(min_rollover_time_ms=0))
        ml = self.successResultOf(factory.open(NAME))
        self.assertEqual(store.writes, [[ML_PATH]])
        value, _ = self.successResultOf(store.get(ML_PATH))
        self.assertEqual([row[0] for row in formats.decode_ledger_info(value)[0]], [ml.current_ledger_id()])
        self.assertEqual(bk.ledger_ids(), [ml.current_ledger_id()])
