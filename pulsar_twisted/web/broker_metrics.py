"""
The /metrics families Pulsar's Grafana dashboards query beyond the per-topic basics of
``web/metrics.py``, with Pulsar's names, types and labels (its "Pulsar metrics" reference):

* subscriptions (``cluster, namespace, topic, subscription``): ``pulsar_subscription_back_log``,
  ``_back_log_no_delayed``, ``_delayed``, ``_msg_rate_out``, ``_msg_throughput_out``,
  ``_msg_rate_redeliver``, ``_msg_ack_rate``, ``_unacked_messages``,
  ``_blocked_on_unacked_messages``, ``_consumers_count``;
* consumers, only with ``exposeConsumerLevelMetricsInPrometheus=true`` (subscription labels plus
  ``consumer_name, consumer_id``): ``pulsar_consumer_*``;
* geo-replication, per remote cluster of a topic that replicates (``cluster, namespace, topic,
  remote_cluster``; with ``replicationMetricsEnabled``, Pulsar's default): ``pulsar_replication_
  rate_in``, ``_rate_out``, ``_throughput_in``, ``_throughput_out``, ``_backlog``,
  ``_connected_count``, ``_disconnected_count``, ``_rate_expired``, ``_delay_in_seconds``, from
  the topic's ReplicatorStats (``broker/replication_stats.py``: the admin API's figures);
* topic storage (``cluster, namespace, topic``): ``pulsar_storage_backlog_size``,
  ``pulsar_storage_logical_size``, ``pulsar_storage_offloaded_size``, ``pulsar_storage_write_rate``,
  ``pulsar_storage_read_rate`` (entries per second), ``pulsar_consumer_msg_ack_rate``;
* tiered storage, per topic that offloaded or read offloaded ledgers (``cluster, namespace, topic``;
  Pulsar's LedgerOffloaderStats): ``brk_ledgeroffloader_offload_error``, ``_offload_rate``,
  ``_write_storage_error``, ``_read_offload_error``, ``_read_offload_rate`` (bytes per second);
* broker aggregates (``cluster``): ``pulsar_broker_*`` (topics, subscriptions, producers, consumers,
  rates, throughputs, storage, backlog);
* managed ledgers summed per namespace (``cluster, namespace``): ``pulsar_ml_*``, with
  ``pulsar_ml_count`` broker-wide;
* connections (``cluster, broker``) and lookups (``cluster``);
* schema compatibility checks (``cluster, namespace``): ``pulsar_schema_compatible_total``,
  ``pulsar_schema_incompatible_total`` (counters, as Pulsar's).
* replicated subscriptions, broker-wide (``cluster``; Pulsar's ReplicatedSubscriptionsController
  and snapshot builder): ``pulsar_replicated_subscriptions_pending_snapshots`` (gauge),
  ``pulsar_replicated_subscriptions_timedout_snapshots`` (counter, sample ``_total``) and
  ``pulsar_replicated_subscriptions_snapshot_ms`` (summary of the completed snapshots' durations,
  ``_count`` and ``_sum``), from the broker's ``counters.snapshots`` (a ``SnapshotStats``).

Rates (per second) that the broker does not compute itself are taken between two scrapes from
the counters (``ScrapeRates``): the first scrape shows 0, every later one the counters' growth
since the one before, on the injected clock. As in Pulsar all of these are gauges (its
``*_total_count`` connection figures too, which is why they keep that name).
"""

from collections import defaultdict

from pulsar_twisted.broker.admin.stats import offloaded_size
from pulsar_twisted.broker.broker_counters import LOOKUP_QUANTILES
from pulsar_twisted.broker.replication_stats import outbound_rates, topic_replication
from pulsar_twisted.mledger.counters import (
    ADD_LATENCY_BOUNDS_MS, ENTRY_SIZE_BOUNDS, bucket_labels)
from pulsar_twisted.web.metrics_text import DROPPED, FOLDED, escape, labels

