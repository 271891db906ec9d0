"""
``pulsar-perf``: load generator for a Pulsar service, as Pulsar's ``bin/pulsar-perf``.

``pulsar-perf produce TOPIC [-r RATE] [-n N] [-s SIZE] [-b BATCH_DELAY_MS | --disable-batching]
[-bm BATCH_MAX_MESSAGES] [-o MAX_PENDING] [-z CODEC] [--client ours|official|both] [--url URL]``
    Publishes ``N`` messages (0: until interrupted) of ``SIZE`` bytes at ``RATE`` msg/s (0: as
    fast as the pending window allows), with ``MAX_PENDING`` messages in flight. ``--client
    official`` drives the official ``pulsar`` client (``import pulsar``) with the same settings;
    ``--client both`` runs ours then the official one (each on its own topic ``TOPIC-ours`` /
    ``TOPIC-official``) and prints the throughput ratio ours/official.

``pulsar-perf consume TOPIC -s SUB [-n N] [-t TYPE] [-p POSITION] [--client ours|official]``
    Receives and acknowledges messages; latency is receive time minus publish time.

Every second a progress line gives msg/s, MB/s and latency percentiles (p50/p95/p99/max, ms);
at the end a summary with the aggregated rate and a latency histogram (HdrHistogram).
"""

import argparse
import os
import signal
import sys
import threading
import time

from hdrh.histogram import HdrHistogram

from pulsar_twisted.client import errors

DEFAULT_URL = "pulsar://localhost:6650"
#: Latencies are recorded in microseconds, up to an hour, 3 significant digits.
_HIGHEST_US = 3_600_000_000
_PERCENTILES = (50, 75, 90, 95, 99, 99.9, 99.99)


class Stats:
    """Counters and latency histograms for one run; thread-safe (official client callbacks)."""

    def __init__(self, label: str):
        self.label = label
        self.lock = threading.Lock()
        self.total = HdrHistogram(1, _HIGHEST_US, 3)
        self.interval = HdrHistogram(1, _HIGHEST_US, 3)
        self.count = self.bytes = self.failed = 0
        self._last_count = self._last_bytes = 0
        self._last_time = None
        self.started = None
        self.ended = None

    def start(self, now: float):
        self.started = self._last_time = now

    def record(self, latency_seconds: float, size: int):
        micros = min(_HIGHEST_US, max(1, int(latency_seconds * 1_000_000)))
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total.record_value(micros)
            self.interval.record_value(micros)

    def fail(self):
        with self.lock:
            self.failed += 1

    def progress(self, now: float, verb: str = "produced") -> str:
        """The line for the interval since the last call (and reset the interval)."""
        with self.lock:
            elapsed = max(1e-9, now - self._last_time)
            rate = (self.count - self._last_count) / elapsed
            mb = (self.bytes - self._last_bytes) / elapsed / (1024 * 1024)
            h = self.interval
            line = (f"[{self.label}] Throughput {verb}: {rate:10.1f} msg/s --- {mb:8.2f} MB/s "
                    f"--- failed {self.failed} --- Latency ms: p50 {_ms(h, 50)} - p95 "
                    f"{_ms(h, 95)} - p99 {_ms(h, 99)} - max {_max_ms(h)}")
            self._last_count, self._last_bytes, self._last_time = self.count, self.bytes, now
            self.interval.reset()
        return line

    def rate(self) -> float:
        end = self.ended if self.ended is not None else time.monotonic()
        return self.count / max(1e-9, end - (self.started or end))

    def summary(self, verb: str = "sent") -> str:
        """Aggregated throughput, latency percentiles and the histogram, as lines."""
        elapsed = max(1e-9, (self.ended or time.monotonic()) - (self.started or 0))
        h = self.total
        lines = [
            f"[{self.label}] Aggregated throughput stats --- {self.count} records {verb} --- "
            f"{self.count / elapsed:.1f} msg/s --- {self.bytes / elapsed / 1048576:.2f} MB/s "
            f"--- {self.failed} failed --- {elapsed:.2f} s",
            f"[{self.label}] Aggregated latency stats --- Latency ms: mean "
            f"{h.get_mean_value() / 1000:.3f} - " + " - ".join(
                f"p{p:g} {_ms(h, p)}" for p in _PERCENTILES) + f" - max {_max_ms(h)}",
            f"[{self.label}] Latency histogram (ms)   count   cumulative%",
        ]
        total = h.get_total_count()
        if total:
            cumulative = 0
            previous = 0
            for bound_ms in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                             None):
                upper = h.get_max_value() if bound_ms is None else int(bound_ms * 1000)
                upto = _count_upto(h, upper)
                in_bucket = upto - previous
                previous = upto
                if not in_bucket:
                    continue
                cumulative += in_bucket
                label = f"<= {bound_ms:g}" if bound_ms is not None else "> 10000"
                lines.append(f"[{self.label}]   {label:>10}   {in_bucket:9d}   "
                             f"{100.0 * cumulative / total:8.3f}")
                if upto >= total:
                    break
        return "\n".join(lines)


