"""Auto-recovery: the auditor marks ledgers of lost bookies, workers re-replicate them."""

import json
import random

from twisted.internet import defer, reactor, task
from twisted.trial import unittest

from pulsar_twisted.ledger.autorecovery import (
    AUDITOR_ELECTION_PATH, LOCKS_PATH, UNDERREPLICATED_PATH, AutoRecoveryService,
    mark_underreplicated, underreplicated_path)
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy, write_set
from pulsar_twisted.metadata.interfaces import Stat
from pulsar_twisted.resources.bookies import unregister_bookie
from tests.ledger.test_handle import LedgerHarness
from tests.metadata.test_zookeeper import ZooKeeperRootMixin

PASSWORD = b"pw"


class AutoRecoveryHarness(LedgerHarness):
    """Five bookies, ledgers E=3 Qw=2 Qa=2, and helpers to lose bookies and check replicas."""

    bookie_count = 5

    def make_service(self, store=None, delay=0.0, **kw):
        kw.setdefault("passwords", (PASSWORD,))
        kw.setdefault("placement", RandomPlacementPolicy(random.Random(7)))
        svc = AutoRecoveryService(store or self.store, self.client, self.bookie_client, self.clock,
                                  lost_bookie_recovery_delay=delay, **kw)
        svc.startService()
        self.addCleanup(svc.stopService)
        return svc

    def write_ledger(self, count, close=True, e=3, w=2, a=2):
        handle = self.create(e, w, a, password=PASSWORD)
        self.add_all(handle, [b"payload-%d-%d" % (handle.ledger_id, i) for i in range(count)])
        if close:
            self.successResultOf(handle.close())
        return handle

    def lose(self, bookie_id):
        """The bookie is gone for good: its registration goes and it answers nothing."""
        self.successResultOf(unregister_bookie(self.store, bookie_id))
        self.bookies[bookie_id].available = False

    def markers(self):
        return self.successResultOf(self.store.get_children(UNDERREPLICATED_PATH))

    def assert_fully_replicated(self, ledger_id, lost):
        """Every entry has Qw replicas on live bookies, exactly where the metadata says."""
        metadata = self.stored_metadata(ledger_id)
        self.assertFalse(metadata.all_bookies() & set(lost), metadata.ensembles)
        last = metadata.last_entry_id
        for entry_id in range(last + 1):
            replicas = [b for b in metadata.ensemble_for(entry_id)]
            holders = [replicas[i] for i in
                       write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)]
            for bookie in holders:
                self.assertTrue(self.bookies[bookie].available)
                self.assertIn(entry_id, self.bookies[bookie].entry_ids(ledger_id),
                              f"{ledger_id}:{entry_id} missing on {bookie}")
            live_copies = [b for b, fake in self.bookies.items()
                           if fake.available and entry_id in fake.entry_ids(ledger_id)]
            self.assertGreaterEqual(len(live_copies), metadata.write_quorum)

    def read_fresh(self, ledger_id):
        """Read everything through a new client's read-only handle."""
        client = self.make_client()
        self.successResultOf(client.start())
        handle = self.successResultOf(client.open_ledger(ledger_id, PASSWORD, recovery=False))
        if handle.last_add_confirmed < 0:
            return []
        entries = self.successResultOf(handle.read_entries(0, handle.last_add_confirmed))
        return [e.data for e in entries]