class ScrapeRates:
    """
    Per-second rates of growing counters between consecutive scrapes. ``begin()`` starts a
    scrape, ``rate(key, value)`` answers for one counter (``key`` holds the counted object, so a
    new object cannot take a gone one's baseline; asking twice in one scrape gives the same
    answer), ``end()`` closes it. A counter first seen now was born since the previous scrape:
    its baseline is 0.

    Entries are updated in place, one small list per counter for its lifetime, so that a scrape
    leaves no new long-lived objects behind (each would bring the next full garbage collection,
    a reactor stall of a second at 10k topics, nearer); keys not seen for a scrape are dropped
    once they are as many as the live ones.
    """

    def __init__(self, clock):
        self.clock = clock
        #: key -> [baseline (value at the scrape before), value now, rate, scrape number]
        self._entries = {}
        self._scrape = 0
        self._live = 0
        self._time = None
        self._elapsed = 0.0

    def begin(self) -> None:
        now = self.clock.seconds()
        self._elapsed = 0.0 if self._time is None else now - self._time
        if self._time is None or self._elapsed > 0:
            self._time = now
        self._scrape += 1
        self._live = 0

    def rate(self, key, value) -> float:
        entry = self._entries.get(key)
        if entry is None:
            # First scrape, or a second one at the same instant: no growth measured yet.
            baseline = value if self._elapsed <= 0 else 0
            entry = self._entries[key] = [baseline, baseline, 0.0, 0]
        if entry[3] != self._scrape:
            entry[3] = self._scrape
            self._live += 1
            if self._elapsed > 0:
                entry[0] = entry[1]
                entry[1] = value
                entry[2] = max(value - entry[0], 0) / self._elapsed
        # A second scrape at the same instant repeats what was last said.
        return entry[2]

    def end(self) -> None:
        if len(self._entries) > 2 * self._live + 1000:
            scrape = self._scrape
            self._entries = {k: e for k, e in self._entries.items() if e[3] == scrape}


_SUB_NAMES = (("back_log", "Messages not yet acknowledged by the subscription"),
              ("back_log_no_delayed", "Backlog of the subscription without delayed messages"),
              ("delayed", "Messages held for delayed delivery"),
              ("msg_rate_out", "Messages per second dispatched to the subscription"),
              ("msg_throughput_out", "Bytes per second dispatched to the subscription"),
              ("msg_rate_redeliver", "Messages per second redelivered"),
              ("msg_ack_rate", "Messages per second acknowledged"),
              ("unacked_messages", "Messages dispatched and not yet acknowledged"),
              ("blocked_on_unacked_messages", "1 while dispatch waits on unacked messages"),
              ("consumers_count", "Consumers connected to the subscription"))
_TOPIC_STORAGE = (("backlog_size", "pulsar_storage_backlog_size",
                   "Bytes of the backlog of the slowest subscription"),
                  ("logical_size", "pulsar_storage_logical_size",
                   "Bytes the topic stores, without replicas"),
                  ("offloaded_size", "pulsar_storage_offloaded_size",
                   "Bytes offloaded to tiered storage"),
                  ("write_rate", "pulsar_storage_write_rate", "Entries per second written to storage"),
                  ("read_rate", "pulsar_storage_read_rate", "Entries per second read from storage"))
#: brk_ledgeroffloader_<name> (Pulsar's LedgerOffloaderStats): (name, OffloadState counter, kind,
#: help); the two rates are bytes per second between scrapes.
_OFFLOADER = (("offload_error", "offload_errors", "counter", "Offloads of a ledger that failed"),
              ("offload_rate", "offload_bytes", "gauge", "Bytes per second copied to tiered storage"),
              ("write_storage_error", "write_errors", "counter",
               "Offloads that failed on a write to tiered storage"),
              ("read_offload_error", "read_errors", "counter", "Reads from tiered storage that failed"),
              ("read_offload_rate", "read_bytes", "gauge", "Bytes per second read from tiered storage"))
