"""
The ``replication`` map of topic stats (Pulsar's ReplicatorStatsImpl per remote cluster): the
outbound half from the topic's Replicator, the inbound half from the remote replicator's producer
``pulsar.repl.<remote>--><local>``; replication producers counted in the rates in and left out of
``publishers``; partitioned aggregation as ReplicatorStatsImpl.add.
"""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker import replication_stats
from pulsar_twisted.broker.admin import stats as admin_stats
from pulsar_twisted.broker.replication import source_cluster
from pulsar_twisted.broker.replication_stats import (
    add_replication, empty_replicator_stats, replication, split_publishers,
    topic_replication)
from tests.broker.test_stats_truth import PERIOD, StatsCase

#: Pulsar's ReplicatorStatsImpl JSON keys, in its order.
REPLICATOR_STATS_KEYS = [
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgRateExpired",
    "replicationBacklog", "connected", "replicationDelayInSeconds", "inboundConnection",
    "inboundConnectedSince", "outboundConnection", "outboundConnectedSince"]


class FakeReplicator:
    """The outbound half a ``Replicator.stats()`` returns (the contract of broker/replication)."""

    def __init__(self, remote, rate_out=0.0, throughput_out=0.0, backlog=0, connected=True,
                 delay=0):
        self.remote = remote
        self.figures = {"msgRateOut": rate_out, "msgThroughputOut": throughput_out,
                        "msgRateExpired": 0.0, "replicationBacklog": backlog,
                        "connected": connected, "replicationDelayInSeconds": delay,
                        "outboundConnection": f"{remote}-broker:6650" if connected else None,
                        "outboundConnectedSince": "2026-12-06T15:00:00+00:00" if connected else None}

    def stats(self) -> dict:
        return dict(self.figures)


class NamesTests(SynchronousTestCase):
    def test_source_cluster_of_replication_producer(self):
        """The source cluster is the text between pulsar.repl. and -->; others are not remote."""
        self.assertEqual(source_cluster("pulsar.repl.us-east-->eu-west"), "us-east")
        self.assertEqual(source_cluster("pulsar.repl.dc.1-->dc.2"), "dc.1")
        self.assertEqual(source_cluster("pulsar.repl.us-east"), "us-east")
        for name in ("standalone-0-1", "pulsar.replicator", "", None):
            self.assertIsNone(source_cluster(name))

    def test_split_publishers(self):
        """Local publishers keep their order; replication ones are keyed by source cluster."""
        local = [{"producerName": "a"}, {"producerName": "b"}]
        remote = {"producerName": "pulsar.repl.c2-->c1"}
        self.assertEqual(split_publishers([local[0], remote, local[1]]),
                         (local, {"c2": remote}))


class MergeTests(SynchronousTestCase):
    def test_shape_and_defaults(self):
        """Pulsar's keys in its order; inbound defaults (0.0, null) without a remote producer."""
        (stats,) = replication({"c2": FakeReplicator("c2", backlog=4)}, {}).values()
        self.assertEqual(list(stats), REPLICATOR_STATS_KEYS)
        self.assertEqual(list(empty_replicator_stats()), REPLICATOR_STATS_KEYS)
        self.assertEqual((stats["msgRateIn"], stats["inboundConnection"],
                          stats["inboundConnectedSince"], stats["replicationBacklog"],
                          stats["connected"]), (0.0, None, None, 4, True))

    def test_inbound_half_from_remote_publisher(self):
        """The remote cluster's producer gives msgRateIn, msgThroughputIn and the inbound
        connection; only for clusters the topic replicates to."""
        publisher = {"producerName": "pulsar.repl.c2-->c1", "msgRateIn": 5.0,
                     "msgThroughputIn": 50.0, "address": "/10.0.0.2:4000",
                     "connectedSince": "2026-12-06T15:01:00+00:00"}
        merged = replication({"c2": FakeReplicator("c2", rate_out=3.0)},
                             {"c2": publisher, "c9": publisher})
        self.assertEqual(list(merged), ["c2"])
        stats = merged["c2"]
        self.assertEqual((stats["msgRateIn"], stats["msgThroughputIn"], stats["msgRateOut"]),
                         (5.0, 50.0, 3.0))
        self.assertEqual((stats["inboundConnection"], stats["inboundConnectedSince"]),
                         ("/10.0.0.2:4000", "2026-12-06T15:01:00+00:00"))
        self.assertEqual(stats["outboundConnection"], "c2-broker:6650")

    def test_partitions_added_as_pulsar(self):
        """Summed rates and backlogs, connected only if every partition is, the largest delay,
        no connection strings."""
        total = {}
        add_replication(total, replication({"c2": FakeReplicator("c2", 1.0, 10.0, 3, True, 2)}, {}))
        add_replication(total, replication({"c2": FakeReplicator("c2", 2.0, 20.0, 4, False, 7),
                                            "c3": FakeReplicator("c3", 1.0)}, {}))
        self.assertEqual(sorted(total), ["c2", "c3"])
        c2 = total["c2"]
        self.assertEqual((c2["msgRateOut"], c2["msgThroughputOut"], c2["replicationBacklog"],
                          c2["connected"], c2["replicationDelayInSeconds"],
                          c2["outboundConnection"]), (3.0, 30.0, 7, False, 7, None))
        self.assertTrue(total["c3"]["connected"])

    def test_topic_without_replicators(self):
        """No replicators attribute (or an empty one): an empty map, producers not even read."""
        class Topic:
            producers = None
        self.assertEqual(topic_replication(Topic()), {})


