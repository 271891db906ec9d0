"""
Helpers for the few worker threads that run Python code beside the reactor (bookie checkpoints).

A thread doing pure-Python work keeps the GIL for the whole switch interval (5 ms) whenever the
reactor thread asks for it, so a checkpoint of tens of thousands of entries showed up as 10-17 ms
stalls in publish latency, once per flush interval. Such loops call ``yield_gil()`` every
``GIL_YIELD_EVERY`` items: ``time.sleep(0)`` releases the GIL, so a waiting reactor runs at once.
"""

import time

GIL_YIELD_EVERY = 256


def yield_gil() -> None:
    """Let any thread waiting for the GIL (the reactor) run now."""
    time.sleep(0)
