"""
Benchmark the bookie's local storage: adds with fsync on, a bounded number in flight.

    python scripts/bench_bookie.py [--small N] [--large N] [--in-flight N] [--dir PATH]

Runs a BookieStorage (real journal thread, real files, default group-commit and checkpoint settings) on
the real reactor in a temporary directory, for 100-byte entries and then 64 KiB entries, and prints adds/s,
MB/s, p50/p99 add latency (add_entry call -> Deferred fired) and fsyncs/s against adds/s.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet import defer, task  # noqa: E402

from pulsar_twisted.bookie.storage import BookieStorage  # noqa: E402


async def run_case(reactor, base: str, name: str, count: int, size: int, in_flight: int) -> None:
    directory = tempfile.mkdtemp(prefix=f"bench-{name}-", dir=base)
    storage = BookieStorage(os.path.join(directory, "journal"), [os.path.join(directory, "ledgers")], reactor)
    await storage.start()
    payload = os.urandom(size)
    latencies = []
    done = defer.Deferred()
    state = {"issued": 0, "completed": 0, "outstanding": 0}
    clock = time.perf_counter

    def issue():
        # Keep `in_flight` adds outstanding: each completion issues the next one (a plain callback, the way
        # the ledger client drives a bookie, no coroutine per add).
        while state["outstanding"] < in_flight and state["issued"] < count:
            entry_id = state["issued"]
            state["issued"] += 1
            state["outstanding"] += 1
            started = clock()
            storage.add_entry(1, entry_id, payload, b"bench", entry_id - 1).addCallbacks(
                completed, failed, callbackArgs=(started,))

    def completed(_, started):
        latencies.append(clock() - started)
        state["outstanding"] -= 1
        state["completed"] += 1
        if state["completed"] == count:
            done.callback(None)
        elif not state.get("scheduled"):
            # Refill once per reactor turn rather than once per completion: a journal group completes
            # hundreds of adds in one callFromThread.
            state["scheduled"] = True
            reactor.callLater(0, refill)

    def refill():
        state["scheduled"] = False
        issue()

    def failed(f):
        if not done.called:
            done.errback(f)

    before = storage.stats()
    start = clock()
    issue()
    await done
    elapsed = clock() - start
    after = storage.stats()
    await storage.stop()
    shutil.rmtree(directory, ignore_errors=True)

    latencies.sort()
    fsyncs = after["fsyncs"] - before["fsyncs"]
    groups = after["journal_groups"] - before["journal_groups"]
    print(f"{name}: {count} adds of {size} bytes, {in_flight} in flight, {elapsed:.2f} s")
    print(f"  {count / elapsed:,.0f} adds/s   {count * size / elapsed / 1e6:,.1f} MB/s")
    print(f"  latency p50 {latencies[len(latencies) // 2] * 1e3:.2f} ms   "
          f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.2f} ms   max {latencies[-1] * 1e3:.2f} ms")
    print(f"  {fsyncs / elapsed:,.0f} fsyncs/s vs {count / elapsed:,.0f} adds/s "
          f"({count / max(fsyncs, 1):,.0f} adds per fsync, {groups} groups, "
          f"{after['checkpoints']} checkpoints)")


async def main(reactor, args) -> None:
    base = args.dir or tempfile.gettempdir()
    await run_case(reactor, base, "small", args.small, 100, args.in_flight)
    await run_case(reactor, base, "large", args.large, 64 * 1024, args.in_flight)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=100_000, help="number of 100-byte adds")
    parser.add_argument("--large", type=int, default=3_000, help="number of 64 KiB adds")
    parser.add_argument("--in-flight", type=int, default=1000, help="adds outstanding at once")
    parser.add_argument("--dir", help="where to create the temporary bookie dirs (default: system temp)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    task.react(lambda reactor: defer.Deferred.fromCoroutine(main(reactor, arguments)))
