#!/usr/bin/env python3
"""
Tiered storage figures on one standalone and a throw-away S3 server (moto, testing/s3.py):

    python scripts/bench_offload.py [--messages 20000] [--size 1000] [--per-ledger 1000]

Writes the messages (unbatched, official client), then prints: the time to offload every sealed
ledger (``topics offload``) and its MB/s; a Reader's rate over the whole topic from the bookies
before the offload, and from S3 alone after the bookies' copies were deleted (lag 0, unload);
the broker's RSS. moto is an in-memory Python server on the same machine: the figures say what
our side costs, not what AWS would give.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402
import pulsar  # noqa: E402

from pulsar_twisted.testing import s3  # noqa: E402
from pulsar_twisted.testing.process import StandaloneProcess  # noqa: E402


def admin(standalone, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(standalone.web_service_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
        return json.loads(text) if text else None


def read_rate(url, topic, count) -> float:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        started = time.perf_counter()
        for _ in range(count):
            reader.read_next(30_000)
        return count / (time.perf_counter() - started)
    finally:
        client.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1000, help="payload bytes")
    p.add_argument("--per-ledger", type=int, default=1000, help="managedLedgerMaxEntriesPerLedger")
    args = p.parse_args(argv)
    if s3.skip_reason():
        print(s3.skip_reason())
        return 2
    work = tempfile.mkdtemp(prefix="bench-offload-")
    server = s3.S3Server(os.path.join(work, "s3"))
    server.start()
    server.install_env()
    server.create_bucket("offload")
    standalone = StandaloneProcess(config={
        "managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadBucket": "offload",
        "s3ManagedLedgerOffloadRegion": server.region,
        "s3ManagedLedgerOffloadServiceEndpoint": server.endpoint,
        "managedLedgerOffloadDeletionLagMs": 0, "managedLedgerMaxEntriesPerLedger": args.per_ledger,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "defaultRetentionTimeInMinutes": -1, "defaultRetentionSizeInMB": -1}, base_dir=work)
    try:
        standalone.start()
        topic = "persistent://public/default/bench-offload"
        path = topic.replace("persistent://", "")
        client = pulsar.Client(standalone.service_url)
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2000,
                                          block_if_queue_full=True)
        payload = b"x" * args.size
        for i in range(args.messages):
            producer.send_async(payload, None)
        producer.flush()
        client.close()
        from_bookies = read_rate(standalone.service_url, topic, args.messages)
        ledgers = admin(standalone, "GET", f"/admin/v2/persistent/{path}/internalStats")["ledgers"]
        size = sum(lg["size"] for lg in ledgers[:-1])
        started = time.perf_counter()
        admin(standalone, "PUT", f"/admin/v2/persistent/{path}/offload",
              {"ledgerId": ledgers[-1]["ledgerId"], "entryId": 0, "partitionIndex": -1})
        while True:
            status = admin(standalone, "GET", f"/admin/v2/persistent/{path}/offload")
            if status["status"] != "RUNNING":
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        admin(standalone, "PUT", f"/admin/v2/persistent/{path}/unload")
        from_s3 = read_rate(standalone.service_url, topic, args.messages)
        rss = psutil.Process(standalone.process.pid).memory_info().rss
        print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        print(f"offload: {status['status']} {len(ledgers) - 1} ledgers, {size / 1e6:.1f} MB in "
              f"{seconds:.2f} s = {size / 1e6 / seconds:.1f} MB/s")
        print(f"read from the bookies: {from_bookies:,.0f} msg/s; from S3 alone: {from_s3:,.0f} msg/s "
              f"(ratio {from_s3 / from_bookies:.2f})")
        print(f"broker RSS after: {rss / 1e6:.0f} MB")
        return 0 if status["status"] == "SUCCESS" else 1
    finally:
        standalone.cleanup()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
