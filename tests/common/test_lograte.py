"""LogRate: one line per period for a repeated warning, with the count held back meanwhile."""

from twisted.internet import task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.common.lograte import LogRate


class LogRateTests(SynchronousTestCase):
    def test_first_at_once_then_one_per_period_with_the_held_back_count(self):
        clock = task.Clock()
        rate = LogRate(clock, period=1.0)
        self.assertEqual(rate.due(3), 3)              # the first occurrence: at once
        self.assertIsNone(rate.due(2))                # within the period: held back
        clock.advance(0.5)
        self.assertIsNone(rate.due())
        clock.advance(0.5)
        self.assertEqual(rate.due(4), 7)              # a period on: those held back too
        clock.advance(5)
        self.assertEqual(rate.due(), 1)
