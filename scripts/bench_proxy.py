#!/usr/bin/env python3
"""
What the proxy costs, measured with the OFFICIAL client: a ``pulsar-standalone`` and a
``pulsar-proxy`` in front of it (brokerServiceURL), each in its own process on free ports; then,
directly against the broker and through the proxy:

1. synchronous publish latency (send() returns after the receipt): p50 / p99 over ``--sync`` sends;
2. async publish throughput (1 KB messages, batching off) over ``--messages`` sends;
3. the proxy's CPU seconds for phase 2 (psutil), and its /metrics counters afterwards.

Usage: ``python scripts/bench_proxy.py [--sync 2000] [--messages 20000]``. Prints one table.
"""

import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import psutil  # noqa: E402
import pulsar  # noqa: E402

from pulsar_twisted.testing.cluster import ProxyProcess  # noqa: E402
from pulsar_twisted.testing.process import StandaloneProcess  # noqa: E402


def sync_latencies(client, topic, count):
    producer = client.create_producer(topic, batching_enabled=False)
    payload = b"x" * 100
    out = []
    for _ in range(count):
        start = time.perf_counter()
        producer.send(payload)
        out.append(time.perf_counter() - start)
    producer.close()
    out.sort()
    return out[len(out) // 2] * 1000, out[int(len(out) * 0.99)] * 1000


def async_rate(client, topic, count):
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2000,
                                      block_if_queue_full=True)
    done = threading.Event()
    left = [count]
    lock = threading.Lock()

    def sent(result, _):
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    payload = b"x" * 1024
    start = time.perf_counter()
    for _ in range(count):
        producer.send_async(payload, sent)
    done.wait(300)
    elapsed = time.perf_counter() - start
    producer.close()
    return count / elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sync", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args()
    import logging
    logging.getLogger("pulsar").setLevel(logging.ERROR)
    standalone = StandaloneProcess({"journalSyncData": "false"})
    standalone.start()
    directory = tempfile.mkdtemp(prefix="bench-proxy-")
    proxy = ProxyProcess("proxy", directory, config={
        "brokerServiceURL": standalone.service_url, "brokerWebServiceURL": standalone.web_service_url})
    try:
        proxy.start()
        rows = []
        for name, url, process in (("direct", standalone.service_url, None),
                                   ("proxy", proxy.service_url, psutil.Process(proxy.process.pid))):
            client = pulsar.Client(url, operation_timeout_seconds=30)
            p50, p99 = sync_latencies(client, f"persistent://public/default/lat-{name}", args.sync)
            before = process.cpu_times() if process else None
            rate = async_rate(client, f"persistent://public/default/rate-{name}", args.messages)
            cpu = ""
            if process:
                after = process.cpu_times()
                cpu = f"{(after.user + after.system - before.user - before.system):.2f}"
            rows.append((name, p50, p99, rate, cpu))
            client.close()
        print(f"{'path':8} {'sync p50 ms':>12} {'sync p99 ms':>12} {'async msg/s':>12} {'proxy CPU s':>12}")
        for name, p50, p99, rate, cpu in rows:
            print(f"{name:8} {p50:12.2f} {p99:12.2f} {rate:12.0f} {cpu:>12}")
        metrics = urllib.request.urlopen(proxy.web_service_url + "/metrics").read().decode()
        print("\n".join(line for line in metrics.splitlines()
                        if line.startswith(("pulsar_proxy_binary", "pulsar_proxy_new"))))
    finally:
        proxy.kill9()
        standalone.cleanup()


if __name__ == "__main__":
    main()
