"""Tests of PositionRangeSet against a plain set model."""

from hypothesis import given, strategies as st
from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger.rangeset import PositionRangeSet


class RangeSetTests(unittest.TestCase):
    def test_adjacent_adds_merge(self):
        """In-order acks collapse into one range; a gap splits it."""
        rs = PositionRangeSet()
        for e in (1, 2, 3, 5):
            self.assertTrue(rs.add(Position(7, e)))
        self.assertFalse(rs.add(Position(7, 2)))
        self.assertEqual(rs.range_count, 2)
        rs.add(Position(7, 4))
        self.assertEqual(list(rs.ranges()), [(7, 1, 5)])
        self.assertEqual(rs.position_ranges(), [(Position(7, 0), Position(7, 5))])
        self.assertEqual(rs.cardinality, 5)

    def test_ranges_do_not_join_across_ledgers(self):
        """(L, x) and (L+1, 0) stay separate ranges: only the ledger list knows adjacency."""
        rs = PositionRangeSet()
        rs.add(Position(1, 9))
        rs.add(Position(2, 0))
        self.assertEqual(rs.range_count, 2)

    def test_remove_up_to(self):
        """remove_up_to drops earlier ledgers and cuts the range that straddles the position."""
        rs = PositionRangeSet()
        rs.add_range(1, 0, 10)
        rs.add_range(2, 3, 8)
        rs.add_range(3, 0, 0)
        rs.remove_up_to(Position(2, 5))
        self.assertEqual(list(rs.ranges()), [(2, 6, 8), (3, 0, 0)])
        self.assertEqual(rs.cardinality, 4)
        self.assertFalse(rs.contains(Position(1, 3)))

    def test_count_in(self):
        rs = PositionRangeSet()
        rs.add_range(1, 2, 4)
        rs.add_range(1, 8, 9)
        self.assertEqual(rs.count_in(1, 3, 8), 3)
        self.assertEqual(rs.count_in(2, 0, 100), 0)

    @given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 5)), max_size=40),
           st.tuples(st.integers(0, 3), st.integers(-1, 40)))
    def test_matches_set_model(self, adds, cut):
        """Any sequence of range adds and one cut agrees with a set of positions."""
        rs = PositionRangeSet()
        model = set()
        for lid, first, length in adds:
            new = {(lid, e) for e in range(first, first + length)}
            self.assertEqual(rs.add_range(lid, first, first + length - 1), len(new - model))
            model |= new
        self.assertEqual(rs.cardinality, len(model))
        for p in [(lid, e) for lid in range(4) for e in range(-1, 47)]:
            self.assertEqual(rs.contains(p), p in model)
        rs.remove_up_to(Position(*cut))
        model = {p for p in model if p > cut}
        self.assertEqual(rs.cardinality, len(model))
        flat = {(lid, e) for lid, s, t in rs.ranges() for e in range(s, t + 1)}
        self.assertEqual(flat, model)
        # ranges are disjoint and non-adjacent within a ledger
        rows = list(rs.ranges())
        for (l1, _, e1), (l2, s2, _) in zip(rows, rows[1:]):
            self.assertTrue(l1 < l2 or s2 > e1 + 1)
        self.assertEqual(rs.range_count, len(rows))
