"""
One chaos run, end to end and bounded: start the cluster, set dedup on for the namespace, create the
partitioned topic, subscribe, publish, run the nemesis, heal, let the producers finish, read every
partition back, drain the subscriptions, check. ``run(ChaosConfig(...))`` returns (History,
Verdict); every process and namespace it made is gone when it returns or raises (Ctrl-C included).
With ``proxy`` every client goes through a Pulsar proxy (``twistd pulsar-proxy``) instead of to the
brokers directly. With ``replicate`` the namespace is geo-replicated to a standalone of the run's
own (``replica``), and after the cluster's read-back the remote copy is checked too
(``history.meta["replication"]``). With ``offload`` the brokers offload every sealed ledger to an
S3 server of the run's own (``tiered``), and before the read-back the offloads are waited for and
the bookies' copies deleted, so that the read-back reads old ledgers from S3 alone
(``history.meta["offload"]``, which the checker judges).
"""

import json
import os
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

from pulsar_twisted.testing.chaos import checker
from pulsar_twisted.testing.chaos.history import History
from pulsar_twisted.testing.chaos import netns, replica, tiered
from pulsar_twisted.testing.chaos.nemesis import (DISK_KINDS, KINDS, OFFLOAD_KINDS, PARTITION_KINDS,
                                                  PROXY_KINDS, REMOTE_KINDS, ZK_KINDS, Nemesis)
from pulsar_twisted.testing.chaos.workload import (Consumers, Producers, make_client, read_back)
from pulsar_twisted.testing.cluster import ZK_ENV, Cluster, ClusterError, ZooKeeperServer


@dataclass
class ChaosConfig:
    seed: int = 1
    duration: float = 75.0            # seconds of nemesis
    quorum: tuple = (3, 3, 2)         # E, Qw, Qa
    bookies: int = 3
    brokers: int = 2
    partitions: int = 3
    producers: int = 7
    rate: float = 280.0               # messages per second, all producers together
    kinds: tuple = KINDS + PARTITION_KINDS
    #: Daemons run in network namespaces of their own (the targets of partition faults) when a
    #: partition kind is asked for and the machine allows it.
    isolate: tuple = ("bookie2", "broker1")
    session_timeout_ms: int = 4000
    #: Small ledgers (managedLedgerMaxEntriesPerLedger, no minimum rollover time): every partition
    #: switches ledgers about once a second, so faults also land on the switches (the ledger made
    #: ahead, the close and the record written at once).
    max_entries_per_ledger: int = 100
    warmup: float = 3.0               # publishing before the first fault
    after_heal: float = 8.0           # publishing after the heal
    send_timeout_ms: int = 30000      # the official client's send timeout
    settle: float = 45.0              # for the last callbacks (longer than the send timeout)
    read_timeout: float = 90.0        # reading every partition back, all attempts together
    drain_idle: float = 10.0
    drain_timeout: float = 90.0
    #: None: PULSAR_TEST_ZK, else a ZooKeeper the harness starts (one of the run's own, stopped at
    #: its end, when a ZooKeeper fault is asked for: no other cluster shares what it kills).
    zk_hosts: str = None
    #: Broker deduplication on (False: a resent stored message shows as STORED TWICE, so that a
    #: run proves producers were answered before they were moved, not that dedup hid resends).
    dedup: bool = True
    #: One Pulsar proxy (discovering the brokers from the metadata store), started after the
    #: brokers; the producers, consumers and readers connect to it alone, so every fault is seen
    #: through the proxy's lookups and relays (and ``kill-proxy`` has a target).
    proxy: bool = False
    #: The namespace replicated to a standalone of the run's own (cluster ``replica.REMOTE``),
    #: set up before the workload; after the cluster's read-back, the replicators waited for (at
    #: most ``replication_timeout``) and the remote copy read back and checked.
    replicate: bool = False
    replication_timeout: float = 90.0
    #: Tiered storage (``tiered``): an S3 server (moto) of the run's own, every sealed ledger
    #: offloaded to it and deleted from the bookies at the next trim; before the read-back, the
    #: offloads waited for (at most ``offload_timeout``) and the bookies' copies deleted.
    offload: bool = False
    offload_timeout: float = 60.0
    keep_logs: str = None             # copy the daemons' and clients' logs here before cleanup
    log: object = field(default=print, repr=False)


