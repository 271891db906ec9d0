"""
``--replicate`` of a chaos run: the cluster's chaos namespace geo-replicated to one standalone of
its own (the remote cluster, ``REMOTE``), set up before the workload and checked after the
cluster's own read-back.

Set-up (``setup``, with the steps of ``testing.georeplication``): each cluster holds both
clusters' data (the chaos cluster's ``brokerServiceUrl`` names every broker), the chaos tenant is
allowed on both, the namespace exists on the remote with deduplication on and infinite retention,
and ``replication_clusters`` is [local, remote] on both. The partitioned chaos topic is then
created through the cluster's admin API, whose broker creates it on the remote cluster too
(``ensure_partitioned`` waits for that, and creates it there itself if it does not come, saying
so).

Check (``check_replication``): once the replicators' backlogs are 0 on every partition
(``wait_replicated``, bounded; asked of any broker, which redirects to the owner), every
partition is read on the remote from the earliest position and the copy is checked with
``geo_checker.check_direction``: every message the cluster acknowledged is on the remote
(``lost``), none twice, in order per producer, and nothing stored on the cluster is missing there
(``unreplicated``).

Blocking, like the rest of ``chaos``.
"""

import time

from pulsar_twisted.cli.admin import AdminClient, CommandError, HttpError
from pulsar_twisted.testing.chaos.geo_checker import GeoHistory, GeoVerdict, check_direction
from pulsar_twisted.testing.chaos.history import History
from pulsar_twisted.testing.chaos.workload import make_client, read_back
from pulsar_twisted.testing.georeplication import (SITE_CONFIG, allow_tenant, cluster_data,
                                                   namespace_policies, register_cluster_data,
                                                   replication_backlog, set_replication_clusters)
from pulsar_twisted.testing.process import StandaloneProcess

#: The remote cluster's name (its standalone's ``clusterName``, and the process's name in the
#: faults and logs).
REMOTE = "remote"


def make_remote(config: dict = None, name: str = REMOTE) -> StandaloneProcess:
    """The remote standalone (not started): nothing trimmed, deduplication on, ``config`` over
    that."""
    site = StandaloneProcess(dict(SITE_CONFIG, clusterName=name, **(config or {})))
    site.name = name
    return site


def local_name(cluster) -> str:
    """The chaos cluster's name, as its brokers are configured."""
    return cluster.brokers[0].settings["clusterName"]


def brokers_url(cluster) -> str:
    """``pulsar://`` with every broker of the cluster (the remote's replicators, if any, and the
    cluster data name them all, not only the broker that may be down)."""
    return "pulsar://" + ",".join(f"{b.host}:{b.port}" for b in cluster.brokers)


def setup(cluster, remote, namespace: str, admin=AdminClient) -> None:
    """The set-up of the module docstring, for ``namespace`` (``tenant/ns``) already on the
    cluster; ``admin(url)`` makes an admin client (a fake in the tests)."""
    tenant, ns = namespace.split("/")
    local = local_name(cluster)
    admins = {local: admin(cluster.brokers[0].web_service_url), remote.name: admin(
        remote.web_service_url)}
    register_cluster_data(admins, {
        local: cluster_data(cluster.brokers[0].web_service_url, brokers_url(cluster)),
        remote.name: cluster_data(remote.web_service_url, remote.service_url)})
    for client in admins.values():
        allow_tenant(client, tenant, (local, remote.name))
    try:
        admins[remote.name].put(f"/admin/v2/namespaces/{tenant}/{ns}", {})
    except HttpError as e:
        if e.status != 409:       # a standalone makes public/default itself
            raise
    namespace_policies(admins[remote.name], tenant, ns, dedup=True)
    for client in admins.values():
        set_replication_clusters(client, tenant, ns, (local, remote.name))


def partitions_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/partitions"


def ensure_partitioned(remote, topic: str, partitions: int, timeout: float = 15.0,
                       admin=AdminClient, sleep=time.sleep, monotonic=time.monotonic) -> str:
    """Wait (at most ``timeout``) until the remote knows ``topic`` as partitioned with
    ``partitions`` partitions; create it there if it does not. How it came, for the run's meta."""
    client = admin(remote.web_service_url)
    deadline = monotonic() + timeout
    seen = None
    while True:
        try:
            seen = (client.get(partitions_path(topic)) or {}).get("partitions")
        except (CommandError, OSError) as e:
            seen = f"{type(e).__name__}: {e}"
        if seen == partitions:
            return f"created on {remote.name} by the cluster's broker"
        if monotonic() >= deadline:
            break
        sleep(0.5)
    client.put(partitions_path(topic), partitions)
    return (f"NOT created on {remote.name} by the cluster's broker within {timeout:.0f}s "
            f"(saw {seen!r}): created there by the harness")


