"""LedgerHandle: adds, ordering, ensemble changes, reads, close (on fake bookies and a clock)."""

import random

from twisted.internet import defer, task
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.bk_errors import (
    BookieUnavailableError, DigestMismatchError, LedgerClosedError, LedgerFencedError, NoSuchEntryError,
    NotEnoughBookiesError)
from pulsar_twisted.ledger.bookies import IBookieClient, LocalBookieClient
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.handle import WriterState
from pulsar_twisted.ledger.interfaces import ILedgerClient, ILedgerHandle
from pulsar_twisted.resources.ledgers import LedgerManager, LedgerState
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.resources.bookies import register_bookie
from pulsar_twisted.testing.fake_bookie import FakeBookie
from pulsar_twisted.testing.patching import patch_method


def _later(puts):
    """Park a metadata write: the Deferred is appended to ``puts`` after the call's args."""
    from twisted.internet.defer import Deferred
    d = Deferred()
    puts.append(d)
    return d


class LedgerHarness:
    """Mixin: ``bookie_count`` registered fake bookies, a memory metadata store, one clock."""

    bookie_count = 4

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())
        self.bookies = {f"bookie-{i}": FakeBookie(f"bookie-{i}", self.clock)
                        for i in range(self.bookie_count)}
        for bookie_id in self.bookies:
            self.successResultOf(register_bookie(self.store, bookie_id))
        self.bookie_client = LocalBookieClient(self.bookies)
        self.client = self.make_client()
        self.successResultOf(self.client.start())

    def make_client(self, **kw):
        kw.setdefault("placement", RandomPlacementPolicy(random.Random(42)))
        return BookKeeperClient(self.store, self.bookie_client, self.clock, **kw)

    def create(self, e=3, w=2, a=2, password=b"pw"):
        return self.successResultOf(self.client.create_ledger(e, w, a, password))

    def add_all(self, handle, payloads):
        return [self.successResultOf(handle.add_entry(p)) for p in payloads]

    def ensemble_bookies(self, handle):
        """The FakeBookie objects of the handle's current ensemble, by index."""
        return [self.bookies[b] for b in handle.metadata.last_ensemble[1]]

    def stored_metadata(self, ledger_id):
        return self.successResultOf(LedgerManager(self.store).read(ledger_id))[0]

    def read_payloads(self, handle, first, last):
        return [e.data for e in self.successResultOf(handle.read_entries(first, last))]


