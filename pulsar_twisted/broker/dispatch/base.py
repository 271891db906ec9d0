"""
What every persistent dispatcher shares: the read loop over a managed cursor.

A dispatcher reads entries for its consumers only while they have permits (so memory stays
bounded by permits, not by backlog), at most ``dispatcherMaxReadBatchSize`` per read, one read in
flight at a time. When the cursor has nothing more it waits for the topic to signal new entries.
Reads are started from ``clock.callLater(0, ...)`` so that a read completing synchronously (entry
cache hit) never recurses; only the managed ledger's new-entries notification, which never runs
inside a read, starts one at once.
"""

from twisted.logger import Logger

from pulsar_twisted.broker.entryinfo import num_messages, readable_metadata


class PersistentDispatcher:
    log = Logger()
    #: Whether positions sent to a consumer are tracked per consumer until acked (Shared types).
    tracks_pending = False
    #: The topic's DispatchLimits (ratelimit.py) as of the last read; None: no dispatch limit.
    rate_limits = None

    def __init__(self, subscription, cursor, clock, config):
        self.subscription = subscription
        self.cursor = cursor
        self.clock = clock
        self.max_read = max(1, config.dispatcherMaxReadBatchSize)
        self.consumers = []
        self.reading = False
        self.closed = False
        #: Bumped whenever the cursor is moved under a read in flight: its result is dropped.
        self.epoch = 0
        self._scheduled = None

    # ---------------------------------------------------------------- consumers
    def add_consumer(self, consumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def consumer_ready(self, consumer) -> None:
        self.schedule_read()

    def consumer_flow(self, consumer) -> None:
        self.schedule_read()

    # ---------------------------------------------------------------- reading
    def schedule_read(self) -> None:
        if self._scheduled is None and not self.closed:
            self._scheduled = self.clock.callLater(0, self._read)

    def _read(self) -> None:
        self._scheduled = None
        if self.reading or self.closed:
            return
        count = self.read_count()
        if count <= 0:
            return
        limits = self.rate_limits = self.subscription.topic.dispatch_limits
        if limits is not None:
            count, wait = limits.cap(self.subscription, count)
            if count <= 0:
                # This period's dispatch budget is spent: read again at the next, not in a loop.
                self._scheduled = self.clock.callLater(wait, self._read)
                return
        d = self.start_read(count)
        if d is None:
            return
        self.reading = True
        epoch = self.epoch
        d.addCallbacks(self._read_done, self._read_failed, callbackArgs=(epoch,))

    def _read_done(self, entries, epoch) -> None:
        self.reading = False
        if self.closed:
            return
        if epoch != self.epoch:
            # The cursor moved (rewind, seek, active consumer change) while we read: these
            # entries will be read again from the new position.
            self.schedule_read()
            return
        if entries:
            self.dispatch(entries)
            self.schedule_read()
        elif self.has_more():
            self.schedule_read()

    def _read_failed(self, failure) -> None:
        self.reading = False
        if self.closed:
            return
        self.log.failure("{sub}: read failed; retrying in 1s", failure, sub=self.subscription.describe())
        self.clock.callLater(1.0, self.schedule_read)

    def has_more(self) -> bool:
        return self.cursor.has_more_entries()

    def new_entries(self) -> None:
        # The managed ledger's new-entries notification runs outside any read of ours, so a read
        # started here cannot recurse: read now, not a reactor turn later (end-to-end latency).
        if self._scheduled is None and not self.closed:
            self._read()

    # ---------------------------------------------------------------- unreadable entries
    def metadata_or_skip(self, entry):
        """
        The entry's MessageMetadata, or None after skipping it (a marker, below): an entry whose metadata does not
        parse is never sent and is acknowledged on behalf of the subscription, as Pulsar's
        AbstractBaseDispatcher.filterEntriesForConsumer does ("message metadata was corrupted"),
        so it cannot hold a backlog forever. Counted on the subscription; logged once per topic.
        """
        metadata = readable_metadata(entry.data)
        if metadata is None:
            self.skip_unreadable(entry)
        elif metadata.HasField("marker_type"):
            # A marker is for the brokers (replicated subscriptions): never delivered, and
            # acknowledged for the subscription as it passes (Pulsar's dispatchers do the same).
            self.subscription.marker_met(entry, metadata)
            return None
        return metadata

    def skip_unreadable(self, entry) -> None:
        subscription = self.subscription
        subscription.unreadable_skipped += 1
        subscription.topic.unreadable_entry(entry.position, subscription.name)
        subscription.redelivery_counts.pop(entry.position, None)
        d = self.cursor.delete([entry.position])
        d.addErrback(lambda f: self.log.failure("{sub}: acknowledging unreadable entry {position}",
                                                f, sub=subscription.describe(),
                                                position=entry.position))

    # ---------------------------------------------------------------- sending
    def send_entry(self, consumer, entry, metadata) -> None:
        """Write one entry (whose ``metadata`` was read by ``metadata_or_skip``) to ``consumer``."""
        count = num_messages(metadata)
        position = entry.position
        batch_acks = self.subscription.batch_acks
        consumer.sender.send_message(consumer.consumer_id, position[0], position[1],
                                     self.subscription.redelivery_counts.get(position, 0), entry.data,
                                     consumer.partition,
                                     batch_acks.ack_set_for(position) if batch_acks else None)
        consumer.sent(position, count, len(entry.data), self.tracks_pending)
        if self.rate_limits is not None:
            self.rate_limits.dispatched(self.subscription, count, len(entry.data))

    def rate_limits_changed(self) -> None:
        """The dispatch rates changed (ratelimit.py): a read waiting for a period runs now."""
        if self._scheduled is not None and self._scheduled.active():
            self._scheduled.cancel()
        self._scheduled = None
        self.schedule_read()

    def close(self) -> None:
        self.closed = True
        if self._scheduled is not None and self._scheduled.active():
            self._scheduled.cancel()
        self._scheduled = None

    # ---------------------------------------------------------------- for subclasses
    def read_count(self) -> int:
        raise NotImplementedError

    def start_read(self, count):
        return self.cursor.read_entries(count)

    def dispatch(self, entries) -> None:
        raise NotImplementedError

    def acked(self, consumer, positions) -> None:
        """Individual acks of ``positions`` by ``consumer`` (already applied to the cursor)."""

    def acked_cumulative(self, consumer, position) -> None:
        """A cumulative ack up to ``position`` (already applied to the cursor)."""

    def redeliver(self, consumer, positions) -> None:
        """The client asks for its unacked messages (all, or ``positions``) again."""

    def reset(self) -> None:
        """The cursor was moved (seek): forget what was in flight."""
        self.epoch += 1