class LostBookieTests(AutoRecoveryHarness, unittest.TestCase):

    def test_lost_bookie_replicated_after_delay(self):
        """A bookie gone for the whole delay: its ledgers are marked, copied, fixed, unmarked."""
        svc = self.make_service(delay=30)
        self.assertTrue(svc.auditor.is_auditor)
        handles = [self.write_ledger(25) for _ in range(4)]
        victim = handles[0].metadata.ensembles[0][1][1]
        affected = [h.ledger_id for h in handles if victim in h.metadata.all_bookies()]
        self.assertIn(handles[0].ledger_id, affected)
        untouched = {h.ledger_id: self.stored_metadata(h.ledger_id) for h in handles
                     if h.ledger_id not in affected}
        self.lose(victim)
        self.clock.advance(29)
        self.assertEqual(self.markers(), [])
        self.clock.advance(1)
        self.assertEqual(self.markers(), [])
        self.assertEqual(svc.worker.replicated, len(affected))
        for handle in handles:
            self.assert_fully_replicated(handle.ledger_id, [victim])
            self.assertEqual(self.read_fresh(handle.ledger_id),
                             [b"payload-%d-%d" % (handle.ledger_id, i) for i in range(25)])
        for ledger_id, metadata in untouched.items():
            self.assertEqual(self.stored_metadata(ledger_id), metadata)
        self.assertEqual(self.successResultOf(self.store.get_children(LOCKS_PATH)), [])

    def test_marker_names_missing_bookies(self):
        """Without a worker, the auditor's marker stays and names the lost bookie."""
        self.make_service(worker=False)
        handle = self.write_ledger(5)
        victim = handle.metadata.ensembles[0][1][0]
        self.lose(victim)
        self.clock.advance(0)
        raw, _ = self.successResultOf(self.store.get(underreplicated_path(handle.ledger_id)))
        self.assertEqual(json.loads(raw), {"missing_bookies": [victim]})

    def test_bookie_back_within_delay_triggers_nothing(self):
        """A bookie that re-registers before the delay ends costs no marker and no copy."""
        from pulsar_twisted.resources.bookies import register_bookie
        self.make_service(delay=30)
        handles = [self.write_ledger(10) for _ in range(3)]
        before = {h.ledger_id: self.stored_metadata(h.ledger_id) for h in handles}
        adds = {b: fake.calls["add"] for b, fake in self.bookies.items()}
        victim = handles[0].metadata.ensembles[0][1][0]
        self.lose(victim)
        self.clock.advance(20)
        self.bookies[victim].available = True
        self.successResultOf(register_bookie(self.store, victim))
        self.clock.advance(100)
        self.assertEqual(self.markers(), [])
        self.assertEqual({h.ledger_id: self.stored_metadata(h.ledger_id) for h in handles}, before)
        self.assertEqual({b: fake.calls["add"] for b, fake in self.bookies.items()}, adds)

    def test_read_only_switch_is_not_a_loss(self):
        """A bookie moving from writable to read-only in one step is still registered."""
        from pulsar_twisted.resources.bookies import register_bookie
        self.make_service()
        handle = self.write_ledger(5)
        bookie = handle.metadata.ensembles[0][1][0]
        self.successResultOf(unregister_bookie(self.store, bookie))
        self.successResultOf(register_bookie(self.store, bookie, read_only=True))
        self.clock.advance(0)
        self.assertEqual(self.markers(), [])
        self.assertEqual(self.stored_metadata(handle.ledger_id), handle.metadata)

    def test_open_ledger_waits_for_its_writer(self):
        """Only closed segments of an open ledger are copied; the writer's own ensemble change
        turns its last segment into a closed one, which is then copied too."""
        self.make_service()
        handle = self.write_ledger(9, close=False)
        victim = handle.metadata.ensembles[0][1][2]
        self.lose(victim)
        self.clock.advance(0)
        # The single segment is the writer's: nothing is copied, the marker stays.
        self.assertEqual(len(self.markers()), 1)
        self.assertIn(victim, self.stored_metadata(handle.ledger_id).all_bookies())
        # The writer's next add to the lost bookie fails: it changes its ensemble; the worker
        # then copies the now closed first segment and drops the marker.
        self.add_all(handle, [b"payload-%d-%d" % (handle.ledger_id, i) for i in range(9, 12)])
        self.assertEqual(self.markers(), [])
        # The writer's metadata version is stale now; its close re-reads and keeps our fix.
        self.successResultOf(handle.close())
        self.assert_fully_replicated(handle.ledger_id, [victim])
        self.assertEqual(self.read_fresh(handle.ledger_id),
                         [b"payload-%d-%d" % (handle.ledger_id, i) for i in range(12)])

    def test_trigger_audit_ignores_delay(self):
        """trigger_audit marks at once every ledger naming an unregistered bookie."""
        svc = self.make_service(delay=3600, worker=False)
        handle = self.write_ledger(4)
        victim = handle.metadata.ensembles[0][1][0]
        self.lose(victim)
        self.assertEqual(self.markers(), [])
        marked = self.successResultOf(svc.trigger_audit())
        self.assertEqual(marked, [handle.ledger_id])
        self.assertEqual(self.successResultOf(svc.trigger_audit()), [])

    def test_no_replacement_bookie_keeps_marker_then_retries(self):
        """With no writable bookie outside the segment the marker stays; a new bookie fixes it."""
        from pulsar_twisted.resources.bookies import register_bookie
        from pulsar_twisted.testing.fake_bookie import FakeBookie
        self.make_service(retry_delay=60)
        handle = self.write_ledger(6, e=3, w=3, a=2)
        ensemble = handle.metadata.ensembles[0][1]
        others = [b for b in self.bookies if b not in ensemble]
        for bookie in others:
            self.lose(bookie)
        self.lose(ensemble[0])
        self.clock.advance(0)
        self.assertEqual(len(self.markers()), 1)
        self.bookies["bookie-new"] = FakeBookie("bookie-new", self.clock)
        self.successResultOf(register_bookie(self.store, "bookie-new"))
        self.assertEqual(self.markers(), [])
        self.assert_fully_replicated(handle.ledger_id, [ensemble[0]] + others)

    def test_wrong_password_keeps_marker(self):
        """A ledger none of the worker's passwords opens is left marked (and logged)."""
        self.make_service(passwords=(b"other",))
        handle = self.write_ledger(3)
        victim = handle.metadata.ensembles[0][1][0]
        self.lose(victim)
        self.clock.advance(0)
        self.assertEqual(len(self.markers()), 1)
        self.assertIn(victim, self.stored_metadata(handle.ledger_id).all_bookies())

    def test_deleted_ledger_drops_marker(self):
        """A marker for a ledger whose metadata is gone is removed."""
        svc = self.make_service()
        self.successResultOf(mark_underreplicated(self.store, 999, ["bookie-0"]))
        self.assertEqual(self.markers(), [])
        self.assertEqual(svc.worker.replicated, 1)