class AddReadTests(LedgerHarness, unittest.TestCase):

    def test_interfaces(self):
        verifyObject(ILedgerClient, self.client)
        verifyObject(IBookieClient, self.bookie_client)
        verifyObject(ILedgerHandle, self.create())

    def test_add_and_read_3_2_2(self):
        """Entries get ids 0.. in order, are striped over the ensemble, and read back."""
        handle = self.create(3, 2, 2)
        payloads = [b"entry-%d" % i for i in range(20)]
        self.assertEqual(self.add_all(handle, payloads), list(range(20)))
        self.assertEqual(handle.last_add_confirmed, 19)
        self.assertEqual(handle.length, sum(map(len, payloads)))
        self.assertEqual(self.read_payloads(handle, 0, 19), payloads)
        ensemble = self.ensemble_bookies(handle)
        for index, bookie in enumerate(ensemble):
            expected = [e for e in range(20) if index in (e % 3, (e + 1) % 3)]
            self.assertEqual(bookie.entry_ids(handle.ledger_id), expected)

    def test_add_and_read_1_1_1(self):
        handle = self.create(1, 1, 1)
        self.assertEqual(self.add_all(handle, [b"a", b"b", b""]), [0, 1, 2])
        self.assertEqual(self.read_payloads(handle, 1, 2), [b"b", b""])

    def test_completion_in_entry_order(self):
        """Acks arriving out of order still complete adds, and move the LAC, in entry order."""
        handle = self.create(3, 3, 2)
        for bookie in self.bookies.values():
            bookie.hold("add")
        fired = []
        for i in range(3):
            handle.add_entry(b"x%d" % i).addCallback(fired.append)
        held = {}
        for bookie in self.ensemble_bookies(handle):
            for call in bookie.held:
                held.setdefault(call.key[1], []).append(call)
        for call in held[2][:2] + held[1][:2]:
            call.release()
        self.assertEqual(fired, [])
        self.assertEqual(handle.last_add_confirmed, -1)
        held[0][0].release()
        self.assertEqual(fired, [])
        held[0][1].release()
        self.assertEqual(fired, [0, 1, 2])
        self.assertEqual(handle.last_add_confirmed, 2)

    def test_add_entry_notify(self):
        """``add_entry_notify`` calls its waiter as ``add_entry``'s Deferred would fire: ids in entry
        order once the quorum acks, in order; on a closed handle a LedgerClosedError Failure at once."""
        handle = self.create(3, 3, 2)
        for bookie in self.bookies.values():
            bookie.hold("add")
        events = []

        class Waiter:
            def __init__(self, name):
                self.name = name

            def callback(self, entry_id):
                events.append((self.name, entry_id))

            def errback(self, failure):
                events.append((self.name, failure))
        for i in range(2):
            self.assertIsNone(handle.add_entry_notify(b"x%d" % i, Waiter(i)))
        self.assertEqual(events, [])
        for bookie in self.ensemble_bookies(handle):
            bookie.release_held()
        self.assertEqual(events, [(0, 0), (1, 1)])
        self.assertEqual(handle.last_add_confirmed, 1)
        self.successResultOf(handle.close())
        handle.add_entry_notify(b"late", Waiter("late"))
        [(name, failure)] = events[2:]
        self.assertEqual(name, "late")
        self.assertTrue(failure.check(LedgerClosedError))

    def batch_waiter(self, events, calls=None):
        """A waiter of ``add_entries_notify`` recording ``(ctx, entry_id or Failure)`` into
        ``events`` (and the ctxs of each ``adds_complete`` call into ``calls``)."""
        class Waiter:
            def adds_complete(self, entry_ids, ctxs):
                if calls is not None:
                    calls.append(list(ctxs))
                events.extend(zip(ctxs, entry_ids))

            def add_failed(self, failure, ctx):
                events.append((ctx, failure))
        return Waiter()

    def record_batches(self):
        """``(bookie id, entry ids)`` of every request the bookie client gets."""
        batches, real = [], self.bookie_client.add_entries_notify

        def recording(waiter, bookie_id, ledger_id, master_key, entries, recovery_add=False):
            batches.append((bookie_id, [entry_id for entry_id, _ in entries]))
            real(waiter, bookie_id, ledger_id, master_key, entries, recovery_add)
        patch_method(self, self.bookie_client, "add_entries_notify", recording)
        return batches

    def test_add_entries_one_request_per_bookie(self):
        """``add_entries_notify`` sends each bookie of the ensemble all the entries in one request
        and tells the waiter of the adds completing together in one call, in entry order."""
        handle = self.create(3, 3, 2)
        batches = self.record_batches()
        events, calls = [], []
        waiter = self.batch_waiter(events, calls)
        self.assertIsNone(handle.add_entries_notify([b"x0", b"x1", b"x2"], waiter, ["a", "b", "c"]))
        self.assertEqual(sorted(batches), sorted((b, [0, 1, 2]) for b in handle.metadata.last_ensemble[1]))
        self.assertEqual(events, [("a", 0), ("b", 1), ("c", 2)])
        self.assertEqual(calls, [["a", "b", "c"]])
        self.assertEqual(self.read_payloads(handle, 0, 2), [b"x0", b"x1", b"x2"])

    def test_add_entries_striped(self):
        """With striped write sets (E > Qw) each bookie gets its share of the entries, in order."""
        handle = self.create(3, 2, 2)
        batches = self.record_batches()
        events = []
        handle.add_entries_notify([b"x%d" % i for i in range(4)], self.batch_waiter(events), range(4))
        ensemble = handle.metadata.last_ensemble[1]
        expected = {ensemble[i]: [e for e in range(4) if i in (e % 3, (e + 1) % 3)] for i in range(3)}
        self.assertEqual(dict(batches), expected)
        self.assertEqual(len(batches), 3)
        self.assertEqual(events, [(i, i) for i in range(4)])

    def test_add_entries_refused_by_a_bookie_resent_after_change(self):
        """A batch a bookie refuses is re-sent whole to its replacement; the entries complete in
        order."""
        handle = self.create(3, 3, 3)
        old = list(handle.metadata.last_ensemble[1])
        self.bookies[old[0]].available = False
        events = []
        handle.add_entries_notify([b"x%d" % i for i in range(3)], self.batch_waiter(events), range(3))
        self.assertEqual(events, [(0, 0), (1, 1), (2, 2)])
        new = handle.metadata.last_ensemble[1]
        self.assertNotIn(new[0], old)
        self.assertEqual(self.bookies[new[0]].entry_ids(handle.ledger_id), [0, 1, 2])

    def test_add_entries_not_sent_on_after_a_fencing_refusal(self):
        """A bookie refusing a batch at once as fenced (a new owner is recovering the ledger)
        fails the handle and every add of the batch; the batch then goes to no further bookie:
        one add at a time, the later adds were never sent (the managed ledger refused them), and
        a copy on a bookie not yet fenced is what a new owner's recovery takes in ("found
        anywhere")."""
        handle = self.create(3, 3, 2)
        ensemble = handle.metadata.last_ensemble[1]
        self.successResultOf(self.bookies[ensemble[1]].fence_ledger(handle.ledger_id, handle._master_key))
        events = []
        handle.add_entries_notify([b"x%d" % i for i in range(3)], self.batch_waiter(events), range(3))
        self.assertEqual([ctx for ctx, _ in events], [0, 1, 2])
        self.assertTrue(all(f.check(LedgerFencedError) for _, f in events))
        self.assertEqual(self.bookies[ensemble[2]].entry_ids(handle.ledger_id), [])

    def test_add_entries_on_a_closed_handle_refused(self):
        """A closed handle refuses each waiter of a batch at once, in order."""
        handle = self.create(3, 3, 2)
        self.successResultOf(handle.close())
        events = []
        handle.add_entries_notify([b"a", b"b"], self.batch_waiter(events), ["a", "b"])
        self.assertEqual([name for name, _ in events], ["a", "b"])
        self.assertTrue(all(f.check(LedgerClosedError) for _, f in events))

    def test_ack_quorum_below_write_quorum(self):
        """With Qa < Qw an add completes without the slowest bookie."""
        handle = self.create(3, 3, 2)
        ensemble = self.ensemble_bookies(handle)
        ensemble[1].hold("add")
        self.assertEqual(self.add_all(handle, [b"a", b"b"]), [0, 1])
        ensemble[1].release_held()
        self.assertEqual(len(handle.metadata.ensembles), 1)
        self.assertEqual([b.entry_ids(handle.ledger_id) for b in ensemble], [[0, 1]] * 3)

    def test_lac_piggybacked(self):
        """Each packed entry carries the LAC at the time it was added."""
        handle = self.create(1, 1, 1)
        self.add_all(handle, [b"a", b"b", b"c"])
        bookie = self.ensemble_bookies(handle)[0]
        self.assertEqual(bookie.read_lac(handle.ledger_id), 1)

    def test_read_beyond_lac_and_bad_range(self):
        handle = self.create()
        self.add_all(handle, [b"a"])
        self.failureResultOf(handle.read_entries(0, 1), NoSuchEntryError)
        self.failureResultOf(handle.read_entries(1, 0), ValueError)


