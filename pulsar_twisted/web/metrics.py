"""
/metrics: the broker's Prometheus exposition, with Pulsar's metric names and labels.

``PulsarCollector`` reads the live topics (through ``AdminService.topic_metrics``) at scrape time,
so nothing is updated per message. Every topic metric carries the labels ``cluster``,
``namespace`` and ``topic``; like Pulsar, they are all exposed as gauges (Pulsar's own
``*_total`` topic metrics are gauges too). Each site has its own registry, with the process
and platform collectors of ``prometheus_client`` next to ours. The subscription, consumer,
storage, broker, managed-ledger, connection and lookup families come from
``web/broker_metrics.py``; with ``exposeTopicLevelMetricsInPrometheus=false`` every family is
summed per namespace, as Pulsar does.
"""

from collections import defaultdict

from prometheus_client import (
    CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector,
    generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from pulsar_twisted.web.broker_metrics import BrokerFamilies, namespace_level
from pulsar_twisted.web.routing import Response
from pulsar_twisted.web.storage_metrics import storage_families

#: (metric name, key in AdminService.topic_metrics rows, help)
TOPIC_METRICS = [
    ("pulsar_rate_in", "rate_in", "Messages per second published to the topic"),
    ("pulsar_rate_out", "rate_out", "Messages per second dispatched from the topic"),
    ("pulsar_throughput_in", "throughput_in", "Bytes per second published to the topic"),
    ("pulsar_throughput_out", "throughput_out", "Bytes per second dispatched from the topic"),
    ("pulsar_in_messages_total", "in_messages_total", "Messages published to the topic"),
    ("pulsar_in_bytes_total", "in_bytes_total", "Bytes published to the topic"),
    ("pulsar_out_messages_total", "out_messages_total", "Messages dispatched from the topic"),
    ("pulsar_out_bytes_total", "out_bytes_total", "Bytes dispatched from the topic"),
    ("pulsar_msg_backlog", "msg_backlog", "Unacknowledged messages of all subscriptions"),
    ("pulsar_storage_size", "storage_size", "Bytes the topic stores"),
    ("pulsar_producers_count", "producers_count", "Producers connected to the topic"),
    ("pulsar_subscriptions_count", "subscriptions_count", "Subscriptions of the topic"),
    ("pulsar_consumers_count", "consumers_count", "Consumers connected to the topic"),
]


class PulsarCollector:
    """A prometheus_client custom collector over an AdminService (``collect()`` at scrape time)."""

    def __init__(self, admin_service, cluster: str):
        self.admin = admin_service
        self.cluster = cluster
        #: Subscription, consumer, storage, broker, managed-ledger, connection and lookup
        #: families (web/broker_metrics.py), made at the first scrape (routers are also built
        #: over stand-in admin objects that are never scraped).
        self.broker_families = None

    def collect(self):
        families = self._families()
        if not getattr(self.admin.config, "exposeTopicLevelMetricsInPrometheus", True):
            families = namespace_level(families)
        yield from families

    def _families(self):
        rows = self.admin.topic_metrics()
        labels = ["cluster", "namespace", "topic"]
        for metric, key, doc in TOPIC_METRICS:
            family = GaugeMetricFamily(metric, doc, labels=labels)
            for row in rows:
                family.add_metric([self.cluster, row["namespace"], row["topic"]], row[key])
            yield family
        per_namespace = defaultdict(int)
        for row in rows:
            per_namespace[row["namespace"]] += 1
        family = GaugeMetricFamily("pulsar_topics_count", "Topics loaded in the namespace",
                                   labels=["cluster", "namespace"])
        for namespace, count in sorted(per_namespace.items()):
            family.add_metric([self.cluster, namespace], count)
        yield family
        yield from storage_families(self.admin.broker.topics, self.cluster)
        if self.broker_families is None:
            self.broker_families = BrokerFamilies(self.admin.broker, self.cluster, self.admin.clock)
        yield from self.broker_families.collect()


class ReactorLagCollector:
    """The stall detector's figures (``common/reactor_lag.py``): the reactor's timer lateness as a
    Prometheus histogram in ms, its maximum, and the ticks later than the stall threshold.
    ``prefix`` names the daemon (``pulsar_broker_``; ``bookie_`` on a bookie's /metrics, with no
    ``cluster`` label when ``cluster`` is None, as BookKeeper's own metrics have none)."""

    def __init__(self, monitor, cluster: str | None, prefix: str = "pulsar_broker_"):
        self.monitor = monitor
        self.prefix = prefix
        self.labels = ["cluster"] if cluster is not None else []
        self.values = [cluster] if cluster is not None else []

    def collect(self):
        h, p = self.monitor.histogram, self.prefix
        lag = HistogramMetricFamily(f"{p}event_loop_lag_ms",
                                    "Lateness of the reactor's periodic tick, in milliseconds",
                                    labels=self.labels)
        lag.add_metric(self.values, [(_le(bound), n) for bound, n in h.cumulative()], h.sum)
        yield lag
        top = GaugeMetricFamily(f"{p}event_loop_lag_max_ms",
                                "Largest lateness of the reactor's tick since start, in milliseconds",
                                labels=self.labels)
        top.add_metric(self.values, h.max)
        yield top
        stalls = CounterMetricFamily(f"{p}event_loop_stalls",
                                     "Reactor ticks later than the stall threshold (each one logged)",
                                     labels=self.labels)
        stalls.add_metric(self.values, self.monitor.stalls)
        yield stalls


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def make_registry(admin_service, cluster: str, extra_collectors=()) -> CollectorRegistry:
    """Our collector plus process/platform/GC metrics, in a registry of the site's own (tests
    build many sites in one process; the global registry would refuse duplicates).
    ``extra_collectors``: more collectors on the same page (the standalone's bookie)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PulsarCollector(admin_service, cluster))
    for collector in extra_collectors:
        registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def add_metrics_routes(router, registry) -> None:
    def metrics(request):
        return Response(200, generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    router.add("GET", "/metrics", metrics)
