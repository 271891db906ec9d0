#!/usr/bin/env python3
"""
Broker benchmark in the manner of ``pulsar-perf``, driving the OFFICIAL Pulsar client (``import pulsar``).

It starts its own ``pulsar-standalone`` (broker + in-process bookie + embedded metadata store, fsync ON:
``journalSyncData=true``) in a subprocess on free ports with its data in a temporary directory, then measures:

1. unbatched publish msg/s (100-byte messages, async sends, bounded pending queue), from one producer
   and from several producer processes (the first of ``--procs``), each both ways as in 2.;
2. batched publish msg/s (batching_max_messages=1000, 5 ms delay), with 1 and with several producer
   processes in parallel, and the CPU of each client process. Each publish is run twice: with a Python
   send callback on every message (what applications do; the client's I/O thread then takes the GIL once
   per message, which caps one process near 40,000 msg/s) and with a callback on every 1,000th message
   only (``--callback-every``), which shows what the broker itself sustains;
3. the batched backlog drained by one consumer, with cumulative acks and with individual acks (which the
   client groups before sending);
4. p50/p99 publish latency (send -> callback) at a fixed, paced 5,000 msg/s unbatched;
5. broker CPU-ms per 10,000 messages for each phase (psutil cpu_times of the broker, before/after);
6. peak broker RSS over the run (sampled every 20 ms);
7. with ``--memory``: 1 GB of 10 KB batched messages to a topic whose subscription exists but does not
   consume, printing peak broker RSS, then draining the backlog and checking every message's index and bytes.

Usage (from the repository root)::

    python scripts/bench_broker.py            # full run, a few minutes
    python scripts/bench_broker.py --quick    # smoke check, < 60 s
    python scripts/bench_broker.py --memory   # the 1 GB backlog test only (add --quick for 100 MB)
    python scripts/bench_broker.py --profile  # also attach py-spy to the broker per phase, print hot spots
    python scripts/bench_broker.py --latency  # fixed rates 1k, 5k, 20k msg/s: publish and end-to-end
                                              # p50/p99/p99.9, broker CPU-ms/10k, RSS; 3 runs each + medians
    python scripts/bench_broker.py --housekeeping  # the latency mode at 5k msg/s while a backlog is
                                              # drained and trimmed and ledgers/entry logs roll over
                                              # (--drain-rate N paces the drain)
    python scripts/bench_broker.py --housekeeping-control  # the same drain, housekeeping held off
    python scripts/bench_broker.py --gc-stats # also log the broker's garbage collections, per phase

The table's "other CPU" column is the machine's busy time that is neither the broker nor the benchmark's
clients (other jobs on a shared machine): when it is high, the figures on that row are depressed.

Targets (2 cores, fsync on): batched >= 150,000 msg/s and drained at the same rate; unbatched >= 15,000
msg/s; p99 <= 5 ms at 5,000 msg/s; <= 60 broker CPU-ms per 10,000 batched messages; RSS < 300 MB with a
1 GB backlog.
"""

import argparse
import hashlib
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter

import psutil
import pulsar

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "persistent://public/default/"


def _client(url):
    """An official client that logs warnings only (its INFO lines would drown the table)."""
    return pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                         operation_timeout_seconds=30)


def _cpu_seconds(proc):
    t = proc.cpu_times()
    return t.user + t.system


def _busy_seconds():
    """Machine-wide non-idle CPU seconds, all cores."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------
# The broker under test
# --------------------------------------------------------------------------------------------------

class Standalone:
    """A ``twistd -n pulsar-standalone`` subprocess on free ports, data in its own temporary directory."""

    def __init__(self, workdir, extra_config=(), gc_log=False, gc_threshold=None):
        self.workdir = workdir
        self.gc_log = os.path.join(workdir, "gc.log") if gc_log or gc_threshold else None
        self.gc_threshold = gc_threshold
        self.port = _free_port()
        self.web_port = _free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.extra_config = list(extra_config)
        self.popen = None
        self.proc = None
        self.log_path = os.path.join(workdir, "standalone.log")

    def start(self, timeout=60):
        conf = os.path.join(self.workdir, "standalone.conf")
        with open(conf, "w") as f:
            f.write("\n".join([
                f"brokerServicePort={self.port}",
                f"webServicePort={self.web_port}",
                "advertisedAddress=127.0.0.1",
                "bindAddress=127.0.0.1",
                "dataDirectory=data",
                "journalDirectory=data/bookkeeper/journal",
                "ledgerDirectories=data/bookkeeper/ledgers",
                "journalSyncData=true",
                *self.extra_config,
            ]) + "\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if self.gc_log:
            # A sitecustomize of our own, first on the path, logs the broker's garbage collections; the
            # project's code is untouched.
            hook = os.path.join(self.workdir, "gchook")
            os.makedirs(hook, exist_ok=True)
            with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
                f.write(GC_HOOK)
            env["PYTHONPATH"] = hook + os.pathsep + env["PYTHONPATH"]
            env["BENCH_GC_LOG"] = self.gc_log
            if self.gc_threshold:
                env["BENCH_GC_THRESHOLD"] = self.gc_threshold
        self._log = open(self.log_path, "wb")
        # twistd through the interpreter running this script, so no PATH surprises.
        self.popen = subprocess.Popen(
            [sys.executable, "-c", "from twisted.scripts.twistd import run; run()",
             "-n", "--pidfile=", "pulsar-standalone", "--config", conf],
            cwd=self.workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.proc = psutil.Process(self.popen.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.popen.returncode}; see {self.log_path}:\n"
                                   + self.tail())
            with open(self.log_path, "rb") as f:
                if b"pulsar-standalone ready" in f.read():
                    return
            time.sleep(0.1)
        raise RuntimeError(f"standalone not ready after {timeout} s; see {self.log_path}:\n" + self.tail())

    def tail(self, lines=30):
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")

    def stalls(self, worst=6):
        """The broker's stall detector lines (``reactor stalled N ms ...``): their count and the worst."""
        import re
        found = []
        with open(self.log_path, "rb") as f:
            for line in f.read().decode(errors="replace").splitlines():
                m = re.search(r"reactor stalled (\d+) ms(.*)", line)
                if m:
                    found.append((int(m.group(1)), m.group(0)))
        found.sort(key=lambda x: -x[0])
        return len(found), [text for _, text in found[:worst]]

    def cpu(self):
        return _cpu_seconds(self.proc)

    def rss(self):
        return self.proc.memory_info().rss

    def stop(self, timeout=30):
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._log.close()


