#!/usr/bin/env python3
"""
Where a durable publish's CPU goes at a fixed rate: the broker's user and kernel CPU per message, its
context switches per message, and the same per broker thread (reactor, journal, storage, ...).

It starts a fresh ``pulsar-standalone`` (``pulsar_twisted.testing.process.StandaloneProcess``: free
ports, fsync on, its own temporary directory), warms up one topic, then sends unbatched 100-byte
messages at ``--rate`` for ``--seconds`` with the official client (``bench_broker.latency_run``) and
prints one line of figures and one per thread. ``--config KEY=VALUE`` overrides a broker key, e.g.
``journalInlineSyncMaxMillis=0`` to compare the journal's writer thread with the reactor's turn writes.

Usage (from the repository root)::

    python scripts/probe_publish_cpu.py --rate 5000
    python scripts/probe_publish_cpu.py --rate 5000 --config journalInlineSyncMaxMillis=0
"""

import argparse
import os
import sys

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_broker  # noqa: E402
from pulsar_twisted.testing.process import StandaloneProcess  # noqa: E402


def broker_process() -> psutil.Process:
    for child in psutil.Process().children(recursive=True):
        if "pulsar-standalone" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("no pulsar-standalone child process")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--rate", type=int, default=5000, help="messages per second (5,000)")
    ap.add_argument("--seconds", type=float, default=6.0, help="measured duration (6 s)")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    standalone = StandaloneProcess(dict(item.split("=", 1) for item in args.config))
    standalone.start()
    try:
        broker = broker_process()
        bench_broker.latency_run(standalone.service_url, "persistent://public/default/probe-warm",
                                 args.rate, 1, 100)
        cpu0, ctx0 = broker.cpu_times(), broker.num_ctx_switches()
        threads0 = {t.id: t for t in broker.threads()}
        result = bench_broker.latency_run(standalone.service_url, "persistent://public/default/probe",
                                          args.rate, args.seconds, 100)
        cpu1, ctx1 = broker.cpu_times(), broker.num_ctx_switches()
        threads1 = {t.id: t for t in broker.threads()}
        n = result["count"]
        print(f"rate {args.rate}/s ({result['achieved']:.0f} achieved), {n} messages: publish p50 "
              f"{result['p50']:.2f} ms, p99 {result['p99']:.2f} ms; broker per message: user "
              f"{(cpu1.user - cpu0.user) / n * 1e6:.1f} µs, sys {(cpu1.system - cpu0.system) / n * 1e6:.1f} µs, "
              f"voluntary context switches {(ctx1.voluntary - ctx0.voluntary) / n:.2f}, involuntary "
              f"{(ctx1.involuntary - ctx0.involuntary) / n:.2f}")
        for tid, after in sorted(threads1.items()):
            before = threads0.get(tid)
            if before is None:
                continue
            user = (after.user_time - before.user_time) / n * 1e6
            system = (after.system_time - before.system_time) / n * 1e6
            if user + system >= 0.05:
                name = "main (reactor)" if tid == broker.pid else f"thread {tid}"
                print(f"  {name}: user {user:.1f} µs, sys {system:.1f} µs per message")
    finally:
        standalone.cleanup()


if __name__ == "__main__":
    main()
