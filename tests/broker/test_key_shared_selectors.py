"""
Key_Shared hashing and selectors as Pulsar's: the sticky key of a message (NONE_KEY, base64
partition keys, ordering key first), Pulsar 4's slot hash, and which consumer each selector
(consistent-hash ring, range splitting, STICKY ranges) gives a slot. Expected values are worked
out from Pulsar's algorithm over the Murmur3 reference value ("hello" -> 0x248bfa47).
"""

import base64

from twisted.trial import unittest

from pulsar_twisted.broker.dispatch.selectors import (
    RANGE_SIZE, ConsistentHashSelector, RangeSplitSelector, StickySelector, key_hash, murmur3_31,
    selector_for)
from pulsar_twisted.broker.entryinfo import NONE_KEY, sticky_key
from pulsar_twisted.broker.requests import KeySharedMeta
from pulsar_twisted.common import errors
from pulsar_twisted.config import BrokerConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import FeatureCase, payloads

Sub = api.CommandSubscribe
T = api.BaseCommand


class _Consumer:
    def __init__(self, name, ranges=()):
        self.name = name
        self.key_shared_meta = KeySharedMeta(mode=api.STICKY, hash_ranges=tuple(ranges))

    def __repr__(self):
        return f"<{self.name}>"


class HashTests(unittest.TestCase):
    def test_murmur3_reference_value(self):
        """The hash is Murmur3-32 seed 0 (reference value of "hello"), sign bit cleared."""
        self.assertEqual(murmur3_31(b"hello"), 0x248BFA47)
        # b"key-0" hashes to 0xE337F8BF: Pulsar's makeHash masks it to 31 bits.
        self.assertEqual(murmur3_31(b"key-0"), 0x6337F8BF)

    def test_slot_is_hash_modulo_65536(self):
        """A key's slot is its 31-bit hash modulo 65536 (0x248BFA47 -> 0xFA47)."""
        self.assertEqual(key_hash(b"hello"), 0xFA47)
        self.assertEqual(key_hash(b"key-0"), 0xF8BF)
        self.assertEqual(key_hash(NONE_KEY), 2652225187 % RANGE_SIZE)

    def test_slot_zero_becomes_one(self):
        """Pulsar 4 reserves hash 0: a key whose slot is 0 is given slot 1."""
        self.assertEqual(murmur3_31(b"k179888") % RANGE_SIZE, 0)
        self.assertEqual(key_hash(b"k179888"), 1)


class StickyKeyTests(unittest.TestCase):
    def test_no_key_is_none_key(self):
        """A message with neither ordering nor partition key routes as Pulsar's "NONE_KEY"."""
        self.assertEqual(sticky_key(api.MessageMetadata()), b"NONE_KEY")

    def test_ordering_key_first(self):
        """The ordering key wins over the partition key."""
        meta = api.MessageMetadata(partition_key="p", ordering_key=b"o")
        self.assertEqual(sticky_key(meta), b"o")

    def test_partition_key_as_utf8(self):
        self.assertEqual(sticky_key(api.MessageMetadata(partition_key="clé")), "clé".encode())

    def test_base64_partition_key_decoded(self):
        """A partition key flagged partition_key_b64_encoded is hashed as its decoded bytes."""
        raw = b"\x00\xffbytes"
        meta = api.MessageMetadata(partition_key=base64.b64encode(raw).decode(),
                                   partition_key_b64_encoded=True)
        self.assertEqual(sticky_key(meta), raw)
        unpadded = api.MessageMetadata(partition_key="YWI", partition_key_b64_encoded=True)
        self.assertEqual(sticky_key(unpadded), b"ab")

    def test_invalid_base64_is_none_key(self):
        meta = api.MessageMetadata(partition_key="not base64!", partition_key_b64_encoded=True)
        self.assertEqual(sticky_key(meta), NONE_KEY)


class RangeSplitTests(unittest.TestCase):
    def test_newcomers_split_the_largest_range(self):
        """65536 | 32768 | 16384: each newcomer takes the lower half of the largest range."""
        selector = RangeSplitSelector()
        a, b, c = _Consumer("a"), _Consumer("b"), _Consumer("c")
        selector.add(a)
        self.assertIs(selector.select(1), a)
        self.assertIs(selector.select(65535), a)
        selector.add(b)
        self.assertIs(selector.select(32768), b)
        self.assertIs(selector.select(32769), a)
        selector.add(c)
        self.assertIs(selector.select(16384), c)
        self.assertIs(selector.select(16385), b)
        self.assertIs(selector.select(32769), a)

    def test_removal_hands_range_up_or_top_down(self):
        """A removed range goes to the next boundary up; the top one to the consumer below it."""
        selector = RangeSplitSelector()
        a, b, c = _Consumer("a"), _Consumer("b"), _Consumer("c")
        for consumer in (a, b, c):
            selector.add(consumer)
        selector.remove(c)
        self.assertIs(selector.select(100), b)
        selector.remove(a)
        self.assertIs(selector.select(65535), b)
        self.assertIs(selector.select(1), b)
        selector.remove(b)
        self.assertIsNone(selector.select(1))

    def test_no_range_left(self):
        """Pulsar refuses a consumer once the largest range has one slot left (range size 4:
        boundaries 4, 2, 1, 3; a fifth consumer finds only one-slot ranges)."""
        selector = RangeSplitSelector(range_size=4)
        consumers = [_Consumer(f"c{i}") for i in range(4)]
        for consumer in consumers:
            selector.add(consumer)
        self.assertEqual([selector.select(slot) for slot in (1, 2, 3)], consumers[2:0:-1] + [consumers[3]])
        e = self.assertRaises(errors.ConsumerAssignError, selector.add, _Consumer("c4"))
        self.assertIn("No more range", str(e))


