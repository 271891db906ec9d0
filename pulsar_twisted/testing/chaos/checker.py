"""
The checker: pure functions over a finished ``History`` (no processes, no clock).

What it counts, and why each is a violation of what a Pulsar cluster with deduplication promises:

- **lost**: a send the broker acknowledged (callback Ok) whose ``(producer, seq)`` is nowhere in the
  read-back storage. Only partitions that could be read count; acks on an unreadable partition are
  ``unverifiable`` (an unreadable partition is itself a violation: liveness after heal).
- **stored twice**: one ``(producer, seq)`` stored more than once (across all partitions): dedup is on.
- **storage order**: within a partition's storage order, a producer's seq stored for the first time
  below one of its seqs already stored (later sends landing before earlier ones).
- **consumer order**: on Exclusive and Failover subscriptions, per consumer, partition and producer;
  on Key_Shared, per consumer, partition, key and producer: a message received for the first time by
  that consumer with a seq below one it already received. Redeliveries (a seq that consumer has
  already seen) are allowed: that is at-least-once delivery, not reordering. Shared promises no order.
- **unanswered**: a send with no callback at all by the end of the run.
- **undelivered**: per subscription, stored messages (on readable partitions) it never received.
- **receipt mismatch**: an ack naming a position (ledger, entry, partition) at which storage holds a
  different message.
- **slow after heal**: when the history says when the cluster was healed (``meta["healed_at"]``), a
  send made after it that was not acked within ``LIVENESS`` seconds (issue 11: once every process is
  back, every producer's sends are answered within 10 s).
- **offload** (a run with tiered storage, ``meta["offload"]`` from ``tiered.settle``): sealed ledgers
  still not offloaded after the bounded wait (``offload_pending``: an offload that never completes),
  offloads recorded complete whose objects are not all in the bucket (``offload_missing_objects``),
  and ``offload_unexercised`` when nothing was offloaded or the read-back read no entry from a ledger
  whose only copy is in tiered storage: a run that proves nothing about offload must not pass.

Also counted, as evidence rather than a verdict of its own: **delivered then gone**, messages some
consumer received that the read-back no longer finds (stored once, then lost or served from a ledger
that was not the topic's).

Failed sends are not violations (a failure says nothing was promised); they are counted by reason.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from pulsar_twisted.testing.chaos.history import EXCLUSIVE, FAILOVER, KEY_SHARED, History

#: How many examples of each violation the verdict keeps.
EXAMPLES = 5

#: Seconds within which a send made after the heal must be acked.
LIVENESS = 10.0


@dataclass
class Verdict:
    sent: int = 0
    acked: int = 0
    duplicate_receipts: int = 0       # acked with message id -1:-1
    failed: int = 0
    failed_by_reason: dict = field(default_factory=dict)
    unanswered: int = 0
    stored: int = 0                   # entries read back, copies included
    stored_distinct: int = 0
    stored_unacked: int = 0           # stored although the send failed or was never answered
    lost: int = 0
    lost_duplicate_receipts: int = 0  # of the lost, those acked with -1:-1
    unverifiable: int = 0
    stored_twice: int = 0             # messages stored more than once
    extra_copies: int = 0
    storage_order_violations: int = 0
    consumer_order_violations: dict = field(default_factory=dict)   # subscription -> count
    undelivered: dict = field(default_factory=dict)                 # subscription -> count
    receipt_mismatches: int = 0
    slow_after_heal: int = 0
    delivered_then_gone: int = 0
    deliveries: int = 0
    redeliveries: dict = field(default_factory=dict)   # subscription -> deliveries of seen messages
    unreadable_partitions: dict = field(default_factory=dict)
    undecodable: int = 0
    #: Tiered storage (a run with ``meta["offload"]``; see the module docstring).
    offloaded_ledgers: int = 0
    tiered_only_ledgers: int = 0
    read_from_tiered_only: int = 0    # entries read back from ledgers whose only copy is offloaded
    offload_pending: int = 0
    offload_missing_objects: int = 0
    offload_unexercised: int = 0
    examples: dict = field(default_factory=dict)                    # figure -> [example]

    @property
    def violations(self) -> dict:
        """Figure name -> count, for every figure that breaks a promise and is not zero."""
        figures = {
            "lost": self.lost, "stored_twice": self.stored_twice,
            "storage_order_violations": self.storage_order_violations,
            "consumer_order_violations": sum(self.consumer_order_violations.values()),
            "unanswered": self.unanswered, "undelivered": sum(self.undelivered.values()),
            "receipt_mismatches": self.receipt_mismatches, "slow_after_heal": self.slow_after_heal,
            "unreadable_partitions": len(self.unreadable_partitions),
            "undecodable": self.undecodable, "offload_pending": self.offload_pending,
            "offload_missing_objects": self.offload_missing_objects,
            "offload_unexercised": self.offload_unexercised,
        }
        return {name: count for name, count in figures.items() if count}

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["violations"] = self.violations
        out["ok"] = self.ok
        out["examples"] = {k: [list(e) if isinstance(e, tuple) else e for e in v]
                           for k, v in self.examples.items()}
        return out

    def _example(self, figure: str, example) -> None:
        kept = self.examples.setdefault(figure, [])
        if len(kept) < EXAMPLES:
            kept.append(example)


def check(history: History) -> Verdict:
    """Every figure of the module docstring for ``history``."""
    verdict = Verdict(undecodable=history.undecodable,
                      unreadable_partitions=dict(history.unreadable))
    _check_sends(history, verdict)
    stored_at = _check_storage(history, verdict)
    _check_losses(history, verdict, stored_at)
    _check_consumer_order(history, verdict)
    _check_backlog(history, verdict)
    _check_offload(history, verdict)
    return verdict


def _check_offload(history: History, verdict: Verdict) -> None:
    figures = history.meta.get("offload")
    if not isinstance(figures, dict):
        # Not an offload run (histories written before the figures had their key: a flag).
        return
    tiered_only = set(figures.get("tiered_only", ()))
    verdict.offloaded_ledgers = figures.get("offloaded", 0)
    verdict.tiered_only_ledgers = len(tiered_only)
    verdict.read_from_tiered_only = sum(1 for entries in history.storage.values() for e in entries
                                        if e.message_id and e.message_id[0] in tiered_only)
    pending = figures.get("pending") or {}
    verdict.offload_pending = sum(len(v) if isinstance(v, list) else 1 for v in pending.values())
    for topic, ids in sorted(pending.items()):
        verdict._example("offload_pending", (topic, ids))
    missing = figures.get("complete_missing_objects", ())
    verdict.offload_missing_objects = len(missing)
    for lid in missing:
        verdict._example("offload_missing_objects", lid)
    verdict.offload_unexercised = int(not verdict.offloaded_ledgers
                                      or not verdict.read_from_tiered_only)


def _check_sends(history: History, verdict: Verdict) -> None:
    reasons = Counter()
    healed_at = history.meta.get("healed_at")
    for send in history.sends.values():
        verdict.sent += 1
        if healed_at is not None and send.sent_at >= healed_at and not (
                send.outcome == "acked" and send.answered_at - send.sent_at <= LIVENESS):
            verdict.slow_after_heal += 1
            verdict._example("slow_after_heal", (send.producer, send.seq, send.outcome, send.reason))
        if send.outcome == "acked":
            verdict.acked += 1
            if send.message_id is not None and send.message_id[0] < 0:
                verdict.duplicate_receipts += 1
        elif send.outcome == "failed":
            verdict.failed += 1
            reasons[send.reason or "?"] += 1
        else:
            verdict.unanswered += 1
            verdict._example("unanswered", (send.producer, send.seq))
    verdict.failed_by_reason = dict(reasons)


def _check_storage(history: History, verdict: Verdict) -> dict:
    """Counts copies and storage order; returns (producer, seq) -> [(ledger, entry, partition)]."""
    stored_at = defaultdict(list)
    for partition in sorted(history.storage):
        highest = {}                      # producer -> highest seq stored so far here
        for entry in history.storage[partition]:
            name = (entry.producer, entry.seq)
            first_copy = not stored_at[name]
            stored_at[name].append(tuple(entry.message_id))
            verdict.stored += 1
            if not first_copy:
                continue
            top = highest.get(entry.producer)
            if top is not None and entry.seq < top:
                verdict.storage_order_violations += 1
                verdict._example("storage_order_violations",
                                 (partition, entry.producer, entry.seq, "after", top))
            else:
                highest[entry.producer] = entry.seq
    verdict.stored_distinct = len(stored_at)
    for name, places in stored_at.items():
        if len(places) > 1:
            verdict.stored_twice += 1
            verdict.extra_copies += len(places) - 1
            verdict._example("stored_twice", (name[0], name[1], places))
        send = history.sends.get(name)
        if send is None or send.outcome != "acked":
            verdict.stored_unacked += 1
    return stored_at


def _check_losses(history: History, verdict: Verdict, stored_at: dict) -> None:
    held = {}                             # (ledger, entry, partition) -> (producer, seq)
    for name, places in stored_at.items():
        for place in places:
            held[place] = name
    for name, send in history.sends.items():
        if send.outcome != "acked":
            continue
        message_id = send.message_id
        partition = message_id[2] if message_id is not None else -1
        if name in stored_at:
            if message_id is not None and message_id[0] >= 0:
                holder = held.get(tuple(message_id))
                if holder is not None and holder != name:
                    verdict.receipt_mismatches += 1
                    verdict._example("receipt_mismatches", (name[0], name[1], message_id, holder))
            continue
        if partition in history.unreadable or (partition < 0 and history.unreadable):
            verdict.unverifiable += 1
            continue
        verdict.lost += 1
        if message_id is not None and message_id[0] < 0:
            verdict.lost_duplicate_receipts += 1
        verdict._example("lost", (name[0], name[1], message_id))


def _order_stream(subscription_type: str, delivery):
    """The stream within which ``delivery``'s subscription type promises order, or None."""
    if subscription_type in (EXCLUSIVE, FAILOVER):
        return (delivery.consumer, delivery.partition, delivery.producer)
    if subscription_type == KEY_SHARED:
        return (delivery.consumer, delivery.partition, delivery.key, delivery.producer)
    return None


