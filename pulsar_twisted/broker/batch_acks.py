"""
Batch index acknowledgements (``acknowledgmentAtBatchIndexLevelEnabled``), kept in the cursor's
``batchDeletedIndexes`` as Pulsar does.

A client acking one message of a batch sends the batch's message id with ``ack_set``: a bit set,
in little-endian int64 words (java.util.BitSet.toLongArray), of the indexes *still unacked*. The
subscription keeps, per partly acked entry, the AND of every ack set received; when it becomes
empty the whole entry is acknowledged on the cursor. When a partly acked entry is delivered
again (redelivery, failover, restart of the consumer or of the broker) its MESSAGE carries the
remaining set, and the client skips the indexes already acked.

The bit sets live in the durable cursor (``ManagedCursorImpl.set_batch_deleted_indexes``): they
are persisted with the mark-delete position and the individually acknowledged ranges, so they
survive a broker restart; the cursor forgets an entry's set when the entry is acknowledged whole
or the mark-delete position passes it, and on a reset (seek).
"""

from twisted.logger import Logger

from pulsar_twisted.mledger.bitset import int_to_words, words_to_int

__all__ = ["BatchIndexAcks", "int_to_words", "words_to_int"]

log = Logger()


class BatchIndexAcks:
    """
    The batch index acks of one subscription, over ``cursor`` (anything with the cursor's
    ``set_batch_deleted_indexes`` / ``batch_deleted_indexes`` / ``batch_deleted_count``).
    """

    __slots__ = ("cursor",)

    def __init__(self, cursor):
        self.cursor = cursor

    def __bool__(self) -> bool:
        return self.cursor.batch_deleted_count() > 0

    def ack(self, position, ack_set) -> bool:
        """
        Record a partial ack of the entry at ``position``; True once every index is acked (the
        caller then acknowledges the entry whole on the cursor, which forgets its bit set).
        """
        given = words_to_int(ack_set)
        current = self.cursor.batch_deleted_indexes(position)
        left = given if current is None else words_to_int(current) & given
        if left == 0:
            return True
        if current is None or left != words_to_int(current):
            d = self.cursor.set_batch_deleted_indexes(position, left)
            # Nothing waits on this: the ACK is fire-and-forget for the client, and an index
            # whose ack is lost is redelivered (at least once).
            d.addErrback(self._not_persisted, position)
        return False

    def _not_persisted(self, failure, position):
        log.warn("batch index ack of {position} not persisted: {err}",
                 position=position, err=failure.getErrorMessage())

    def ack_set_for(self, position):
        """The int64 words to send with the entry's MESSAGE, or None if nothing was acked in it."""
        return self.cursor.batch_deleted_indexes(position)

    def clear(self) -> None:
        """Seek: nothing to do here, the cursor's ``reset_cursor`` forgets every bit set."""

    def filter_acks(self, positions, message_ids, cumulative: bool):
        """
        The positions of an ACK to apply to the cursor: an entry acked only in part (its id
        carries an ``ack_set`` with bits left) is recorded here instead. For a cumulative ack
        ending in a partly acked batch, the cursor moves to the entry before it (Pulsar); the
        mark-delete then drops the bit sets of the entries it passes.
        """
        if cumulative:
            mid = message_ids[-1]
            position = positions[-1]
            if len(mid.ack_set) and not self.ack(position, mid.ack_set):
                return [position.__class__(position[0], position[1] - 1)]
            return positions
        out = []
        for position, mid in zip(positions, message_ids):
            if not len(mid.ack_set) or self.ack(position, mid.ack_set):
                out.append(position)
        return out
