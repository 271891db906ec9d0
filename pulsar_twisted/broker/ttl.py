"""
Message TTL (Pulsar's ``PersistentMessageExpiryMonitor``): unacknowledged messages older than the
TTL are acknowledged on every subscription, so they are never delivered.

A message is expired when ``now > publish_time + ttl`` (Pulsar's ``MessageImpl.isEntryExpired``;
the publish time is the one in the entry's MessageMetadata, as Pulsar uses without broker entry
metadata). Like Pulsar's ``asyncFindNewestMatching`` the search assumes publish times grow with
positions and bisects the backlog: one read when nothing expired, one when everything did, about
log2(backlog) reads otherwise. The mark-delete position then moves onto the newest expired entry;
the cursor moves its read position past it, so expired entries not yet dispatched never are.
"""

from twisted.logger import Logger

from pulsar_twisted.common.position import Position
from pulsar_twisted.wire.frames import entry_metadata

log = Logger()


class BacklogIndex:
    """
    The stored entries strictly after ``after`` and up to the last confirmed entry of ``ledger``,
    addressable by index (0 is the first of them) without reading anything.
    """

    def __init__(self, ledger, after: Position):
        last = ledger.last_confirmed_entry()
        self._segments = []   # (first index, ledger id, first entry id, count)
        total = 0
        for info in ledger.ledgers_info():
            lid, entries = info["ledgerId"], info["entries"]
            if lid < after.ledger_id or entries <= 0 or lid > last.ledger_id:
                continue
            first = after.entry_id + 1 if lid == after.ledger_id else 0
            end = min(entries - 1, last.entry_id) if lid == last.ledger_id else entries - 1
            if end >= first:
                self._segments.append((total, lid, first, end - first + 1))
                total += end - first + 1
        self.size = total

    def position(self, index: int) -> Position:
        for start, lid, first, count in reversed(self._segments):
            if index >= start:
                return Position(lid, first + index - start)
        raise IndexError(index)


async def publish_time_at(ledger, position) -> int:
    entries = await ledger.read_entries(position, 1)
    if not entries:
        raise LookupError(f"no entry at {position}")
    return entry_metadata(entries[0].data).publish_time


async def newest_older_than(ledger, after: Position, cutoff_ms: int):
    """
    The newest entry after ``after`` published before ``cutoff_ms`` (publish_time < cutoff), or
    None when the first one is not. Bisects, assuming publish times grow with positions.
    """
    index = BacklogIndex(ledger, after)
    if index.size == 0:
        return None
    if await publish_time_at(ledger, index.position(0)) >= cutoff_ms:
        return None
    low, high = 0, index.size - 1          # low matches; is anything after it matching too?
    if await publish_time_at(ledger, index.position(high)) < cutoff_ms:
        return index.position(high)
    while high - low > 1:                  # invariant: low matches, high does not
        middle = (low + high) // 2
        if await publish_time_at(ledger, index.position(middle)) < cutoff_ms:
            low = middle
        else:
            high = middle
    return index.position(low)


async def expire_subscription(topic, subscription, age_seconds: int, now_ms: int) -> bool:
    """
    Acknowledge every message of ``subscription`` published more than ``age_seconds`` before
    ``now_ms``; True if the mark-delete position moved.
    """
    cursor = getattr(subscription, "cursor", None)
    if cursor is None or age_seconds <= 0:
        return False
    # Expired: now > publish + ttl, i.e. publish < now - ttl.
    newest = await newest_older_than(topic.ledger, cursor.mark_delete_position,
                                     now_ms - age_seconds * 1000)
    if newest is None or newest <= cursor.mark_delete_position:
        return False
    before = cursor.number_of_entries_in_backlog()
    await cursor.mark_delete(newest)
    # Pulsar's msgRateExpired counts the backlog the expiry removed.
    subscription.msg_expired += max(0, before - cursor.number_of_entries_in_backlog())
    counts = getattr(subscription, "redelivery_counts", None)
    if counts:
        for p in [p for p in counts if p <= newest]:
            del counts[p]
    log.debug("{sub}: expired messages up to {pos}", sub=subscription.describe(), pos=newest)
    return True


async def expire_topic(topic, ttl_seconds: int, now_ms: int) -> int:
    """Run the TTL over every subscription and replicator of a persistent ``topic``; the number
    that moved."""
    if ttl_seconds <= 0 or not topic.persistent:
        return 0
    moved = 0
    # Replicators too (Pulsar's PersistentReplicator.expireMessages): a remote cluster away for
    # longer than the TTL does not get the messages that expired meanwhile.
    for subscription in list(topic.subscriptions.values()) + list(topic.replicators.values()):
        if await expire_subscription(topic, subscription, ttl_seconds, now_ms):
            moved += 1
    return moved
