"""
Key_Shared selectors: which consumer of a Key_Shared subscription receives a given key.

A key (``entryinfo.sticky_key``: the ordering key, else the partition key, else Pulsar's
``NONE_KEY``) is hashed as Pulsar 4's ``StickyKeyConsumerSelectorUtils.makeStickyKeyHash`` does:
Murmur3-32 (seed 0) of the key bytes, masked to 31 bits as Pulsar's ``Murmur3_32Hash.makeHash``,
modulo the 65536 slots; a result of 0 becomes 1 (Pulsar keeps 0 as "no hash"). The same hash
with the same consumers must pick the same consumer as Pulsar's broker, so that a client which
reasons about ranges (STICKY consumers, or a user reading ``consumerKeyHashRanges``) is right:

- AUTO_SPLIT with ``subscriptionKeySharedUseConsistentHashing=true`` (Pulsar's default):
  ``ConsistentHashSelector``, Pulsar's ring of ``subscriptionKeySharedConsistentHashingReplicaPoints``
  points per consumer, each point the slot hash of ``name NUL name-index NUL point-index``;
- AUTO_SPLIT with ``subscriptionKeySharedUseConsistentHashing=false``: ``RangeSplitSelector``,
  Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector (each newcomer takes half of the largest
  range);
- STICKY: ``StickySelector``, each consumer's declared ranges, which must not overlap.
"""

import bisect

import mmh3

from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api

RANGE_SIZE = 65536


def murmur3_31(data: bytes) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: Murmur3-32, seed 0, with the sign bit cleared."""
    return mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF


def key_hash(key: bytes) -> int:
    """The slot (1..65535) of ``key``, as Pulsar 4's ``makeStickyKeyHash`` over 65536 slots."""
    slot = murmur3_31(key) % RANGE_SIZE
    return slot if slot else 1


class ConsistentHashSelector:
    """
    AUTO_SPLIT on a consistent-hash ring (Pulsar's ConsistentHashingStickyKeyConsumerSelector):
    ``points`` slots per consumer; a key goes to the consumer of the first point at or after its
    slot, wrapping to the first point. Consumers sharing a name get distinct name indexes (the
    lowest free one) so their points differ; a point that collides with another consumer's is
    taken over by the newcomer, as in Pulsar.
    """

    def __init__(self, points: int):
        self.points = max(1, points)
        self._owner = {}        # slot -> consumer
        self._slots = []        # sorted slots of _owner
        self._index = {}        # consumer -> name index
        self._used = {}         # name -> set of name indexes in use

    def _point(self, name: str, name_index: int, i: int) -> int:
        return key_hash(f"{name}\0{name_index}\0{i}".encode())

    def add(self, consumer) -> None:
        used = self._used.setdefault(consumer.name, set())
        name_index = 0
        while name_index in used:
            name_index += 1
        used.add(name_index)
        self._index[consumer] = name_index
        for i in range(self.points):
            slot = self._point(consumer.name, name_index, i)
            if slot not in self._owner:
                bisect.insort(self._slots, slot)
            self._owner[slot] = consumer

    def remove(self, consumer) -> None:
        name_index = self._index.pop(consumer, None)
        if name_index is None:
            return
        used = self._used.get(consumer.name)
        used.discard(name_index)
        if not used:
            del self._used[consumer.name]
        for i in range(self.points):
            slot = self._point(consumer.name, name_index, i)
            if self._owner.get(slot) is consumer:
                del self._owner[slot]
                del self._slots[bisect.bisect_left(self._slots, slot)]

    def select(self, hash_value: int):
        slots = self._slots
        if not slots:
            return None
        index = bisect.bisect_left(slots, hash_value)
        return self._owner[slots[index if index < len(slots) else 0]]


class RangeSplitSelector:
    """
    AUTO_SPLIT by splitting ranges (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector). Each
    consumer owns the slots from just above the next lower boundary up to its own boundary. The
    first consumer's boundary is 65536 (all slots); each newcomer takes the lower half of the
    largest range (the lowest one among equals). A leaving consumer's slots go to the consumer of
    the next boundary up; the consumer at the top boundary is replaced by the one just below it.
    """

    def __init__(self, range_size: int = RANGE_SIZE):
        self.range_size = range_size
        self._bounds = []       # sorted upper bounds (inclusive)
        self._owner = {}        # bound -> consumer
        self._bound_of = {}     # consumer -> bound

    def _put(self, bound: int, consumer) -> None:
        if bound not in self._owner:
            bisect.insort(self._bounds, bound)
        self._owner[bound] = consumer
        self._bound_of[consumer] = bound

    def add(self, consumer) -> None:
        if not self._bounds:
            self._put(self.range_size, consumer)
            return
        largest, size = self.range_size, 0
        previous = 0
        for bound in self._bounds:
            if bound - previous > size:
                largest, size = bound, bound - previous
            previous = bound
        if size <= 1:
            raise errors.ConsumerAssignError(
                f"No more range can assigned to new consumer, assigned consumers {len(self._bounds)}")
        self._put(largest - (size >> 1), consumer)

    def remove(self, consumer) -> None:
        bound = self._bound_of.pop(consumer, None)
        if bound is None:
            return
        index = bisect.bisect_left(self._bounds, bound)
        if bound == self.range_size and len(self._bounds) > 1:
            below = self._bounds[index - 1]
            heir = self._owner.pop(below)
            del self._bounds[index - 1]
            self._owner[bound] = heir
            self._bound_of[heir] = bound
        else:
            del self._bounds[index]
            del self._owner[bound]

    def select(self, hash_value: int):
        if not self._bounds:
            return None
        index = bisect.bisect_left(self._bounds, hash_value % self.range_size)
        return self._owner[self._bounds[index]]


class StickySelector:
    """STICKY: consumers bring fixed ranges [start, end] (inclusive) of the hash space."""

    def __init__(self):
        self._ranges = []        # sorted (start, end, consumer)

    def add(self, consumer) -> None:
        ranges = list(consumer.key_shared_meta.hash_ranges)
        if not ranges:
            raise errors.ConsumerAssignError("Ranges for KeyShared policy must not be empty")
        for start, end in ranges:
            if start < 0 or end >= RANGE_SIZE or start > end:
                raise errors.ConsumerAssignError(f"Invalid range [{start}, {end}]")
            for other_start, other_end, _ in self._ranges:
                if start <= other_end and other_start <= end:
                    raise errors.ConsumerAssignError(
                        f"Range conflict with consumer: [{start}, {end}] overlaps "
                        f"[{other_start}, {other_end}]")
        for start, end in ranges:
            bisect.insort(self._ranges, (start, end, consumer), key=lambda item: item[:2])

    def remove(self, consumer) -> None:
        self._ranges = [item for item in self._ranges if item[2] is not consumer]

    def select(self, hash_value: int):
        index = bisect.bisect_right(self._ranges, hash_value, key=lambda item: item[0]) - 1
        if index >= 0:
            start, end, consumer = self._ranges[index]
            if start <= hash_value <= end:
                return consumer
        return None


def selector_for(mode: int, config):
    """The key -> consumer selector of a Key_Shared subscription in ``mode`` (STICKY or AUTO_SPLIT)."""
    if mode == api.STICKY:
        return StickySelector()
    if not config.subscriptionKeySharedUseConsistentHashing:
        return RangeSplitSelector()
    return ConsistentHashSelector(config.subscriptionKeySharedConsistentHashingReplicaPoints)
