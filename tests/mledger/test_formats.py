"""Tests of the stored formats and the cache."""

import json
from hypothesis import given, strategies as st
from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.cache import EntryCache
from pulsar_twisted.mledger.ledger import LedgerInfo
from pulsar_twisted.mledger.rangeset import PositionRangeSet


class FormatTests(unittest.TestCase):
    def test_names_map_to_one_segment(self):
        """'/' in names cannot collide with cursor children; the mapping reverses."""
        name = "public/default/persistent/t%x"
        path = formats.ledger_path(name)
        self.assertEqual(path.count("/"), 2)
        self.assertEqual(formats.name_from_segment(path.rsplit("/", 1)[1]), name)
        self.assertEqual(formats.cursor_path(name, "a/b").count("/"), 3)

    def test_segment_is_quote(self):
        """Names map to the segment ``quote(name, safe="")`` makes, by the fast path or not."""
        from urllib.parse import quote
        for name in ("public/default/persistent/t-1_a.b~", "", "a b", "t%x", "caf\u00e9/x", "a+b:c",
                     "/", "x\n", "-._~"):
            self.assertEqual(formats._segment(name), quote(name, safe=""), name)

    @given(st.text())
    def test_segment_is_quote_for_any_name(self, name):
        """The same for any text."""
        from urllib.parse import quote
        self.assertEqual(formats._segment(name), quote(name, safe=""))

    def test_ledger_info_by_hand_is_json(self):
        """The hand-made ledger node is byte for byte the json.dumps one; properties, termination
        and non-int fields go through json.dumps."""
        for infos in ([], [LedgerInfo(3, 0, 0, 0)], [LedgerInfo(1, 10, 100, 5), LedgerInfo(2**40, 1, 2, 3)]):
            self.assertEqual(formats.encode_ledger_info(infos, {}),
                             formats._json_ledger_info(infos, {}, None))
        odd = [LedgerInfo(3, 1, 2, 1.5)]
        self.assertEqual(formats.encode_ledger_info(odd, {}), formats._json_ledger_info(odd, {}, None))
        self.assertEqual(formats.decode_ledger_info(formats.encode_ledger_info([LedgerInfo(3, 1, 2, 4)], {})),
                         ([(3, 1, 2, 4, None)], {}, None))

    def test_ledger_info_from_a_generator(self):
        """The ledgers may come as a generator (``ManagedLedger._encode_info``): a field that sends
        them through json.dumps must not find it used up (a node with no ledgers: the topic's data
        forgotten)."""
        for infos in ([LedgerInfo(3, 1, 2, 1.5), LedgerInfo(4, 1, 2, 3)], [LedgerInfo(3, True, 2, 4)],
                      [LedgerInfo(1, 10, 100, 5), LedgerInfo(2, 1, 2, 3)]):
            for props, term in (({}, None), ({"k": "v"}, None), ({}, Position(2, 0))):
                self.assertEqual(formats.encode_ledger_info((li for li in infos), props, term),
                                 formats._json_ledger_info(infos, props, term))

    def test_ledger_info_round_trip(self):
        data = formats.encode_ledger_info([LedgerInfo(3, 10, 100, 5)], {"k": "v"}, Position(3, 9))
        self.assertEqual(formats.decode_ledger_info(data), ([(3, 10, 100, 5, None)], {"k": "v"}, Position(3, 9)))

    def test_offloaded_ledger_round_trip(self):
        """A ledger with an offload context is written as version 2 with a fifth element, read back
        equal; a node without one stays version 1, byte for byte as before tiered storage."""
        ctx = formats.OffloadContext("u-1", complete=True, bk_deleted=False, timestamp=77,
                                     driver="aws-s3", metadata={"bucket": "b", "region": "r"})
        infos = [LedgerInfo(3, 10, 100, 5, ctx), LedgerInfo(4, 1, 2, 6)]
        data = formats.encode_ledger_info(infos, {})
        self.assertEqual(json.loads(data)["v"], 2)
        self.assertEqual(formats.decode_ledger_info(data),
                         ([(3, 10, 100, 5, ctx), (4, 1, 2, 6, None)], {}, None))
        self.assertEqual(json.loads(formats.encode_ledger_info([LedgerInfo(4, 1, 2, 6)], {}))["v"], 1)

    def test_bad_offload_context_is_refused(self):
        for bad in ("x", {"uid": ""}, {"uid": "u", "complete": "yes", "bkDeleted": False},
                    {"uid": "u", "complete": True, "bkDeleted": False, "meta": []}):
            data = json.dumps({"v": 2, "ledgers": [[3, 1, 2, 4, bad]], "props": {},
                               "terminated": None}).encode()
            self.assertRaises(formats.FormatError, formats.decode_ledger_info, data)

    def test_cursor_snapshot_round_trip_and_truncation(self):
        """Only max_ranges ranges are kept, the lowest ones."""
        rs = PositionRangeSet()
        for e in range(0, 20, 2):
            rs.add(Position(5, e))
        rs.add(Position(6, 1))
        md, ranges, props = formats.decode_cursor_snapshot(
            formats.encode_cursor_snapshot(Position(4, 7), rs, {"p": 1}, 3))
        self.assertEqual((md, ranges, props), (Position(4, 7), [(5, 0, 0), (5, 2, 2), (5, 4, 4)], {"p": 1}))
        full = formats.decode_cursor_snapshot(formats.encode_cursor_snapshot(Position(4, 7), rs, {}, 1000))
        self.assertEqual(len(full[1]), 11)

    def test_cursor_node_round_trip(self):
        data = formats.encode_cursor_node(12, Position(1, 2), {"a": "b"})
        self.assertEqual(formats.decode_cursor_node(data), (12, Position(1, 2), {"a": "b"}, []))

    def test_junk_rejected(self):
        """Junk, truncated and future-version data raise FormatError."""
        good = formats.encode_ledger_info([], {})
        for bad in (b"", b"\xff\x00", good[:-3], b'{"v": 99, "ledgers": []}', b'{"ledgers": []}',
                    b'{"v": 1, "ledgers": [[1, 2]]}'):
            self.assertRaises(formats.FormatError, formats.decode_ledger_info, bad)
        self.assertRaises(formats.FormatError, formats.decode_cursor_snapshot, b'{"v":1,"md":[1]}')