GC_HOOK = """\
import gc, os, threading, time
_log = open(os.environ["BENCH_GC_LOG"], "a", buffering=1)
_start = [0.0]
def _gc_callback(phase, info, _now=time.perf_counter):
    if phase == "start":
        _start[0] = _now()
    else:
        ms = (_now() - _start[0]) * 1000.0
        _log.write("%.6f %d %.3f %s\\n" % (time.time(), info["generation"], ms,
                                            threading.current_thread().name))
gc.callbacks.append(_gc_callback)
if os.environ.get("BENCH_GC_THRESHOLD"):
    gc.set_threshold(*(int(x) for x in os.environ["BENCH_GC_THRESHOLD"].split(",")))
"""


def gc_summary(path, t0, t1):
    """Collections logged by GC_HOOK between wall times t0 and t1: count, total and max ms per generation."""
    out = {g: [0, 0.0, 0.0] for g in (0, 1, 2)}
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            try:
                ts, gen, ms, _thread = line.split(" ", 3)
                ts, gen, ms = float(ts), int(gen), float(ms)
            except ValueError:
                continue
            if t0 <= ts <= t1:
                o = out[gen]
                o[0] += 1
                o[1] += ms
                o[2] = max(o[2], ms)
    return out


class RssSampler(threading.Thread):
    """Samples the broker's RSS every ``interval`` seconds; keeps the overall and per-phase peaks."""

    def __init__(self, broker, interval=0.02):
        super().__init__(daemon=True)
        self.broker = broker
        self.interval = interval
        self.peak = 0
        self.phase_peak = 0
        self.timeline = []  # (monotonic time, rss) samples of the current phase
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            try:
                rss = self.broker.rss()
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self.phase_peak = max(self.phase_peak, rss)
            self.timeline.append((time.monotonic(), rss))
            self._halt.wait(self.interval)

    def reset_phase(self):
        self.phase_peak = self.broker.rss()
        self.timeline = []

    def profile(self, points=12):
        """RSS in MB at ``points`` evenly spaced moments of the current phase (shows growth vs plateau)."""
        tl = list(self.timeline)
        if not tl:
            return []
        step = max(1, len(tl) // points)
        picked = tl[::step][:points] + [tl[-1]]
        t0 = tl[0][0]
        return [(t - t0, rss / (1 << 20)) for t, rss in picked]

    def stop(self):
        self._halt.set()
        self.join()


class Profiler:
    """Optionally attaches ``py-spy record --gil`` to the broker for one phase and summarises its hot spots.

    ``--gil`` samples only the thread holding the GIL, so waits (epoll, fsync, condition variables) drop
    out and the counts approximate the broker's Python CPU time, which is what limits it."""

    def __init__(self, broker, enabled, outdir, rate=250):
        self.broker = broker
        self.enabled = enabled and shutil.which("py-spy") is not None
        self.requested = enabled
        self.outdir = outdir
        self.rate = rate
        self.popen = None
        self.path = None
        self.reports = []

    def start(self, name):
        if not self.enabled:
            return
        slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
        self.path = os.path.join(self.outdir, f"pyspy-{slug}.txt")
        self.name = name
        self.popen = subprocess.Popen(
            ["py-spy", "record", "-p", str(self.broker.popen.pid), "-r", str(self.rate), "--format", "raw",
             "--threads", "--gil", "--nonblocking", "--full-filenames", "-o", self.path],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # let it attach before the phase starts

    def stop(self):
        if self.popen is None:
            return
        self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.popen = None
        if os.path.exists(self.path):
            self.reports.append((self.name, self.path, summarise_pyspy(self.path)))


def summarise_pyspy(path, top=15):
    """Self and inclusive sample counts per function, from py-spy's collapsed-stack ("raw") output."""
    self_counts = Counter()
    incl_counts = Counter()
    threads = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(count)
            frames = stack.split(";")
            thread = frames[0] if frames and frames[0].startswith(("thread", "process")) else "?"
            frames = [fr for fr in frames if not fr.startswith(("thread", "process"))]
            if not frames:
                continue
            total += count
            threads[thread] += count
            self_counts[_func(frames[-1])] += count
            # Inclusive time of the project's own functions only: the reactor's frames are on every stack.
            for fn in {_func(fr) for fr in frames if "/pulsar_twisted/" in fr}:
                incl_counts[fn] += count
    return {"total": total, "self": self_counts.most_common(top), "incl": incl_counts.most_common(top),
            "threads": threads.most_common(5)}


def _func(frame):
    """``name (path/to/file.py:123)`` -> ``name (file.py)``: aggregate over lines of a function."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    filename = where.rsplit(":", 1)[0]
    parts = filename.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{name} ({short})"


# --------------------------------------------------------------------------------------------------
# Producer and consumer drivers
# --------------------------------------------------------------------------------------------------

def _payload(index, size):
    """Deterministic, checkable payload: 8-byte index then bytes derived from the index."""
    seed = hashlib.sha256(struct.pack(">Q", index)).digest()
    body = (seed * (size // len(seed) + 1))[: size - 8]
    return struct.pack(">Q", index) + body


def produce(url, topic, count, size, batching, max_pending, callback_every=1, batch_delay_ms=5,
            indexed=False, start_index=0, start_event=None, ready=None):
    """Publish ``count`` messages with the public ``Producer.send_async``; returns a stats dict.

    ``callback_every=1`` passes a (minimal) Python callback with every message, as most applications
    do; ``callback_every=K`` passes one with every K-th message and the last only (``None`` otherwise),
    which removes the client's per-message GIL hand-off from its I/O thread, the client's bottleneck.
    Either way the clock starts once the producer is connected (and after ``start_event``, so parallel
    processes start together) and stops when ``flush`` returns, i.e. once every send is acknowledged.
    """
    client = _client(url)
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,  # the client's default; 1,000 x 100 B fit
        batching_max_publish_delay_ms=batch_delay_ms, max_pending_messages=max_pending,
        block_if_queue_full=True, send_timeout_millis=120_000)
    fixed = os.urandom(size)
    ok = pulsar.Result.Ok
    errors = []
    acked = [0]

    def callback(res, _msg_id):
        if res != ok:
            errors.append(res)
        acked[0] += 1

    if ready is not None:
        ready.put(os.getpid())
    if start_event is not None:
        start_event.wait()
    me = psutil.Process()
    cpu0 = _cpu_seconds(me)
    t0 = time.monotonic()
    send = producer.send_async
    last = start_index + count - 1
    if callback_every == 1:
        if indexed:
            for i in range(start_index, start_index + count):
                send(_payload(i, size), callback)
        else:
            for _ in range(count):
                send(fixed, callback)
    else:
        for i in range(start_index, start_index + count):
            cb = callback if (i % callback_every == 0 or i == last) else None
            send(_payload(i, size) if indexed else fixed, cb)
    producer.flush()
    t1 = time.monotonic()
    cpu1 = _cpu_seconds(me)
    producer.close()
    client.close()
    expected = count if callback_every == 1 else len(range(start_index, last, callback_every)) + 1
    return {"count": count, "callbacks": acked[0], "expected_callbacks": expected, "errors": len(errors),
            "t0": t0, "t1": t1, "client_cpu": cpu1 - cpu0}


def _produce_worker(queue, ready, start_event, args, kwargs):
    try:
        queue.put(produce(*args, start_event=start_event, ready=ready, **kwargs))
    except BaseException as e:  # report, do not hang the parent
        ready.put(None)
        queue.put({"error": repr(e)})


def produce_parallel(url, topic, total, size, procs, batching, max_pending, callback_every=1):
    """``procs`` spawned processes, each with its own client and producer on ``topic``, started together.

    The rate is the total over the span from the first start to the last flush.
    """
    ctx = multiprocessing.get_context("spawn")  # no fork: the official client runs its own threads
    queue, ready, start_event = ctx.Queue(), ctx.Queue(), ctx.Event()
    share = total // procs
    workers = [ctx.Process(target=_produce_worker, args=(
        queue, ready, start_event, (url, topic, share, size, batching, max_pending),
        {"callback_every": callback_every, "start_index": k * share})) for k in range(procs)]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=120)
    start_event.set()
    results = [queue.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(60)
    bad = [r["error"] for r in results if "error" in r]
    if bad:
        raise RuntimeError(f"producer process failed: {bad}")
    merged = {key: sum(r[key] for r in results)
              for key in ("count", "callbacks", "expected_callbacks", "errors", "client_cpu")}
    merged.update(t0=min(r["t0"] for r in results), t1=max(r["t1"] for r in results),
                  client_cpu_each=[r["client_cpu"] for r in results])
    return merged


def create_subscription(url, topic, name):
    client = _client(url)
    client.subscribe(topic, name, initial_position=pulsar.InitialPosition.Earliest).close()
    client.close()


def consume(url, topic, subscription, expected, ack_mode, receiver_queue=20000, verify_size=None,
            idle_timeout_ms=10000, rate=0):
    """Drain ``expected`` messages with one consumer; returns a stats dict.

    ``ack_mode`` is ``"cumulative"`` (acknowledge_cumulative every 1,000 messages and on the last) or
    ``"individual"`` (acknowledge each message; the client groups acks for up to 100 ms / 1,000 ids
    before sending). With ``verify_size`` each payload is checked against ``_payload(n, size)`` in order.
    ``rate`` > 0 paces the receiving at that many messages per second (sleeping, checked every 100).
    """
    client = _client(url)
    consumer = client.subscribe(topic, subscription, receiver_queue_size=receiver_queue,
                                initial_position=pulsar.InitialPosition.Earliest)
    me = psutil.Process()
    received = 0
    bad = 0
    first_bad = None
    receive = consumer.receive
    cumulative = ack_mode == "cumulative"
    ack = consumer.acknowledge_cumulative if cumulative else consumer.acknowledge
    cpu0 = _cpu_seconds(me)
    t0 = time.monotonic()
    msg = None
    while received < expected:
        try:
            msg = receive(idle_timeout_ms)
        except pulsar.Timeout:
            break
        if verify_size is not None:
            data = msg.data()
            if data != _payload(received, verify_size):
                bad += 1
                if first_bad is None:
                    first_bad = (received, struct.unpack(">Q", data[:8])[0] if len(data) >= 8 else None)
        received += 1
        if not cumulative or received % 1000 == 0:
            ack(msg)
        if rate and received % 100 == 0:
            ahead = t0 + received / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    if cumulative and msg is not None:
        consumer.acknowledge_cumulative(msg)
    t1 = time.monotonic()
    cpu1 = _cpu_seconds(me)
    consumer.close()
    client.close()
    return {"count": received, "t0": t0, "t1": t1, "client_cpu": cpu1 - cpu0, "bad": bad,
            "first_bad": first_bad}


def latency_run(url, topic, rate, seconds, size):
    """Paced unbatched sends at ``rate`` msg/s; latency is send -> callback, in milliseconds."""
    client = _client(url)
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=10000,
                                      block_if_queue_full=True)
    payload = os.urandom(size)
    for _ in range(200):  # warm the connection and the ledger
        producer.send(payload)
    n = int(rate * seconds)
    sent_at = [0.0] * n
    done_at = [0.0] * n
    now = time.perf_counter
    ok = pulsar.Result.Ok
    errors = []

    def make_cb(i):
        def cb(res, _mid):
            done_at[i] = now()
            if res != ok:
                errors.append(res)
        return cb

    interval = 1.0 / rate
    sleep = time.sleep
    me = psutil.Process()
    cpu0 = _cpu_seconds(me)
    t0 = now()
    for i in range(n):
        # Sleep, never spin: a spinning thread holds the GIL and the client's I/O thread then waits up
        # to the 5 ms switch interval for it before each callback, which measures Python, not the broker.
        delay = t0 + i * interval - now()
        if delay > 0:
            sleep(delay)
        sent_at[i] = now()
        producer.send_async(payload, make_cb(i))
    producer.flush()
    t1 = now()
    cpu1 = _cpu_seconds(me)
    producer.close()
    client.close()
    series = [(d - s) * 1000.0 for s, d in zip(sent_at, done_at)]
    lat = sorted(series)

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]

    # Where the slow sends were: the first send of each stall (> 5 ms) with its offset into the run, so
    # periodic stalls (a checkpoint timer, garbage collections) show up as a pattern.
    stalls, last = [], -1000
    for i, ms in enumerate(series):
        if ms > 5.0:
            if i - last > rate // 100:
                stalls.append((sent_at[i] - t0, ms))
            else:
                stalls[-1] = (stalls[-1][0], max(stalls[-1][1], ms))
            last = i
    return {"count": n, "achieved": n / (t1 - t0), "p50": pct(50), "p99": pct(99), "p999": pct(99.9),
            "max": lat[-1], "errors": len(errors), "client_cpu": cpu1 - cpu0,
            "over5": sum(1 for ms in series if ms > 5.0), "stalls": stalls}


def _mono():
    """CLOCK_MONOTONIC in seconds: one clock for every process of the machine, so a send time stamped
    into a payload by the producer can be subtracted from the consumer process's receipt time."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _percentiles(values):
    lat = sorted(values)
    if not lat:
        return {"p50": float("nan"), "p99": float("nan"), "p999": float("nan"), "max": float("nan")}

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]

    return {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": lat[-1]}


def _e2e_consumer(url, topic, subscription, expected, ready, out):
    """Consumer process of the end-to-end runs: receive, stamp the receipt, acknowledge each message.

    Its latencies (ms) go to ``out``; ``ready`` is told once the subscription exists."""
    try:
        client = _client(url)
        consumer = client.subscribe(topic, subscription, receiver_queue_size=1000,
                                    initial_position=pulsar.InitialPosition.Latest)
        ready.put(os.getpid())
        lat = []
        unpack = struct.Struct(">d").unpack_from
        while len(lat) < expected:
            try:
                msg = consumer.receive(15000)
            except pulsar.Timeout:
                break
            now = _mono()
            lat.append((now - unpack(msg.data())[0]) * 1000.0)
            consumer.acknowledge(msg)
        consumer.close()
        client.close()
        out.put(lat)
    except BaseException as e:  # report, do not hang the parent
        ready.put(None)
        out.put(repr(e))


def paced_publish(url, topic, rate, seconds, size, on_start=None):
    """Unbatched sends paced at ``rate`` msg/s, each payload starting with its send time (``_mono``);
    publish latency is send -> send callback, in ms. ``on_start`` is called once warmed up."""
    client = _client(url)
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=10000,
                                      block_if_queue_full=True)
    pad = os.urandom(max(0, size - 8))
    stamp = struct.Struct(">d").pack
    for _ in range(200):  # warm the connection and the ledger
        producer.send(stamp(_mono()) + pad)
    n = int(rate * seconds)
    sent_at = [0.0] * n
    done_at = [0.0] * n
    ok = pulsar.Result.Ok
    errors = []

    def make_cb(i):
        def cb(res, _mid):
            done_at[i] = _mono()
            if res != ok:
                errors.append(res)
        return cb

    interval = 1.0 / rate
    if on_start is not None:
        on_start()
    me = psutil.Process()
    cpu0 = _cpu_seconds(me)
    t0 = _mono()
    for i in range(n):
        delay = t0 + i * interval - _mono()
        if delay > 0:
            time.sleep(delay)  # sleep, never spin (see latency_run)
        sent_at[i] = now = _mono()
        producer.send_async(stamp(now) + pad, make_cb(i))
    producer.flush()
    t1 = _mono()
    cpu1 = _cpu_seconds(me)
    producer.close()
    client.close()
    stats = _percentiles([(d - s) * 1000.0 for s, d in zip(sent_at, done_at)])
    stats.update(count=n, achieved=n / (t1 - t0), errors=len(errors), client_cpu=cpu1 - cpu0,
                 t0=t0, t1=t1)
    return stats


def storage_write_over_1ms(broker, topic):
    """Of ``topic``'s adds so far, the % whose storage write (the broker's managed-ledger add to
    durable, ``pulsar_storage_write_latency_le_*``) took over 1 ms: the broker's own share of a tail
    the client sees (the rest is the network, the dispatch, the client and the scheduler). NaN when
    /metrics cannot be read."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{broker.web_port}/metrics", timeout=30).read()
    except OSError:
        return float("nan")
    label = f'topic="{topic}"'
    buckets = {}
    for line in text.decode("utf-8", "replace").splitlines():
        if line.startswith("pulsar_storage_write_latency_le_") and label in line:
            name, _, value = line.rpartition(" ")
            buckets[name.split("{", 1)[0][len("pulsar_storage_write_latency_le_"):]] = float(value)
    total = sum(buckets.values())
    if not total:
        return float("nan")
    return 100.0 * (total - buckets.get("0_5", 0.0) - buckets.get("1", 0.0)) / total


def latency_point(bench, topic, rate, seconds, size, e2e, on_start=None):
    """One fixed-rate run (a bench phase): publish latency, and with ``e2e`` a consumer process
    subscribed to ``topic`` whose send -> receipt latencies are reported too."""
    url = bench.broker.url
    worker = None
    if e2e:
        ctx = multiprocessing.get_context("spawn")
        ready, out = ctx.Queue(), ctx.Queue()
        worker = ctx.Process(target=_e2e_consumer,
                             args=(url, topic, "e2e", int(rate * seconds), ready, out))
        worker.start()
        if ready.get(timeout=120) is None:
            raise RuntimeError(f"e2e consumer failed: {out.get(timeout=10)}")
    s = bench.phase(f"latency {rate}/s {'e2e' if e2e else 'publish'}",
                    lambda: paced_publish(url, topic, rate, seconds, size, on_start))
    s["rss"] = bench.broker.rss()
    s["storage_over_1ms"] = storage_write_over_1ms(bench.broker, topic)
    if worker is not None:
        lat = out.get(timeout=120)
        worker.join(30)
        if isinstance(lat, str):
            raise RuntimeError(f"e2e consumer failed: {lat}")
        s["e2e"] = _percentiles(lat)
        s["e2e_received"] = len(lat)
    return s


def _drain_worker(url, topic, subscription, expected, out, start, rate):
    try:
        start.wait(300)
        out.put(consume(url, topic, subscription, expected, "individual", receiver_queue=5000, rate=rate))
    except BaseException as e:
        out.put({"error": repr(e)})


def run_latency(args, bench):
    """Fixed rates (``--rates``), each ``--repeat`` times, publish-only and end to end; with
    ``--housekeeping`` each run at the first rate happens while another process drains and
    acknowledges a large backlog (so its ledgers are trimmed, entry logs GCed) and the measured
    topic's own ledgers roll over (the standalone runs with small ledgers, see ``main``)."""
    size = 100
    t = int(time.time())
    rates = [int(r) for r in args.rates.split(",")]
    secs = args.latency_secs or (2 if args.quick else 5)
    bench.latency_rows = rows = []
    if args.housekeeping:
        rates = [args.rate]
        backlog = args.backlog or (100_000 if args.quick else 500_000)
    for rate in rates:
        for e2e in (False, True):
            for k in range(args.repeat):
                topic = f"{NAMESPACE}bench-lat-{rate}-{'e2e' if e2e else 'pub'}-{k}-{t}"
                drain = None
                if args.housekeeping:
                    drain = _start_backlog_drain(bench, f"{NAMESPACE}bench-hk-{rate}-{e2e}-{k}-{t}",
                                                 backlog, size, args.drain_rate)
                s = latency_point(bench, topic, rate, secs, size, e2e,
                                  on_start=drain[2].set if drain is not None else None)
                if drain is not None:
                    s["drain"] = _finish_backlog_drain(*drain, backlog)
                rows.append((rate, e2e, s))


def _start_backlog_drain(bench, topic, count, size, drain_rate=0):
    """Publish ``count`` messages in small batches (10 messages an entry: many entries, so many
    ledgers) to a topic with one subscription, then start a process that drains it (individual
    acks) once the returned event is set."""
    url = bench.broker.url
    create_subscription(url, topic, "drain")
    client = _client(url)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=1, max_pending_messages=20000,
                                      block_if_queue_full=True)
    payload = os.urandom(size)
    for _ in range(count):
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    client.close()
    ctx = multiprocessing.get_context("spawn")
    out, start = ctx.Queue(), ctx.Event()
    worker = ctx.Process(target=_drain_worker, args=(url, topic, "drain", count, out, start, drain_rate))
    worker.start()
    return worker, out, start