class FailoverTests(AutoRecoveryHarness, unittest.TestCase):

    def test_second_auditor_takes_over(self):
        """When the elected auditor's session closes, the waiting candidate is elected and audits."""
        first_session = self.store.new_session()
        second_session = self.store.new_session()
        first = self.make_service(first_session, worker=False)
        second = self.make_service(second_session, worker=False)
        self.assertTrue(first.auditor.is_auditor)
        self.assertFalse(second.auditor.is_auditor)
        raw, stat = self.successResultOf(self.store.get(AUDITOR_ELECTION_PATH))
        self.assertTrue(stat.ephemeral)
        self.assertEqual(json.loads(raw)["id"], first.auditor.auditor_id)
        self.successResultOf(first_session.close())
        self.assertTrue(second.auditor.is_auditor)
        raw, _ = self.successResultOf(self.store.get(AUDITOR_ELECTION_PATH))
        self.assertEqual(json.loads(raw)["id"], second.auditor.auditor_id)
        handle = self.write_ledger(5)
        victim = handle.metadata.ensembles[0][1][0]
        self.lose(victim)
        self.clock.advance(0)
        self.assertEqual(self.markers(), ["L%010d" % handle.ledger_id])

    def test_stopped_auditor_hands_over(self):
        """stopService releases the election node at once."""
        first = self.make_service(self.store.new_session(), worker=False)
        second = self.make_service(self.store.new_session(), worker=False)
        self.successResultOf(first.stopService())
        self.assertTrue(second.auditor.is_auditor)

    def test_new_auditor_audits_bookies_lost_before_it(self):
        """Bookies that vanished while no auditor ran are treated as lost when one is elected."""
        handle = self.write_ledger(5)
        victim = handle.metadata.ensembles[0][1][1]
        self.lose(victim)
        self.make_service(delay=10, worker=False)
        self.clock.advance(9)
        self.assertEqual(self.markers(), [])
        self.clock.advance(1)
        self.assertEqual(self.markers(), ["L%010d" % handle.ledger_id])

    def test_worker_dying_mid_copy_leaves_marker_for_another(self):
        """A worker whose session closes mid-copy loses its lock; another worker completes."""
        self.make_service(worker=False)
        session_a = self.store.new_session()
        session_b = self.store.new_session()
        handle = self.write_ledger(30)
        for fake in self.bookies.values():
            fake.hold("add")
        worker_a = self.make_service(session_a, auditor=False).worker
        worker_b = self.make_service(session_b, auditor=False).worker
        victim = handle.metadata.ensembles[0][1][0]
        self.lose(victim)
        self.clock.advance(0)
        # A took the ledger and is stuck in its first batch of copies.
        self.assertEqual(worker_a.current, handle.ledger_id)
        self.assertIsNone(worker_b.current)
        held = [call for fake in self.bookies.values() for call in fake.held]
        self.assertTrue(held)
        for fake in self.bookies.values():
            fake.clear_faults()
        self.successResultOf(session_a.close())
        # Its lock vanished with its session; B took over and finished.
        self.assertEqual(self.markers(), [])
        self.assertEqual(worker_b.replicated, 1)
        self.assert_fully_replicated(handle.ledger_id, [victim])
        fixed = self.stored_metadata(handle.ledger_id)
        # A wakes up: its copies land (harmlessly) but it writes no metadata.
        for fake in self.bookies.values():
            fake.release_held()
        self.assertEqual(worker_a.replicated, 0)
        self.assertEqual(self.stored_metadata(handle.ledger_id), fixed)
        self.assertEqual(self.read_fresh(handle.ledger_id),
                         [b"payload-%d-%d" % (handle.ledger_id, i) for i in range(30)])


