"""
Subscriptions: a named cursor on a topic plus the dispatcher of its type.

A durable subscription's cursor survives restarts (its acks are persisted by the managed ledger);
a reader's subscription is non-durable and vanishes with its consumer. The subscription type may
change only while no consumer is connected, as in Pulsar.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.broker import replicated_subscriptions as rsubs
from pulsar_twisted.broker.batch_acks import BatchIndexAcks
from pulsar_twisted.broker.consumer import SUB_TYPE_NAMES
from pulsar_twisted.broker.dispatch import nonpersistent
from pulsar_twisted.broker.dispatch.key_shared import KeySharedDispatcher
from pulsar_twisted.broker.dispatch.shared import SharedDispatcher
from pulsar_twisted.broker.dispatch.single import ExclusiveDispatcher, FailoverDispatcher
from pulsar_twisted.broker.rates import RateMeter
from pulsar_twisted.common import errors
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api

Sub = api.CommandSubscribe


class SubscriptionCounters:
    """
    What a subscription counts for its stats, kept across its consumers coming and going:
    ``msg_out``/``bytes_out`` (every consumer's dispatches, Consumer.sent adds to them, so a
    closed consumer's part stays: Pulsar's msgOutCounter), ``msg_expired`` (messages the TTL
    acknowledged), and the rates of the last stats period (``rates`` module): the out and
    redeliver rates are the connected consumers' summed, as Pulsar's subscription stats.
    """

    msg_out = 0
    bytes_out = 0
    msg_expired = 0
    #: Messages a non-persistent subscription dropped (no consumer could take them).
    msg_dropped = 0
    _own_rates = None

    def sample_rates(self, period) -> None:
        for consumer in list(self.consumers):
            consumer.sample_rates(period)
        if self._own_rates is None:
            self._own_rates = RateMeter(2)
        self._own_rates.sample(period, self.msg_expired, self.msg_dropped)

    def out_rates(self):
        """``(msgRateOut, msgThroughputOut, msgRateRedeliver)`` of the last stats period."""
        rate = tput = redeliver = 0.0
        for consumer in list(self.consumers):
            r, t, d = consumer.rates.rates
            rate += r
            tput += t
            redeliver += d
        return rate, tput, redeliver

    def expired_rate(self) -> float:
        return self._own_rates.rates[0] if self._own_rates is not None else 0.0

    def drop_rate(self) -> float:
        """Pulsar's ``msgDropRate`` of a non-persistent subscription, over the last period."""
        return self._own_rates.rates[1] if self._own_rates is not None else 0.0

    def active_consumer(self):
        """The consumer an Exclusive/Failover dispatcher made active, else None."""
        return getattr(self.dispatcher, "active", None) if self.dispatcher is not None else None

    def blocked_on_unacked(self) -> bool:
        """True while a Shared dispatcher holds back for maxUnackedMessagesPerSubscription."""
        check = getattr(self.dispatcher, "blocked_on_unacked", None)
        return bool(check()) if check is not None else False

    def delayed_count(self) -> int:
        """Messages held by the delayed-delivery tracker (Shared types), else 0."""
        delayed = getattr(self.dispatcher, "delayed", None)
        return len(delayed) if delayed is not None else 0