def _finish_backlog_drain(worker, out, _start, count):
    result = out.get(timeout=600)
    worker.join(30)
    if "error" in result:
        raise RuntimeError(f"drain failed: {result['error']}")
    return {"received": result["count"], "expected": count, "secs": result["t1"] - result["t0"]}


def _median(values):
    values = sorted(v for v in values if v == v)
    return values[len(values) // 2] if values else float("nan")


def _fmt(key, value):
    """Latencies with two decimals, the rest (CPU, MB, %) as integers."""
    return f"{value:.2f}" if key.startswith(("pub", "e2e", "broker")) else f"{value:.0f}"


def render_latency(args, bench):
    """The latency table: one line per run, then the medians per (rate, kind)."""
    table = Table()
    groups = {}
    for rate, e2e, s in bench.latency_rows:
        e = s.get("e2e", {})
        cells = {"pub p50": s["p50"], "pub p99": s["p99"], "pub p99.9": s["p999"], "pub max": s["max"],
                 "e2e p50": e.get("p50", float("nan")), "e2e p99": e.get("p99", float("nan")),
                 "e2e p99.9": e.get("p999", float("nan")),
                 "CPU-ms/10k": 1000.0 * s["broker_cpu"] / s["count"] * 10000,
                 "RSS MB": s["rss"] / (1 << 20), "other CPU": 100.0 * s["other_cpu"] / s["wall"],
                 "broker >1ms %": s.get("storage_over_1ms", float("nan"))}
        groups.setdefault((rate, e2e), []).append(cells)
        kind = "e2e" if e2e else "publish"
        extra = ""
        if "drain" in s:
            d = s["drain"]
            extra = f"  (drained {d['received']:,}/{d['expected']:,} in {d['secs']:.1f} s)"
        if "e2e_received" in s and s["e2e_received"] != s["count"]:
            extra += f"  (received {s['e2e_received']:,} of {s['count']:,})"
        if s["errors"]:
            extra += f"  ({s['errors']} errors)"
        table.add(f"{rate:,}/s {kind}", f"{s['achieved']:,.0f}",
                  *(_fmt(k, v) for k, v in cells.items()), extra)
    header = ("run", "achieved", "pub p50", "pub p99", "pub p99.9", "pub max", "e2e p50", "e2e p99",
              "e2e p99.9", "CPU-ms/10k", "RSS MB", "other CPU%", "broker >1ms %", "")
    lines = [table.render(header), "", f"medians of {args.repeat} runs:"]
    med = Table()
    for (rate, e2e), runs in groups.items():
        keys = list(runs[0])
        med.add(f"{rate:,}/s {'e2e' if e2e else 'publish'}",
                *(_fmt(k, _median([r[k] for r in runs])) for k in keys))
    lines.append(med.render(("median", "pub p50", "pub p99", "pub p99.9", "pub max", "e2e p50", "e2e p99",
                             "e2e p99.9", "CPU-ms/10k", "RSS MB", "other CPU%", "broker >1ms %")))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def machine_info():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"machine: nproc={os.cpu_count()}, cpu={model}, "
            f"mem={psutil.virtual_memory().total // (1 << 20)} MB, python={platform.python_version()}, "
            f"pulsar-client={getattr(pulsar, '__version__', '?')}, fsync=on (journalSyncData=true)")


