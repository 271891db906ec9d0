"""
Topic statistics of the admin API (Pulsar's ``TopicStats``, ``PartitionedTopicStats`` and
``PersistentTopicInternalStats``).

Pulsar's rates (msgRateIn, ...) are computed over a stats period (Pulsar's
``statsUpdateFrequencyInSecs``): ``sample_rates()`` runs every period (AdminService drives it) and
each producer's, consumer's and subscription's rates are its counter deltas over the last period
(``broker/rates.py``); topic and subscription rates are the sums Pulsar reports. Counters
(msgInCounter, msgOutCounter, ...) are exact at every read and keep what closed producers and
consumers contributed.
"""

from twisted.internet import defer

from pulsar_twisted.broker.admin import base as admin_base
from pulsar_twisted.broker.admin.base import AdminArea, next_turn
from pulsar_twisted.broker.admin.errors import NotAllowed, NotFound
from pulsar_twisted.broker.ownership import NotOwnedError
from pulsar_twisted.broker.replication_stats import (
    add_replication, replication, replicators_of, split_publishers)
from pulsar_twisted.common.naming import TopicName
from pulsar_twisted.proto import PulsarApi_pb2 as api

_SUB_TYPE_NAMES = {api.CommandSubscribe.Exclusive: "Exclusive", api.CommandSubscribe.Shared: "Shared",
                   api.CommandSubscribe.Failover: "Failover", api.CommandSubscribe.Key_Shared: "Key_Shared"}
#: Counters summed over the partitions of a partitioned topic.
_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
           "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize",
           "offloadedStorageSize")

#: Subscription fields summed over the partitions.
_SUMMED_PER_SUBSCRIPTION = ("msgBacklog", "msgOutCounter", "bytesOutCounter", "msgRateOut",
                            "msgThroughputOut", "msgRateRedeliver", "msgRateExpired", "msgDelayed",
                            "unackedMessages")