def _check_consumer_order(history: History, verdict: Verdict) -> None:
    seen = defaultdict(set)               # stream -> seqs received
    highest = {}                          # stream -> highest seq received
    counts = Counter()
    for delivery in history.deliveries:
        kind = history.subscriptions.get(delivery.subscription)
        stream = _order_stream(kind, delivery)
        if stream is None:
            continue
        stream = (delivery.subscription,) + stream
        if delivery.seq in seen[stream]:
            continue                      # a redelivery: allowed
        seen[stream].add(delivery.seq)
        top = highest.get(stream)
        if top is not None and delivery.seq < top:
            counts[delivery.subscription] += 1
            verdict._example("consumer_order_violations",
                             (delivery.subscription, delivery.consumer, delivery.partition,
                              delivery.producer, delivery.seq, "after", top))
        else:
            highest[stream] = delivery.seq
    verdict.consumer_order_violations = {s: counts[s] for s in history.subscriptions}


def _check_backlog(history: History, verdict: Verdict) -> None:
    stored = set()
    for partition, entries in history.storage.items():
        stored.update((e.producer, e.seq) for e in entries)
    received = defaultdict(set)
    again = Counter()
    for delivery in history.deliveries:
        name = (delivery.producer, delivery.seq)
        if name in received[delivery.subscription]:
            again[delivery.subscription] += 1
        received[delivery.subscription].add(name)
    verdict.deliveries = len(history.deliveries)
    verdict.redeliveries = {s: again[s] for s in history.subscriptions}
    if not history.unreadable:
        gone = set().union(*received.values()) - stored if received else set()
        verdict.delivered_then_gone = len(gone)
        for name in sorted(gone)[:EXAMPLES]:
            verdict._example("delivered_then_gone", name)
    for subscription in history.subscriptions:
        missing = stored - received[subscription]
        verdict.undelivered[subscription] = len(missing)
        for name in sorted(missing)[:EXAMPLES]:
            verdict._example(f"undelivered:{subscription}", name)


