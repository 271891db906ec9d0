"""
Namespace policies, enforced on the broker's topics (Pulsar's ``Policies`` as the admin API stores
them at ``/admin/policies/<tenant>/<namespace>``).

``NamespacePolicies`` (``resources/policies.py``) is the effective value object: the stored JSON
with every unset field resolved to the broker's configuration, as Pulsar resolves them.
``PolicyService`` reads a topic's namespace policies when the topic loads (BrokerService waits for
it, so a topic never serves a client under the broker-wide defaults by mistake), watches the
metadata store and pushes every change to the loaded topics of that namespace at once, and runs
the periodic checks:

=============================  ================================================  ==========================
policy (Policies field)        effect                                            when
=============================  ================================================  ==========================
retention_policies             the topic's managed-ledger retention + a trim     at load and on change
offload_policies,              the topic's tiered storage: offloader, thresholds at load and on change
offload_threshold,             deletion lag, read priority (mledger/offloads.py)
offload_deletion_lag_ms
message_ttl_in_seconds         unacked messages older than it acknowledged       every
                                                                                 messageExpiryCheckInterval
                                                                                 InMinutes, and on change
backlog_quota_map              backlog_quota.py                                  every backlogQuotaCheck
                                                                                 IntervalInSeconds, on
                                                                                 change, on new producers
max_producers_per_topic,       limits checked at each new producer / consumer    at load and on change
max_consumers_per_topic,
max_consumers_per_subscription
deduplicationEnabled           ``topic.set_deduplication`` when topics have it   at load and on change
replication_clusters           ``topic.set_replication``: replicators to the     at load and on change
                               other clusters (replication.py; persistent
                               topics)
publishMaxMessageRate,         ratelimit.py: publish and dispatch rates          at load and on change
topicDispatchRate,             (this cluster's entry of each map)
subscriptionDispatchRate
inactive_topic_policies        topics without producers/consumers deleted        every brokerDeleteInactive
                                                                                 TopicsFrequencySeconds
subscription_expiration_       durable subscriptions without consumers deleted   every subscriptionExpiry
time_minutes                                                                     CheckIntervalInMinutes
=============================  ================================================  ==========================

Inactivity (of topics and subscriptions) is observed by the periodic checks, not timed from the
exact moment the last client left: an interval of activity between two checks counts (the topic's
in/out counters moved), and the duration is measured from the first check that saw it inactive,
so a deletion may come up to one check interval later than Pulsar would make it.
"""

import dataclasses

from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.broker import ratelimit, ttl
from pulsar_twisted.broker.backlog_quota import BacklogQuotaEnforcer
from pulsar_twisted.common import errors
from pulsar_twisted.config import ConfigError
from pulsar_twisted.resources.base import CorruptMetadataError
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.policies import (
    DELETE_WHEN_NO_SUBSCRIPTIONS, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP, INACTIVE_TOPIC_MODES,
    RETENTION_POLICIES, NamespacePolicies)
from pulsar_twisted.resources.topic_policies import TopicPoliciesResources

log = Logger()


def check_config(config) -> None:
    """Refuse configuration values the policy checks cannot use (ConfigError names the key)."""
    if config.backlogQuotaDefaultRetentionPolicy not in RETENTION_POLICIES:
        raise ConfigError(f"backlogQuotaDefaultRetentionPolicy must be one of "
                          f"{', '.join(RETENTION_POLICIES)}")
    if config.brokerDeleteInactiveTopicsMode not in INACTIVE_TOPIC_MODES:
        raise ConfigError(f"brokerDeleteInactiveTopicsMode must be one of {', '.join(INACTIVE_TOPIC_MODES)}")
    for key in ("messageExpiryCheckIntervalInMinutes", "backlogQuotaCheckIntervalInSeconds",
                "brokerDeleteInactiveTopicsFrequencySeconds", "subscriptionExpiryCheckIntervalInMinutes"):
        if getattr(config, key) <= 0:
            raise ConfigError(f"{key} must be > 0")