def admin(url: str, method: str, body) -> int:
    """One admin REST call (JSON body); the HTTP status (follows no redirect)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        raise ClusterError(f"{method} {url}: {e.code} {e.read()[:300]!r}")


def close_in_background(client, timeout: float = 10.0) -> None:
    """``client.close()`` on a thread, waited for at most ``timeout``: a client talking to a
    stuck broker may hang in close, and a run must end."""
    thread = threading.Thread(target=lambda: _quietly(client.close), daemon=True)
    thread.start()
    thread.join(timeout)


def _quietly(call):
    try:
        call()
    except Exception:
        pass


def make_zookeeper(config: ChaosConfig) -> ZooKeeperServer:
    """The run's ZooKeeper: ``zk_hosts``'s (never touched by the nemesis), else PULSAR_TEST_ZK's
    (the same), else one the harness starts: a private one if a ZooKeeper fault is asked for (the
    caller stops it), else the shared one."""
    if config.zk_hosts:
        return ZooKeeperServer(config.zk_hosts)
    if any(k in ZK_KINDS for k in config.kinds) and not os.environ.get(ZK_ENV):
        return ZooKeeperServer.launch()
    return ZooKeeperServer.shared()


def make_cluster(config: ChaosConfig, zk: ZooKeeperServer = None, s3=None) -> Cluster:
    """The run's cluster (not started); with ``s3`` (an ``offload`` run's server) every broker
    offloads to it."""
    zk = zk if zk is not None else make_zookeeper(config)
    ensemble, write, ack = config.quorum
    broker_config = {
        "managedLedgerDefaultEnsembleSize": ensemble, "managedLedgerDefaultWriteQuorum": write,
        "managedLedgerDefaultAckQuorum": ack,
        "brokerDeduplicationEnabled": "true" if config.dedup else "false",
        "zooKeeperSessionTimeoutMillis": config.session_timeout_ms,
        "bookkeeperClientTimeoutInSeconds": 5,
        "defaultRetentionTimeInMinutes": -1, "defaultRetentionSizeInMB": -1,
        "managedLedgerMaxEntriesPerLedger": config.max_entries_per_ledger,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    }
    if s3 is not None:
        broker_config.update(tiered.broker_config(s3))
    bookie_config = {"zkTimeout": config.session_timeout_ms}
    cluster = Cluster(zk, bookies=config.bookies, brokers=config.brokers,
                      broker_config=broker_config, bookie_config=bookie_config)
    if config.proxy:
        cluster.add_proxy({"zooKeeperSessionTimeoutMillis": config.session_timeout_ms})
    return cluster


def client_service_url(cluster: Cluster) -> str:
    """Where the workload's clients connect: the proxy if the cluster has one, else every
    broker (the client takes them in turn for its lookups)."""
    if cluster.proxies:
        return cluster.proxies[0].service_url
    return "pulsar://" + ",".join(f"{b.host}:{b.port}" for b in cluster.brokers)


def _daemons(cluster: Cluster, remote=None) -> list:
    """The processes the run kills on its way out and whose logs it keeps."""
    return cluster.proxies + cluster.brokers + cluster.bookies + ([remote] if remote else [])


def make_remote(config: ChaosConfig):
    """The remote standalone of a ``replicate`` run (None without): ledgers as small as the
    cluster's, so its reads also cross ledger switches."""
    if not config.replicate:
        return None
    return replica.make_remote({
        "managedLedgerMaxEntriesPerLedger": config.max_entries_per_ledger,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0})


def make_s3(config: ChaosConfig):
    """The S3 server of an ``offload`` run, started with its bucket (None without); the caller
    stops it (``stop_s3``)."""
    if not config.offload:
        return None
    return tiered.make_s3(tempfile.mkdtemp(prefix="pulsar-chaos-s3-"))


