"""
The record of one chaos run, as plain values the checker reads and JSON can hold.

A message is named by ``(producer, seq)``: the producer's name and the sequence id it was sent with
(both also inside the payload, see ``encode_payload``). Message ids are ``(ledger, entry, partition)``
tuples; a broker's duplicate receipt is ledger -1, entry -1.

Writers (the workload's client threads, the nemesis thread) call the ``record_*`` methods, which
take one lock; the checker reads the finished History and never mutates it.
"""

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

#: Subscription types as the official client names them.
EXCLUSIVE, FAILOVER, SHARED, KEY_SHARED = "Exclusive", "Failover", "Shared", "Key_Shared"


def encode_payload(producer: str, seq: int, key: Optional[str], size: int = 0) -> bytes:
    """``producer|seq|key|`` then padding up to ``size`` bytes: decodable without the metadata."""
    head = f"{producer}|{seq}|{key or ''}|".encode()
    return head + b"x" * max(0, size - len(head))


def decode_payload(data: bytes) -> tuple:
    """(producer, seq, key or None) of an ``encode_payload`` payload; ValueError if it is not one."""
    parts = data.split(b"|", 3)
    if len(parts) < 4:
        raise ValueError(f"not a chaos payload: {data[:40]!r}")
    return parts[0].decode(), int(parts[1]), (parts[2].decode() or None)


@dataclass
class Send:
    producer: str
    seq: int
    key: Optional[str]
    sent_at: float
    #: "acked", "failed" or None (no callback yet).
    outcome: Optional[str] = None
    message_id: Optional[tuple] = None
    reason: Optional[str] = None
    answered_at: Optional[float] = None


@dataclass
class Stored:
    """One entry read back from a partition, in the partition's storage order."""
    producer: str
    seq: int
    key: Optional[str]
    message_id: tuple


@dataclass
class Delivery:
    """One message received by one consumer, in that consumer's receive order."""
    subscription: str
    consumer: str
    producer: str
    seq: int
    key: Optional[str]
    partition: int
    redelivery_count: int = 0


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    ended: Optional[float] = None
    note: str = ""


class JsonFile:
    """``dump(path)`` / ``cls.load(path)`` for a class with ``to_json`` and ``from_json``: a run's
    record written by ``--history`` and checked again by ``--check``."""

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def load(cls, path: str):
        with open(path) as f:
            return cls.from_json(json.load(f))


@dataclass
class History(JsonFile):
    #: subscription name -> subscription type.
    subscriptions: dict = field(default_factory=dict)
    partitions: int = 0
    sends: dict = field(default_factory=dict)          # (producer, seq) -> Send
    storage: dict = field(default_factory=dict)        # partition -> [Stored]
    unreadable: dict = field(default_factory=dict)     # partition -> why it could not be read
    deliveries: list = field(default_factory=list)     # [Delivery], in arrival order
    faults: list = field(default_factory=list)         # [Fault]
    undecodable: int = 0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writers
    def record_send(self, producer: str, seq: int, key: Optional[str]) -> None:
        with self._lock:
            self.sends[(producer, seq)] = Send(producer, seq, key, time.time())

    def record_outcome(self, producer: str, seq: int, acked: bool, message_id: tuple = None,
                       reason: str = None) -> None:
        with self._lock:
            send = self.sends.get((producer, seq))
            if send is None or send.outcome is not None:
                # A second callback for one send would be a client bug: keep the first answer.
                return
            send.outcome = "acked" if acked else "failed"
            send.message_id = message_id
            send.reason = reason
            send.answered_at = time.time()

    def record_delivery(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def record_undecodable(self) -> None:
        with self._lock:
            self.undecodable += 1

    def record_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        return {
            "subscriptions": self.subscriptions, "partitions": self.partitions,
            "sends": [asdict(s) for s in self.sends.values()],
            "storage": {str(p): [asdict(s) for s in entries] for p, entries in self.storage.items()},
            "unreadable": {str(p): why for p, why in self.unreadable.items()},
            "deliveries": [asdict(d) for d in self.deliveries],
            "faults": [asdict(f) for f in self.faults],
            "undecodable": self.undecodable, "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict) -> "History":
        def mid(value):
            return tuple(value) if value is not None else None
        history = cls(subscriptions=dict(data["subscriptions"]), partitions=data["partitions"],
                      undecodable=data.get("undecodable", 0), meta=data.get("meta", {}))
        for s in data["sends"]:
            s = dict(s, message_id=mid(s.get("message_id")))
            history.sends[(s["producer"], s["seq"])] = Send(**s)
        for p, entries in data["storage"].items():
            history.storage[int(p)] = [Stored(**dict(e, message_id=mid(e["message_id"])))
                                       for e in entries]
        history.unreadable = {int(p): why for p, why in data.get("unreadable", {}).items()}
        history.deliveries = [Delivery(**d) for d in data["deliveries"]]
        history.faults = [Fault(**f) for f in data["faults"]]
        return history