#: pulsar_replication_<name>: (name, ReplicatorStats key, help); the two counts are 1 or 0 per
#: replicator, by its ``connected``.
_CONNECTED, _DISCONNECTED = object(), object()
_REPLICATION = (("rate_in", "msgRateIn", "Messages per second received from the remote cluster"),
                ("rate_out", "msgRateOut", "Messages per second replicated to the remote cluster"),
                ("throughput_in", "msgThroughputIn", "Bytes per second received from the remote cluster"),
                ("throughput_out", "msgThroughputOut",
                 "Bytes per second replicated to the remote cluster"),
                ("backlog", "replicationBacklog", "Messages waiting to be replicated to the remote cluster"),
                ("connected_count", _CONNECTED, "Replicators connected to the remote cluster"),
                ("disconnected_count", _DISCONNECTED,
                 "Replicators not connected to the remote cluster"),
                ("rate_expired", "msgRateExpired", "Messages per second expired before replication"),
                ("delay_in_seconds", "replicationDelayInSeconds",
                 "Age in seconds of the message being replicated to the remote cluster"))
_BROKER_TOTALS = ("topics_count", "subscriptions_count", "producers_count", "consumers_count",
                  "rate_in", "rate_out", "throughput_in", "throughput_out", "storage_size",
                  "storage_logical_size", "storage_write_rate", "storage_read_rate", "msg_backlog")