class ConsistentHashTests(unittest.TestCase):
    def points(self, name, index=0, count=100):
        return {key_hash(f"{name}\0{index}\0{i}".encode()) for i in range(count)}

    def test_slot_goes_to_next_point(self):
        """A slot goes to the owner of the first ring point at or after it, wrapping around."""
        selector = ConsistentHashSelector(100)
        a, b = _Consumer("a"), _Consumer("b")
        selector.add(a)
        selector.add(b)
        ring = sorted([(p, a) for p in self.points("a")] + [(p, b) for p in self.points("b")],
                      key=lambda item: item[0])
        for slot in (1, 500, 30000, 65535, ring[0][0], ring[-1][0]):
            expected = next((owner for p, owner in ring if p >= slot), ring[0][1])
            self.assertIs(selector.select(slot), expected, slot)

    def test_same_names_get_distinct_points(self):
        """Two consumers of one name use name indexes 0 and 1, so both receive keys."""
        selector = ConsistentHashSelector(100)
        first, second = _Consumer("same"), _Consumer("same")
        selector.add(first)
        selector.add(second)
        owners = {selector.select(slot) for slot in range(1, RANGE_SIZE, 97)}
        self.assertEqual(owners, {first, second})
        selector.remove(first)
        self.assertEqual({selector.select(slot) for slot in range(1, RANGE_SIZE, 97)}, {second})

    def test_config_chooses_selector(self):
        """subscriptionKeySharedUseConsistentHashing=false gives the range-splitting selector."""
        self.assertIsInstance(selector_for(api.AUTO_SPLIT, BrokerConfig()), ConsistentHashSelector)
        off = BrokerConfig(subscriptionKeySharedUseConsistentHashing=False)
        self.assertIsInstance(selector_for(api.AUTO_SPLIT, off), RangeSplitSelector)
        self.assertIsInstance(selector_for(api.STICKY, off), StickySelector)


class StickyRangesTests(unittest.TestCase):
    def test_slot_in_declared_range(self):
        selector = StickySelector()
        low, high = _Consumer("low", [(0, 32767)]), _Consumer("high", [(32768, 65535)])
        selector.add(low)
        selector.add(high)
        self.assertIs(selector.select(key_hash(b"hello")), high)      # 0xFA47
        self.assertIs(selector.select(key_hash(b"key-1")), low)       # 5536
        self.assertIs(selector.select(key_hash(NONE_KEY)), high)      # 48803


class KeySharedRoutingTests(FeatureCase):
    def subscribe_sticky(self, client, consumer_id, start, end):
        client.send(T(type=T.SUBSCRIBE, subscribe=Sub(
            topic=self.topic, subscription="s", subType=Sub.Key_Shared, consumer_id=consumer_id,
            request_id=1000 + consumer_id, consumer_name=f"c{consumer_id}",
            initialPosition=Sub.Earliest,
            keySharedMeta=api.KeySharedMeta(keySharedMode=api.STICKY,
                                            hashRanges=[api.IntRange(start=start, end=end)]))))
        client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=100)))

    def test_sticky_ranges_route_as_pulsar(self):
        """
        Over STICKY ranges [0, 32767] and [32768, 65535]: keyless messages (NONE_KEY, slot 48803)
        and "hello" (0xFA47) go high, the base64 key of b"key-1" (5536) goes low, and an
        ordering key decides over a partition key.
        """
        low, high = self.harness.client(), self.harness.client()
        self.subscribe_sticky(low, 1, 0, 32767)
        self.subscribe_sticky(high, 2, 32768, 65535)
        producer = self.harness.client()
        self.create_producer(producer)
        self.send(producer, 0)
        self.send(producer, 1, partition_key="hello")
        self.send(producer, 2, partition_key=base64.b64encode(b"key-1").decode(),
                  partition_key_b64_encoded=True)
        self.send(producer, 3, partition_key="hello", ordering_key=b"key-1")
        self.clock.advance(0)
        self.harness.pump()
        self.assertEqual(sorted(payloads(high.received())), ["m0", "m1"])
        self.assertEqual(sorted(payloads(low.received())), ["m2", "m3"])
