#!/usr/bin/env python3
"""
Topics benchmark: how many topics one standalone broker creates per second and holds in memory.

It starts its own ``pulsar-standalone`` (as ``scripts/bench_broker.py`` does: subprocess, free ports,
fsync on, data in a temporary directory) and then, with ``--topics N`` (default 10,000):

1. creates N persistent topics in ``public/default``, each by a producer that sends one message and
   stays open (``--window`` creations in flight at once), and reports the creation rate;
2. reports the broker's RSS growth per loaded topic (RSS after minus RSS before, divided by N; the
   broker's own start-up and a warm-up of 200 topics are excluded);
3. looks every topic up again (binary-protocol LOOKUP, ``--window`` in flight) and reports the time;
4. lists the namespace over the binary protocol (GET_TOPICS_OF_NAMESPACE) and over the admin REST API
   (``GET /admin/v2/persistent/public/default``) and checks that every topic is in both lists.

The topics are created with the project's own Deferred-based client (``pulsar_twisted.client``): it
pipelines producer creations on one connection, so the figure is the broker's, not one client thread's
round trips (the official client's ``create_producer`` blocks its calling thread; ``--official``
runs the same creation with it instead, spread over ``--threads`` threads).

Usage (from the repository root)::

    python scripts/bench_topics.py --topics 10000
    python scripts/bench_topics.py --topics 100000
    python scripts/bench_topics.py --topics 10000 --official --threads 16
    python scripts/bench_topics.py --topics 2000 --profile /tmp/prof      # cProfile of the create phase
    python scripts/bench_topics.py --topics 2000 --tracemalloc /tmp/mem   # top allocations per topic

``--profile DIR`` / ``--tracemalloc DIR`` put a ``sitecustomize`` of the benchmark's own first on the
broker's path (the project's code is untouched): SIGUSR1 starts cProfile (or takes a tracemalloc
snapshot) when the create phase starts, SIGUSR2 stops it and writes ``DIR/create.pstats`` and
``DIR/create.txt`` (the top functions by own time), or ``DIR/tracemalloc.txt`` (the allocations still
alive after the phase, grouped by line, in bytes per created topic).

Targets (issue 14, item 4): >= 2,000 creations/s, <= 5 KB RSS per loaded idle topic, 100,000 topics with a
producer each in under 1 GB of broker RSS, every lookup answered, listings without a cap.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import shutil
import threading
import time
import urllib.request

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_broker import Standalone, _busy_seconds, machine_info  # noqa: E402

NAMESPACE = "persistent://public/default/"

PROFILE_HOOK = """\
import os, signal
_dir = os.environ["BENCH_PROFILE_DIR"]
_mode = os.environ["BENCH_PROFILE_MODE"]
_state = {}
def _start(*_):
    if _mode == "cprofile":
        import cProfile
        _state["p"] = cProfile.Profile()
        _state["p"].enable()
    else:
        import gc, tracemalloc
        gc.collect()
        _state["s0"] = tracemalloc.take_snapshot()
def _stop(*_):
    n = int(open(os.path.join(_dir, "count")).read())
    if _mode == "cprofile":
        import io, pstats
        p = _state.pop("p")
        p.disable()
        p.dump_stats(os.path.join(_dir, "create.pstats"))
        out = io.StringIO()
        st = pstats.Stats(p, stream=out)
        st.sort_stats("tottime").print_stats(45)
        st.sort_stats("cumulative").print_stats(60)
        with open(os.path.join(_dir, "create.txt"), "w") as f:
            f.write(out.getvalue())
    else:
        import gc, tracemalloc
        gc.collect()
        s1 = tracemalloc.take_snapshot()
        filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
        diff = s1.filter_traces(filters).compare_to(_state.pop("s0").filter_traces(filters), "lineno")
        total = sum(d.size_diff for d in diff)
        with open(os.path.join(_dir, "tracemalloc.txt"), "w") as f:
            f.write("%d topics: %.0f bytes per topic in all\\n" % (n, total / n))
            for d in diff[:60]:
                f.write("%8.0f B/topic %7.2f blocks/topic  %s\\n"
                        % (d.size_diff / n, d.count_diff / n, d.traceback))
    open(os.path.join(_dir, "done"), "w").close()
if _mode == "tracemalloc":
    import tracemalloc
    tracemalloc.start(1)
signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
"""


def _profile_env(args):
    """Put the profiling hook on the broker's path (``--profile`` / ``--tracemalloc``): its directory."""
    out = args.profile or args.tracemalloc
    if not out:
        return None
    os.makedirs(out, exist_ok=True)
    hook = os.path.join(out, "hook")
    os.makedirs(hook, exist_ok=True)
    with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
        f.write(PROFILE_HOOK)
    os.environ["PYTHONPATH"] = hook + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    os.environ["BENCH_PROFILE_DIR"] = out
    os.environ["BENCH_PROFILE_MODE"] = "cprofile" if args.profile else "tracemalloc"
    return out


def _profile_signal(args, broker, signum, count=0):
    out = args.profile or args.tracemalloc
    if not out:
        return
    import signal
    done = os.path.join(out, "done")
    if signum == signal.SIGUSR2:
        with open(os.path.join(out, "count"), "w") as f:
            f.write(str(count))
        if os.path.exists(done):
            os.unlink(done)
    broker.popen.send_signal(signum)
    if signum == signal.SIGUSR2:
        deadline = time.monotonic() + 600
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.2)
        print("profile written to", out)
    else:
        time.sleep(2.0 if args.tracemalloc else 0.2)
WARMUP = 200


def _own_cpu():
    t = psutil.Process().cpu_times()
    return t.user + t.system


def _web_port(broker):
    with open(os.path.join(broker.workdir, "standalone.conf")) as f:
        return int(re.search(r"^webServicePort=(\d+)$", f.read(), re.M).group(1))


class Window:
    """Run ``start(i)`` (a Deferred factory) for i in ``range(first, last)``, ``size`` at a time."""

    def __init__(self, start, first, last, size):
        from twisted.internet import defer
        self.start, self.next, self.last, self.size = start, first, last, size
        self.running = 0
        self.errors = []
        self.done = defer.Deferred()

    def run(self):
        for _ in range(self.size):
            self._launch()
        if self.running == 0:
            self.done.callback(None)
        return self.done

    def _launch(self):
        if self.next >= self.last:
            return
        i, self.next = self.next, self.next + 1
        self.running += 1
        d = self.start(i)
        d.addErrback(lambda f: self.errors.append((i, f.getErrorMessage())))
        d.addBoth(self._finished)

    def _finished(self, _):
        self.running -= 1
        self._launch()
        if self.running == 0 and not self.done.called:
            self.done.callback(None)


def _run_twisted(fn):
    """Run ``fn(reactor)`` (returning a Deferred) on the global reactor in this process."""
    from twisted.internet import defer, reactor
    result = {}

    def go():
        d = defer.ensureDeferred(fn(reactor))
        d.addCallbacks(lambda r: result.setdefault("value", r),
                       lambda f: result.setdefault("error", f))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(go)
    reactor.run(installSignalHandlers=False)
    if "error" in result:
        result["error"].raiseException()
    return result["value"]


def _topic(i):
    return f"{NAMESPACE}bench-topic-{i:07d}"


async def _own_client_run(reactor, args, broker, report):
    from pulsar_twisted.client import Client
    from pulsar_twisted.daemons.gctune import GcFreezePolicy
    # This process is the load: it holds every producer, and without the daemons' collector policy
    # its full collections walk them all, a cost that grows with the topics (the client's CPU per
    # creation rose from 0.28 to 0.46 ms between 10k and 100k topics and outweighed the broker's).
    gc_policy = GcFreezePolicy(reactor)
    gc_policy.start()
    client = Client(broker.url, reactor=reactor, operation_timeout_seconds=120)
    producers = []

    def create(i):
        d = client.create_producer(_topic(i), batching_enabled=False)

        def created(producer):
            producers.append(producer)
            return producer.send(b"x" * 100)
        return d.addCallback(created)

    async def phase(name, first, last, start):
        window = Window(start, first, last, args.window)
        cpu0, busy0, own0, t0 = broker.cpu(), _busy_seconds(), _own_cpu(), time.monotonic()
        await window.run()
        elapsed = time.monotonic() - t0
        report(name, last - first, elapsed, broker.cpu() - cpu0, _busy_seconds() - busy0, window.errors,
               _own_cpu() - own0)
        return elapsed

    import signal
    await phase("warm-up", 0, WARMUP, create)
    time.sleep(0.5)
    rss0 = broker.rss()
    _profile_signal(args, broker, signal.SIGUSR1)
    await phase("create", WARMUP, WARMUP + args.topics, create)
    time.sleep(1.0)  # let the last acks, logs and collections settle before reading RSS
    rss1 = broker.rss()
    _profile_signal(args, broker, signal.SIGUSR2, args.topics)
    total = WARMUP + args.topics
    await phase("lookup", 0, total, lambda i: client.lookup.lookup(_topic(i)))
    t0 = time.monotonic()
    listed = await client.lookup.topics_of_namespace("public/default", mode=0)
    binary_s = time.monotonic() - t0
    await client.close()
    gc_policy.stop()
    return rss0, rss1, listed, binary_s


