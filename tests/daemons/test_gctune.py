"""GcFreezePolicy's decisions, on a fake gc module and a task.Clock."""

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.daemons import gctune


class FakeGc:
    """The part of the gc module the policy uses; ``old`` objects sit in generation 2."""

    def __init__(self):
        self.calls = []
        self.old = 0
        self.frozen = 0

    def freeze(self):
        self.calls.append("freeze")
        self.frozen += self.old
        self.old = 0

    def set_threshold(self, *thresholds):
        self.calls.append(("threshold",) + thresholds)

    def get_objects(self, generation=None):
        assert generation == 2
        return [None] * self.old

    def get_freeze_count(self):
        return self.frozen


class GcFreezePolicyTests(unittest.SynchronousTestCase):

    def setUp(self):
        self.gc, self.clock = FakeGc(), task.Clock()
        self.policy = gctune.GcFreezePolicy(self.clock, self.gc, check_seconds=10, min_objects=100)

    def test_start_freezes_and_sets_thresholds(self):
        self.gc.old = 50
        self.policy.start()
        self.assertEqual(self.gc.calls, ["freeze", ("threshold",) + gctune.THRESHOLDS])
        self.assertEqual(self.policy.frozen, 50)
        self.assertEqual(self.policy.freezes, 1)

    def test_small_growth_is_left_to_the_collector(self):
        self.policy.start()
        self.gc.calls.clear()
        self.gc.old = 99
        self.clock.advance(10)
        self.assertEqual(self.gc.calls, [])
        self.assertEqual(self.policy.freezes, 1)

    def test_growth_is_frozen_without_a_collection(self):
        """Past min_objects the freeze alone: the look itself never walks the generation."""
        self.policy.start()
        self.gc.calls.clear()
        self.gc.old = 500
        self.clock.advance(9)
        self.assertEqual(self.gc.calls, [])
        self.clock.advance(1)
        self.assertEqual(self.gc.calls, ["freeze"])
        self.assertEqual((self.policy.frozen, self.policy.freezes), (500, 2))

    def test_keeps_looking_and_stops(self):
        self.policy.start()
        for _ in range(3):
            self.gc.old = 200
            self.clock.advance(10)
        self.assertEqual(self.policy.freezes, 4)
        self.policy.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.gc.old = 200
        self.clock.advance(10)
        self.assertEqual(self.policy.freezes, 4)

    def test_the_real_gc_module_fits(self):
        """The calls the policy makes exist on the real gc module (no freeze done here)."""
        import gc
        for name in ("freeze", "set_threshold", "get_objects", "get_freeze_count"):
            self.assertTrue(callable(getattr(gc, name)), name)