class BrokerFamilies:
    """
    The families above for ``broker`` (a BrokerService), one scrape at a time, in three steps
    the page (``web/metrics.py``) drives: ``begin(families)`` declares them on the scrape's
    ``FamilySet``, ``topic(topic, labels, ns_labels)`` adds one topic's series (called for every
    topic, in slices), ``finish()`` writes the broker, managed-ledger, connection, lookup and
    schema figures accumulated meanwhile. Folding at namespace level is the FamilySet's
    (Pulsar folds ``pulsar_subscription_delayed`` and ``pulsar_consumer_msg_ack_rate`` and
    leaves the other subscription and consumer families out).
    """

    def __init__(self, broker, cluster: str, clock):
        self.broker = broker
        self.cluster = cluster
        self.rates = ScrapeRates(clock)

    def begin(self, families) -> None:
        self.rates.begin()
        self.cluster_labels = labels(cluster=self.cluster)
        fam = families.family
        self.subs = {n: fam(f"pulsar_subscription_{n}", doc,
                            mode=FOLDED if n == "delayed" else DROPPED) for n, doc in _SUB_NAMES}
        self.consumers = None
        if self.broker.config.exposeConsumerLevelMetricsInPrometheus:
            self.consumers = {n: fam(f"pulsar_consumer_{n}", doc, mode=DROPPED)
                              for n, doc in _CONSUMER_NAMES if n != "msg_ack_rate"}
        self.storage = {key: fam(name, doc, mode=FOLDED) for key, name, doc in _TOPIC_STORAGE}
        self.offloader = [(fam(f"brk_ledgeroffloader_{name}", doc, kind=kind, mode=FOLDED), key)
                          for name, key, kind, doc in _OFFLOADER]
        self.replication = None
        if getattr(self.broker.config, "replicationMetricsEnabled", True):
            self.replication = [(fam(f"pulsar_replication_{name}", doc, mode=FOLDED), key)
                                for name, key, doc in _REPLICATION]
        # Topic-level and (when on) per-consumer ack rates: one family per name.
        self.ack_rate = fam("pulsar_consumer_msg_ack_rate",
                            "Messages per second acknowledged on the topic", mode=FOLDED)
        self.broker_totals = {key: fam(f"pulsar_broker_{key}",
                                       f"Broker total: {key.replace('_', ' ')}")
                              for key in _BROKER_TOTALS}
        self.totals = defaultdict(float)
        self.ml_count = fam("pulsar_ml_count", "Managed ledgers open")
        self.ml = {name: fam(f"pulsar_ml_{name}", _ML_HELP.get(name, name)) for name in _ML_NAMES}
        self.ml_latency = _bucket_family_pair(fam, "pulsar_ml_AddEntryLatencyBuckets",
                                              "Adds by latency in ms (not cumulative)")
        self.ml_sizes = _bucket_family_pair(fam, "pulsar_ml_EntrySizeBuckets",
                                            "Entries added by size in bytes (not cumulative)")
        self.ml_switches = _bucket_family_pair(fam, "pulsar_ml_LedgerSwitchLatencyBuckets",
                                               "Ledger switches by the time adds waited for them, "
                                               "in ms (not cumulative)")
        self.per_ns = defaultdict(lambda: defaultdict(float))
        self.latency = defaultdict(lambda: [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1))
        self.sizes = defaultdict(lambda: [0] * (len(ENTRY_SIZE_BOUNDS) + 1))
        self.switches = defaultdict(lambda: [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1))
        self.count = 0
        self.tail = [fam(name, doc) for name, doc, _ in self._connection_values()]
        self.tail += [fam(name, doc) for name, doc, _ in self._lookup_values()]
        self.lookup = fam("pulsar_broker_lookup", "Latency of lookups in ms", kind="summary")
        self.compatible = fam("pulsar_schema_compatible_total", "Schemas found compatible",
                              kind="counter")
        self.incompatible = fam("pulsar_schema_incompatible_total", "Schemas found incompatible",
                                kind="counter")
        # Pulsar's help texts (its gauge is documented as a counter).
        self.rs_pending = fam("pulsar_replicated_subscriptions_pending_snapshots",
                              "Counter of currently pending snapshots")
        self.rs_timed_out = fam("pulsar_replicated_subscriptions_timedout_snapshots",
                                "Counter of timed out snapshots", kind="counter")
        self.rs_snapshot = fam("pulsar_replicated_subscriptions_snapshot_ms",
                               "Time taken to create a consistent snapshot across clusters",
                               kind="summary")

    # ---------------------------------------------------------------- per topic
    def topic(self, topic, labels_text: str, ns_labels: str) -> None:
        """All of one topic's series and its share of the totals (``labels_text`` its
        ``cluster, namespace, topic`` labels, ``ns_labels`` the ``cluster, namespace`` ones)."""
        subscriptions = list(topic.subscriptions.values())
        acks = self._subscriptions(topic, subscriptions, ns_labels)
        self.ack_rate.add(labels_text, ns_labels, acks)
        write_rate = read_rate = 0.0
        if topic.persistent:
            write_rate, read_rate = self._storage_rates(topic)
            storage = self.storage
            for key, value in (("backlog_size", topic.backlog_size()),
                               ("logical_size", topic.storage_size()),
                               ("offloaded_size", offloaded_size(topic)),
                               ("write_rate", write_rate), ("read_rate", read_rate)):
                storage[key].add(labels_text, ns_labels, value)
            self._ml_topic(topic, subscriptions)
            self._offloader(topic, labels_text, ns_labels)
        if self.replication is not None:
            self._replication(topic, ns_labels)
        self._add_totals(topic, subscriptions, write_rate, read_rate)

    def _offloader(self, topic, labels_text: str, ns_labels: str) -> None:
        """The brk_ledgeroffloader_* series of a topic that offloaded or read offloaded ledgers."""
        ml = topic.ledger
        state = ml.factory.offload_states.get(ml)
        if state is None:
            return
        for family, key in self.offloader:
            value = getattr(state, key)
            if key.endswith("bytes"):
                value = self.rates.rate((state, key), value)
            family.add(labels_text, ns_labels, value)

    def _replication(self, topic, ns_labels: str) -> None:
        """One series per family and remote cluster the topic replicates to (none otherwise);
        summed per namespace and remote cluster at namespace level, as Pulsar does."""
        for cluster, stats in topic_replication(topic).items():
            remote = f'remote_cluster="{escape(cluster)}"'
            folded = f"{ns_labels},{remote}"
            series = f'{folded},topic="{escape(topic.name)}"'   # labels in sorted order
            connected = 1 if stats["connected"] else 0
            for family, key in self.replication:
                if key == _CONNECTED:
                    value = connected
                elif key == _DISCONNECTED:
                    value = 1 - connected
                else:
                    value = stats[key]
                family.add(series, folded, value)

    def _subscriptions(self, topic, subscriptions, ns_labels) -> float:
        """The subscription (and consumer) series; returns the topic's ack rate."""
        namespace = escape(str(topic.topic_name.namespace_name))
        name = escape(topic.name)
        acks = 0.0
        for sub in subscriptions:
            sub_labels = (f'cluster="{escape(self.cluster)}",namespace="{namespace}",'
                          f'subscription="{escape(sub.name)}",topic="{name}"')
            totals = [0.0, 0.0, 0.0, 0.0]
            for consumer in list(sub.consumers):
                rates = self._consumer_rates(consumer)
                totals = [t + r for t, r in zip(totals, rates)]
                if self.consumers is not None:
                    self._add_consumer(topic, sub, consumer, rates, ns_labels)
            acks += totals[3]
            for key, value in _subscription_values(sub, totals).items():
                self.subs[key].add(sub_labels, ns_labels, value)
        return acks

    def _add_consumer(self, topic, sub, consumer, rates, ns_labels) -> None:
        consumer_labels = labels(cluster=self.cluster, namespace=topic.topic_name.namespace_name,
                                 topic=topic.name, subscription=sub.name,
                                 consumer_name=consumer.name, consumer_id=consumer.consumer_id)
        for key, value in _consumer_values(consumer, rates).items():
            family = self.ack_rate if key == "msg_ack_rate" else self.consumers[key]
            family.add(consumer_labels, ns_labels, value)

    def _consumer_rates(self, consumer):
        rate = self.rates.rate
        return (rate((consumer, "out"), consumer.msg_out), rate((consumer, "bytes"), consumer.bytes_out),
                rate((consumer, "redeliver"), consumer.msg_redelivered),
                rate((consumer, "ack"), consumer.acks))

    def _storage_rates(self, topic):
        """``(entries written/s, entries read/s)`` of a persistent topic's managed ledger."""
        counters = getattr(topic.ledger, "counters", None)
        if counters is None:
            return 0.0, 0.0
        return (self.rates.rate((counters, "adds"), counters.add_succeed),
                self.rates.rate((counters, "reads"), counters.read_entries))

    def _add_totals(self, topic, subscriptions, write_rate, read_rate) -> None:
        totals = self.totals
        rate_in, tput_in, rate_out, tput_out = topic.counters.rates
        repl_rate, repl_tput = outbound_rates(topic)
        rate_out += repl_rate
        tput_out += repl_tput
        totals["rate_in"] += rate_in
        totals["throughput_in"] += tput_in
        totals["rate_out"] += rate_out
        totals["throughput_out"] += tput_out
        totals["subscriptions_count"] += len(subscriptions)
        totals["producers_count"] += len(topic.producers)
        totals["consumers_count"] += sum(len(s.consumers) for s in subscriptions)
        totals["msg_backlog"] += sum(s.backlog() for s in subscriptions)
        totals["storage_size"] += topic.storage_size()
        totals["storage_write_rate"] += write_rate
        totals["storage_read_rate"] += read_rate
        totals["topics_count"] += 1

    def _ml_topic(self, topic, subscriptions) -> None:
        ml = getattr(topic, "ledger", None)
        counters = getattr(ml, "counters", None)
        if counters is None:
            return
        self.count += 1
        namespace = str(topic.topic_name.namespace_name)
        values = self.per_ns[namespace]
        for key, value in self._ml_values(topic, ml, counters, subscriptions).items():
            values[key] += value
        self.latency[namespace] = [a + b for a, b in zip(self.latency[namespace],
                                                         counters.add_latency_buckets)]
        self.sizes[namespace] = [a + b for a, b in zip(self.sizes[namespace], counters.entry_size_buckets)]
        self.switches[namespace] = [a + b for a, b in zip(self.switches[namespace],
                                                          counters.ledger_switch_buckets)]

    def _ml_values(self, topic, ml, counters, subscriptions) -> dict:
        rate = self.rates.rate
        copies = max(getattr(ml.config, "write_quorum", 1), 1)
        add_bytes_rate = rate((counters, "add_bytes"), counters.add_bytes)
        return {
            "AddEntryBytesRate": add_bytes_rate,
            "AddEntryWithReplicasBytesRate": add_bytes_rate * copies,
            "AddEntryMessagesRate": rate((counters, "adds"), counters.add_succeed),
            "AddEntrySucceed": counters.add_succeed,
            "AddEntryErrors": counters.add_errors,
            "ReadEntriesRate": rate((counters, "reads"), counters.read_entries),
            "ReadEntriesBytesRate": rate((counters, "read_bytes"), counters.read_bytes),
            "ReadEntriesSucceeded": counters.read_succeeded,
            "ReadEntriesErrors": counters.read_errors,
            "NumberOfMessagesInBacklog": sum(s.backlog() for s in subscriptions if s.durable),
            "StoredMessagesSize": topic.storage_size() * copies,
        }

    # ---------------------------------------------------------------- after the last topic
    def finish(self) -> None:
        """The broker-wide and per-namespace figures; the rates' baseline for the next scrape."""
        try:
            self.totals["storage_logical_size"] = self.totals["storage_size"]
            for key, family in self.broker_totals.items():
                family.add_plain(self.cluster_labels, self.totals[key])
            self._ml_finish()
            for family, (_name, _doc, value) in zip(
                    self.tail, self._connection_values() + self._lookup_values()):
                family.add_plain(self._tail_labels(family.name), value)
            self._lookup_summary()
            self._schema_checks()
            self._replicated_subscriptions()
        finally:
            self.rates.end()

    def _ml_finish(self) -> None:
        self.ml_count.add_plain(self.cluster_labels, self.count)
        for name, family in self.ml.items():
            for namespace, values in sorted(self.per_ns.items()):
                family.add_plain(labels(cluster=self.cluster, namespace=namespace), values[name])
        _add_buckets(self.ml_latency, ADD_LATENCY_BOUNDS_MS, self.latency, self.cluster)
        _add_buckets(self.ml_sizes, ENTRY_SIZE_BOUNDS, self.sizes, self.cluster)
        _add_buckets(self.ml_switches, ADD_LATENCY_BOUNDS_MS, self.switches, self.cluster)

    def _tail_labels(self, name: str) -> str:
        if name.startswith("pulsar_broker_lookup"):
            return self.cluster_labels
        return labels(cluster=self.cluster, broker=self.broker.config.advertisedAddress)

    def _connection_values(self) -> list:
        counters = self.broker.counters
        return [("pulsar_active_connections", "Open client connections",
                 len(self.broker.connections)),
                ("pulsar_connection_created_total_count", "Connections accepted",
                 counters.connections_created),
                ("pulsar_connection_create_success_count", "Connections created successfully",
                 counters.connections_created),
                ("pulsar_connection_closed_total_count", "Connections closed",
                 counters.connections_closed)]

    def _lookup_values(self) -> list:
        counters = self.broker.counters
        return [("pulsar_broker_lookup_answers", "Lookups answered (not redirected)",
                 counters.lookup_answers),
                ("pulsar_broker_lookup_redirects", "Lookups redirected", counters.lookup_redirects),
                ("pulsar_broker_lookup_failures", "Lookups failed", counters.lookup_failures),
                ("pulsar_broker_lookup_pending_requests", "Lookups in progress",
                 counters.lookup_pending)]

    def _lookup_summary(self) -> None:
        summary = self.broker.counters.lookup_latency
        family = self.lookup
        for q in LOOKUP_QUANTILES:
            family.add_plain(labels(cluster=self.cluster, quantile=str(q)), summary.quantile(q))
        family.add_plain(self.cluster_labels, summary.count, sample="pulsar_broker_lookup_count")
        family.add_plain(self.cluster_labels, summary.sum_ms, sample="pulsar_broker_lookup_sum")

    def _schema_checks(self) -> None:
        results = getattr(self.broker.schema_registry, "check_results", {})
        for namespace, (ok, refused) in sorted(results.items()):
            ns_labels = labels(cluster=self.cluster, namespace=namespace)
            self.compatible.add_plain(ns_labels, ok)
            self.incompatible.add_plain(ns_labels, refused)

    def _replicated_subscriptions(self) -> None:
        """Pulsar registers these three once per broker, so they show (at 0) before any
        snapshot; a counter's sample carries ``_total`` as its Prometheus client writes it."""
        stats = self.broker.counters.snapshots
        cluster = self.cluster_labels
        self.rs_pending.add_plain(cluster, stats.pending)
        self.rs_timed_out.add_plain(cluster, stats.timed_out,
                                    sample="pulsar_replicated_subscriptions_timedout_snapshots_total")
        self.rs_snapshot.add_plain(cluster, stats.completed,
                                   sample="pulsar_replicated_subscriptions_snapshot_ms_count")
        self.rs_snapshot.add_plain(cluster, stats.duration_ms_sum,
                                   sample="pulsar_replicated_subscriptions_snapshot_ms_sum")


