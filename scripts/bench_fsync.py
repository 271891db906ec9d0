#!/usr/bin/env python3
"""
What one durable journal write costs on this disk: ``pwrite`` of a small record + ``fdatasync``,
appending to a growing file versus writing over space already zero-filled and made durable, or
``posix_fallocate``d and made durable (the journal's preallocation, ``journalPreAllocSizeMB``;
bookie/prealloc.py).

Per mode it prints the wall time per write, p50/p99 of each write+fdatasync, and the process's
kernel and user CPU per write. The modes alternate for ``--rounds`` rounds, since a shared disk's
speed drifts; compare within a round.

Usage (from the repository root)::

    python scripts/bench_fsync.py                    # 3 rounds of 3,000 writes of 120 bytes
    python scripts/bench_fsync.py --dir /data --writes 10000 --size 1000
"""

import argparse
import os
import resource
import tempfile
import time

MODES = ("append", "zeroed", "fallocate")


def run(directory: str, mode: str, writes: int, size: int) -> dict:
    path = os.path.join(directory, f"bench-fsync-{mode}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        span = writes * size + 4096
        if mode == "zeroed":
            os.pwrite(fd, bytes(span), 0)
            os.fsync(fd)
        elif mode == "fallocate":
            os.posix_fallocate(fd, 0, span)
            os.fsync(fd)
        record = os.urandom(size)
        lat = []
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for i in range(writes):
            started = time.perf_counter()
            os.pwrite(fd, record, i * size)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - started)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    per = 1e6 / writes
    return {"wall": (t1 - t0) * per, "p50": lat[writes // 2] * 1e6, "p99": lat[int(writes * 0.99)] * 1e6,
            "sys": (r1.ru_stime - r0.ru_stime) * per, "user": (r1.ru_utime - r0.ru_utime) * per}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="directory on the disk to measure (a new one under the current directory)")
    ap.add_argument("--writes", type=int, default=3000)
    ap.add_argument("--size", type=int, default=120, help="bytes per write (a 100-byte message's record)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="bench-fsync-", dir=".")
    print(f"{args.writes} writes of {args.size} B + fdatasync each, in {os.path.abspath(directory)}; "
          f"load average {os.getloadavg()[0]:.2f}")
    results = {m: [] for m in MODES}
    try:
        for k in range(args.rounds):
            for mode in MODES:
                r = run(directory, mode, args.writes, args.size)
                results[mode].append(r)
                print(f"round {k + 1} {mode:9s}  wall/write {r['wall']:7.1f} us  p50 {r['p50']:6.1f} us  "
                      f"p99 {r['p99']:7.1f} us  kernel CPU {r['sys']:5.1f} us  user CPU {r['user']:5.1f} us",
                      flush=True)
    finally:
        if not args.dir:
            os.rmdir(directory)
    base = results["append"]
    for mode in MODES[1:]:
        ratios = [(r["p50"] / b["p50"], r["sys"] / max(b["sys"], 1e-9)) for r, b in zip(results[mode], base)]
        ratios.sort()
        mid = ratios[len(ratios) // 2]
        print(f"{mode} / append, median of the rounds: p50 {mid[0]:.2f}x, kernel CPU {mid[1]:.2f}x")


if __name__ == "__main__":
    main()
