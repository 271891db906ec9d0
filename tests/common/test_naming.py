"""Topic names, as Pulsar parses them."""

import pickle
from dataclasses import replace

from twisted.trial import unittest

from pulsar_twisted.common.naming import (
    MAX_ENTITY_NAME_LENGTH, MAX_SUBSCRIPTION_NAME_BYTES, MAX_TOPIC_NAME_BYTES, InvalidTopicNameError,
    NamespaceName, TopicName, _parse_topic, check_entity_name, is_valid_entity_name, parse_topic,
    subscription_name_problem)


class TopicNameTests(unittest.SynchronousTestCase):
    def test_short_name(self):
        """``my-topic`` is persistent://public/default/my-topic."""
        self.assertEqual(str(parse_topic("my-topic")), "persistent://public/default/my-topic")

    def test_three_part_name(self):
        self.assertEqual(str(parse_topic("t/ns/x")), "persistent://t/ns/x")

    def test_full_names(self):
        name = parse_topic("non-persistent://t/ns/x")
        self.assertFalse(name.persistent)
        self.assertEqual(name.namespace_name, NamespaceName("t", "ns"))
        self.assertEqual(name.managed_ledger_name, "t/ns/non-persistent/x")

    def test_partitions(self):
        name = parse_topic("persistent://t/ns/x-partition-3")
        self.assertEqual(name.partition_index, 3)
        self.assertEqual(str(name.partitioned_topic_name), "persistent://t/ns/x")
        self.assertEqual(str(parse_topic("x").partition(2)), "persistent://public/default/x-partition-2")
        self.assertEqual(parse_topic("x-partition-").partition_index, -1)

    def test_full_name_is_one_string(self):
        """A full name's string is the text it was parsed from, made once otherwise (issue 14: a
        loaded topic's name, its key and the parse cache's key are one string)."""
        text = "".join(["persistent://t/ns/", "one-string"])
        name = parse_topic(text)
        self.assertIs(str(name), text)
        short = parse_topic("short-one")
        self.assertEqual(str(short), "persistent://public/default/short-one")
        self.assertIs(str(short), str(short))
        made = TopicName("persistent", "t", "ns", "one-string")
        self.assertEqual(made, name)
        self.assertEqual(hash(made), hash(name))
        self.assertEqual(repr(made), "TopicName(domain='persistent', tenant='t', namespace='ns', "
                                     "local_name='one-string')")
        other = replace(name, local_name="two")
        self.assertEqual(str(other), "persistent://t/ns/two")
        self.assertEqual(str(pickle.loads(pickle.dumps(name))), text)
        self.assertFalse(hasattr(name, "__dict__"))

    def test_partition_index_as_pulsar(self):
        """Pulsar's TopicName.getPartitionIndex: "-partition-N" names partition N only when N
        is a Java int written as Integer.parseInt reads it back (no sign, no leading zero);
        any other suffix is part of a plain topic's name, never an error."""
        for suffix, index in (("0", 0), ("7", 7), ("12345678", 12345678), ("2147483647", 2**31 - 1)):
            name = parse_topic(f"x-partition-{suffix}")
            self.assertEqual((name.partition_index, str(name.partitioned_topic_name)),
                             (index, "persistent://public/default/x"), suffix)
        for suffix in ("01", "00", "04955983", "-1", "+1", " 1", "2147483648",
                       "99999999999", "1e3", "\u00b2", "1" * 4000):
            name = parse_topic(f"x-partition-{suffix}")
            self.assertEqual(name.partition_index, -1, suffix)
            self.assertIs(name.partitioned_topic_name, name)

    def test_invalid(self):
        for bad in ["", "a/b", "ftp://a/b/c", "persistent://a/b/", "a/b/c/d/e", " x", "persistent://a//c"]:
            self.assertRaises(InvalidTopicNameError, parse_topic, bad)


class NameRuleTests(unittest.SynchronousTestCase):
    """The shared edge checks (issue 12): Pulsar's character rules, encoding and length bounds."""

    def test_entity_names_ascii_word_class(self):
        """Tenant and namespace take [-=:.] and Java's ASCII \\w only; no trailing newline slips by."""
        self.assertTrue(is_valid_entity_name("a-b=c:d.e_F9"))
        for bad in ("ténant", "a\n", "a b", "a/b", "", "a" * (MAX_ENTITY_NAME_LENGTH + 1), None, "a\x00"):
            self.assertFalse(is_valid_entity_name(bad), bad)
            self.assertRaises(InvalidTopicNameError, check_entity_name, "Tenant", bad)
        self.assertRaises(InvalidTopicNameError, NamespaceName.parse, "tenant/ns\n")
        self.assertRaises(InvalidTopicNameError, parse_topic, "persistent://té/ns/x")

    def test_local_name_rules(self):
        """A local name may hold any printable text, but not NUL, controls or lone surrogates."""
        self.assertEqual(parse_topic("persistent://t/ns/ünï cödé ✓").local_name, "ünï cödé ✓")
        for bad in ("x\x00y", "x\ny", "x\udcff", "x\x7f"):
            self.assertRaises(InvalidTopicNameError, parse_topic, f"persistent://t/ns/{bad}")

    def test_length_bound(self):
        """A topic name over MAX_TOPIC_NAME_BYTES (UTF-8) is refused, with a short message."""
        head = "persistent://t/ns/"
        parse_topic(head + "x" * (MAX_TOPIC_NAME_BYTES - len(head)))
        with self.assertRaises(InvalidTopicNameError) as caught:
            parse_topic(head + "H" * 100_000)
        self.assertLess(len(str(caught.exception)), 300)
        self.assertRaises(InvalidTopicNameError, parse_topic,
                          head + "é" * ((MAX_TOPIC_NAME_BYTES - len(head)) // 2 + 1))

    def test_oversized_names_not_cached(self):
        """Refused long names never reach the parse cache (it would hold 65536 of them)."""
        before = _parse_topic.cache_info().currsize
        for i in range(5):
            self.assertRaises(InvalidTopicNameError, parse_topic, f"{i}" + "H" * 100_000)
        self.assertEqual(_parse_topic.cache_info().currsize, before)

    def test_subscription_names(self):
        """Subscription names: non-empty, bounded, UTF-8, no NUL."""
        self.assertEqual(subscription_name_problem("sub-1 ✓"), "")
        for bad in ("", "s" * (MAX_SUBSCRIPTION_NAME_BYTES + 1), "a\x00", "a\udcff", None, b"\xff"):
            self.assertTrue(subscription_name_problem(bad), bad)
