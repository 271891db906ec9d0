"""
Namespace existence checks on the topic-load path (issue 14, item 4; known_namespaces.py): one store read
per namespace.
"""

from twisted.trial import unittest


class NamespaceCheckTests(unittest.TestCase):
    """The broker asks the store whether a namespace exists once, not on every lookup."""

    def setUp(self):
        from pulsar_twisted.testing.broker import BrokerHarness
        self.harness = BrokerHarness()
        self.successResultOf(self.harness.start())
        self.broker = self.harness.broker
        self.reads = []
        exists = self.broker.namespaces.exists

        def counted(namespace):
            self.reads.append(str(namespace))
            return exists(namespace)
        self.broker.namespaces.exists = counted

    def test_lookups_read_the_namespace_once(self):
        for i in range(3):
            self.successResultOf(self.broker.lookup(f"persistent://public/default/t{i}"))
        self.assertEqual(self.reads, ["public/default"])

    def test_deleted_namespace_is_refused_again(self):
        """Once the store tells of the deletion, lookups fail as for any missing namespace."""
        from pulsar_twisted.common import errors
        self.successResultOf(self.broker.lookup("persistent://public/default/t"))
        self.successResultOf(self.broker.namespaces.delete("public/default"))
        self.failureResultOf(self.broker.lookup("persistent://public/default/t"), errors.TopicNotFound)
        self.failureResultOf(self.broker.lookup("persistent://public/nowhere/t"), errors.TopicNotFound)
