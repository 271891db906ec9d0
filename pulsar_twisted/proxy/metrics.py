"""
The proxy's counters and their Prometheus exposition under Pulsar's proxy metric names (each with
the ``cluster`` label, as Pulsar's proxy exports them):

* ``pulsar_proxy_active_connections`` (gauge): client connections open now;
* ``pulsar_proxy_new_connections`` (counter): client connections accepted;
* ``pulsar_proxy_rejected_connections`` (counter): refused by maxConcurrentInboundConnections;
* ``pulsar_proxy_binary_ops`` (counter): reads relayed between clients and brokers, both ways;
* ``pulsar_proxy_binary_bytes`` (counter): bytes relayed, both ways;
* ``pulsar_proxy_lookup_requests``, ``pulsar_proxy_partitions_metadata_requests``,
  ``pulsar_proxy_get_topics_of_namespace_requests``, ``pulsar_proxy_get_schema_requests``,
  ``pulsar_proxy_rejected_lookup_requests`` (counters): the requests the proxy answers itself.

Counters are plain integers bumped by the connections; the text is built at scrape time.
"""

#: (attribute, metric name, type, help)
METRICS = [
    ("active_connections", "pulsar_proxy_active_connections", "gauge",
     "Number of connections currently active in the proxy"),
    ("new_connections", "pulsar_proxy_new_connections", "counter",
     "Counter of connections being opened in the proxy"),
    ("rejected_connections", "pulsar_proxy_rejected_connections", "counter",
     "Counter for connections rejected due to throttling"),
    ("binary_ops", "pulsar_proxy_binary_ops", "counter", "Counter of proxy operations"),
    ("binary_bytes", "pulsar_proxy_binary_bytes", "counter", "Counter of proxy bytes"),
    ("lookup_requests", "pulsar_proxy_lookup_requests", "counter", "Counter of topic lookup requests"),
    ("partitions_metadata_requests", "pulsar_proxy_partitions_metadata_requests", "counter",
     "Counter of partitions metadata requests"),
    ("get_topics_of_namespace_requests", "pulsar_proxy_get_topics_of_namespace_requests", "counter",
     "Counter of getTopicsOfNamespace requests"),
    ("get_schema_requests", "pulsar_proxy_get_schema_requests", "counter",
     "Counter of schema requests"),
    ("rejected_lookup_requests", "pulsar_proxy_rejected_lookup_requests", "counter",
     "Counter of lookup requests refused by maxConcurrentLookupRequests"),
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ProxyMetrics:
    """The counters (attributes named as in ``METRICS``)."""

    def __init__(self, cluster: str = ""):
        self.cluster = cluster
        for attribute, _, _, _ in METRICS:
            setattr(self, attribute, 0)

    def relayed(self, size: int) -> None:
        """One read of ``size`` bytes passed from one side of a relay to the other."""
        self.binary_ops += 1
        self.binary_bytes += size

    def exposition(self) -> str:
        """The Prometheus text format of every metric."""
        label = '{cluster="%s"}' % self.cluster.replace("\\", "\\\\").replace('"', '\\"')
        lines = []
        for attribute, name, kind, help_text in METRICS:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{label} {float(getattr(self, attribute))}")
        return "\n".join(lines) + "\n"