# ------------------------------------------------------------------------------------ enforcement
def apply_to_topic(topic, policies: NamespacePolicies) -> None:
    """Make ``topic`` obey ``policies`` now (limits, retention, deduplication)."""
    topic.policies = policies
    topic.set_limits(policies.max_producers_per_topic, policies.max_consumers_per_topic,
                     policies.max_consumers_per_subscription)
    if hasattr(topic, "set_retention"):
        topic.set_retention(policies.retention_time_minutes, policies.retention_size_mb)
        set_offload(topic.ledger, policies.offload)
    if hasattr(topic, "set_deduplication"):
        d = topic.set_deduplication(policies.deduplication_enabled)
        if isinstance(d, defer.Deferred):
            d.addErrback(lambda f: log.failure("{topic}: switching deduplication", f, topic=topic.name))
    if hasattr(topic, "set_replication"):
        # Failures are logged and retried by the topic itself.
        topic.set_replication(policies.replication_clusters)
    ratelimit.apply_policies(topic, policies)


def ledger_config_of(policies: NamespacePolicies, default_config, offloaders=None):
    """``PolicyService.ledger_config`` of a namespace with ``policies``: None for
    ``default_config`` itself, else a copy with the namespace's retention and tiered storage
    (``offloaders``: the broker's OffloaderRegistry, None without one)."""
    minutes, size_mb = policies.retention_time_minutes, policies.retention_size_mb
    time_ms = minutes * 60_000 if minutes >= 0 else -1
    return _changed(default_config, {"retention_time_ms": time_ms, "retention_size_mb": size_mb,
                                     **offload_settings(policies.offload, offloaders)})


def set_offload(ledger, offload) -> None:
    """A topic's managed ledger follows its namespace's tiered storage (OffloadPolicies) from now on."""
    config = _changed(ledger.config, offload_settings(offload, ledger.factory.offloaders))
    if config is not None:
        # The factory's config object is shared by every ledger: this one gets its own.
        ledger.config = config


def _changed(config, changes: dict):
    """A copy of ManagedLedgerConfig ``config`` with ``changes``; None when it has them already."""
    if all(getattr(config, key) == value for key, value in changes.items()):
        return None
    return dataclasses.replace(config, **changes)


#: Offload settings already found unusable (each logged once, not once per topic).
_unusable_offload = set()


def offload_settings(offload, offloaders) -> dict:
    """The ManagedLedgerConfig fields of a namespace's effective OffloadPolicies: its offloader (None
    without a driver, or when its settings are unusable: an error line says why, once) and the
    thresholds, deletion lag and read priority."""
    offloader = None
    if offload.driver:
        try:
            if offloaders is None:
                raise ValueError("this broker has no offloaders")
            offloader = offloaders.for_policies(offload)
        except Exception as e:      # ValueError; a store that cannot be made here (a directory)
            if str(e) not in _unusable_offload:
                _unusable_offload.add(str(e))
                log.error("tiered storage: {err}; topics using these offload policies are not "
                          "offloaded", err=e)
    return {"offloader": offloader,
            "offload_threshold_bytes": offload.threshold_bytes,
            "offload_threshold_seconds": offload.threshold_seconds,
            "offload_deletion_lag_ms": offload.deletion_lag_ms,
            "offload_read_tiered_first": offload.read_priority != "bookkeeper-first"}


