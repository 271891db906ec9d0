"""
The /metrics families Pulsar's Grafana dashboards query beyond the per-topic basics of
``web/metrics.py``, with Pulsar's names, types and labels (its "Pulsar metrics" reference):

* subscriptions (``cluster, namespace, topic, subscription``): ``pulsar_subscription_back_log``,
  ``_back_log_no_delayed``, ``_delayed``, ``_msg_rate_out``, ``_msg_throughput_out``,
  ``_msg_rate_redeliver``, ``_msg_ack_rate``, ``_unacked_messages``,
  ``_blocked_on_unacked_messages``, ``_consumers_count``;
* consumers, only with ``exposeConsumerLevelMetricsInPrometheus=true`` (subscription labels plus
  ``consumer_name, consumer_id``): ``pulsar_consumer_*``;
* topic storage (``cluster, namespace, topic``): ``pulsar_storage_backlog_size``,
  ``pulsar_storage_logical_size``, ``pulsar_storage_offloaded_size``, ``pulsar_storage_write_rate``,
  ``pulsar_storage_read_rate`` (entries per second), ``pulsar_consumer_msg_ack_rate``;
* broker aggregates (``cluster``): ``pulsar_broker_*`` (topics, subscriptions, producers, consumers,
  rates, throughputs, storage, backlog);
* managed ledgers summed per namespace (``cluster, namespace``): ``pulsar_ml_*``, with
  ``pulsar_ml_count`` broker-wide;
* connections (``cluster, broker``) and lookups (``cluster``);
* schema compatibility checks (``cluster, namespace``): ``pulsar_schema_compatible_total``,
  ``pulsar_schema_incompatible_total`` (counters, as Pulsar's).

Rates (per second) that the broker does not compute itself are taken between two scrapes from
the counters (``ScrapeRates``): the first scrape shows 0, every later one the counters' growth
since the one before, on the injected clock. As in Pulsar all of these are gauges (its
``*_total_count`` connection figures too, which is why they keep that name).
"""

from collections import defaultdict

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pulsar_twisted.broker.broker_counters import LOOKUP_QUANTILES
from pulsar_twisted.mledger.counters import (
    ADD_LATENCY_BOUNDS_MS, ENTRY_SIZE_BOUNDS, bucket_labels)

_SUB_LABELS = ["cluster", "namespace", "topic", "subscription"]
_CONSUMER_LABELS = _SUB_LABELS + ["consumer_name", "consumer_id"]
_TOPIC_LABELS = ["cluster", "namespace", "topic"]


class ScrapeRates:
    """
    Per-second rates of growing counters between consecutive scrapes. ``begin()`` starts a
    scrape, ``rate(key, value)`` answers for one counter (``key`` holds the counted object, so a
    new object cannot take a gone one's baseline), ``end()`` keeps the values seen as the next
    baseline. A counter first seen now was born since the previous scrape: its baseline is 0.
    """

    def __init__(self, clock):
        self.clock = clock
        self._values = {}
        self._seen = {}
        self._rates = {}
        self._time = None
        self._elapsed = 0.0

    def begin(self) -> None:
        now = self.clock.seconds()
        self._elapsed = 0.0 if self._time is None else now - self._time
        if self._time is None or self._elapsed > 0:
            self._time = now
        self._seen = {}

    def rate(self, key, value) -> float:
        if self._elapsed <= 0:
            # First scrape, or a second one at the same instant: repeat what was last said.
            self._seen[key] = self._values.get(key, value) if self._time is not None else value
            return self._rates.get(key, 0.0)
        self._seen[key] = value
        rate = max(value - self._values.get(key, 0), 0) / self._elapsed
        self._rates[key] = rate
        return rate

    def end(self) -> None:
        self._values = self._seen
        self._rates = {k: v for k, v in self._rates.items() if k in self._seen}


#: Subscription-level families still shown, folded, at namespace level (Pulsar's namespace
#: metrics include them).
_FOLDED_AT_NAMESPACE = {"pulsar_subscription_delayed", "pulsar_consumer_msg_ack_rate"}


