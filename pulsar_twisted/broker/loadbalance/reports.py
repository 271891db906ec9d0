"""
Load reports (Pulsar's ``LocalBrokerData``): what a broker writes into its registration node
``/loadbalance/brokers/<host:webport>`` for the leader's placement and shedding.

``HostUsage`` samples the process's CPU time and resident memory (injectable readers, so tests
drive them), ``broker_load`` computes the figures of a BrokerService's loaded topics per bundle
(Pulsar's ``NamespaceBundleStats`` in ``lastStats``), ``local_broker_data`` assembles the JSON under
Pulsar's field names. ``needs_update`` is Pulsar's rule for rewriting the node: a figure changed by
more than ``loadBalancerReportUpdateThresholdPercentage`` percent, or
``loadBalancerReportUpdateMaxIntervalMinutes`` passed (never more often than
``loadBalancerReportUpdateMinIntervalMillis``).

Usages are ``{"usage", "limit"}`` pairs: CPU in percent of one core (limit 100 per core), memory in
MB (limit: the machine's memory), bandwidth in Kbit/s of message payload (limit:
``loadBalancerOverrideBrokerNicSpeedGbps``).
"""

import os
import resource

from pulsar_twisted.broker.ownership import topic_hash

#: Pulsar's LocalBrokerData figures compared by ``needs_update``.
_RATE_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
_USAGE_FIELDS = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")


def _process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _resident_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1048576.0
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _machine_mb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1048576.0
    except (ValueError, OSError):
        return 0.0


class HostUsage:
    """CPU and memory of this process. ``sample()`` -> ``{"cpu": {...}, "memory": {...}}``;
    the CPU figure is the usage since the previous sample (0 on the first)."""

    def __init__(self, clock, cpu_seconds=_process_cpu_seconds, resident_mb=_resident_mb,
                 machine_mb=_machine_mb, cores: int = None):
        self.clock = clock
        self.cpu_seconds = cpu_seconds
        self.resident_mb = resident_mb
        self.machine_mb = machine_mb
        self.cores = cores or os.cpu_count() or 1
        self._last = None
        self.cpu_percent = 0.0

    def sample(self) -> dict:
        now, cpu = self.clock.seconds(), self.cpu_seconds()
        if self._last is not None and now > self._last[0]:
            self.cpu_percent = max(0.0, 100.0 * (cpu - self._last[1]) / (now - self._last[0]))
        self._last = (now, cpu)
        return {"cpu": {"usage": self.cpu_percent, "limit": 100.0 * self.cores},
                "memory": {"usage": self.resident_mb(), "limit": self.machine_mb()}}


def _empty_bundle_stats() -> dict:
    return {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
            "consumerCount": 0, "producerCount": 0, "topics": 0, "cacheSize": 0}


def broker_load(broker, bundle_of) -> dict:
    """Figures of ``broker``'s loaded topics: totals and ``lastStats`` (bundle name -> Pulsar's
    NamespaceBundleStats). ``bundle_of(topic_name)`` names a topic's bundle, or None to leave
    the topic out of ``lastStats`` (it still counts in the totals)."""
    totals = dict.fromkeys(_RATE_FIELDS, 0.0)
    producers = consumers = 0
    stats = {}
    for topic in list(broker.topics.values()):
        rate_in, tput_in, rate_out, tput_out = topic.counters.rates
        n_producers = len(topic.producers)
        n_consumers = sum(len(s.consumers) for s in list(topic.subscriptions.values()))
        values = (rate_in, rate_out, tput_in, tput_out)
        for field, value in zip(_RATE_FIELDS, values):
            totals[field] += value
        bundle = bundle_of(topic.topic_name)
        if bundle is not None:
            row = stats.setdefault(str(bundle), _empty_bundle_stats())
            for field, value in zip(_RATE_FIELDS, values):
                row[field] += value
            row["producerCount"] += n_producers
            row["consumerCount"] += n_consumers
            row["topics"] += 1
        producers += n_producers
        consumers += n_consumers
    return {"totals": totals, "lastStats": stats, "numTopics": len(broker.topics),
            "numProducers": producers, "numConsumers": consumers}


def owned_bundle_finder(owned):
    """``bundle_of`` for ``broker_load``: the bundle of ``owned`` (NamespaceBundles) a topic falls
    in, None when none does."""
    by_namespace = {}
    for bundle in owned:
        by_namespace.setdefault(bundle.namespace, []).append(bundle)

    def bundle_of(name):
        h = topic_hash(str(name))
        for bundle in by_namespace.get(str(name.namespace_name), ()):
            if bundle.includes(h):
                return bundle
        return None
    return bundle_of


def local_broker_data(base: dict, host: dict, load: dict, bundles, now_ms: int, nic_kbps: float) -> dict:
    """The report: ``base`` (the registration's URLs and names) plus Pulsar's LocalBrokerData
    load fields from ``host`` (HostUsage.sample) and ``load`` (broker_load); ``bundles`` the
    owned bundle names."""
    totals = load["totals"]
    data = dict(base)
    data.update({
        "cpu": host["cpu"], "memory": host["memory"],
        "directMemory": {"usage": 0.0, "limit": host["memory"]["limit"]},
        "bandwidthIn": {"usage": totals["msgThroughputIn"] * 8 / 1024.0, "limit": nic_kbps},
        "bandwidthOut": {"usage": totals["msgThroughputOut"] * 8 / 1024.0, "limit": nic_kbps},
        "msgRateIn": totals["msgRateIn"], "msgRateOut": totals["msgRateOut"],
        "msgThroughputIn": totals["msgThroughputIn"], "msgThroughputOut": totals["msgThroughputOut"],
        "numTopics": load["numTopics"], "numBundles": len(bundles),
        "numProducers": load["numProducers"], "numConsumers": load["numConsumers"],
        "bundles": sorted(bundles), "lastStats": load["lastStats"], "lastUpdate": now_ms,
        "persistentTopicsEnabled": True, "nonPersistentTopicsEnabled": True,
        "lastBundleGains": [], "lastBundleLosses": [], "protocols": {},
        "loadReportType": "LocalBrokerData",
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    })
    return data


def usage_percent(pair) -> float:
    """A ``{"usage", "limit"}`` pair in percent (0 without a limit)."""
    if not isinstance(pair, dict):
        return 0.0
    limit = float(pair.get("limit") or 0)
    return 100.0 * float(pair.get("usage") or 0) / limit if limit > 0 else 0.0


def max_resource_usage(data: dict, weights=None) -> float:
    """Pulsar's getMaxResourceUsage(WithWeight): the highest (weighted) usage, as a fraction."""
    weights = weights or {}
    return max(usage_percent(data.get(field)) * weights.get(field, 1.0) for field in _USAGE_FIELDS) / 100.0


def _percent_change(old: float, new: float) -> float:
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100.0 * abs(new - old) / abs(old)


def needs_update(last: dict, current: dict, elapsed_seconds: float, threshold_percent: float,
                 max_interval_seconds: float, min_interval_seconds: float = 0.0) -> bool:
    """Pulsar's rule for rewriting the report (see the module doc); ``last`` None: never
    written."""
    if last is None:
        return True
    if elapsed_seconds < min_interval_seconds:
        return False
    if elapsed_seconds >= max_interval_seconds:
        return True
    changes = [_percent_change(float(last.get(f) or 0), float(current.get(f) or 0))
               for f in _RATE_FIELDS + ("numBundles", "numTopics")]
    changes += [abs(usage_percent(last.get(f)) - usage_percent(current.get(f))) for f in _USAGE_FIELDS]
    return max(changes) > threshold_percent