def backlogs(admins, topics, remote: str) -> dict:
    """{topic: its replicator's backlog to ``remote``, or None}, asking each admin client in
    turn (any broker of the cluster answers, redirecting to the owner) until one knows."""
    figures = {}
    for topic in topics:
        figures[topic] = None
        for client in admins:
            backlog = replication_backlog(client, topic, remote)
            if backlog is not None:
                figures[topic] = backlog
                break
    return figures


def sample_backlogs(cluster, remote, topic: str, partitions: int, admin=AdminClient) -> dict:
    """``backlogs`` of every partition of ``topic`` once, by partition index (the run samples
    them when its producers stop: how far behind replication is then)."""
    admins = [admin(b.web_service_url, timeout=10) for b in cluster.brokers]
    names = [f"{topic}-partition-{p}" for p in range(partitions)]
    return {p: v for p, v in enumerate(backlogs(admins, names, remote.name).values())}


def wait_replicated(admins, topics, remote: str, timeout: float, sleep=time.sleep,
                    monotonic=time.monotonic) -> tuple:
    """Wait until every topic's replicator to ``remote`` reports a backlog of 0, asking each
    admin client in turn (any broker of the cluster answers, redirecting to the owner) until one
    knows; at most ``timeout`` seconds. ("drained" or "timed out", {topic: last backlog})."""
    deadline = monotonic() + timeout
    while True:
        figures = backlogs(admins, topics, remote)
        if all(v == 0 for v in figures.values()):
            return "drained", figures
        if monotonic() >= deadline:
            return "timed out", figures
        sleep(1.0)


def check_copy(history: History, stored: History, local: str, remote: str,
               producers) -> GeoVerdict:
    """The direction local->remote of ``geo_checker`` for a run whose ``producers`` all publish
    on the cluster: ``history`` holds their sends and the cluster's storage, ``stored`` the
    remote's storage of the same partitions."""
    topics = {p: str(p) for p in range(history.partitions)}
    geo = GeoHistory((local, remote), sends=history, stored={local: history, remote: stored},
                     sources={name: local for name in producers}, topics=topics)
    verdict = GeoVerdict()
    check_direction(geo, local, remote, verdict)
    return verdict


def check_replication(cluster, remote, topic: str, partitions: int, history: History, producers,
                      timeout: float, read_timeout: float, log=print, admin=AdminClient) -> dict:
    """After the cluster's own read-back (``history.storage``): wait for the replicators, read
    the remote's copy, check it. The figures as JSON-able values, ``ok`` among them."""
    local = local_name(cluster)
    names = [f"{topic}-partition-{p}" for p in range(partitions)]
    admins = [admin(b.web_service_url, timeout=10) for b in cluster.brokers]
    started = time.monotonic()
    drain, backlogs = wait_replicated(admins, names, remote.name, timeout)
    seconds = round(time.monotonic() - started, 1)
    log(f"replication to {remote.name}: {drain} after {seconds}s (backlogs {backlogs}); "
        f"reading back the remote copy")
    stored = History(partitions=partitions)
    client = make_client(remote.service_url, f"{remote.directory}/client-readers.log")
    try:
        read_back(client, topic, partitions, stored, timeout=read_timeout)
    finally:
        # Here, not at the top: the runner imports this module.
        from pulsar_twisted.testing.chaos.runner import close_in_background
        close_in_background(client)
    verdict = check_copy(history, stored, local, remote.name, producers)
    direction = f"{local}->{remote.name}"
    out = verdict.to_json()
    return {"direction": direction, "drain": drain, "drain_seconds": seconds,
            "backlogs": backlogs, "verdict": out["replicated"][direction],
            "unreplicated": out["unreplicated"][direction],
            "not_at_source": out["not_at_source"][direction],
            "examples": out["examples"], "violations": out["violations"], "ok": out["ok"]}


def format_replication(figures: dict) -> str:
    """The figures of ``check_replication`` as a few lines for a terminal."""
    v = figures["verdict"]
    lines = [
        f"replication {figures['direction']}: backlogs when the producers stopped "
        f"{figures.get('backlog_at_stop', '?')}; {figures['drain']} "
        f"{figures['drain_seconds']}s after the cluster's read-back; partitioned topic: "
        f"{figures.get('remote_topic', '?')}",
        f"  remote: acked on the cluster {v['sent']}  stored {v['stored']} entries, "
        f"{v['stored_distinct']} distinct  LOST {v['lost']}  STORED TWICE {v['stored_twice']} "
        f"({v['extra_copies']} copies)  ORDER {v['storage_order_violations']}  unreplicated "
        f"{figures['unreplicated']} (not at source {figures['not_at_source']})  unreadable "
        f"{v['unreadable_partitions'] or 0}  undecodable {v['undecodable']}",
    ]
    for figure, examples in sorted(v["examples"].items()):
        lines.append(f"  e.g. remote {figure}: {examples}")
    for figure, examples in sorted(figures["examples"].items()):
        lines.append(f"  e.g. {figure}: {examples}")
    lines.append("REPLICATION VERDICT: " + ("ok" if figures["ok"]
                                            else f"VIOLATIONS {figures['violations']}"))
    return "\n".join(lines)
