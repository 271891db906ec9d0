"""
What the chaos scripts (``scripts/chaos.py``, ``scripts/chaos_replication.py``) share around one
run: a SIGTERM that unwinds like Ctrl-C (so the run's ``finally`` kills what it started), a log
with the seconds since the start, the run turned into an exit status when it could not be made,
and the faults line.
"""

import argparse
import signal
import sys
import time


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def start(what: str):
    """Install the SIGTERM handler; return ``log(text)``, which has logged the command line."""
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()

    def log(text):
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    log(f"{what}: {' '.join(sys.argv)}")
    return log


def run_guarded(run, config, log):
    """``run(config)``, or the exit status when the run could not be made: 130 interrupted (every
    process of it killed), 2 failed."""
    try:
        return run(config)
    except KeyboardInterrupt:
        log("interrupted: every process of the run was killed")
        return 130
    except Exception as e:
        log(f"the run failed: {type(e).__name__}: {e}")
        return 2


def fault_kinds(known):
    """An argparse type: a comma-separated list of fault kinds out of ``known`` (empty: none)."""
    def parse(text: str) -> tuple:
        kinds = tuple(k for k in text.split(",") if k)
        unknown = set(kinds) - set(known)
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown faults {sorted(unknown)}; known: {', '.join(known)}")
        return kinds
    return parse


def faults_line(faults) -> str:
    return "faults: " + "; ".join(f"{f.kind} {f.target}{' (' + f.note.strip() + ')' if f.note else ''}"
                                  for f in faults)