def format_verdict(verdict: Verdict) -> str:
    """The figures as a few lines of text for a terminal."""
    lines = [
        f"sent {verdict.sent}  acked {verdict.acked} (duplicate receipts -1:-1: "
        f"{verdict.duplicate_receipts})  failed {verdict.failed} {verdict.failed_by_reason or ''}  "
        f"unanswered {verdict.unanswered}",
        f"stored {verdict.stored} entries, {verdict.stored_distinct} distinct messages, "
        f"{verdict.stored_unacked} of them not acked",
        f"LOST {verdict.lost} (of which acked as duplicates -1:-1: "
        f"{verdict.lost_duplicate_receipts})  unverifiable {verdict.unverifiable}",
        f"STORED TWICE {verdict.stored_twice} messages ({verdict.extra_copies} extra copies)",
        f"ORDER storage {verdict.storage_order_violations}  consumers "
        f"{verdict.consumer_order_violations}",
        f"UNDELIVERED backlog {verdict.undelivered}  (delivered, then gone from storage: "
        f"{verdict.delivered_then_gone})",
        f"deliveries {verdict.deliveries}, of which redeliveries {verdict.redeliveries}",
        f"slow after heal (>{LIVENESS:.0f}s or failed) {verdict.slow_after_heal}  "
        f"receipt mismatches {verdict.receipt_mismatches}  unreadable partitions "
        f"{verdict.unreadable_partitions or 0}  undecodable {verdict.undecodable}",
    ]
    if verdict.offloaded_ledgers or verdict.offload_unexercised:
        lines.append(
            f"OFFLOAD ledgers offloaded {verdict.offloaded_ledgers}, in tiered storage only "
            f"{verdict.tiered_only_ledgers}, entries read back from those {verdict.read_from_tiered_only}"
            f"  pending {verdict.offload_pending}  complete but missing objects "
            f"{verdict.offload_missing_objects}  unexercised {verdict.offload_unexercised}")
    for figure, examples in sorted(verdict.examples.items()):
        lines.append(f"  e.g. {figure}: {examples}")
    lines.append("VERDICT: " + ("ok" if verdict.ok else f"VIOLATIONS {verdict.violations}"))
    return "\n".join(lines)
