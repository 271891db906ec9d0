"""
``pulsar-admin`` for geo-replication, against an in-process broker's HTTP service:
``namespaces set-clusters`` / ``get-clusters`` (POST/GET .../replication) and ``topics stats`` /
``partitioned-stats`` printing the ``replication`` map (ReplicatorStats per remote cluster), and
``topics set-/get-replicated-subscription-status``.
"""

import json

from twisted.internet import defer

from pulsar_twisted.broker.admin import stats as admin_stats
from tests.broker.test_replication_stats import REPLICATOR_STATS_KEYS, FakeReplicator
from tests.cli.test_admin_groups import AdminCliCase


class NamespaceClustersTests(AdminCliCase):
    @defer.inlineCallbacks
    def namespace_with_two_clusters(self):
        yield self.ok("clusters", "create", "c2", "--url", "http://c2:8080",
                      "--broker-url", "pulsar://c2:6650")
        yield self.ok("tenants", "create", "geo", "-c", "standalone,c2")
        yield self.ok("namespaces", "create", "geo/ns")
        return "geo/ns"

    @defer.inlineCallbacks
    def test_set_and_get_clusters(self):
        """set-clusters -c a,b replaces the list; get-clusters prints it one per line."""
        ns = yield self.namespace_with_two_clusters()
        self.assertEqual((yield self.ok("namespaces", "get-clusters", ns)), "standalone\n")
        yield self.ok("namespaces", "set-clusters", ns, "--clusters", "standalone,c2")
        self.assertEqual((yield self.ok("namespaces", "get-clusters", ns)), "standalone\nc2\n")
        policies = json.loads((yield self.ok("namespaces", "policies", ns)))
        self.assertEqual(policies["replication_clusters"], ["standalone", "c2"])

    @defer.inlineCallbacks
    def test_set_clusters_refused(self):
        """A cluster the tenant may not use is refused with the server's reason."""
        ns = yield self.namespace_with_two_clusters()
        code, _, err = yield self.pulsar_admin("namespaces", "set-clusters", ns, "-c", "nowhere")
        self.assertEqual(code, 1)
        self.assertIn("HTTP 412 Precondition Failed", err)
        self.assertEqual((yield self.ok("namespaces", "get-clusters", ns)), "standalone\n")


class TopicStatsTests(AdminCliCase):
    @defer.inlineCallbacks
    def test_stats_show_replication(self):
        """topics stats prints the replication map with Pulsar's keys (nulls as null)."""
        topic = "persistent://public/default/replicated"
        yield self.ok("topics", "create", topic)
        yield self.ok("topics", "stats", topic)   # loads the topic
        loaded = self.broker.topics[topic]
        self.patch(admin_stats, "replicators_of",
                   lambda t: {"c2": FakeReplicator("c2", rate_out=1.5, backlog=3)}
                   if t is loaded else {})
        out = yield self.ok("topics", "stats", topic)
        stats = json.loads(out)
        self.assertEqual(list(stats["replication"]), ["c2"])
        c2 = stats["replication"]["c2"]
        self.assertEqual(list(c2), REPLICATOR_STATS_KEYS)
        self.assertEqual((c2["msgRateOut"], c2["replicationBacklog"], c2["connected"],
                          c2["inboundConnection"]), (1.5, 3, True, None))
        self.assertIn('"inboundConnection" : null', out)

    @defer.inlineCallbacks
    def test_partitioned_stats_add_replication(self):
        """partitioned-stats adds the partitions' replication maps."""
        topic = "persistent://public/default/replicated-p"
        yield self.ok("topics", "create-partitioned-topic", topic, "-p", "2")
        yield self.ok("topics", "partitioned-stats", topic)   # loads the partitions
        self.patch(admin_stats, "replicators_of",
                   lambda t: {"c2": FakeReplicator("c2", backlog=2)} if t.persistent else {})
        stats = json.loads((yield self.ok("topics", "partitioned-stats", topic, "--per-partition")))
        self.assertEqual(stats["replication"]["c2"]["replicationBacklog"], 4)
        self.assertEqual([p["replication"]["c2"]["replicationBacklog"]
                          for p in stats["partitions"].values()], [2, 2])


class ReplicatedSubscriptionStatusTests(AdminCliCase):
    """topics set-replicated-subscription-status / get-replicated-subscription-status (Pulsar's
    CmdTopics verbs and flags)."""

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.ok("topics", "create", "persistent://public/default/rs")
        yield self.ok("topics", "create-subscription", "rs", "-s", "sub")

    @defer.inlineCallbacks
    def test_enable_get_disable(self):
        """-e then get prints Pulsar's pretty map; --disable turns it off again."""
        self.assertEqual((yield self.ok("topics", "set-replicated-subscription-status", "rs",
                                        "-s", "sub", "-e")), "")
        out = yield self.ok("topics", "get-replicated-subscription-status", "rs", "-s", "sub")
        self.assertEqual(out, '{\n  "persistent://public/default/rs" : true\n}\n')
        yield self.ok("topics", "set-replicated-subscription-status", "persistent://public/default/rs",
                      "--subscription", "sub", "--disable")
        out = yield self.ok("topics", "get-replicated-subscription-status", "rs", "--subscription", "sub")
        self.assertEqual(json.loads(out), {"persistent://public/default/rs": False})

    @defer.inlineCallbacks
    def test_partitioned_topic(self):
        """On a partitioned topic: every partition set, one line per partition in the map."""
        yield self.ok("topics", "create-partitioned-topic", "prs", "-p", "2")
        yield self.ok("topics", "create-subscription", "prs", "-s", "sub")
        yield self.ok("topics", "set-replicated-subscription-status", "prs", "-s", "sub", "--enable")
        out = yield self.ok("topics", "get-replicated-subscription-status", "prs", "-s", "sub")
        self.assertEqual(json.loads(out), {"persistent://public/default/prs-partition-0": True,
                                           "persistent://public/default/prs-partition-1": True})

    @defer.inlineCallbacks
    def test_usage_errors(self):
        """Neither or both of --enable/--disable, or a non-persistent topic: Pulsar's texts, exit 1,
        no request made."""
        for flags in ((), ("-e", "-d")):
            code, _, err = yield self.pulsar_admin("topics", "set-replicated-subscription-status", "rs",
                                                   "-s", "sub", *flags)
            self.assertEqual((code, err), (1, "Need to specify either --enable or --disable\n"))
        code, _, err = yield self.pulsar_admin("topics", "get-replicated-subscription-status",
                                               "non-persistent://public/default/x", "-s", "sub")
        self.assertEqual((code, err), (1, "Need to provide a persistent topic name\n"))

    @defer.inlineCallbacks
    def test_server_errors(self):
        """The server's 404 printed as Pulsar's CLI does."""
        code, _, err = yield self.pulsar_admin("topics", "get-replicated-subscription-status", "rs",
                                               "-s", "nope")
        self.assertEqual(code, 1)
        self.assertIn("HTTP 404 Not Found", err)
        self.assertIn("Subscription nope not found for topic persistent://public/default/rs", err)