_ML_NAMES = ("AddEntryBytesRate", "AddEntryWithReplicasBytesRate", "AddEntryMessagesRate",
             "AddEntrySucceed", "AddEntryErrors", "ReadEntriesRate", "ReadEntriesBytesRate",
             "ReadEntriesSucceeded", "ReadEntriesErrors", "NumberOfMessagesInBacklog",
             "StoredMessagesSize")
_ML_HELP = {
    "AddEntryBytesRate": "Bytes per second added", "AddEntryMessagesRate": "Entries per second added",
    "AddEntryWithReplicasBytesRate": "Bytes per second added, times the write quorum",
    "AddEntrySucceed": "Adds that succeeded", "AddEntryErrors": "Adds that failed",
    "ReadEntriesRate": "Entries per second read", "ReadEntriesBytesRate": "Bytes per second read",
    "ReadEntriesSucceeded": "Reads that succeeded", "ReadEntriesErrors": "Reads that failed",
    "NumberOfMessagesInBacklog": "Backlog of the durable subscriptions",
    "StoredMessagesSize": "Bytes stored, times the write quorum"}


def _subscription_values(sub, rates) -> dict:
    consumers = list(sub.consumers)
    dispatcher = sub.dispatcher
    delayed_tracker = getattr(dispatcher, "delayed", None)
    delayed = len(delayed_tracker) if delayed_tracker is not None else 0
    backlog = sub.backlog()
    unacked = sum(c.unacked for c in consumers)
    limit = getattr(dispatcher, "max_unacked_subscription", 0) or 0
    blocked = bool(limit and unacked >= limit)
    return {"back_log": backlog, "back_log_no_delayed": max(backlog - delayed, 0),
            "delayed": delayed, "msg_rate_out": rates[0], "msg_throughput_out": rates[1],
            "msg_rate_redeliver": rates[2], "msg_ack_rate": rates[3],
            "unacked_messages": unacked, "blocked_on_unacked_messages": 1 if blocked else 0,
            "consumers_count": len(consumers)}


