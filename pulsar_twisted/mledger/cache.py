"""
The entry cache of one managed ledger (Pulsar's ``EntryCacheImpl``, simplified).

Adds insert in position order, so insertion-ordered dicts are also position-ordered:
evicting "everything before the slowest reader" or "the oldest when full" pops from the
front, O(evicted). Tailing reads (the common case: dispatchers just behind the writer) find
every entry here and never reach the bookies.

Layout: ``{ledger_id: {entry_id: bytes}}``. Only ints and bytes go in, so CPython never tracks
the inner dicts for garbage collection: a cache of a hundred thousand entries costs the cyclic
collector nothing, where Position-keyed dicts made every full collection walk every entry
(measured: 40-60% of broker time in unbatched publishing went to the collector).
"""

from types import MappingProxyType

from pulsar_twisted.common.position import Position

#: What an empty cache holds until its first entry (issue 14: most topics' caches stay empty, as
#: only entries with a reader are cached; an empty dict per topic is 64 bytes).
_NO_ENTRIES = MappingProxyType({})


class CacheBudget:
    """
    The bytes all the entry caches of one factory may hold together (Pulsar's
    ``managedLedgerCacheSizeMB`` is broker-wide, not per topic). A cache inserting past the
    budget evicts its own oldest entries first; if it holds nothing more to evict, it does not
    cache the new entry — so the total stays bounded whatever the number of topics.
    """

    __slots__ = ("max_size_bytes", "size")

    def __init__(self, max_size_bytes: int):
        self.max_size_bytes = max_size_bytes
        self.size = 0


class EntryCache:
    """
    Position -> bytes, bounded by ``max_size_bytes`` (0 disables caching) and, when given, by a
    ``CacheBudget`` shared with the other managed ledgers of the factory.

    Contract: ``insert`` must be called in increasing position order (the managed ledger's
    add completions are); entries inserted out of order are ignored rather than breaking
    the front-eviction invariant.
    """

    __slots__ = ("max_size_bytes", "budget", "_ledgers", "_count", "_last_ledger", "_last_entry",
                 "_size", "hits", "misses")

    def __init__(self, max_size_bytes: int, budget: CacheBudget = None):
        self.max_size_bytes = max_size_bytes
        self.budget = budget
        self._ledgers = _NO_ENTRIES
        self._count = 0
        self._last_ledger = -1
        self._last_entry = -1
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return self._count

    @property
    def size(self) -> int:
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        if self.budget is not None:
            self.budget.size += value - self._size
        self._size = value

    def insert(self, position: Position, data: bytes) -> None:
        if self.max_size_bytes <= 0 or len(data) > self.max_size_bytes:
            return
        budget = self.budget
        if budget is not None and budget.size + len(data) > budget.max_size_bytes:
            self._evict_oldest(budget.size + len(data) - budget.max_size_bytes)
            if budget.size + len(data) > budget.max_size_bytes:
                return  # the others hold the budget; they evict as they insert
        ledger_id, entry_id = position
        if ledger_id < self._last_ledger or (ledger_id == self._last_ledger and entry_id <= self._last_entry):
            return
        self._last_ledger = ledger_id
        self._last_entry = entry_id
        ledgers = self._ledgers
        if ledgers is _NO_ENTRIES:
            ledgers = self._ledgers = {}
        entries = ledgers.get(ledger_id)
        if entries is None:
            entries = ledgers[ledger_id] = {}
        entries[entry_id] = data
        self._count += 1
        self.size += len(data)
        if self.size > self.max_size_bytes:
            self._evict_oldest(self.size - self.max_size_bytes)

    def get(self, position: Position):
        """The bytes at ``position`` or None (counted as hit/miss)."""
        entries = self._ledgers.get(position[0])
        data = entries.get(position[1]) if entries is not None else None
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def _evict_oldest(self, nbytes: int) -> None:
        ledgers = self._ledgers
        freed = 0
        while ledgers and freed < nbytes:
            ledger_id = next(iter(ledgers))
            entries = ledgers[ledger_id]
            while entries and freed < nbytes:
                freed += len(entries.pop(next(iter(entries))))
                self._count -= 1
            if not entries:
                del ledgers[ledger_id]
        self.size -= freed

    def evict_before(self, position: Position) -> None:
        """Drop entries strictly before ``position`` (no reader needs them any more)."""
        ledgers = self._ledgers
        limit_ledger, limit_entry = position
        freed = 0
        while ledgers:
            ledger_id = next(iter(ledgers))
            if ledger_id > limit_ledger:
                break
            entries = ledgers[ledger_id]
            if ledger_id < limit_ledger:
                freed += sum(map(len, entries.values()))
                self._count -= len(entries)
                del ledgers[ledger_id]
                continue
            while entries:
                entry_id = next(iter(entries))
                if entry_id >= limit_entry:
                    break
                freed += len(entries.pop(entry_id))
                self._count -= 1
            if not entries:
                del ledgers[ledger_id]
            break
        self.size -= freed

    def invalidate_ledger(self, ledger_id: int) -> None:
        """Drop the entries of one (deleted) ledger."""
        entries = self._ledgers.get(ledger_id)
        if entries is not None:
            del self._ledgers[ledger_id]
        if entries:
            self.size -= sum(map(len, entries.values()))
            self._count -= len(entries)

    def clear(self) -> None:
        self._ledgers = _NO_ENTRIES
        self._count = 0
        self.size = 0


class _NoEntryCache:
    """
    The cache of a managed ledger that has cached nothing yet: empty, read-only and shared by all
    of them (issue 14: an EntryCache is 104 bytes per loaded topic, and only entries with a reader
    are ever cached, so a producers-only topic never needs one). The managed ledger replaces it
    with its own ``EntryCache`` before the first insertion; until then reads miss, and evictions,
    invalidations and clears have nothing to do.
    """

    __slots__ = ()

    _ledgers = _NO_ENTRIES
    max_size_bytes = 0
    budget = None
    size = 0
    hits = 0
    misses = 0

    def __len__(self):
        return 0

    def get(self, position: Position):
        return None

    def evict_before(self, position: Position) -> None:
        pass

    def invalidate_ledger(self, ledger_id: int) -> None:
        pass

    def clear(self) -> None:
        pass


#: See ``_NoEntryCache``.
NO_ENTRY_CACHE = _NoEntryCache()
