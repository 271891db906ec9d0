"""Tests of ManagedLedgerImpl and the factory on the fake ledger client."""

from twisted.internet import defer
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.bk_errors import NotEnoughBookiesError
from pulsar_twisted.common.position import Position
from pulsar_twisted.ledger.interfaces import ILedgerClient
from pulsar_twisted.mledger.interfaces import (
    IManagedLedger, IManagedLedgerFactory, ManagedLedgerClosedError, ManagedLedgerError,
    ManagedLedgerFencedError,
)
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.ledger import (
    CREATE_RETRY_MAX, CREATE_RETRY_MIN, TRIM_SLICE, ManagedLedgerTerminatedError, State)
from pulsar_twisted.testing.fake_ledger import FakeLedgerClient
from pulsar_twisted.testing.patching import patch_method

from tests.mledger.test_support import ManagedLedgerHarness, data


class AddReadTests(ManagedLedgerHarness, unittest.TestCase):
    def test_interfaces(self):
        verifyObject(IManagedLedgerFactory, self.factory)
        verifyObject(IManagedLedger, self.open())
        verifyObject(ILedgerClient, FakeLedgerClient())

    def test_add_then_read(self):
        """Adds get consecutive positions; read_entries returns the bytes."""
        ml = self.open()
        positions = self.add(ml, 5)
        lid = positions[0].ledger_id
        self.assertEqual(positions, [Position(lid, i) for i in range(5)])
        self.assertEqual(ml.last_confirmed_entry(), positions[-1])
        entries = self.successResultOf(ml.read_entries(positions[1], 3))
        self.assertEqual([e.data for e in entries], [data(1), data(2), data(3)])
        self.assertEqual(ml.number_of_entries(), 5)
        self.assertEqual(ml.total_size(), sum(len(data(i)) for i in range(5)))

    def test_add_entry_notify(self):
        """``add_entry_notify`` calls its waiter with the Position in add order; a waiter that raises
        is logged and the ledger goes on (later adds, counters); a closed ledger fails it at once."""
        self.bk.add_delay = 1.0
        ml = self.open()
        events = []

        class Waiter:
            def __init__(self, i):
                self.i = i

            def callback(self, position):
                events.append((self.i, position))
                if self.i == 0:
                    raise RuntimeError("buggy waiter")

            def errback(self, failure):
                events.append((self.i, failure))
        for i in range(3):
            self.assertIsNone(ml.add_entry_notify(data(i), Waiter(i)))
        self.assertEqual(events, [])
        self.clock.advance(1.0)
        lid = events[0][1].ledger_id
        self.assertEqual(events, [(i, Position(lid, i)) for i in range(3)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual((ml.counters.add_succeed, ml.number_of_entries()), (3, 3))
        self.successResultOf(ml.close())
        ml.add_entry_notify(data(9), Waiter("closed"))
        [(name, failure)] = events[3:]
        self.assertEqual(name, "closed")
        self.assertTrue(failure.check(ManagedLedgerClosedError))
        self.assertEqual(ml.counters.add_errors, 1)

    def test_add_entry_notify_with_ctx(self):
        """With a ctx (Pulsar's asyncAddEntry(data, callback, ctx)) one waiter serves every add:
        ``adds_complete(positions, ctxs)`` in add order; when an add fails, it and every later add of
        that ledger get ``add_failed(failure, ctx)``, in order; a raising waiter is logged and the
        rest still hear; a closed ledger refuses at once the same way."""
        ml = self.open()
        events = []

        class Callback:
            def adds_complete(self, positions, ctxs):
                for position, ctx in zip(positions, ctxs):
                    events.append((ctx, position))
                    if ctx == 0:
                        raise RuntimeError("buggy waiter")

            def add_failed(self, failure, ctx):
                events.append((ctx, failure.type))
                if ctx == 3:
                    raise RuntimeError("buggy waiter")
        callback = Callback()
        self.bk.pause_adds()
        for i in range(2):
            self.assertIsNone(ml.add_entry_notify(data(i), callback, i))
        self.bk.resume_adds()
        lid = events[0][1].ledger_id
        self.assertEqual(events, [(0, Position(lid, 0)), (1, Position(lid, 1))])
        self.bk.pause_adds()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        for i in range(3, 6):
            ml.add_entry_notify(data(i), callback, i)
        self.bk.resume_adds()
        self.assertEqual(events[2:], [(i, ManagedLedgerError) for i in range(3, 6)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)
        self.successResultOf(ml.close())
        ml.add_entry_notify(data(9), callback, "closed")
        self.assertEqual(events[5:], [("closed", ManagedLedgerClosedError)])

    def recorder(self):
        """A ctx waiter recording ``(ctx, position or failure type)``, and its list."""
        events = []

        class Callback:
            def adds_complete(self, positions, ctxs):
                events.extend(zip(ctxs, positions))

            def add_failed(self, failure, ctx):
                events.append((ctx, failure.type))
        return Callback(), events

    def test_add_entries_in_one_hand_over(self):
        """``add_entries_notify`` hands a batch to the current ledger in one call and completes
        each add in order, as ``add_entry_notify`` of each would."""
        ml = self.open()
        handle = ml._current
        calls, real = [], handle.add_entries_notify
        patch_method(self, handle, "add_entries_notify",
                     lambda datas, waiter, ctxs: calls.append(len(datas)) or real(datas, waiter, ctxs))
        callback, events = self.recorder()
        self.assertEqual(ml.add_entries_notify([data(i) for i in range(4)], callback, range(4)), 4)
        self.assertEqual(calls, [4])
        self.assertEqual(events, [(i, Position(handle.ledger_id, i)) for i in range(4)])
        self.assertEqual((ml.counters.add_succeed, ml.number_of_entries()), (4, 4))

    def test_add_entries_roll_over_within_a_batch(self):
        """The adds of a batch after the last entry of a full ledger go to the next ledger."""
        ml = self.open(max_entries_per_ledger=3)
        cursor = self.cursor(ml)
        callback, events = self.recorder()
        self.bk.pause_adds()
        self.assertEqual(ml.add_entries_notify([data(i) for i in range(5)], callback, range(5)), 5)
        while self.bk._held:
            self.bk.resume_adds()
            self.bk.pause_adds()
        self.bk.resume_adds()
        self.assertEqual([ctx for ctx, _ in events], list(range(5)))
        first, second = events[0][1].ledger_id, events[3][1].ledger_id
        self.assertNotEqual(first, second)
        self.assertEqual([p for _, p in events],
                         [Position(first, i) for i in range(3)] + [Position(second, i) for i in range(2)])
        self.assertEqual([e.data for e in self.read(cursor)], [data(i) for i in range(5)])

    def test_add_entries_stop_at_an_add_failing_at_once(self):
        """An add of a batch that fails at once (its ledger failed it while it was handed over)
        ends the batch: the adds after it are not made, and ``add_entries_notify`` says how many
        it took; made again, they go where one at a time they would have: to the next ledger."""
        one_by_one = self.open("public/default/persistent/single")
        callback, single = self.recorder()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        for i in range(3):
            one_by_one.add_entry_notify(data(i), callback, i)
        ml = self.open()
        callback, events = self.recorder()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        self.assertEqual(ml.add_entries_notify([data(i) for i in range(3)], callback, range(3)), 1)
        self.assertEqual(events, [(0, ManagedLedgerError)])
        self.assertEqual(ml.add_entries_notify([data(1), data(2)], callback, [1, 2]), 2)
        self.assertEqual([(ctx, getattr(p, "entry_id", p)) for ctx, p in events],
                         [(ctx, getattr(p, "entry_id", p)) for ctx, p in single])
        self.assertEqual(ml.counters.add_errors, one_by_one.counters.add_errors)

    def test_add_entries_stop_at_an_add_failing_as_the_next_ledger_is_made(self):
        """After a failed add the next ledger waits for the next add: a batch then queues its
        first add and makes the ledger, which may fail that add at once; the batch stops there,
        as one at a time (the later adds are not stored after the failed one)."""
        ml = self.open()
        self.add(ml, 1)
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        self.failureResultOf(ml.add_entry(data(1)), ManagedLedgerError)
        self.assertIs(ml._state, State.LEDGER_CLOSED)
        callback, events = self.recorder()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        self.assertEqual(ml.add_entries_notify([data(2), data(3)], callback, [2, 3]), 1)
        self.assertEqual(events, [(2, ManagedLedgerError)])
        self.assertEqual(ml.number_of_entries(), 1)

    def test_add_entries_stop_at_a_refusal(self):
        """A batch on a closed ledger: the first add is refused, and the batch stops there."""
        ml = self.open()
        self.successResultOf(ml.close())
        callback, events = self.recorder()
        self.assertEqual(ml.add_entries_notify([data(0), data(1)], callback, [0, 1]), 1)
        self.assertEqual(events, [(0, ManagedLedgerClosedError)])

    def test_completions_in_order(self):
        """With slow bookies, Deferreds fire in add order, all after the delay."""
        self.bk.add_delay = 1.0
        ml = self.open()
        fired = []
        ds = [ml.add_entry(data(i)).addCallback(fired.append) for i in range(10)]
        self.assertEqual(fired, [])
        self.clock.advance(1.0)
        self.assertEqual(fired, sorted(fired))
        self.assertEqual(len(fired), 10)
        for d in ds:
            self.successResultOf(d)

    def test_factory_caches_instances_and_lists_names(self):
        ml = self.open("a/b/c")
        self.assertIs(self.open("a/b/c"), ml)
        self.open("a/b")
        self.assertEqual(sorted(self.successResultOf(self.factory.list_names())), ["a/b", "a/b/c"])

    def test_new_entries_listener_coalesced(self):
        """The first add of a turn is announced at once (the entry is readable then); the
        turn's later adds in one more call at the turn's end, not one per entry."""
        ml = self.open()
        calls = []
        ml.add_new_entries_listener(lambda: calls.append(ml.number_of_entries()))
        self.add(ml, 5)
        self.assertEqual(calls, [1])
        self.clock.advance(0)
        self.assertEqual(calls, [1, 5])
        # A turn with one add: one call, nothing more at its end.
        self.add(ml, 1)
        self.clock.advance(0)
        self.assertEqual(calls, [1, 5, 6])
        # A turn without adds: no call.
        self.clock.advance(0)
        self.assertEqual(len(calls), 3)

    def test_listeners_added_and_removed_one_or_many(self):
        """A lone listener is kept without a tuple (issue 14); several, removal and the fenced
        listeners behave as before."""
        ml = self.open()
        calls = []
        first, second = (lambda: calls.append("a")), (lambda: calls.append("b"))
        ml.add_new_entries_listener(first)
        self.assertIs(ml._listeners, first)
        ml.add_new_entries_listener(second)
        self.add(ml, 1)
        self.clock.advance(0)
        self.assertEqual(calls, ["a", "b"])
        ml.remove_new_entries_listener(first)
        self.assertIs(ml._listeners, second)
        ml.remove_new_entries_listener(first)     # absent: nothing changes
        self.add(ml, 1)
        self.clock.advance(0)
        self.assertEqual(calls, ["a", "b", "b"])
        ml.remove_new_entries_listener(second)
        self.assertEqual(ml._listeners, ())
        fenced = []
        ml.add_fenced_listener(fenced.append)
        ml.add_fenced_listener(lambda m: fenced.append("2"))
        ml.remove_fenced_listener(fenced.append)
        ml.add_fenced_listener(fenced.append)
        ml._set_fenced()
        self.assertEqual(fenced, ["2", ml])

    def test_throttle_listener(self):
        self.bk.pause_adds()
        ml = self.open(max_pending_adds=4)
        seen = []
        ml.add_throttle_listener(seen.append)
        ds = [ml.add_entry(data(i)) for i in range(5)]
        self.assertEqual(seen, [True])
        self.bk.resume_adds()
        self.assertEqual(seen, [True, False])
        for d in ds:
            self.successResultOf(d)


class RolloverTests(ManagedLedgerHarness, unittest.TestCase):
    def test_rollover_by_entries(self):
        """max_entries_per_ledger entries per ledger; reads cross the boundaries."""
        ml = self.open(max_entries_per_ledger=3)
        self.successResultOf(ml.open_cursor("keep", "earliest"))
        positions = self.add(ml, 8)
        ledgers = sorted({p.ledger_id for p in positions})
        self.assertEqual(len(ledgers), 3)
        self.assertEqual([i["entries"] for i in ml.ledgers_info()], [3, 3, 2])
        entries = self.successResultOf(ml.read_entries(positions[0], 100))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(8)])

    def test_next_position_crosses_ledgers(self):
        """next_position steps to the next entry, over a ledger boundary, and one past the end."""
        ml = self.open(max_entries_per_ledger=3)
        self.successResultOf(ml.open_cursor("keep", "earliest"))
        positions = self.add(ml, 5)
        self.assertEqual(ml.next_position(positions[0]), positions[1])
        self.assertEqual(ml.next_position(positions[2]), positions[3])
        last = positions[-1]
        self.assertEqual(ml.next_position(last), Position(last.ledger_id, last.entry_id + 1))

    def test_adds_queue_while_rolling_and_keep_order(self):
        """Adds issued while the full ledger closes and the next is created wait, then go in order."""
        self.bk.pause_adds()
        ml = self.open(max_entries_per_ledger=2)
        ds = [ml.add_entry(data(i)) for i in range(5)]
        self.assertEqual(ml.pending_adds_count, 5)
        while self.bk._held:
            self.bk.resume_adds()
            self.bk.pause_adds()
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual(results, sorted(results))
        self.assertEqual(len({p.ledger_id for p in results}), 3)

    def test_min_rollover_time_delays_rollover(self):
        """A full ledger is not rolled before min_rollover_time; the timer rolls it after."""
        ml = self.open(max_entries_per_ledger=2, min_rollover_time_ms=5000)
        self.successResultOf(ml.open_cursor("keep", "earliest"))
        positions = self.add(ml, 4)
        self.assertEqual(len({p.ledger_id for p in positions}), 1)
        self.clock.advance(5)
        self.assertEqual(ml.state, State.LEDGER_OPENED)
        later = self.add(ml, 1, start=4)[0]
        self.assertNotEqual(later.ledger_id, positions[0].ledger_id)

    def test_rollover_by_time(self):
        """A non-empty ledger is rolled after max_rollover_time; an empty one is not."""
        ml = self.open(max_rollover_time_ms=60_000)
        self.successResultOf(ml.open_cursor("keep", "earliest"))
        first = ml.current_ledger_id()
        self.clock.advance(61)
        self.assertEqual(ml.current_ledger_id(), first)
        self.add(ml, 2)
        self.clock.advance(61)
        self.assertNotEqual(ml.current_ledger_id(), first)
        self.assertEqual(len(ml.ledgers_info()), 2)
        p = self.add(ml, 1, start=2)[0]
        self.assertEqual(p, Position(ml.current_ledger_id(), 0))


class InconsistentStateReadTests(ManagedLedgerHarness, unittest.TestCase):
    def test_every_ledger_gone_then_a_new_subscription(self):
        """A topic with producers only (nothing retained) rolls over, so its full ledger is
        trimmed, then the first add to the next ledger fails, which drops that ledger empty: no
        ledger is left, the last entry is still the trimmed one's. A subscription from the earliest
        position then has nothing to read (its read looped on the reactor for good) and reads
        what comes next."""
        ml = self.open(max_entries_per_ledger=2)
        self.add(ml, 2)
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerError)
        self.assertEqual(ml.ledgers_info(), [])
        cursor = self.cursor(ml, "late", "earliest")
        self.assertFalse(cursor.has_more_entries())
        self.assertEqual(self.successResultOf(cursor.read_entries(10)), [])
        later = self.add(ml, 1, start=3)[0]
        self.assertTrue(cursor.has_more_entries())
        self.assertEqual([e.position for e in self.successResultOf(cursor.read_entries(10))], [later])
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_read_ends_where_nothing_is_stored(self):
        """Any other last entry the ledger list does not hold (here: the list counts no entry in
        the ledger of the last one) ends a read there, logged, instead of looping on the reactor."""
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 2)
        lid = ml.current_ledger_id()
        ml._ledgers[lid].entries = 0
        entries, next_pos = self.successResultOf(ml._read(Position(lid, 0), 10, None))
        self.assertEqual((entries, next_pos), ([], Position(lid, 0)))
        self.assertEqual(len(self.flushLoggedErrors()), 0)


