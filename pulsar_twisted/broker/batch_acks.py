"""
Batch index acknowledgements (``acknowledgmentAtBatchIndexLevelEnabled``), as Pulsar's cursor keeps
``batchDeletedIndexes``.

A client acking one message of a batch sends the batch's message id with ``ack_set``: a bit set,
in little-endian int64 words (java.util.BitSet.toLongArray), of the indexes *still unacked*. The
subscription keeps, per partly acked entry, the AND of every ack set received; when it becomes
empty the whole entry is acknowledged on the cursor. When a partly acked entry is delivered
again (redelivery, failover, restart of the consumer) its MESSAGE carries the remaining set, and
the client skips the indexes already acked.

Kept in memory per subscription (a restart of the broker redelivers the whole batch, which is
at-least-once, as Pulsar before it persisted batch indexes in the cursor).
"""

_WORD = 64
_WORD_MASK = (1 << _WORD) - 1


def words_to_int(words) -> int:
    value = 0
    for i, word in enumerate(words):
        value |= (word & _WORD_MASK) << (_WORD * i)
    return value


def int_to_words(value: int):
    words = []
    while value:
        word = value & _WORD_MASK
        words.append(word - (1 << _WORD) if word >= (1 << 63) else word)
        value >>= _WORD
    return words


class BatchIndexAcks:
    """position -> bit set (a Python int) of the batch indexes not yet acknowledged."""

    __slots__ = ("remaining",)

    def __init__(self):
        self.remaining = {}

    def __bool__(self) -> bool:
        return bool(self.remaining)

    def ack(self, position, ack_set) -> bool:
        """Record a partial ack of the entry at ``position``; True once every index is acked."""
        given = words_to_int(ack_set)
        current = self.remaining.get(position)
        left = given if current is None else current & given
        if left == 0:
            self.remaining.pop(position, None)
            return True
        self.remaining[position] = left
        return False

    def ack_set_for(self, position):
        """The int64 words to send with the entry's MESSAGE, or None if nothing was acked in it."""
        left = self.remaining.get(position)
        return None if left is None else int_to_words(left)

    def forget(self, position) -> None:
        self.remaining.pop(position, None)

    def forget_up_to(self, position) -> None:
        if self.remaining:
            for p in [p for p in self.remaining if p <= position]:
                del self.remaining[p]

    def clear(self) -> None:
        self.remaining.clear()

    def filter_acks(self, positions, message_ids, cumulative: bool):
        """
        The positions of an ACK to apply to the cursor: an entry acked only in part (its id
        carries an ``ack_set`` with bits left) is recorded here instead. For a cumulative ack
        ending in a partly acked batch, the cursor moves to the entry before it (Pulsar).
        """
        if cumulative:
            mid = message_ids[-1]
            position = positions[-1]
            if len(mid.ack_set) and not self.ack(position, mid.ack_set):
                self.forget_up_to(position.__class__(position[0], position[1] - 1))
                return [position.__class__(position[0], position[1] - 1)]
            self.forget_up_to(position)
            return positions
        out = []
        for position, mid in zip(positions, message_ids):
            if len(mid.ack_set):
                if self.ack(position, mid.ack_set):
                    out.append(position)
            else:
                self.remaining.pop(position, None)
                out.append(position)
        return out
