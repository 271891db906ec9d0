"""
The load manager's decisions log (beyond Pulsar): every placement, split, unload and shed, with its
reason, in a bounded ring (``loadBalancerDecisionsMaxEntries``) that
``GET /admin/v2/broker-stats/load-decisions`` answers, so that an operator can see why a bundle
moved. Each broker keeps the decisions it made (placements and sheds by the leader, placements by
the broker asked while no leader is registered, splits by the owner); every one is also a log event.
"""

import collections

from twisted.logger import Logger

log = Logger()

#: The kinds of decision.
KINDS = ("placement", "split", "unload", "shed")


class DecisionLog:
    """``DecisionLog(clock, max_entries=1000)``: ``record(...)`` appends, ``entries()`` reads
    (oldest first), the oldest entries dropped past ``max_entries``."""

    def __init__(self, clock, max_entries: int = 1000):
        self.clock = clock
        self._entries = collections.deque(maxlen=max(1, int(max_entries)))
        self._sequence = 0

    def record(self, kind: str, bundle: str, reason: str, broker: str = "", **details) -> dict:
        """Append one decision: ``kind`` (one of KINDS) about ``bundle`` (``tenant/ns/0x.._0x..``),
        ``reason`` in words, ``broker`` the deciding broker; ``details`` (``target``, ``source``,
        scores) are kept as they are (JSON values)."""
        self._sequence += 1
        entry = {"sequence": self._sequence, "timestamp": int(self.clock.seconds() * 1000),
                 "kind": kind, "bundle": bundle, "reason": reason, "broker": broker}
        entry.update(details)
        self._entries.append(entry)
        log.info("load manager {kind} of {bundle}: {reason}", kind=kind, bundle=bundle, reason=reason,
                 details=details)
        return entry

    def entries(self, kind: str = "") -> list:
        """The decisions kept, oldest first (only those of ``kind`` when given)."""
        return [dict(e) for e in self._entries if not kind or e["kind"] == kind]
