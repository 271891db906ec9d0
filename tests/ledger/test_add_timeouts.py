"""AddTimeouts (one reactor call for every writer's add-timeout check) and what an idle writer holds."""

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.ledger.handle import AddTimeouts

from tests.ledger.test_handle import LedgerHarness


class _Handle:
    """What AddTimeouts needs of a LedgerHandle: ``_timeout_at`` and ``_check_timeouts``."""

    def __init__(self, name, log, queue=None, again=None):
        self.ledger_id = name
        self._timeout_at = None
        self.log = log
        self.queue = queue
        self.again = again

    def _check_timeouts(self):
        self.log.append((self.ledger_id, self.queue.clock.seconds()))
        if self.again is not None:
            self.queue.schedule(self, self.again)


class AddTimeoutsTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.queue = AddTimeouts(self.clock)
        self.log = []

    def handle(self, name, again=None):
        return _Handle(name, self.log, self.queue, again)

    def test_one_reactor_call_for_many_handles(self):
        """Checks of many handles run at their own times on a single armed reactor call."""
        handles = [self.handle(i) for i in range(100)]
        for i, h in enumerate(handles):
            self.clock.advance(0.25 if i else 0)
            self.queue.schedule(h, 30)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.assertEqual(len(self.queue), 100)
        self.assertEqual({type(x) for x in self.queue._queue}, {float, _Handle})   # no tuple per entry
        self.clock.advance(30 - 99 * 0.25)
        self.assertEqual(self.log, [(0, 30.0)])
        self.clock.advance(0.25)
        self.assertEqual(self.log, [(0, 30.0), (1, 30.25)])
        self.clock.advance(100)
        self.assertEqual([name for name, _ in self.log], list(range(100)))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual([h._timeout_at for h in handles], [None] * 100)

    def test_cancel_skips_and_last_cancel_frees_the_call(self):
        """A cancelled check does not run; once none is live, no reactor call stays armed."""
        a, b = self.handle("a"), self.handle("b")
        self.queue.schedule(a, 30)
        self.queue.schedule(b, 30)
        self.queue.cancel(a)
        self.assertIsNone(a._timeout_at)
        self.assertEqual(len(self.queue), 1)
        self.clock.advance(30)
        self.assertEqual(self.log, [("b", 30.0)])
        self.queue.schedule(a, 30)
        self.queue.cancel(a)
        self.queue.cancel(a)        # twice is harmless
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(len(self.queue), 0)

    def test_rescheduled_after_cancel_runs_once_at_the_new_time(self):
        """Cancel then schedule again: the stale entry is skipped, the new one runs."""
        a, b = self.handle("a"), self.handle("b")
        self.queue.schedule(b, 30)
        self.queue.schedule(a, 10)      # earlier than the tail: put in its place
        self.queue.cancel(a)
        self.clock.advance(5)
        self.queue.schedule(a, 10)
        self.clock.advance(10)
        self.assertEqual(self.log, [("a", 15.0)])
        self.clock.advance(15)
        self.assertEqual(self.log, [("a", 15.0), ("b", 30.0)])

    def test_earlier_time_moves_the_call(self):
        """A check due before the armed one (a lowered timeout) runs at its own time."""
        a, b = self.handle("a"), self.handle("b")
        self.queue.schedule(a, 30)
        self.queue.schedule(b, 5)
        self.assertEqual([c.getTime() for c in self.clock.getDelayedCalls()], [5.0])
        self.clock.advance(5)
        self.assertEqual(self.log, [("b", 5.0)])
        self.clock.advance(25)
        self.assertEqual(self.log, [("b", 5.0), ("a", 30.0)])

    def test_checks_scheduling_again_keep_one_call(self):
        """A check that schedules the next (pending adds remain) leaves one armed call."""
        handles = [self.handle(i, again=30) for i in range(3)]
        for h in handles:
            self.queue.schedule(h, 30)
        self.clock.advance(30)
        self.assertEqual(len(self.log), 3)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.assertEqual(len(self.queue), 3)
        self.clock.advance(30)
        self.assertEqual(len(self.log), 6)

    def test_failing_check_is_logged_and_the_rest_run(self):
        """An exception from one check is logged; the other checks still run."""
        bad = self.handle("bad")
        bad._check_timeouts = lambda: 1 / 0
        good = self.handle("good")
        self.queue.schedule(bad, 1)
        self.queue.schedule(good, 1)
        self.clock.advance(1)
        self.assertEqual(self.log, [("good", 1.0)])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)


class IdleWriterTests(LedgerHarness, unittest.TestCase):
    """What a writer with nothing in flight holds (issue 14: memory per loaded topic)."""

    def test_idle_writer_holds_no_queue(self):
        """Once its adds completed, a writer keeps no deque of pending adds and no failed map."""
        handle = self.create(3, 2, 2)
        self.assertEqual(handle._pending, ())
        self.add_all(handle, [b"a", b"b"])
        self.assertEqual(handle._pending, ())
        self.assertEqual(len(handle._failed), 0)
        self.assertIsInstance(handle._ensemble, tuple)

    def test_writers_share_schedule_and_one_timeout_call(self):
        """Writers of the same shape share their write-set schedule; their add-timeout checks
        are one reactor call, none once the checks found nothing pending."""
        handles = [self.create(3, 2, 2) for _ in range(5)]
        self.assertEqual(len({id(h._schedule) for h in handles}), 1)
        calls = set(self.clock.getDelayedCalls())
        for h in handles:
            self.add_all(h, [b"x"])
        self.assertEqual(len(set(self.clock.getDelayedCalls()) - calls), 1)
        self.clock.advance(30)
        self.assertEqual(len(self.client.env.add_timeouts()), 0)
        self.assertEqual(set(self.clock.getDelayedCalls()) - calls, set())

    def test_close_cancels_the_timeout_check(self):
        """A closed writer leaves no add-timeout check behind."""
        handle = self.create(3, 2, 2)
        self.add_all(handle, [b"x"])
        self.assertIsNotNone(handle._timeout_at)
        self.successResultOf(handle.close())
        self.assertIsNone(handle._timeout_at)
        self.assertEqual(len(self.client.env.add_timeouts()), 0)
