#!/usr/bin/env python
"""
A longer fuzzing run of the broker connection, the bookie protocol and the HTTP routes (the same
targets as tests/fuzz, pulsar_twisted/testing/fuzz.py), printing inputs tried and crashes found.

    python scripts/fuzz.py [--examples 2000] [--rounds 3] [--target broker-commands ...]

Each round of each target runs ``--examples`` inputs from a different seed; a round that finds a
crash prints hypothesis's shrunk example and counts one crash. Exit status 1 if any crash.
"""

import argparse
import base64
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hypothesis import HealthCheck, given, seed, settings, strategies as st  # noqa: E402

from pulsar_twisted.broker.admin.service import AdminService  # noqa: E402
from pulsar_twisted.security.http import secure  # noqa: E402
from pulsar_twisted.testing import fuzz  # noqa: E402
from pulsar_twisted.testing.broker import BrokerHarness  # noqa: E402
from pulsar_twisted.web.routing import RouterResource  # noqa: E402
from pulsar_twisted.web.site import make_router  # noqa: E402


def _harness(**config):
    harness = BrokerHarness(**config)
    harness.clock.advance(1000)
    harness.start()
    harness.pump()
    return harness


def _http_resource(secured: bool):
    config = {}
    if secured:
        config = dict(authenticationEnabled=True, authorizationEnabled=True, authenticationProviders=["token"],
                      tokenSecretKey="data:;base64," + base64.b64encode(b"s" * 32).decode())
    harness = _harness(**config)
    admin = AdminService(harness.broker, harness.store, harness.config, harness.clock)
    root = RouterResource(make_router(admin, harness.config))
    return (secure(root, harness.broker) if secured else root), harness.clock


def targets():
    """name -> (strategy, check(example)) built lazily (each owns its broker/harness)."""
    def broker(strategy, with_connect=False):
        harness = _harness()

        def check(example):
            if with_connect:
                fuzz.check_broker(harness, [fuzz.connect_frame()] + example, collect_garbage=True)
            else:
                fuzz.check_broker(harness, example)
        return strategy, check

    def chunks_of(strategy):
        return st.data().map(lambda d: fuzz.chunked(d.draw(strategy), d.draw))

    def admin(strategy_of_routes):
        resource, clock = _http_resource(False)
        return (strategy_of_routes(resource.router.routes),
                lambda spec: fuzz.check_http(resource, clock, spec))

    def http(secured):
        resource, clock = _http_resource(secured)
        return fuzz.http_requests(), lambda spec: fuzz.check_http(resource, clock, spec)

    return {
        "broker-bytes": lambda: broker(st.binary(max_size=2048).flatmap(
            lambda b: st.lists(st.integers(0, len(b))).map(lambda cuts: _split(b, cuts)))),
        "broker-mutated": lambda: broker(fuzz.mutated_frames().flatmap(
            lambda b: st.lists(st.integers(0, len(b)), max_size=5).map(lambda cuts: _split(b, cuts)))),
        "broker-commands": lambda: broker(st.lists(fuzz.random_command(), min_size=1, max_size=10), True),
        "bookie-bytes": lambda: (st.binary(max_size=2048).map(lambda b: [b]), fuzz.check_bookie),
        "http": lambda: http(False),
        "http-secured": lambda: http(True),
        "admin-paths": lambda: admin(fuzz.admin_paths),
        "admin-bodies": lambda: admin(fuzz.admin_bodies),
    }


def _split(data, cuts):
    out, last = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        if cut > last:
            out.append(data[last:cut])
            last = cut
    return out or [data]


def run_target(name, make, examples, rounds):
    strategy, check = make()
    tried = [0]
    crashes = []
    for round_number in range(rounds):
        @seed(round_number * 7919 + 17)
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(example):
            tried[0] += 1
            check(example)
        try:
            run()
        except Exception as e:  # a crash: hypothesis re-raises it after shrinking
            crashes.append(f"{type(e).__name__}: {str(e)[:800]}")
    return tried[0], crashes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per round per target")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (seeds) per target")
    parser.add_argument("--target", action="append", help="run only these targets")
    args = parser.parse_args(argv)
    available = targets()
    names = args.target or list(available)
    total_tried = total_crashes = 0
    for name in names:
        started = time.monotonic()
        tried, crashes = run_target(name, available[name], args.examples, args.rounds)
        total_tried += tried
        total_crashes += len(crashes)
        print(f"{name:16s} inputs tried: {tried:7d}  crashes: {len(crashes)}  "
              f"({time.monotonic() - started:.1f}s)", flush=True)
        for crash in crashes:
            print(f"    {crash}")
    print(f"TOTAL inputs tried: {total_tried}, crashes found: {total_crashes}")
    return 1 if total_crashes else 0


if __name__ == "__main__":
    sys.exit(main())