class EnsembleChangeTests(LedgerHarness, unittest.TestCase):

    def test_failing_bookie_replaced(self):
        """A failing bookie is replaced from the first unacked entry; every entry stays readable."""
        handle = self.create(3, 2, 2)
        self.add_all(handle, [b"a%d" % i for i in range(5)])
        old = list(handle.metadata.last_ensemble[1])
        failing = self.bookies[old[1]]
        failing.fail("add")
        self.assertEqual(self.add_all(handle, [b"b%d" % i for i in range(5)]), list(range(5, 10)))
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual(len(stored.ensembles), 2)
        first, new = stored.ensembles[1]
        self.assertEqual(first, 6)      # entry 5's write set (indices 2, 0) skips the failed one
        self.assertEqual([new[0], new[2]], [old[0], old[2]])
        self.assertNotIn(new[1], old)
        self.assertEqual(stored, handle.metadata)
        failing.available = False
        self.assertEqual(self.read_payloads(handle, 0, 9),
                         [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)])
        self.assertEqual(self.bookies[new[1]].entry_ids(handle.ledger_id),
                         [e for e in range(6, 10) if 1 in (e % 3, (e + 1) % 3)])

    def test_hung_bookie_times_out_and_pending_adds_resent(self):
        """Adds pending on a hung bookie are re-sent to its replacement after the add timeout."""
        handle = self.create(3, 2, 2)
        old = list(handle.metadata.last_ensemble[1])
        self.bookies[old[1]].hang("add")
        results = [handle.add_entry(b"x%d" % i) for i in range(4)]
        for d in results:
            self.assertNoResult(d)
        self.clock.advance(30)
        self.assertEqual([self.successResultOf(d) for d in results], [0, 1, 2, 3])
        new = handle.metadata.last_ensemble
        self.assertEqual(new[0], 0)
        self.assertEqual(self.bookies[new[1][1]].entry_ids(handle.ledger_id), [0, 1, 3])
        self.assertEqual(self.read_payloads(handle, 0, 3), [b"x0", b"x1", b"x2", b"x3"])

    def test_late_answer_of_a_replaced_bookie_is_stale(self):
        """An add's first copy answers to the add itself (the in-process client takes waiters):
        when that bookie is replaced and the add re-sent, the old bookie's late answer does not
        complete the add; the replacement's does."""
        handle = self.create(2, 1, 1)
        old = list(handle.metadata.last_ensemble[1])
        for bookie_id, bookie in self.bookies.items():
            bookie.hold("add")
        d = handle.add_entry(b"x")
        self.clock.advance(30)          # the add timeout: index 0 is replaced, the add re-sent
        new = handle.metadata.last_ensemble[1]
        self.assertNotEqual(new[0], old[0])
        self.bookies[old[0]].release_held()
        self.assertNoResult(d)
        self.assertEqual(handle.last_add_confirmed, -1)
        self.bookies[new[0]].release_held()
        self.assertEqual(self.successResultOf(d), 0)

    def test_completions_wait_for_metadata(self):
        """No add completes while the ensemble change is not yet in the metadata."""
        handle = self.create(3, 3, 2)
        self.add_all(handle, [b"a"])
        old = list(handle.metadata.last_ensemble[1])
        self.bookies[old[0]].fail("add")
        puts = []
        real_put = self.store.put
        self.patch(self.store, "put", lambda *a, **kw: puts.append((a, kw)) or _later(puts))
        for b in old[1:]:
            self.bookies[b].hold("add")
        d = handle.add_entry(b"x")
        for b in old[1:]:
            self.bookies[b].release_held()  # Qa acks, but the change is not in the metadata yet
        self.assertNoResult(d)
        self.assertEqual(handle.last_add_confirmed, 0)
        (args, kw), pending = puts
        real_put(*args, **kw).chainDeferred(pending)
        self.assertEqual(self.successResultOf(d), 1)
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual(stored.ensembles[1][0], 1)
        self.assertNotIn(old[0], stored.ensembles[1][1])

    def test_not_enough_bookies_for_replacement(self):
        """No spare bookie: pending and later adds fail with NotEnoughBookiesError."""
        handle = self.create(4, 2, 2)
        self.add_all(handle, [b"a", b"b"])
        self.ensemble_bookies(handle)[2].fail("add")
        self.failureResultOf(handle.add_entry(b"c"), NotEnoughBookiesError)
        self.failureResultOf(handle.add_entry(b"d"), NotEnoughBookiesError)
        self.assertEqual(handle.state, WriterState.ERRORED)
        self.successResultOf(handle.close())
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual((stored.state, stored.last_entry_id), (LedgerState.CLOSED, 1))

    def test_not_enough_bookies_at_create(self):
        self.failureResultOf(self.client.create_ledger(5, 2, 2), NotEnoughBookiesError)
        self.failureResultOf(self.client.create_ledger(2, 3, 2), ValueError)

    def test_unregistered_bookie_not_chosen(self):
        """A replacement is only chosen among registered writable bookies."""
        handle = self.create(3, 2, 2)
        spare = (set(self.bookies) - set(handle.metadata.last_ensemble[1])).pop()
        self.successResultOf(self.store.delete(f"/ledgers/available/{spare}"))
        self.ensemble_bookies(handle)[0].fail("add")
        self.failureResultOf(handle.add_entry(b"x"), NotEnoughBookiesError)


