"""
Topics: where producers publish and subscriptions read.

A persistent topic writes every message to its managed ledger and answers the producer only once
the entry is durable; its subscriptions read through cursors. A non-persistent topic stores
nothing: each message goes straight to the consumers that can take it.
"""

import dataclasses
import itertools
from types import MappingProxyType

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.broker import compaction, last_message, seek_time
from pulsar_twisted.broker.access_modes import ProducerAccess
from pulsar_twisted.broker.consumer import Consumer
from pulsar_twisted.broker import replicated_subscriptions, replication
from pulsar_twisted.broker.dedup import DEDUP_CURSOR, MessageDeduplication
from pulsar_twisted.broker.producer import Producer, TopicFencedError, producer_class
from pulsar_twisted.broker.storage_stats import LedgerWriteStats, StorageWriteStats
from pulsar_twisted.broker.subscription import NonPersistentSubscription, PersistentSubscription
from pulsar_twisted.common import errors
from pulsar_twisted.common.bk_errors import BKException
from pulsar_twisted.common.position import EARLIEST, LATEST, Position
from pulsar_twisted.common.waiters import tell_failed
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.mledger.ledger import ManagedLedgerTerminatedError
from pulsar_twisted.proto import PulsarApi_pb2 as api

Sub = api.CommandSubscribe

_INT64_MAX = 0x7FFFFFFFFFFFFFFF
_NO_SUBSCRIPTIONS = MappingProxyType({})
#: The access modes a producer may ask for (``ProducerAccessMode.values()`` builds a list per call).
_ACCESS_MODES = frozenset(api.ProducerAccessMode.values())


class TopicCounters:
    """
    A topic's in/out counters and rates, as Pulsar's topic stats: ``msg_in``/``bytes_in`` count
    what every producer published (a producer's counts stay after it closes, Pulsar's
    ``msgInCounter``), the out counters are the subscriptions' (each keeps what its closed
    consumers sent) plus those of subscriptions already deleted. Rates are those of the last
    stats period: publishers' summed for the in rates, subscriptions' for the out rates
    (``rates`` module).
    """

    # Slotted (issue 14: memory per topic), without ``__dict__`` (32 bytes more per instance;
    # tests stub a method with ``testing.patching.patch_method``).
    __slots__ = ("topic", "msg_in", "bytes_in", "chunk_published", "removed_out", "_ledger_counters",
                 "_storage")

    def __init__(self, topic, now: float):
        self.topic = topic
        self.msg_in = 0
        self.bytes_in = 0
        #: Whether a chunk of a large message was published (the stats' msgChunkPublished).
        self.chunk_published = False
        #: Messages and bytes dispatched by subscriptions since deleted (a tuple: no list per topic).
        self.removed_out = (0, 0)
        # Write latency / entry size histograms (``storage``): the managed ledger's counters once
        # ``use_ledger`` found them, else (a ledger keeping none) a StorageWriteStats of our own.
        self._ledger_counters = None
        self._storage = None

    def use_ledger(self, ledger) -> None:
        """Read the storage histograms from ``ledger``'s counters, which record the same adds;
        a ledger without counters gets the topic's own StorageWriteStats, fed by ``written``."""
        self._ledger_counters = getattr(ledger, "counters", None)
        if self._ledger_counters is None:
            self._storage = StorageWriteStats(self.topic.clock)

    @property
    def storage(self):
        """The topic's storage write histograms (storage_stats.py), read at scrape time."""
        if self._ledger_counters is not None:
            return LedgerWriteStats(self._ledger_counters)
        if self._storage is None:
            self._storage = StorageWriteStats(self.topic.clock)   # a topic that stores nothing
        return self._storage

    def written(self, result, started: float, size: int):
        """A successful write (a Deferred callback returning ``result``): recorded here only when
        the managed ledger's counters do not record it already."""
        storage = self._storage
        return result if storage is None else storage.written(result, started, size)

    def published(self, count: int, size: int, chunk: bool = False) -> None:
        self.msg_in += count
        self.bytes_in += size
        if chunk:
            self.chunk_published = True

    def subscription_removed(self, subscription) -> None:
        msgs, size = self.removed_out
        self.removed_out = (msgs + subscription.msg_out, size + subscription.bytes_out)

    def totals(self):
        """``(msg_in, bytes_in, msg_out, bytes_out)`` since the topic was loaded."""
        subscriptions = list(self.topic.subscriptions.values())
        return (self.msg_in, self.bytes_in,
                self.removed_out[0] + sum(s.msg_out for s in subscriptions),
                self.removed_out[1] + sum(s.bytes_out for s in subscriptions))

    def sample(self, period) -> None:
        """Close a stats period of ``period`` seconds (None: the first, nothing to measure yet)
        for every producer and subscription of the topic."""
        for producer in list(self.topic.producers.values()):
            producer.sample_rates(period)
        for subscription in list(self.topic.subscriptions.values()):
            subscription.sample_rates(period)
        for replicator in list(self.topic.replicators.values()):
            replicator.sample_rates(period)

    @property
    def rates(self):
        """``(msgRateIn, msgThroughputIn, msgRateOut, msgThroughputOut)`` of the last period."""
        rate_in = tput_in = rate_out = tput_out = 0.0
        for producer in list(self.topic.producers.values()):
            rate, tput = producer.rates.rates
            rate_in += rate
            tput_in += tput
        for subscription in list(self.topic.subscriptions.values()):
            rate, tput, _redeliver = subscription.out_rates()
            rate_out += rate
            tput_out += tput
        return rate_in, tput_in, rate_out, tput_out


