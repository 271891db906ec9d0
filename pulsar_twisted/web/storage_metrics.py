"""
/metrics families of the persistent topics' storage write histograms (``broker/storage_stats.py``):
``pulsar_storage_write_latency_le_*`` / ``_count`` / ``_sum`` and ``pulsar_entry_size_le_*`` /
``_count`` / ``_sum``, one gauge family per name as Pulsar exposes them (its buckets are not
cumulative, so they are not a Prometheus histogram), labelled ``cluster``, ``namespace``, ``topic``.
"""

from pulsar_twisted.broker.storage_stats import STORAGE_METRICS_HELP
from pulsar_twisted.web.metrics_text import FOLDED


class StorageFamilies:
    """``begin(families)`` declares the families on a scrape's FamilySet; ``topic(...)`` adds one
    topic's series. Non-persistent topics write nothing to storage and are left out, as in Pulsar."""

    def begin(self, families) -> None:
        self.families = [families.family(name, doc, mode=FOLDED) for name, doc in STORAGE_METRICS_HELP]

    def topic(self, topic, labels_text: str, ns_labels: str) -> None:
        if not topic.persistent:
            return
        for family, (_name, value) in zip(self.families, topic.counters.storage.metrics()):
            family.add(labels_text, ns_labels, value)
