"""
Key_Shared subscriptions: every key goes to exactly one consumer, and each key's messages are
delivered in order, also while consumers come and go.

Keys (the ordering key, else the partition key) hash with Murmur3-32 into 0..65535, as Pulsar's
selectors do. AUTO_SPLIT assigns hashes with a consistent-hash ring of consumer names; STICKY
consumers declare their own ranges, which must not overlap (ConsumerAssignError otherwise).

Ordering rules, as Pulsar's:
- an entry whose consumer cannot take it now waits in the replay set, and every later entry for
  that consumer waits behind it, so one key never overtakes itself;
- a consumer joining a subscription whose other consumers still hold unacked messages is
  "recently joined": it receives only entries up to the last one read from the cursor when it
  joined, until every message up to that one is acknowledged (so keys moving to it do not
  overtake messages still held by their previous consumer). A consumer joining when nothing is
  outstanding is not held back, and a consumer left alone never is.
  ``allowOutOfOrderDelivery`` lifts this.
"""

import bisect

import mmh3

from pulsar_twisted.broker.dispatch.shared import SharedDispatcher
from pulsar_twisted.broker.entryinfo import sticky_key
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api

RANGE_SIZE = 65536


def key_hash(key: bytes) -> int:
    """Pulsar's Key_Shared hash of a key: Murmur3-32 (seed 0), unsigned, modulo 65536."""
    return mmh3.hash(key, 0, signed=False) % RANGE_SIZE


class ConsistentHashSelector:
    """AUTO_SPLIT: a ring with ``points`` entries per consumer."""

    def __init__(self, points: int):
        self.points = max(1, points)
        self._ring = []          # sorted (hash, consumer_id, consumer)

    def add(self, consumer) -> None:
        for i in range(self.points):
            point = mmh3.hash(f"{consumer.name}{i}".encode(), 0, signed=False)
            bisect.insort(self._ring, (point, consumer.consumer_id, id(consumer.cnx), consumer),
                          key=lambda item: item[:3])

    def remove(self, consumer) -> None:
        self._ring = [item for item in self._ring if item[3] is not consumer]

    def select(self, hash_value: int):
        if not self._ring:
            return None
        # Spread the 16-bit key hash over the 32-bit ring.
        point = (hash_value * 2654435761) & 0xFFFFFFFF
        index = bisect.bisect_left(self._ring, point, key=lambda item: item[0])
        if index == len(self._ring):
            index = 0
        return self._ring[index][3]


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
    return ConsistentHashSelector(config.subscriptionKeySharedConsistentHashingReplicaPoints)


class KeySharedDispatcher(SharedDispatcher):
    def __init__(self, subscription, cursor, clock, config, meta=None):
        super().__init__(subscription, cursor, clock, config)
        self.mode = meta.mode if meta is not None else api.AUTO_SPLIT
        self.allow_out_of_order = bool(meta is not None and meta.allow_out_of_order)
        self.selector = selector_for(self.mode, config)
        #: consumer -> last position read from the cursor when it joined (module docstring).
        self.recently_joined = {}
        #: The newest entry read from the cursor and dispatched (not counting replays), or None.
        #: "Everything up to it is acked" is ``mark_delete >= last_sent``: unlike
        #: ``mark_delete.next() >= read_position`` this holds across a ledger boundary.
        self.last_sent = None

    def add_consumer(self, consumer) -> None:
        if self.mode == api.STICKY:
            if consumer.key_shared_meta is None or consumer.key_shared_meta.mode != api.STICKY:
                raise errors.ConsumerAssignError("Subscription is in STICKY mode")
        elif consumer.key_shared_meta is not None and consumer.key_shared_meta.mode != self.mode:
            raise errors.ConsumerAssignError("Subscription is in AUTO_SPLIT mode")
        self.selector.add(consumer)
        # Only messages still unacked can be overtaken: with none outstanding (Pulsar: "if all
        # the messages are already acked"), a newcomer is not held back at all, else it would
        # wait for an ack that may never come.
        last_sent = self.last_sent
        if (self.consumers and not self.allow_out_of_order and last_sent is not None
                and self.cursor.mark_delete_position < last_sent):
            self.recently_joined[consumer] = last_sent
        super().add_consumer(consumer)

    def remove_consumer(self, consumer) -> None:
        self.selector.remove(consumer)
        self.recently_joined.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for position in consumer.take_pending():
            counts = self.subscription.redelivery_counts
            counts[position] = counts.get(position, 0) + 1
            self.replay[position] = None
        if len(self.consumers) <= 1:
            # A lone consumer cannot overtake anybody (Pulsar clears the set here too).
            self.recently_joined.clear()
        self._release_recently_joined()
        self.wake()

    def acked(self, consumer, positions) -> None:
        super().acked(consumer, positions)
        self._release_recently_joined()

    def acked_cumulative(self, consumer, position) -> None:
        self._release_recently_joined()

    def _release_recently_joined(self) -> None:
        if not self.recently_joined:
            return
        mark_delete = self.cursor.mark_delete_position
        for consumer, last_sent in list(self.recently_joined.items()):
            if mark_delete >= last_sent:
                del self.recently_joined[consumer]
        self.wake()

    def reset(self) -> None:
        super().reset()
        self.recently_joined.clear()
        self.last_sent = None

    def dispatch(self, entries) -> None:
        # Consumers with messages already waiting must not receive newer ones first.
        stuck = set()
        for position, hash_value in self.replay.items():
            if hash_value is not None:
                owner = self.selector.select(hash_value)
                if owner is not None:
                    stuck.add(owner)
        replaying = self._replaying
        if entries and not replaying:
            # Read from the cursor: even those that wait in the replay set count as sent, since
            # consumers joining now must not overtake them either.
            newest = entries[-1].position
            if self.last_sent is None or newest > self.last_sent:
                self.last_sent = newest
        sent = 0
        for entry in entries:
            metadata = self.metadata_or_skip(entry)
            if metadata is None:
                sent += 1       # skipped and acknowledged: progress, as a send is
                continue
            if self.hold_delayed(entry, metadata):
                continue
            hash_value = key_hash(sticky_key(metadata))
            consumer = self.selector.select(hash_value)
            if (consumer is None or not consumer.available()
                    or (consumer in stuck and not replaying)
                    or self._held_back(consumer, entry.position)):
                self.replay[entry.position] = hash_value
                if consumer is not None:
                    stuck.add(consumer)
                continue
            self.send_entry(consumer, entry, metadata)
            sent += 1
        self.round_done(sent)

    def _held_back(self, consumer, position) -> bool:
        last_sent = self.recently_joined.get(consumer)
        return last_sent is not None and position > last_sent