class PersistentSubscription(SubscriptionCounters):
    log = Logger()

    def __init__(self, topic, name: str, cursor, clock, config, durable: bool = True):
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.clock = clock
        self.config = config
        self.durable = durable
        self.sub_type = None
        self.dispatcher = None
        #: position -> times redelivered (Shared/Key_Shared; Exclusive/Failover only with
        #: singleActiveConsumerRedeliveryCountEnabled), sent in MESSAGE.redelivery_count.
        self.redelivery_counts = {}
        #: Entries the dispatcher skipped and acknowledged because their metadata does not parse.
        self.unreadable_skipped = 0
        #: Partly acknowledged batches (acknowledgmentAtBatchIndexLevelEnabled), else None;
        #: their bit sets are kept (and persisted) by the cursor.
        self.batch_acks = (BatchIndexAcks(cursor) if config.acknowledgmentAtBatchIndexLevelEnabled
                           else None)
        #: A replicated subscription's snapshots ahead of its mark-delete (a SnapshotCache),
        #: else None: the flag is the cursor property ``pulsar.replicated.subscription``.
        self.snapshots = None
        if (durable and config.enableReplicatedSubscriptions
                and rsubs.is_replicated(getattr(cursor, "properties", None))):
            self.snapshots = self._snapshot_cache()

    def describe(self) -> str:
        return f"{self.topic.name} [{self.name}]"

    @property
    def consumers(self):
        return self.dispatcher.consumers if self.dispatcher is not None else []

    # ---------------------------------------------------------------- replicated state
    @property
    def replicated(self) -> bool:
        """Whether the mark-delete position follows to the other clusters
        (replicated_subscriptions.py)."""
        return self.snapshots is not None

    @defer.inlineCallbacks
    def set_replicated(self, enabled: bool):
        """Make the subscription replicated or not, durably (the cursor property, as Pulsar
        keeps it): Deferred firing once stored."""
        if not self.durable:
            raise errors.NotAllowedError("A non-durable subscription cannot be replicated")
        enabled = bool(enabled)
        if enabled and not self.config.enableReplicatedSubscriptions:
            raise errors.NotAllowedError("Replicated subscriptions are disabled on this broker "
                                         "(enableReplicatedSubscriptions=false)")
        if enabled == self.replicated:
            if enabled:
                rsubs.check_controller(self.topic)
            return
        properties = dict(self.cursor.properties or {})
        if enabled:
            properties[rsubs.REPLICATED_PROPERTY] = 1
        else:
            properties.pop(rsubs.REPLICATED_PROPERTY, None)
        yield self.cursor.set_properties(properties)
        self.snapshots = self._snapshot_cache() if enabled else None
        self.log.info("{sub}: replicated state {state}", sub=self.describe(),
                      state="enabled" if enabled else "disabled")
        if enabled:
            rsubs.check_controller(self.topic)

    def _snapshot_cache(self):
        size = self.config.replicatedSubscriptionsSnapshotMaxCachedPerSubscription
        return rsubs.SnapshotCache(size)

    def marker_met(self, entry, metadata) -> None:
        """The dispatcher read a marker: never delivered, acknowledged for this subscription (as
        Pulsar's dispatchers do); a snapshot is kept first if the subscription is replicated."""
        if self.snapshots is not None and metadata.marker_type == rsubs.SNAPSHOT:
            snapshot = rsubs.parse_snapshot(entry.data)
            if snapshot is not None:
                self.snapshots.add(snapshot)
        self.redelivery_counts.pop(entry.position, None)
        d = self.cursor.delete([entry.position])
        d.addErrback(self._marker_ack_failed, entry.position)
        if self.snapshots is not None:
            self._state_moved()

    def _marker_ack_failed(self, failure, position) -> None:
        self.log.info("{sub}: acknowledging marker {position} failed ({error})",
                      sub=self.describe(), position=position, error=failure.getErrorMessage())

    def _state_moved(self) -> None:
        """The mark-delete may have passed a snapshot: the other clusters hear of it."""
        snapshot = self.snapshots.advanced(self.cursor.mark_delete_position)
        if snapshot is not None:
            controller = self.topic.replicated_subscriptions
            if controller is not None:
                controller.subscription_advanced(self.name, snapshot)

    def move_mark_delete(self, position):
        """Another cluster's update: everything up to ``position`` acknowledged here (a
        cumulative acknowledgment by no consumer; nothing happens if it is behind)."""
        if position <= self.cursor.mark_delete_position:
            return defer.succeed(None)
        d = self.cursor.mark_delete(position)
        self._forget_counts_up_to(position)
        if self.snapshots is not None:
            self._state_moved()
        return d

    def _forget_counts_up_to(self, position) -> None:
        """Redelivery counts of the positions a cumulative acknowledgment covered."""
        counts = self.redelivery_counts
        if counts:
            for p in [p for p in counts if p <= position]:
                del counts[p]

    # ---------------------------------------------------------------- consumers
    def add_consumer(self, consumer) -> None:
        """Attach ``consumer`` (raises ConsumerBusy / ConsumerAssignError as Pulsar does)."""
        if self.dispatcher is not None and self.dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                raise errors.ConsumerBusy("Subscription is of different type")
        elif self.dispatcher is None or self.sub_type != consumer.sub_type or (
                consumer.sub_type == Sub.Key_Shared):
            self._new_dispatcher(consumer)
        self.dispatcher.add_consumer(consumer)

    def _new_dispatcher(self, consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
            self.cursor.rewind()
        kind = consumer.sub_type
        if kind == Sub.Exclusive:
            dispatcher = ExclusiveDispatcher(self, self.cursor, self.clock, self.config)
        elif kind == Sub.Failover:
            dispatcher = FailoverDispatcher(self, self.cursor, self.clock, self.config, consumer.partition)
        elif kind == Sub.Shared:
            dispatcher = SharedDispatcher(self, self.cursor, self.clock, self.config)
        else:
            dispatcher = KeySharedDispatcher(self, self.cursor, self.clock, self.config,
                                             consumer.key_shared_meta)
        self.sub_type = kind
        self.dispatcher = dispatcher

    def consumer_ready(self, consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.consumer_ready(consumer)

    def remove_consumer(self, consumer) -> None:
        consumer.closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if not self.durable and not self.consumers:
            self.topic.remove_subscription(self)

    def consumer_flow(self, consumer) -> None:
        self.dispatcher.consumer_flow(consumer)

    def consumer_writable(self, consumer) -> None:
        if self.dispatcher is not None:
            # As a FLOW would: Shared dispatchers must also lift a stalled replay round, which
            # may have stalled precisely because this consumer was not writable.
            self.dispatcher.consumer_flow(consumer)

    def new_entries(self) -> None:
        if self.dispatcher is not None and self.dispatcher.consumers:
            self.dispatcher.new_entries()

    # ---------------------------------------------------------------- acks
    def acknowledge(self, consumer, cumulative: bool, positions):
        if not positions:
            return defer.succeed(None)
        counts = self.redelivery_counts
        if cumulative:
            position = positions[-1]
            d = self.cursor.mark_delete(position)
            self._forget_counts_up_to(position)
            self.dispatcher.acked_cumulative(consumer, position)
        else:
            d = self.cursor.delete(positions)
            if counts:
                for p in positions:
                    counts.pop(p, None)
            self.dispatcher.acked(consumer, positions)
        if self.snapshots is not None:
            self._state_moved()
        return d

    def redeliver(self, consumer, positions) -> None:
        if (positions and self.sub_type in (Sub.Exclusive, Sub.Failover)
                and self.config.singleActiveConsumerRedeliveryCountEnabled):
            # Pulsar's single-active dispatchers keep no redelivery tracker: their messages go
            # out with redelivery_count 0, and a client's dead-letter policy never fires there.
            # Behind the switch, negative acks / ack timeouts of given messages are counted as
            # the Shared types count them (in their dispatcher).
            counts = self.redelivery_counts
            for position in positions:
                counts[position] = counts.get(position, 0) + 1
            if len(counts) > self.PRUNE_COUNTS_ABOVE:
                self._prune_redelivery_counts()
        self.dispatcher.redeliver(consumer, positions)

    #: Redelivery counts kept before the acknowledged ones are swept out (admin skips and
    #: clear-backlog move the cursor without going through acknowledge()).
    PRUNE_COUNTS_ABOVE = 10_000

    def _prune_redelivery_counts(self) -> None:
        is_acked = self.cursor.is_acknowledged
        counts = self.redelivery_counts
        for position in [p for p in counts if is_acked(p)]:
            del counts[position]

    def mark_delete_position(self):
        return self.cursor.mark_delete_position

    def backlog(self) -> int:
        return self.cursor.number_of_entries_in_backlog()

    # ---------------------------------------------------------------- admin-like operations
    def unsubscribe(self, consumer, force: bool = False):
        others = [c for c in self.consumers if c is not consumer]
        if others and not force:
            return defer.fail(errors.ConsumerBusy("Subscription has other connected consumers"))
        for other in others:
            other.close_by_broker()
            self.dispatcher.remove_consumer(other)
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
            self.dispatcher.close()
        consumer.closed = True
        return self.topic.delete_subscription(self)

    def _disconnect_consumers(self) -> None:
        for consumer in list(self.consumers):
            consumer.close_by_broker()
            self.dispatcher.remove_consumer(consumer)

    def seek(self, position: Position):
        """
        Move the subscription to ``position`` (the next message delivered): consumers are
        disconnected first and reconnect, as Pulsar does on seek.
        """
        self._disconnect_consumers()
        if self.dispatcher is not None:
            self.dispatcher.reset()
        self.redelivery_counts.clear()
        if self.batch_acks is not None:
            self.batch_acks.clear()
        if self.snapshots is not None:
            self.snapshots.clear()     # met again as the dispatcher reads from there
        return defer.maybeDeferred(self.cursor.reset_cursor, self.topic.clamp_position(position))

    @defer.inlineCallbacks
    def seek_by_time(self, publish_time_ms: int):
        """Seek to the first message published at or after ``publish_time_ms``."""
        position = yield self.topic.find_position_by_time(publish_time_ms)
        yield self.seek(position)

    def close(self) -> None:
        """Topic unloading: tell consumers to reconnect; stop dispatching."""
        self._disconnect_consumers()
        if self.dispatcher is not None:
            self.dispatcher.close()

    def stats(self) -> dict:
        stats = {"type": SUB_TYPE_NAMES.get(self.sub_type, "Exclusive"),
                 "msgBacklog": self.backlog(), "isDurable": self.durable,
                 "isReplicated": self.replicated,
                 "consumers": [c.stats() for c in self.consumers]}
        if self.unreadable_skipped:
            stats["unreadableEntriesSkipped"] = self.unreadable_skipped
        return stats


class NonPersistentSubscription(SubscriptionCounters):
    """
    A subscription of a non-persistent topic: nothing is stored, so each message goes to the
    consumer its dispatcher (``dispatch.nonpersistent``) picks if that consumer can take it right
    now, or is dropped (counted), as Pulsar's non-persistent topics do. The subscription only
    hands messages over; it goes away with its last consumer.
    """

    batch_acks = None
    durable = False

    def __init__(self, topic, name: str, clock, config):
        self.topic = topic
        self.name = name
        self.clock = clock
        self.config = config
        self.sub_type = None
        self.dispatcher = None
        self.redelivery_counts = {}

    def describe(self) -> str:
        return f"{self.topic.name} [{self.name}]"

    @property
    def consumers(self):
        return self.dispatcher.consumers if self.dispatcher is not None else []

    @property
    def dropped(self) -> int:
        return self.dispatcher.dropped if self.dispatcher is not None else 0

    def add_consumer(self, consumer) -> None:
        if self.consumers:
            if consumer.sub_type != self.sub_type:
                raise errors.ConsumerBusy("Subscription is of different type")
        else:
            if self.dispatcher is not None:
                self.dispatcher.close()
            self.sub_type = consumer.sub_type
            self.dispatcher = nonpersistent.dispatcher_for(self, consumer, self.clock, self.config)
        self.dispatcher.add_consumer(consumer)

    def consumer_ready(self, consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.consumer_ready(consumer)

    def remove_consumer(self, consumer) -> None:
        consumer.closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if not self.consumers:
            if self.dispatcher is not None:
                self.dispatcher.close()
            self.topic.remove_subscription(self)

    def consumer_flow(self, consumer) -> None:
        pass

    def consumer_writable(self, consumer) -> None:
        pass

    def deliver(self, position, data: bytes, count: int) -> None:
        """The topic published ``data`` (``count`` messages) at ``position``: send it or drop it."""
        if self.dispatcher is not None:
            self.dispatcher.dispatch(position, data, count)

    def acknowledge(self, consumer, cumulative, positions):
        return defer.succeed(None)

    def redeliver(self, consumer, positions) -> None:
        pass

    def mark_delete_position(self):
        return None

    def backlog(self) -> int:
        return 0

    def unsubscribe(self, consumer, force=False):
        others = [c for c in self.consumers if c is not consumer]
        if others and not force:
            return defer.fail(errors.ConsumerBusy("Subscription has other connected consumers"))
        for c in list(self.consumers):
            if c is not consumer:
                c.close_by_broker()
            self.remove_consumer(c)
        return defer.succeed(None)

    def seek(self, position):
        return defer.fail(errors.NotAllowedError("Seek is not supported on non-persistent topics"))

    def seek_by_time(self, publish_time_ms):
        return self.seek(None)

    def close(self) -> None:
        for consumer in list(self.consumers):
            consumer.close_by_broker()
        if self.dispatcher is not None:
            self.dispatcher.close()
            self.dispatcher = None

    def stats(self) -> dict:
        return {"type": SUB_TYPE_NAMES.get(self.sub_type, "Exclusive"), "msgBacklog": 0,
                "msgDropRate": self.drop_rate(), "dropped": self.dropped,
                "consumers": [c.stats() for c in self.consumers]}
