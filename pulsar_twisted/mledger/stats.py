"""
Text forms used by the managed ledger's internal stats (Pulsar's ``ManagedLedgerInternalStats``
and ``CursorStats``, as ``pulsar-admin topics stats-internal`` prints them). Pure functions.
"""

import time


def position_text(position) -> str:
    """``"ledger:entry"``."""
    return f"{position[0]}:{position[1]}"


def ranges_text(ranges) -> str:
    """Acknowledged ranges as Pulsar prints a RangeSet: ``"[(1:2..1:5], (2:0..2:3]]"``."""
    return "[" + ", ".join(f"({position_text(a)}..{position_text(b)}]" for a, b in ranges) + "]"


def iso_ms(ms) -> str:
    """A millisecond timestamp in ISO 8601 UTC with milliseconds (empty for 0)."""
    if not ms:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ".%03dZ" % (ms % 1000)
