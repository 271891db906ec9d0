"""
A managed ledger has one writer (issue 11, item 2): every ML and cursor metadata update is a CAS;
a writer that loses one, or whose ledger a new owner recovered or deleted, stops writing, fails its
pending adds in order with ManagedLedgerFencedError and tells its owner (add_fenced_listener).

Two "brokers" are two factories over two BookKeeperClients sharing one metadata store and the same
FakeBookies, on one task.Clock.
"""

import random

from twisted.internet import task
from twisted.python.failure import Failure
from twisted.trial import unittest

from pulsar_twisted.ledger.bookies import LocalBookieClient
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.resources.bookies import register_bookie
from pulsar_twisted.common.bk_errors import BookieUnavailableError, LedgerFencedError
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.mledger.ledger import State
from pulsar_twisted.testing.fake_bookie import FakeBookie

from tests.mledger.test_support import ManagedLedgerHarness, data

NAME = "public/default/persistent/t"


class TwoBrokers:
    """Mixin: 3 registered FakeBookies, one store, ``broker()`` makes a factory with its own client."""

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())
        self.bookies = {f"b{i}": FakeBookie(f"b{i}", self.clock) for i in range(3)}
        for bookie_id in self.bookies:
            self.successResultOf(register_bookie(self.store, bookie_id))
        self.seed = 0

    def broker(self, **kw):
        self.seed += 1
        client = BookKeeperClient(self.store, LocalBookieClient(self.bookies), self.clock,
                                  placement=RandomPlacementPolicy(random.Random(self.seed)))
        kw.setdefault("min_rollover_time_ms", 0)
        kw.setdefault("ensemble_size", 3)
        kw.setdefault("write_quorum", 2)
        kw.setdefault("ack_quorum", 2)
        return ManagedLedgerFactory(client, self.store, self.clock, ManagedLedgerConfig(**kw))

    def open(self, factory):
        return self.successResultOf(factory.open(NAME))

    def adds_sent(self):
        return sum(b.calls["add"] for b in self.bookies.values())

    def watch(self, ml):
        """Record the fenced-listener calls of ``ml`` with what was true when each ran."""
        calls = []
        ml.add_fenced_listener(lambda m: calls.append((m, m.state, self.adds_sent())))
        return calls


