"""
/metrics for replicated subscriptions (web/broker_metrics.py): Pulsar's broker-wide
``pulsar_replicated_subscriptions_pending_snapshots`` (gauge), ``..._timedout_snapshots``
(counter) and ``..._snapshot_ms`` (summary) from the broker's ``counters.snapshots``.
"""

from prometheus_client.parser import text_string_to_metric_families

from tests.web.test_broker_metrics import CLUSTER, MetricsCase

PENDING = "pulsar_replicated_subscriptions_pending_snapshots"
TIMED_OUT = "pulsar_replicated_subscriptions_timedout_snapshots"
SNAPSHOT = "pulsar_replicated_subscriptions_snapshot_ms"


class ReplicatedSubscriptionMetricsTests(MetricsCase):
    def stats(self):
        """The broker's SnapshotStats (replicated_subscriptions.py)."""
        return self.harness.broker.counters.snapshots

    def test_zero_before_any_snapshot(self):
        """The three families show at 0 on a broker that took no snapshot (Pulsar registers them
        once per broker)."""
        samples = self.scrape()
        self.assertEqual(self.value(samples, PENDING, CLUSTER), 0)
        self.assertEqual(self.value(samples, TIMED_OUT + "_total", CLUSTER), 0)
        self.assertEqual(self.value(samples, SNAPSHOT + "_count", CLUSTER), 0)
        self.assertEqual(self.value(samples, SNAPSHOT + "_sum", CLUSTER), 0)

    def test_values_and_types(self):
        """Each figure of the stats object, with Pulsar's metric types."""
        stats = self.stats()
        stats.pending, stats.timed_out, stats.completed, stats.duration_ms_sum = 2, 3, 5, 1234
        text = self.page.render_now().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        self.assertEqual(families[PENDING].type, "gauge")
        self.assertEqual(families[TIMED_OUT].type, "counter")
        self.assertEqual(families[SNAPSHOT].type, "summary")
        self.assertIn(f'# TYPE {TIMED_OUT} counter\n{TIMED_OUT}_total{{cluster="standalone"}} 3.0\n', text)
        samples = self.scrape()
        self.assertEqual(self.value(samples, PENDING, CLUSTER), 2)
        self.assertEqual(self.value(samples, TIMED_OUT + "_total", CLUSTER), 3)
        self.assertEqual(self.value(samples, SNAPSHOT + "_count", CLUSTER), 5)
        self.assertEqual(self.value(samples, SNAPSHOT + "_sum", CLUSTER), 1234)

    def test_namespace_level(self):
        """Broker-wide figures are the same with exposeTopicLevelMetricsInPrometheus=false."""
        self.stats().pending = 1
        self.harness.config.exposeTopicLevelMetricsInPrometheus = False
        self._registry()
        self.assertEqual(self.value(self.scrape(), PENDING, CLUSTER), 1)
