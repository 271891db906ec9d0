#!/usr/bin/env python3
"""
Jepsen-style chaos run against a real cluster (issue 11): see pulsar_twisted/testing/chaos/.

    python scripts/chaos.py --seed 1 --quorum 3/3/2 --duration 75
    python scripts/chaos.py --seed 2 --quorum 2/2/2 --json /tmp/run2.json
    python scripts/chaos.py --check /tmp/run2.history.json      # check a saved history again
    python scripts/chaos.py --proxy --seed 4 --faults kill-proxy,kill-broker   # clients via a proxy
    python scripts/chaos.py --replicate --seed 5 --faults kill-broker,pause-broker,kill-remote
                                   # geo-replicated to a standalone, the remote copy checked too
    python scripts/chaos.py --offload --seed 21 --faults kill-bookie,kill-broker,pause-s3
                                   # every sealed ledger offloaded to S3 (moto), read back from there

ZooKeeper: --zk HOST:PORT, else $PULSAR_TEST_ZK, else one started with scripts/zookeeper.sh (of
the run's own when a ZooKeeper fault is asked for, the only case the nemesis may kill or pause it):

    python scripts/chaos.py --seed 3 --faults kill-zookeeper,pause-zookeeper,kill-bookie,pause-broker

Prints the figures (with --replicate, the remote copy's beside them; with --offload, the ledgers
offloaded and read from S3 alone); exit status 0 only if nothing acknowledged was lost and no
violation was seen (on the cluster nor, with --replicate, on the remote; with --offload, a run that
offloaded nothing or read nothing from S3 alone is a violation), 1 on violations, 2 if the run
itself could not be made. Every process the run started is killed on the way out, Ctrl-C and
SIGTERM included.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pulsar_twisted.testing.chaos import checker, script  # noqa: E402
from pulsar_twisted.testing.chaos.history import History  # noqa: E402
from pulsar_twisted.testing.chaos.nemesis import (  # noqa: E402
    BUNDLE_KINDS, DISK_KINDS, KINDS, OFFLOAD_KINDS, PARTITION_KINDS, PROXY_KINDS, REMOTE_KINDS,
    ZK_KINDS)


def _quorum(text: str) -> tuple:
    parts = tuple(int(p) for p in text.split("/"))
    if len(parts) != 3 or not parts[0] >= parts[1] >= parts[2] >= 1:
        raise argparse.ArgumentTypeError("E/Qw/Qa with E >= Qw >= Qa >= 1, e.g. 3/3/2")
    return parts


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=75.0, help="seconds of faults (default 75)")
    p.add_argument("--quorum", type=_quorum, default=(3, 3, 2), help="E/Qw/Qa (default 3/3/2)")
    p.add_argument("--brokers", type=int, default=2)
    p.add_argument("--bookies", type=int, default=3)
    p.add_argument("--producers", type=int, default=7)
    p.add_argument("--rate", type=float, default=280.0, help="msg/s, all producers (default 280)")
    p.add_argument("--faults", type=script.fault_kinds(
        KINDS + PARTITION_KINDS + DISK_KINDS + BUNDLE_KINDS + ZK_KINDS + PROXY_KINDS + REMOTE_KINDS
        + OFFLOAD_KINDS),
                   default=KINDS + PARTITION_KINDS,
                   help="comma-separated fault kinds; empty for a fault-free control run\n"
                        f"(default {','.join(KINDS + PARTITION_KINDS)}; partitions put bookie2\n"
                        "and broker1 in network namespaces, needs root and ip netns; the optional\n"
                        "powerloss-bookie puts every bookie's disk on lazyfs, needs FUSE; the optional\n"
                        "unload-bundle and split-bundle move bundles through the admin API; the optional\n"
                        "kill-zookeeper (kill -9, down 1-6 s, started again on its data) and\n"
                        "pause-zookeeper (SIGSTOP past the session timeout: every session expires at once)\n"
                        "act on a ZooKeeper the run starts for itself, and are dropped with --zk or\n"
                        "$PULSAR_TEST_ZK); the optional kill-proxy (kill -9, down 1-6 s, started\n"
                        "again on its port) needs --proxy and is dropped without it; the optional\n"
                        "kill-remote and pause-remote act on the --replicate standalone and are\n"
                        "dropped without it; the optional pause-s3 (SIGSTOP of the S3 server for a\n"
                        "session timeout and 0.5-3 s) and kill-broker-offloading (S3 stopped, then a\n"
                        "broker killed -9 with its copies half-way) need --offload and are dropped\n"
                        "without it)")
    p.add_argument("--proxy", action="store_true",
                   help="run a Pulsar proxy (brokers discovered from the metadata store) and\n"
                        "connect every producer, consumer and reader through it")
    p.add_argument("--replicate", action="store_true",
                   help="geo-replicate the namespace to a standalone of the run's own (cluster\n"
                        "'remote'), set up before the workload; after the cluster's read-back,\n"
                        "wait for the replicators' backlogs to be 0 and check the remote's copy:\n"
                        "every message acked on the cluster there, once, in order per producer")
    p.add_argument("--replication-timeout", type=float, default=90.0,
                   help="seconds to wait for the replicators' backlogs to reach 0 (default 90)")
    p.add_argument("--offload", action="store_true",
                   help="tiered storage: an S3 server (moto) of the run's own; every broker offloads\n"
                        "each sealed ledger to it and deletes the bookies' copy at the next trim\n"
                        "(threshold 0, deletion lag 0); after the heal, wait for the offloads, unload\n"
                        "the partitions (their reopening trims) and read back, old ledgers from S3\n"
                        "alone; prints ledgers offloaded, in S3 only, objects in the bucket")
    p.add_argument("--offload-timeout", type=float, default=60.0,
                   help="seconds to wait for every sealed ledger to be offloaded (default 60)")
    p.add_argument("--max-entries-per-ledger", type=int, default=100,
                   help="managedLedgerMaxEntriesPerLedger of the brokers (default 100: every partition "
                        "switches ledgers about once a second, under the faults)")
    p.add_argument("--zk", default=None, help="ZooKeeper HOST:PORT (default $PULSAR_TEST_ZK)")
    p.add_argument("--json", default=None, help="write the verdict here as JSON")
    p.add_argument("--history", default=None, help="write the whole history here as JSON")
    p.add_argument("--keep-logs", default=None, help="copy the daemons' logs into this directory")
    p.add_argument("--check", default=None, metavar="HISTORY",
                   help="no run: check a history written by --history")
    p.add_argument("--table", nargs="+", default=None, metavar="VERDICT",
                   help="no run: one line of figures per verdict file written by --json")
    return p.parse_args(argv)


def table(paths) -> str:
    """One line per run: seed, quorum, faults and the verdict's figures (with --offload, ledgers
    offloaded, in S3 only, and entries read back from those; with --replicate, the remote's)."""
    head = (f"{'seed':>4} {'E/Qw/Qa':>7} {'faults':>6} {'sent':>6} {'acked':>6} {'-1:-1':>5} "
            f"{'failed':>6} {'unansw':>6} {'lost':>5} {'twice':>5} {'st-ord':>6} {'c-ord':>5} "
            f"{'undeliv':>7} {'slow':>5} {'offl':>5} {'s3only':>6} {'s3read':>6} {'r-lost':>6} "
            f"{'r-twice':>7} {'r-ord':>5} {'r-unrep':>7}  file")
    lines = [head]
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if "verdict" not in data:
            continue                      # a --history file, not a verdict
        meta, v = data["meta"], data["verdict"]
        r = (data.get("replication") or {}).get("verdict")
        remote = (f"{r['lost']:>6} {r['stored_twice']:>7} {r['storage_order_violations']:>5} "
                  f"{data['replication']['unreplicated']:>7}" if r else f"{'-':>6} {'-':>7} "
                  f"{'-':>5} {'-':>7}")
        offload = (f"{v.get('offloaded_ledgers', 0):>5} {v.get('tiered_only_ledgers', 0):>6} "
                   f"{v.get('read_from_tiered_only', 0):>6}" if meta.get("offload")
                   else f"{'-':>5} {'-':>6} {'-':>6}")
        lines.append(
            f"{meta['seed']:>4} {'/'.join(map(str, meta['quorum'])):>7} {len(data['faults']):>6} "
            f"{v['sent']:>6} {v['acked']:>6} {v['duplicate_receipts']:>5} {v['failed']:>6} "
            f"{v['unanswered']:>6} {v['lost']:>5} {v['stored_twice']:>5} "
            f"{v['storage_order_violations']:>6} {sum(v['consumer_order_violations'].values()):>5} "
            f"{sum(v['undelivered'].values()):>7} {v.get('slow_after_heal', 0):>5} {offload} "
            f"{remote}  {os.path.basename(path)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.check:
        verdict = checker.check(History.load(args.check))
        print(checker.format_verdict(verdict))
        return 0 if verdict.ok else 1

    from pulsar_twisted.testing.chaos.runner import ChaosConfig, run
    kinds = tuple(args.faults)
    log = script.start("chaos run")
    config = ChaosConfig(seed=args.seed, duration=args.duration, quorum=args.quorum,
                         brokers=args.brokers, bookies=args.bookies, producers=args.producers,
                         rate=args.rate, kinds=kinds, zk_hosts=args.zk, keep_logs=args.keep_logs,
                         max_entries_per_ledger=args.max_entries_per_ledger, proxy=args.proxy,
                         replicate=args.replicate, replication_timeout=args.replication_timeout,
                         offload=args.offload, offload_timeout=args.offload_timeout, log=log)
    outcome = script.run_guarded(run, config, log)
    if isinstance(outcome, int):
        return outcome
    history, verdict = outcome
    if args.history:
        history.dump(args.history)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": history.meta, "verdict": verdict.to_json(),
                       "replication": history.meta.get("replication"),
                       "faults": [f.__dict__ for f in history.faults]}, f, indent=1, default=str)
    print(script.faults_line(history.faults))
    print(f"daemon tracebacks: {history.meta.get('tracebacks') or 'none'}; nemesis errors: "
          f"{len(history.meta.get('nemesis_errors', []))}")
    print(checker.format_verdict(verdict))
    offload = history.meta.get("offload")
    if offload is not None:
        from pulsar_twisted.testing.chaos.tiered import format_offload
        print(format_offload(offload))
    replication = history.meta.get("replication")
    if replication is not None:
        from pulsar_twisted.testing.chaos.replica import format_replication
        print(format_replication(replication))
    return 0 if verdict.ok and (replication is None or replication["ok"]) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # The official client's threads can keep a finished interpreter alive: leave at once.
    os._exit(code)
