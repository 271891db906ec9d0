#!/usr/bin/env python3
"""
The floor under the broker's per-message cost at a fixed low rate (issue 14, items 1 and 3).

At 5,000 unbatched messages per second every message is its own reactor turn: the broker wakes in
``epoll_wait``, reads the frame, writes the journal, waits in ``fdatasync`` and sends the receipt.
This benchmark measures what those steps cost with nothing of ours in between: a Twisted epoll
server (a subprocess) answers each 8-byte request with 8 bytes, in four variants:

- ``write``: the answer through ``transport.write`` (Twisted sends it at its next poll);
- ``direct``: the answer sent at once (as the broker's receipts are, ``net/handback.py``);
- each with and without ``pwrite`` + ``fdatasync`` of the request before the answer (as the
  journal does for each group when the rate leaves one message per group).

``--broker`` adds a standalone broker (fsync on) driven by the same loop with raw Pulsar frames
(CONNECT, PRODUCER, then unbatched SENDs, each answered by a SEND_RECEIPT): the same figures with
no client library in the way. The loop is open, as an asynchronous producer: request ``i`` is sent
at ``start + i / rate`` whatever is still unanswered, and its latency runs from that time to its
answer. It spins while sends are due, so the client takes one of the machine's cores.

It prints the server's CPU per 10,000 messages (user and system) and the latency's p50 / p99. The
broker's CPU-ms per 10k minus the ``direct + fdatasync`` floor is the part its own code takes.

    python scripts/bench_floor.py --broker         # 5,000 msg/s for 6 s per variant
    python scripts/bench_floor.py --broker-only --seconds 10
    python scripts/bench_floor.py --rate 20000 --seconds 4
"""

import argparse
import os
import select
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