class ReadTests(LedgerHarness, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.handle = self.create(3, 2, 2)
        self.add_all(self.handle, [b"p%d" % i for i in range(6)])
        self.ensemble = self.ensemble_bookies(self.handle)

    def test_failover_on_error(self):
        """A replica that errors is skipped for the next one in the write set."""
        self.ensemble[0].fail("read")
        self.assertEqual(self.read_payloads(self.handle, 0, 5), [b"p%d" % i for i in range(6)])
        self.assertEqual(self.ensemble[0].calls["read"], 2)     # entries 0 and 3 tried it first

    def test_speculative_read_on_slow_replica(self):
        """A replica slower than the speculative timeout gets a second request elsewhere."""
        self.ensemble[0].delay("read", 10)
        d = self.handle.read_entries(0, 0)
        self.assertNoResult(d)
        self.clock.advance(2)
        self.assertEqual([e.data for e in self.successResultOf(d)], [b"p0"])
        self.assertEqual(self.ensemble[1].calls["read"], 1)
        self.clock.advance(10)      # the slow answer arriving late is ignored

    def test_all_replicas_hang(self):
        """If no replica answers, the read fails after the read timeout."""
        for bookie in self.ensemble:
            bookie.hang("read")
        d = self.handle.read_entries(0, 0)
        self.clock.advance(2)
        self.assertNoResult(d)
        self.clock.advance(5)
        self.failureResultOf(d, BookieUnavailableError)

    def test_digest_mismatch(self):
        """A corrupt replica is detected and skipped; all replicas corrupt fails the read."""
        lid = self.handle.ledger_id
        self.ensemble[0].corrupt_entry(lid, 0)
        self.assertEqual(self.read_payloads(self.handle, 0, 0), [b"p0"])
        self.ensemble[1].corrupt_entry(lid, 0)
        self.failureResultOf(self.handle.read_entries(0, 0), DigestMismatchError)

    def test_missing_everywhere(self):
        lid = self.handle.ledger_id
        self.ensemble[0].drop_entry(lid, 0)
        self.ensemble[1].drop_entry(lid, 0)
        self.failureResultOf(self.handle.read_entries(0, 1), NoSuchEntryError)


class CloseTests(LedgerHarness, unittest.TestCase):

    def test_close_records_last_entry(self):
        """close() writes CLOSED, the last entry id and the length; later adds are refused."""
        handle = self.create()
        self.add_all(handle, [b"abc", b"de"])
        self.successResultOf(handle.close())
        self.assertTrue(handle.closed)
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual((stored.state, stored.last_entry_id, stored.length),
                         (LedgerState.CLOSED, 1, 5))
        self.failureResultOf(handle.add_entry(b"x"), LedgerClosedError)
        self.successResultOf(handle.close())

    def test_close_waits_for_pending_adds(self):
        handle = self.create(3, 2, 2)
        for bookie in self.bookies.values():
            bookie.hold("add")
        add = handle.add_entry(b"x")
        closing = handle.close()
        self.failureResultOf(handle.add_entry(b"y"), LedgerClosedError)
        self.assertNoResult(closing)
        for bookie in self.bookies.values():
            bookie.release_held()
        self.assertEqual(self.successResultOf(add), 0)
        self.successResultOf(closing)
        self.assertEqual(self.stored_metadata(handle.ledger_id).last_entry_id, 0)

    def test_close_empty(self):
        handle = self.create()
        self.successResultOf(handle.close())
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual((stored.state, stored.last_entry_id), (LedgerState.CLOSED, -1))
        reader = self.successResultOf(self.client.open_ledger(handle.ledger_id, b"pw"))
        self.assertEqual(reader.last_add_confirmed, -1)


class ErrorWhileChangingTests(LedgerHarness, unittest.TestCase):

    def ensemble_change_held(self):
        """A ledger whose second add starts an ensemble change, its metadata writes held
        (``puts``: the calls, each answered by its Deferred): (handle, add, puts, the real put)."""
        handle = self.create(3, 2, 2)
        self.add_all(handle, [b"a"])
        self.ensemble_bookies(handle)[1].fail("add")
        puts = []
        real_put = self.store.put
        self.patch(self.store, "put", lambda *a, **kw: puts.append((a, kw)) or _later(puts))
        add = handle.add_entry(b"b")          # entry 1 -> indices 1, 2: change starts
        return handle, add, puts, real_put

    def test_close_during_failed_ensemble_change(self):
        """close() waits for an ensemble change; if the change fails, pending adds fail and the
        ledger is closed at the LAC."""
        from pulsar_twisted.metadata.interfaces import MetadataStoreError
        handle, add, puts, real_put = self.ensemble_change_held()
        closing = handle.close()
        self.assertNoResult(add)
        self.assertNoResult(closing)
        self.patch(self.store, "put", real_put)
        puts[1].errback(MetadataStoreError("store down"))
        self.failureResultOf(add, MetadataStoreError)
        self.assertEqual(len(self.flushLoggedErrors(MetadataStoreError)), 1)
        self.successResultOf(closing)
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual((stored.state, stored.last_entry_id), (LedgerState.CLOSED, 0))
        self.assertTrue(handle.closed)

    def test_ensemble_change_cut_off_from_the_store_for_good_logs_no_traceback(self):
        """An ensemble change whose metadata writes find the store unreachable (ZooKeeper
        ConnectionLoss, an expired session: what a broker stopped past its session timeout sees on
        waking, chaos seed 75) for longer than METADATA_RETRY_SECONDS fails the writer, with one
        warning line, not a logged failure with its traceback (the chaos checker counts those as
        daemon tracebacks)."""
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
        handle, add, puts, real_put = self.ensemble_change_held()
        self.assertNoResult(add)
        self.patch(self.store, "put", lambda *a, **kw: defer.fail(
            MetadataUnavailableError("zookeeper: ConnectionLoss: ")))
        puts[1].errback(MetadataUnavailableError("zookeeper: ConnectionLoss: "))
        self.assertNoResult(add)
        self.clock.pump([0.5] * 30)
        self.failureResultOf(add, MetadataUnavailableError)
        self.assertEqual(handle.state, WriterState.ERRORED)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_ensemble_change_waits_out_a_lost_connection(self):
        """A ConnectionLoss that heals within METADATA_RETRY_SECONDS: the change is written after
        it and the add completes (BookKeeper's ZooKeeper client retries the same way); a write
        that was applied before the connection dropped is found (BadVersion) and not doubled."""
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
        handle, add, puts, real_put = self.ensemble_change_held()
        lost = [True]

        def put_applied_then_lost(*a, **kw):
            d = real_put(*a, **kw)
            if lost[0]:
                lost[0] = False
                return d.addCallback(lambda _: defer.fail(
                    MetadataUnavailableError("zookeeper: ConnectionLoss: ")))
            return d

        self.patch(self.store, "put", put_applied_then_lost)
        puts[1].errback(MetadataUnavailableError("zookeeper: ConnectionLoss: "))
        self.assertNoResult(add)
        self.clock.pump([0.1, 0.2, 0.4])
        self.assertEqual(self.successResultOf(add), 1)
        self.assertEqual(handle.state, WriterState.OPEN)
        stored = self.stored_metadata(handle.ledger_id)
        self.assertEqual([first for first, _ in stored.ensembles], [0, 1])


class RandomFailureTests(LedgerHarness, unittest.TestCase):
    """Random single add failures on random bookies: the ordering and durability rules hold."""

    bookie_count = 7

    def test_random_failures(self):
        rng = random.Random(1234)
        for round_ in range(20):
            e = rng.randint(1, 4)
            w = rng.randint(1, e)
            a = rng.randint(1, w)
            handle = self.create(e, w, a)
            for bookie in self.bookies.values():
                bookie.clear_faults()
                if rng.random() < 0.3:
                    bookie.fail("add", after=rng.randint(0, 40), times=1)
            fired, errors = [], []
            for i in range(60):
                handle.add_entry(b"r%d-%d" % (round_, i)).addCallbacks(
                    fired.append, errors.append)
            self.assertEqual(fired, list(range(len(fired))))
            self.assertEqual(handle.last_add_confirmed, len(fired) - 1)
            for f in errors:
                f.trap(NotEnoughBookiesError)
            if fired:
                self.assertEqual(self.read_payloads(handle, 0, len(fired) - 1),
                                 [b"r%d-%d" % (round_, i) for i in range(len(fired))])
            for bookie in self.bookies.values():
                bookie.clear_faults()
            reader = self.successResultOf(self.client.open_ledger(handle.ledger_id, b"pw"))
            self.assertGreaterEqual(reader.last_add_confirmed, len(fired) - 1)
            stored = self.stored_metadata(handle.ledger_id)
            for first, ensemble in stored.ensembles:
                self.assertEqual(len(set(ensemble)), e)
