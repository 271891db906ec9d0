"""
A chaos run of geo-replication: two clusters (``testing.georeplication.GeoPair``: two standalones,
``east`` and ``west`` by default) replicating one namespace both ways with deduplication on, the
official client publishing on both, seeded faults on either, then heal, drain, read back both
clusters and check (``geo_checker``).

Workload: on each cluster, ``producers`` unbatched producers (``{cluster}-p{i}``; odd ones keyed)
on topic 0, one batched producer (``{cluster}-batched-p0``) on topic 1, with ``chunked_rate`` one
producer of chunked messages (``{cluster}-chunked-p0``: ``chunk_size`` payloads through brokers
taking ``max_message_size``) on topic 2 and, with ``partitions``, two unbatched producers
(``{cluster}-parted-p{i}``, one keyed) on a partitioned topic created
through east's admin API only (the broker creates it on the other cluster, as Pulsar's does; the
harness waits for that and creates it there itself, noted in ``meta``, if it does not come).
Each producer sends sequence-numbered payloads with ``send_async`` (sequence id = the payload's
seq), each send and its callback recorded (``workload.Producers``). Every topic is made after
the namespace is replicated, so the replicators' cursors (which start at the end of a topic)
see every message. In the history, topics 0, 1 and 2 are storage indexes 0, 1 and 2 (2 only
with ``chunked_rate``), the partitions of the partitioned topic the indexes 3 and after.

Faults (``GeoNemesis``, one at a time, a seeded schedule): ``kill-broker`` (a standalone killed
-9, down 1-6 s, started again on its data and ports), ``pause-broker`` (SIGSTOP for ``pause``
seconds, at times longer than the client's ``operation_timeout``, then SIGCONT),
``unload-bundle`` (a bundle of the namespace unloaded through one cluster's admin API: its
topics, producers and replicators closed and loaded again).

After the faults: every site running and thawed, ``after_heal`` seconds more publishing, the
producers stopped and their callbacks awaited, replication drained (``GeoPair.wait_drained``:
every replication backlog 0, or the entry counts still, bounded), then every topic read from
the earliest position on both clusters.

With ``replicated_subscription`` (``replicated_subscription.py``): before the producers start, a
consumer on the first cluster subscribes to topic 0 with ``replicate_subscription_state_enabled``
and acknowledges as it receives, through the faults, until halfway through the after-heal
publishing (the last seconds' messages are never acked there); after the drain the run waits for
the second cluster's subscription of that name to settle, reads back, then consumes it there to
the end (``subscription_checker``: lost, redelivered, order). Until the settling, the second
cluster's position of the subscription is sampled every half second (``PositionSampler``: was it
ever past what the first had not acked?). The brokers take a snapshot every ``snapshot_ms``. ``run_geo(GeoChaosConfig(...))`` returns (GeoHistory,
GeoVerdict); every process it started is gone when it returns or raises.

Blocking, like the rest of ``chaos``: run it on the main thread (a restarted standalone asks for
SIGKILL when the thread that spawned it ends).
"""

import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

from pulsar_twisted.testing.chaos.geo_checker import GeoHistory, check_geo
from pulsar_twisted.testing.chaos.nemesis import GEO_KINDS as KINDS, Nemesis
from pulsar_twisted.testing.chaos.replicated_subscription import (
    SUBSCRIPTION, AckingConsumer, PositionSampler, consume_to_end, wait_settled)
from pulsar_twisted.testing.chaos.runner import close_in_background
from pulsar_twisted.testing.chaos.subscription_checker import SubscriptionRecord
from pulsar_twisted.testing.chaos.workload import Producers, make_client, read_topics
from pulsar_twisted.testing.georeplication import GeoPair
from pulsar_twisted.testing.process import StandaloneError

class _Sites:
    """What ``Nemesis`` reads of a ``Cluster``, for a GeoPair: its standalones as the brokers."""

    def __init__(self, pair: GeoPair):
        self.brokers = list(pair)
        self.bookies = []
        self.proxies = []