class StaleWriterTests(TwoBrokers, unittest.TestCase):

    def test_stale_handle_after_recover_close_delete(self):
        """The issue's trace: broker A holds a cached ML whose ledger broker B recovered, closed
        and deleted. A's next add is refused by the bookies, A fences itself, its add fails with
        ManagedLedgerFencedError, it leaves its factory and tells its owner once; none of its adds
        is stored anywhere."""
        a_factory = self.broker()
        a = self.open(a_factory)
        for i in range(3):
            self.successResultOf(a.add_entry(data(i)))
        stale_ledger = a.current_ledger_id()
        calls = self.watch(a)

        # B recovers (fences) and closes A's ledger, starts its own, and, with no cursor and no
        # retention, trims A's ledger at once: deleted on the bookies and in the metadata.
        b = self.open(self.broker())
        self.assertNotEqual(b.current_ledger_id(), stale_ledger)
        self.assertEqual(b.number_of_entries(), 0)
        self.assertIsNone(self.successResultOf(b.ledger_client._manager._store.exists(
            "/ledgers/L%010d" % stale_ledger)))
        for bookie in self.bookies.values():
            self.assertFalse(bookie.has_ledger(stale_ledger))

        failure = self.failureResultOf(a.add_entry(b"stale"), ManagedLedgerFencedError)
        self.assertIn("fenced", failure.getErrorMessage())
        self.assertEqual(a.state, State.FENCED)
        for bookie in self.bookies.values():
            self.assertFalse(bookie.has_ledger(stale_ledger), "a deleted ledger came back")
        self.assertEqual(len(calls), 1)
        self.assertIs(calls[0][0], a)
        self.assertEqual(calls[0][1], State.FENCED)
        self.assertIsNone(a_factory.get(NAME))
        sent = self.adds_sent()
        self.failureResultOf(a.add_entry(b"later"), ManagedLedgerFencedError)
        self.assertEqual(self.adds_sent(), sent, "an add of a fenced ML reached a bookie")
        self.assertEqual(len(calls), 1)
        # B is unaffected.
        self.successResultOf(b.add_entry(b"from-b"))
        entries = self.successResultOf(b.read_entries(b.first_position(), 10))
        self.assertEqual([e.data for e in entries], [b"from-b"])

    def test_pending_adds_fail_in_order_on_cas_loss(self):
        """Adds in flight when the ML loses a metadata CAS fail in order with
        ManagedLedgerFencedError; the listener runs once, after they all failed; the bookies'
        late answers change nothing."""
        a = self.open(self.broker())
        for bookie in self.bookies.values():
            bookie.hold("add")
        outcomes = []
        for i in range(4):
            a.add_entry(data(i)).addCallbacks(
                lambda pos, i=i: outcomes.append((i, "ok")),
                lambda f, i=i: outcomes.append((i, f.type)))
        calls = []
        a.add_fenced_listener(lambda m: calls.append(list(outcomes)))
        # Another owner rewrites the ML node: A's next metadata write (here a property) loses.
        raw, _ = self.successResultOf(self.store.get(a.path))
        self.successResultOf(self.store.put(a.path, raw))
        self.failureResultOf(a.set_properties({"k": "v"}), ManagedLedgerFencedError)
        expected = [(i, ManagedLedgerFencedError) for i in range(4)]
        self.assertEqual(outcomes, expected)
        self.assertEqual(calls, [expected])
        for bookie in self.bookies.values():
            bookie.release_held()
        self.assertEqual(outcomes, expected)

    def test_cursor_cas_loss_fences_the_ml(self):
        """A cursor that loses the CAS on its node fences the whole managed ledger."""
        a = self.open(self.broker())
        cursor = self.successResultOf(a.open_cursor("sub", "earliest"))
        positions = [self.successResultOf(a.add_entry(data(i))) for i in range(3)]
        calls = self.watch(a)
        path = formats.cursor_path(a.name, "sub")
        raw, _ = self.successResultOf(self.store.get(path))
        self.successResultOf(self.store.put(path, raw))     # someone else's node write
        # The snapshot write fails, the cursor falls back to its node, whose CAS now fails.
        for bookie in self.bookies.values():
            bookie.fail("add", BookieUnavailableError("down"), times=3)
        self.failureResultOf(cursor.mark_delete(positions[1]), ManagedLedgerFencedError)
        for bookie in self.bookies.values():
            bookie.clear_faults()
        self.assertEqual(a.state, State.FENCED)
        self.assertEqual(len(calls), 1)
        self.failureResultOf(a.add_entry(b"x"), ManagedLedgerFencedError)
        self.failureResultOf(cursor.mark_delete(positions[2]), ManagedLedgerFencedError)

    def test_cursor_created_by_the_new_owner_fences_the_stale_one(self):
        """The issue's NodeExists: a stale instance creating a cursor the new owner already made
        fences itself instead of carrying on without the cursor."""
        a = self.open(self.broker())
        self.successResultOf(a.add_entry(data(0)))
        b = self.open(self.broker())
        self.successResultOf(b.open_cursor("pulsar.dedup", "earliest"))
        calls = self.watch(a)
        self.failureResultOf(a.open_cursor("pulsar.dedup", "earliest"), ManagedLedgerFencedError)
        self.assertTrue(a.is_fenced)
        self.assertEqual(len(calls), 1)
        # B's cursor is untouched and keeps persisting.
        pos = self.successResultOf(b.add_entry(data(1)))
        self.successResultOf(b.cursors["pulsar.dedup"].mark_delete(pos))

    def test_stale_cursor_delete_refused(self):
        """Deleting a cursor is versioned too: a stale instance cannot remove the new owner's."""
        a = self.open(self.broker())
        self.successResultOf(a.open_cursor("sub", "earliest"))
        self.successResultOf(a.add_entry(data(0)))
        b = self.open(self.broker())              # rewrites the cursor node (version moves on)
        self.failureResultOf(a.delete_cursor("sub"), ManagedLedgerFencedError)
        self.assertTrue(a.is_fenced)
        self.assertIsNotNone(self.successResultOf(self.store.get(formats.cursor_path(b.name, "sub"))))
        self.successResultOf(b.delete_cursor("sub"))
        self.assertIsNone(self.successResultOf(self.store.get(formats.cursor_path(b.name, "sub"))))

    def test_fenced_close_writes_no_metadata(self):
        """Closing a fenced ML writes neither its node nor its cursors' nodes."""
        a = self.open(self.broker())
        self.successResultOf(a.open_cursor("sub", "earliest"))
        self.successResultOf(a.add_entry(data(0)))
        self.open(self.broker())            # B takes over
        self.failureResultOf(a.add_entry(b"stale"), ManagedLedgerFencedError)
        versions = [self.successResultOf(self.store.get(p))[1].version
                    for p in (a.path, formats.cursor_path(a.name, "sub"))]
        self.successResultOf(a.close())
        self.assertEqual([self.successResultOf(self.store.get(p))[1].version
                          for p in (a.path, formats.cursor_path(a.name, "sub"))], versions)

    def test_new_owner_fences_last_ledger_before_creating_the_next(self):
        """B's open fences A's ledger on the bookies before it creates its own ledger."""
        a = self.open(self.broker())
        self.successResultOf(a.open_cursor("sub", "earliest"))   # keeps the ledger from trimming
        for i in range(3):
            self.successResultOf(a.add_entry(data(i)))
        stale = a.current_ledger_id()
        events = []
        for bookie in self.bookies.values():
            real = bookie.fence_ledger

            def fence(ledger_id, key, real=real):
                events.append(("fence", ledger_id))
                return real(ledger_id, key)
            bookie.fence_ledger = fence
        b_factory = self.broker()
        real_create = b_factory.ledger_client.create_ledger

        def create(*args, **kw):
            events.append(("create",))
            return real_create(*args, **kw)
        b_factory.ledger_client.create_ledger = create
        b = self.open(b_factory)
        self.assertIn(("fence", stale), events)
        self.assertLess(max(i for i, e in enumerate(events) if e == ("fence", stale)),
                        events.index(("create",)))
        self.assertEqual(b.number_of_entries(), 3)
        self.failureResultOf(a.add_entry(b"stale"), ManagedLedgerFencedError)

    def test_close_racing_the_fence_fails_adds_in_flight(self):
        """Issue 11 item 6: a close (the broker lost the bundle) starts while adds are in flight
        and the bookies then refuse them (a new owner fenced the ledger). The adds fail in order
        with ManagedLedgerFencedError and the close finishes; before, the close waited for them
        forever, and so did every producer close waiting for its publishes."""
        a = self.open(self.broker())
        self.successResultOf(a.open_cursor("sub", "earliest"))
        self.successResultOf(a.add_entry(data(0)))
        for bookie in self.bookies.values():
            bookie.hold("add")
        outcomes = []
        for i in range(1, 5):
            a.add_entry(data(i)).addCallbacks(
                lambda pos, i=i: outcomes.append((i, "ok")),
                lambda f, i=i: outcomes.append((i, f.type)))
        closed = a.close()
        self.assertNoResult(closed)
        held = [call for bookie in self.bookies.values() for call in list(bookie.held)]
        self.assertTrue(held)
        held[0].fail(LedgerFencedError(f"ledger {a.current_ledger_id()} is fenced"))
        self.assertEqual(outcomes, [(i, ManagedLedgerFencedError) for i in range(1, 5)])
        self.successResultOf(closed)
        self.assertEqual(a.state, State.CLOSED)
        for call in held[1:]:       # the bookies' later refusals change nothing
            call.fail(LedgerFencedError("fenced"))
        self.assertEqual(len(outcomes), 4)


