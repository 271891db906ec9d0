"""Topic names, as Pulsar parses them."""

from twisted.trial import unittest

from pulsar_twisted.common.naming import InvalidTopicNameError, NamespaceName, parse_topic


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

    def test_invalid(self):
        for bad in ["", "a/b", "ftp://a/b/c", "persistent://a/b/", "a/b/c/d/e", " x", "persistent://a//c"]:
            self.assertRaises(InvalidTopicNameError, parse_topic, bad)
