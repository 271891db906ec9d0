#!/usr/bin/env python
"""
How long the embedded metadata store's snapshot holds the reactor: N persistent nodes, then
``snapshot()`` while a 1 ms LoopingCall probes the reactor and a write is made every tick. Prints
the snapshot's total time, the longest reactor callback (wall and CPU) and the writes that landed
meanwhile. Usage::

    python scripts/bench_metadata_snapshot.py --nodes 100000 [--repeat 3]

Run it on two commits and compare the figures as ratios (the machine is shared: noise).
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, reactor, task  # noqa: E402

from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore  # noqa: E402


class Probe:
    def __init__(self, store):
        self.store, self.worst, self.worst_cpu, self.writes = store, 0.0, 0.0, 0
        self._last = self._last_cpu = None
        self._loop = task.LoopingCall(self._tick)

    def _tick(self):
        now, cpu = time.perf_counter(), time.thread_time()
        if self._last is not None:
            self.worst = max(self.worst, now - self._last - 0.001)
            self.worst_cpu = max(self.worst_cpu, cpu - self._last_cpu)
        self._last, self._last_cpu = now, cpu
        self.store.put(f"/bench/live-{self.writes % 100}", b"w").addCallback(self._landed)

    def _landed(self, _):
        self.writes += 1


@defer.inlineCallbacks
def main(args):
    with tempfile.TemporaryDirectory() as data:
        store = EmbeddedMetadataStore(data, reactor, sync=False, snapshot_log_bytes=1 << 40)
        yield store.start()
        for first in range(0, args.nodes, 5000):
            yield defer.gatherResults([
                store.put(f"/bench/ns-{i // 1000}/topic-{i}", b"x" * 64)
                for i in range(first, min(first + 5000, args.nodes))])
        print(f"{args.nodes} nodes written", flush=True)
        for attempt in range(args.repeat):
            probe = Probe(store)
            probe._loop.start(0.001)
            yield task.deferLater(reactor, 0.02, lambda: None)
            probe.worst = probe.worst_cpu = 0.0
            before, started = probe.writes, time.perf_counter()
            yield store.snapshot()
            took = time.perf_counter() - started
            probe._loop.stop()
            print(f"  run {attempt + 1}: snapshot {took * 1000:7.1f} ms, longest callback "
                  f"{probe.worst * 1000:7.1f} ms wall {probe.worst_cpu * 1000:7.1f} ms CPU, "
                  f"{probe.writes - before} writes landed meanwhile", flush=True)
        yield store.close()
    reactor.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    reactor.callWhenRunning(lambda: main(args).addErrback(lambda f: (f.printTraceback(), reactor.stop())))
    reactor.run()