class Table:
    def __init__(self):
        self.rows = []

    def add(self, *cols):
        self.rows.append(tuple(str(c) for c in cols))

    def render(self, header):
        rows = [header] + self.rows
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]

        def fmt(r):
            return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

        sep = "  ".join("-" * w for w in widths)
        return "\n".join([fmt(header), sep] + [fmt(r) for r in self.rows])


def _rate(stats):
    return stats["count"] / (stats["t1"] - stats["t0"])


def _cpu_pct(stats):
    return 100.0 * stats["client_cpu"] / (stats["t1"] - stats["t0"])


class Bench:
    def __init__(self, args, broker, sampler, profiler):
        self.args = args
        self.broker = broker
        self.sampler = sampler
        self.profiler = profiler
        self.table = Table()
        self.notes = []
        self.gc_rows = []

    def phase(self, name, fn):
        """Run ``fn`` measuring broker CPU and peak RSS around it (and profiling it if asked)."""
        print(f"... {name}", flush=True)
        self.sampler.reset_phase()
        self.profiler.start(name)
        cpu0 = self.broker.cpu()
        busy0 = _busy_seconds()
        w0 = time.time()
        stats = fn()
        w1 = time.time()
        busy1 = _busy_seconds()
        cpu1 = self.broker.cpu()
        # Whatever else ran on the machine meanwhile (other users' tests...): busy CPU not ours.
        stats["other_cpu"] = max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - stats.get("client_cpu", 0.0))
        stats["wall"] = w1 - w0
        self.profiler.stop()
        stats["broker_cpu"] = cpu1 - cpu0
        stats["phase_rss"] = self.sampler.phase_peak
        gcs = gc_summary(self.broker.gc_log, w0, w1)
        if gcs:
            self.gc_rows.append((name, w1 - w0, gcs))
        return stats

    def row(self, what, stats, target=""):
        n = stats["count"]
        broker_ms = 1000.0 * stats["broker_cpu"] / n * 10000 if n else float("nan")
        dur = stats["t1"] - stats["t0"]
        self.table.add(what, f"{n:,}", f"{dur:.2f}", f"{_rate(stats):,.0f}", f"{broker_ms:.1f}",
                       f"{100.0 * stats['broker_cpu'] / dur:.0f}%", f"{_cpu_pct(stats):.0f}%",
                       f"{100.0 * stats['other_cpu'] / stats['wall']:.0f}%",
                       f"{stats['phase_rss'] / (1 << 20):.0f}", target)

    HEADER = ("phase", "msgs", "secs", "msg/s", "broker CPU-ms/10k", "broker CPU", "client CPU",
              "other CPU", "peak RSS MB", "target")