def _official_create(args, broker, report):
    import pulsar
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                           operation_timeout_seconds=120, io_threads=2)
    producers, errors, lock = [], [], threading.Lock()

    def worker(first, last, step):
        for i in range(first, last, step):
            try:
                p = client.create_producer(_topic(i), batching_enabled=False)
                p.send(b"x" * 100)
                with lock:
                    producers.append(p)
            except Exception as e:  # reported, not fatal: the count of errors is the figure
                errors.append((i, str(e)))

    def phase(name, first, last):
        threads = [threading.Thread(target=worker, args=(first + k, last, args.threads))
                   for k in range(args.threads)]
        cpu0, busy0, own0, t0 = broker.cpu(), _busy_seconds(), _own_cpu(), time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report(name, last - first, time.monotonic() - t0, broker.cpu() - cpu0,
               _busy_seconds() - busy0, errors, _own_cpu() - own0)

    phase("warm-up", 0, WARMUP)
    rss0 = broker.rss()
    phase("create", WARMUP, WARMUP + args.topics)
    time.sleep(1.0)
    rss1 = broker.rss()
    return client, rss0, rss1


def _admin_list(broker):
    url = f"http://127.0.0.1:{_web_port(broker)}/admin/v2/persistent/public/default"
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=300) as answer:
        topics = json.loads(answer.read())
    return topics, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=10000)
    ap.add_argument("--window", type=int, default=200, help="creations/lookups in flight (own client)")
    ap.add_argument("--official", action="store_true", help="create with the official client")
    ap.add_argument("--threads", type=int, default=16, help="threads of --official")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--config", action="append", default=[], help="extra key=value for the broker")
    ap.add_argument("--profile", metavar="DIR", help="cProfile the broker's create phase into DIR")
    ap.add_argument("--tracemalloc", metavar="DIR", help="tracemalloc the create phase's allocations into DIR")
    args = ap.parse_args()
    _profile_env(args)

    print(machine_info())
    workdir = tempfile.mkdtemp(prefix="bench-topics-")
    broker = Standalone(workdir, extra_config=args.config)
    broker.start()
    rows = []

    def report(name, n, elapsed, cpu, busy, errors, client_cpu):
        other = max(0.0, busy - cpu - client_cpu) / elapsed / psutil.cpu_count() * 100 if elapsed else 0
        rows.append(name)
        print(f"{name:8s} {n:7d} in {elapsed:8.2f} s = {n / elapsed:8.0f}/s  broker CPU {cpu:7.2f} s"
              f"  ({cpu * 1000 / max(n, 1):.2f} ms each)  client CPU {client_cpu:6.2f} s  other CPU {other:4.0f}%  errors {len(errors)}"
              + (f" e.g. {errors[0]}" if errors else ""), flush=True)

    try:
        rss_base = broker.rss()
        if args.official:
            client, rss0, rss1 = _official_create(args, broker, report)
            listed, binary_s = None, None
        else:
            rss0, rss1, listed, binary_s = _run_twisted(
                lambda reactor: _own_client_run(reactor, args, broker, report))
        expected = {_topic(i) for i in range(WARMUP + args.topics)}
        admin, admin_s = _admin_list(broker)
        print(f"RSS: at start {rss_base / 2**20:.1f} MB, after warm-up {rss0 / 2**20:.1f} MB, "
              f"after {args.topics} topics {rss1 / 2**20:.1f} MB: "
              f"{(rss1 - rss0) / args.topics / 1024:.2f} KB per topic")
        if listed is not None:
            print(f"list (binary GET_TOPICS_OF_NAMESPACE): {len(listed)} topics in {binary_s:.2f} s, "
                  f"all present: {expected <= set(listed)}")
        print(f"list (admin GET /admin/v2/persistent/public/default): {len(admin)} topics in "
              f"{admin_s:.2f} s, all present: {expected <= set(admin)}")
        if args.official:
            client.close()
    finally:
        broker.stop()
        if args.keep:
            print("data kept in", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
