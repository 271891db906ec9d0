"""
The resource layer (pulsar_twisted.resources): typed documents over the metadata store with
versioned compare-and-set, and the one Policies model with its defaults and checks.
"""

import json

from twisted.internet.task import Clock
from twisted.trial import unittest

from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, NotFoundError
from pulsar_twisted.metadata.layout import namespace_path, partitioned_topic_path
from pulsar_twisted.resources import policies
from pulsar_twisted.resources.base import (
    UPDATE_ATTEMPTS, ConcurrentModificationError, CorruptMetadataError, JsonNodes)
from pulsar_twisted.resources.checks import InvalidValue, OutOfRange
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.partitioned import PartitionedTopicResources
from pulsar_twisted.resources.tenants import TenantResources, check_tenant_info


class StoreCase(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)

    def raw(self, path):
        return self.successResultOf(self.store.get(path))[0]


class JsonNodesTests(StoreCase):
    def test_create_read_and_bytes(self):
        """Documents are stored as json.dumps bytes, exactly as they always were written."""
        nodes = JsonNodes(self.store)
        self.successResultOf(nodes.create("/d", {"a": [1, "x"]}))
        self.assertEqual(self.raw("/d"), json.dumps({"a": [1, "x"]}).encode())
        value, stat = self.successResultOf(nodes.read("/d"))
        self.assertEqual(value, {"a": [1, "x"]})
        self.assertIsNone(self.successResultOf(nodes.read("/none")))
        self.failureResultOf(nodes.create("/d", {}), AlreadyExistsError)

    def test_corrupt_node(self):
        """A node that is not JSON is reported as such, with its path."""
        self.successResultOf(self.store.put("/bad", b"{not json"))
        failure = self.failureResultOf(JsonNodes(self.store).read("/bad"), CorruptMetadataError)
        self.assertIn("/bad", str(failure.value))

    def test_update_retries_after_a_concurrent_write(self):
        """A change that lost the compare-and-set is applied again to the newer document."""
        nodes = JsonNodes(self.store)
        self.successResultOf(nodes.create("/c", {"n": 0, "other": 0}))
        calls = []

        def change(doc):
            calls.append(dict(doc))
            if len(calls) == 1:   # another writer gets in between our read and our write
                self.successResultOf(self.store.put("/c", json.dumps({"n": 0, "other": 1}).encode()))
            doc["n"] += 1
            return doc
        self.assertEqual(self.successResultOf(nodes.update("/c", change)), {"n": 1, "other": 1})
        self.assertEqual(len(calls), 2)
        self.assertEqual(json.loads(self.raw("/c")), {"n": 1, "other": 1})

    def test_update_gives_up(self):
        """After UPDATE_ATTEMPTS lost races the update fails; a missing node is NotFoundError."""
        nodes = JsonNodes(self.store)
        self.successResultOf(nodes.create("/c", {"n": 0}))

        def always_overtaken(doc):
            self.successResultOf(self.store.put("/c", b'{"n": 0}'))
            return {"n": 1}
        self.failureResultOf(nodes.update("/c", always_overtaken), ConcurrentModificationError)
        self.failureResultOf(nodes.update("/missing", lambda d: d), NotFoundError)
        self.assertEqual(UPDATE_ATTEMPTS, 5)

    def test_ensure(self):
        """ensure creates once and reports whether it did."""
        nodes = JsonNodes(self.store)
        self.assertTrue(self.successResultOf(nodes.ensure("/e", {"v": 1})))
        self.assertFalse(self.successResultOf(nodes.ensure("/e", {"v": 2})))
        self.assertEqual(self.successResultOf(nodes.read("/e"))[0], {"v": 1})