def namespace_level(families):
    """
    The families as Pulsar shows them with ``exposeTopicLevelMetricsInPrometheus=false``: the
    ``topic`` (and ``subscription``) label dropped and the samples of one namespace summed;
    subscription and consumer families left out except the few Pulsar also folds per namespace.
    """
    for family in families:
        name = family.name
        if name.startswith(("pulsar_subscription_", "pulsar_consumer_")) and \
                name not in _FOLDED_AT_NAMESPACE:
            continue
        if not any("topic" in s.labels for s in family.samples):
            yield family
            continue
        folded = Metric(name, family.documentation, family.type)
        sums = {}
        for sample in family.samples:
            labels = tuple((k, v) for k, v in sample.labels.items()
                           if k not in ("topic", "subscription", "consumer_name", "consumer_id"))
            key = (sample.name, labels)
            sums[key] = sums.get(key, 0) + sample.value
        for (sample_name, labels), value in sums.items():
            folded.add_sample(sample_name, dict(labels), value)
        yield folded


def _gauge(name, doc, labels):
    return GaugeMetricFamily(name, doc, labels=labels)


class BrokerFamilies:
    """Yields the families above for ``broker`` (a BrokerService) at each scrape."""

    def __init__(self, broker, cluster: str, clock):
        self.broker = broker
        self.cluster = cluster
        self.rates = ScrapeRates(clock)
        #: Per-consumer ack-rate samples of the scrape in progress (see ``_consumer_families``).
        self._consumer_acks = []

    def collect(self):
        self.rates.begin()
        try:
            topics = list(self.broker.topics.values())
            yield from self._subscription_families(topics)
            yield from self._topic_storage_families(topics)
            yield from self._broker_families(topics)
            yield from self._ml_families(topics)
            yield from self._connection_families()
            yield from self._lookup_families()
            yield from self._schema_families()
        finally:
            self.rates.end()

    # ---------------------------------------------------------------- subscriptions / consumers
    def _consumer_rates(self, consumer):
        rate = self.rates.rate
        return (rate((consumer, "out"), consumer.msg_out), rate((consumer, "bytes"), consumer.bytes_out),
                rate((consumer, "redeliver"), consumer.msg_redelivered),
                rate((consumer, "ack"), consumer.acks))

    def _subscription_families(self, topics):
        names = [("back_log", "Messages not yet acknowledged by the subscription"),
                 ("back_log_no_delayed", "Backlog of the subscription without delayed messages"),
                 ("delayed", "Messages held for delayed delivery"),
                 ("msg_rate_out", "Messages per second dispatched to the subscription"),
                 ("msg_throughput_out", "Bytes per second dispatched to the subscription"),
                 ("msg_rate_redeliver", "Messages per second redelivered"),
                 ("msg_ack_rate", "Messages per second acknowledged"),
                 ("unacked_messages", "Messages dispatched and not yet acknowledged"),
                 ("blocked_on_unacked_messages", "1 while dispatch waits on unacked messages"),
                 ("consumers_count", "Consumers connected to the subscription")]
        subs = {n: _gauge(f"pulsar_subscription_{n}", doc, _SUB_LABELS) for n, doc in names}
        per_consumer = self.broker.config.exposeConsumerLevelMetricsInPrometheus
        consumer_families = _consumer_families() if per_consumer else None
        for topic in topics:
            for sub in list(topic.subscriptions.values()):
                labels = [self.cluster, str(topic.topic_name.namespace_name), topic.name, sub.name]
                totals = [0.0, 0.0, 0.0, 0.0]
                for consumer in list(sub.consumers):
                    rates = self._consumer_rates(consumer)
                    totals = [t + r for t, r in zip(totals, rates)]
                    if consumer_families is not None:
                        _add_consumer(consumer_families, labels, consumer, rates)
                for name, value in _subscription_values(sub, totals).items():
                    subs[name].add_metric(labels, value)
        yield from subs.values()
        self._consumer_acks = []
        if consumer_families is not None:
            self._consumer_acks = consumer_families.pop("msg_ack_rate")
            yield from consumer_families.values()

    # ---------------------------------------------------------------- topic storage
    def _topic_storage_families(self, topics):
        fams = {
            "backlog_size": _gauge("pulsar_storage_backlog_size",
                                   "Bytes of the backlog of the slowest subscription", _TOPIC_LABELS),
            "logical_size": _gauge("pulsar_storage_logical_size",
                                   "Bytes the topic stores, without replicas", _TOPIC_LABELS),
            "offloaded_size": _gauge("pulsar_storage_offloaded_size",
                                     "Bytes offloaded to tiered storage (none here)", _TOPIC_LABELS),
            "write_rate": _gauge("pulsar_storage_write_rate",
                                 "Entries per second written to storage", _TOPIC_LABELS),
            "read_rate": _gauge("pulsar_storage_read_rate",
                                "Entries per second read from storage", _TOPIC_LABELS),
            "ack_rate": _gauge("pulsar_consumer_msg_ack_rate",
                               "Messages per second acknowledged on the topic", _TOPIC_LABELS),
        }
        for topic in topics:
            labels = [self.cluster, str(topic.topic_name.namespace_name), topic.name]
            acks = sum(self.rates.rate((c, "ack"), c.acks)
                       for s in list(topic.subscriptions.values()) for c in list(s.consumers))
            fams["ack_rate"].add_metric(labels, acks)
            if not topic.persistent:
                continue
            write_rate, read_rate = self._storage_rates(topic)
            for key, value in (("backlog_size", topic.backlog_size()),
                               ("logical_size", topic.storage_size()), ("offloaded_size", 0),
                               ("write_rate", write_rate), ("read_rate", read_rate)):
                fams[key].add_metric(labels, value)
        for labels, value in self._consumer_acks:
            fams["ack_rate"].add_sample("pulsar_consumer_msg_ack_rate", labels, value)
        yield from fams.values()

    def _storage_rates(self, topic):
        """``(entries written/s, entries read/s)`` of a persistent topic's managed ledger."""
        counters = getattr(topic.ledger, "counters", None)
        if counters is None:
            return 0.0, 0.0
        return (self.rates.rate((counters, "adds"), counters.add_succeed),
                self.rates.rate((counters, "reads"), counters.read_entries))

    # ---------------------------------------------------------------- broker aggregates
    def _broker_families(self, topics):
        totals = defaultdict(float)
        for topic in topics:
            subscriptions = list(topic.subscriptions.values())
            rate_in, tput_in, rate_out, tput_out = topic.counters.rates
            totals["rate_in"] += rate_in
            totals["throughput_in"] += tput_in
            totals["rate_out"] += rate_out
            totals["throughput_out"] += tput_out
            totals["subscriptions_count"] += len(subscriptions)
            totals["producers_count"] += len(topic.producers)
            totals["consumers_count"] += sum(len(s.consumers) for s in subscriptions)
            totals["msg_backlog"] += sum(s.backlog() for s in subscriptions)
            totals["storage_size"] += topic.storage_size()
            if topic.persistent:
                write_rate, read_rate = self._storage_rates(topic)
                totals["storage_write_rate"] += write_rate
                totals["storage_read_rate"] += read_rate
        totals["topics_count"] = len(topics)
        totals["storage_logical_size"] = totals["storage_size"]
        for key in ("topics_count", "subscriptions_count", "producers_count", "consumers_count",
                    "rate_in", "rate_out", "throughput_in", "throughput_out", "storage_size",
                    "storage_logical_size", "storage_write_rate", "storage_read_rate",
                    "msg_backlog"):
            family = _gauge(f"pulsar_broker_{key}", f"Broker total: {key.replace('_', ' ')}",
                            ["cluster"])
            family.add_metric([self.cluster], totals[key])
            yield family

    # ---------------------------------------------------------------- managed ledgers
    def _ml_families(self, topics):
        per_ns = defaultdict(lambda: defaultdict(float))
        latency = defaultdict(lambda: [0] * (len(ADD_LATENCY_BOUNDS_MS) + 1))
        sizes = defaultdict(lambda: [0] * (len(ENTRY_SIZE_BOUNDS) + 1))
        count = 0
        for topic in topics:
            ml = getattr(topic, "ledger", None) if topic.persistent else None
            counters = getattr(ml, "counters", None)
            if counters is None:
                continue
            count += 1
            namespace = str(topic.topic_name.namespace_name)
            values = per_ns[namespace]
            for key, value in self._ml_values(topic, ml, counters).items():
                values[key] += value
            latency[namespace] = [a + b for a, b in zip(latency[namespace], counters.add_latency_buckets)]
            sizes[namespace] = [a + b for a, b in zip(sizes[namespace], counters.entry_size_buckets)]
        family = _gauge("pulsar_ml_count", "Managed ledgers open", ["cluster"])
        family.add_metric([self.cluster], count)
        yield family
        for name in _ML_NAMES:
            family = _gauge(f"pulsar_ml_{name}", _ML_HELP.get(name, name), ["cluster", "namespace"])
            for namespace, values in sorted(per_ns.items()):
                family.add_metric([self.cluster, namespace], values[name])
            yield family
        yield from _bucket_families("pulsar_ml_AddEntryLatencyBuckets", ADD_LATENCY_BOUNDS_MS,
                                    latency, self.cluster, "Adds by latency in ms (not cumulative)")
        yield from _bucket_families("pulsar_ml_EntrySizeBuckets", ENTRY_SIZE_BOUNDS, sizes,
                                    self.cluster, "Entries added by size in bytes (not cumulative)")

    def _ml_values(self, topic, ml, counters) -> dict:
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
            "NumberOfMessagesInBacklog": sum(s.backlog() for s in list(topic.subscriptions.values())
                                             if s.durable),
            "StoredMessagesSize": topic.storage_size() * copies,
        }

    # ---------------------------------------------------------------- connections and lookups
    def _connection_families(self):
        counters = self.broker.counters
        broker = self.broker.config.advertisedAddress
        for name, doc, value in (
                ("pulsar_active_connections", "Open client connections",
                 len(self.broker.connections)),
                ("pulsar_connection_created_total_count", "Connections accepted",
                 counters.connections_created),
                ("pulsar_connection_create_success_count", "Connections created successfully",
                 counters.connections_created),
                ("pulsar_connection_closed_total_count", "Connections closed",
                 counters.connections_closed)):
            family = _gauge(name, doc, ["cluster", "broker"])
            family.add_metric([self.cluster, broker], value)
            yield family

    def _lookup_families(self):
        counters = self.broker.counters
        for name, doc, value in (
                ("pulsar_broker_lookup_answers", "Lookups answered (not redirected)",
                 counters.lookup_answers),
                ("pulsar_broker_lookup_redirects", "Lookups redirected", counters.lookup_redirects),
                ("pulsar_broker_lookup_failures", "Lookups failed", counters.lookup_failures),
                ("pulsar_broker_lookup_pending_requests", "Lookups in progress",
                 counters.lookup_pending)):
            family = _gauge(name, doc, ["cluster"])
            family.add_metric([self.cluster], value)
            yield family
        summary = counters.lookup_latency
        family = Metric("pulsar_broker_lookup", "Latency of lookups in ms", "summary")
        for q in LOOKUP_QUANTILES:
            family.add_sample("pulsar_broker_lookup", {"cluster": self.cluster, "quantile": str(q)},
                              summary.quantile(q))
        family.add_sample("pulsar_broker_lookup_count", {"cluster": self.cluster}, summary.count)
        family.add_sample("pulsar_broker_lookup_sum", {"cluster": self.cluster}, summary.sum_ms)
        yield family


    def _schema_families(self):
        results = getattr(self.broker.schema_registry, "check_results", {})
        compatible = CounterMetricFamily("pulsar_schema_compatible", "Schemas found compatible",
                                         labels=["cluster", "namespace"])
        incompatible = CounterMetricFamily("pulsar_schema_incompatible",
                                           "Schemas found incompatible", labels=["cluster", "namespace"])
        for namespace, (ok, refused) in sorted(results.items()):
            compatible.add_metric([self.cluster, namespace], ok)
            incompatible.add_metric([self.cluster, namespace], refused)
        yield compatible
        yield incompatible


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


