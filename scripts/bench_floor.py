#!/usr/bin/env python3
"""
The floor under the broker's per-message cost at a fixed low rate (issue 14, items 1 and 3).

At 5,000 unbatched messages per second every message is its own reactor turn: the broker wakes in
``epoll_wait``, reads the frame, writes the journal, waits in ``fdatasync`` and sends the receipt.
This benchmark measures what those steps cost with nothing of ours in between: a Twisted epoll
server (a subprocess) answers each 8-byte request with 8 bytes, paced at ``--rate`` by a client
that waits for each answer, in four variants:

- ``write``: the answer through ``transport.write`` (Twisted sends it at its next poll);
- ``direct``: the answer sent at once (as the broker's receipts are, ``net/handback.py``);
- each with and without ``pwrite`` + ``fdatasync`` of the request before the answer (as the
  journal does for each group when the rate leaves one message per group).

It prints the server's CPU per 10,000 messages (user and system) and the round trip's p50 / p99.
Compare with ``python scripts/bench_broker.py --latency --rates 5000``: the broker's CPU-ms per 10k
minus the ``direct + fdatasync`` floor is the part the broker's own code takes.

    python scripts/bench_floor.py                  # 5,000 msg/s for 6 s per variant
    python scripts/bench_floor.py --rate 20000 --seconds 4
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def serve(sync: bool, direct: bool, path: str) -> None:
    from twisted.internet import epollreactor
    epollreactor.install()
    from twisted.internet import protocol, reactor

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    offset = [0]

    class Echo(protocol.Protocol):
        def dataReceived(self, data):
            if sync:
                os.pwrite(fd, data, offset[0])
                offset[0] += len(data)
                os.fdatasync(fd)
            answer = b"r" * len(data)
            if direct:
                self.transport.socket.send(answer)
            else:
                self.transport.write(answer)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Echo), interface="127.0.0.1")
    print(port.getHost().port, flush=True)
    reactor.run()


def _cpu_ticks(pid: int):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def measure(sync: bool, direct: bool, rate: int, seconds: float, workdir: str) -> dict:
    path = os.path.join(workdir, "floor.bin")
    server = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve", "--path", path]
        + (["--sync"] if sync else []) + (["--direct"] if direct else []),
        stdout=subprocess.PIPE)
    try:
        port = int(server.stdout.readline())
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(5)
        tick = os.sysconf("SC_CLK_TCK")
        n = int(rate * seconds)
        rtts = []
        user0, sys0 = _cpu_ticks(server.pid)
        start = time.perf_counter()
        for i in range(n):
            due = start + i / rate
            while time.perf_counter() < due:
                pass
            sent = time.perf_counter()
            s.sendall(b"q" * 8)
            got = 0
            while got < 8:
                got += len(s.recv(64))
            rtts.append(time.perf_counter() - sent)
        user1, sys1 = _cpu_ticks(server.pid)
        s.close()
    finally:
        server.kill()
        server.wait()
    rtts.sort()
    per_10k = 1000.0 / tick * 10000 / n     # ticks -> CPU-ms per 10k messages
    return {"user": (user1 - user0) * per_10k, "sys": (sys1 - sys0) * per_10k,
            "p50": rtts[n // 2] * 1000, "p99": rtts[int(n * 0.99)] * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sync", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--direct", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.sync, args.direct, args.path)
        return
    load = os.getloadavg()[0]
    print(f"machine: nproc={os.cpu_count()}, load average {load:.2f} at start; "
          f"{args.rate} msg/s for {args.seconds:g} s per variant")
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as workdir:
        for direct in (False, True):
            for sync in (False, True):
                r = measure(sync, direct, args.rate, args.seconds, workdir)
                label = f"{'direct' if direct else 'write'} {'+ fdatasync' if sync else ''}"
                print(f"{label:20s} server CPU {r['user'] + r['sys']:6.0f} CPU-ms/10k "
                      f"(user {r['user']:4.0f}, sys {r['sys']:4.0f})   "
                      f"round trip p50 {r['p50']:.3f} ms  p99 {r['p99']:.3f} ms")


if __name__ == "__main__":
    main()