def paced(sock, rate: int, seconds: float, request, answered, pid: int) -> dict:
    """Open loop, as a producer sending asynchronously: ``request(i)`` (bytes) is sent at
    ``start + i / rate`` whether or not earlier ones were answered; ``answered(data)`` returns the
    indexes that ``data`` answers. The latency of ``i``: from its due time (not from the send, so
    that a slow answer delaying later sends counts for them too) to its answer."""
    tick = os.sysconf("SC_CLK_TCK")
    n = int(rate * seconds)
    due_at = [0.0] * n
    latencies = []
    sock.setblocking(False)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    user0, sys0 = _cpu_ticks(pid)
    start = time.perf_counter()
    sent = 0
    deadline = start + seconds + 10
    while len(latencies) < n:
        now = time.perf_counter()
        if now > deadline:
            raise RuntimeError(f"only {len(latencies)} of {n} answered")
        while sent < n and start + sent / rate <= now:
            due_at[sent] = start + sent / rate
            sock.sendall(request(sent))
            sent += 1
        # Spin (poll without waiting) while sends are due: a poll timeout is whole milliseconds,
        # and sleeping in it would send the next ones together (the server's work per wake-up
        # would then be shared, which is not the load measured).
        if poller.poll(0 if sent < n else 100):
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                raise RuntimeError("connection closed")
            got = time.perf_counter()
            for i in answered(data):
                latencies.append(got - due_at[i])
    user1, sys1 = _cpu_ticks(pid)
    latencies.sort()
    per_10k = 1000.0 / tick * 10000 / n     # ticks -> CPU-ms per 10k messages
    return {"user": (user1 - user0) * per_10k, "sys": (sys1 - sys0) * per_10k,
            "p50": latencies[n // 2] * 1000, "p99": latencies[int(n * 0.99)] * 1000}


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
        count = [0]

        def answered(data):
            first = count[0]
            count[0] += len(data) // 8
            return range(first, count[0])

        result = paced(s, rate, seconds, lambda i: b"q" * 8, answered, server.pid)
        s.close()
    finally:
        server.kill()
        server.wait()
    return result


def measure_broker(rate: int, seconds: float, workdir: str) -> dict:
    """The same paced loop against a standalone (``bench_broker.Standalone``: fsync on) with raw
    Pulsar frames: CONNECT, PRODUCER, then one unbatched SEND at a time, each waiting for its
    SEND_RECEIPT. No client library in the way: the round trip is the broker's own."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench_broker import Standalone
    from pulsar_twisted.proto import PulsarApi_pb2 as api
    from pulsar_twisted.wire.frames import (FrameDecoder, encode_command, encode_message,
                                            encode_payload_command)

    broker = Standalone(workdir)
    broker.start()
    try:
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(10)
        decoder = FrameDecoder(64 << 20)
        inbox = []

        def expect(kind):
            while True:
                while inbox:
                    command, _ = inbox.pop(0)
                    if command.type == kind:
                        return command
                    if command.type == api.BaseCommand.PING:
                        s.sendall(encode_command(api.BaseCommand(
                            type=api.BaseCommand.PONG, pong=api.CommandPong())))
                        continue
                    raise RuntimeError(f"broker answered {command}")
                inbox.extend(decoder.feed(s.recv(65536)))

        s.sendall(encode_command(api.BaseCommand(type=api.BaseCommand.CONNECT, connect=api.CommandConnect(
            client_version="bench-floor", protocol_version=19))))
        expect(api.BaseCommand.CONNECTED)
        topic = f"persistent://public/default/bench-floor-{os.getpid()}"
        s.sendall(encode_command(api.BaseCommand(type=api.BaseCommand.PRODUCER, producer=api.CommandProducer(
            topic=topic, producer_id=1, request_id=1))))
        name = expect(api.BaseCommand.PRODUCER_SUCCESS).producer_success.producer_name

        def send(seq):
            metadata = api.MessageMetadata(producer_name=name, sequence_id=seq,
                                           publish_time=int(time.time() * 1000))
            command = api.BaseCommand(type=api.BaseCommand.SEND, send=api.CommandSend(
                producer_id=1, sequence_id=seq, num_messages=1))
            s.sendall(encode_payload_command(command, encode_message(metadata, b"m" * 100)))
            receipt = expect(api.BaseCommand.SEND_RECEIPT).send_receipt
            if receipt.sequence_id != seq:
                raise RuntimeError(f"receipt for {receipt.sequence_id}, expected {seq}")

        for seq in range(min(rate, 2000)):      # warm-up: the ledger and journal files exist
            send(seq)
        base = 100000
        pending = []

        def request(i):
            seq = base + i
            metadata = api.MessageMetadata(producer_name=name, sequence_id=seq,
                                           publish_time=int(time.time() * 1000))
            command = api.BaseCommand(type=api.BaseCommand.SEND, send=api.CommandSend(
                producer_id=1, sequence_id=seq, num_messages=1))
            return encode_payload_command(command, encode_message(metadata, b"m" * 100))

        def answered(data):
            done = []
            for command, _ in decoder.feed(data):
                if command.type == api.BaseCommand.SEND_RECEIPT:
                    done.append(command.send_receipt.sequence_id - base)
                elif command.type == api.BaseCommand.PING:
                    pending.append(encode_command(api.BaseCommand(
                        type=api.BaseCommand.PONG, pong=api.CommandPong())))
                else:
                    raise RuntimeError(f"broker answered {command}")
            return done

        result = paced(s, rate, seconds, request, answered, broker.popen.pid)
        s.close()
    finally:
        broker.stop()
    return result


def _row(label, r):
    print(f"{label:20s} server CPU {r['user'] + r['sys']:6.0f} CPU-ms/10k "
          f"(user {r['user']:4.0f}, sys {r['sys']:4.0f})   "
          f"round trip p50 {r['p50']:.3f} ms  p99 {r['p99']:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--broker", action="store_true",
                    help="also a standalone broker, driven by the same loop with raw Pulsar frames")
    ap.add_argument("--broker-only", action="store_true", help="only the broker (no floor)")
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
        for direct in (() if args.broker_only else (False, True)):
            for sync in (False, True):
                r = measure(sync, direct, args.rate, args.seconds, workdir)
                _row(f"{'direct' if direct else 'write'} {'+ fdatasync' if sync else ''}", r)
        if args.broker or args.broker_only:
            _row("broker SEND->receipt", measure_broker(args.rate, args.seconds, workdir))


if __name__ == "__main__":
    main()
