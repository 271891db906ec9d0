"""
The entry cache of one managed ledger (Pulsar's ``EntryCacheImpl``, simplified).

Adds insert in position order, so a plain insertion-ordered dict is also position-ordered:
evicting "everything before the slowest reader" or "the oldest when full" pops from the
front, O(evicted). Tailing reads (the common case: dispatchers just behind the writer) find
every entry here and never reach the bookies.
"""

from pulsar_twisted.common.position import Position


class EntryCache:
    """
    Position -> bytes, bounded by ``max_size_bytes`` (0 disables caching).

    Contract: ``insert`` must be called in increasing position order (the managed ledger's
    add completions are); entries inserted out of order are ignored rather than breaking
    the front-eviction invariant.
    """

    def __init__(self, max_size_bytes: int):
        self.max_size_bytes = max_size_bytes
        self._entries = {}
        self._last = None
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._entries)

    def insert(self, position: Position, data: bytes) -> None:
        if self.max_size_bytes <= 0 or len(data) > self.max_size_bytes:
            return
        if self._last is not None and position <= self._last:
            return
        self._last = position
        self._entries[position] = data
        self.size += len(data)
        if self.size > self.max_size_bytes:
            self._evict_oldest(self.size - self.max_size_bytes)

    def get(self, position: Position):
        """The bytes at ``position`` or None (counted as hit/miss)."""
        data = self._entries.get(position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def _evict_oldest(self, nbytes: int) -> None:
        entries = self._entries
        freed = 0
        while entries and freed < nbytes:
            key = next(iter(entries))
            freed += len(entries.pop(key))
        self.size -= freed

    def evict_before(self, position: Position) -> None:
        """Drop entries strictly before ``position`` (no reader needs them any more)."""
        entries = self._entries
        freed = 0
        while entries:
            key = next(iter(entries))
            if key >= position:
                break
            freed += len(entries.pop(key))
        self.size -= freed

    def invalidate_ledger(self, ledger_id: int) -> None:
        """Drop the entries of one (deleted) ledger."""
        doomed = [p for p in self._entries if p[0] == ledger_id]
        for p in doomed:
            self.size -= len(self._entries.pop(p))

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0
