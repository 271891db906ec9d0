"""
Sets of acknowledged Positions, stored as ranges per ledger.

A cursor acks entries one by one above its mark-delete position; acks mostly arrive in
order, so they collapse into few ranges. Each ledger keeps two parallel sorted lists (range
starts and range ends, entry ids inclusive) searched with ``bisect``: adding or testing one
position costs O(log ranges) and no object per position. Ranges never join across ledgers:
whether ``(L1, last)`` and ``(L2, 0)`` are adjacent is for the managed ledger to say (it
knows the ledger sizes), see ``ManagedCursorImpl._advance_mark_delete``.
"""

from bisect import bisect_left, bisect_right

from pulsar_twisted.common.position import Position


class _LedgerRanges:
    """Disjoint, non-adjacent inclusive ranges ``[starts[i], ends[i]]`` of one ledger."""

    __slots__ = ("starts", "ends")

    def __init__(self):
        self.starts = []
        self.ends = []


class PositionRangeSet:
    """
    A set of Positions. ``add``/``contains`` are O(log n); ``cardinality`` (the number of
    positions) and ``range_count`` are kept up to date.
    """

    __slots__ = ("_ledger_ids", "_by_ledger", "_cardinality", "_range_count")

    def __init__(self):
        self._ledger_ids = []
        self._by_ledger = {}
        self._cardinality = 0
        self._range_count = 0

    @property
    def cardinality(self) -> int:
        """Number of positions in the set."""
        return self._cardinality

    @property
    def range_count(self) -> int:
        """Number of disjoint ranges."""
        return self._range_count

    def __len__(self):
        return self._cardinality

    def __bool__(self):
        return self._cardinality > 0

    def _ledger(self, ledger_id: int) -> _LedgerRanges:
        lr = self._by_ledger.get(ledger_id)
        if lr is None:
            lr = self._by_ledger[ledger_id] = _LedgerRanges()
            ids = self._ledger_ids
            if not ids or ids[-1] < ledger_id:
                ids.append(ledger_id)
            else:
                ids.insert(bisect_left(ids, ledger_id), ledger_id)
        return lr

    def add(self, position) -> bool:
        """Add one position; True if it was not there yet."""
        return self.add_range(position[0], position[1], position[1]) > 0

    def add_range(self, ledger_id: int, first: int, last: int) -> int:
        """Add entries ``first..last`` (inclusive) of ``ledger_id``; returns how many were new."""
        if last < first:
            return 0
        lr = self._ledger(ledger_id)
        starts, ends = lr.starts, lr.ends
        # Ranges that overlap or touch [first, last]: from the first whose end >= first - 1
        # to the last whose start <= last + 1.
        lo = bisect_left(ends, first - 1)
        hi = bisect_right(starts, last + 1)
        if lo >= hi:
            starts.insert(lo, first)
            ends.insert(lo, last)
            self._range_count += 1
            added = last - first + 1
        else:
            covered = 0
            for i in range(lo, hi):
                covered += ends[i] - starts[i] + 1
            new_first = min(first, starts[lo])
            new_last = max(last, ends[hi - 1])
            added = (new_last - new_first + 1) - covered
            starts[lo:hi] = [new_first]
            ends[lo:hi] = [new_last]
            self._range_count -= hi - lo - 1
        self._cardinality += added
        return added

    def contains(self, position) -> bool:
        lr = self._by_ledger.get(position[0])
        if lr is None:
            return False
        i = bisect_right(lr.starts, position[1]) - 1
        return i >= 0 and lr.ends[i] >= position[1]

    __contains__ = contains

    def range_containing(self, position):
        """``(first, last)`` entry ids of the range holding ``position``, or None."""
        lr = self._by_ledger.get(position[0])
        if lr is None:
            return None
        i = bisect_right(lr.starts, position[1]) - 1
        if i >= 0 and lr.ends[i] >= position[1]:
            return lr.starts[i], lr.ends[i]
        return None

    def remove_up_to(self, position) -> None:
        """Drop every position ``<= position`` (the mark-delete position moved)."""
        ledger_id, entry_id = position
        ids = self._ledger_ids
        cut = bisect_left(ids, ledger_id)
        for lid in ids[:cut]:
            self._drop_ledger(lid)
        del ids[:cut]
        lr = self._by_ledger.get(ledger_id)
        if lr is None:
            return
        starts, ends = lr.starts, lr.ends
        n = bisect_right(ends, entry_id)
        for i in range(n):
            self._cardinality -= ends[i] - starts[i] + 1
        self._range_count -= n
        del starts[:n], ends[:n]
        if starts and starts[0] <= entry_id:
            self._cardinality -= entry_id - starts[0] + 1
            starts[0] = entry_id + 1
        if not starts:
            del self._by_ledger[ledger_id]
            ids.remove(ledger_id)

    def _drop_ledger(self, ledger_id):
        lr = self._by_ledger.pop(ledger_id)
        for s, e in zip(lr.starts, lr.ends):
            self._cardinality -= e - s + 1
        self._range_count -= len(lr.starts)

    def clear(self) -> None:
        self._ledger_ids = []
        self._by_ledger = {}
        self._cardinality = 0
        self._range_count = 0

    def ranges(self, limit=None):
        """Iterate ``(ledger_id, first, last)`` in position order, at most ``limit`` of them."""
        n = 0
        for lid in self._ledger_ids:
            lr = self._by_ledger[lid]
            for s, e in zip(lr.starts, lr.ends):
                if limit is not None and n >= limit:
                    return
                n += 1
                yield lid, s, e

    def position_ranges(self):
        """Pulsar's view: a list of ``(start_exclusive, end_inclusive)`` Position pairs."""
        return [(Position(lid, s - 1), Position(lid, e)) for lid, s, e in self.ranges()]

    def count_in(self, ledger_id: int, first: int, last: int) -> int:
        """How many of entries ``first..last`` of ``ledger_id`` are in the set."""
        lr = self._by_ledger.get(ledger_id)
        if lr is None or last < first:
            return 0
        total = 0
        i = max(bisect_right(lr.starts, first) - 1, 0)
        starts, ends = lr.starts, lr.ends
        while i < len(starts) and starts[i] <= last:
            lo, hi = max(starts[i], first), min(ends[i], last)
            if hi >= lo:
                total += hi - lo + 1
            i += 1
        return total

    def __repr__(self):
        return f"PositionRangeSet({self.position_ranges()!r})"
