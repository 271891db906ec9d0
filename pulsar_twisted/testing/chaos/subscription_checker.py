"""
The checker of a replicated subscription across a failover (Pulsar's PIP-33): pure functions over
a ``SubscriptionRecord`` and the two clusters' read-back storage of the topic.

The run: on the *source* cluster a consumer of a subscription made with
``replicate_subscription_state_enabled=True`` acknowledges what it receives, some messages
individually, some cumulatively (covering every message stored on the source at or before the
acked one), some never; it stops before the end. Then, once the state has crossed, the same
subscription is consumed on the *target* cluster to the end. Only the mark-delete position is
replicated, and only as far as the last snapshot it passed, so the promise is *at least once*:

- **lost**: a message stored on the target that the source's consumer never acknowledged (neither
  individually nor under a cumulative ack) and the target never delivered. Must be 0: the target's
  subscription may lag, never lead. An acknowledgement the client made but the source's broker
  lost (a kill -9) only makes the source's position lower, so counting the client's acks is safe.
- **redelivered**: delivered on the target although acknowledged on the source. Allowed (the lag
  behind the last snapshot passed, and individual acks past the mark-delete position, which are not
  replicated); reported as a count and as shares of the source's acks and of the target's
  deliveries.
- **out of order**: on the target, a producer's message delivered for the first time after one of
  its later messages. Must be 0 (an Exclusive subscription on one topic delivers in storage order).
- **undecodable**: a delivery on either cluster that is no workload payload: a marker (snapshot or
  update) that reached a consumer. Must be 0.
- **skipped**: messages the target stores before the first one it delivers. 0 means the target's
  subscription started from the beginning: the state did not cross (``crossed`` False).
- **ahead of the source**: a message the target's subscription passed (its mark-delete position,
  sampled through the run, at or beyond the message's position there) before the source's
  consumer had acknowledged it. Must be 0: a failover at that moment would have skipped it. The
  final figures cannot show this (a message acked on the source later is no longer lost), so the
  run samples the target's position while the faults go on (``target_positions``, each sample
  timed after its answer came) and times each ack before it is made: the check errs towards
  passing, never towards a false alarm.
"""

from bisect import bisect_left

from dataclasses import dataclass, field

from pulsar_twisted.testing.chaos.checker import EXAMPLES


def _mid(value):
    return tuple(value) if value is not None else None


@dataclass
class SubscriptionRecord:
    """What the replicated-subscription part of a run saw. ``topic`` is the storage index of
    the topic; deliveries are ``(producer, seq, message id)`` in arrival order;
    ``individual_acks`` are ``(producer, seq, time)``, ``cumulative_acks`` ``(source message id,
    time)`` (``time.time()`` just before the ack was made); ``target_positions`` are ``(time,
    "L:E")``, the target's mark-delete position each time a sample found it moved (timed once
    the answer came); ``undecodable`` counts, per cluster, deliveries that were no workload
    payload; ``meta`` says how the state crossed."""
    name: str
    topic: int
    source: str
    target: str
    source_deliveries: list = field(default_factory=list)
    individual_acks: list = field(default_factory=list)
    cumulative_acks: list = field(default_factory=list)
    target_deliveries: list = field(default_factory=list)
    target_positions: list = field(default_factory=list)
    undecodable: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "topic": self.topic, "source": self.source,
                "target": self.target,
                "source_deliveries": [list(d[:2]) + [_mid(d[2])] for d in self.source_deliveries],
                "individual_acks": [list(a) for a in self.individual_acks],
                "cumulative_acks": [[list(m), t] for m, t in self.cumulative_acks],
                "target_deliveries": [list(d[:2]) + [_mid(d[2])] for d in self.target_deliveries],
                "target_positions": [list(p) for p in self.target_positions],
                "undecodable": dict(self.undecodable), "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: dict) -> "SubscriptionRecord":
        return cls(name=data["name"], topic=data["topic"], source=data["source"],
                   target=data["target"],
                   source_deliveries=[(p, s, _mid(m)) for p, s, m in data["source_deliveries"]],
                   individual_acks=[tuple(a) for a in data["individual_acks"]],
                   cumulative_acks=[(tuple(m), t) for m, t in data["cumulative_acks"]],
                   target_deliveries=[(p, s, _mid(m)) for p, s, m in data["target_deliveries"]],
                   target_positions=[tuple(p) for p in data.get("target_positions", [])],
                   undecodable=dict(data.get("undecodable", {})), meta=dict(data.get("meta", {})))


