"""
Placement of a free bundle: Pulsar's ``LeastLongTermMessageRate`` strategy over the brokers' load
reports (``reports.py``) and the leader's bundle data (``bundle_data.py``).

A broker's score is the long-term message rate (in + out) of the bundles it owns plus those just
assigned to it (``preallocated``, not yet in its report), or infinity when any of its resources
is used above ``loadBalancerBrokerOverloadedThresholdPercentage``. The bundle goes to a broker of
the lowest score; when every broker is overloaded, to any of them. Among equals the broker asked
(``prefer``) wins, else one drawn by ``rng`` (Pulsar draws at random even then; keeping the bundle
where the client asked saves it a redirect when nothing tells the brokers apart, as on an idle
cluster).
"""

import math
import random

from pulsar_twisted.broker.loadbalance.reports import max_resource_usage


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
    for bundle in list(report.get("bundles") or []) + list(preallocated):
        data = bundle_data.get(bundle)
        if data is not None:
            total += long_term_rate(data)
        else:
            stats = (report.get("lastStats") or {}).get(bundle) or {}
            total += float(stats.get("msgRateIn") or 0) + float(stats.get("msgRateOut") or 0)
    return total


def choose_broker(reports: dict, bundle_data: dict, preallocated: dict = None,
                  overload_threshold: float = 0.85, rng=random, prefer: str = None):
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
    if prefer in candidates:
        return prefer, scores
    return rng.choice(candidates), scores