class StatsAdmin(AdminArea):
    """Stats of loaded topics."""

    #: When the previous stats period ended (None before the first sample).
    _last_sample = None

    def sample_rates(self) -> defer.Deferred:
        """End a stats period for every loaded topic: rates are the counter deltas over it. The
        topics are walked ``SLICE_TOPICS`` per reactor turn (all with the period measured at
        the start); the Deferred (already fired below one slice) fires when all are sampled, and
        the LoopingCall driving it waits for it."""
        now = self.clock.seconds()
        period = now - self._last_sample if self._last_sample is not None else None
        self._last_sample = now
        return defer.ensureDeferred(self._sample_rates(period))

    async def _sample_rates(self, period) -> None:
        for i, topic in enumerate(list(self.broker.topics.values())):
            if i and i % admin_base.SLICE_TOPICS == 0:
                await next_turn(self.clock)
            topic.counters.sample(period)

    def topic_stats(self, topic) -> dict:
        """Pulsar's TopicStats of a loaded topic."""
        counters = topic.counters
        msg_in, bytes_in, msg_out, bytes_out = counters.totals()
        rate_in, tput_in, rate_out, tput_out = counters.rates
        base = topic.stats()
        # Replication producers (remote clusters' replicators publishing here) are counted in the
        # rates in but not listed as publishers; their figures are the inbound half of the
        # replication map, whose outbound rates count in the topic's rates out (Pulsar's getStats).
        publishers, remote_publishers = split_publishers(base["publishers"])
        replication_map = replication(replicators_of(topic), remote_publishers)
        for repl in replication_map.values():
            rate_out += repl["msgRateOut"]
            tput_out += repl["msgThroughputOut"]
        subscriptions = {name: self._subscription_stats(s)
                         for name, s in list(topic.subscriptions.items())}
        backlog_size = 0
        if topic.persistent:
            for s in topic.subscriptions.values():
                backlog_size = max(backlog_size, subscriptions[s.name]["backlogSize"])
        return {
            "msgRateIn": rate_in, "msgThroughputIn": tput_in,
            "msgRateOut": rate_out, "msgThroughputOut": tput_out,
            "bytesInCounter": bytes_in, "msgInCounter": msg_in,
            "bytesOutCounter": bytes_out, "msgOutCounter": msg_out,
            "averageMsgSize": (bytes_in / msg_in) if msg_in else 0.0,
            "msgChunkPublished": counters.chunk_published,
            "storageSize": topic.storage_size(),
            "backlogSize": backlog_size,
            "offloadedStorageSize": offloaded_size(topic),
            "publishers": publishers,
            "waitingPublishers": len(topic.access.waiting),
            "subscriptions": subscriptions,
            "replication": replication_map,
            "deduplicationStatus": topic.deduplication_status(),
            "nonContiguousDeletedMessagesRanges": sum(
                s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()),
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        }

    def _subscription_stats(self, subscription) -> dict:
        consumers = list(subscription.consumers)
        cursor = subscription.cursor if subscription.topic.persistent else None
        ranges = len(cursor.individually_deleted_ranges()) if cursor is not None else 0
        backlog_size = 0
        if cursor is not None and hasattr(cursor, "estimated_backlog_size"):
            try:
                backlog_size = cursor.estimated_backlog_size()
            except Exception:
                backlog_size = 0
        sub_type = subscription.sub_type
        rate_out, tput_out, rate_redeliver = subscription.out_rates()
        extra = {} if subscription.topic.persistent else {"msgDropRate": subscription.drop_rate()}
        active = subscription.active_consumer() if sub_type in (
            api.CommandSubscribe.Exclusive, api.CommandSubscribe.Failover) else None
        delayed = subscription.delayed_count()
        return {
            "msgRateOut": rate_out, "msgThroughputOut": tput_out,
            "bytesOutCounter": subscription.bytes_out,
            "msgOutCounter": subscription.msg_out,
            "msgRateRedeliver": rate_redeliver, "chunkedMessageRate": 0,
            "msgBacklog": subscription.backlog(),
            "backlogSize": backlog_size,
            "msgBacklogNoDelayed": max(0, subscription.backlog() - delayed),
            "blockedSubscriptionOnUnackedMsgs": subscription.blocked_on_unacked(),
            "msgDelayed": delayed,
            "unackedMessages": sum(c.unacked for c in consumers),
            "type": _SUB_TYPE_NAMES.get(sub_type, "Exclusive"),
            "activeConsumerName": active.name if active is not None else None,
            "msgRateExpired": subscription.expired_rate(),
            "consumers": [_consumer_stats(c) for c in consumers],
            "isDurable": subscription.durable,
            "isReplicated": getattr(subscription, "replicated", False),
            "nonContiguousDeletedMessagesRanges": ranges,
            **extra,
        }

    async def get_topic_stats(self, name: TopicName) -> dict:
        return self.topic_stats(await self.load(name))

    async def get_partitioned_stats(self, name: TopicName, per_partition: bool = True) -> dict:
        await self.check_namespace(name)
        partitions = await self.broker.partitions_of(name)
        if partitions == 0:
            raise NotFound("Partitioned topic does not exist")
        total = {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
                 "bytesInCounter": 0, "msgInCounter": 0, "bytesOutCounter": 0, "msgOutCounter": 0,
                 "averageMsgSize": 0.0, "storageSize": 0, "backlogSize": 0,
                 "offloadedStorageSize": 0, "publishers": [],
                 "subscriptions": {}, "replication": {},
                 "metadata": {"partitions": partitions}, "partitions": {}}
        for i in range(partitions):
            try:
                stats = await self.get_topic_stats(name.partition(i))
            except (NotFound, NotOwnedError):
                continue    # partitions served by another broker are not loaded here
            _add_partition(total, stats)
            if per_partition:
                total["partitions"][str(name.partition(i))] = stats
        if total["msgInCounter"]:
            total["averageMsgSize"] = total["bytesInCounter"] / total["msgInCounter"]
        return total

    async def get_internal_stats(self, name: TopicName) -> dict:
        """Pulsar's PersistentTopicInternalStats: the managed ledger's own internal stats, plus
        the schema and compacted ledgers (none kept in ledgers here)."""
        topic = await self.load(name)
        if not topic.persistent:
            raise NotAllowed("Internal stats exist only for persistent topics")
        stats = topic.ledger.internal_stats()
        stats["schemaLedgers"] = []
        stats["compactedLedger"] = {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False,
                                    "underReplicated": False}
        return stats


def offloaded_size(topic) -> int:
    """Bytes of the topic's ledgers held in tiered storage (0 for a non-persistent topic)."""
    return topic.ledger.offloaded_size() if topic.persistent else 0


def _consumer_stats(consumer) -> dict:
    stats = consumer.stats()
    # Subscription-level fields of CONSUMER_STATS that Pulsar's ConsumerStats does not carry.
    for key in ("msgBacklog", "type", "msgRateExpired"):
        stats.pop(key, None)
    stats.update(bytesOutCounter=consumer.bytes_out, msgOutCounter=consumer.msg_out,
                 metadata=consumer.metadata)
    return stats


def _add_partition(total: dict, stats: dict) -> None:
    """Fold one partition's TopicStats into the partitioned topic's."""
    for key in _SUMMED:
        total[key] += stats[key]
    total["publishers"] += stats["publishers"]
    add_replication(total["replication"], stats["replication"])
    for sub, s in stats["subscriptions"].items():
        agg = total["subscriptions"].setdefault(
            sub, dict(s, consumers=[], **{key: 0 for key in _SUMMED_PER_SUBSCRIPTION}))
        for key in _SUMMED_PER_SUBSCRIPTION:
            agg[key] += s[key]
        agg["consumers"] += s["consumers"]
