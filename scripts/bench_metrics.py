#!/usr/bin/env python
"""
How long a /metrics scrape (and the admin routes that walk every topic) holds the reactor, on an
in-process broker with N topics (embedded metadata, fake ledgers; each topic with one durable
subscription and one published message).

For each N it reports, per route: the total scrape time, the longest single reactor callback
during it (a 1 ms ``LoopingCall`` probe: the largest gap between two of its ticks minus the
interval), the body size, and the broker's RSS. Usage::

    python scripts/bench_metrics.py --topics 1000 10000 [--routes /metrics /admin/v2/broker-stats/topics]

Run it on two commits and compare the figures as ratios (the machine is shared: noise).
"""

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, reactor, task  # noqa: E402
from twisted.web.test.requesthelper import DummyRequest  # noqa: E402

from pulsar_twisted.broker.admin.service import AdminService  # noqa: E402
from pulsar_twisted.testing.broker import BrokerHarness  # noqa: E402
from pulsar_twisted.web.site import make_router  # noqa: E402
from pulsar_twisted.web.routing import RouterResource  # noqa: E402

ROUTES = ("/metrics", "/admin/v2/broker-stats/topics", "/admin/v2/broker-stats/metrics")


def rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 1e6


class GcWatch:
    """The longest garbage collection (and its generation) since ``reset()``: a full collection
    over a heap of many topics is a reactor stall of its own, whoever allocated last."""

    def __init__(self):
        self.worst = (0.0, None)
        self._started = None
        gc.callbacks.append(self._event)

    def reset(self):
        self.worst = (0.0, None)

    def _event(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            took = time.perf_counter() - self._started
            if took > self.worst[0]:
                self.worst = (took, info["generation"])


GC = GcWatch()


class LagProbe:
    """A LoopingCall every ``interval`` s; ``worst`` is the longest gap between ticks beyond it
    (wall time), ``worst_cpu`` the most CPU the reactor thread spent between two ticks (the same
    gap without the time the OS ran other processes: the figure to trust on a loaded machine)."""

    def __init__(self, interval=0.001):
        self.interval = interval
        self.worst = self.worst_cpu = 0.0
        self._last = self._last_cpu = None
        self._loop = task.LoopingCall(self._tick)

    def reset(self):
        self.worst = self.worst_cpu = 0.0

    def _tick(self):
        now, cpu = time.perf_counter(), time.thread_time()
        if self._last is not None:
            self.worst = max(self.worst, now - self._last - self.interval)
            self.worst_cpu = max(self.worst_cpu, cpu - self._last_cpu)
        self._last, self._last_cpu = now, cpu

    def start(self):
        self._loop.start(self.interval, now=True)

    def stop(self):
        self._loop.stop()


@defer.inlineCallbacks
def build(n: int):
    """A started harness on the real reactor (a task.Clock re-sorts all its calls at every
    callLater: quadratic at many topics) with ``n`` persistent topics in public/default, each
    with a durable subscription ``s``, loaded ``batch`` at a time."""
    harness = BrokerHarness(clock=reactor)
    yield harness.start()
    broker = harness.broker
    batch = 500
    for first in range(0, n, batch):
        loads = [broker.get_topic(f"persistent://public/default/t-{i}")
                 for i in range(first, min(first + batch, n))]
        topics = yield defer.gatherResults(loads, consumeErrors=True)
        yield defer.gatherResults([t.create_subscription("s", None) for t in topics],
                                  consumeErrors=True)
    return harness


class DrainingRequest(DummyRequest):
    """A request whose connection asks a pull producer for more on the next reactor turn, as a
    transport does once its buffer is written (DummyRequest would loop in one callback)."""

    def registerProducer(self, producer, streaming):
        self.producer = producer
        reactor.callLater(0, self._pull)

    def _pull(self):
        if self.producer is not None:
            self.producer.resumeProducing()
            reactor.callLater(0, self._pull)

    def unregisterProducer(self):
        self.producer = None

    def write(self, data):
        # Counted, not kept (a page at 100k topics is hundreds of MB).
        self.written.append(b"")
        self.size = getattr(self, "size", 0) + len(data)


@defer.inlineCallbacks
def scrape(resource, path: str):
    request = DrainingRequest([b""])
    request.method = b"GET"
    request.path = path.encode()
    request.uri = request.path
    done = request.notifyFinish()
    probe = LagProbe()
    probe.start()
    yield task.deferLater(reactor, 0.01, lambda: None)
    probe.reset()
    GC.reset()
    started, started_cpu = time.perf_counter(), time.thread_time()
    resource.render(request)
    yield done
    total, cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    yield task.deferLater(reactor, 0.005, lambda: None)
    probe.stop()
    return (total, cpu, probe.worst, probe.worst_cpu, getattr(request, "size", 0),
            request.responseCode, GC.worst)


@defer.inlineCallbacks
def main(args):
    policy = None
    if args.gc_policy:
        # As a daemon once ready: freeze what start-up made, then look every second (so the burst of
        # topic loads below is frozen before the scrapes).
        from pulsar_twisted.daemons.gctune import GcFreezePolicy
        policy = GcFreezePolicy(reactor, check_seconds=1.0)
        policy.start()
    for n in args.topics:
        started = time.perf_counter()
        harness = yield build(n)
        built = time.perf_counter() - started
        if policy is not None:
            GC.reset()
            yield task.deferLater(reactor, 1.5, lambda: None)
            print(f"gc policy: {policy.freezes} freezes, {policy.frozen} objects frozen, longest GC "
                  f"while settling {GC.worst[0] * 1000:.1f} ms (gen {GC.worst[1]})", flush=True)
        # The admin service (and so the page's slices) on the real reactor, as in a broker.
        admin = AdminService(harness.broker, harness.store, harness.config, reactor)
        resource = RouterResource(make_router(admin, harness.config))
        print(f"N={n}: built in {built:.1f} s, RSS {rss_mb():.0f} MB", flush=True)
        for path in args.routes:
            for attempt in range(args.repeat):
                total, total_cpu, worst, cpu, size, code, (gc_took, gc_gen) = yield scrape(
                    resource, path)
                print(f"  {path:31} run {attempt + 1}: total {total * 1000:8.1f} ms wall "
                      f"{total_cpu * 1000:8.1f} ms CPU, longest "
                      f"callback {worst * 1000:7.1f} ms wall {cpu * 1000:7.1f} ms CPU, "
                      f"{size / 1e6:6.2f} MB, status {code}, longest GC {gc_took * 1000:.1f} ms "
                      f"(gen {gc_gen}), "
                      f"RSS {rss_mb():.0f} MB", flush=True)
        for topic in list(harness.broker.topics.values()):
            harness.broker.topics.pop(topic.name, None)
    reactor.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--routes", nargs="+", default=list(ROUTES))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--gc-policy", action="store_true",
                        help="run the daemons' GcFreezePolicy (daemons/gctune.py), as a broker does")
    args = parser.parse_args()
    reactor.callWhenRunning(lambda: main(args).addErrback(lambda f: (f.printTraceback(), reactor.stop())))
    reactor.run()