class LedgerSwitchTests(ManagedLedgerHarness, unittest.TestCase):
    """The next ledger is made ahead at nine tenths of a full one; the full ledger's close and the
    next one's record are written at once, and adds wait for both."""

    def test_next_ledger_made_ahead_and_used(self):
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        first = ml.current_ledger_id()
        self.add(ml, 8)
        made = len(self.bk.created)       # the first ledger (and the cursor's)
        self.add(ml, 1, start=8)          # the ninth: the next ledger is made, not yet recorded
        self.assertEqual(len(self.bk.created), made + 1)
        ahead = self.bk.created[-1]
        self.assertEqual([i["ledgerId"] for i in ml.ledgers_info()], [first])
        self.assertEqual(self.bk.custom_metadata(ahead)["pulsar/managed-ledger"], ml.name.encode())
        self.add(ml, 1, start=9)          # the tenth fills it: the switch records the one made
        self.assertEqual(ml.current_ledger_id(), ahead)
        self.assertEqual([i["ledgerId"] for i in ml.ledgers_info()], [first, ahead])
        self.assertEqual(len(self.bk.created), made + 1)
        later = self.add(ml, 1, start=10)[0]
        self.assertEqual(later, Position(ahead, 0))
        recorded = self.successResultOf(self.store.get(ml.path))[0]
        self.assertEqual(formats.decode_ledger_info(recorded)[0][0][:2], (first, 10))
        entries = self.successResultOf(ml.read_entries(Position(first, 0), 20))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(11)])

    def test_adds_wait_for_the_close_and_the_record(self):
        """Queued adds go to the next ledger only once the full one's close and our node's record
        of the next are both done (both were issued at once)."""
        ml = self.open(max_entries_per_ledger=2)
        self.cursor(ml)
        full = self.bk._ledgers[ml.current_ledger_id()]
        closing, recording, calls = defer.Deferred(), defer.Deferred(), []
        handle = ml._current
        real_close, real_put = handle.close, self.store.put

        def close():
            calls.append("close")
            return closing.addCallback(lambda _: real_close())

        def put(*a, **kw):
            calls.append("record")
            return recording.addCallback(lambda _: real_put(*a, **kw))
        patch_method(self, handle, "close", close)
        self.patch(self.store, "put", put)
        self.add(ml, 2)
        queued = ml.add_entry(data(2))
        self.assertEqual(ml.state, State.CREATING_LEDGER)
        self.assertEqual(sorted(calls), ["close", "record"])    # both at once, neither done
        recording.callback(None)          # recorded, not yet closed
        self.assertNoResult(queued)
        self.assertFalse(full.closed)
        closing.callback(None)
        position = self.successResultOf(queued)
        self.assertEqual(position.entry_id, 0)
        self.assertTrue(full.closed)
        self.assertEqual(ml.state, State.LEDGER_OPENED)

    def test_ahead_creation_failure_is_retried_at_the_switch(self):
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        self.add(ml, 8)
        self.bk.fail_next_creates(1)
        self.add(ml, 1, start=8)          # making the next ledger ahead fails (logged)
        positions = self.add(ml, 3, start=9)
        self.assertEqual([p.entry_id for p in positions], [9, 0, 1])
        self.assertEqual(len(ml.ledgers_info()), 2)
        self.flushLoggedErrors()

    def test_switch_creation_failure_fails_queued_adds(self):
        """Neither ahead nor at the switch: the queued adds fail, the next add tries again."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        self.add(ml, 8)
        self.bk.fail_next_creates(2)
        self.add(ml, 1, start=8)
        self.bk.pause_adds()
        last, queued = ml.add_entry(data(9)), ml.add_entry(data(10))
        self.bk.resume_adds()
        self.successResultOf(last)
        self.failureResultOf(queued, ManagedLedgerError)
        self.assertEqual(ml.state, State.LEDGER_CLOSED)
        self.clock.advance(CREATE_RETRY_MIN)
        self.assertEqual(self.add(ml, 1, start=11)[0].entry_id, 0)

    def test_close_fence_and_failure_drop_the_ledger_made_ahead(self):
        """The ledger made ahead is named by no node: a close, a fence or a failed add (its
        ensemble may be the one that failed) deletes it."""
        for ending in ("close", "fence", "failed add"):
            ml = self.open(name=f"public/default/persistent/{ending.replace(' ', '-')}",
                           max_entries_per_ledger=10)
            self.cursor(ml)
            self.add(ml, 9)
            ahead = self.bk.created[-1]
            self.assertNotIn(ahead, [i["ledgerId"] for i in ml.ledgers_info()])
            if ending == "close":
                self.successResultOf(ml.close())
            elif ending == "fence":
                ml._set_fenced()
            else:
                self.bk.fail_next_adds(1, NotEnoughBookiesError)
                self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerError)
            self.assertIn(ahead, self.bk.deleted, ending)
            self.assertIsNone(ml._next_ledger, ending)
        later = self.add(ml, 1)[0]
        self.assertGreater(later.ledger_id, ahead)

    def test_ahead_ledger_made_while_closing_is_dropped(self):
        """A close that finds the next ledger still being made: it is deleted once made."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        self.add(ml, 8)
        making = defer.Deferred()
        real_create = self.bk.create_ledger
        self.patch(self.bk, "create_ledger", lambda *a, **kw: making.addCallback(
            lambda _: real_create(*a, **kw)))
        self.add(ml, 1, start=8)
        self.successResultOf(ml.close())
        making.callback(None)
        ahead = self.bk.created[-1]
        self.assertIn(ahead, self.bk.deleted)

    def test_crash_with_a_ledger_made_ahead_loses_nothing(self):
        """A new owner after a crash finds every entry; the ledger made ahead is in no list."""
        ml = self.open(max_entries_per_ledger=10)
        self.cursor(ml)
        self.add(ml, 9)
        ahead = self.bk.created[-1]
        other = self.open(factory=self.new_factory(max_entries_per_ledger=10))
        self.assertEqual(other.number_of_entries(), 9)
        self.assertNotIn(ahead, [i["ledgerId"] for i in other.ledgers_info()])
        self.failureResultOf(ml.add_entry(b"late"), ManagedLedgerFencedError)
        entries = self.successResultOf(other.read_entries(Position(-1, -1), 20))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(9)])


