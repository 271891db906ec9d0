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
        register_cluster_data({c: self.admin(c) for c in self.clusters},
                              {c: cluster_data(s.web_service_url, s.service_url)
                               for c, s in self.sites.items()})

    def register(self, tenant: str, namespace: str, replicated: bool = True,
                 dedup: bool = True) -> None:
        """The set-up of the module docstring; with ``replicated`` False the namespace stays on
        each site's own cluster (``set_clusters`` can replicate it later)."""
        self.register_clusters()
        for cluster in self.clusters:
            admin = self.admin(cluster)
            allow_tenant(admin, tenant, self.clusters)
            admin.put(f"/admin/v2/namespaces/{tenant}/{namespace}", {})
            namespace_policies(admin, tenant, namespace, dedup)
        if replicated:
            self.set_clusters(tenant, namespace, self.clusters)

    def set_clusters(self, tenant: str, namespace: str, clusters) -> None:
        """``namespaces set-clusters`` on every site (each keeps its own policies)."""
        for cluster in self.clusters:
            set_replication_clusters(self.admin(cluster), tenant, namespace, clusters)

    # ------------------------------------------------------------------ observation
    def topic_stats(self, cluster: str, topic: str) -> dict:
        """``topic_stats`` on ``cluster``'s site."""
        return topic_stats(self.admin(cluster, timeout=10), topic)

    def internal_stats(self, cluster: str, topic: str) -> dict:
        """``internal_stats`` on ``cluster``'s site."""
        return internal_stats(self.admin(cluster, timeout=10), topic)

    def entries(self, cluster: str, topic: str):
        """The topic's ``numberOfEntries`` on ``cluster`` (internal stats), None if unknown."""
        return self.internal_stats(cluster, topic).get("numberOfEntries")

    def replication_backlog(self, cluster: str, topic: str, remote: str):
        """``replication_backlog`` of the topic on ``cluster``'s site."""
        return replication_backlog(self.admin(cluster, timeout=10), topic, remote)

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


# ---------------------------------------------------------------------- shared set-up steps
# What a Pulsar operator does for geo-replication, one admin client (``AdminClient``) per
# cluster; used by ``GeoPair`` and by the chaos runner's ``--replicate`` (a cluster of brokers
# replicating to a standalone).

def cluster_data(service_url: str, broker_service_url: str) -> dict:
    """A cluster's data as ``PUT /admin/v2/clusters/<name>`` takes it."""
    return {"serviceUrl": service_url, "brokerServiceUrl": broker_service_url}


def register_cluster_data(admins: dict, data: dict) -> None:
    """Every cluster of ``admins`` (name -> AdminClient) holds the data of every cluster of
    ``data`` (name -> ``cluster_data``): created, or updated where it is already (409: a
    standalone or ``initialize-cluster-metadata`` registers the cluster's own)."""
    for admin in admins.values():
        for named, body in data.items():
            path = f"/admin/v2/clusters/{named}"
            try:
                admin.put(path, body)
            except HttpError as e:
                if e.status != 409:
                    raise
                admin.post(path, body)


def allow_tenant(admin: AdminClient, tenant: str, clusters) -> None:
    """``tenant`` exists on the admin's cluster and is allowed on ``clusters`` (created, or
    updated when it exists already, as ``public`` does)."""
    body = {"adminRoles": [], "allowedClusters": list(clusters)}
    try:
        admin.put(f"/admin/v2/tenants/{tenant}", body)
    except HttpError as e:
        if e.status != 409:
            raise
        admin.post(f"/admin/v2/tenants/{tenant}", body)


def namespace_policies(admin: AdminClient, tenant: str, namespace: str, dedup: bool) -> None:
    """Deduplication as asked and infinite retention (a read from the earliest position still
    finds every replicated message) on the namespace."""
    path = f"/admin/v2/namespaces/{tenant}/{namespace}"
    admin.post(f"{path}/deduplication", dedup)
    admin.post(f"{path}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})


def set_replication_clusters(admin: AdminClient, tenant: str, namespace: str, clusters) -> None:
    """``namespaces set-clusters`` on the admin's cluster."""
    admin.post(f"/admin/v2/namespaces/{tenant}/{namespace}/replication", list(clusters))


def topic_stats(admin: AdminClient, topic: str) -> dict:
    """The topic's stats (``topic``: ``persistent://t/ns/name``); {} when the cluster does not
    answer or has no such topic. A broker that does not own the topic redirects to its owner,
    which ``AdminClient`` follows."""
    path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats"
    try:
        return admin.get(path) or {}
    except (CommandError, OSError):
        return {}


def internal_stats(admin: AdminClient, topic: str) -> dict:
    """The topic's internal stats; {} when unknown."""
    path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/internalStats"
    try:
        return admin.get(path) or {}
    except (CommandError, OSError):
        return {}


def replication_backlog(admin: AdminClient, topic: str, remote: str):
    """``replication.<remote>.replicationBacklog`` of the topic; when the stats have no such
    entry, 0 or 1 from the internal stats (whether the replicator's cursor
    ``pulsar.repl.<remote>`` has deleted up to the last confirmed entry); None when neither says
    (no replicator there, or a broker without geo-replication)."""
    stats = topic_stats(admin, topic).get("replication") or {}
    backlog = (stats.get(remote) or {}).get("replicationBacklog")
    if backlog is not None:
        return backlog
    internal = internal_stats(admin, topic)
    cursor = (internal.get("cursors") or {}).get(f"pulsar.repl.{remote}")
    if cursor is None or not internal.get("lastConfirmedEntry"):
        return None
    return 0 if (_position(cursor["markDeletePosition"])
                 >= _position(internal["lastConfirmedEntry"])) else 1


def _position(text: str) -> tuple:
    """(ledger, entry) of a managed-ledger position written ``L:E``."""
    ledger, entry = text.split(":")
    return int(ledger), int(entry)
