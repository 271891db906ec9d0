#!/usr/bin/env python3
"""
The broker's per-message CPU on the unbatched publish path, in process and without sockets: a real
``StandaloneService`` (embedded metadata, in-process bookie with its journal thread, fsync as
configured) on the real reactor, and one ``ServerConnection`` fed pre-encoded SEND frames in chunks
as a TCP read would bring them (``--chunk`` frames each), at most ``--window`` unanswered.

It prints the reactor thread's CPU (``time.thread_time``) and the process's CPU per 10,000
messages: the Python cost of cnx -> producer -> topic -> managed ledger -> ledger handle -> bookie
storage -> journal hand-back -> receipt, without the kernel's TCP work or the client's. With
``--profile`` it runs under cProfile and prints the top functions (by own time).

Usage (from the repository root)::

    python scripts/bench_publish_path.py                # 100,000 messages
    python scripts/bench_publish_path.py -n 50000 --profile
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

# This tree's code, not an installed copy (``pip install .`` puts one in site-packages, which would
# otherwise be found first and measured instead).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, reactor, task  # noqa: E402 (after the path)
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from pulsar_twisted.broker.cnx import BrokerProtocolFactory  # noqa: E402
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.daemons.standalone import StandaloneService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames

T = api.BaseCommand


class _Transport(StringTransport):
    """Counts the frames written to the client instead of keeping them."""

    def __init__(self):
        super().__init__(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        self.writes = 0
        self.keep = True

    def write(self, data):
        self.writes += 1
        if self.keep:
            super().write(data)


def _send_frames(count, size):
    payload = os.urandom(size)
    out = []
    for i in range(count):
        metadata = api.MessageMetadata(producer_name="bench", sequence_id=i, publish_time=1_700_000_000_000 + i)
        out.append(frames.encode_payload_command(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=i, num_messages=1)),
            frames.encode_message(metadata, payload)))
    return out


async def _run(args, workdir):
    config = StandaloneConfig()
    data = os.path.join(workdir, "data")
    config.update_from_text("\n".join([
        f"dataDirectory={data}", f"journalDirectory={data}/journal", f"ledgerDirectories={data}/ledgers",
        "brokerServicePort=0", "webServicePort=0", "advertisedAddress=127.0.0.1", "bindAddress=127.0.0.1",
        "functionsWorkerEnabled=false", f"journalSyncData={'true' if args.fsync else 'false'}",
        *args.config]))
    service = StandaloneService(config, reactor)
    service.startService()
    await service.ready
    transport = _Transport()
    cnx = BrokerProtocolFactory(service.broker, reactor).buildProtocol(transport.getPeer())
    cnx.makeConnection(transport)
    decoder = frames.FrameDecoder(1 << 30)

    async def answer(command):
        cnx.dataReceived(frames.encode_command(command))
        for _ in range(400):
            got = decoder.feed(transport.value())
            transport.clear()
            if got:
                return got[0][0]
            await task.deferLater(reactor, 0.01, lambda: None)
        raise RuntimeError(f"no answer to {command}")

    await answer(T(type=T.CONNECT, connect=api.CommandConnect(client_version="bench", protocol_version=21)))
    reply = await answer(T(type=T.PRODUCER, producer=api.CommandProducer(
        topic="persistent://public/default/bench-path", producer_id=1, request_id=1)))
    if reply.type != T.PRODUCER_SUCCESS:
        raise RuntimeError(f"producer refused: {reply}")
    sends = _send_frames(args.messages + args.warmup, args.size)
    chunks = [b"".join(sends[i:i + args.chunk]) for i in range(0, len(sends), args.chunk)]
    transport.keep = False
    done = defer.Deferred()
    state = {"next": 0, "answered": 0, "t0": None, "scheduled": False}
    settle = cnx.publish_answered
    warm_chunks = args.warmup // args.chunk

    def publish_answered(size, count=1):     # count SENDs settled (their receipts in one write)
        state["answered"] += count
        settle(size, count)
        # The next chunk is fed from the reactor once there is room (as the next TCP read
        # would come), never from inside the broker's own call chain, and without spinning.
        if not state["scheduled"] and (
                state["answered"] >= len(sends)
                or state["next"] * args.chunk - state["answered"] + args.chunk <= args.window):
            state["scheduled"] = True
            reactor.callLater(0, pump)

    cnx.publish_answered = publish_answered

    def pump():
        state["scheduled"] = False
        answered = state["answered"]
        sent = state["next"] * args.chunk
        if state["next"] == warm_chunks and state["t0"] is None and answered >= sent:
            state["t0"] = (time.perf_counter(), time.thread_time(), os.times(), answered)
            if args.profile:
                state["profiler"].enable()
        while state["next"] < len(chunks) and sent - answered + args.chunk <= args.window:
            if state["next"] == warm_chunks and state["t0"] is None:
                break
            cnx.dataReceived(chunks[state["next"]])
            state["next"] += 1
            sent += args.chunk
        if state["answered"] >= len(sends) and not done.called:
            done.callback(None)

    if args.profile:
        import cProfile
        state["profiler"] = cProfile.Profile()
    pump()
    await done
    t1 = (time.perf_counter(), time.thread_time(), os.times())
    if args.profile:
        state["profiler"].disable()
    w0, th0, ot0, answered0 = state["t0"]
    n = len(sends) - answered0
    per10k = 1e7 / n
    proc = (t1[2].user + t1[2].system) - (ot0.user + ot0.system)
    print(f"{n:,} messages of {args.size} B, chunk {args.chunk}, window {args.window}, fsync "
          f"{'on' if args.fsync else 'off'}: {n / (t1[0] - w0):,.0f} msg/s; reactor thread "
          f"{(t1[1] - th0) * per10k:.1f} CPU-ms/10k, process {proc * per10k:.1f} CPU-ms/10k "
          f"(load {os.getloadavg()[0]:.2f})")
    if args.profile:
        import pstats
        pstats.Stats(state["profiler"]).sort_stats("tottime").print_stats(args.top)
    cnx.transport.loseConnection()
    await service.stopService()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--messages", type=int, default=100_000)
    ap.add_argument("--warmup", type=int, default=5_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=50, help="SEND frames per dataReceived (50)")
    ap.add_argument("--window", type=int, default=2_000, help="unanswered SENDs at most (2,000)")
    ap.add_argument("--no-fsync", dest="fsync", action="store_false")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--verbose", action="store_true", help="the broker's log on stderr")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    args.warmup -= args.warmup % args.chunk
    if args.verbose:
        from twisted.logger import globalLogBeginner, textFileLogObserver
        globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)])
    workdir = tempfile.mkdtemp(prefix="bench-publish-path-")
    try:
        task.react(lambda _: defer.ensureDeferred(_run(args, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