class NamespaceResourcesTests(StoreCase):
    def test_paths_and_watch(self):
        """Documents live at /admin/policies/<t>/<ns>; watch reports each namespace change once."""
        namespaces = NamespaceResources(self.store)
        seen = []
        namespaces.watch(lambda ns, kind: seen.append((ns, kind)))
        self.successResultOf(TenantResources(self.store).create("t", {"adminRoles": []}))
        self.successResultOf(namespaces.create("t/ns", policies.bootstrap_policies("c1")))
        self.assertEqual(json.loads(self.raw(namespace_path("t/ns"))),
                         {"replication_clusters": ["c1"], "bundles": {"numBundles": 4}})
        self.successResultOf(namespaces.update("t/ns", lambda d: dict(d, deduplicationEnabled=True)))
        self.successResultOf(namespaces.delete("t/ns"))
        self.clock.advance(0)
        self.assertEqual(seen, [("t/ns", "created"), ("t/ns", "modified"), ("t/ns", "deleted")])
        self.assertEqual(self.successResultOf(namespaces.list("t")), [])

    def test_partitioned(self):
        """Partition counts are read for a partition's partitioned topic too; 0 when none."""
        partitioned = PartitionedTopicResources(self.store)
        name = parse_topic("persistent://t/ns/p")
        self.assertEqual(self.successResultOf(partitioned.partitions(name)), 0)
        self.successResultOf(partitioned.create(name, 3))
        self.assertEqual(self.raw(partitioned_topic_path(name)), b'{"partitions": 3}')
        self.assertEqual(self.successResultOf(partitioned.partitions(name.partition(1))), 3)
        self.successResultOf(partitioned.set_partitions(name, 5))
        self.assertEqual(self.successResultOf(partitioned.partitions(name)), 5)
        self.assertEqual(self.successResultOf(partitioned.list("t", "ns", "persistent")), ["p"])

    def test_partitioned_corrupt_node(self):
        """A partitioned-topic node that is not JSON fails the read (CorruptMetadataError)."""
        from pulsar_twisted.resources.base import CorruptMetadataError
        partitioned = PartitionedTopicResources(self.store)
        name = parse_topic("persistent://t/ns/bad")
        self.successResultOf(self.store.put(partitioned_topic_path(name), b"{not json"))
        self.failureResultOf(partitioned.partitions(name), CorruptMetadataError)


class PoliciesModelTests(unittest.TestCase):
    def test_new_namespace_defaults_and_checks(self):
        """A new namespace gets every default; fields pass the same checks as the sub-resources."""
        doc = policies.check_new_namespace(None, "c1")
        self.assertEqual(doc, policies.new_policies("c1"))
        self.assertEqual(doc["bundles"]["boundaries"],
                         ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"])
        doc = policies.check_new_namespace({"bundles": {"numBundles": 2}, "message_ttl_in_seconds": 5}, "c1")
        self.assertEqual(doc["bundles"], {"boundaries": policies.bundle_boundaries(2), "numBundles": 2})
        self.assertEqual(doc["message_ttl_in_seconds"], 5)
        self.assertRaises(OutOfRange, policies.check_new_namespace, {"bundles": {"numBundles": 0}}, "c1")
        self.assertRaises(OutOfRange, policies.check_new_namespace, {"message_ttl_in_seconds": -1}, "c1")
        self.assertRaises(InvalidValue, policies.check_new_namespace, {"message_ttl_in_seconds": "x"}, "c1")
        self.assertRaises(InvalidValue, policies.check_new_namespace, [], "c1")

    def test_with_defaults_fills_a_bootstrap_document(self):
        """The short document the broker writes reads like a full one through the admin API."""
        doc = policies.with_defaults(policies.bootstrap_policies("c1"), "c1")
        self.assertEqual(doc, policies.new_policies("c1"))

    def test_one_check_for_writes_and_reads(self):
        """A value the admin API refuses is also the one enforcement ignores (broker default)."""
        spec = policies.NAMESPACE_POLICIES["messageTTL"]
        self.assertRaises(OutOfRange, spec.check, -5, "messageTTL")
        effective = policies.NamespacePolicies.from_json({spec.field: -5}, StandaloneConfig())
        self.assertEqual(effective.message_ttl_seconds, StandaloneConfig().ttlDurationDefaultInSeconds)

    def test_tenant_info_lists(self):
        """An explicit null reads as an empty list, as Jackson reads it."""
        self.assertEqual(check_tenant_info({"adminRoles": None}), {"adminRoles": [], "allowedClusters": []})
        self.assertRaises(InvalidValue, check_tenant_info, {"adminRoles": "root"})

    def test_auth_actions(self):
        self.assertEqual(policies.check_auth_actions(["produce", "consume", "produce"]),
                         ["consume", "produce"])
        self.assertRaises(InvalidValue, policies.check_auth_actions, ["fly"])
        self.assertRaises(InvalidValue, policies.check_auth_actions, "produce")
