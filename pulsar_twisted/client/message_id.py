"""
``MessageId``: where a message is in a topic, ordered as Pulsar orders them.

``(ledger_id, entry_id, batch_index)`` compare lexicographically within one partition. ``earliest``
is (-1, -1) and ``latest`` (2**63-1, 2**63-1), as in the Java client; on the wire the uint64 fields
carry -1 as 2**64-1, which the broker reads back as -1. ``serialize()`` is a ``MessageIdData``
protobuf, so ids round-trip with the official clients' ``MessageId.serialize()``.
"""

import functools

from pulsar_twisted.proto import PulsarApi_pb2 as api

_U64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _I64_MAX else value


@functools.total_ordering
class MessageId:
    """
    An immutable message id; ``batch_size`` (0 when unknown) travels with batch members.
    ``topic`` is the topic (partition) it belongs to when a multi-topic consumer delivered it
    (Java's ``TopicMessageId``); it takes no part in equality or ordering.
    """

    __slots__ = ("ledger_id", "entry_id", "batch_index", "partition", "batch_size", "topic")

    def __init__(self, ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1,
                 batch_size: int = 0):
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.batch_index = batch_index
        self.partition = partition
        self.batch_size = batch_size
        self.topic = None

    def owner_topic(self):
        """The topic this id belongs to, when known (multi-topic consumers set it)."""
        return self.topic

    # ------------------------------------------------------------------ identity and order
    def _key(self):
        return (self.partition, self.ledger_id, self.entry_id, self.batch_index)

    def __eq__(self, other):
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other):
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"MessageId({self.ledger_id}, {self.entry_id}, {self.batch_index}, {self.partition})"

    def __str__(self):
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"

    def entry_key(self):
        """``(ledger_id, entry_id)``: what the broker acknowledges and redelivers."""
        return (self.ledger_id, self.entry_id)

    def is_batch(self) -> bool:
        return self.batch_index >= 0

    def ledger_entry(self) -> "MessageId":
        """This id without its batch index (the whole entry)."""
        return MessageId(self.ledger_id, self.entry_id, -1, self.partition)

    # ------------------------------------------------------------------ wire forms
    def to_proto(self, message_id_data: api.MessageIdData = None, with_batch: bool = True):
        """Fill (or make) a ``MessageIdData``; -1 becomes 2**64-1 in the uint64 fields."""
        data = message_id_data if message_id_data is not None else api.MessageIdData()
        data.ledgerId = self.ledger_id & _U64
        data.entryId = self.entry_id & _U64
        if self.partition >= 0:
            data.partition = self.partition
        if with_batch and self.batch_index >= 0:
            data.batch_index = self.batch_index
            if self.batch_size:
                data.batch_size = self.batch_size
        return data

    @classmethod
    def from_proto(cls, data: api.MessageIdData, partition: int = None) -> "MessageId":
        return cls(_signed(data.ledgerId), _signed(data.entryId), data.batch_index,
                   data.partition if partition is None else partition,
                   data.batch_size if data.HasField("batch_size") else 0)

    def serialize(self) -> bytes:
        """The ``MessageIdData`` bytes the official clients also produce and read."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> "MessageId":
        proto = api.MessageIdData()
        proto.ParseFromString(data)
        return cls.from_proto(proto)


MessageId.earliest = MessageId(-1, -1)
MessageId.latest = MessageId(_I64_MAX, _I64_MAX)
