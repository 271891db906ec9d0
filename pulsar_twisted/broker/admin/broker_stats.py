"""
``/admin/v2/broker-stats`` (Pulsar's ``BrokerStatsBase``): this broker's topics grouped by namespace
and bundle, its per-namespace dimension metrics, and its load report (``LocalBrokerData`` as the
modular load manager publishes it). Pulsar's JVM-only views (``mbeans``, ``allocator-stats``) are
not served: there is no JVM here.
"""

import os
import time

from pulsar_twisted.broker.admin import base
from pulsar_twisted.broker.admin.base import AdminArea, next_turn
from pulsar_twisted.broker.admin.brokers import topic_row
from pulsar_twisted.broker.ownership import bundle_for
from pulsar_twisted.resources.base import CorruptMetadataError
from pulsar_twisted.resources.policies import DEFAULT_NUM_BUNDLES, boundaries_of_policies, even_boundaries

#: Pulsar's dimension-metric names (NamespaceStats) for the rows of BrokersAdmin.topic_metrics.
_METRIC_NAMES = (
    ("brk_in_rate", "rate_in"), ("brk_in_tp_rate", "throughput_in"),
    ("brk_out_rate", "rate_out"), ("brk_out_tp_rate", "throughput_out"),
    ("brk_storage_size", "storage_size"), ("brk_msg_backlog", "msg_backlog"),
    ("brk_no_of_producers", "producers_count"), ("brk_no_of_subscriptions", "subscriptions_count"),
    ("brk_no_of_consumers", "consumers_count"),
)


class BrokerStatsAdmin(AdminArea):
    """What ``pulsar-admin broker-stats`` shows. ``stats`` is the StatsAdmin (per-topic stats) and
    ``brokers`` the BrokersAdmin (metric rows, broker id) of the same service."""

    def __init__(self, context, stats, brokers):
        super().__init__(context)
        self.stats = stats
        self.brokers = brokers
        self.started = int(time.time() * 1000)

    async def _bounds(self, namespace: str) -> list:
        try:
            policies = await self.context.namespaces.get(namespace)
            return boundaries_of_policies(policies or {})
        except (CorruptMetadataError, ValueError):
            return even_boundaries(DEFAULT_NUM_BUNDLES)

    async def topics(self) -> dict:
        """``{namespace: {bundle range: {"persistent"|"non-persistent": {topic: TopicStats}}}}``
        of the topics loaded here (Pulsar's ``/broker-stats/topics``)."""
        out: dict = {}
        bounds: dict = {}
        for i, topic in enumerate(list(self.broker.topics.values())):
            if i and i % base.SLICE_TOPICS == 0:
                await next_turn(self.clock)
            namespace = str(topic.topic_name.namespace_name)
            if namespace not in bounds:
                bounds[namespace] = await self._bounds(namespace)
            bundle = bundle_for(namespace, bounds[namespace], topic.name).range_name
            domain = "persistent" if topic.persistent else "non-persistent"
            (out.setdefault(namespace, {}).setdefault(bundle, {}).setdefault(domain, {})
             )[topic.name] = self.stats.topic_stats(topic)
        return out

    async def _rows(self) -> list:
        """``topic_row`` of every loaded topic, ``base.SLICE_TOPICS`` per reactor turn."""
        rows = []
        for i, topic in enumerate(list(self.broker.topics.values())):
            if i and i % base.SLICE_TOPICS == 0:
                await next_turn(self.clock)
            rows.append(topic_row(topic))
        return rows

    async def metrics(self) -> list:
        """One ``{"metrics": {...}, "dimensions": {...}}`` per namespace with loaded topics
        (Pulsar's ``/broker-stats/metrics`` namespace dimension metrics)."""
        per_namespace: dict = {}
        for row in await self._rows():
            totals = per_namespace.setdefault(row["namespace"], {name: 0 for name, _ in _METRIC_NAMES})
            for name, field in _METRIC_NAMES:
                totals[name] += row[field]
        broker = self.brokers.broker_id()
        return [{"metrics": totals,
                 "dimensions": {"broker": broker, "cluster": self.cluster, "namespace": namespace}}
                for namespace, totals in sorted(per_namespace.items())]

    async def load_report(self) -> dict:
        """Pulsar's ``LocalBrokerData``: URLs, resource usage, traffic totals and counts. A cluster
        broker answers its load manager's report (``broker/loadbalance``: what it publishes in
        ``/loadbalance/brokers``, with its bundles and their ``lastStats``)."""
        manager = getattr(self.broker, "load_manager", None)
        if manager is not None:
            return manager.current_report()
        rows = await self._rows()
        config = self.context.config
        host = config.advertisedAddress
        tls_port = getattr(config, "brokerServicePortTls", 0)
        web_tls_port = getattr(config, "webServicePortTls", 0)
        return {
            "webServiceUrl": self.context.web_service_url,
            "webServiceUrlTls": f"https://{host}:{web_tls_port}" if web_tls_port else None,
            "pulsarServiceUrl": f"pulsar://{host}:{config.brokerServicePort}",
            "pulsarServiceUrlTls": f"pulsar+ssl://{host}:{tls_port}" if tls_port else None,
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": True,
            "cpu": _cpu_usage(),
            "memory": _memory_usage(),
            "directMemory": {"usage": 0.0, "limit": 0.0},
            "bandwidthIn": {"usage": 0.0, "limit": 0.0},
            "bandwidthOut": {"usage": 0.0, "limit": 0.0},
            "msgThroughputIn": sum(r["throughput_in"] for r in rows),
            "msgThroughputOut": sum(r["throughput_out"] for r in rows),
            "msgRateIn": sum(r["rate_in"] for r in rows),
            "msgRateOut": sum(r["rate_out"] for r in rows),
            "lastUpdate": int(self.clock.seconds() * 1000),
            "lastStats": {},
            "numTopics": len(rows),
            "numBundles": len({r["namespace"] for r in rows}),
            "numConsumers": sum(r["consumers_count"] for r in rows),
            "numProducers": sum(r["producers_count"] for r in rows),
            "bundles": [],
            "lastBundleGains": [],
            "lastBundleLosses": [],
            "brokerVersionString": "pulsar-twisted",
            "protocols": {},
            "advertisedListeners": {},
            "startTimestamp": self.started,
            "loadReportType": "LocalBrokerData",
        }


def _cpu_usage() -> dict:
    """Pulsar's ResourceUsage of the CPU: percent of one core summed over cores (its convention:
    the limit is 100 per core)."""
    import psutil
    cores = os.cpu_count() or 1
    return {"usage": psutil.cpu_percent(interval=None) * cores, "limit": 100.0 * cores}


def _memory_usage() -> dict:
    """This process's resident memory against the machine's, in MB (Pulsar reports the JVM heap)."""
    import psutil
    mb = 1024 * 1024
    return {"usage": psutil.Process().memory_info().rss / mb,
            "limit": psutil.virtual_memory().total / mb}