class CacheTests(unittest.TestCase):
    def test_bounded_and_evicts_oldest(self):
        cache = EntryCache(10)
        for e in range(5):
            cache.insert(Position(1, e), b"abc")
        self.assertLessEqual(cache.size, 10)
        self.assertIsNone(cache.get(Position(1, 0)))
        self.assertEqual(cache.get(Position(1, 4)), b"abc")

    def test_evict_before_and_invalidate(self):
        cache = EntryCache(1000)
        for e in range(5):
            cache.insert(Position(1, e), b"x")
        cache.insert(Position(2, 0), b"y")
        cache.evict_before(Position(1, 3))
        self.assertEqual(len(cache), 3)
        cache.invalidate_ledger(1)
        self.assertEqual(len(cache), 1)
        self.assertEqual(cache.size, 1)

    def test_empty_cache_shares_its_empty_mapping(self):
        """An unused cache holds no dict of its own (issue 14); every operation works on it, and
        clear() gives the dict back."""
        cache, other = EntryCache(1000), EntryCache(1000)
        self.assertIs(cache._ledgers, other._ledgers)
        self.assertIsNone(cache.get(Position(1, 0)))
        cache.evict_before(Position(5, 0))
        cache.invalidate_ledger(1)
        cache.clear()
        self.assertEqual((len(cache), cache.size, cache.misses), (0, 0, 1))
        cache.insert(Position(1, 0), b"abc")
        self.assertEqual(cache.get(Position(1, 0)), b"abc")
        self.assertIsNot(cache._ledgers, other._ledgers)
        cache.clear()
        self.assertIs(cache._ledgers, other._ledgers)
        self.assertEqual((len(cache), cache.size), (0, 0))


class CacheBudgetTests(unittest.SynchronousTestCase):
    def test_caches_share_one_budget(self):
        """managedLedgerCacheSizeMB bounds all the managed ledgers' caches together."""
        from pulsar_twisted.common.position import Position
        from pulsar_twisted.mledger.cache import CacheBudget, EntryCache

        budget = CacheBudget(1000)
        a, b = EntryCache(1000, budget), EntryCache(1000, budget)
        for i in range(6):
            a.insert(Position(1, i), b"x" * 100)
        self.assertEqual(budget.size, 600)
        for i in range(6):
            b.insert(Position(2, i), b"y" * 100)
        # b evicted nothing of its own at first, then could not cache past the budget.
        self.assertLessEqual(budget.size, 1000)
        self.assertEqual(budget.size, a.size + b.size)
        for i in range(6, 12):
            a.insert(Position(1, i), b"x" * 100)
        self.assertLessEqual(budget.size, 1000)
        self.assertIsNotNone(a.get(Position(1, 11)))
        a.clear()
        self.assertEqual(budget.size, b.size)