def _count_upto(histogram, micros) -> int:
    # hdrh has no cumulative count query by value; sum the recorded buckets.
    count = 0
    for item in histogram.get_recorded_iterator():
        if item.value_iterated_to > micros:
            break
        count += item.count_added_in_this_iter_step
    return count


def _ms(histogram, percentile) -> str:
    return f"{histogram.get_value_at_percentile(percentile) / 1000:.3f}"


def _max_ms(histogram) -> str:
    return f"{histogram.get_max_value() / 1000:.3f}"


# ---------------------------------------------------------------------- our client
def run_ours_produce(args, topic, out) -> Stats:
    """Publish with our Twisted client on the global reactor (which this runs and stops)."""
    from twisted.internet import reactor, task
    from pulsar_twisted.client.client import Client

    stats = Stats("ours")
    payload = os.urandom(args.size)
    limit = args.num_messages
    state = {"sent": 0, "in_flight": 0, "tokens": 0.0, "done": False, "error": None}
    client = Client(args.url, reactor=reactor)
    clock = time.monotonic

    def acked(_, started):
        state["in_flight"] -= 1
        stats.record(clock() - started, args.size)
        pump()

    def failed(failure):
        state["in_flight"] -= 1
        stats.fail()
        if state["error"] is None:
            state["error"] = failure.getErrorMessage()
        pump()

    def pump():
        if state["done"]:
            return
        # Unlimited rate: keep the pending window full; with a rate, spend the tokens.
        while state["in_flight"] < args.max_pending and (not limit or state["sent"] < limit):
            if args.rate:
                if state["tokens"] < 1:
                    break
                state["tokens"] -= 1
            state["sent"] += 1
            state["in_flight"] += 1
            d = producer_box[0].send(payload)
            d.addCallbacks(acked, failed, callbackArgs=(clock(),))
        if limit and state["sent"] >= limit and state["in_flight"] == 0:
            finish()

    def refill():
        state["tokens"] = min(args.rate, state["tokens"] + args.rate / 100.0)
        pump()

    def tick():
        out.write(stats.progress(clock()) + "\n")
        out.flush()

    def finish():
        if state["done"]:
            return
        state["done"] = True
        stats.ended = clock()
        for loop in loops:
            if loop.running:
                loop.stop()
        producer_box[0].close().addBoth(lambda _: client.close()).addBoth(
            lambda _: reactor.stop())

    producer_box = []
    loops = []

    def started(producer):
        producer_box.append(producer)
        stats.start(clock())
        ticker = task.LoopingCall(tick)
        loops.append(ticker)
        ticker.start(1.0, now=False)
        if args.rate:
            filler = task.LoopingCall(refill)
            loops.append(filler)
            filler.start(0.01)
        pump()

    def not_started(failure):
        state["error"] = failure.getErrorMessage()
        stats.ended = clock()
        client.close().addBoth(lambda _: reactor.stop())

    def begin():
        d = client.create_producer(topic, **_our_producer_conf(args))
        d.addCallbacks(started, not_started)

    reactor.callWhenRunning(begin)
    reactor.run(installSignalHandlers=True)
    # The reactor's signal handlers outlive it; a later (official) run must stay interruptible.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if stats.ended is None:
        stats.ended = clock()
    stats.error = state["error"]
    return stats


