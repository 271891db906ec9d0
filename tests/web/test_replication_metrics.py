"""
The pulsar_replication_* families of /metrics (web/broker_metrics.py): one series per remote
cluster of a topic that replicates, labelled ``cluster, namespace, topic, remote_cluster``, from
the same ReplicatorStats as the admin API (Replicator outbound, pulsar.repl producer inbound);
summed per namespace and remote cluster at namespace level; none for topics without replicators.
"""

from pulsar_twisted.broker import replication_stats
from pulsar_twisted.broker.admin.service import AdminService
from tests.broker.messaging import TOPIC
from tests.broker.test_replication_stats import FakeReplicator
from tests.web.test_broker_metrics import CLUSTER, NS, TOPIC_LABELS, MetricsCase

OTHER_TOPIC = "persistent://public/default/other-replicated"
FAMILIES = ("rate_in", "rate_out", "throughput_in", "throughput_out", "backlog",
            "connected_count", "disconnected_count", "rate_expired", "delay_in_seconds")


def replication_samples(samples) -> dict:
    """``{(family suffix, labels as a sorted tuple): value}`` of the replication samples."""
    return {(name[len("pulsar_replication_"):], tuple(sorted(labels))): value
            for (name, labels), value in samples.items()
            if name.startswith("pulsar_replication_")}


class ReplicationMetricsCase(MetricsCase):
    def replicate(self, by_topic):
        """Give the topics named in ``by_topic`` those replicators (fakes)."""
        real = replication_stats.replicators_of
        self.patch(replication_stats, "replicators_of",
                   lambda topic: by_topic.get(topic.name) or real(topic))

    def stats_period(self):
        """An AdminService whose ``sample_rates()`` ends a stats period (its loop's work);
        called once here to start the first."""
        admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                             self.clock)
        admin.sample_rates()
        return admin

    def publish_as(self, name, producer_id, count, topic=TOPIC):
        client = self.harness.client()
        self.create_producer(client, producer_id=producer_id, name=name, topic=topic)
        for seq in range(count):
            self.send(client, seq, producer_id=producer_id, producer=name)
        self.harness.pump()


class DisabledTests(ReplicationMetricsCase):
    config = {"replicationMetricsEnabled": False}

    def test_disabled_by_replication_metrics_enabled(self):
        """replicationMetricsEnabled=false (Pulsar's switch) leaves the families out."""
        self.publish_as("local", 1, 1)
        self.replicate({TOPIC: {"c2": FakeReplicator("c2")}})
        text = self.page.render_now().decode()
        self.assertNotIn("pulsar_replication_", text)


class TopicLevelTests(ReplicationMetricsCase):
    def test_series_per_remote_cluster(self):
        """Every family, per topic and remote cluster, with the ReplicatorStats values."""
        self.publish_as("local", 1, 1)
        self.replicate({TOPIC: {"c2": FakeReplicator("c2", rate_out=4.0, throughput_out=40.0,
                                                     backlog=6, delay=3),
                                "c3": FakeReplicator("c3", connected=False)}})
        admin = self.stats_period()
        self.publish_as("pulsar.repl.c2-->standalone", 2, 20)
        self.clock.advance(10)
        admin.sample_rates()   # the inbound producer's rate: 20 messages in 10 s
        samples = self.scrape()
        got = replication_samples(samples)

        def labels(remote):
            return tuple(sorted({"cluster": "standalone", "namespace": NS, "topic": TOPIC,
                                 "remote_cluster": remote}.items()))

        self.assertEqual(sorted({family for family, _ in got}), sorted(FAMILIES))
        c2 = {family: value for (family, lab), value in got.items() if lab == labels("c2")}
        c3 = {family: value for (family, lab), value in got.items() if lab == labels("c3")}
        self.assertEqual(len(got), 2 * len(FAMILIES))
        self.assertEqual((c2["rate_in"], c2["rate_out"], c2["throughput_out"], c2["backlog"],
                          c2["connected_count"], c2["disconnected_count"],
                          c2["delay_in_seconds"]), (2.0, 4.0, 40.0, 6, 1, 0, 3))
        self.assertGreater(c2["throughput_in"], 0)
        self.assertEqual((c3["connected_count"], c3["disconnected_count"], c3["rate_in"]),
                         (0, 1, 0.0))

    def test_rates_out_include_replication(self):
        """pulsar_rate_out / pulsar_throughput_out (and the broker's) count what the replicators
        send, as Pulsar's topic msgRateOut does."""
        self.publish_as("local", 1, 1)
        self.replicate({TOPIC: {"c2": FakeReplicator("c2", rate_out=4.0, throughput_out=40.0),
                                "c3": FakeReplicator("c3", rate_out=1.0, throughput_out=10.0)}})
        samples = self.scrape()
        self.assertEqual((self.value(samples, "pulsar_rate_out", TOPIC_LABELS),
                          self.value(samples, "pulsar_throughput_out", TOPIC_LABELS)), (5.0, 50.0))
        self.assertEqual(self.value(samples, "pulsar_broker_rate_out", CLUSTER), 5.0)

    def test_no_series_without_replicators(self):
        """A topic that does not replicate has no replication series (the families stay empty)."""
        self.publish_as("pulsar.repl.c2-->standalone", 1, 1)
        text = self.page.render_now().decode()
        self.assertEqual(replication_samples(self.scrape()), {})
        self.assertIn("# TYPE pulsar_replication_backlog gauge", text)


class NamespaceLevelTests(ReplicationMetricsCase):
    config = {"exposeTopicLevelMetricsInPrometheus": False}

    def test_summed_per_namespace_and_remote_cluster(self):
        """Without topic labels the series are summed per namespace and remote cluster."""
        self.publish_as("a", 1, 1)
        self.publish_as("b", 2, 1, topic=OTHER_TOPIC)
        self.replicate({TOPIC: {"c2": FakeReplicator("c2", backlog=2)},
                        OTHER_TOPIC: {"c2": FakeReplicator("c2", backlog=5, connected=False),
                                      "c3": FakeReplicator("c3", backlog=1)}})
        got = replication_samples(self.scrape())

        def labels(remote):
            return tuple(sorted({"cluster": "standalone", "namespace": NS,
                                 "remote_cluster": remote}.items()))

        self.assertEqual(len(got), 2 * len(FAMILIES))
        self.assertEqual((got[("backlog", labels("c2"))], got[("connected_count", labels("c2"))],
                          got[("disconnected_count", labels("c2"))]), (7, 1, 1))
        self.assertEqual(got[("backlog", labels("c3"))], 1)
