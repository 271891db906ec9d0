"""Bookie quarantine (ledger.health): failed or timed-out writes keep a bookie out of new ensembles
and replacements for a while, unless nothing else can make up the ensemble."""

import random

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.ledger.health import BookieHealth, QuarantineAwarePlacement
from pulsar_twisted.common.bk_errors import BookieUnavailableError, NotEnoughBookiesError
from pulsar_twisted.ledger.quorum import IEnsemblePlacementPolicy, RandomPlacementPolicy
from zope.interface.verify import verifyObject

from tests.ledger.test_handle import LedgerHarness


class BookieHealthTests(unittest.TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.health = BookieHealth(self.clock, interval=60, error_threshold=3, quarantine_time=100)

    def test_threshold_within_an_interval(self):
        """Errors count per interval; the threshold quarantines at once, for quarantine_time."""
        for _ in range(2):
            self.health.record_error("b1")
        self.clock.advance(61)              # a new interval: the count starts again
        for _ in range(2):
            self.health.record_error("b1")
        self.assertEqual(self.health.quarantined(), frozenset())
        self.health.record_error("b1")
        self.assertEqual(self.health.quarantined(), {"b1"})
        self.clock.advance(99)
        self.assertTrue(self.health.is_quarantined("b1"))
        self.clock.advance(1)
        self.assertFalse(self.health.is_quarantined("b1"))
        self.assertEqual(self.health.quarantined(), frozenset())

    def test_disabled(self):
        health = BookieHealth(self.clock, enabled=False, error_threshold=1)
        health.record_error("b1")
        self.assertEqual(health.quarantined(), frozenset())

    def test_placement_prefers_healthy_falls_back_to_quarantined(self):
        """New ensembles and replacements skip quarantined bookies while others suffice, and use
        them (as BookKeeper does) when nothing else can make up the ensemble."""
        placement = QuarantineAwarePlacement(RandomPlacementPolicy(random.Random(1)), self.health)
        verifyObject(IEnsemblePlacementPolicy, placement)
        for _ in range(3):
            self.health.record_error("b3")
        writable = {"b0", "b1", "b2", "b3"}
        for _ in range(20):
            self.assertNotIn("b3", placement.new_ensemble(3, writable))
            self.assertEqual(placement.replace_bookie(["b0", "b1", "b2"], 1, writable | {"b4"},
                                                      exclude={"b1"}), "b4")
        self.assertEqual(sorted(placement.new_ensemble(4, writable)), ["b0", "b1", "b2", "b3"])
        self.assertEqual(placement.replace_bookie(["b0", "b1", "b2"], 1, writable, exclude={"b1"}),
                         "b3")
        self.assertRaises(NotEnoughBookiesError, placement.new_ensemble, 5, writable)


class ClientQuarantineTests(LedgerHarness, unittest.TestCase):
    """On the BookKeeperClient: 4 fake bookies, a dead one still registered."""

    def make_client(self, **kw):
        kw.setdefault("health_check_error_threshold_per_interval", 2)
        kw.setdefault("health_check_quarantine_time_seconds", 300)
        return super().make_client(**kw)

    def test_dead_registered_bookie_not_chosen_again(self):
        """A bookie that failed writes is replaced and then left out of every new ledger until its
        quarantine ends (the issue saw 354 ledgers made on a dead, still registered bookie)."""
        dead_id = "bookie-0"
        self.bookies[dead_id].available = False
        used_dead = 0
        for _ in range(50):
            handle = self.create(3, 3, 2)
            if dead_id in handle.metadata.last_ensemble[1]:
                used_dead += 1
                self.add_all(handle, [b"a"])    # fails there: ensemble change away from it
                self.assertNotIn(dead_id, handle.metadata.last_ensemble[1])
            if dead_id in self.client.health.quarantined():
                break
        self.assertIn(dead_id, self.client.health.quarantined())
        self.assertEqual(used_dead, 2, "quarantined after the threshold's 2 failed writes")
        for _ in range(30):
            ledger = self.create(3, 3, 2)
            self.assertNotIn(dead_id, ledger.metadata.last_ensemble[1])
        self.clock.advance(301)
        self.assertNotIn(dead_id, self.client.health.quarantined())
        chosen = [dead_id in self.create(3, 3, 2).metadata.last_ensemble[1] for _ in range(30)]
        self.assertTrue(any(chosen), "a bookie back from quarantine is chosen again")

    def test_timeouts_count(self):
        """A bookie that does not answer within the add timeout counts as failed (Qa = 3, so the
        adds wait for it)."""
        handle = self.create(3, 3, 3)
        slow_id = handle.metadata.last_ensemble[1][2]
        self.bookies[slow_id].hang("add")
        for payload in (b"a", b"b"):
            handle.add_entry(payload)
        self.clock.advance(31)
        self.assertIn(slow_id, self.client.health.quarantined())
        self.assertNotIn(slow_id, handle.metadata.last_ensemble[1])

    def test_read_only_is_not_a_fault(self):
        """A bookie turning read-only is replaced but not quarantined."""
        handle = self.create(3, 3, 2)
        ro_id = handle.metadata.last_ensemble[1][1]
        self.bookies[ro_id].set_read_only(True)
        self.add_all(handle, [b"a", b"b", b"c"])
        self.assertNotIn(ro_id, self.client.health.quarantined())

    def test_failures_below_threshold_do_not_quarantine(self):
        handle = self.create(3, 3, 2)
        flaky = handle.metadata.last_ensemble[1][0]
        self.bookies[flaky].fail("add", BookieUnavailableError("blip"), times=1)
        self.add_all(handle, [b"a"])
        self.assertEqual(self.client.health.quarantined(), frozenset())


class ConfigTests(unittest.TestCase):

    def test_broker_keys_reach_the_client(self):
        """Pulsar's four keys, with its defaults, map onto the client's quarantine."""
        from pulsar_twisted.config import BrokerConfig
        from pulsar_twisted.ledger.client import BookKeeperClient, health_check_options
        from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
        config = BrokerConfig()
        self.assertEqual((config.bookkeeperClientHealthCheckEnabled,
                          config.bookkeeperClientHealthCheckIntervalSeconds,
                          config.bookkeeperClientHealthCheckErrorThresholdPerInterval,
                          config.bookkeeperClientHealthCheckQuarantineTimeInSeconds),
                         (True, 60, 5, 1800))
        clock = task.Clock()
        client = BookKeeperClient(EmbeddedMetadataStore(None, clock), None, clock,
                                  **health_check_options(config))
        health = client.health
        self.assertEqual((health.enabled, health.interval, health.error_threshold,
                          health.quarantine_time), (True, 60, 5, 1800))