def run_perf(args, bench):
    url = bench.broker.url
    q = args.quick
    n_unbatched = args.unbatched or (20_000 if q else 100_000)
    n_batched = args.batched or (200_000 if q else 1_000_000)
    procs = [int(p) for p in (args.procs or ("2" if q else "2,4")).split(",") if p]
    lat_secs = args.latency_secs or (3 if q else 10)
    every = args.callback_every
    size = 100
    t = int(time.time())
    cb_label = {1: "callback/msg", every: f"callback 1/{every}"}

    phases = set(args.phases.split(","))

    # 1. Unbatched publish, with a callback per message and with sampled callbacks; then from
    #    procs[0] producer processes in parallel (one producer each, one topic), both ways.
    topic_u = f"{NAMESPACE}bench-unbatched-{t}"
    if "unbatched" in phases:
        produce(url, topic_u, 2000, size, False, 1000)  # warm-up: topic and ledger creation
    for p, cbe in ([(1, 1), (1, every), *((p, c) for p in procs[:1] for c in (1, every))]
                   if "unbatched" in phases else []):
        name = f"unbatched publish, {p} proc{'s' if p > 1 else ''}, {cb_label[cbe]}"
        if p == 1:
            s = bench.phase(name, lambda cbe=cbe: produce(url, topic_u, n_unbatched, size, False, 5000,
                                                          callback_every=cbe))
            where = "1 producer"
        else:
            s = bench.phase(name, lambda p=p, cbe=cbe: produce_parallel(
                url, topic_u, n_unbatched * p, size, p, False, 5000, callback_every=cbe))
            bench.notes.append(f"{name}: client CPU-s per process "
                               + ", ".join(f"{c:.2f}" for c in s["client_cpu_each"])
                               + f" over {s['t1'] - s['t0']:.2f} s")
            where = f"{p} processes"
        _check_sent(s, bench, name)
        bench.row(f"publish unbatched, {where}, {cb_label[cbe]}", s,
                  ">= 15,000 msg/s" if p == 1 else ">= 60,000 msg/s")
    if "batched" in phases:
        run_batched(bench, url, t, n_batched, procs, size, every, cb_label)

    # 4. Latency at a fixed rate.
    if "latency" in phases:
        topic_l = f"{NAMESPACE}bench-latency-{t}"
        bench.latency = bench.phase("latency", lambda: latency_run(url, topic_l, args.rate, lat_secs, size))


