#!/usr/bin/env python
"""
Run the pulsar-flex cases (cases.js) against a standalone started from this checkout.

    cd scripts/flex_interop && npm install && python run.py [--cases connect,shared]

Starts ``twistd -n pulsar-standalone`` (PYTHONPATH = this checkout) on free ports and a temporary
data directory, runs ``node cases.js``, restarts the standalone when the script asks (the
``reconnect_restart`` case), prints the table, and exits with node's status. ``--keep`` leaves
the standalone's directory (config, data, log) for inspection.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

from pulsar_twisted.testing.process import StandaloneProcess  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the standalone's directory")
    args = parser.parse_args()
    standalone = StandaloneProcess(start_timeout=60.0)
    standalone.start()
    env = dict(os.environ)
    if args.cases:
        env["FLEX_CASES"] = args.cases
    try:
        node = subprocess.Popen(
            ["node", os.path.join(HERE, "cases.js"), f"{standalone.host}:{standalone.port}",
             standalone.web_service_url],
            cwd=HERE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for line in node.stdout:
            if line.strip() == "RESTART":
                standalone.restart()
                node.stdin.write("ready\n")
                node.stdin.flush()
                continue
            sys.stdout.write(line)
            sys.stdout.flush()
        return node.wait()
    finally:
        if args.keep:
            standalone.stop()
            print("standalone directory:", standalone.directory)
        else:
            standalone.cleanup()


if __name__ == "__main__":
    sys.exit(main())
