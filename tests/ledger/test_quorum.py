"""Replication math: write sets, ack-quorum coverage, ensemble placement."""

import random

from hypothesis import given, strategies as st
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from pulsar_twisted.common.bk_errors import NotEnoughBookiesError
from pulsar_twisted.ledger.quorum import (
    DistributionSchedule, IEnsemblePlacementPolicy, RandomPlacementPolicy, check_quorums,
    write_set)

quorums = st.integers(1, 9).flatmap(
    lambda e: st.integers(1, e).flatmap(
        lambda w: st.tuples(st.just(e), st.just(w), st.integers(1, w))))


class WriteSetTests(unittest.TestCase):

    @given(quorums, st.integers(0, 10 ** 12))
    def test_write_set_has_qw_distinct_bookies(self, q, entry_id):
        """Every entry's write set is Qw distinct ensemble indices, starting at e % E."""
        e, w, a = q
        ws = DistributionSchedule(e, w, a).write_set(entry_id)
        self.assertEqual(len(ws), w)
        self.assertEqual(len(set(ws)), w)
        self.assertTrue(all(0 <= i < e for i in ws))
        self.assertEqual(ws[0], entry_id % e)
        self.assertEqual(ws, write_set(entry_id, e, w))

    @given(quorums)
    def test_striping_covers_every_bookie_evenly(self, q):
        """Over E consecutive entries each bookie stores exactly Qw of them."""
        e, w, a = q
        schedule = DistributionSchedule(e, w, a)
        counts = [0] * e
        for entry_id in range(100, 100 + e):
            for i in schedule.write_set(entry_id):
                counts[i] += 1
        self.assertEqual(counts, [w] * e)

    def test_bad_quorums_rejected(self):
        """E >= Qw >= Qa >= 1 is required."""
        for bad in [(2, 3, 1), (3, 2, 3), (3, 2, 0), (0, 0, 0)]:
            self.assertRaises(ValueError, check_quorums, *bad)
        check_quorums(3, 2, 2)

    def test_coverage(self):
        """Answers cover the ack quorums iff no write set has Qa silent bookies."""
        s = DistributionSchedule(3, 2, 2)   # any single answer-less bookie leaves no full quorum
        self.assertTrue(s.covers_ack_quorums([0, 1]))
        self.assertTrue(s.covers_ack_quorums([1, 2]))
        self.assertFalse(s.covers_ack_quorums([1]))
        s = DistributionSchedule(3, 3, 2)   # need 2 of 3
        self.assertTrue(s.covers_ack_quorums([0, 2]))
        self.assertFalse(s.covers_ack_quorums([0]))
        s = DistributionSchedule(1, 1, 1)
        self.assertTrue(s.covers_ack_quorums([0]))
        self.assertFalse(s.covers_ack_quorums([]))
        self.assertEqual(DistributionSchedule(5, 3, 2).max_missing_allowed, 1)

    @given(quorums, st.data())
    def test_coverage_means_every_quorum_intersected(self, q, data):
        """covers_ack_quorums agrees with brute force over all ack quorums of all write sets."""
        import itertools
        e, w, a = q
        responded = set(data.draw(st.lists(st.integers(0, e - 1), unique=True)))
        s = DistributionSchedule(e, w, a)
        brute = all(set(quorum) & responded
                    for first in range(e)
                    for quorum in itertools.combinations(s.write_set(first), a))
        self.assertEqual(s.covers_ack_quorums(responded), brute)


class PlacementTests(unittest.TestCase):

    def setUp(self):
        self.policy = RandomPlacementPolicy(random.Random(7))

    def test_interface(self):
        verifyObject(IEnsemblePlacementPolicy, self.policy)

    def test_new_ensemble_distinct(self):
        """An ensemble is E distinct writable bookies, none excluded."""
        ensemble = self.policy.new_ensemble(3, {"a", "b", "c", "d", "e"}, exclude={"a"})
        self.assertEqual(len(set(ensemble)), 3)
        self.assertNotIn("a", ensemble)

    def test_not_enough_bookies(self):
        self.assertRaises(NotEnoughBookiesError, self.policy.new_ensemble, 3, {"a", "b"})

    def test_replace_bookie(self):
        """A replacement is neither in the ensemble nor excluded."""
        self.assertEqual(self.policy.replace_bookie(["a", "b"], 1, {"a", "b", "c"}), "c")
        self.assertRaises(NotEnoughBookiesError, self.policy.replace_bookie,
                          ["a", "b"], 1, {"a", "b", "c"}, exclude={"c"})