def run_batched(bench, url, t, n_batched, procs, size, every, cb_label):
    # 2. Batched publish into one topic whose two subscriptions exist already (so 3. drains exactly
    #    this data): one producer in this process, then several producer processes in parallel.
    topic_b = f"{NAMESPACE}bench-batched-{t}"
    create_subscription(url, topic_b, "drain-cumulative")
    create_subscription(url, topic_b, "drain-individual")
    produce(url, f"{NAMESPACE}bench-warm-{t}", 20_000, size, True, 50_000)
    produced = 0
    runs = [(1, 1), *((p, 1) for p in procs), (1, every), *((p, every) for p in procs[:1])]
    for p, cbe in runs:
        name = f"batched publish, {p} proc{'s' if p > 1 else ''}, {cb_label[cbe]}"
        if p == 1:
            s = bench.phase(name, lambda cbe=cbe: produce(url, topic_b, n_batched, size, True, 50_000,
                                                          callback_every=cbe))
        else:
            s = bench.phase(name, lambda p=p, cbe=cbe: produce_parallel(url, topic_b, n_batched, size, p, True,
                                                                        50_000, callback_every=cbe))
            bench.notes.append(f"{name}: client CPU-s per process "
                               + ", ".join(f"{c:.2f}" for c in s["client_cpu_each"])
                               + f" over {s['t1'] - s['t0']:.2f} s")
        _check_sent(s, bench, name)
        produced += s["count"]
        where = "in-process" if p == 1 else f"{p} processes"
        bench.row(f"publish batched, {where}, {cb_label[cbe]}", s, ">= 150,000 msg/s")

    # 3. Drain the batched backlog with one consumer, once per ack mode (one subscription each).
    for mode in ("cumulative", "individual"):
        s = bench.phase(f"consume {mode}",
                        lambda mode=mode: consume(url, topic_b, f"drain-{mode}", produced, mode))
        if s["count"] != produced:
            bench.notes.append(f"WARNING: consume {mode}: received {s['count']:,} of {produced:,}")
        label = "cumulative ack/1000" if mode == "cumulative" else "individual acks (grouped)"
        bench.row(f"consume batched backlog, {label}", s, ">= 150,000 msg/s")


