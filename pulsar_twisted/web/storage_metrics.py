"""
/metrics families of the persistent topics' storage write histograms (``broker/storage_stats.py``):
``pulsar_storage_write_latency_le_*`` / ``_count`` / ``_sum`` and ``pulsar_entry_size_le_*`` /
``_count`` / ``_sum``, one gauge family per name as Pulsar exposes them (its buckets are not
cumulative, so they are not a Prometheus histogram), labelled ``cluster``, ``namespace``, ``topic``.
"""

from prometheus_client.core import GaugeMetricFamily

from pulsar_twisted.broker.storage_stats import STORAGE_METRICS_HELP

_LABELS = ["cluster", "namespace", "topic"]


def storage_families(topics: dict, cluster: str):
    """Yield the families for the loaded ``topics`` (name -> topic); non-persistent topics write
    nothing to storage and are left out, as in Pulsar."""
    families = [GaugeMetricFamily(name, doc, labels=_LABELS) for name, doc in STORAGE_METRICS_HELP]
    for topic in list(topics.values()):
        if not topic.persistent:
            continue
        labels = [cluster, str(topic.topic_name.namespace_name), topic.name]
        for family, (_name, value) in zip(families, topic.counters.storage.metrics()):
            family.add_metric(labels, value)
    yield from families