class PolicyService(service.Service):
    """
    ``PolicyService(broker, store, config, clock)``: namespace policies of ``broker``'s topics.
    ``start()`` subscribes to the metadata store; ``startService()`` starts the periodic checks.
    Every check method returns a Deferred and logs (never raises) the failure of one topic.
    """

    def __init__(self, broker, store, config, clock):
        check_config(config)
        self.broker = broker
        self.store = store
        self.namespaces = NamespaceResources(store)
        self.topic_policies = TopicPoliciesResources(store)
        self.config = config
        self.clock = clock
        self.defaults = NamespacePolicies.defaults(config)
        self.quotas = BacklogQuotaEnforcer(clock)
        self._cache = {}            # "tenant/ns" -> NamespacePolicies
        #: "tenant/ns" -> {"domain://tenant/ns/topic": its topic policies document}, read with
        #: the namespace's policies and kept current by the store's notifications.
        self._topic_docs = {}
        self._loading = {}          # "tenant/ns" -> topics changed while its documents are read
        #: Bumped whenever policies change here: a topic still loading (not yet reachable by a
        #: refresh) applies them again before it serves (topic_loader).
        self.generation = 0
        self._listening = False
        self._loops = []
        self._topic_idle = {}       # topic name -> (topic, idle since, counter totals)
        self._sub_idle = {}         # (topic name, subscription name) -> (subscription, idle since)

    # ---------------------------------------------------------------- policies
    def start(self) -> None:
        if not self._listening:
            self._listening = True
            self.namespaces.watch(self._on_change)
            self.topic_policies.watch(self._on_topic_change)

    def _on_change(self, namespace: str, kind: str) -> None:
        if kind == "deleted":
            self._cache.pop(namespace, None)
            self._topic_docs.pop(namespace, None)
            return
        self.refresh(namespace).addErrback(
            lambda f: log.failure("applying policies of {ns}", f, ns=namespace))

    async def _read(self, namespace: str) -> NamespacePolicies:
        try:
            data = await self.namespaces.get(namespace)
        except CorruptMetadataError:
            log.warn("policies of {ns} are not JSON; broker defaults apply", ns=namespace)
            return self.defaults
        if data is None:
            return self.defaults
        return NamespacePolicies.from_json(data, self.config, where=namespace)

    def policies_of(self, namespace) -> defer.Deferred:
        """Deferred NamespacePolicies of ``namespace`` (a NamespaceName or "tenant/ns")."""
        key = str(namespace)
        cached = self._cache.get(key)
        if cached is not None:
            return defer.succeed(cached)

        async def read():
            policies = await self._read(key)
            await self._read_topic_docs(key)
            self._cache.setdefault(key, policies)
            return self._cache[key]
        return defer.Deferred.fromCoroutine(read())

    # ---------------------------------------------------------------- topic policies
    async def _read_topic_docs(self, namespace: str) -> None:
        """Read the topic policies of ``namespace`` once (then notifications keep them)."""
        if namespace in self._topic_docs:
            return
        if not self.config.topicLevelPoliciesEnabled:
            self._topic_docs[namespace] = {}
            return
        changed = self._loading.setdefault(namespace, set())
        try:
            documents = await self.topic_policies.of_namespace(namespace)
            while changed:      # changed while being read (also while read again): read again
                key = changed.pop()
                document = await self.topic_policies.read(parse_topic(key))
                documents.pop(key, None)
                if document:
                    documents[key] = document
        finally:
            if self._loading.get(namespace) is changed:
                del self._loading[namespace]
        if namespace not in self._topic_docs:   # (else another read finished first)
            self._topic_docs[namespace] = documents
            self.generation += 1

    def _on_topic_change(self, namespace: str, key: str, kind: str) -> None:
        loading = self._loading.get(namespace)
        if loading is not None:
            loading.add(key)
        if namespace in self._topic_docs:
            self.refresh_topic(namespace, key).addErrback(
                lambda f: log.failure("applying topic policies of {topic}", f, topic=key))

    def refresh_topic(self, namespace: str, key: str) -> defer.Deferred:
        """Re-read the policies of topic ``key`` and apply them to its loaded topics (its
        partitions) at once."""
        async def run():
            document = await self.topic_policies.read(parse_topic(key))
            documents = self._topic_docs.get(namespace)
            if documents is None:
                return
            if document:
                documents[key] = document
            else:
                documents.pop(key, None)
            self.generation += 1
            base = self._cache.get(namespace)
            if base is None:
                return
            for topic in self._topics_of(namespace):
                if str(topic.topic_name.partitioned_topic_name) == key:
                    apply_to_topic(topic, self.effective(topic.topic_name, base))
                    await self._guard(self._check_topic_now, topic)
        return defer.Deferred.fromCoroutine(run())

    def effective(self, name, base: NamespacePolicies) -> NamespacePolicies:
        """The policies of topic ``name``: its own over ``base`` (its namespace's)."""
        documents = self._topic_docs.get(str(name.namespace_name))
        if not documents or not self.config.topicLevelPoliciesEnabled:
            return base
        key = str(name.partitioned_topic_name)
        document = documents.get(key)
        if not document:
            return base
        return NamespacePolicies.from_json(document, self.config, where=key, base=base)

    def effective_for(self, name) -> defer.Deferred:
        """Deferred policies in force for topic ``name`` (topic over namespace over broker)."""
        return self.policies_of(name.namespace_name).addCallback(
            lambda base: self.effective(name, base))

    def cached(self, namespace):
        """The NamespacePolicies of ``namespace`` if known already, else None (``policies_of``
        reads them): the load of a new topic then applies them without a Deferred (issue 14)."""
        return self._cache.get(str(namespace))

    def ledger_config(self, name, default_config) -> defer.Deferred:
        """The managed-ledger config a topic of ``name``'s namespace opens with: the namespace's
        retention from the start (as Pulsar builds it from the policies), so that opening the
        ledger never trims what the namespace retains."""
        return self.effective_for(name).addCallback(
            ledger_config_of, default_config, self.broker.ml_factory.offloaders)

    def apply_cached(self, topic) -> bool:
        """``topic_loaded`` without a Deferred when the namespace's policies are known already
        (issue 14: every topic load applies them): True once applied, False (nothing done) when
        they must be read (``topic_loaded`` then)."""
        policies = self.cached(topic.topic_name.namespace_name)
        if policies is None:
            return False
        apply_to_topic(topic, self.effective(topic.topic_name, policies))
        return True

    def topic_loaded(self, topic) -> defer.Deferred:
        """Apply the namespace's policies to a topic being loaded (before it serves clients)."""
        d = self.effective_for(topic.topic_name)
        d.addCallback(lambda policies: apply_to_topic(topic, policies))
        return d

    def refresh(self, namespace) -> defer.Deferred:
        """Re-read the namespace's policies and apply them to its loaded topics at once, running
        the TTL and backlog quota checks of those topics right away."""
        key = str(namespace)

        async def run():
            policies = await self._read(key)
            await self._read_topic_docs(key)
            self._cache[key] = policies
            self.generation += 1
            for topic in self._topics_of(key):
                apply_to_topic(topic, self.effective(topic.topic_name, policies))
            for topic in self._topics_of(key):
                await self._guard(self._check_topic_now, topic)
            return policies
        return defer.Deferred.fromCoroutine(run())

    async def _check_topic_now(self, topic) -> None:
        policies = topic.policies
        if policies.message_ttl_seconds > 0:
            await ttl.expire_topic(topic, policies.message_ttl_seconds, self._now_ms())
        await self.quotas.enforce(topic, policies.backlog_quotas)

    def _topics_of(self, namespace: str) -> list:
        return [t for t in list(self.broker.topics.values())
                if str(t.topic_name.namespace_name) == namespace and not t.closed]

    def _policies(self, topic) -> NamespacePolicies:
        return getattr(topic, "policies", None) or self.defaults

    def check_new_producer(self, topic) -> None:
        """Raise the ServerError Pulsar answers when a producer may not be added (quota)."""
        self.quotas.check_new_producer(topic, self._policies(topic).backlog_quotas)

    def topic_removed(self, topic) -> None:
        """Forget what the checks kept about a deleted or unloaded topic."""
        self.quotas.forget(topic)
        entry = self._topic_idle.get(topic.name)
        if entry is not None and entry[0] is topic:
            del self._topic_idle[topic.name]
        for key in [k for k, v in self._sub_idle.items() if v[0].topic is topic]:
            del self._sub_idle[key]

    # ---------------------------------------------------------------- periodic checks
    def startService(self):
        super().startService()
        for seconds, check in (
                (self.config.messageExpiryCheckIntervalInMinutes * 60, self.check_message_expiry),
                (self.config.brokerDeleteInactiveTopicsFrequencySeconds, self.check_inactive_topics),
                (self.config.subscriptionExpiryCheckIntervalInMinutes * 60, self.check_subscription_expiry)):
            self._start_loop(seconds, check)
        if self.config.backlogQuotaCheckEnabled:
            self._start_loop(self.config.backlogQuotaCheckIntervalInSeconds, self.check_backlog_quotas)

    def _start_loop(self, seconds, check):
        loop = task.LoopingCall(check)
        loop.clock = self.clock
        loop.start(seconds, now=False).addErrback(
            lambda f: log.failure("policy check {check} stopped", f, check=check.__name__))
        self._loops.append(loop)

    def stopService(self):
        super().stopService()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    async def _guard(self, call, topic, *args):
        try:
            return await call(topic, *args)
        except errors.PulsarError as e:
            # A client came back meanwhile (topic or subscription busy again): not a fault.
            log.info("policy check of {topic} skipped: {reason}", topic=topic.name, reason=e)
            return None
        except Exception:
            log.failure("policy check of {topic} failed", topic=topic.name)
            return None

    def _each_topic(self, call) -> defer.Deferred:
        async def run():
            for topic in list(self.broker.topics.values()):
                if not topic.closed:
                    await self._guard(call, topic)
        return defer.Deferred.fromCoroutine(run())

    def check_message_expiry(self) -> defer.Deferred:
        """Expire the messages older than each topic's TTL on all its subscriptions."""
        async def expire(topic):
            seconds = self._policies(topic).message_ttl_seconds
            if seconds > 0:
                await ttl.expire_topic(topic, seconds, self._now_ms())
        return self._each_topic(expire)

    def check_backlog_quotas(self) -> defer.Deferred:
        async def enforce(topic):
            await self.quotas.enforce(topic, self._policies(topic).backlog_quotas)
        return self._each_topic(enforce)

    def check_inactive_topics(self) -> defer.Deferred:
        """Delete the topics inactive for longer than their namespace allows."""
        now = self.clock.seconds()

        async def check(topic):
            inactive = self._policies(topic).inactive_topic
            if topic.topic_name.partition_index >= 0:
                # A partition is deleted with its partitioned topic (through the admin API):
                # deleting one alone would break the topic where auto-creation is off.
                return
            totals = topic.counters.totals()
            entry = self._topic_idle.get(topic.name)
            active = (topic.producers or any(s.consumers for s in list(topic.subscriptions.values()))
                      or entry is None or entry[0] is not topic or entry[2] != totals)
            if active:
                self._topic_idle[topic.name] = (topic, now, totals)
                return
            if not inactive.delete_while_inactive or now - entry[1] < inactive.max_inactive_seconds:
                return
            durable = [s for s in topic.subscriptions.values() if getattr(s, "durable", False)]
            if inactive.mode == DELETE_WHEN_NO_SUBSCRIPTIONS and durable:
                return
            if inactive.mode == DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP and any(s.backlog() for s in durable):
                return
            if any(r.backlog() for r in list(topic.replicators.values())):
                # Not yet copied to every remote cluster (Pulsar's GC stops at a replicator
                # with a backlog): deleting it would lose those messages there.
                return
            log.info("Deleting topic {topic}: inactive for {s} s ({mode})", topic=topic.name,
                     s=int(now - entry[1]), mode=inactive.mode)
            await self.broker.delete_topic(topic.name, force=False)
            await self.topic_policies.delete(topic.topic_name)     # its policies go with it
        return self._each_topic(check)

    def check_subscription_expiry(self) -> defer.Deferred:
        """Delete durable subscriptions that have had no consumer for too long."""
        now = self.clock.seconds()

        async def check(topic):
            minutes = self._policies(topic).subscription_expiration_minutes
            for subscription in list(topic.subscriptions.values()):
                if not getattr(subscription, "durable", False):
                    continue
                key = (topic.name, subscription.name)
                entry = self._sub_idle.get(key)
                if subscription.consumers or entry is None or entry[0] is not subscription:
                    self._sub_idle[key] = (subscription, now)
                    continue
                if minutes > 0 and now - entry[1] >= minutes * 60:
                    log.info("Deleting subscription {sub}: no consumer for {m} minutes",
                             sub=subscription.describe(), m=minutes)
                    del self._sub_idle[key]
                    await self.broker.delete_subscription(topic, subscription.name, force=False)
        return self._each_topic(check)