class GeoNemesis(Nemesis):
    """``Nemesis`` on a GeoPair: the schedule, kill and unload are its own; a pause lasts
    ``pause`` seconds drawn from the seed (a standalone has no ZooKeeper session whose expiry
    could end it), and the heal thaws and starts the standalones."""

    def __init__(self, pair: GeoPair, history, seed: int, kinds=KINDS, pause=(2.0, 9.0),
                 rest=(2.0, 5.0), log=print, namespace: str = "public/default"):
        super().__init__(_Sites(pair), history, seed, kinds=kinds, rest=rest, log=log,
                         namespace=namespace)
        self.pair = pair
        self.pause_range = pause

    def _pause(self, target, hold: float) -> str:
        seconds = self.rng.uniform(*self.pause_range)
        target.pause()
        try:
            self._sleep(seconds)
        finally:
            target.resume()
        return f"stopped {seconds:.1f}s"

    def heal(self, timeout: float = 60.0) -> None:
        """Every standalone thawed and, if down, started again (StandaloneError if one will not)."""
        for site in self.pair:
            site.resume()
            if not site.running():
                site.start()


@dataclass
class GeoChaosConfig:
    seed: int = 1
    duration: float = 90.0            # seconds of faults
    clusters: tuple = ("east", "west")
    tenant: str = "geo"
    namespace: str = "chaos"
    producers: int = 2                # unbatched producers per cluster
    rate: float = 40.0                # msg/s of a cluster's unbatched producers together
    batched_rate: float = 40.0        # msg/s of a cluster's batched producer
    partitions: int = 2               # of the partitioned topic (0: none)
    partitioned_rate: float = 30.0    # msg/s of a cluster's producers on it together
    chunked_rate: float = 2.0         # msg/s of a cluster's chunking producer (0: none)
    chunk_size: int = 150_000         # its payloads' size, bytes
    max_message_size: int = 65536     # the brokers' maxMessageSize (3 chunks a message)
    kinds: tuple = KINDS
    #: Deduplication on both namespaces (False: a control run in which every re-sent copy, the
    #: client's or a replicator's, shows as STORED TWICE).
    dedup: bool = True
    pause: tuple = (2.0, 9.0)         # seconds a pause-broker lasts
    operation_timeout: int = 5        # the official client's, in seconds
    send_timeout_ms: int = 30000
    #: Small ledgers: the replicators' reads and the faults also land on ledger switches.
    max_entries_per_ledger: int = 100
    warmup: float = 3.0
    after_heal: float = 5.0
    settle: float = 45.0              # for the last callbacks (longer than the send timeout)
    drain_timeout: float = 60.0
    read_timeout: float = 60.0        # per cluster, every topic
    #: A replicated subscription on topic 0, acked on the first cluster, consumed on the second.
    replicated_subscription: bool = False
    snapshot_ms: int = 300            # replicatedSubscriptionsSnapshotFrequencyMillis
    snapshot_timeout: int = None      # replicatedSubscriptionsSnapshotTimeoutSeconds (None: 30)
    cumulative_share: float = 0.02    # of the messages the first cluster's consumer acks
    skip_share: float = 0.03          # cumulatively / never
    settle_stable: float = 3.0        # the second cluster's subscription still this long: crossed
    settle_timeout: float = 30.0
    keep_logs: str = None
    log: object = field(default=print, repr=False)


def _topics(config: GeoChaosConfig) -> tuple:
    """(storage index -> topic or partition name, the partitioned topic's name or None)."""
    run = uuid.uuid4().hex[:6]
    base = f"persistent://{config.tenant}/{config.namespace}"
    topics = {0: f"{base}/orders-{run}", 1: f"{base}/batched-{run}"}
    if config.chunked_rate:
        # Without its producer the topic is never made: the drain would wait for it in vain.
        topics[2] = f"{base}/chunked-{run}"
    if not config.partitions:
        return topics, None
    parted = f"{base}/parted-{run}"
    topics.update({3 + i: f"{parted}-partition-{i}" for i in range(config.partitions)})
    return topics, parted


