"""
Message deduplication by producer name and sequence id, as Pulsar's ``MessageDeduplication``.

For every producer name the topic keeps two numbers: the highest sequence id *pushed* (accepted
and being written) and the highest *persisted* (durable). A SEND whose sequence id is not above
the pushed one is a duplicate:

- at or below the persisted one: a known duplicate, answered with a SEND_RECEIPT carrying the
  message id ``-1:-1`` and not stored (the client treats it as sent);
- above it (the first copy is still being written): unknown, answered with SEND_ERROR
  PersistenceError so the client resends later, when the answer is known.

A batch is accepted as a whole and advances the producer to its ``highest_sequence_id``.
The chunks of a chunked message all carry the message's sequence id: only the last chunk is
checked and recorded (Pulsar's rule); an earlier chunk is a duplicate only once the whole
message is stored.
A failed write fences the topic (topic.PersistentTopic.fence); once the writes in flight are
done, ``reset_pushed`` sets every pushed id back to the persisted one (Pulsar's
resetHighestSequenceIdPushed), so the resends of the failed messages are stored. Resetting at
each failure instead would let a later message's success raise persisted above pushed, and its
resend would be stored twice.

Durability (Pulsar's layout): a cursor named ``pulsar.dedup`` on the topic's managed ledger; every
``brokerDeduplicationEntriesInterval`` stored entries its mark-delete position moves to the
newest one with the persisted map in its mark-delete properties. Loading a topic restores the
map from those properties, then replays the entries after the mark-delete position, parsing
each entry's MessageMetadata (producer name, sequence ids). The cursor also holds back ledger
trimming of the entries not yet covered by a snapshot, which is what makes the replay possible.

While the state is being recovered producers cannot be created (``ready`` fires once it is
loaded), so no SEND is checked against a half-built map. When deduplication is off the topic
holds no ``MessageDeduplication`` at all: the publish path pays one ``is None`` test.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.position import Position
from pulsar_twisted.wire.frames import entry_metadata

#: Name of the managed-ledger cursor holding the snapshots (Pulsar's).
DEDUP_CURSOR = "pulsar.dedup"

#: Answers of ``check``.
NOT_DUP, DUP, UNKNOWN = 0, 1, 2

_U64 = 1 << 64


def _signed(value: int) -> int:
    """uint64 sequence ids as the client means them (-1 travels as 2**64-1)."""
    return value - _U64 if value >= (1 << 63) else value


class MessageDeduplication:
    """
    The deduplication state of one persistent topic. ``start()`` recovers it (Deferred);
    ``check`` / ``persisted`` / ``failed`` are called on the publish path, in that order.
    """

    log = Logger()

    def __init__(self, ledger, config, name: str = ""):
        self.ledger = ledger
        self.name = name or ledger.name
        self.snapshot_interval = max(1, config.brokerDeduplicationEntriesInterval)
        self.max_producers = config.brokerDeduplicationMaxNumberOfProducers
        self.pushed = {}
        self.persisted_ids = {}
        #: A chunked message on its way: producer -> (sequence id, chunk id) of its last chunk
        #: taken (pushed) / stored (persisted). A chunk sent again (a client's or a replicator's
        #: resend after a reconnect) up to it is a duplicate: a reader drops a message whose
        #: chunks are stored twice.
        self.chunks_pushed = {}
        self.chunks_persisted = {}
        self.cursor = None
        self.ready = None
        self.recovering = True
        self._since_snapshot = 0
        self._snapshotting = False

    # ---------------------------------------------------------------- recovery
    def start(self):
        """Open (or create) the snapshot cursor and rebuild the map. Deferred firing ``self``."""
        self.ready = defer.Deferred.fromCoroutine(self._recover())
        return self.ready

    async def _recover(self):
        ledger = self.ledger
        # "earliest": a topic that gets deduplication turned on late replays what it already
        # holds (Pulsar creates the cursor at the earliest position as well).
        cursor = await ledger.open_cursor(DEDUP_CURSOR, "earliest")
        self.cursor = cursor
        for producer, value in cursor.mark_delete_properties.items():
            try:
                self.persisted_ids[producer] = int(value)
            except (TypeError, ValueError):
                self.log.warn("{topic}: ignoring bad dedup snapshot entry {producer}={value!r}",
                              topic=self.name, producer=producer, value=value)
        replayed = await self._replay(cursor.mark_delete_position)
        self.pushed.update(self.persisted_ids)
        self.chunks_pushed.update(self.chunks_persisted)
        self.recovering = False
        self.log.info("{topic}: deduplication ready ({producers} producers, {replayed} entries replayed)",
                      topic=self.name, producers=len(self.persisted_ids), replayed=replayed)
        return self

    async def _replay(self, after: Position) -> int:
        ledger = self.ledger
        last = ledger.last_confirmed_entry()
        position = ledger.next_position(after)
        replayed = 0
        while position <= last:
            entries = await ledger.read_entries(position, 500)
            if not entries:
                break
            for entry in entries:
                try:
                    metadata = entry_metadata(entry.data)
                except Exception:
                    self.log.warn("{topic}: entry {position} has unreadable metadata; skipped in "
                                  "dedup replay", topic=self.name, position=entry.position)
                    continue
                if metadata.HasField("marker_type"):
                    replayed += 1   # never deduplicated (replicated_subscriptions.py)
                    continue
                if (metadata.num_chunks_from_msg > 1
                        and metadata.chunk_id < metadata.num_chunks_from_msg - 1):
                    # A chunked message counts once its last chunk is stored; until then its
                    # chunks stored so far are known, so that a resend does not store them again.
                    self.chunks_persisted[metadata.producer_name] = (
                        _signed(metadata.sequence_id), metadata.chunk_id)
                    replayed += 1
                    continue
                self.chunks_persisted.pop(metadata.producer_name, None)
                sequence_id = max(_signed(metadata.sequence_id), _signed(metadata.highest_sequence_id))
                producer = metadata.producer_name
                if sequence_id > self.persisted_ids.get(producer, -1):
                    self.persisted_ids[producer] = sequence_id
                replayed += 1
            position = ledger.next_position(entries[-1].position)
        self._since_snapshot = replayed
        return replayed

    # ---------------------------------------------------------------- publish path
    def last_sequence_id(self, producer_name: str) -> int:
        """For PRODUCER_SUCCESS: the last sequence id stored for this producer name (-1: none)."""
        return self.persisted_ids.get(producer_name, -1)

    def check(self, producer_name: str, sequence_id: int, highest: int) -> int:
        """NOT_DUP (and the producer's pushed id moves to ``highest``), DUP or UNKNOWN."""
        sequence_id = _signed(sequence_id)
        persisted = self.persisted_ids.get(producer_name)
        if persisted is not None and sequence_id <= persisted:
            return DUP
        pushed = self.pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            # The first copy is still being written: whether it gets stored is not known yet.
            return UNKNOWN
        self.pushed[producer_name] = _signed(highest)
        return NOT_DUP

    def check_chunk(self, producer_name: str, sequence_id: int, chunk_id: int = -1) -> int:
        """A chunk other than the last of its message: DUP once the message is stored, or once
        this chunk of it was taken already."""
        persisted = self.persisted_ids.get(producer_name)
        sequence_id = _signed(sequence_id)
        if persisted is not None and sequence_id <= persisted:
            return DUP
        last = self.chunks_pushed.get(producer_name)
        if last is not None and last[0] == sequence_id and chunk_id <= last[1]:
            return DUP
        self.chunks_pushed[producer_name] = (sequence_id, chunk_id)
        return NOT_DUP

    def chunk_persisted(self, producer_name: str, sequence_id: int, chunk_id: int) -> None:
        """A chunk other than the last is durable (its message's last one goes to
        ``persisted``)."""
        self.chunks_persisted[producer_name] = (_signed(sequence_id), chunk_id)

    def persisted(self, producer_name: str, highest: int, position) -> None:
        """An entry is durable: record it, and snapshot every ``snapshot_interval`` entries."""
        highest = _signed(highest)
        if highest > self.persisted_ids.get(producer_name, -1):
            self.persisted_ids[producer_name] = highest
        if self.chunks_persisted:
            self.chunks_persisted.pop(producer_name, None)   # its message is whole now
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_interval and not self.recovering:
            self.take_snapshot(Position(*position))

    def reset_pushed(self) -> None:
        """
        The topic's writes after a failure are all done (none in flight): every producer's pushed
        id falls back to its persisted one, so that resends of what failed are stored. Only
        called while nothing is being written (topic.PersistentTopic._unfence).
        """
        self.pushed = dict(self.persisted_ids)
        self.chunks_pushed = dict(self.chunks_persisted)

    # ---------------------------------------------------------------- snapshots
    def take_snapshot(self, position: Position):
        """Move the dedup cursor to ``position`` with the persisted map (Deferred)."""
        if self.cursor is None or self._snapshotting:
            return defer.succeed(None)
        self._since_snapshot = 0
        self._snapshotting = True
        properties = dict(self.persisted_ids)
        if self.max_producers and len(properties) > self.max_producers:
            # Pulsar caps the snapshot; producers left out are rebuilt from the replay.
            properties = dict(list(properties.items())[-self.max_producers:])
        d = self.cursor.mark_delete(position, properties)

        def done(result):
            self._snapshotting = False
            return result

        def failed(failure):
            self.log.warn("{topic}: dedup snapshot at {position} failed: {error}", topic=self.name,
                          position=position, error=failure.getErrorMessage())

        d.addBoth(done)
        d.addErrback(failed)
        return d

    def snapshot_now(self):
        """Snapshot at the last stored entry (topic close, tests)."""
        last = self.ledger.last_confirmed_entry()
        if last.entry_id < 0 or self.cursor is None or self.recovering:
            return defer.succeed(None)
        return self.take_snapshot(last)

    def stop(self):
        """Deduplication turned off: drop the cursor so it no longer holds data (Deferred)."""
        self.recovering = True
        if self.cursor is None:
            return defer.succeed(None)
        self.cursor = None
        d = self.ledger.delete_cursor(DEDUP_CURSOR)
        d.addErrback(lambda f: self.log.warn("{topic}: deleting the dedup cursor failed: {error}",
                                             topic=self.name, error=f.getErrorMessage()))
        return d

    def stop_existing(self):
        """Deduplication is off but a ``pulsar.dedup`` cursor remains from when it was on:
        delete it, so it no longer holds back trimming (Deferred)."""
        self.cursor = self.ledger.cursors.get(DEDUP_CURSOR)
        return self.stop()