def _our_producer_conf(args) -> dict:
    return dict(batching_enabled=not args.disable_batching,
                batching_max_publish_delay_ms=args.batch_delay_ms,
                batching_max_messages=args.batch_max_messages,
                max_pending_messages=args.max_pending, block_if_queue_full=True,
                send_timeout_ms=0, compression_type=args.compression)


# ---------------------------------------------------------------------- official client
def run_official_produce(args, topic, out) -> Stats:
    """The same load with the official client (``import pulsar``), callbacks on its threads."""
    import logging
    import pulsar

    logger = logging.getLogger("pulsar-perf-official")
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    stats = Stats("official")
    payload = os.urandom(args.size)
    client = pulsar.Client(args.url, logger=logger)
    stats.error = None
    try:
        producer = client.create_producer(
            topic, batching_enabled=not args.disable_batching,
            batching_max_publish_delay_ms=max(1, int(args.batch_delay_ms)),
            batching_max_messages=args.batch_max_messages,
            max_pending_messages=args.max_pending, block_if_queue_full=True, send_timeout_millis=0,
            compression_type=getattr(pulsar.CompressionType,
                                     {"ZLIB": "ZLib"}.get(args.compression, args.compression)))
    except Exception as e:
        stats.error = str(e)
        client.close()
        return stats
    window = threading.Semaphore(args.max_pending)
    clock = time.monotonic

    def callback(result, _message_id, started):
        if result == pulsar.Result.Ok:
            stats.record(clock() - started, args.size)
        else:
            stats.fail()
        window.release()

    stats.start(clock())
    next_tick = clock() + 1.0
    sent = 0
    interval = 1.0 / args.rate if args.rate else 0.0
    next_send = clock()
    try:
        while not args.num_messages or sent < args.num_messages:
            if interval:
                now = clock()
                if now < next_send:
                    time.sleep(min(next_send - now, 0.01))
                    continue
                next_send += interval
            window.acquire()
            started = clock()
            producer.send_async(payload, lambda r, m, s=started: callback(r, m, s))
            sent += 1
            if started >= next_tick:
                out.write(stats.progress(started) + "\n")
                out.flush()
                next_tick += 1.0
        producer.flush()
        deadline = clock() + 60
        for _ in range(args.max_pending):   # every callback has run once the window is whole
            if not window.acquire(timeout=max(0.0, deadline - clock())):
                stats.error = "send callbacks missing after 60 s"
                break
    except KeyboardInterrupt:
        pass
    stats.ended = clock()
    producer.close()
    client.close()
    return stats