class FencedListenerTests(ManagedLedgerHarness, unittest.TestCase):

    def test_listener_contract(self):
        """Each listener runs once; one added after the fence runs at once; a failing listener
        does not stop the next; a removed one is not called."""
        ml = self.open()
        calls = []

        def bad(m):
            calls.append("bad")
            raise RuntimeError("boom")
        removed = lambda m: calls.append("removed")  # noqa: E731
        ml.add_fenced_listener(bad)
        ml.add_fenced_listener(removed)
        ml.add_fenced_listener(lambda m: calls.append("good"))
        ml.remove_fenced_listener(removed)
        ml.remove_fenced_listener(lambda m: None)    # unknown: no error
        raw, _ = self.successResultOf(self.store.get(ml.path))
        self.successResultOf(self.store.put(ml.path, raw))
        self.failureResultOf(ml.set_properties({}), ManagedLedgerFencedError)
        self.assertEqual(calls, ["bad", "good"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        ml.add_fenced_listener(lambda m: calls.append("late"))
        self.assertEqual(calls, ["bad", "good", "late"])
        self.failureResultOf(ml.set_properties({}), ManagedLedgerFencedError)
        self.assertEqual(calls, ["bad", "good", "late"])

    def test_not_called_on_close(self):
        """A plain close is not a fence."""
        ml = self.open()
        calls = []
        ml.add_fenced_listener(calls.append)
        self.successResultOf(ml.close())
        self.assertEqual(calls, [])


class NoSpareBookieTests(TwoBrokers, unittest.TestCase):
    """Issue 11 item 5: with no spare bookie, writes fail cleanly and resume once a bookie is back."""

    def test_writes_fail_cleanly_then_resume(self):
        factory = self.broker(ensemble_size=3, write_quorum=3, ack_quorum=2)
        ml = self.open(factory)
        cursor = self.successResultOf(ml.open_cursor("sub", "earliest"))
        acked = [self.successResultOf(ml.add_entry(data(0)))]
        creates = []
        real_create = factory.ledger_client.create_ledger

        def create(*args, **kw):
            creates.append(1)
            return real_create(*args, **kw)
        factory.ledger_client.create_ledger = create
        self.bookies["b1"].available = False       # dead, still registered: no replacement
        attempts, failed, payloads = 12, 0, [data(0)]
        for i in range(attempts):
            # Every add is answered at once: acked when two bookies answered before the dead
            # one's failure ended the ledger, failed (not fenced) otherwise. Never left hanging.
            d = ml.add_entry(b"during-%d" % i)
            results = []
            d.addBoth(results.append)
            self.assertEqual(len(results), 1)
            if isinstance(results[0], Failure):
                failed += 1
                self.assertFalse(results[0].check(ManagedLedgerFencedError))
            else:
                acked.append(results[0])
                payloads.append(b"during-%d" % i)
            self.assertNotEqual(ml.state, State.FENCED)
        self.assertGreater(failed, 0)
        self.assertEqual(ml.state, State.LEDGER_CLOSED, "no ledger made until the next add")
        self.assertLessEqual(len(creates), attempts)
        self.bookies["b1"].available = True
        for i in range(1, 4):
            acked.append(self.successResultOf(ml.add_entry(data(i))))
            payloads.append(data(i))
        self.assertEqual(ml.state, State.LEDGER_OPENED)
        self.assertTrue(all(info["entries"] > 0 for info in ml.ledgers_info()[:-1]),
                        "failed empty ledgers are dropped")
        entries = self.successResultOf(cursor.read_entries(100))
        self.assertEqual([e.data for e in entries], payloads)
        self.assertEqual([e.position for e in entries], acked)


class LedgerOrderAcrossBrokersTests(TwoBrokers, unittest.TestCase):
    """Ledger ids come in blocks that each broker holds: a managed ledger that moves to a broker
    holding a lower block still gets a ledger id above its last one, so its positions keep their
    order (a smaller id would sort the new entries before the stored ones: cursors would skip
    them and trimming would delete them)."""

    def test_ledger_after_a_move_sorts_last(self):
        a_factory, b_factory = self.broker(), self.broker()
        other = self.successResultOf(a_factory.open("public/default/persistent/other"))
        self.successResultOf(other.add_entry(data(0)))          # broker A now holds a low block
        b = self.open(b_factory)                                 # B takes a later block
        self.successResultOf(b.open_cursor("sub", "earliest"))
        first = self.successResultOf(b.add_entry(data(1)))
        self.successResultOf(b.close())
        a = self.open(a_factory)                                 # the topic moves back to A
        second = self.successResultOf(a.add_entry(data(2)))
        self.assertGreater(second.ledger_id, first.ledger_id)
        self.assertGreater(second, first)
        cursor = self.successResultOf(a.open_cursor("sub", "earliest"))
        read = self.successResultOf(cursor.read_entries(10))
        self.assertEqual([e.data for e in read], [data(1), data(2)])