class TopicBase:
    """
    What persistent and non-persistent topics share. Code that treats the two kinds differently
    asks the topic (``persistent``, ``storage_size()``, ``backlog_size()``) rather than looking
    for a managed ledger.
    """

    log = Logger()
    #: True for topics whose messages are stored (a managed ledger, cursors, a backlog).
    persistent = False
    #: Remote cluster -> Replicator (replication.py); a persistent topic's own slot shadows this
    #: shared empty mapping once its namespace replicates.
    replicators = MappingProxyType({})

    # Slots (issue 14: memory per loaded topic), without ``__dict__`` (32 bytes more per instance;
    # tests stub a method with ``testing.patching.patch_method``). Subclasses declare theirs.
    __slots__ = ("service", "topic_name", "name", "clock", "config", "producers", "subscriptions",
                 "closed", "access", "dedup", "max_producers", "max_consumers",
                 "max_consumers_per_subscription", "policies", "publish_limiter", "dispatch_limits",
                 "counters", "__weakref__")

    def __init__(self, service, topic_name, clock, config):
        self.service = service
        self.topic_name = topic_name
        self.name = str(topic_name)
        self.clock = clock
        self.config = config
        self.producers = {}
        #: name -> subscription: a shared empty mapping until the first (``_add_subscription``;
        #: producers-only topics, most of a broker's, have none).
        self.subscriptions = _NO_SUBSCRIPTIONS
        self.closed = False
        self.access = ProducerAccess(self)
        #: A MessageDeduplication while deduplication is on (persistent topics), else None.
        self.dedup = None
        #: Limits in force (0: none): the broker's, then the namespace policies' (``set_limits``).
        self.max_producers = config.maxProducersPerTopic
        self.max_consumers = config.maxConsumersPerTopic
        self.max_consumers_per_subscription = config.maxConsumersPerSubscription
        #: The NamespacePolicies applied by the PolicyService (policies.py); None before.
        self.policies = None
        #: Publish / dispatch rate limiters (ratelimit.py), None while no limit is set.
        self.publish_limiter = None
        self.dispatch_limits = None
        self.counters = TopicCounters(self, clock.seconds())

    @property
    def partition(self) -> int:
        return self.topic_name.partition_index

    def set_limits(self, max_producers: int, max_consumers: int, max_consumers_per_subscription: int) -> None:
        """Limits checked at each new producer / consumer from now on (0: none)."""
        self.max_producers = max_producers
        self.max_consumers = max_consumers
        self.max_consumers_per_subscription = max_consumers_per_subscription

    # ---------------------------------------------------------------- producers
    def _check_ready(self) -> None:
        """ServiceNotReady (the client retries) while the topic cannot take producers."""
        if self.closed:
            raise errors.ServiceNotReady(f"Topic {self.name} is being unloaded")

    def add_producer(self, cnx, request, name: str, schema_version: bytes = b"") -> Producer:
        """The producer of ``request`` (a ProducerRequest) named ``name``, publishing with
        ``schema_version``, once its access mode admits it: a Producer, or a Deferred of one."""
        self._check_ready()
        existing = self.producers.get(name)
        if existing is not None:
            raise errors.ProducerBusy(f"Producer with name '{name}' is already connected to topic")
        limit = self.max_producers
        if limit and len(self.producers) >= limit:
            raise errors.ProducerBusy(f"Topic {self.name} reached max producers limit {limit}")
        if request.access_mode not in _ACCESS_MODES:
            raise errors.NotAllowedError(f"Unknown producer access mode {request.access_mode}")

        def create():
            if self.producers.get(name) is not None:
                raise errors.ProducerBusy(f"Producer with name '{name}' is already connected to topic")
            producer = producer_class(name)(
                self, cnx, request.producer_id, name, request.access_mode,
                request.user_provided_name, dict(request.metadata), schema_version)
            producer.connected_since = self.service.now_iso()
            if self.dedup is not None:
                producer.last_sequence_id = self.dedup.last_sequence_id(name)
            self.producers[name] = producer
            return producer

        dedup = self.dedup
        if dedup is not None and dedup.recovering and dedup.ready is not None:
            # Deduplication state still loading: answer once a reconnecting producer can be told
            # its last stored sequence id.
            d = defer.Deferred()
            dedup.ready.addBoth(lambda _: d.callback(None))
            d.addCallback(lambda _: self._check_ready())
            d.addCallback(lambda _: self.access.acquire(cnx, request, name, create))
            return d
        return self.access.acquire(cnx, request, name, create)

    def remove_producer(self, producer) -> None:
        """The client closed the producer or went away: nothing more is sent to it."""
        producer.closed = True
        self._detach_producer(producer)

    def evict_producer(self, producer) -> None:
        """
        The broker closes a producer (fencing, quota, dedup change, unload): detached at once,
        its publishes in flight still answered, then CLOSE_PRODUCER (Producer.close_by_broker).
        """
        self._detach_producer(producer)
        producer.close_by_broker()

    def _detach_producer(self, producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self.access.released(producer)

    # ---------------------------------------------------------------- consumers
    def check_consumer_limits(self, subscription) -> None:
        limit = self.max_consumers
        if limit and sum(len(s.consumers) for s in self.subscriptions.values()) >= limit:
            raise errors.ConsumerBusy(f"Topic {self.name} reached max consumers limit {limit}")
        limit = self.max_consumers_per_subscription
        if limit and subscription is not None and len(subscription.consumers) >= limit:
            raise errors.ConsumerBusy(f"Subscription reached max consumers limit {limit}")

    def make_consumer(self, subscription, cnx, request) -> Consumer:
        """The Consumer of a SubscribeRequest on ``subscription`` (not added to it yet)."""
        max_unacked = (self.config.maxUnackedMessagesPerConsumer
                       if request.sub_type in (Sub.Shared, Sub.Key_Shared) else 0)
        consumer = Consumer(
            subscription, cnx, request.consumer_id, request.consumer_name or f"consumer-{request.consumer_id}",
            request.sub_type, request.priority_level, self.partition, dict(request.metadata),
            request.key_shared_meta, max_unacked)
        consumer.connected_since = self.service.now_iso()
        return consumer

    def _add_subscription(self, name: str, subscription) -> None:
        if self.subscriptions is _NO_SUBSCRIPTIONS:
            self.subscriptions = {}
        self.subscriptions[name] = subscription

    def remove_subscription(self, subscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            self.counters.subscription_removed(subscription)

    def close(self):
        """Unload: producers and consumers are told to reconnect."""
        self.closed = True
        self.access.close()
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        self.producers.clear()
        for subscription in list(self.subscriptions.values()):
            subscription.close()
        return defer.succeed(None)

    def storage_size(self) -> int:
        """Bytes this topic stores (0: it stores nothing)."""
        return 0

    def durable_subscriptions(self) -> list:
        """The subscriptions whose position is kept, so whose backlog counts against quotas."""
        return []

    def backlog_size(self) -> int:
        """Bytes after the mark-delete position of the slowest durable subscription (0: none)."""
        sizes = [s.cursor.estimated_backlog_size() for s in self.durable_subscriptions()]
        return max(sizes) if sizes else 0

    def ready_now(self) -> bool:
        """``wait_ready`` without a Deferred when it can answer at once: True when the topic can
        take producers now, False while its deduplication state is recovering (``wait_ready``
        then); raises what ``wait_ready`` would fail with."""
        dedup = self.dedup
        if dedup is not None and dedup.recovering and dedup.ready is not None:
            return False
        self._check_ready()
        return True

    def deduplication_status(self) -> str:
        """Pulsar's ``deduplicationStatus``: "Disabled", "Recovering", "Enabled" or "Failed"."""
        return "Disabled"

    def stats(self) -> dict:
        return {"publishers": [p.stats() for p in self.producers.values()],
                "subscriptions": {name: s.stats() for name, s in self.subscriptions.items()}}


class PersistentTopic(TopicBase):
    """A topic on a managed ledger."""

    persistent = True

    __slots__ = ("ledger", "pending_adds", "max_pending_adds", "_throttled", "fenced", "_unfence_call",
                 "dedup_error", "unreadable_entries", "replicators", "_replication",
                 "replicated_subscriptions")

    def __init__(self, service, topic_name, ledger, clock, config):
        super().__init__(service, topic_name, clock, config)
        self.ledger = ledger
        self.counters.use_ledger(ledger)
        self.pending_adds = 0
        self.max_pending_adds = config.managedLedgerMaxPendingAddsPerTopic
        #: Connections throttled by this topic (a list while some are, else an empty tuple).
        self._throttled = ()
        #: A write failed: nothing more is written until the adds in flight are done (``fence``).
        self.fenced = False
        self._unfence_call = None
        #: Why deduplication could not be recovered (the topic serves no producer then), or None.
        self.dedup_error = None
        #: Entries dispatchers skipped for unreadable metadata (all subscriptions; logged once).
        self.unreadable_entries = 0
        self.access = ProducerAccess(self, ledger)
        self.replicators = TopicBase.replicators
        #: The replication being set up (a Deferred: the topic is not ready before its
        #: replicators' cursors exist), a retry's DelayedCall, or None.
        self._replication = None
        #: The ReplicatedSubscriptionsController while there is one (replicated_subscriptions.py).
        self.replicated_subscriptions = None
        for name, cursor in ledger.cursors.items():
            if name == DEDUP_CURSOR or replication.is_replicator_cursor(name):
                continue  # the deduplication snapshots' and the replicators' cursors
            self._add_subscription(name, PersistentSubscription(self, name, cursor, clock, config))
        ledger.add_new_entries_listener(self._new_entries)
        # Another broker took the managed ledger over: unload here (IManagedLedger contract).
        ledger.add_fenced_listener(self._ledger_fenced)
        service.compactor.topic_loaded(self)
        if config.brokerDeduplicationEnabled:
            self.set_deduplication(True)

    def set_deduplication(self, enabled: bool):
        """
        Turn deduplication on or off for this topic (broker default, namespace or topic policy).
        Turning it on recovers the state from the ``pulsar.dedup`` cursor and disconnects the
        current producers, so they reconnect and learn their last sequence id (Pulsar does the
        same); off deletes the cursor. Deferred firing once done.
        """
        if enabled and self.dedup is None:
            self.dedup = MessageDeduplication(self.ledger, self.config, self.name)
            d = self.dedup.start()
            for producer in list(self.producers.values()):
                self.evict_producer(producer)
            d.addErrback(self._dedup_failed)
            return d
        if not enabled:
            if self.dedup is not None:
                dedup, self.dedup = self.dedup, None
                return dedup.stop()
            if DEDUP_CURSOR in self.ledger.cursors:
                return MessageDeduplication(self.ledger, self.config, self.name).stop_existing()
        return defer.succeed(None)

    # ---------------------------------------------------------------- geo-replication
    #: Seconds before setting up replication again after it failed (a cursor not created).
    REPLICATION_RETRY_SECONDS = 10.0

    def set_replication(self, clusters):
        """
        Replicate to the clusters of ``clusters`` (the namespace's ``replication_clusters``) other
        than this one, and to no other: a replicator (replication.py) for each new remote
        cluster, whose cursor is created at the end of the topic; those of clusters no longer
        listed are stopped and their cursors deleted, also cursors left by an earlier owner.
        Deferred firing once done; until then the topic takes no producer (``wait_ready``).
        """
        if self.closed:
            return defer.succeed(None)
        local = self.config.clusterName
        wanted = replication.configured_remotes(clusters, local)
        current = set(self.replicators)
        stale = {replication.remote_of_cursor(name) for name in self.ledger.cursors
                 if replication.is_replicator_cursor(name)} - wanted - current
        if wanted == current and not stale:
            return defer.succeed(None)
        if isinstance(self._replication, defer.Deferred):
            # One change at a time: this one applies once the running one is done.
            return self._replication.addBoth(lambda _: self.set_replication(clusters))
        if self._replication is not None and self._replication.active():
            self._replication.cancel()
        d = defer.Deferred.fromCoroutine(self._change_replication(wanted, current, stale))
        self._replication = d
        d.addBoth(self._replication_changed, clusters)
        return d

    async def _change_replication(self, wanted, current, stale):
        for remote in sorted(current - wanted):
            replicator = self.replicators.pop(remote)
            await replicator.terminate()
        for remote in sorted(stale):
            self.log.info("{topic}: deleting the cursor of a replicator to {remote}, which the "
                          "namespace no longer lists", topic=self.name, remote=remote)
            await self.ledger.delete_cursor(replication.cursor_name(remote))
        for remote in sorted(wanted - current):
            cursor = await self.ledger.open_cursor(replication.cursor_name(remote), "latest")
            if self.closed:
                return
            if self.replicators is TopicBase.replicators:
                self.replicators = {}
            replicator = replication.Replicator(
                self, remote, cursor, self.service.replication_clients, self.clock,
                self.config.clusterName, self.config.replicationProducerQueueSize)
            self.replicators[remote] = replicator
            replicator.start()
        if not self.replicators:
            self.replicators = TopicBase.replicators
        replicated_subscriptions.check_controller(self)

    def _replication_changed(self, result, clusters):
        self._replication = None
        if isinstance(result, Failure):
            if self.closed:
                return None
            self.log.warn("{topic}: setting up replication to {clusters} failed ({error}); trying "
                          "again in {delay:.0f} s", topic=self.name, clusters=",".join(clusters),
                          error=result.getErrorMessage(), delay=self.REPLICATION_RETRY_SECONDS)
            self._replication = self.clock.callLater(self.REPLICATION_RETRY_SECONDS,
                                                     self._retry_replication, clusters)
        return None

    def _retry_replication(self, clusters):
        self._replication = None
        policies = self.policies
        d = self.set_replication(policies.replication_clusters if policies is not None else clusters)
        d.addErrback(lambda f: None)    # logged, and tried again, by _replication_changed

    def ready_now(self) -> bool:
        if isinstance(self._replication, defer.Deferred):
            return False
        return super().ready_now()

    def _dedup_failed(self, failure):
        # Turning deduplication off here would store the resends of messages already stored:
        # the topic refuses producers instead, and unloads so that the next use retries.
        if failure.check(BKException, MetadataUnavailableError):
            # Bookies or the metadata store out of reach (a broker cut off from the network): an
            # outage, not a bug; one line.
            self.log.warn("{topic}: recovering the deduplication state failed ({error}); the topic "
                          "is unavailable until it is loaded again", topic=self.name,
                          error=failure.getErrorMessage())
        else:
            self.log.failure("{topic}: recovering the deduplication state failed; the topic is "
                             "unavailable until it is loaded again", failure, topic=self.name)
        self.dedup_error = failure.value
        self.service.topic_failed(self, f"deduplication state not recovered: {failure.getErrorMessage()}")

    def wait_ready(self):
        """
        Deferred firing once the topic can take producers: its deduplication state recovered
        (if on). Fails with ServiceNotReady (retriable) if the state cannot be recovered.
        """
        dedup = self.dedup
        d = defer.succeed(None)
        if dedup is not None and dedup.recovering and dedup.ready is not None:
            d = defer.Deferred()
            dedup.ready.addBoth(lambda result: d.callback(None) or result)
        pending = self._replication
        if isinstance(pending, defer.Deferred):
            # The replicators' cursors must exist before the first publish, or what it stores
            # would never be replicated (they start at the end of the topic).
            waited = defer.Deferred()
            pending.addBoth(lambda result: waited.callback(None) or result)
            d.addCallback(lambda _: waited)
            d.addCallback(lambda _: self._check_replication_set_up())
        d.addCallback(lambda _: self._check_ready())
        return d

    def _check_replication_set_up(self):
        if self._replication is not None:
            # It failed and waits for a retry: a topic loading now is not served meanwhile.
            raise errors.ServiceNotReady(f"Topic {self.name}: its replication is not set up yet")

    def deduplication_status(self) -> str:
        if self.dedup_error is not None:
            return "Failed"
        if self.dedup is None:
            return "Disabled"
        return "Recovering" if self.dedup.recovering else "Enabled"

    def _check_ready(self):
        if self.dedup_error is not None:
            raise errors.ServiceNotReady(f"Topic {self.name}: deduplication state not available")
        if self.closed:
            raise errors.ServiceNotReady(f"Topic {self.name} is being unloaded")
        if self.fenced:
            raise TopicFencedError(f"Topic {self.name} is fenced after a write failure; retry")

    def _new_entries(self) -> None:
        for subscription in list(self.subscriptions.values()):
            subscription.new_entries()
        if self.replicators:
            for replicator in list(self.replicators.values()):
                replicator.new_entries()

    # ---------------------------------------------------------------- publishing
    def publish(self, message: bytes, count: int):
        """Store ``message``: Deferred firing with its Position (``publish_all``'s order)."""
        d = defer.Deferred()
        self.publish_all((message,), (count,), _DEFERREDS, (d,))
        return d

    def publish_all(self, messages, counts, publisher, ctxs) -> int:
        """Store ``messages`` (a producer's publishes of one read), in order, each with the
        message count and the ctx at the same place of ``counts`` and ``ctxs``: after the topic's
        own bookkeeping, ``publisher.adds_complete(positions, ctxs)`` for those stored together
        and ``publisher.add_failed(failure, ctx)`` for each that failed (a refusal at once):
        ``common.waiters``, with a ctx each. The managed ledger gets them in one call.

        Returns how many of ``messages`` (the first ones, at least one) it took: all, unless one
        failed at once (refused here, or by the managed ledger: ``add_entries_notify``); the
        caller then decides the fate of the others after its answer to that failure, as it
        would have one at a time (a producer the failure closed drops them; otherwise it
        publishes them again, and a fenced or closed topic refuses the first of them)."""
        if self.closed:
            refusal = errors.ServiceNotReady(f"Topic {self.name} is being unloaded")
        elif self.fenced:
            refusal = TopicFencedError(f"Topic {self.name} is fenced after a write failure")
        else:
            return self._add_all(messages, counts, publisher, ctxs)
        tell_failed(publisher, ctxs[0], Failure(refusal))
        return 1

    def _add_all(self, messages, counts, publisher, ctxs) -> int:
        """Store ``messages``; how many the managed ledger took (the first ones)."""
        before = self.pending_adds
        self.pending_adds = before + len(messages)
        if before < self.max_pending_adds <= self.pending_adds:
            self._throttle_producers()
        add_all = getattr(self.ledger, "add_entries_notify", None)
        if add_all is not None and self.counters._storage is None:
            # The managed ledger's counters record the writes (nothing per add to keep here): one
            # small _Publish is the adds' callback, each publisher's ctx theirs (Pulsar's
            # PersistentTopic.addComplete(position, publishContext)); no object per add.
            taken = add_all(messages, _Publish(self, publisher), ctxs)
        else:
            taken = 0
            notify = getattr(self.ledger, "add_entry_notify", None)
            for message, ctx in zip(messages, ctxs):
                taken += 1
                add = _TopicAdd(self, publisher, ctx, self.clock.seconds(), len(message))
                if notify is not None:
                    notify(message, add)
                else:
                    self.ledger.add_entry(message).addCallbacks(add.callback, add.errback)
                if self.closed or self.fenced:
                    break   # it failed at once: the next ones are not taken (publish_all)
        if taken < len(messages):
            self._adds_over(len(messages) - taken)
        if self.publish_limiter is not None:
            for message, count in zip(messages[:taken], counts[:taken]):
                self.publish_limiter.published(count, len(message))
        return taken

    def _add_done(self, result, started, size):
        """One callback per publish: throttling, fencing, and (on success) the storage counters."""
        result = self._add_finished(result)
        if isinstance(result, Failure):
            return result
        return self.counters.written(result, started, size)

    def _add_finished(self, result):
        """``_add_done`` but the storage counters (the managed ledger's counters record them)."""
        if isinstance(result, Failure):
            self.pending_adds -= 1
            if self._throttled and self.pending_adds <= self.max_pending_adds // 2:
                self._unthrottle_producers()
            if result.check(ManagedLedgerFencedError):
                self._ledger_fenced(self.ledger)
            elif not result.check(ManagedLedgerTerminatedError):
                self.fence(result.getErrorMessage())
            if self.fenced and not self.pending_adds:
                self._schedule_unfence()
            return result
        self._adds_over(1)
        return result

    def _adds_over(self, count: int) -> None:
        """``count`` adds are no longer pending (done, or not made after all): resume the
        producers below half the limit; a fenced topic unfences once none is left."""
        self.pending_adds -= count
        if self._throttled and self.pending_adds <= self.max_pending_adds // 2:
            self._unthrottle_producers()
        if self.fenced and not self.pending_adds:
            self._schedule_unfence()

    # ---------------------------------------------------------------- write failures
    def fence(self, reason: str) -> None:
        """
        A write failed (Pulsar's PersistentTopic.addFailed): from now on nothing is written, so
        no message can be stored after one that was not. The producers are closed (their
        publishes in flight are answered first, then CLOSE_PRODUCER; never a SEND_ERROR, which
        makes the official client drop its whole connection); they reconnect and resend every
        unacknowledged message, in order. Once the last add in flight is done the topic
        unfences: deduplication's pushed ids fall back to the persisted ones, so those resends
        are stored and not taken for duplicates.
        """
        if self.fenced or self.closed:
            return
        self.fenced = True
        self.log.warn("{topic}: write failed ({reason}); fencing the topic and closing its "
                      "{n} producers", topic=self.name, reason=reason, n=len(self.producers))
        for producer in list(self.producers.values()):
            self.evict_producer(producer)
        if not self.pending_adds:
            self._schedule_unfence()

    def _schedule_unfence(self) -> None:
        # Later in this reactor turn: the callbacks of the last add (receipts, deduplication's
        # persisted ids, the producers' closes) run first.
        if self._unfence_call is None:
            self._unfence_call = self.clock.callLater(0, self._unfence)

    def _unfence(self) -> None:
        self._unfence_call = None
        if not self.fenced or self.closed or self.pending_adds:
            return
        if self.dedup is not None:
            self.dedup.reset_pushed()
        self.fenced = False
        self.log.info("{topic}: writes drained after the failure; unfenced", topic=self.name)

    def _ledger_fenced(self, ledger) -> None:
        """The managed ledger was fenced (another broker owns it now): unload the topic here."""
        if ledger is not self.ledger or self.closed:
            return
        self.fenced = True
        self.log.warn("{topic}: managed ledger fenced by another owner; unloading the topic",
                      topic=self.name)
        self.service.topic_failed(self, "managed ledger fenced")

    def _throttle_producers(self) -> None:
        """Too many writes in flight: stop reading from every connection publishing here."""
        throttled = list(self._throttled)
        for cnx in {p.cnx for p in self.producers.values()}:
            cnx.throttle()
            throttled.append(cnx)
        self._throttled = throttled

    def _unthrottle_producers(self) -> None:
        """Half the writes in flight are done: read again from the connections throttled here."""
        throttled, self._throttled = self._throttled, ()
        for cnx in throttled:
            cnx.unthrottle()

    # ---------------------------------------------------------------- subscribing
    @defer.inlineCallbacks
    def subscribe(self, cnx, request):
        """A Consumer for the SubscribeRequest ``request`` (its subscription made if new)."""
        name = request.subscription
        subscription = self.subscriptions.get(name)
        self.check_consumer_limits(subscription)
        replicated = replicated_subscriptions.check_subscribe(self, request)
        if subscription is None:
            if request.durable:
                initial = "earliest" if request.initial_position == Sub.Earliest else "latest"
                properties = ({replicated_subscriptions.REPLICATED_PROPERTY: 1} if replicated
                              else None)
                cursor = yield self.ledger.open_cursor(name, initial, properties)
            else:
                cursor = self.ledger.new_non_durable_cursor(self._start_position(request), name=name)
            # Another SUBSCRIBE may have created it while we waited.
            subscription = self.subscriptions.get(name)
            if subscription is None:
                subscription = PersistentSubscription(self, name, cursor, self.clock, self.config,
                                                      durable=request.durable)
                self._add_subscription(name, subscription)
        if replicated:
            yield subscription.set_replicated(True)
        compaction.apply_read_compacted(self, subscription, request)
        consumer = self.make_consumer(subscription, cnx, request)
        subscription.add_consumer(consumer)
        return consumer

    def _start_position(self, request) -> Position:
        position = request.start_message_id
        if position is not None:
            if position.ledger_id >= _INT64_MAX:
                return LATEST
            if position.ledger_id < 0:
                return EARLIEST
            return position
        return EARLIEST if request.initial_position == Sub.Earliest else LATEST

    def clamp_position(self, position: Position) -> Position:
        """Positions a client may send (earliest/latest markers) made concrete."""
        if position.ledger_id >= _INT64_MAX:
            return self.ledger.last_confirmed_entry().next()
        if position.ledger_id < 0:
            return self.ledger.first_position()
        if position.entry_id < 0:
            return Position(position.ledger_id, 0)
        return position

    def delete_subscription(self, subscription):
        self.remove_subscription(subscription)
        if subscription.durable:
            return self.ledger.delete_cursor(subscription.name)
        return defer.succeed(None)

    @defer.inlineCallbacks
    def create_subscription(self, name: str, position=None, properties=None):
        """A durable subscription without consumers at ``position`` (None: the end)."""
        cursor = yield self.ledger.open_cursor(name, "latest", properties)
        if position is not None:
            yield cursor.reset_cursor(self.clamp_position(position))
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = PersistentSubscription(self, name, cursor, self.clock, self.config)
            self._add_subscription(name, subscription)
            replicated_subscriptions.check_controller(self)
        return subscription

    def set_retention(self, minutes: int, size_mb: int) -> None:
        """
        Retention of the managed ledger from now on (-1 unlimited; 0/0 deletes consumed ledgers at
        once), and a trim so a lowered retention takes effect without waiting for an ack.
        """
        config = self.ledger.config
        time_ms = minutes * 60_000 if minutes >= 0 else -1
        if (config.retention_time_ms, config.retention_size_mb) != (time_ms, size_mb):
            # The factory's config object is shared by every ledger: give this one its own.
            self.ledger.config = dataclasses.replace(config, retention_time_ms=time_ms,
                                                     retention_size_mb=size_mb)
            self.ledger.trim_consumed_ledgers().addErrback(
                lambda f: self.log.failure("{topic}: trim after a retention change", f, topic=self.name))

    def trigger_offload(self, ledger_id: int, entry_id: int) -> None:
        """Offload the sealed ledgers before ``ledger_id`` in the background (Pulsar's
        triggerOffload): OffloadAlreadyRunningError while one asked for runs,
        OffloadNotConfiguredError without a driver. ``offload_status`` tells how it ends."""
        d = self.ledger.offload_prefix(Position(ledger_id, entry_id))
        d.addErrback(lambda f: None)    # logged by the managed ledger, kept for offload_status

    def offload_status(self) -> dict:
        """Pulsar's OffloadProcessStatus of the last offload asked for (partition index not set)."""
        return self.ledger.offload_status()

    # ---------------------------------------------------------------- queries
    def last_message_id(self):
        """Deferred ``(ledger_id, entry_id, batch_index)`` of the last message (last_message.py)."""
        return last_message.last_message_id(self)

    @defer.inlineCallbacks
    def find_position_by_time(self, publish_time_ms: int):
        """
        The first position whose publish time is >= ``publish_time_ms`` (the end if none):
        a binary search reading one entry per probe (``seek_time``).
        """
        position = yield seek_time.find_position_by_time(self.ledger, publish_time_ms)
        return position

    def close(self):
        super().close()
        if self._unfence_call is not None and self._unfence_call.active():
            self._unfence_call.cancel()
        self._unfence_call = None
        replicators, self.replicators = self.replicators, TopicBase.replicators
        for replicator in replicators.values():
            replicator.close()
        if self.replicated_subscriptions is not None:
            self.replicated_subscriptions.close()
            self.replicated_subscriptions = None
        if self._replication is not None and not isinstance(self._replication, defer.Deferred):
            if self._replication.active():
                self._replication.cancel()
            self._replication = None
        self.ledger.remove_fenced_listener(self._ledger_fenced)
        return self.ledger.close()

    def storage_size(self) -> int:
        return self.ledger.total_size()

    def unreadable_entry(self, position, subscription: str) -> None:
        """A dispatcher skipped ``position`` (metadata does not parse): counted, logged once."""
        self.unreadable_entries += 1
        if self.unreadable_entries == 1:
            self.log.warn("{topic}: entry {position} has unreadable metadata; skipped and "
                          "acknowledged for {sub} (Pulsar's dispatcher does the same); later ones "
                          "are counted in the subscription stats, not logged",
                          topic=self.name, position=position, sub=subscription)

    def durable_subscriptions(self) -> list:
        return [s for s in list(self.subscriptions.values())
                if s.durable and s.cursor is not None]

    def stats(self) -> dict:
        stats = super().stats()
        stats.update({"storageSize": self.storage_size(),
                      "msgBacklog": sum(s.backlog() for s in self.subscriptions.values())})
        return stats


class _Publish:
    """The managed ledger's waiter for the adds of one ``publish_all`` (their ctxs are the
    publisher's): the topic's bookkeeping, then the publisher."""

    __slots__ = ("topic", "publisher")

    def __init__(self, topic, publisher):
        self.topic = topic
        self.publisher = publisher

    def adds_complete(self, positions, ctxs):
        try:
            self.topic._adds_over(len(positions))
        except Exception:
            failure = Failure()
            for ctx in ctxs:
                tell_failed(self.publisher, ctx, failure)
            return
        self.publisher.adds_complete(positions, ctxs)

    def add_failed(self, failure, ctx):
        try:
            result = self.topic._add_finished(failure)
        except Exception:
            result = Failure()
        self.publisher.add_failed(result, ctx)


class _TopicAdd:
    """One publish's add, as the managed ledger's waiter where ``_Publish`` cannot be (a ledger
    keeping no counters): the topic's bookkeeping (``PersistentTopic._add_done``), then the
    publisher, as two Deferred callbacks would."""

    __slots__ = ("topic", "publisher", "ctx", "started", "size")

    def __init__(self, topic, publisher, ctx, started, size):
        self.topic = topic
        self.publisher = publisher
        self.ctx = ctx
        self.started = started
        self.size = size

    def callback(self, position):
        self._then(position)

    def errback(self, failure):
        self._then(failure)

    def _then(self, result):
        try:
            result = self.topic._add_done(result, self.started, self.size)
        except Exception:
            result = Failure()
        if isinstance(result, Failure):
            tell_failed(self.publisher, self.ctx, result)
        else:
            self.publisher.adds_complete((result,), (self.ctx,))


class _Deferreds:
    """``publish``'s publisher: each ctx is the Deferred of one publish."""

    @staticmethod
    def adds_complete(positions, ds):
        for position, d in zip(positions, ds):
            d.callback(position)

    @staticmethod
    def add_failed(failure, d):
        d.errback(failure)


_DEFERREDS = _Deferreds()


class NonPersistentTopic(TopicBase):
    """A topic that keeps nothing: messages go to the consumers able to take them, or are dropped."""

    def __init__(self, service, topic_name, clock, config):
        super().__init__(service, topic_name, clock, config)
        self._ids = itertools.count()

    def publish(self, message: bytes, count: int):
        if self.closed:
            return defer.fail(errors.ServiceNotReady(f"Topic {self.name} is being unloaded"))
        if self.publish_limiter is not None:
            self.publish_limiter.published(count, len(message))
        position = Position(0, next(self._ids))
        for subscription in list(self.subscriptions.values()):
            subscription.deliver(position, message, count)
        if self.replicators:
            for replicator in list(self.replicators.values()):
                replicator.publish(message)
        return defer.succeed(position)

    def set_replication(self, clusters):
        """Replicate to the clusters of ``clusters`` other than this one (replication.py's
        NonPersistentReplicator: nothing to set up but the producers)."""
        if self.closed:
            return defer.succeed(None)
        local = self.config.clusterName
        wanted = replication.configured_remotes(clusters, local)
        current = set(self.replicators)
        if wanted == current:
            return defer.succeed(None)
        replicators = dict(self.replicators)
        for remote in sorted(current - wanted):
            replicators.pop(remote).terminate()
        for remote in sorted(wanted - current):
            replicator = replicators[remote] = replication.NonPersistentReplicator(
                self, remote, self.service.replication_clients, self.clock, local,
                self.config.replicationProducerQueueSize)
            replicator.start()
        self.replicators = replicators or TopicBase.replicators
        return defer.succeed(None)

    def close(self):
        replicators, self.replicators = self.replicators, TopicBase.replicators
        for replicator in replicators.values():
            replicator.close()
        return super().close()

    def subscribe(self, cnx, request):
        name = request.subscription
        replicated_subscriptions.refuse_reserved(self, name)
        subscription = self.subscriptions.get(name)
        try:
            self.check_consumer_limits(subscription)
            if subscription is None:
                subscription = NonPersistentSubscription(self, name, self.clock, self.config)
                self._add_subscription(name, subscription)
            consumer = self.make_consumer(subscription, cnx, request)
            subscription.add_consumer(consumer)
        except errors.PulsarError as e:
            return defer.fail(e)
        return defer.succeed(consumer)

    def delete_subscription(self, subscription):
        self.remove_subscription(subscription)
        return defer.succeed(None)

    def clamp_position(self, position):
        return position

    def last_message_id(self):
        return defer.succeed((0, -1, -1))