class TrimTests(ManagedLedgerHarness, unittest.TestCase):
    def test_trim_after_acks(self):
        """Ledgers entirely before the slowest cursor are deleted; the current one never is."""
        ml = self.open(max_entries_per_ledger=2)
        c1 = self.cursor(ml, "c1")
        c2 = self.cursor(ml, "c2")
        positions = self.add(ml, 6)
        ledgers = sorted({p.ledger_id for p in positions})
        self.successResultOf(c1.mark_delete(positions[5]))
        self.assertEqual(self.bk.deleted, [])
        self.successResultOf(c2.mark_delete(positions[3]))
        self.assertEqual(sorted(self.bk.deleted), ledgers[:2])
        self.assertNotIn(ledgers[0], [i["ledgerId"] for i in ml.ledgers_info()])
        self.successResultOf(c2.mark_delete(positions[5]))
        self.assertIn(ledgers[2], self.bk.deleted)
        self.assertIn(ml.current_ledger_id(), self.bk.ledger_ids())
        self.assertEqual(ml.number_of_entries(), 0)

    def reactor_turn(self):
        """Run the calls due now that were scheduled before this turn, as the real reactor does (a
        Clock's advance would also run the ones they schedule for now)."""
        due = [call for call in self.clock.getDelayedCalls() if call.getTime() <= self.clock.seconds()]
        for call in due:
            self.clock.calls.remove(call)
            call.called = True
            call.func(*call.args, **call.kw)

    def test_trim_of_many_ledgers_runs_in_slices(self):
        """Trimming 100 consumed (full, closed) ledgers deletes at most TRIM_SLICE of them per
        reactor turn, and the trim's Deferred fires once all are deleted."""
        ml = self.open(max_entries_per_ledger=1)
        c = self.cursor(ml)
        positions = self.add(ml, 100)
        ledgers = sorted({p.ledger_id for p in positions})
        self.assertEqual(len(ledgers), 100)
        d = c.mark_delete(positions[-1])
        steps = [len(self.bk.deleted)]
        while len(self.bk.deleted) < len(ledgers) and len(steps) < 50:
            self.reactor_turn()
            steps.append(len(self.bk.deleted))
        self.assertEqual(sorted(self.bk.deleted), ledgers)
        self.assertTrue(all(b - a <= TRIM_SLICE for a, b in zip([0] + steps, steps)), steps)
        self.assertGreater(len(steps), 100 // TRIM_SLICE)
        self.successResultOf(d)
        self.successResultOf(ml.trim_consumed_ledgers())

    def test_retention_keeps_consumed_ledgers(self):
        """With a time limit and unlimited size, consumed ledgers stay until they expire."""
        ml = self.open(max_entries_per_ledger=2, retention_time_ms=60_000, retention_size_mb=-1)
        c = self.cursor(ml)
        positions = self.add(ml, 4)
        self.successResultOf(c.mark_delete(positions[-1]))
        self.assertEqual(self.bk.deleted, [])
        self.clock.advance(61)
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(sorted(self.bk.deleted), sorted({p.ledger_id for p in positions}))

    def test_no_cursor_zero_retention_trims(self):
        ml = self.open(max_entries_per_ledger=2)
        positions = self.add(ml, 4)
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertTrue(set(p.ledger_id for p in positions) <= set(self.bk.deleted))

    def test_non_durable_cursor_does_not_hold_trimming(self):
        ml = self.open(max_entries_per_ledger=2)
        c = self.cursor(ml)
        reader = ml.new_non_durable_cursor(Position(-1, -1))
        positions = self.add(ml, 4)
        self.successResultOf(c.mark_delete(positions[-1]))
        self.assertTrue(set(p.ledger_id for p in positions) <= set(self.bk.deleted))
        self.assertEqual(self.read(reader), [])
        self.assertEqual(reader.number_of_entries_in_backlog(), 0)


class CacheReadTests(ManagedLedgerHarness, unittest.TestCase):
    def test_tailing_reads_hit_the_cache(self):
        """A cursor just behind the writer never reads from the ledger client."""
        ml = self.open(max_entries_per_ledger=3)
        c = self.cursor(ml, initial="latest")
        for i in range(10):
            self.add(ml, 1, start=i)
            self.assertEqual([e.data for e in self.read(c, 5)], [data(i)])
        self.assertEqual(self.bk.read_calls, [])

    def test_cache_miss_reads_old_ledgers(self):
        """Entries evicted (tiny cache) are read from the ledgers, opened without recovery."""
        ml = self.open(max_entries_per_ledger=3, cache_size_bytes=10)
        c = self.cursor(ml)
        self.add(ml, 7)
        self.assertEqual([e.data for e in self.read(c)], [data(i) for i in range(7)])
        self.assertTrue(self.bk.read_calls)
        self.assertTrue(all(not rec for _, rec in self.bk.opened if _ != ml.current_ledger_id()))


class FaultTests(ManagedLedgerHarness, unittest.TestCase):
    def test_add_failure_fails_pending_then_recovers_on_new_ledger(self):
        """A bookie error fails the adds in flight on that ledger; later adds go to a new ledger."""
        ml = self.open()
        self.cursor(ml)
        ok = self.add(ml, 2)
        self.bk.pause_adds()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        ds = [ml.add_entry(data(i)) for i in range(2, 5)]
        self.bk.resume_adds()
        for d in ds:
            self.failureResultOf(d, ManagedLedgerError)
        later = self.add(ml, 2, start=5)
        self.assertGreater(later[0].ledger_id, ok[0].ledger_id)
        self.assertEqual(later[0].entry_id, 0)
        entries = self.successResultOf(ml.read_entries(ok[0], 10))
        self.assertEqual([e.data for e in entries], [data(0), data(1), data(5), data(6)])

    def test_add_failure_also_fails_adds_queued_behind_it(self):
        """An add that fails while the ledger rolls over fails the adds queued behind it too: none
        may be stored after one that was not (the broker would acknowledge them out of order, and
        deduplication would then drop the resend of the failed one as a duplicate)."""
        ml = self.open(max_entries_per_ledger=1)
        self.cursor(ml)
        self.bk.pause_adds()
        self.bk.fail_next_adds(1, NotEnoughBookiesError)
        first = ml.add_entry(data(0))           # the ledger's last entry: rollover starts
        queued = [ml.add_entry(data(i)) for i in (1, 2)]
        self.bk.resume_adds()
        self.failureResultOf(first, ManagedLedgerError)
        for d in queued:
            self.failureResultOf(d, ManagedLedgerError)
        later = self.add(ml, 1, start=3)
        entries = self.successResultOf(ml.read_entries(later[0], 10))
        self.assertEqual([e.data for e in entries], [data(3)])
        self.assertEqual(ml.number_of_entries(), 1)

    def test_create_failure_fails_queued_adds(self):
        """Adds waiting for a ledger that cannot be created fail; an add after CREATE_RETRY_MIN
        tries again."""
        ml = self.open(max_entries_per_ledger=1)
        self.bk.pause_adds()
        first, queued = ml.add_entry(b"a"), ml.add_entry(b"b")
        self.bk.fail_next_creates(1)
        self.bk.resume_adds()
        self.successResultOf(first)
        self.failureResultOf(queued, ManagedLedgerError)
        self.assertEqual(ml.state, State.LEDGER_CLOSED)
        self.clock.advance(CREATE_RETRY_MIN)
        self.assertEqual(self.add(ml, 1)[0].entry_id, 0)

    def test_failed_creations_back_off(self):
        """After a failed creation, adds are refused at once without a new attempt (a client
        reconnecting in a loop made one per add, ~50 a second): for CREATE_RETRY_MIN, doubling
        with each failure in a row up to CREATE_RETRY_MAX, and from the start again once a
        ledger is made."""
        ml = self.open(max_entries_per_ledger=1)
        attempts = []
        real_create = self.bk.create_ledger

        def create(*a, **kw):
            attempts.append(self.clock.seconds())
            return real_create(*a, **kw)
        self.patch(self.bk, "create_ledger", create)
        self.bk.fail_next_creates(1)
        self.add(ml, 1)         # fills the ledger; making the next one at the switch fails
        self.assertEqual((len(attempts), ml.state), (1, State.LEDGER_CLOSED))
        self.bk.fail_next_creates(6)
        waits = []
        while len(waits) < 6:
            started, before = self.clock.seconds(), len(attempts)
            while True:
                self.clock.advance(0.25)
                failure = self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerError)
                if len(attempts) > before:
                    break                       # that add's attempt, failed
                self.assertIn("waiting", failure.getErrorMessage())
            waits.append(self.clock.seconds() - started)
        self.assertEqual(waits, [0.5, 1.0, 2.0, 4.0, CREATE_RETRY_MAX, CREATE_RETRY_MAX])
        self.clock.advance(CREATE_RETRY_MAX)
        self.successResultOf(ml.add_entry(b"made"))     # a ledger is made: the backoff resets
        self.bk.fail_next_creates(1)
        self.add(ml, 1)
        self.assertEqual(ml.state, State.LEDGER_CLOSED)
        self.clock.advance(CREATE_RETRY_MIN)
        self.successResultOf(ml.add_entry(b"y"))
        self.flushLoggedErrors()

    def test_crash_restart_fences_previous_owner(self):
        """A second instance recovers (fences) the last ledger; the old one can no longer add."""
        old = self.open()
        self.cursor(old)
        self.add(old, 3)
        other = self.new_factory()
        new = self.open(factory=other)
        self.assertEqual(new.number_of_entries(), 3)
        self.failureResultOf(old.add_entry(b"late"), ManagedLedgerFencedError)
        self.assertEqual(old.state, State.FENCED)
        self.failureResultOf(old.add_entry(b"later"), ManagedLedgerFencedError)
        p = self.add(new, 1, start=3)[0]
        entries = self.successResultOf(new.read_entries(Position(-1, -1), 10))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(4)])
        self.assertEqual(entries[-1].position, p)

    def test_stale_metadata_write_fences(self):
        """A CAS conflict on the ledger list (another owner) fences this instance."""
        ml = self.open(max_entries_per_ledger=2)
        self.successResultOf(self.store.put(ml.path, self.successResultOf(self.store.get(ml.path))[0]))
        self.add(ml, 2)  # fills the ledger: the rollover's metadata write conflicts
        self.assertEqual(ml.state, State.FENCED)
        self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerFencedError)