class TopicStatsTests(StatsCase):
    """The admin TopicStats of a real topic whose replicators are fakes."""

    def with_replicators(self, replicators):
        topic = self.topic_object()
        real = replication_stats.replicators_of
        self.patch(admin_stats, "replicators_of",
                   lambda t: replicators if t is topic else real(t))

    def publish_as(self, name, producer_id, count):
        client = self.harness.client()
        self.create_producer(client, producer_id=producer_id, name=name)
        for seq in range(count):
            self.send(client, seq, producer_id=producer_id, producer=name)
        self.clock.advance(0)
        self.harness.pump()
        return client

    def test_replication_map_and_publishers(self):
        """Outbound from the Replicator, inbound from the pulsar.repl producer; that producer is
        not a publisher but its messages count in msgRateIn; replicators' rates count out."""
        self.publish_as("local", 1, 10)
        self.with_replicators({"c2": FakeReplicator("c2", rate_out=4.0, throughput_out=40.0,
                                                    backlog=6),
                               "c3": FakeReplicator("c3", connected=False)})
        self.publish_as("pulsar.repl.c2-->standalone", 2, 20)
        self.clock.advance(PERIOD)
        stats = self.stats()
        self.assertEqual([p["producerName"] for p in stats["publishers"]], ["local"])
        self.assertEqual(stats["msgRateIn"], 3.0)
        self.assertEqual(stats["msgRateOut"], 4.0)
        self.assertEqual(stats["msgThroughputOut"], 40.0)
        self.assertEqual(sorted(stats["replication"]), ["c2", "c3"])
        c2, c3 = stats["replication"]["c2"], stats["replication"]["c3"]
        self.assertEqual(list(c2), REPLICATOR_STATS_KEYS)
        self.assertEqual((c2["msgRateIn"], c2["msgRateOut"], c2["replicationBacklog"],
                          c2["connected"]), (2.0, 4.0, 6, True))
        self.assertGreater(c2["msgThroughputIn"], 0)
        self.assertTrue(c2["inboundConnection"])
        self.assertEqual(c2["inboundConnectedSince"][:4], "1970")   # the harness's clock
        self.assertEqual((c3["connected"], c3["msgRateIn"], c3["inboundConnection"]),
                         (False, 0.0, None))

    def test_publishers_have_connected_since(self):
        """PublisherStats carry connectedSince (the producer's creation), as Pulsar's."""
        self.publish_as("local", 1, 1)
        (publisher,) = self.stats()["publishers"]
        self.assertTrue(publisher["connectedSince"])

    def test_not_replicated_topic(self):
        """Without replicators the map is empty; a stray pulsar.repl producer is still not a
        publisher (Pulsar tells them by name alone)."""
        self.publish_as("pulsar.repl.c2-->standalone", 1, 1)
        stats = self.stats()
        self.assertEqual((stats["replication"], stats["publishers"]), ({}, []))

    def test_partitioned_aggregation(self):
        """Partition stats fold their replication maps into the partitioned topic's."""
        self.publish_as("local", 1, 1)
        self.with_replicators({"c2": FakeReplicator("c2", rate_out=1.0, backlog=2)})
        one = self.stats()
        total = {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0,
                 "msgThroughputOut": 0.0, "bytesInCounter": 0, "msgInCounter": 0,
                 "bytesOutCounter": 0, "msgOutCounter": 0, "storageSize": 0, "backlogSize": 0,
                 "offloadedStorageSize": 0, "publishers": [], "subscriptions": {}, "replication": {}}
        admin_stats._add_partition(total, one)
        admin_stats._add_partition(total, one)
        self.assertEqual((total["replication"]["c2"]["msgRateOut"],
                          total["replication"]["c2"]["replicationBacklog"],
                          total["replication"]["c2"]["connected"]), (2.0, 4, True))
