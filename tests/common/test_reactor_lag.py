"""Tests for pulsar_twisted.common.reactor_lag: the reactor lag histogram and the stall watchdog."""

import sys

from twisted.internet.task import Clock
from twisted.trial import unittest

from pulsar_twisted.common.reactor_lag import (
    LAG_BUCKETS_MS, LagHistogram, ReactorLagMonitor, StallWatchdog)
from twisted.logger import capturedLogs, formatEvent


def stall_lines(events):
    return [formatEvent(e) for e in events if "stalled" in e.get("log_format", "")]


def _busy_callback_frame():
    """A frame standing for a long callback the reactor is running."""
    return sys._getframe()


class HistogramTests(unittest.TestCase):

    def test_cumulative_buckets(self):
        """Buckets are cumulative, +Inf holds every lag, sum and max follow the observations."""
        h = LagHistogram()
        for ms in (0.1, 3, 3, 70, 9000):
            h.observe(ms)
        cumulative = dict(h.cumulative())
        self.assertEqual(cumulative[0.5], 1)
        self.assertEqual(cumulative[5], 3)
        self.assertEqual(cumulative[50], 3)
        self.assertEqual(cumulative[100], 4)
        self.assertEqual(cumulative[LAG_BUCKETS_MS[-1]], 4)
        self.assertEqual(cumulative[float("inf")], 5)
        self.assertEqual((h.count, h.sum, h.max), (5, 9076.1, 9000))


class MonitorTests(unittest.TestCase):

    def setUp(self):
        self.clock = Clock()
        self.cpu = [0.0]
        self.monitor = ReactorLagMonitor(self.clock, interval=0.01, stall_ms=50, cpu_clock=lambda: self.cpu[0],
                                         process_clock=lambda: 2 * self.cpu[0])
        self.monitor.start()
        self.addCleanup(self.monitor.stop)

    def test_on_time_ticks_have_no_lag(self):
        """Ticks run when due measure a lag of 0 and no stall."""
        for _ in range(5):
            self.clock.advance(0.01)
        self.assertEqual(self.monitor.histogram.count, 5)
        self.assertEqual(self.monitor.histogram.max, 0.0)
        self.assertEqual(self.monitor.stalls, 0)

    def test_late_tick_measured_and_logged(self):
        """A tick run 90 ms after it was due records 90 ms and logs a stall; a 30 ms one is not a stall."""
        with capturedLogs() as events:
            self.clock.advance(0.04)       # due at 0.01: 30 ms late
            self.cpu[0] = 0.012
            self.clock.advance(0.14)       # due at 0.05, runs at 0.18: 130 ms late, 12 ms on CPU
        logged = stall_lines(events)
        self.assertEqual(self.monitor.histogram.count, 2)
        self.assertAlmostEqual(self.monitor.histogram.max, 130.0, places=6)
        self.assertEqual(self.monitor.stalls, 1)
        self.assertEqual(len(logged), 1)
        self.assertIn("reactor stalled 130 ms (on CPU in 140 ms: reactor thread 12, whole process 24)",
                      logged[0])
        self.assertIn("no sample", logged[0])

    def test_stop_cancels_the_tick(self):
        """After stop no tick is pending on the clock."""
        self.monitor.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class WatchdogTests(unittest.TestCase):

    def setUp(self):
        self.clock = Clock()
        self.monitor = ReactorLagMonitor(self.clock, interval=0.01, stall_ms=50)
        self.monitor.start()
        self.addCleanup(self.monitor.stop)
        self.frame = _busy_callback_frame()
        self.watchdog = StallWatchdog(self.monitor, 7, frames=lambda: {7: self.frame})

    def test_samples_once_per_stall(self):
        """Under the threshold nothing is sampled; past it the stack is sampled once, not at every check."""
        self.assertFalse(self.watchdog.check(0.03))   # 20 ms late: under half the threshold
        self.assertTrue(self.watchdog.check(0.04))
        self.assertFalse(self.watchdog.check(0.09))
        self.assertEqual(self.watchdog.samples, 1)

    def test_late_tick_names_what_ran(self):
        """The stall's log line carries the sampled stack: the function the reactor was running."""
        self.watchdog.check(0.07)
        with capturedLogs() as events:
            self.clock.advance(0.1)
        logged = stall_lines(events)
        self.assertEqual(len(logged), 1)
        self.assertIn("_busy_callback_frame", logged[0])
        self.assertIn("test_reactor_lag.py", logged[0])

    def test_stale_sample_not_blamed_on_a_later_stall(self):
        """A sample taken for one tick is not reported by a stall after a later tick."""
        self.watchdog.check(0.07)          # sampled against the tick at 0
        self.monitor.stall_sample = (-1.0, "stale")
        with capturedLogs() as events:
            self.clock.advance(0.1)
        logged = stall_lines(events)
        self.assertIn("no sample", logged[0])
        self.assertNotIn("stale", logged[0])

    def test_unknown_thread_is_not_sampled(self):
        """A thread that has ended (no frame) gives no sample."""
        watchdog = StallWatchdog(self.monitor, 8, frames=lambda: {})
        self.assertFalse(watchdog.check(1.0))
