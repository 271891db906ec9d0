"""
Seek by publish time: the first entry published at or after a time, by binary search.

Publish times grow with the position (one broker appends, stamping as it goes; producers' clocks
may disagree a little, which at worst moves the answer by a few entries, as in Pulsar). The
search runs over the ledger list first, probing each candidate ledger's first entry, then over
the entries of the one ledger found, reading one entry's metadata per probe: about
log2(ledgers) + log2(entries per ledger) reads instead of a scan of the whole backlog.
"""

from twisted.internet import defer

from pulsar_twisted.common.position import Position
from pulsar_twisted.wire.frames import entry_metadata


@defer.inlineCallbacks
def _publish_time(ledger, position: Position):
    entries = yield ledger.read_entries(position, 1)
    if not entries or entries[0].position != position:
        return None
    return entry_metadata(entries[0].data).publish_time


@defer.inlineCallbacks
def find_position_by_time(ledger, publish_time_ms: int):
    """Deferred firing with the first Position whose publish time is >= ``publish_time_ms``,
    or the position after the last entry when there is none."""
    last = ledger.last_confirmed_entry()
    end = Position(last.ledger_id, last.entry_id + 1)
    ledgers = [(info["ledgerId"], info["entries"]) for info in ledger.ledgers_info() if info["entries"] > 0]
    first = ledger.first_position()
    # Entries before ``first`` (trimmed, or in a ledger partly trimmed) do not exist any more.
    ledgers = [(lid, n) for lid, n in ledgers if Position(lid, n - 1) >= first]
    if not ledgers:
        return end
    # 1. The last ledger whose first (existing) entry is published before the time: the
    #    answer is in it, or it is the first entry of the next ledger.
    lo, hi = 0, len(ledgers) - 1
    found = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        lid, _ = ledgers[mid]
        start = first if lid == first.ledger_id else Position(lid, 0)
        when = yield _publish_time(ledger, start)
        if when is not None and when < publish_time_ms:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    if found < 0:
        lid, _ = ledgers[0]
        return first if lid == first.ledger_id else Position(lid, 0)
    lid, count = ledgers[found]
    # 2. Within it: the first entry at or after the time (entry ``lo_entry`` is before it).
    lo_entry = first.entry_id if lid == first.ledger_id else 0
    lo, hi = lo_entry + 1, count - 1
    answer = None
    while lo <= hi:
        mid = (lo + hi) // 2
        when = yield _publish_time(ledger, Position(lid, mid))
        if when is not None and when >= publish_time_ms:
            answer = mid
            hi = mid - 1
        else:
            lo = mid + 1
    if answer is not None:
        return Position(lid, answer)
    if found + 1 < len(ledgers):
        return Position(ledgers[found + 1][0], 0)
    return end
