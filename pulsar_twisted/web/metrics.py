"""
/metrics: the broker's Prometheus exposition, with Pulsar's metric names and labels.

``MetricsPage`` reads the live topics at scrape time, so nothing is updated per message. Every
topic metric carries the labels ``cluster``, ``namespace`` and ``topic``; like Pulsar, they are all
exposed as gauges (Pulsar's own ``*_total`` topic metrics are gauges too). The subscription,
consumer, storage, broker, managed-ledger, connection and lookup families come from
``web/broker_metrics.py``, the storage write histograms from ``web/storage_metrics.py``; with
``exposeTopicLevelMetricsInPrometheus=false`` every family is summed per namespace, as Pulsar does.
The process and platform collectors of ``prometheus_client`` (and the standalone's bookie) follow,
from a registry of the page's own.

A scrape never holds the reactor for long, whatever the number of topics: the topics are walked
in slices of ``slice_topics`` on a ``Cooperator`` (the reactor runs between slices), each series is
one preformatted line (``web/metrics_text.py``), the page is sent as chunks as the connection
drains (``routing.Response`` with a list body), and scrapes arriving while one is being generated
share its page (so do their rates: a second concurrent scrape does not reset the baseline).
"""

from collections import defaultdict

from prometheus_client import (
    CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector,
    generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from twisted.internet import defer, task
from twisted.python.failure import Failure

from pulsar_twisted.broker.admin.brokers import topic_row
from pulsar_twisted.web.broker_metrics import BrokerFamilies
from pulsar_twisted.web.metrics_text import FOLDED, FamilySet, escape, labels
from pulsar_twisted.web.routing import Response
from pulsar_twisted.web.storage_metrics import StorageFamilies

#: (metric name, key in ``topic_row``, help)
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


class MetricsPage:
    """
    The /metrics page of an AdminService's broker. ``render()`` is a Deferred of the page as a
    list of bytes chunks (the caller's own list), generated in slices of at most ``slice_topics`` topics on
    ``cooperator`` (default: one of the admin service's clock, running slices for up to 10 ms
    per reactor turn); concurrent calls share one generation. ``render_now()`` is the same page
    at once (tests, tools). ``extra_collectors``: prometheus_client collectors on the same page
    (the standalone's bookie); they are small and collected in one go.
    """

    def __init__(self, admin_service, cluster: str, extra_collectors=(), slice_topics: int = 20,
                 cooperator=None):
        self.admin = admin_service
        self.cluster = cluster
        self.slice_topics = max(int(slice_topics), 1)
        self.registry = _process_registry(extra_collectors)
        self._cooperator = cooperator
        self._waiters = None
        #: Made at the first scrape (routers are also built over stand-in admin objects that
        #: are never scraped).
        self.broker_families = None
        self.storage_families = StorageFamilies()

    # ---------------------------------------------------------------- entry points
    def render(self) -> defer.Deferred:
        d = defer.Deferred()
        if self._waiters is not None:
            self._waiters.append(d)
            return d
        self._waiters = [d]
        out = []
        work = self._get_cooperator().cooperate(self.steps(out))
        work.whenDone().addBoth(self._generated, out)
        return d

    def render_now(self) -> bytes:
        out = []
        for _ in self.steps(out):
            pass
        return b"".join(out)

    def _generated(self, result, out) -> None:
        waiters, self._waiters = self._waiters, None
        for i, waiter in enumerate(waiters):
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                # Each its own list: the answer's producer drops chunks as it writes them.
                waiter.callback(out if i == len(waiters) - 1 else list(out))

    def _get_cooperator(self):
        if self._cooperator is None:
            clock = self.admin.clock
            self._cooperator = task.Cooperator(scheduler=lambda work: clock.callLater(0, work))
        return self._cooperator

    # ---------------------------------------------------------------- one generation
    def steps(self, out: list):
        """A generator making one page: it yields after every slice of at most
        ``slice_topics`` topics; once exhausted, ``out`` holds the page's chunks."""
        broker = self.admin.broker
        if self.broker_families is None:
            self.broker_families = BrokerFamilies(broker, self.cluster, self.admin.clock)
        families = FamilySet(getattr(self.admin.config, "exposeTopicLevelMetricsInPrometheus", True))
        self._begin(families)
        topics = list(broker.topics.values())
        for start in range(0, len(topics), self.slice_topics):
            for topic in topics[start:start + self.slice_topics]:
                self._topic(topic)
            families.flush()
            yield
        self._finish()
        out.extend(families.chunks())
        out.append(generate_latest(self.registry))

    def _begin(self, families) -> None:
        self.topic_families = [(families.family(metric, doc, mode=FOLDED), key)
                               for metric, key, doc in TOPIC_METRICS]
        self.topics_count = families.family("pulsar_topics_count", "Topics loaded in the namespace")
        self.per_namespace = defaultdict(int)
        self.ns_labels = {}
        self.storage_families.begin(families)
        self.broker_families.begin(families)

    def _topic(self, topic) -> None:
        namespace = str(topic.topic_name.namespace_name)
        ns_labels = self.ns_labels.get(namespace)
        if ns_labels is None:
            ns_labels = self.ns_labels[namespace] = labels(cluster=self.cluster, namespace=namespace)
        labels_text = f'{ns_labels},topic="{escape(topic.name)}"'
        row = topic_row(topic)
        for family, key in self.topic_families:
            family.add(labels_text, ns_labels, row[key])
        self.per_namespace[namespace] += 1
        self.storage_families.topic(topic, labels_text, ns_labels)
        self.broker_families.topic(topic, labels_text, ns_labels)

    def _finish(self) -> None:
        for namespace, count in sorted(self.per_namespace.items()):
            self.topics_count.add_plain(self.ns_labels[namespace], count)
        self.broker_families.finish()


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


def _process_registry(extra_collectors) -> CollectorRegistry:
    """The extra collectors plus process/platform/GC metrics, in a registry of the page's own
    (tests build many sites in one process; the global registry would refuse duplicates)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in extra_collectors:
        registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def make_page(admin_service, cluster: str, extra_collectors=(), **options) -> MetricsPage:
    return MetricsPage(admin_service, cluster, extra_collectors, **options)


def add_metrics_routes(router, page: MetricsPage) -> None:
    def metrics(request):
        return page.render().addCallback(
            lambda chunks: Response(200, chunks, content_type=CONTENT_TYPE_LATEST))
    router.add("GET", "/metrics", metrics)
