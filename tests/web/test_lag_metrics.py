"""/metrics: the stall detector's families (pulsar_broker_event_loop_lag_ms and friends)."""

from prometheus_client import CollectorRegistry, generate_latest
from twisted.internet.task import Clock
from twisted.trial import unittest

from pulsar_twisted.common.reactor_lag import ReactorLagMonitor
from pulsar_twisted.web.metrics import ReactorLagCollector


class LagMetricsTests(unittest.TestCase):

    def test_histogram_exposed(self):
        """One on-time tick and one 130 ms late: a cumulative ms histogram, max and stall count."""
        clock = Clock()
        monitor = ReactorLagMonitor(clock, interval=0.01, stall_ms=50)
        monitor.start()
        self.addCleanup(monitor.stop)
        clock.advance(0.01)
        clock.advance(0.14)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ReactorLagCollector(monitor, "standalone"))
        text = generate_latest(registry).decode()
        for line in ('pulsar_broker_event_loop_lag_ms_bucket{cluster="standalone",le="0.5"} 1.0',
                     'pulsar_broker_event_loop_lag_ms_bucket{cluster="standalone",le="100.0"} 1.0',
                     'pulsar_broker_event_loop_lag_ms_bucket{cluster="standalone",le="200.0"} 2.0',
                     'pulsar_broker_event_loop_lag_ms_bucket{cluster="standalone",le="+Inf"} 2.0',
                     'pulsar_broker_event_loop_lag_ms_count{cluster="standalone"} 2.0',
                     'pulsar_broker_event_loop_stalls_total{cluster="standalone"} 1.0'):
            self.assertIn(line, text)
        self.assertIn('pulsar_broker_event_loop_lag_max_ms{cluster="standalone"} 130.0', text)
        self.assertIn("# TYPE pulsar_broker_event_loop_lag_ms histogram", text)

    def test_bookie_names_without_cluster(self):
        """On a bookie: bookie_ prefix, no labels (BookKeeper's metrics have none)."""
        monitor = ReactorLagMonitor(Clock(), interval=0.01, stall_ms=50)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ReactorLagCollector(monitor, None, "bookie_"))
        text = generate_latest(registry).decode()
        self.assertIn('bookie_event_loop_lag_ms_bucket{le="+Inf"} 0.0', text)
        self.assertIn("bookie_event_loop_stalls_total 0.0", text)