def _consumer_families() -> dict:
    """The per-consumer families; ``msg_ack_rate`` is a list of samples, because its name is also
    the topic-level ``pulsar_consumer_msg_ack_rate`` family they join (one family per name)."""
    families = {n: _gauge(f"pulsar_consumer_{n}", doc, _CONSUMER_LABELS)
                for n, doc in _CONSUMER_NAMES if n != "msg_ack_rate"}
    families["msg_ack_rate"] = []
    return families


def _add_consumer(families, sub_labels, consumer, rates) -> None:
    labels = sub_labels + [consumer.name, str(consumer.consumer_id)]
    values = {"msg_rate_out": rates[0], "msg_throughput_out": rates[1],
              "msg_rate_redeliver": rates[2], "msg_ack_rate": rates[3],
              "unacked_messages": consumer.unacked,
              "blocked_on_unacked_messages": 1 if consumer.blocked else 0,
              "available_permits": max(consumer.permits, 0)}
    for name, value in values.items():
        if name == "msg_ack_rate":
            families[name].append((dict(zip(_CONSUMER_LABELS, labels)), value))
        else:
            families[name].add_metric(labels, value)


def _bucket_families(name, bounds, per_namespace, cluster, doc):
    """Pulsar's ML bucket form: ``name{quantile="low_high"}`` per bucket, ``name_OVERFLOW``."""
    family = _gauge(name, doc, ["cluster", "namespace", "quantile"])
    overflow = _gauge(f"{name}_OVERFLOW", f"{doc}: above the last bound", ["cluster", "namespace"])
    for namespace, buckets in sorted(per_namespace.items()):
        for label, value in zip(bucket_labels(bounds), buckets):
            family.add_metric([cluster, namespace, label], value)
        overflow.add_metric([cluster, namespace], buckets[-1])
    yield family
    yield overflow
