"""
The checker of a geo-replication run: pure functions over a finished ``GeoHistory`` (every send
made on either cluster, and what each cluster stores), built on ``checker.check``.

Each producer publishes on one cluster, its source (``GeoHistory.sources``). The figures come
from ``checker.check`` on four views, each a plain ``History``:

- **local** view of cluster C: the sends of C's producers, and C's storage of their messages.
  Its ``lost`` is *lost locally* (acknowledged at the source, missing there); its stored twice,
  storage order, unanswered, receipt mismatches and slow-after-heal are C's own.
- **replica** view of a direction S->T: the sends of S's producers that S acknowledged (message
  ids dropped: they name S's ledgers, not T's), and T's storage of their messages. Its ``lost`` is
  *lost in replication*; its stored twice and storage order are those of the replicated copies,
  per original producer (the remote dedups by the original producer name and sequence id, so
  these hold for replicated messages as for local ones).

Two figures of a direction S->T come from comparing the storages directly:

- **unreplicated**: a message of S's producers S stores and T does not (acknowledged or not:
  the replicator reads S's storage, whatever the client heard). A violation once replication has
  drained.
- **replicated, not at the source** (evidence, not a verdict): stored on T, missing from S.

A direction whose T stores nothing of S's (``crossed`` 0) is reported as such; the run's caller
decides whether that is a failure (the trial test does: a harness that replicates nothing must
not pass).

A run with a replicated subscription (``GeoHistory.subscription``, a ``SubscriptionRecord``) also
has ``subscription_checker``'s figures for it (``GeoVerdict.subscription``); its lost, out of
order and undecodable are violations ``replicated-subscription:<figure>``.
"""

from dataclasses import dataclass, field, replace

from pulsar_twisted.testing.chaos import checker
from pulsar_twisted.testing.chaos.history import History, JsonFile
from pulsar_twisted.testing.chaos.subscription_checker import (
    SubscriptionRecord, SubscriptionVerdict, check_subscription, format_subscription_verdict)

EXAMPLES = checker.EXAMPLES


@dataclass
class GeoHistory(JsonFile):
    """The record of one run: ``sends`` (every send, the faults, ``meta``), ``stored`` (cluster
    -> a History holding only that cluster's ``storage``, ``unreadable`` and ``undecodable``,
    keyed by topic index), ``sources`` (producer -> the cluster it publishes on), ``topics``
    (topic index -> full topic name), ``subscription`` (a ``SubscriptionRecord``, or None when
    the run had no replicated subscription)."""
    clusters: tuple
    sends: History = field(default_factory=History)
    stored: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    topics: dict = field(default_factory=dict)
    subscription: SubscriptionRecord = None

    def __post_init__(self):
        for cluster in self.clusters:
            self.stored.setdefault(cluster, History(partitions=len(self.topics)))

    def directions(self) -> list:
        return [(s, t) for s in self.clusters for t in self.clusters if s != t]

    def to_json(self) -> dict:
        return {"clusters": list(self.clusters), "sources": self.sources,
                "topics": {str(i): name for i, name in self.topics.items()},
                "sends": self.sends.to_json(),
                "stored": {c: h.to_json() for c, h in self.stored.items()},
                "subscription": self.subscription.to_json() if self.subscription else None}

    @classmethod
    def from_json(cls, data: dict) -> "GeoHistory":
        return cls(clusters=tuple(data["clusters"]), sends=History.from_json(data["sends"]),
                   stored={c: History.from_json(h) for c, h in data["stored"].items()},
                   sources=dict(data["sources"]),
                   topics={int(i): name for i, name in data["topics"].items()},
                   subscription=(SubscriptionRecord.from_json(data["subscription"])
                                 if data.get("subscription") else None))


def _storage_of(held: History, keep) -> dict:
    return {topic: [e for e in entries if keep(e.producer)] for topic, entries in held.storage.items()}


def local_view(geo: GeoHistory, cluster: str) -> History:
    """Cluster's own sends and its storage of them (module docstring). Entries of a producer of
    no known source count as undecodable here."""
    held = geo.stored[cluster]
    view = History(partitions=len(geo.topics), meta={"healed_at": geo.sends.meta.get("healed_at")})
    view.sends = {k: s for k, s in geo.sends.sends.items() if geo.sources.get(s.producer) == cluster}
    view.storage = _storage_of(held, lambda p: geo.sources.get(p) == cluster)
    unknown = sum(1 for entries in held.storage.values() for e in entries
                  if e.producer not in geo.sources)
    view.unreadable = dict(held.unreadable)
    view.undecodable = held.undecodable + unknown
    return view


def replica_view(geo: GeoHistory, source: str, target: str) -> History:
    """Source's acknowledged sends, without their message ids, and target's storage of them."""
    view = History(partitions=len(geo.topics))
    view.sends = {k: replace(s, message_id=None) for k, s in geo.sends.sends.items()
                  if geo.sources.get(s.producer) == source and s.outcome == "acked"}
    view.storage = _storage_of(geo.stored[target], lambda p: geo.sources.get(p) == source)
    view.unreadable = dict(geo.stored[target].unreadable)
    return view


def _names(storage: dict) -> set:
    return {(e.producer, e.seq) for entries in storage.values() for e in entries}


