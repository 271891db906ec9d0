"""
Placement of a free bundle: Pulsar's ``LeastLongTermMessageRate`` strategy over the brokers' load
reports (``reports.py``) and the leader's bundle data (``bundle_data.py``).

A broker's score is the long-term message rate (in + out) of the bundles it owns plus those just
assigned to it (``preallocated``, not yet in its report; one without bundle data counts Pulsar's
default of 50 msg/s in and 50 out, ``DEFAULT_BUNDLE_RATE``), or infinity when any of its resources
is used above ``loadBalancerBrokerOverloadedThresholdPercentage``. The bundle goes to a broker of
the lowest score, drawn by ``rng`` among equals; when every broker is overloaded, drawn among
all of them (Pulsar's "assign randomly as all brokers are overloaded"). The leader runs it
(``manager.py``).
"""

import math
import random

from pulsar_twisted.broker.loadbalance.reports import max_resource_usage


#: msgRateIn + msgRateOut assumed for a preallocated bundle never seen (ModularLoadManagerImpl's
#: DEFAULT_MESSAGE_RATE, in and out), so that bundles placed in a burst spread.
DEFAULT_BUNDLE_RATE = 100.0


def long_term_rate(bundle_data: dict) -> float:
    """msgRateIn + msgRateOut of a BundleData's ``longTermData`` (0 when unknown)."""
    data = (bundle_data or {}).get("longTermData") or {}
    return float(data.get("msgRateIn") or 0) + float(data.get("msgRateOut") or 0)


def broker_score(report: dict, bundle_data: dict, preallocated=(), overload_threshold: float = 0.85) -> float:
    """Pulsar's LeastLongTermMessageRate score of one broker (see the module doc). ``report``:
    its LocalBrokerData; ``bundle_data``: bundle name -> BundleData; ``overload_threshold`` a
    fraction."""
    if max_resource_usage(report) > overload_threshold:
        return math.inf
    total = 0.0
    owned = list(report.get("bundles") or [])
    for bundle in owned + [b for b in preallocated if b not in owned]:
        data = bundle_data.get(bundle)
        stats = (report.get("lastStats") or {}).get(bundle)
        if data is not None:
            total += long_term_rate(data)
        elif stats is not None or bundle in owned:
            stats = stats or {}
            total += float(stats.get("msgRateIn") or 0) + float(stats.get("msgRateOut") or 0)
        else:
            total += DEFAULT_BUNDLE_RATE
    return total


def choose_broker(reports: dict, bundle_data: dict, preallocated: dict = None,
                  overload_threshold: float = 0.85, rng=random):
    """``(broker_id, scores)``: the broker (of ``reports``, broker id -> LocalBrokerData) a new
    bundle goes to, None without brokers. ``preallocated``: broker id -> bundles assigned to it
    since its last report."""
    preallocated = preallocated or {}
    scores = {broker: broker_score(report, bundle_data, preallocated.get(broker, ()), overload_threshold)
              for broker, report in reports.items()}
    if not scores:
        return None, scores
    best = min(scores.values())
    candidates = sorted(b for b, s in scores.items() if s == best)
    return rng.choice(candidates), scores
