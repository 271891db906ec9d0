"""
The bookie's /metrics: BookKeeper's own names (its Prometheus stats provider, as Pulsar's metrics
reference lists them) next to the ones this bookie had before.

BookKeeper's families here:

* server: ``bookie_SERVER_STATUS`` (1 writable, 0 read-only), ``bookie_WRITE_BYTES``,
  ``bookie_READ_BYTES``, and per op the request summaries ``bookkeeper_server_ADD_ENTRY_REQUEST``
  / ``bookkeeper_server_READ_ENTRY_REQUEST`` (arrival to answer, ms, ``success`` label) whose
  ``_count`` is also what BookKeeper's ``bookkeeper_server_ADD_ENTRY_count`` counts (the
  ``bookkeeper_server_ADD_ENTRY`` / ``READ_ENTRY`` summaries repeat them);
* journal: ``bookie_journal_JOURNAL_ADD_ENTRY`` (append to durable) and
  ``bookie_journal_JOURNAL_SYNC`` (fdatasync) summaries in ms, ``bookie_journal_JOURNAL_QUEUE_SIZE``;
* ledger storage: ``bookie_ledgers_count``, ``bookie_write_cache_size`` (bytes),
  ``bookie_write_cache_entries``, ``bookie_DELETED_LEDGER_COUNT``, ``bookie_ledger_writable_dirs``.

BookKeeper declares some of these counters; they are exposed as gauges so that the names stay
BookKeeper's (the Prometheus client appends ``_total`` to counters). Everything is read from the
storage's, journal's and processor's counters at scrape time.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pulsar_twisted.proto import bookie_pb2 as pb

#: BookKeeper's summary quantiles.
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
#: Our op names -> BookKeeper's request stats names.
_REQUEST_NAMES = {"add_entry": "ADD_ENTRY", "read_entry": "READ_ENTRY", "read_lac": "READ_LAC",
                  "delete_ledger": "DELETE_LEDGER", "info": "GET_BOOKIE_INFO"}


def summary_family(name: str, doc: str, by_success: dict) -> Metric:
    """A Prometheus summary ``name`` from ``{success (bool): LatencySummary}``."""
    family = Metric(name, doc, "summary")
    for success, summary in sorted(by_success.items()):
        labels = {"success": "true" if success else "false"}
        for q in QUANTILES:
            family.add_sample(name, dict(labels, quantile=str(q)), summary.quantile(q))
        family.add_sample(f"{name}_count", labels, summary.count)
        family.add_sample(f"{name}_sum", labels, summary.sum_ms)
    return family


def _gauge(name, doc, value):
    return GaugeMetricFamily(name, doc, value=value)


def storage_families(storage, stats: dict, read_only: bool):
    """BookKeeper's server-status, bytes, ledger-storage and journal families of ``storage``
    (a BookieStorage; ``stats`` its ``stats()``)."""
    yield _gauge("bookie_SERVER_STATUS", "1 writable, 0 read-only.", 0 if read_only else 1)
    for name, doc, key in (
            ("bookie_WRITE_BYTES", "Bytes of entries written to the bookie.", "add_bytes"),
            ("bookie_READ_BYTES", "Bytes of entries read from the bookie.", "read_bytes"),
            ("bookie_ledgers_count", "Ledgers stored in the bookie.", "ledgers"),
            ("bookie_write_cache_size", "Bytes in the write cache.", "write_cache_bytes"),
            ("bookie_write_cache_entries", "Entries in the write cache.", "write_cache_entries"),
            ("bookie_DELETED_LEDGER_COUNT", "Ledgers this bookie deleted.", "deleted_ledgers")):
        if key in stats:
            yield _gauge(name, doc, stats[key])
    if "ledger_dirs" in stats:
        yield _gauge("bookie_ledger_writable_dirs", "Ledger directories taking writes.",
                     0 if read_only else stats["ledger_dirs"])
    journal_fn = getattr(storage, "journal_metrics", None)
    if journal_fn is not None:
        journal = journal_fn()
        yield summary_family("bookie_journal_JOURNAL_ADD_ENTRY",
                             "Journal records: append to durable in ms.", {True: journal["add"]})
        yield summary_family("bookie_journal_JOURNAL_SYNC", "Journal fdatasync calls in ms.",
                             {True: journal["sync"]})
        yield _gauge("bookie_journal_JOURNAL_QUEUE_SIZE", "Records waiting for the journal writer.",
                     journal["queue"])


class StorageCollector:
    """The storage and journal families of a bookie served in process (the standalone's, which
    has no bookie-protocol server: its broker's /metrics shows them, as Pulsar's standalone
    shows its bookie's)."""

    def __init__(self, storage):
        self._storage = storage

    def collect(self):
        storage = self._storage
        yield from storage_families(storage, storage.stats(), storage.read_only)


class BookieCollector:
    """Prometheus collector over a BookieServer (its storage, journal and request processor)."""

    def __init__(self, server):
        self._server = server

    def collect(self):
        server = self._server
        stats_fn = getattr(server.storage, "stats", None)
        stats = stats_fn() if stats_fn is not None else {}
        yield from self._legacy(server, stats)
        yield from self._bookkeeper(server, stats)

    def _bookkeeper(self, server, stats):
        yield from storage_families(server.storage, stats, server.read_only)
        by_op = {}
        for (op, success), summary in server.processor.latencies.items():
            by_op.setdefault(op, {})[success] = summary
        for op, bk_name in _REQUEST_NAMES.items():
            yield summary_family(f"bookkeeper_server_{bk_name}_REQUEST",
                                 f"{bk_name} requests: arrival to answer in ms.", by_op.get(op, {}))
        # BookKeeper also times the operation itself (ADD_ENTRY, READ_ENTRY); here the request is
        # the operation, so they are the same figures (BookKeeper's ``..._count`` counters).
        for op, bk_name in (("add_entry", "ADD_ENTRY"), ("read_entry", "READ_ENTRY")):
            yield summary_family(f"bookkeeper_server_{bk_name}", f"{bk_name} operations in ms.",
                                 by_op.get(op, {}))

    def _legacy(self, server, stats):
        counters = [
            ("bookie_add_entry", "Entries added.", "adds"),
            ("bookie_add_entry_bytes", "Bytes of entries added.", "add_bytes"),
            ("bookie_read_entry", "Entries read.", "reads"),
            ("bookie_read_entry_bytes", "Bytes of entries read.", "read_bytes"),
            ("bookie_journal_fsync", "Journal fsyncs.", "fsyncs"),
            ("bookie_journal_groups", "Journal group commits.", "journal_groups"),
            ("bookie_journal_records", "Journal records written.", "journal_records"),
            ("bookie_checkpoints", "Checkpoints of the write cache.", "checkpoints"),
            ("bookie_gc_runs", "Garbage collection runs.", "gc_runs"),
        ]
        for name, doc, key in counters:
            if key in stats:
                yield CounterMetricFamily(name, doc, value=stats[key])
        for name, doc, key in (("bookie_ledgers", "Ledgers stored.", "ledgers"),
                               ("bookie_write_cache_bytes", "Bytes in the write cache.",
                                "write_cache_bytes"),
                               ("bookie_entry_logs", "Entry log files.", "entry_logs")):
            if key in stats:
                yield _gauge(name, doc, stats[key])
        yield _gauge("bookie_read_only", "1 when the bookie is read-only.",
                          1 if server.read_only else 0)
        yield _gauge("bookie_disk_usage_ratio", "Used fraction of the fullest data disk.",
                          server.disk_usage_ratio)
        yield _gauge("bookie_connections", "Open client connections.",
                          len(server.factory.connections))
        requests = CounterMetricFamily("bookie_requests", "Requests answered, by op and status.",
                                       labels=["op", "status"])
        for (op, status), count in sorted(server.processor.counters.items()):
            requests.add_metric([op, pb.StatusCode.Name(status)], count)
        yield requests
