"""
Pulsar's ``ThresholdShedder`` (its default shedding strategy), as pure arithmetic over the brokers'
load reports; the leader runs it every ``loadBalancerSheddingIntervalMinutes``.

1. Each broker's usage is its highest weighted resource usage (``loadBalancerCPUResourceWeight``,
   ... ``loadBalancerBandwithOutResourceWeight``), smoothed with its history:
   ``usage = history * loadBalancerHistoryResourcePercentage + current * (1 - that)``.
2. A broker whose usage exceeds the cluster average by more than
   ``loadBalancerBrokerThresholdShedderPercentage`` sheds a share of its throughput:
   ``usage - average - threshold + 5%`` (Pulsar's additional margin) of its msgThroughputIn + Out,
   unless that is below ``loadBalancerBrokerThresholdShedderMinimumThroughputToOffload``.
3. Its bundles are taken biggest throughput first, skipping those unloaded less than
   ``loadBalancerSheddingGracePeriodMinutes`` ago, until that much is marked (at least one); a
   broker with a single bundle sheds nothing (moving it would only move the problem).
"""

from dataclasses import dataclass, field

from pulsar_twisted.broker.loadbalance.reports import max_resource_usage

#: Pulsar's ADDITIONAL_THRESHOLD_PERCENT_MARGIN.
ADDITIONAL_MARGIN = 0.05


@dataclass
class ShedderSettings:
    threshold_percent: float = 10.0
    history_fraction: float = 0.9
    minimum_throughput: float = 0.0
    grace_seconds: float = 1800.0
    weights: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, config) -> "ShedderSettings":
        return cls(
            threshold_percent=float(config.loadBalancerBrokerThresholdShedderPercentage),
            history_fraction=float(config.loadBalancerHistoryResourcePercentage),
            minimum_throughput=float(config.loadBalancerBrokerThresholdShedderMinimumThroughputToOffload),
            grace_seconds=60.0 * config.loadBalancerSheddingGracePeriodMinutes,
            weights={"cpu": config.loadBalancerCPUResourceWeight,
                     "memory": config.loadBalancerMemoryResourceWeight,
                     "directMemory": config.loadBalancerDirectMemoryResourceWeight,
                     "bandwidthIn": config.loadBalancerBandwithInResourceWeight,
                     "bandwidthOut": config.loadBalancerBandwithOutResourceWeight})


def bundle_throughput(report: dict, bundle: str) -> float:
    stats = (report.get("lastStats") or {}).get(bundle) or {}
    return float(stats.get("msgThroughputIn") or 0) + float(stats.get("msgThroughputOut") or 0)


class ThresholdShedder:
    """``find(reports, now)`` -> ``[(broker_id, bundle, reason)]`` to unload; keeps each broker's
    smoothed usage and the time each bundle was last shed (``unloaded(bundle, now)``)."""

    def __init__(self, settings: ShedderSettings):
        self.settings = settings
        self.usage = {}            # broker id -> smoothed usage (fraction)
        self.recently_unloaded = {}  # bundle -> time

    def unloaded(self, bundle: str, now: float) -> None:
        self.recently_unloaded[bundle] = now

    def _update_usage(self, reports: dict) -> float:
        s = self.settings
        for broker in list(self.usage):
            if broker not in reports:
                del self.usage[broker]
        for broker, report in reports.items():
            current = max_resource_usage(report, s.weights)
            history = self.usage.get(broker)
            self.usage[broker] = current if history is None else (
                history * s.history_fraction + current * (1 - s.history_fraction))
        return sum(self.usage.values()) / len(self.usage) if self.usage else 0.0

    def find(self, reports: dict, now: float) -> list:
        s = self.settings
        self.recently_unloaded = {b: t for b, t in self.recently_unloaded.items()
                                  if now - t < s.grace_seconds}
        average = self._update_usage(reports)
        if average <= 0:
            return []
        threshold = s.threshold_percent / 100.0
        out = []
        for broker in sorted(reports):
            report, usage = reports[broker], self.usage[broker]
            if usage < average + threshold:
                continue
            share = usage - average - threshold + ADDITIONAL_MARGIN
            throughput = float(report.get("msgThroughputIn") or 0) + float(report.get("msgThroughputOut") or 0)
            minimum = throughput * share
            bundles = list(report.get("bundles") or [])
            if minimum < s.minimum_throughput or len(bundles) <= 1:
                continue
            reason = (f"usage {usage:.1%} above the average {average:.1%} + {threshold:.0%}: "
                      f"offloading {share:.1%} of {throughput:.0f} B/s")
            marked = 0.0
            for bundle in sorted(bundles, key=lambda b: -bundle_throughput(report, b)):
                if bundle in self.recently_unloaded:
                    continue
                out.append((broker, bundle, reason))
                marked += bundle_throughput(report, bundle)
                if marked >= minimum:
                    break
        return out