# ---------------------------------------------------------------------- consume
def run_consume(args, out) -> Stats:
    """Receive and ack with the chosen client (through our blocking facade for ours)."""
    if args.client == "official":
        import logging
        import pulsar
        logger = logging.getLogger("pulsar-perf-official")
        logger.setLevel(logging.ERROR)
        client = pulsar.Client(args.url, logger=logger)
        consumer = client.subscribe(args.topic, args.subscription_name,
                                    consumer_type=getattr(pulsar.ConsumerType,
                                                          args.subscription_type.replace("_", "")),
                                    initial_position=getattr(pulsar.InitialPosition,
                                                             args.subscription_position),
                                    receiver_queue_size=args.receiver_queue_size)
        timeout_error = pulsar.Timeout
    else:
        from pulsar_twisted.client.blocking import Client
        client = Client(args.url)
        consumer = client.subscribe(args.topic, args.subscription_name,
                                    consumer_type=args.subscription_type,
                                    initial_position=args.subscription_position,
                                    receiver_queue_size=args.receiver_queue_size)
        timeout_error = errors.Timeout
    stats = Stats(args.client)
    stats.error = None
    stats.start(time.monotonic())
    next_tick = time.monotonic() + 1.0
    try:
        while not args.num_messages or stats.count < args.num_messages:
            try:
                message = consumer.receive(timeout_millis=1000)
            except timeout_error:
                message = None
            now = time.monotonic()
            if message is not None:
                latency = max(0.0, time.time() - message.publish_timestamp() / 1000.0)
                stats.record(latency, len(message.data()))
                consumer.acknowledge(message)
            if now >= next_tick:
                out.write(stats.progress(now, "received") + "\n")
                out.flush()
                next_tick += 1.0
    except KeyboardInterrupt:
        pass
    stats.ended = time.monotonic()
    consumer.close()
    client.close()
    return stats


# ---------------------------------------------------------------------- command line
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="pulsar-perf", description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    produce = commands.add_parser("produce", help="publish load")
    produce.add_argument("topic")
    produce.add_argument("-r", "--rate", type=float, default=0, help="msg/s (0: unlimited)")
    produce.add_argument("-n", "--num-messages", type=int, default=0, help="0: until stopped")
    produce.add_argument("-s", "--size", type=int, default=1024, help="message size in bytes")
    produce.add_argument("-b", "--batch-delay-ms", type=float, default=1.0)
    produce.add_argument("-bm", "--batch-max-messages", type=int, default=1000)
    produce.add_argument("--disable-batching", action="store_true")
    produce.add_argument("-o", "--max-pending", type=int, default=1000)
    produce.add_argument("-z", "--compression", default="NONE",
                         choices=["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
    produce.add_argument("--client", default="ours", choices=["ours", "official", "both"])
    produce.add_argument("--url", default=DEFAULT_URL)
    consume = commands.add_parser("consume", help="consume load")
    consume.add_argument("topic")
    consume.add_argument("-s", "--subscription-name", required=True)
    consume.add_argument("-n", "--num-messages", type=int, default=0, help="0: until stopped")
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-p", "--subscription-position", default="Latest",
                         choices=["Earliest", "Latest"])
    consume.add_argument("-q", "--receiver-queue-size", type=int, default=1000)
    consume.add_argument("--client", default="ours", choices=["ours", "official"])
    consume.add_argument("--url", default=DEFAULT_URL)
    return top


def _report(stats, out, verb) -> int:
    out.write(stats.summary(verb) + "\n")
    if getattr(stats, "error", None):
        out.write(f"[{stats.label}] error: {stats.error}\n")
        return 1
    return 0


def run(argv, out=None) -> int:
    """Run ``argv``; returns the exit code. (Runs the global reactor for our producer.)"""
    out = out or sys.stdout
    args = parser().parse_args(argv)
    if args.command == "consume":
        return _report(run_consume(args, out), out, "received")
    if args.batch_delay_ms <= 0 and not args.disable_batching:
        args.batch_delay_ms = 1.0
    if args.client == "official":
        return _report(run_official_produce(args, args.topic, out), out, "sent")
    if args.client == "ours":
        return _report(run_ours_produce(args, args.topic, out), out, "sent")
    ours = run_ours_produce(args, args.topic + "-ours", out)
    code = _report(ours, out, "sent")
    official = run_official_produce(args, args.topic + "-official", out)
    code |= _report(official, out, "sent")
    ratio = ours.rate() / official.rate() if official.rate() else float("inf")
    out.write(f"Publish throughput ours/official: {ours.rate():.1f} / {official.rate():.1f} msg/s "
              f"= {ratio:.2f}\n")
    return code


def main(argv=None):
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