def stop_s3(s3, keep_logs: str = None) -> None:
    if s3 is None:
        return
    s3.stop()
    if keep_logs and os.path.exists(s3.log_path):
        os.makedirs(keep_logs, exist_ok=True)
        shutil.copy(s3.log_path, os.path.join(keep_logs, "s3-moto.log"))
    shutil.rmtree(s3.workdir, ignore_errors=True)


def run(config: ChaosConfig) -> tuple:
    """(History, Verdict) of one run; ClusterError if the cluster could not be started."""
    log = config.log
    zk = make_zookeeper(config)
    private_zk = zk.owned and zk is not ZooKeeperServer._shared
    s3 = None
    try:
        s3 = make_s3(config)
        cluster = make_cluster(config, zk, s3)
    except BaseException:
        stop_s3(s3)
        if private_zk:
            zk.stop()
        raise
    if any(k in ZK_KINDS for k in config.kinds) and not zk.owned:
        log(f"no ZooKeeper faults: the ZooKeeper at {zk.hosts} was not started by the harness")
    if any(k in PROXY_KINDS for k in config.kinds) and not config.proxy:
        log("no proxy faults: the run has no proxy (ChaosConfig.proxy, --proxy)")
    if any(k in REMOTE_KINDS for k in config.kinds) and not config.replicate:
        log("no remote faults: the run replicates nowhere (ChaosConfig.replicate, --replicate)")
    if any(k in OFFLOAD_KINDS for k in config.kinds) and not config.offload:
        log("no S3 faults: the run offloads nowhere (ChaosConfig.offload, --offload)")
    try:
        remote = make_remote(config)
    except BaseException:
        cluster.cleanup()
        stop_s3(s3)
        if private_zk:
            zk.stop()
        raise
    history = History(partitions=config.partitions)
    history.meta.update(seed=config.seed, duration=config.duration, quorum=list(config.quorum),
                        dedup=config.dedup, kinds=list(config.kinds), brokers=config.brokers,
                        proxy=config.proxy, replicate=config.replicate, offloading=config.offload,
                        bookies=config.bookies, rate=config.rate,
                        producers=config.producers, directory=cluster.directory)
    clients = []
    nemesis = None
    isolations = []
    disks = []
    try:
        started = time.monotonic()
        isolations = _isolate(cluster, config, remote)
        history.meta["isolated"] = [i.process.name for i in isolations]
        disks = _lazy_disks(cluster, config)
        history.meta["lazyfs_bookies"] = [b.name for b in cluster.bookies if b.disk is not None]
        if remote is not None:
            remote.spawn()                 # starting beside the cluster
        cluster.start()
        if remote is not None:
            remote.wait_ready()
        for proxy in cluster.proxies:      # after the brokers: it discovers them on its lookups
            proxy.start()
        log(f"cluster up in {time.monotonic() - started:.1f}s ({cluster.directory})"
            + (f"; offloading to {s3.endpoint}/{tiered.BUCKET}" if s3 is not None else ""))
        topic = f"persistent://public/default/chaos-{uuid.uuid4().hex[:8]}"
        history.meta["topic"] = topic
        # Admin through a broker picked by the seed: on today's code, which broker handles
        # PUT .../partitions matters (issue 11, a non-owner caching the partitions' state).
        web = cluster.brokers[config.seed % len(cluster.brokers)].web_service_url
        admin(f"{web}/admin/v2/namespaces/public/default/deduplication", "POST", config.dedup)
        # Infinite retention: the consumers acknowledge everything, and the read-back must still
        # find every entry ever stored, not only what trimming left.
        admin(f"{web}/admin/v2/namespaces/public/default/retention", "POST",
              {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        if remote is not None:
            # Before the topic exists: its replicators' cursors start at its (empty) end.
            replica.setup(cluster, remote, "public/default")
        admin(f"{web}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/partitions",
              "PUT", config.partitions)
        if remote is not None:
            history.meta["remote_topic"] = replica.ensure_partitioned(remote, topic,
                                                                      config.partitions)
            log(f"replicating public/default to {remote.name} ({remote.service_url}); "
                f"partitioned topic {history.meta['remote_topic']}")
        service_url = client_service_url(cluster)
        consumer_client = make_client(service_url, f"{cluster.directory}/client-consumers.log")
        clients.append(consumer_client)
        consumers = Consumers(consumer_client, topic, history)
        consumers.start()
        producer_client = make_client(service_url, f"{cluster.directory}/client-producers.log")
        clients.append(producer_client)
        producers = Producers(producer_client, topic, history, count=config.producers,
                              rate=config.rate, prefix=f"chaos{config.seed}",
                              send_timeout_millis=config.send_timeout_ms)
        producers.start()
        log(f"publishing to {topic} through {service_url} ({config.producers} producers, "
            f"{config.rate:.0f} msg/s), consumers on {sorted(history.subscriptions)}")
        time.sleep(config.warmup)

        nemesis = Nemesis(cluster, history, config.seed, kinds=config.kinds,
                          session_timeout=config.session_timeout_ms / 1000.0, log=log,
                          remote=remote, s3=s3)
        # On this (the main) thread, not a helper: a child asks for SIGKILL when the thread that
        # spawned it exits (PR_SET_PDEATHSIG follows the thread), so daemons restarted from a
        # short-lived thread would die with it.
        nemesis.run(config.duration)
        heal_started = time.monotonic()
        try:
            nemesis.heal()
        except ClusterError as e:
            # Not the end of the run: what the stuck cluster still answers is part of the verdict.
            history.meta["heal_error"] = str(e)[:2000]
            log(f"heal incomplete: {str(e)[:300]}")
        history.meta["healed_at"] = time.time()
        history.meta["heal_seconds"] = round(time.monotonic() - heal_started, 1)
        log(f"healed in {history.meta['heal_seconds']:.1f}s; {len(history.faults)} faults; "
            f"publishing {config.after_heal:.0f}s more")
        time.sleep(config.after_heal)
        producers.stop()
        unanswered = producers.wait_answered(config.settle)
        log(f"producers stopped; {unanswered} sends still unanswered after {config.settle:.0f}s")
        if remote is not None:
            history.meta["replication_backlog_at_stop"] = replica.sample_backlogs(
                cluster, remote, topic, config.partitions)
        if s3 is not None:
            # Before the read-back, so that it reads the offloaded ledgers from S3 alone.
            try:
                history.meta["offload"] = tiered.settle(cluster, s3, topic, config.partitions,
                                                        config.offload_timeout, log=log)
            except Exception as e:
                # No figures: the checker then finds the offload unexercised.
                history.meta["offload"] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                log(f"offload: no figures: {history.meta['offload']['error']}")

        reader_client = make_client(service_url, f"{cluster.directory}/client-readers.log")
        clients.append(reader_client)
        read_back(reader_client, topic, config.partitions, history, timeout=config.read_timeout)
        stored = {(e.producer, e.seq) for entries in history.storage.values() for e in entries}
        log(f"read back {sum(len(v) for v in history.storage.values())} entries "
            f"(unreadable partitions: {history.unreadable or 'none'}); draining subscriptions")
        consumers.drain(stored, config.drain_idle, config.drain_timeout)
        consumers.stop()
        if remote is not None:
            figures = replica.check_replication(
                cluster, remote, topic, config.partitions, history, producers.names,
                config.replication_timeout, config.read_timeout, log=log)
            figures["remote_topic"] = history.meta.get("remote_topic")
            figures["backlog_at_stop"] = history.meta.get("replication_backlog_at_stop")
            history.meta["replication"] = figures
        history.meta["seconds"] = round(time.monotonic() - started, 1)
        history.meta["nemesis_errors"] = list(nemesis.errors)
        history.meta["tracebacks"] = {name: len(blocks)
                                      for name, blocks in cluster.tracebacks().items()}
        if remote is not None and "Traceback" in remote.log_text():
            history.meta["tracebacks"][remote.name] = remote.log_text().count("Traceback")
        return history, checker.check(history)
    finally:
        if nemesis is not None:
            nemesis.stop()
        for client in clients:
            close_in_background(client)
        for process in _daemons(cluster, remote):
            process.kill9()
        if config.keep_logs:
            _copy_logs(cluster, config.keep_logs, remote)
        for disk in disks:   # unmounted before cleanup removes the directories under them
            disk.stop()
        if zk.owned:         # a run stopped inside a ZooKeeper fault: the chroot is removed
            _quietly(zk.resume)
            if not zk.running():
                _quietly(zk.start)
        cluster.cleanup()
        if remote is not None:
            remote.cleanup()
        stop_s3(s3, config.keep_logs)
        for isolation in isolations:
            isolation.cleanup()
        if private_zk:
            zk.stop()


def _isolate(cluster: Cluster, config: ChaosConfig, remote=None) -> list:
    """Put ``config.isolate``'s daemons in network namespaces of their own (before they start),
    if partitions are asked for and possible; the Isolations made. An isolated broker reaches
    the ``remote`` standalone's ports too (its replicators publish there; its admin API creates
    partitioned topics there)."""
    if not any(k.startswith("partition") for k in config.kinds):
        return []
    why = netns.available()
    if why:
        config.log(f"no partition faults: {why}")
        return []
    zk_ports = [int(h.rsplit(":", 1)[1]) for h in cluster.zk_server.hosts.split(",")]
    bookie_ports = [b.port for b in cluster.bookies]
    broker_ports = [p for b in cluster.brokers for p in (b.port, b.web_port)]
    broker_ports += [remote.port, remote.web_port] if remote is not None else []
    isolations = []
    try:
        for process in cluster.bookies + cluster.brokers:
            if process.name not in config.isolate:
                continue
            # A broker talks to ZooKeeper, the bookies and the other brokers; a bookie to ZooKeeper.
            outbound = zk_ports + (bookie_ports + broker_ports if process in cluster.brokers else [])
            isolation = netns.Isolation(process, outbound)
            isolations.append(isolation)
            isolation.setup()
    except Exception:
        for isolation in isolations:
            isolation.cleanup()
        raise
    return isolations


def _lazy_disks(cluster: Cluster, config: ChaosConfig) -> list:
    """Put every bookie's journal and ledger dirs on a lazyfs disk of its own (``bookie.disk``)
    when a power-loss kind is asked for and FUSE can be mounted here; the mounts made."""
    for bookie in cluster.bookies:
        bookie.disk = None
    if not any(k in DISK_KINDS for k in config.kinds):
        return []
    from pulsar_twisted.testing.lazyfs import LazyFSMount, unavailable_reason
    why = unavailable_reason()
    if why:
        config.log(f"no power-loss faults: {why}")
        return []
    disks = []
    try:
        for bookie in cluster.bookies:
            disk = LazyFSMount(os.path.join(bookie.directory, "durable"),
                               os.path.join(bookie.directory, "disk")).start()
            disks.append(disk)
            bookie.disk = disk
            bookie.settings.update(journalDirectory=os.path.join(disk.mountpoint, "journal"),
                                   ledgerDirectories=os.path.join(disk.mountpoint, "ledgers"),
                                   journalSyncData="true")
            bookie.write_config()
    except Exception:
        for disk in disks:
            disk.stop()
        raise
    return disks


def _copy_logs(cluster: Cluster, target: str, remote=None) -> None:
    """The daemons' logs and the clients' (not the bookies' entry logs, also named *.log); the
    remote standalone's as ``remote-*.log``."""
    os.makedirs(target, exist_ok=True)
    paths = [(p.log_path, os.path.basename(p.log_path)) for p in _daemons(cluster)]
    paths += [(os.path.join(cluster.directory, n), n) for n in os.listdir(cluster.directory)
              if n.startswith("client-")]
    if remote is not None:
        paths += [(os.path.join(remote.directory, n), f"{remote.name}-{n}")
                  for n in os.listdir(remote.directory) if n.endswith(".log")]
    for path, name in paths:
        if os.path.exists(path):
            shutil.copy(path, os.path.join(target, name))
