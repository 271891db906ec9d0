#!/usr/bin/env python3
"""
Chaos run of geo-replication: two standalones (east and west) replicating a namespace both ways
with deduplication on, the official client publishing on both, seeded faults (kill -9 and
restart, SIGSTOP and SIGCONT, bundle unloads) on either; see pulsar_twisted/testing/chaos/geo.py.

    python scripts/chaos_replication.py --seed 1 --duration 90
    python scripts/chaos_replication.py --seed 2 --json /tmp/geo2.json --history /tmp/geo2.history.json
    python scripts/chaos_replication.py --check /tmp/geo2.history.json   # check a saved history again
    python scripts/chaos_replication.py --faults ''                      # fault-free control run
    python scripts/chaos_replication.py --seed 3 --replicated-subscription  # + PIP-33 failover check

Prints the figures per cluster (lost locally) and per direction (lost in replication, stored
twice, out of order per original producer); exit status 0 only if every one is zero, 1 on
violations, 2 if the run itself could not be made. ``--require-crossing`` also fails (1) a run
in which some direction replicated nothing.

``--replicated-subscription``: a consumer on east with a replicated subscription on the first
topic acks as it consumes (individually, cumulatively, some never), through the faults; after
the heal and the drain, the same subscription is consumed on west to the end. Printed: lost
(never acked on east, not delivered on west: a violation), redelivered on west (acked on east:
allowed, as a count and as shares), out of order on west and markers delivered (violations),
ahead of east (west's position, sampled through the run, past a message before east acked it:
a violation), and whether the state crossed (west did not start from the beginning; with
``--require-crossing`` a run where it did not fails). Every process the run started is killed on the way
out, Ctrl-C and SIGTERM included.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pulsar_twisted.testing.chaos.geo_checker import (  # noqa: E402
    GeoHistory, check_geo, format_geo_verdict)
from pulsar_twisted.testing.chaos import script  # noqa: E402
from pulsar_twisted.testing.chaos.nemesis import GEO_KINDS as KINDS  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=90.0, help="seconds of faults (default 90)")
    p.add_argument("--faults", type=script.fault_kinds(KINDS), default=KINDS,
                   help=f"comma-separated fault kinds, empty for none (default {','.join(KINDS)};\n"
                        "kill-broker and pause-broker act on a standalone)")
    p.add_argument("--producers", type=int, default=2, help="unbatched producers per cluster")
    p.add_argument("--rate", type=float, default=40.0,
                   help="msg/s of each cluster's unbatched producers together (default 40)")
    p.add_argument("--batched-rate", type=float, default=40.0,
                   help="msg/s of each cluster's batched producer (default 40)")
    p.add_argument("--partitions", type=int, default=2,
                   help="partitions of the partitioned topic (0: none; default 2)")
    p.add_argument("--partitioned-rate", type=float, default=30.0,
                   help="msg/s of each cluster's producers on it together (default 30)")
    p.add_argument("--chunked-rate", type=float, default=2.0,
                   help="msg/s of each cluster's producer of chunked 150 kB messages (0: none;\n"
                        "default 2; the brokers take messages of at most 64 kB)")
    p.add_argument("--pause", type=float, nargs=2, default=(2.0, 9.0), metavar=("MIN", "MAX"),
                   help="seconds a pause-broker lasts (default 2 9; the client's operation\n"
                        "timeout is --operation-timeout)")
    p.add_argument("--operation-timeout", type=int, default=5, help="the client's, seconds (default 5)")
    p.add_argument("--no-dedup", action="store_true",
                   help="deduplication off on both clusters: a control run in which re-sent copies\n"
                        "(the client's or a replicator's) show as STORED TWICE")
    p.add_argument("--require-crossing", action="store_true",
                   help="also fail when some direction replicated nothing")
    p.add_argument("--replicated-subscription", action="store_true",
                   help="a replicated subscription acked on east, consumed on west after the heal")
    p.add_argument("--snapshot-ms", type=int, default=300,
                   help="the brokers' replicatedSubscriptionsSnapshotFrequencyMillis (default 300)")
    p.add_argument("--snapshot-timeout", type=int, default=None,
                   help="the brokers' replicatedSubscriptionsSnapshotTimeoutSeconds (default theirs,\n"
                        "30; below the pauses, snapshots time out and answers come late)")
    p.add_argument("--json", default=None, help="write the verdict here as JSON")
    p.add_argument("--history", default=None, help="write the whole history here as JSON")
    p.add_argument("--keep-logs", default=None, help="copy the standalones' and clients' logs here")
    p.add_argument("--check", default=None, metavar="HISTORY",
                   help="no run: check a history written by --history")
    return p.parse_args(argv)


def _status(verdict, require_crossing: bool) -> int:
    if not verdict.ok:
        return 1
    if require_crossing and not all(verdict.crossed.values()):
        return 1
    if (require_crossing and verdict.subscription_record is not None
            and not (verdict.subscription and verdict.subscription.crossed)):
        return 1
    return 0


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.check:
        verdict = check_geo(GeoHistory.load(args.check))
        print(format_geo_verdict(verdict))
        return _status(verdict, args.require_crossing)

    from pulsar_twisted.testing.chaos.geo import GeoChaosConfig, run_geo
    log = script.start("geo-replication chaos run")
    config = GeoChaosConfig(seed=args.seed, duration=args.duration, kinds=tuple(args.faults),
                            producers=args.producers, rate=args.rate, batched_rate=args.batched_rate,
                            partitions=args.partitions, partitioned_rate=args.partitioned_rate,
                            chunked_rate=args.chunked_rate, pause=tuple(args.pause),
                            dedup=not args.no_dedup, operation_timeout=args.operation_timeout,
                            replicated_subscription=args.replicated_subscription,
                            snapshot_ms=args.snapshot_ms, snapshot_timeout=args.snapshot_timeout,
                            keep_logs=args.keep_logs, log=log)
    outcome = script.run_guarded(run_geo, config, log)
    if isinstance(outcome, int):
        return outcome
    geo, verdict = outcome
    if args.history:
        geo.dump(args.history)
    meta = geo.sends.meta
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "verdict": verdict.to_json(),
                       "faults": [f.__dict__ for f in geo.sends.faults]}, f, indent=1, default=str)
    print(script.faults_line(geo.sends.faults))
    if meta.get("partitioned_topic"):
        print(f"partitioned topic: {meta['partitioned_topic']}")
    print(f"replication: {meta.get('drain')} after {meta.get('drain_seconds')}s; standalone "
          f"tracebacks: {meta.get('tracebacks')}; nemesis errors: {meta.get('nemesis_errors')}")
    print(format_geo_verdict(verdict))
    if not all(verdict.crossed.values()):
        print(f"NOTE: some direction replicated nothing: {verdict.crossed}")
    if verdict.subscription_record is not None and not (verdict.subscription
                                                        and verdict.subscription.crossed):
        print("NOTE: the replicated subscription's state did not cross")
    return _status(verdict, args.require_crossing)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # The official client's threads can keep a finished interpreter alive: leave at once.
    os._exit(code)
