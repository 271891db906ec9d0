"""
Key_Shared subscriptions: every key goes to exactly one consumer, and each key's messages are
delivered in order, also while consumers come and go.

Keys are hashed and assigned to consumers by the selectors of ``selectors`` (Pulsar's hash and
Pulsar's three selectors: consistent-hash ring, range splitting, STICKY ranges).

Ordering rules, as Pulsar's:
- an entry whose consumer cannot take it now waits in the replay set, and every later entry for
  that consumer waits behind it, so one key never overtakes itself;
- a consumer joining a subscription whose other consumers still hold unacked messages is
  "recently joined": it receives only entries up to the last one read from the cursor when it
  joined, until every message up to that one is acknowledged (so keys moving to it do not
  overtake messages still held by their previous consumer). A consumer joining when nothing is
  outstanding is not held back, and a consumer left alone never is.
  ``allowOutOfOrderDelivery`` lifts this.
"""

from pulsar_twisted.broker.dispatch.selectors import key_hash, selector_for
from pulsar_twisted.broker.dispatch.shared import SharedDispatcher
from pulsar_twisted.broker.entryinfo import lenient_metadata, sticky_key
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api

__all__ = ["KeySharedDispatcher", "key_hash", "selector_for"]


class KeySharedDispatcher(SharedDispatcher):
    def __init__(self, subscription, cursor, clock, config, meta=None):
        super().__init__(subscription, cursor, clock, config)
        self.mode = meta.mode if meta is not None else api.AUTO_SPLIT
        self.allow_out_of_order = bool(meta is not None and meta.allow_out_of_order)
        self.selector = selector_for(self.mode, config)
        #: consumer -> last position read from the cursor when it joined (module docstring).
        self.recently_joined = {}
        #: The newest entry read from the cursor and dispatched (not counting replays), or None.
        #: "Everything up to it is acked" is ``mark_delete >= last_sent``: unlike
        #: ``mark_delete.next() >= read_position`` this holds across a ledger boundary.
        self.last_sent = None

    def add_consumer(self, consumer) -> None:
        if self.mode == api.STICKY:
            if consumer.key_shared_meta is None or consumer.key_shared_meta.mode != api.STICKY:
                raise errors.ConsumerAssignError("Subscription is in STICKY mode")
        elif consumer.key_shared_meta is not None and consumer.key_shared_meta.mode != self.mode:
            raise errors.ConsumerAssignError("Subscription is in AUTO_SPLIT mode")
        self.selector.add(consumer)
        # Only messages still unacked can be overtaken: with none outstanding (Pulsar: "if all
        # the messages are already acked"), a newcomer is not held back at all, else it would
        # wait for an ack that may never come.
        last_sent = self.last_sent
        if (self.consumers and not self.allow_out_of_order and last_sent is not None
                and self.cursor.mark_delete_position < last_sent):
            self.recently_joined[consumer] = last_sent
        super().add_consumer(consumer)

    def remove_consumer(self, consumer) -> None:
        self.selector.remove(consumer)
        self.recently_joined.pop(consumer, None)
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for position in consumer.take_pending():
            counts = self.subscription.redelivery_counts
            counts[position] = counts.get(position, 0) + 1
            self.replay[position] = None
        if len(self.consumers) <= 1:
            # A lone consumer cannot overtake anybody (Pulsar clears the set here too).
            self.recently_joined.clear()
        self._release_recently_joined()
        self.wake()

    def acked(self, consumer, positions) -> None:
        super().acked(consumer, positions)
        self._release_recently_joined()

    def acked_cumulative(self, consumer, position) -> None:
        self._release_recently_joined()

    def _release_recently_joined(self) -> None:
        if not self.recently_joined:
            return
        mark_delete = self.cursor.mark_delete_position
        for consumer, last_sent in list(self.recently_joined.items()):
            if mark_delete >= last_sent:
                del self.recently_joined[consumer]
        self.wake()

    def reset(self) -> None:
        super().reset()
        self.recently_joined.clear()
        self.last_sent = None

    def dispatch(self, entries) -> None:
        # Consumers with messages already waiting must not receive newer ones first.
        stuck = set()
        for position, hash_value in self.replay.items():
            if hash_value is not None:
                owner = self.selector.select(hash_value)
                if owner is not None:
                    stuck.add(owner)
        replaying = self._replaying
        if entries and not replaying:
            # Read from the cursor: even those that wait in the replay set count as sent, since
            # consumers joining now must not overtake them either.
            newest = entries[-1].position
            if self.last_sent is None or newest > self.last_sent:
                self.last_sent = newest
        sent = 0
        for entry in entries:
            metadata = lenient_metadata(entry.data)
            if self.hold_delayed(entry, metadata):
                continue
            hash_value = key_hash(sticky_key(metadata))
            consumer = self.selector.select(hash_value)
            if (consumer is None or not consumer.available()
                    or (consumer in stuck and not replaying)
                    or self._held_back(consumer, entry.position)):
                self.replay[entry.position] = hash_value
                if consumer is not None:
                    stuck.add(consumer)
                continue
            self.send_entry(consumer, entry, metadata)
            sent += 1
        self.round_done(sent)

    def _held_back(self, consumer, position) -> bool:
        last_sent = self.recently_joined.get(consumer)
        return last_sent is not None and position > last_sent