@dataclass
class SubscriptionVerdict:
    stored: int = 0              # distinct messages the target stores on the topic
    acked_at_source: int = 0     # of them, acknowledged on the source
    cumulatively: int = 0        # of those, covered by a cumulative ack
    delivered: int = 0           # distinct messages delivered on the target
    lost: int = 0
    redelivered: int = 0
    delivered_twice: int = 0     # on the target (evidence: the harness acks each delivery)
    out_of_order: int = 0
    skipped: int = 0
    undecodable: int = 0
    ahead: int = 0               # passed on the target before the source acked them
    samples: int = 0             # target positions sampled
    examples: dict = field(default_factory=dict)

    @property
    def crossed(self) -> bool:
        """The target did not start from the beginning."""
        return self.skipped > 0

    @property
    def violations(self) -> dict:
        figures = {"lost": self.lost, "out_of_order": self.out_of_order,
                   "undecodable": self.undecodable, "ahead_of_source": self.ahead}
        return {name: count for name, count in figures.items() if count}

    def share(self, part: int, whole: int) -> str:
        return f"{100.0 * part / whole:.1f}%" if whole else "-"

    def to_json(self) -> dict:
        return {"stored": self.stored, "acked_at_source": self.acked_at_source,
                "cumulatively": self.cumulatively, "delivered": self.delivered,
                "lost": self.lost, "redelivered": self.redelivered,
                "delivered_twice": self.delivered_twice, "out_of_order": self.out_of_order,
                "skipped": self.skipped, "undecodable": self.undecodable,
                "ahead": self.ahead, "samples": self.samples,
                "crossed": self.crossed, "examples": self.examples,
                "violations": self.violations}


def check_subscription(record: SubscriptionRecord, source_storage: list,
                       target_storage: list) -> SubscriptionVerdict:
    """The figures of the module docstring; the storages are the topic's ``Stored`` entries on
    the source and on the target, in storage order."""
    verdict = SubscriptionVerdict()
    acked_at = _ack_times(record, source_storage)
    covered = set(_cumulative_times(record, source_storage))
    acked = set(acked_at)
    stored = []
    for entry in target_storage:
        name = (entry.producer, entry.seq)
        if name not in stored:
            stored.append(name)
    universe = set(stored)
    verdict.stored = len(universe)
    verdict.acked_at_source = len(universe & acked)
    verdict.cumulatively = len(universe & covered)

    delivered, last_seq = [], {}
    seen = set()
    for producer, seq, _ in record.target_deliveries:
        name = (producer, seq)
        if name in seen:
            verdict.delivered_twice += 1
            continue
        seen.add(name)
        delivered.append(name)
        if seq < last_seq.get(producer, -1):
            verdict.out_of_order += 1
            _example(verdict, "out_of_order", [producer, seq, last_seq[producer]])
        last_seq[producer] = max(seq, last_seq.get(producer, -1))
    verdict.delivered = len(seen)
    lost = [name for name in stored if name not in acked and name not in seen]
    verdict.lost = len(lost)
    for name in lost[:EXAMPLES]:
        _example(verdict, "lost", list(name))
    verdict.redelivered = len(seen & acked)
    first = delivered[0] if delivered else None
    verdict.skipped = stored.index(first) if first in universe else len(stored)
    verdict.undecodable = sum(record.undecodable.values())
    _check_ahead(record, target_storage, acked_at, verdict)
    return verdict


