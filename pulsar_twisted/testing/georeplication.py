"""
Two clusters for geo-replication tests: two standalones on this machine (``StandaloneProcess``),
each with its own ``clusterName``, data and ports, set up through their admin REST APIs as a
Pulsar operator would for ``namespaces set-clusters``:

- each cluster holds both clusters' data (``serviceUrl`` and ``brokerServiceUrl``): its own,
  and its peer's, which its replicators connect to;
- a tenant allowed on both clusters, created on each (every cluster has its own metadata);
- a namespace on each, with ``replication_clusters`` naming both (``POST .../replication``),
  deduplication on (the receiving broker drops a replicator's re-sent copies by the original
  producer name and sequence id) and infinite retention (a read from the earliest position
  still finds every message after it was replicated).

Blocking (admin calls, polling with deadlines), like ``testing.process``: for scripts and
``SynchronousTestCase``, never inside a reactor.
"""

import time

from pulsar_twisted.cli.admin import AdminClient, CommandError, HttpError
from pulsar_twisted.testing.process import StandaloneProcess

#: Standalone settings of every site: deduplication on by default, nothing trimmed.
SITE_CONFIG = {
    "brokerDeduplicationEnabled": "true",
    "defaultRetentionTimeInMinutes": -1,
    "defaultRetentionSizeInMB": -1,
}


class GeoPair:
    """
    Standalones named by cluster (``sites[name]``, each a ``StandaloneProcess`` whose ``name`` is
    its cluster's), started by ``start()`` and removed by ``cleanup()``.

    ``config`` is added to ``SITE_CONFIG`` for every site. ``register(tenant, ns)`` does the set-up
    of the module docstring; ``set_clusters`` changes a namespace's replication clusters on every
    site; ``admin(name)`` is an ``AdminClient`` on that site's web service.
    """

    def __init__(self, clusters=("east", "west"), config=None, start_timeout: float = 30.0):
        self.clusters = tuple(clusters)
        self.sites = {}
        for cluster in self.clusters:
            site = StandaloneProcess(dict(SITE_CONFIG, clusterName=cluster, **(config or {})),
                                     start_timeout=start_timeout)
            site.name = cluster           # in errors, logs and the nemesis's fault records
            self.sites[cluster] = site

    def __iter__(self):
        return iter(self.sites.values())

    def start(self) -> None:
        """Every site started (spawned together, then waited for)."""
        for site in self:
            site.spawn()
        for site in self:
            site.wait_ready()

    def cleanup(self) -> None:
        """Every site killed and its directory removed, whatever state it is in."""
        for site in self:
            try:
                site.kill9()
            finally:
                site.cleanup()

    def admin(self, cluster: str, timeout: float = 30.0) -> AdminClient:
        return AdminClient(self.sites[cluster].web_service_url, timeout=timeout)

    # ------------------------------------------------------------------ set-up
    def register_clusters(self) -> None:
        """Every site holds every cluster's data (its own updated, its peers' created)."""
        for cluster in self.clusters:
            admin = self.admin(cluster)
            for named, site in self.sites.items():
                data = {"serviceUrl": site.web_service_url, "brokerServiceUrl": site.service_url}
                path = f"/admin/v2/clusters/{named}"
                try:
                    admin.put(path, data)
                except HttpError as e:
                    if e.status != 409:   # already there (a standalone registers its own)
                        raise
                    admin.post(path, data)

    def register(self, tenant: str, namespace: str, replicated: bool = True,
                 dedup: bool = True) -> None:
        """The set-up of the module docstring; with ``replicated`` False the namespace stays on
        each site's own cluster (``set_clusters`` can replicate it later)."""
        self.register_clusters()
        for cluster in self.clusters:
            admin = self.admin(cluster)
            admin.put(f"/admin/v2/tenants/{tenant}",
                      {"adminRoles": [], "allowedClusters": list(self.clusters)})
            admin.put(f"/admin/v2/namespaces/{tenant}/{namespace}", {})
            path = f"/admin/v2/namespaces/{tenant}/{namespace}"
            admin.post(f"{path}/deduplication", dedup)
            admin.post(f"{path}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        if replicated:
            self.set_clusters(tenant, namespace, self.clusters)

    def set_clusters(self, tenant: str, namespace: str, clusters) -> None:
        """``namespaces set-clusters`` on every site (each keeps its own policies)."""
        for cluster in self.clusters:
            self.admin(cluster).post(f"/admin/v2/namespaces/{tenant}/{namespace}/replication",
                                     list(clusters))

    # ------------------------------------------------------------------ observation
    def topic_stats(self, cluster: str, topic: str) -> dict:
        """The topic's stats on ``cluster`` (``topic``: ``persistent://t/ns/name``); {} when the
        site does not answer or has no such topic."""
        path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats"
        try:
            return self.admin(cluster, timeout=10).get(path) or {}
        except (CommandError, OSError):
            return {}

    def internal_stats(self, cluster: str, topic: str) -> dict:
        """The topic's internal stats on ``cluster``; {} when unknown."""
        path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/internalStats"
        try:
            return self.admin(cluster, timeout=10).get(path) or {}
        except (CommandError, OSError):
            return {}

    def entries(self, cluster: str, topic: str):
        """The topic's ``numberOfEntries`` on ``cluster`` (internal stats), None if unknown."""
        return self.internal_stats(cluster, topic).get("numberOfEntries")

    def replication_backlog(self, cluster: str, topic: str, remote: str):
        """``replication.<remote>.replicationBacklog`` of the topic on ``cluster``; when the
        stats have no such entry, 0 or 1 from the internal stats (whether the replicator's cursor
        ``pulsar.repl.<remote>`` has deleted up to the last confirmed entry); None when neither
        says (no replicator there, or a broker without geo-replication)."""
        stats = self.topic_stats(cluster, topic).get("replication") or {}
        backlog = (stats.get(remote) or {}).get("replicationBacklog")
        if backlog is not None:
            return backlog
        internal = self.internal_stats(cluster, topic)
        cursor = (internal.get("cursors") or {}).get(f"pulsar.repl.{remote}")
        if cursor is None or not internal.get("lastConfirmedEntry"):
            return None
        return 0 if (_position(cursor["markDeletePosition"])
                     >= _position(internal["lastConfirmedEntry"])) else 1

    def wait_drained(self, topics, timeout: float, stable: float = 5.0) -> str:
        """Wait until every topic's replicators on every site report a backlog of 0
        (``replication_backlog``), or (when some site reports no replicator at all) until the
        topics' entry counts on every site have not changed for ``stable`` seconds; at most
        ``timeout`` seconds. How it ended: "drained", "stable ..." or "timed out: ..." (with the
        last figures)."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        figures = {}
        while time.monotonic() < deadline:
            figures = {(c, t, r): self.replication_backlog(c, t, r)
                       for c in self.clusters for t in topics for r in self.clusters if r != c}
            if all(v == 0 for v in figures.values()):
                return "drained"
            counts = {(c, t): self.entries(c, t) for c in self.clusters for t in topics}
            if counts != last:
                last, since = counts, time.monotonic()
            elif (None in figures.values() and None not in counts.values()
                  and time.monotonic() - since >= stable):
                return "stable (no replication stats)"
            time.sleep(0.5)
        return f"timed out: backlogs {figures}, entries {last}"


def _position(text: str) -> tuple:
    """(ledger, entry) of a managed-ledger position written ``L:E``."""
    ledger, entry = text.split(":")
    return int(ledger), int(entry)