@dataclass
class GeoVerdict:
    local: dict = field(default_factory=dict)            # cluster -> checker.Verdict
    replicated: dict = field(default_factory=dict)       # "S->T" -> checker.Verdict
    unreplicated: dict = field(default_factory=dict)     # "S->T" -> count
    not_at_source: dict = field(default_factory=dict)    # "S->T" -> count (evidence)
    examples: dict = field(default_factory=dict)
    #: The replicated subscription's figures (None: no replicated subscription in the run, or
    #: its topic could not be read back on either cluster).
    subscription: SubscriptionVerdict = None
    subscription_record: SubscriptionRecord = field(default=None, repr=False)

    @property
    def crossed(self) -> dict:
        """"S->T" -> distinct messages of S's producers stored on T."""
        return {d: v.stored_distinct for d, v in self.replicated.items()}

    @property
    def violations(self) -> dict:
        out = {}
        for name, verdict in list(self.local.items()) + list(self.replicated.items()):
            for figure, count in verdict.violations.items():
                out[f"{name}:{figure}"] = count
        for direction, count in self.unreplicated.items():
            if count:
                out[f"{direction}:unreplicated"] = count
        if self.subscription is not None:
            for figure, count in self.subscription.violations.items():
                out[f"replicated-subscription:{figure}"] = count
        return out

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {"local": {c: v.to_json() for c, v in self.local.items()},
                "replicated": {d: v.to_json() for d, v in self.replicated.items()},
                "unreplicated": self.unreplicated, "not_at_source": self.not_at_source,
                "crossed": self.crossed, "examples": self.examples,
                "subscription": self.subscription.to_json() if self.subscription else None,
                "violations": self.violations, "ok": self.ok}


def check_geo(geo: GeoHistory) -> GeoVerdict:
    """Every figure of the module docstring for ``geo``."""
    verdict = GeoVerdict()
    for cluster in geo.clusters:
        verdict.local[cluster] = checker.check(local_view(geo, cluster))
    for source, target in geo.directions():
        check_direction(geo, source, target, verdict)
    record = geo.subscription
    if record is not None:
        verdict.subscription_record = record
        source, target = geo.stored[record.source], geo.stored[record.target]
        if record.topic not in source.unreadable and record.topic not in target.unreadable:
            verdict.subscription = check_subscription(
                record, source.storage.get(record.topic, []), target.storage.get(record.topic, []))
    return verdict


def check_direction(geo: GeoHistory, source: str, target: str, verdict: GeoVerdict) -> None:
    """The figures of the direction ``source``->``target`` (its replica view, unreplicated and
    not at source), added to ``verdict``. Alone, it checks a one-way copy (the chaos runner's
    ``--replicate``: a cluster's topic replicated to a standalone)."""
    direction = f"{source}->{target}"
    verdict.replicated[direction] = checker.check(replica_view(geo, source, target))
    mine = lambda p: geo.sources.get(p) == source  # noqa: E731
    at_source = _names(_storage_of(geo.stored[source], mine))
    at_target = _names(_storage_of(geo.stored[target], mine))
    readable = not geo.stored[source].unreadable and not geo.stored[target].unreadable
    missing = sorted(at_source - at_target) if readable else []
    verdict.unreplicated[direction] = len(missing)
    extra = sorted(at_target - at_source) if readable else []
    verdict.not_at_source[direction] = len(extra)
    if missing:
        verdict.examples[f"{direction}:unreplicated"] = [list(m) for m in missing[:EXAMPLES]]
    if extra:
        verdict.examples[f"{direction}:not_at_source"] = [list(m) for m in extra[:EXAMPLES]]


def _line(name: str, v: checker.Verdict, what_lost: str) -> str:
    return (f"  {name:<12} {what_lost} {v.lost:>5}  stored twice {v.stored_twice:>4} "
            f"({v.extra_copies} copies)  out of order {v.storage_order_violations:>4}  "
            f"stored {v.stored_distinct:>6} distinct")


def format_geo_verdict(verdict: GeoVerdict) -> str:
    """The figures as a few lines of text for a terminal."""
    lines = []
    for cluster, v in verdict.local.items():
        lines.append(f"{cluster}: sent {v.sent}  acked {v.acked} (-1:-1 {v.duplicate_receipts})  "
                     f"failed {v.failed} {v.failed_by_reason or ''}  unanswered {v.unanswered}  "
                     f"slow after heal {v.slow_after_heal}  receipt mismatches "
                     f"{v.receipt_mismatches}  unreadable {v.unreadable_partitions or 0}  "
                     f"undecodable {v.undecodable}")
    for cluster, v in verdict.local.items():
        lines.append(_line(f"at {cluster}", v, "LOST locally       "))
    for direction, v in verdict.replicated.items():
        lines.append(_line(direction, v, "LOST in replication") +
                     f"  unreplicated {verdict.unreplicated[direction]}  "
                     f"(not at source: {verdict.not_at_source[direction]})")
    for name, v in list(verdict.local.items()) + list(verdict.replicated.items()):
        for figure, examples in sorted(v.examples.items()):
            lines.append(f"  e.g. {name} {figure}: {examples}")
    for figure, examples in sorted(verdict.examples.items()):
        lines.append(f"  e.g. {figure}: {examples}")
    lines.append(f"crossed: {verdict.crossed}")
    record = verdict.subscription_record
    if record is not None and verdict.subscription is not None:
        lines.append(format_subscription_verdict(record, verdict.subscription))
    elif record is not None:
        lines.append(f"replicated subscription {record.name}: NOT CHECKED (its topic could not be "
                     f"read back)")
    lines.append("VERDICT: " + ("ok" if verdict.ok else f"VIOLATIONS {verdict.violations}"))
    return "\n".join(lines)