def _position(text: str) -> tuple:
    ledger, entry = text.split(":")
    return int(ledger), int(entry)


def _cumulative_times(record: SubscriptionRecord, source_storage: list) -> dict:
    """(producer, seq) -> the earliest time a cumulative ack covered it on the source."""
    acks = sorted((tuple(m[:2]), t) for m, t in record.cumulative_acks)
    positions = [p for p, _ in acks]
    earliest = [t for _, t in acks]
    for i in range(len(earliest) - 2, -1, -1):      # earliest ack at or after each position
        earliest[i] = min(earliest[i], earliest[i + 1])
    out = {}
    for entry in source_storage:
        i = bisect_left(positions, tuple(entry.message_id[:2]))
        if i < len(positions):
            name = (entry.producer, entry.seq)
            out[name] = min(out.get(name, earliest[i]), earliest[i])
    return out


def _ack_times(record: SubscriptionRecord, source_storage: list) -> dict:
    """(producer, seq) -> the earliest time the source's consumer acknowledged it, either way."""
    out = _cumulative_times(record, source_storage)
    for producer, seq, t in record.individual_acks:
        out[(producer, seq)] = min(out.get((producer, seq), t), t)
    return out


def _check_ahead(record, target_storage: list, acked_at: dict, verdict) -> None:
    samples = sorted((t, _position(text)) for t, text in record.target_positions)
    verdict.samples = len(samples)
    times, furthest = [], []
    for t, position in samples:
        # A position never goes back; the running maximum guards against a stale answer.
        furthest.append(max(position, furthest[-1]) if furthest else position)
        times.append(t)
    ahead = set()
    for entry in target_storage:
        i = bisect_left(furthest, tuple(entry.message_id[:2]))
        if i == len(furthest):
            continue                     # never passed while sampled
        name = (entry.producer, entry.seq)
        if name not in ahead and acked_at.get(name, float("inf")) > times[i]:
            ahead.add(name)
            _example(verdict, "ahead_of_source",
                     [entry.producer, entry.seq, f"passed by {times[i]:.3f}",
                      f"acked at {acked_at.get(name)}"])
    verdict.ahead = len(ahead)


def _example(verdict: SubscriptionVerdict, figure: str, example) -> None:
    kept = verdict.examples.setdefault(figure, [])
    if len(kept) < EXAMPLES:
        kept.append(example)


def format_subscription_verdict(record: SubscriptionRecord, v: SubscriptionVerdict) -> str:
    """The figures as a few lines of text for a terminal."""
    direction = f"{record.source}->{record.target}"
    lines = [
        f"replicated subscription {record.name} {direction}: {record.target} stores {v.stored}, "
        f"{v.acked_at_source} of them acked on {record.source} ({v.cumulatively} under a "
        f"cumulative ack); {record.target} skipped {v.skipped}, then delivered {v.delivered}",
        f"  LOST {v.lost}  redelivered on {record.target} {v.redelivered} "
        f"({v.share(v.redelivered, v.acked_at_source)} of {record.source}'s acks, "
        f"{v.share(v.redelivered, v.delivered)} of {record.target}'s deliveries)  delivered twice "
        f"{v.delivered_twice}  out of order {v.out_of_order}  markers/undecodable delivered "
        f"{v.undecodable} {record.undecodable or ''}",
        f"  AHEAD of {record.source} {v.ahead} (of {v.samples} samples of {record.target}'s "
        f"position during the run)",
        f"  state crossed: {'yes' if v.crossed else 'NO (the target started from the beginning)'}"
        f"; {record.target}'s subscription: {record.meta.get('settled', '?')}"]
    for figure, examples in sorted(v.examples.items()):
        lines.append(f"  e.g. {figure}: {examples}")
    return "\n".join(lines)