def _create_partitioned(config, pair, parted: str, timeout: float = 15.0) -> str:
    """The partitioned topic, created on the first cluster; how it came to be on the others."""
    path = "/admin/v2/persistent/" + parted.split("://", 1)[1] + "/partitions"
    first, others = pair.clusters[0], pair.clusters[1:]
    pair.admin(first).put(path, config.partitions)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all((pair.admin(c).get(path) or {}).get("partitions") == config.partitions
               for c in others):
            return f"created by {first}'s broker on {', '.join(others)}"
        time.sleep(0.2)
    for cluster in others:
        if (pair.admin(cluster).get(path) or {}).get("partitions") != config.partitions:
            pair.admin(cluster).put(path, config.partitions)
    return f"NOT on {', '.join(others)} after {timeout:.0f}s: created there by the harness"


def _producers(config, pair, geo, parted, clients) -> list:
    """Every cluster's producers (not started), their names in ``geo.sources``."""
    groups = []
    for cluster, site in pair.sites.items():
        client = make_client(site.service_url, os.path.join(site.directory, "client-producers.log"),
                             config.operation_timeout)
        clients.append(client)
        plan = [(geo.topics[0], config.producers, config.rate, cluster, {}),
                (geo.topics[1], 1, config.batched_rate, f"{cluster}-batched", {"batching": True})]
        if config.chunked_rate:
            plan.append((geo.topics[2], 1, config.chunked_rate, f"{cluster}-chunked",
                         {"chunking": True, "payload_size": config.chunk_size}))
        if parted is not None:
            plan.append((parted, 2, config.partitioned_rate, f"{cluster}-parted", {}))
        for topic, count, rate, prefix, options in plan:
            group = Producers(client, topic, geo.sends, count=count, rate=rate, prefix=prefix,
                              send_timeout_millis=config.send_timeout_ms, **options)
            geo.sources.update({name: cluster for name in group.names})
            groups.append(group)
    return groups


def _acking_consumer(config, pair, geo, clients) -> AckingConsumer:
    """The replicated subscription's consumer on the first cluster (not started), its record
    in ``geo.subscription``."""
    source, target = config.clusters[0], config.clusters[1]
    geo.subscription = SubscriptionRecord(SUBSCRIPTION, 0, source, target)
    site = pair.sites[source]
    client = make_client(site.service_url, os.path.join(site.directory, "client-subscription.log"),
                         config.operation_timeout)
    clients.append(client)
    return AckingConsumer(client, geo.topics[0], geo.subscription, config.seed,
                          cumulative=config.cumulative_share, skip=config.skip_share)