class MarkerTests(AutoRecoveryHarness, unittest.TestCase):

    def test_mark_merges_missing_bookies(self):
        """Marking twice merges the bookie lists; re-marking the same bookies changes nothing."""
        self.assertTrue(self.successResultOf(mark_underreplicated(self.store, 7, ["b"])))
        self.assertTrue(self.successResultOf(mark_underreplicated(self.store, 7, ["a"])))
        self.assertFalse(self.successResultOf(mark_underreplicated(self.store, 7, ["a", "b"])))
        raw, stat = self.successResultOf(self.store.get(underreplicated_path(7)))
        self.assertIsInstance(stat, Stat)
        self.assertEqual(json.loads(raw), {"missing_bookies": ["a", "b"]})


class ZooKeeperAutoRecoveryTests(ZooKeeperRootMixin, unittest.TestCase):
    """The same service on ZooKeeper (PULSAR_TEST_ZK; skipped without): its notifications arrive
    from kazoo's threads, so this checks election and bookie watching on the real store."""

    root_prefix = "autorecovery-"

    async def _eventually(self, predicate, what, timeout=20.0):
        # Real store, real threads: wait on the reactor, bounded in time.
        deadline = reactor.seconds() + timeout
        while reactor.seconds() < deadline:
            if await predicate():
                return
            await task.deferLater(reactor, 0.05, lambda: None)
        self.fail(f"timed out waiting for {what}")

    def test_lost_bookie_on_zookeeper(self):
        return defer.Deferred.fromCoroutine(self._lost_bookie_on_zookeeper())

    async def _lost_bookie_on_zookeeper(self):
        from pulsar_twisted.ledger.bookies import LocalBookieClient
        from pulsar_twisted.ledger.client import BookKeeperClient
        from pulsar_twisted.resources.bookies import register_bookie
        from pulsar_twisted.resources.ledgers import LedgerManager
        from pulsar_twisted.testing.fake_bookie import FakeBookie
        bookie_session = await self._open()
        store = await self._open()
        bookies = {f"bookie-{i}": FakeBookie(f"bookie-{i}", reactor) for i in range(4)}
        for bookie_id in bookies:
            await register_bookie(bookie_session, bookie_id)
        bookie_client = LocalBookieClient(bookies)
        client = BookKeeperClient(store, bookie_client, reactor)
        await client.start()
        await self._eventually(lambda: defer.succeed(len(client.writable_bookies) == 4), "bookies")
        handle = await client.create_ledger(3, 2, 2, PASSWORD)
        for i in range(10):
            await handle.add_entry(b"e%d" % i)
        await handle.close()
        svc = AutoRecoveryService(store, client, bookie_client, reactor, passwords=(PASSWORD,))
        svc.startService()
        self.addCleanup(svc.stopService)
        await self._eventually(lambda: defer.succeed(svc.auditor.is_auditor), "the election")
        victim = handle.metadata.ensembles[0][1][0]
        bookies[victim].available = False
        await unregister_bookie(bookie_session, victim)
        manager = LedgerManager(store)

        async def repaired():
            metadata, _ = await manager.read(handle.ledger_id)
            markers = await store.get_children(UNDERREPLICATED_PATH)
            return victim not in metadata.all_bookies() and not markers
        await self._eventually(repaired, "the ledger to be re-replicated")
        reader = await client.open_ledger(handle.ledger_id, PASSWORD)
        entries = await reader.read_entries(0, 9)
        self.assertEqual([e.data for e in entries], [b"e%d" % i for i in range(10)])
