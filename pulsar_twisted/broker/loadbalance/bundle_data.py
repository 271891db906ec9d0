"""
The leader's aggregated bundle data (Pulsar's ``BundleData`` under
``/loadbalance/bundle-data/<tenant>/<ns>/<range>``): each bundle's message rates and throughputs
averaged over the last ``SHORT_SAMPLES`` and ``LONG_SAMPLES`` load reports (Pulsar's
``TimeAverageMessageData``: a running mean whose sample count stops growing at the maximum, so
that old samples fade).
"""

from pulsar_twisted.metadata.layout import BUNDLE_DATA_ROOT

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")


def bundle_data_path(bundle: str) -> str:
    """``bundle`` is ``tenant/ns/0x.._0x..``."""
    return f"{BUNDLE_DATA_ROOT}/{bundle}"


def time_average(max_samples: int) -> dict:
    return {"maxSamples": max_samples, "numSamples": 0, **dict.fromkeys(_FIELDS, 0.0)}


def update_average(average: dict, stats: dict) -> None:
    """Fold one NamespaceBundleStats sample into a TimeAverageMessageData (in place)."""
    n = min(average["numSamples"] + 1, average["maxSamples"])
    for field in _FIELDS:
        average[field] = (average[field] * (n - 1) + float(stats.get(field) or 0)) / n
    average["numSamples"] = n


class BundleDataAggregator:
    """``update(reports)`` folds every broker's ``lastStats`` into ``data`` (bundle name ->
    BundleData); bundles no broker reports any more are dropped."""

    def __init__(self):
        self.data = {}

    def update(self, reports: dict) -> None:
        seen = set()
        for report in reports.values():
            for bundle, stats in (report.get("lastStats") or {}).items():
                entry = self.data.get(bundle)
                if entry is None:
                    entry = self.data[bundle] = {"shortTermData": time_average(SHORT_SAMPLES),
                                                 "longTermData": time_average(LONG_SAMPLES), "topics": 0}
                update_average(entry["shortTermData"], stats)
                update_average(entry["longTermData"], stats)
                entry["topics"] = int(stats.get("topics") or 0)
                seen.add(bundle)
        for bundle in [b for b in self.data if b not in seen]:
            del self.data[bundle]
