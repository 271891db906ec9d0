"""
Broker-wide counters for /metrics that no topic owns: connections (Pulsar's
``pulsar_active_connections``, ``pulsar_connection_created_total_count``, ...) and topic lookups
(``pulsar_broker_lookup_*`` and the ``pulsar_broker_lookup`` latency summary), and the replicated
subscriptions' snapshots (``pulsar_replicated_subscriptions_*``).

Lookups are counted where Pulsar counts them (its ``TopicLookupBase``): every binary LOOKUP and
every HTTP ``/lookup/v2`` goes through ``BrokerService.lookup``. An answer naming another broker
(``redirect``) counts as a redirect, any other success as an answer, a refusal (authorization,
too many lookups, bad namespace, ...) as a failure.
"""

import functools

from twisted.internet import defer
from twisted.python.failure import Failure

from pulsar_twisted.broker.replicated_subscriptions import SnapshotStats
from pulsar_twisted.common.latency import LatencySummary

#: Quantiles of the lookup latency summary, Pulsar's (``TopicLookupBase.lookupLatency``).
LOOKUP_QUANTILES = (0.5, 0.99, 0.999, 1.0)


class BrokerCounters:
    """What ``BrokerService`` counts for /metrics; read at scrape time, never reset."""

    def __init__(self, clock):
        self.clock = clock
        self.connections_created = 0
        self.connections_closed = 0
        self.lookup_answers = 0
        self.lookup_redirects = 0
        self.lookup_failures = 0
        self.lookup_pending = 0
        self.lookup_latency = LatencySummary()
        #: The replicated subscriptions' snapshots (``pulsar_replicated_subscriptions_*``).
        self.snapshots = SnapshotStats()

    def connection_opened(self) -> None:
        self.connections_created += 1

    def connection_closed(self) -> None:
        self.connections_closed += 1

    def lookup_started(self) -> float:
        """A lookup begins; returns its start time for ``lookup_finished``."""
        self.lookup_pending += 1
        return self.clock.seconds()

    def lookup_finished(self, started: float, result=None, failed: bool = False) -> None:
        """A lookup that began at ``started`` ended with ``result`` (or failed)."""
        self.lookup_pending -= 1
        self.lookup_latency.observe(max(self.clock.seconds() - started, 0.0) * 1000.0)
        if failed:
            self.lookup_failures += 1
        elif getattr(result, "redirect", False):
            self.lookup_redirects += 1
        else:
            self.lookup_answers += 1


def counted_lookup(method):
    """Decorates ``BrokerService.lookup`` (a method returning a Deferred, or its answer when it has
    one at once; always a Deferred once decorated) so that each call is
    counted in ``self.counters``: pending while it runs, then an answer, a redirect or a failure,
    and its latency."""
    @functools.wraps(method)
    def lookup(self, *args, **kwargs):
        counters = self.counters
        started = counters.lookup_started()

        def answered(result):
            counters.lookup_finished(started, result)
            return result

        def failed(failure):
            counters.lookup_finished(started, failed=True)
            return failure
        try:
            result = method(self, *args, **kwargs)
        except Exception:
            return defer.fail(failed(Failure()))
        if not isinstance(result, defer.Deferred):
            # Answered at once (a standalone broker's usual case): no callbacks to chain.
            counters.lookup_finished(started, result)
            return defer.succeed(result)
        return result.addCallbacks(answered, failed)
    return lookup