class LifecycleTests(ManagedLedgerHarness, unittest.TestCase):
    def test_close_then_reopen(self):
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 3)
        self.successResultOf(ml.close())
        self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerClosedError)
        again = self.open()
        self.assertIsNot(again, ml)
        self.assertEqual(again.number_of_entries(), 3)

    def _open_while_closing(self):
        """A managed ledger closing with one add held in flight, and an open of its name made
        meanwhile: ``(ml, the add, the close, the open)``."""
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 1)
        self.bk.pause_adds()
        in_flight = ml.add_entry(data(1))
        closing = ml.close()
        return ml, in_flight, closing, self.factory.open(ml.name)

    def test_open_during_close_waits_for_a_new_instance(self):
        """An open while the instance is still closing (adds in flight draining: a topic unloaded
        and loaded again at once) waits for the close and gives a new instance, never the
        closed one (a topic built on it would fail every add and never be reloaded)."""
        ml, in_flight, closing, d = self._open_while_closing()
        self.assertNoResult(closing)
        self.assertNoResult(d)
        self.bk.resume_adds()
        self.successResultOf(in_flight)
        self.successResultOf(closing)
        again = self.successResultOf(d)
        self.assertIsNot(again, ml)
        self.assertEqual(again.number_of_entries(), 2)
        self.assertEqual(self.add(again, 1, start=2)[0].entry_id, 0)

    def test_open_after_a_stuck_close_does_not_wait_for_ever(self):
        """A close that does not finish (its adds in flight never answered: a bookie or the
        metadata store gone quiet) says what it waits for after CLOSE_REPORT_AFTER, and an open
        of the same name gives a new instance after CLOSE_WAIT_LIMIT instead of waiting for good
        (under the nemesis a partition was never loaded again after such a close). The new
        instance fences the old one's ledger, so the late adds fail and the late close cannot
        undo anything."""
        from twisted.logger import globalLogPublisher
        from pulsar_twisted.mledger.factory import CLOSE_WAIT_LIMIT
        from pulsar_twisted.mledger.ledger import CLOSE_REPORT_AFTER
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        ml, in_flight, closing, d = self._open_while_closing()
        self.clock.advance(CLOSE_WAIT_LIMIT - 0.5)
        self.assertNoResult(d)
        self.clock.advance(0.5)
        again = self.successResultOf(d)
        self.assertIsNot(again, ml)
        self.assertIs(self.factory.get(ml.name), again)
        self.clock.advance(CLOSE_REPORT_AFTER - CLOSE_WAIT_LIMIT)
        reports = [e for e in events if "close not done" in e.get("log_format", "")]
        self.assertEqual(len(reports), 1)
        self.assertIn("1 adds in flight", reports[0]["what"])
        # The late adds and close settle; the new instance stays the factory's and writes on.
        self.bk.resume_adds()
        self.failureResultOf(in_flight)
        self.successResultOf(closing)
        self.assertIs(self.factory.get(ml.name), again)
        self.assertEqual(again.number_of_entries(), 1)
        self.assertEqual(self.add(again, 1, start=1)[0].entry_id, 0)
        self.assertFalse([c for c in self.clock.getDelayedCalls() if "slow_close" in repr(c)])

    def test_shutdown_ends_an_open_waiting_for_a_close(self):
        """A shutdown while an open waits for the previous instance's close fails that open at once
        and leaves no timer behind; the open used to wait on up to CLOSE_WAIT_LIMIT after the
        factory was shut down, its timer still set."""
        ml, in_flight, closing, d = self._open_while_closing()
        shutdown = self.factory.shutdown()
        self.failureResultOf(d, ManagedLedgerClosedError)
        self.assertFalse([c for c in self.clock.getDelayedCalls() if "waited_enough" in repr(c)])
        self.assertNoResult(shutdown)       # it waits for the close in progress (below)
        self.bk.resume_adds()
        self.successResultOf(closing)
        self.successResultOf(shutdown)

    def test_shutdown_does_not_wait_for_a_stuck_close_for_ever(self):
        """A shutdown waits for the closes in progress at most CLOSE_WAIT_LIMIT, as an open does:
        a close stuck on a bookie that never answers must not hold the daemon's stop for good."""
        from pulsar_twisted.mledger.factory import CLOSE_WAIT_LIMIT
        ml, in_flight, closing, opening = self._open_while_closing()
        shutdown = self.factory.shutdown()
        self.failureResultOf(opening, ManagedLedgerClosedError)
        self.clock.advance(CLOSE_WAIT_LIMIT - 0.5)
        self.assertNoResult(shutdown)
        self.clock.advance(0.5)
        self.successResultOf(shutdown)
        self.bk.resume_adds()
        self.successResultOf(closing)

    def test_delete_during_a_close_waits_for_it_then_deletes(self):
        """A delete while the instance is closing (its adds draining: a topic deleted during its
        unload) waits for the close, then deletes the metadata and every ledger."""
        ml = self.open()
        self.cursor(ml)
        lid = self.add(ml, 1)[0].ledger_id
        self.bk.pause_adds()
        in_flight = ml.add_entry(data(1))
        closing = ml.close()
        deleting = self.factory.delete(ml.name)
        self.assertNoResult(deleting)
        self.bk.resume_adds()
        self.successResultOf(in_flight)
        self.successResultOf(closing)
        self.successResultOf(deleting)
        self.assertIsNone(self.successResultOf(self.store.get(formats.ledger_path(ml.name))))
        self.assertIn(lid, self.bk.deleted)

    def test_delete_during_a_stuck_close_spares_the_next_instance(self):
        """A delete while the instance is still closing (a topic deleted during its unload) waits
        for the close. When that close is stuck (adds in flight unanswered), an open of the name
        (the topic's clients reconnecting) gives a new instance after CLOSE_WAIT_LIMIT, which
        takes new messages; the late end of the old close must not let the delete go on to remove
        the new instance's metadata and ledgers under it."""
        from pulsar_twisted.mledger.factory import CLOSE_WAIT_LIMIT
        ml, in_flight, closing, opening = self._open_while_closing()
        deleting = self.factory.delete(ml.name)
        self.assertNoResult(deleting)
        self.clock.advance(CLOSE_WAIT_LIMIT)
        again = self.successResultOf(opening)
        self.bk.resume_adds()
        positions = self.add(again, 2, start=5)
        self.failureResultOf(in_flight, ManagedLedgerFencedError)
        self.successResultOf(closing)
        self.failureResultOf(deleting, ManagedLedgerError)
        self.assertIs(self.factory.get(ml.name), again)
        self.assertIsNotNone(self.successResultOf(self.store.get(formats.ledger_path(ml.name))))
        self.assertNotIn(positions[0].ledger_id, self.bk.deleted)
        self.assertEqual(self.add(again, 1, start=7)[0].ledger_id, positions[0].ledger_id)

    def test_second_close_waits_for_the_first(self):
        """A close while a close is in progress (a shutdown or a delete during a topic's unload)
        fires when that close is done; it used to fire at once, so a shutdown could end with the
        ledger's adds still draining and its cursors and ledger not yet closed."""
        ml, in_flight, closing, _ = self._open_while_closing()
        again = ml.close()
        self.assertNoResult(again)
        self.bk.resume_adds()
        self.successResultOf(closing)
        self.successResultOf(again)
        self.successResultOf(ml.close())    # closed: at once

    def test_shutdown_closes_an_instance_still_initialising(self):
        """A shutdown while a managed ledger initialises (its first ledger being created) waits
        for the initialisation, then closes the instance (its ledger closed) instead of leaving it
        open and forgotten; the open fails."""
        held = []
        real_create = self.bk.create_ledger

        def create_ledger(*args, **kwargs):
            held.append((defer.Deferred(), args, kwargs))
            return held[-1][0]
        self.patch(self.bk, "create_ledger", create_ledger)
        opening = self.factory.open("public/default/persistent/t")
        self.assertEqual(len(held), 1)
        shutdown = self.factory.shutdown()
        self.assertNoResult(shutdown)
        d, args, kwargs = held[0]
        real_create(*args, **kwargs).chainDeferred(d)
        self.failureResultOf(opening, ManagedLedgerClosedError)
        self.successResultOf(shutdown)
        self.assertEqual(len(self.bk.created), 1)
        self.assertTrue(self.bk._ledgers[self.bk.created[0]].closed)
        self.assertIsNone(self.factory.get("public/default/persistent/t"))

    def test_empty_ledgers_skipped(self):
        """Restarts leave no empty ledgers behind, and reads skip across them."""
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 1)
        self.successResultOf(self.factory.shutdown())
        for _ in range(3):
            f = self.new_factory()
            self.open(factory=f)
            self.successResultOf(f.shutdown())
        f = self.new_factory()
        ml = self.open(factory=f)
        self.add(ml, 1, start=1)
        entries = self.successResultOf(ml.read_entries(Position(-1, -1), 10))
        self.assertEqual([e.data for e in entries], [data(0), data(1)])
        self.assertEqual([i["entries"] for i in ml.ledgers_info()], [1, 1])

    def test_delete(self):
        ml = self.open()
        self.cursor(ml)
        self.add(ml, 2)
        self.successResultOf(self.factory.delete(ml.name))
        self.assertEqual(self.successResultOf(self.factory.list_names()), [])
        self.assertEqual(self.bk.ledger_ids(), [])

    def test_terminate(self):
        ml = self.open()
        ps = self.add(ml, 2)
        self.assertEqual(self.successResultOf(ml.terminate()), ps[-1])
        self.failureResultOf(ml.add_entry(b"x"), ManagedLedgerTerminatedError)
        self.successResultOf(self.factory.shutdown())
        again = self.open(factory=self.new_factory())
        self.assertTrue(again.is_terminated)
        self.failureResultOf(again.add_entry(b"x"), ManagedLedgerTerminatedError)

    def test_terminated_empty_keeps_its_last_entry(self):
        """Terminated before any write, then reopened (recovery drops the empty ledger): the last
        entry is still the terminated position (Pulsar's), not -1:-1 behind the cursors, so a
        cursor may still mark-delete there."""
        ml = self.open()
        cursor = self.cursor(ml, "c")
        terminated = self.successResultOf(ml.terminate())
        self.assertEqual(terminated.entry_id, -1)
        self.assertEqual(cursor.mark_delete_position, terminated)
        self.successResultOf(self.factory.shutdown())
        again = self.open(factory=self.new_factory())
        self.assertTrue(again.is_terminated)
        self.assertEqual(again.last_confirmed_entry(), terminated)
        self.assertLessEqual(again.cursors["c"].mark_delete_position, again.last_confirmed_entry())
        self.successResultOf(again.cursors["c"].mark_delete(terminated, {"k": "v"}))
        self.assertEqual(self.successResultOf(again.read_entries(again.first_position(), 10)), [])

    def test_properties_persisted(self):
        ml = self.open()
        self.successResultOf(ml.set_properties({"a": "1"}))
        self.successResultOf(self.factory.shutdown())
        self.assertEqual(self.open(factory=self.new_factory()).properties, {"a": "1"})
