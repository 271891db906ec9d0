"""The managed ledgers' shared rollover timers (mledger/timers.py): one reactor call for all."""

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.mledger.timers import SharedTimers

from tests.mledger.test_support import ManagedLedgerHarness, data


class SharedTimersTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.timers = SharedTimers(self.clock)
        self.fired = []

    def later(self, delay, name):
        return self.timers.call_later(delay, lambda: self.fired.append((name, self.clock.seconds())))

    def test_each_fires_at_its_time_with_one_reactor_call(self):
        """Timers fire at the times they were set for, in time order, and the reactor holds one
        call for all of them (moved earlier when an earlier timer arrives)."""
        self.later(10, "a")
        self.later(30, "c")
        self.later(20, "b")
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.later(5, "first")
        self.assertEqual([c.getTime() for c in self.clock.getDelayedCalls()], [5])
        self.clock.pump([5, 5, 10, 10])
        self.assertEqual(self.fired, [("first", 5), ("a", 10), ("b", 20), ("c", 30)])
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(len(self.timers), 0)

    def test_heap_holds_the_timers_themselves(self):
        """No (time, sequence, timer) tuple per entry (issue 14); timers due at the same time all
        fire, cancelled ones among them excepted."""
        timers = [self.later(10, i) for i in range(5)]
        self.assertEqual(sorted(map(id, self.timers._heap)), sorted(map(id, timers)))
        timers[2].cancel()
        self.clock.advance(10)
        self.assertEqual(sorted(name for name, _ in self.fired), [0, 1, 3, 4])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_bound_method_kept_apart(self):
        """A bound method is held as function and object (no bound-method object per timer); it
        is called on its object, and a cancelled timer lets go of the object."""
        class Owner:
            def __init__(self, log):
                self.log = log

            def check(self):
                self.log.append(self)
        owner = Owner(self.fired)
        timer = self.timers.call_later(1, owner.check)
        self.assertIs(timer.target, owner)
        self.clock.advance(1)
        self.assertEqual(self.fired, [owner])
        other = self.timers.call_later(1, Owner(self.fired).check)
        other.cancel()
        self.assertIsNone(other.target)
        self.clock.advance(1)
        self.assertEqual(self.fired, [owner])

    def test_cancelled_timer_does_not_fire(self):
        a = self.later(10, "a")
        b = self.later(20, "b")
        self.assertTrue(a.active())
        a.cancel()
        a.cancel()      # twice is harmless
        self.assertFalse(a.active())
        self.assertEqual(len(self.timers), 1)
        self.assertEqual([c.getTime() for c in self.clock.getDelayedCalls()], [20])
        self.clock.advance(20)
        self.assertEqual(self.fired, [("b", 20)])
        self.assertFalse(b.active())
        b.cancel()      # after firing: nothing happens
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_timer_set_while_firing(self):
        """A timer set from a firing one (a rollover check re-arming itself) is kept."""
        def again():
            self.fired.append(("first", self.clock.seconds()))
            self.later(10, "again")
        self.timers.call_later(10, again)
        self.clock.advance(10)
        self.clock.advance(10)
        self.assertEqual(self.fired, [("first", 10), ("again", 20)])

    def test_failing_call_is_logged_and_others_still_fire(self):
        self.timers.call_later(1, lambda: 1 / 0)
        self.later(1, "after")
        self.clock.advance(1)
        self.assertEqual(self.fired, [("after", 1)])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_many_cancelled_entries_are_dropped(self):
        timers = [self.later(100 + i, i) for i in range(200)]
        for t in timers[:150]:
            t.cancel()
        self.assertLess(len(self.timers._heap), 120)
        self.assertEqual(len(self.timers), 50)
        self.clock.advance(400)
        self.assertEqual([name for name, _ in self.fired], list(range(150, 200)))

    def test_stop_cancels_everything(self):
        self.later(1, "a")
        self.timers.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(2)
        self.assertEqual(self.fired, [])


class ManagedLedgerRolloverTimerTests(ManagedLedgerHarness, unittest.TestCase):
    def test_many_managed_ledgers_one_reactor_call(self):
        """The rollover timers of many open managed ledgers share one reactor call; each ledger
        still rolls over after max_rollover_time, and a shut-down factory leaves no call."""
        factory = self.new_factory(max_rollover_time_ms=60_000)
        mls = [self.open(f"public/default/persistent/t{i}", factory=factory) for i in range(20)]
        for ml in mls:
            self.successResultOf(ml.add_entry(data(0)))
        self.assertEqual(len(factory.timers), 20)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        first = [ml.current_ledger_id() for ml in mls]
        self.clock.advance(60)
        self.assertTrue(all(ml.current_ledger_id() != lid for ml, lid in zip(mls, first)))
        self.successResultOf(factory.shutdown())
        self.assertEqual(self.clock.getDelayedCalls(), [])