_CONSUMER_NAMES = (("msg_rate_out", "Messages per second dispatched to the consumer"),
                   ("msg_throughput_out", "Bytes per second dispatched to the consumer"),
                   ("msg_rate_redeliver", "Messages per second redelivered to the consumer"),
                   ("msg_ack_rate", "Messages per second acknowledged by the consumer"),
                   ("unacked_messages", "Messages the consumer holds unacknowledged"),
                   ("blocked_on_unacked_messages", "1 while the consumer is blocked on unacked"),
                   ("available_permits", "Permits the consumer has left"))


def _consumer_values(consumer, rates) -> dict:
    return {"msg_rate_out": rates[0], "msg_throughput_out": rates[1],
            "msg_rate_redeliver": rates[2], "msg_ack_rate": rates[3],
            "unacked_messages": consumer.unacked,
            "blocked_on_unacked_messages": 1 if consumer.blocked else 0,
            "available_permits": max(consumer.permits, 0)}


def _bucket_family_pair(fam, name, doc):
    """Pulsar's ML bucket form: ``name{quantile="low_high"}`` per bucket, ``name_OVERFLOW``."""
    return (fam(name, doc), fam(f"{name}_OVERFLOW", f"{doc}: above the last bound"))


def _add_buckets(pair, bounds, per_namespace, cluster) -> None:
    family, overflow = pair
    for namespace, buckets in sorted(per_namespace.items()):
        for label, value in zip(bucket_labels(bounds), buckets):
            family.add_plain(labels(cluster=cluster, namespace=namespace, quantile=label), value)
        overflow.add_plain(labels(cluster=cluster, namespace=namespace), buckets[-1])