def run_geo(config: GeoChaosConfig) -> tuple:
    """(GeoHistory, GeoVerdict) of one run; StandaloneError or an admin error if the clusters
    could not be set up."""
    log = config.log
    settings = {
        "managedLedgerMaxEntriesPerLedger": config.max_entries_per_ledger,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "maxMessageSize": config.max_message_size,
        "brokerDeduplicationEnabled": str(config.dedup).lower()}
    if config.replicated_subscription:
        settings["replicatedSubscriptionsSnapshotFrequencyMillis"] = config.snapshot_ms
        if config.snapshot_timeout is not None:
            settings["replicatedSubscriptionsSnapshotTimeoutSeconds"] = config.snapshot_timeout
    pair = GeoPair(config.clusters, settings)
    topics, parted = _topics(config)
    geo = GeoHistory(config.clusters, topics=topics)
    meta = geo.sends.meta
    meta.update(seed=config.seed, duration=config.duration, kinds=list(config.kinds),
                dedup=config.dedup,
                rate=config.rate, batched_rate=config.batched_rate, producers=config.producers,
                partitions=config.partitions, partitioned_rate=config.partitioned_rate,
                chunked_rate=config.chunked_rate, chunk_size=config.chunk_size,
                replicated_subscription=config.replicated_subscription,
                snapshot_ms=config.snapshot_ms, snapshot_timeout=config.snapshot_timeout,
                topics=dict(geo.topics), directories={c: s.directory for c, s in pair.sites.items()})
    clients, groups, nemesis, acking, sampler = [], [], None, None, None
    try:
        started = time.monotonic()
        pair.start()
        pair.register(config.tenant, config.namespace, dedup=config.dedup)
        log(f"clusters {', '.join(config.clusters)} up and replicating "
            f"{config.tenant}/{config.namespace} in {time.monotonic() - started:.1f}s")
        if parted is not None:
            meta["partitioned_topic"] = _create_partitioned(config, pair, parted)
            log(f"partitioned topic {parted}: {meta['partitioned_topic']}")
        if config.replicated_subscription:
            acking = _acking_consumer(config, pair, geo, clients)
            acking.start()
            sampler = PositionSampler(pair, geo.topics[0], geo.subscription)
            sampler.start()
        groups = _producers(config, pair, geo, parted, clients)
        for group in groups:
            group.start()
        log(f"publishing on {len(geo.topics)} topics and partitions from {len(geo.sources)} "
            f"producers")
        time.sleep(config.warmup)

        nemesis = GeoNemesis(pair, geo.sends, config.seed, kinds=config.kinds, pause=config.pause,
                             log=log, namespace=f"{config.tenant}/{config.namespace}")
        nemesis.run(config.duration)
        try:
            nemesis.heal()
        except StandaloneError as e:
            meta["heal_error"] = str(e)[:2000]
            log(f"heal incomplete: {str(e)[:300]}")
        meta["healed_at"] = time.time()
        log(f"healed; {len(geo.sends.faults)} faults; publishing {config.after_heal:.0f}s more")
        if acking is not None:
            time.sleep(config.after_heal / 2)
            acking.stop()
            log(f"{SUBSCRIPTION} on {geo.subscription.source}: "
                f"{len(geo.subscription.source_deliveries)} deliveries, "
                f"{len(geo.subscription.individual_acks)} individual and "
                f"{len(geo.subscription.cumulative_acks)} cumulative acks; stopped")
            time.sleep(config.after_heal / 2)
        else:
            time.sleep(config.after_heal)
        for group in groups:
            group.stop()
        unanswered = groups[0].wait_answered(config.settle)
        log(f"producers stopped; {unanswered} sends unanswered after {config.settle:.0f}s")

        drain_started = time.monotonic()
        meta["drain"] = pair.wait_drained(list(geo.topics.values()), config.drain_timeout)
        meta["drain_seconds"] = round(time.monotonic() - drain_started, 1)
        log(f"replication: {meta['drain']} after {meta['drain_seconds']}s")
        record = geo.subscription
        if record is not None:
            record.meta["settled"] = wait_settled(pair, record.target, geo.topics[record.topic],
                                                  record.name, config.settle_stable,
                                                  config.settle_timeout)
            sampler.stop()               # before the target's own consumer moves it
            log(f"{record.name} on {record.target}: {record.meta['settled']}; "
                f"{len(record.target_positions)} positions sampled")
        log("reading back")
        readers = {}
        for cluster, site in pair.sites.items():
            client = make_client(site.service_url, os.path.join(site.directory, "client-readers.log"),
                                 config.operation_timeout)
            clients.append(client)
            readers[cluster] = client
            read_topics(client, geo.topics, geo.stored[cluster], timeout=config.read_timeout)
        if record is not None:
            stored = geo.stored[record.target].storage.get(record.topic) or []
            last = (stored[-1].producer, stored[-1].seq) if stored else None
            consume_to_end(readers[record.target], geo.topics[record.topic], record, last,
                           timeout=config.read_timeout)
            log(f"{record.name} consumed on {record.target}: "
                f"{len(record.target_deliveries)} deliveries")
        meta["seconds"] = round(time.monotonic() - started, 1)
        meta["nemesis_errors"] = list(nemesis.errors)
        meta["tracebacks"] = {c: s.log_text().count("Traceback") for c, s in pair.sites.items()}
        return geo, check_geo(geo)
    finally:
        if nemesis is not None:
            nemesis.stop()
        if acking is not None:
            acking.stop()
        if sampler is not None:
            sampler.stop()
        for group in groups:
            group.stop()
        for client in clients:
            close_in_background(client)
        for site in pair:
            site.kill9()
        if config.keep_logs:
            os.makedirs(config.keep_logs, exist_ok=True)
            for cluster, site in pair.sites.items():
                for name in os.listdir(site.directory):
                    if name.endswith(".log"):
                        shutil.copy(os.path.join(site.directory, name),
                                    os.path.join(config.keep_logs, f"{cluster}-{name}"))
        pair.cleanup()