def _check_sent(stats, bench, name):
    if stats["callbacks"] != stats["expected_callbacks"] or stats["errors"]:
        bench.notes.append(f"WARNING: {name}: {stats['callbacks']:,} of {stats['expected_callbacks']:,} "
                           f"callbacks, {stats['errors']} errors")


def run_memory(args, bench):
    url = bench.broker.url
    size = args.memory_msg_size
    total_bytes = (100 if args.quick else 1024) * (1 << 20)
    count = total_bytes // size
    topic = f"{NAMESPACE}bench-memory-{int(time.time())}"
    create_subscription(url, topic, "idle")
    s = bench.phase("memory publish",
                    lambda: produce(url, topic, count, size, True, 2000, indexed=True))
    _check_sent(s, bench, "memory publish")
    bench.row(f"memory: publish {count * size / (1 << 20):,.0f} MB of {size // 1024} KB msgs, "
              f"backlog kept", s, "RSS < 300 MB")
    bench.notes.append(f"memory publish: {count * size / (1 << 20) / (s['t1'] - s['t0']):,.0f} MB/s")
    bench.memory_peak = s["phase_rss"]
    bench.memory_timeline = bench.sampler.profile()
    bench.memory_after_publish = bench.broker.rss()
    verify = count if args.memory_verify is None else min(count, args.memory_verify)
    s = bench.phase("memory consume",
                    lambda: consume(url, topic, "idle", verify, "cumulative", receiver_queue=1000,
                                    verify_size=size))
    bench.row(f"memory: drain + verify {verify:,} msgs of backlog", s)
    ok = s["count"] == verify and s["bad"] == 0
    bench.memory_check = (f"backlog check: {s['count']:,} of {verify:,} messages received in order, "
                          f"{s['bad']} bad" + (f" (first bad at {s['first_bad']})" if s["bad"] else "")
                          + (" -> OK" if ok else " -> FAILED"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, < 60 s (smoke check)")
    ap.add_argument("--memory", action="store_true", help="run the 1 GB backlog memory test (only)")
    ap.add_argument("--profile", action="store_true", help="attach py-spy to the broker in each phase")
    ap.add_argument("--unbatched", type=int, help="messages for the unbatched publish (100,000)")
    ap.add_argument("--batched", type=int, help="messages per batched publish run (1,000,000)")
    ap.add_argument("--procs", help="comma-separated producer process counts for parallel runs (2,4)")
    ap.add_argument("--phases", default="unbatched,batched,latency",
                    help="of the default run, the phases to run (comma-separated: unbatched, batched "
                         "(with the consume phases), latency); all by default")
    ap.add_argument("--callback-every", type=int, default=1000,
                    help="for the sampled-callback runs: a send callback with every N-th message (1,000)")
    ap.add_argument("--rate", type=int, default=5000, help="paced rate for the latency test (5,000)")
    ap.add_argument("--latency-secs", type=float, help="duration of the latency test (10 s)")
    ap.add_argument("--latency", action="store_true",
                    help="latency mode (only): fixed rates, publish and end to end, --repeat runs each")
    ap.add_argument("--rates", default="1000,5000,20000", help="rates of the latency mode (1000,5000,20000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per rate in the latency mode (3)")
    ap.add_argument("--housekeeping", action="store_true",
                    help="latency mode at the first rate while a backlog is drained and trimmed, entry "
                         "logs GCed and ledgers rolled over (small ledgers and entry logs)")
    ap.add_argument("--housekeeping-control", action="store_true",
                    help="the --housekeeping load (the same drain beside the paced publish) with the "
                         "housekeeping held off (no rollover, no trim, no entry-log GC): run it beside "
                         "--housekeeping to tell what the housekeeping adds from what the drain costs")
    ap.add_argument("--backlog", type=int, help="messages of the housekeeping backlog (500,000)")
    ap.add_argument("--drain-rate", type=int, default=0,
                    help="with --housekeeping: pace the backlog's drain at this many msg/s (0, the "
                         "default: as fast as it goes, which also measures a full-rate dispatch "
                         "sharing the reactor; 20000 keeps ledgers trimming through the run without it)")
    ap.add_argument("--memory-msg-size", type=int, default=10 * 1024, help="message size for --memory")
    ap.add_argument("--memory-verify", type=int, help="messages to drain and verify after --memory (all)")
    ap.add_argument("--gc-stats", action="store_true",
                    help="log the broker's garbage collections (gc.callbacks via a sitecustomize on its "
                         "PYTHONPATH) and print pauses per phase")
    ap.add_argument("--broker-gc-threshold", metavar="G0,G1,G2",
                    help="EXPERIMENT: gc.set_threshold in the broker via the same hook (implies --gc-stats)")
    ap.add_argument("--keep", action="store_true", help="keep the broker's data directory and logs")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra standalone configuration line (repeatable)")
    args = ap.parse_args()

    if args.housekeeping_control:
        args.housekeeping = True
    if args.housekeeping:
        args.latency = True
        if args.housekeeping_control:
            # The same load (the backlog drained beside the paced publish) with the housekeeping
            # held off: no rollover, nothing trimmed (infinite retention), no entry-log GC. What the
            # drain itself costs the publish latency, to set the housekeeping run against.
            args.config = ["managedLedgerMaxEntriesPerLedger=50000000", "defaultRetentionTimeInMinutes=-1",
                           "defaultRetentionSizeInMB=-1", "gcWaitTime=3600000", *args.config]
        else:
            # Roll ledgers and entry logs often, GC and checkpoint every second: housekeeping all the time.
            args.config = ["managedLedgerMaxEntriesPerLedger=5000", "managedLedgerMinLedgerRolloverTimeMinutes=0",
                           "logSizeLimit=16777216", "gcWaitTime=1000", *args.config]
    workdir = tempfile.mkdtemp(prefix="bench-broker-")
    broker = Standalone(workdir, args.config, gc_log=args.gc_stats, gc_threshold=args.broker_gc_threshold)
    print(machine_info())
    print(f"standalone: {workdir} (log {broker.log_path})", flush=True)
    started = time.monotonic()
    broker.start()
    sampler = RssSampler(broker)
    sampler.start()
    profiler = Profiler(broker, args.profile, workdir)
    if args.profile and not profiler.enabled:
        print("py-spy not found on PATH: --profile ignored (pip install py-spy)")
    bench = Bench(args, broker, sampler, profiler)
    failed = None
    try:
        if args.memory:
            run_memory(args, bench)
        elif args.latency:
            run_latency(args, bench)
        else:
            run_perf(args, bench)
    except BaseException as e:
        failed = e
    finally:
        try:
            sampler.stop()
        finally:
            broker.stop()  # never leave a broker behind

    print()
    print(machine_info())
    print(f"broker: pulsar-standalone, 1 process, data on {workdir}; total run {time.monotonic() - started:.0f} s")
    print()
    if bench.table.rows:
        print(bench.table.render(Bench.HEADER))
        print("(CPU columns are % of one core over the phase; 'other CPU' is the rest of the machine's busy "
              "time, e.g. other jobs, which skews figures when high.)")
    if getattr(bench, "latency_rows", None):
        mode = (" with the drain, housekeeping held off" if args.housekeeping_control
                else " with housekeeping" if args.housekeeping else "")
        print(f"latency mode{mode}: unbatched {100} B messages, "
              f"ms; 'e2e' runs have a consumer process acknowledging each message; CPU-ms/10k is the "
              f"broker's over the run; 'broker >1ms %' is the share of the run's adds whose storage write "
              f"(managed-ledger add to durable, in the broker) took over 1 ms")
        print(render_latency(args, bench))
    lat = getattr(bench, "latency", None)
    if lat:
        print()
        print(f"latency, unbatched, paced at {args.rate:,} msg/s for {lat['count']:,} msgs "
              f"(achieved {lat['achieved']:,.0f} msg/s): p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, "
              f"p99.9 {lat['p999']:.2f} ms, max {lat['max']:.2f} ms  [target p99 <= 5 ms]; "
              f"broker CPU {1000.0 * lat['broker_cpu'] / lat['count'] * 10000:.1f} ms/10k"
              + (f"; {lat['errors']} errors" if lat["errors"] else ""))
        print(f"  {lat['over5']:,} sends over 5 ms in {len(lat['stalls'])} stalls; worst: "
              + ", ".join(f"{ms:.0f} ms at {t:.2f} s" for t, ms in sorted(lat["stalls"], key=lambda x: -x[1])[:6])
              + f"; client CPU {100.0 * lat['client_cpu'] / lat['wall']:.0f}%, "
              f"other CPU {100.0 * lat['other_cpu'] / lat['wall']:.0f}%")
        if lat["stalls"]:
            print("  stall starts (s): " + " ".join(f"{t:.2f}" for t, _ in lat["stalls"][:40]))
    if args.memory and hasattr(bench, "memory_peak"):
        print()
        print(f"memory: peak broker RSS while publishing {bench.memory_peak / (1 << 20):.0f} MB "
              f"(after publish {bench.memory_after_publish / (1 << 20):.0f} MB) [target < 300 MB]")
        print("  RSS over the publish (s: MB): "
              + ", ".join(f"{t:.1f}: {mb:.0f}" for t, mb in bench.memory_timeline))
        if hasattr(bench, "memory_check"):
            print(bench.memory_check)
    print()
    print(f"peak broker RSS over the run: {sampler.peak / (1 << 20):.0f} MB")
    count, worst = broker.stalls()
    print(f"broker stall detector: {count} reactor ticks over 50 ms late" + (", the worst:" if worst else ""))
    for text in worst:
        print("  " + text[:400])
    for note in bench.notes:
        print("note:", note)
    if bench.gc_rows:
        print()
        gt = Table()
        for name, secs, g in bench.gc_rows:
            gt.add(name, f"{secs:.1f}", *(f"{g[k][0]} / {g[k][1]:.0f} / {g[k][2]:.1f}" for k in (0, 1, 2)),
                   f"{100.0 * sum(v[1] for v in g.values()) / 1000.0 / secs:.1f}%")
        print("broker garbage collections per phase (count / total ms / max ms):")
        print(gt.render(("phase", "secs", "gen0", "gen1", "gen2", "GC share of wall")))
    for name, path, summary in profiler.reports:
        print()
        print(f"py-spy, phase '{name}': {summary['total']} samples holding the GIL at {profiler.rate} Hz ({path})")
        print("  threads: " + ", ".join(f"{t} {c}" for t, c in summary["threads"]))
        print("  top self:")
        for fn, c in summary["self"]:
            print(f"    {100.0 * c / summary['total']:5.1f}%  {fn}")
        print("  top inclusive (pulsar_twisted functions):")
        for fn, c in summary["incl"]:
            print(f"    {100.0 * c / summary['total']:5.1f}%  {fn}")
    if failed is not None:
        print()
        print(f"FAILED: {failed!r}; broker log tail:\n{broker.tail()}")
    if not args.keep and failed is None:
        if profiler.reports:  # keep the py-spy files, named above; drop the data
            shutil.rmtree(os.path.join(workdir, "data"), ignore_errors=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
