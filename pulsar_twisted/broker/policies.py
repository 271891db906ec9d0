"""
Namespace policies, enforced on the broker's topics (Pulsar's ``Policies`` as the admin API stores
them at ``/admin/policies/<tenant>/<namespace>``).

``NamespacePolicies`` is the effective value object: the stored JSON with every unset field
resolved to the broker's configuration, as Pulsar resolves them. ``PolicyService`` reads a topic's
namespace policies when the topic loads (BrokerService waits for it, so a topic never serves a
client under the broker-wide defaults by mistake), watches the metadata store and pushes every
change to the loaded topics of that namespace at once, and runs the periodic checks:

=============================  ================================================  ==========================
policy (Policies field)        effect                                            when
=============================  ================================================  ==========================
retention_policies             the topic's managed-ledger retention + a trim     at load and on change
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

import json
from dataclasses import dataclass, field

from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.broker import backlog_quota, ratelimit, ttl
from pulsar_twisted.broker.backlog_quota import BacklogQuota, BacklogQuotaEnforcer
from pulsar_twisted.broker.ratelimit import UNLIMITED, RateLimit
from pulsar_twisted.common import errors
from pulsar_twisted.config import ConfigError
from pulsar_twisted.metadata.layout import POLICIES_ROOT


DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
INACTIVE_TOPIC_MODES = (DELETE_WHEN_NO_SUBSCRIPTIONS, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP)

log = Logger()


class PolicyValueError(ValueError):
    """A stored policy value that cannot be used (the broker default is used instead)."""


def _int(data: dict, key: str, default: int, minimum: int = None) -> int:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise PolicyValueError(f"{key} must be an integer >= {minimum}, not {value!r}")
    return value


def _choice(data: dict, key: str, default: str, choices) -> str:
    value = data.get(key)
    if value is None:
        return default
    if value not in choices:
        raise PolicyValueError(f"{key} must be one of {', '.join(choices)}, not {value!r}")
    return value


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """Pulsar's InactiveTopicPolicies (deleteWhileInactive, maxInactiveDurationSeconds, mode)."""

    delete_while_inactive: bool = False
    max_inactive_seconds: int = 60
    mode: str = DELETE_WHEN_NO_SUBSCRIPTIONS


@dataclass(frozen=True)
class NamespacePolicies:
    """
    The policies in force for the topics of one namespace, every field resolved (stored value, else
    the broker configuration). Retention: minutes / MB, -1 unlimited. Limits: 0 none. TTL and
    subscription expiration: 0 never. ``backlog_quotas``: quota type -> BacklogQuota.
    """

    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    message_ttl_seconds: int = 0
    backlog_quotas: dict = field(default_factory=dict)
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    deduplication_enabled: bool = False
    subscription_expiration_minutes: int = 0
    inactive_topic: InactiveTopicPolicies = InactiveTopicPolicies()
    #: Rates (ratelimit.py): this cluster's publishRate, dispatchRate, subscriptionDispatchRate.
    publish_rate: RateLimit = UNLIMITED
    topic_dispatch_rate: RateLimit = UNLIMITED
    subscription_dispatch_rate: RateLimit = UNLIMITED
    cluster: str = ""

    @classmethod
    def defaults(cls, config) -> "NamespacePolicies":
        """What a namespace without stored policies gets: the broker configuration."""
        quotas = {}
        policy = config.backlogQuotaDefaultRetentionPolicy
        if config.backlogQuotaDefaultLimitBytes >= 0:
            quotas[backlog_quota.DESTINATION_STORAGE] = BacklogQuota(
                limit_size=config.backlogQuotaDefaultLimitBytes, policy=policy)
        if config.backlogQuotaDefaultLimitSecond >= 0:
            quotas[backlog_quota.MESSAGE_AGE] = BacklogQuota(
                limit_time=config.backlogQuotaDefaultLimitSecond, policy=policy)
        return cls(
            retention_time_minutes=config.defaultRetentionTimeInMinutes,
            retention_size_mb=config.defaultRetentionSizeInMB,
            message_ttl_seconds=config.ttlDurationDefaultInSeconds,
            backlog_quotas=quotas,
            max_producers_per_topic=config.maxProducersPerTopic,
            max_consumers_per_topic=config.maxConsumersPerTopic,
            max_consumers_per_subscription=config.maxConsumersPerSubscription,
            deduplication_enabled=config.brokerDeduplicationEnabled,
            subscription_expiration_minutes=config.subscriptionExpirationTimeMinutes,
            inactive_topic=InactiveTopicPolicies(
                config.brokerDeleteInactiveTopicsEnabled,
                (config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
                 or config.brokerDeleteInactiveTopicsFrequencySeconds),
                config.brokerDeleteInactiveTopicsMode),
            cluster=config.clusterName, **ratelimit.config_rates(config))

    @classmethod
    def from_json(cls, data, config, where: str = "") -> "NamespacePolicies":
        """
        Resolve stored Policies JSON (a dict). A field whose value cannot be used is logged and
        left at the broker's default, so that one bad field does not disable the others.
        """
        base = cls.defaults(config)
        if not isinstance(data, dict):
            log.warn("policies {where}: not a JSON object; broker defaults apply", where=where)
            return base
        values = {}
        for name, parse in _FIELDS:
            try:
                parsed = parse(data, base)
            except (PolicyValueError, TypeError, AttributeError) as e:
                log.warn("policies {where}: {field}: {error}; broker default applies",
                         where=where, field=name, error=e)
                continue
            values.update(parsed)
        return cls(**{**base.__dict__, **values})


def _retention(data, base):
    retention = data.get("retention_policies")
    if retention is None:
        return {}
    return {"retention_time_minutes": _int(retention, "retentionTimeInMinutes", base.retention_time_minutes, -1),
            "retention_size_mb": _int(retention, "retentionSizeInMB", base.retention_size_mb, -1)}


def _backlog_quotas(data, base):
    stored = data.get("backlog_quota_map")
    if not stored:
        return {}
    quotas = dict(base.backlog_quotas)
    for kind, value in stored.items():
        if kind not in backlog_quota.QUOTA_TYPES:
            raise PolicyValueError(f"unknown backlog quota type {kind!r}")
        # "limit" is the deprecated name of limitSize.
        size = _int(value, "limitSize", _int(value, "limit", -1, -1), -1)
        quotas[kind] = BacklogQuota(
            limit_size=size if kind == backlog_quota.DESTINATION_STORAGE else -1,
            limit_time=_int(value, "limitTime", -1, -1) if kind == backlog_quota.MESSAGE_AGE else -1,
            policy=_choice(value, "policy", backlog_quota.PRODUCER_REQUEST_HOLD,
                           backlog_quota.RETENTION_POLICIES))
    return {"backlog_quotas": quotas}


def _inactive_topic(data, base):
    stored = data.get("inactive_topic_policies")
    if stored is None:
        return {}
    default = base.inactive_topic
    enabled = stored.get("deleteWhileInactive", default.delete_while_inactive)
    if not isinstance(enabled, bool):
        raise PolicyValueError(f"deleteWhileInactive must be true or false, not {enabled!r}")
    return {"inactive_topic": InactiveTopicPolicies(
        enabled, _int(stored, "maxInactiveDurationSeconds", default.max_inactive_seconds, 0),
        _choice(stored, "inactiveTopicDeleteMode", default.mode, INACTIVE_TOPIC_MODES))}


def _dedup(data, base):
    value = data.get("deduplicationEnabled")
    if value is None:
        return {}
    if not isinstance(value, bool):
        raise PolicyValueError(f"must be true or false, not {value!r}")
    return {"deduplication_enabled": value}


def _simple(json_key, attribute, minimum=0):
    def parse(data, base):
        return {attribute: _int(data, json_key, getattr(base, attribute), minimum)}
    return parse


def _rate(json_key):
    def parse(data, base):
        try:
            return ratelimit.policy_rate(data, json_key, base.cluster)
        except ratelimit.RateValueError as e:
            raise PolicyValueError(str(e)) from None
    return parse


_FIELDS = [
    ("retention_policies", _retention),
    ("message_ttl_in_seconds", _simple("message_ttl_in_seconds", "message_ttl_seconds")),
    ("backlog_quota_map", _backlog_quotas),
    ("max_producers_per_topic", _simple("max_producers_per_topic", "max_producers_per_topic")),
    ("max_consumers_per_topic", _simple("max_consumers_per_topic", "max_consumers_per_topic")),
    ("max_consumers_per_subscription", _simple("max_consumers_per_subscription",
                                               "max_consumers_per_subscription")),
    ("deduplicationEnabled", _dedup),
    ("subscription_expiration_time_minutes", _simple("subscription_expiration_time_minutes",
                                                     "subscription_expiration_minutes")),
    ("inactive_topic_policies", _inactive_topic),
    ("publishMaxMessageRate", _rate("publishMaxMessageRate")),
    ("topicDispatchRate", _rate("topicDispatchRate")),
    ("subscriptionDispatchRate", _rate("subscriptionDispatchRate")),
]


def check_config(config) -> None:
    """Refuse configuration values the policy checks cannot use (ConfigError names the key)."""
    if config.backlogQuotaDefaultRetentionPolicy not in backlog_quota.RETENTION_POLICIES:
        raise ConfigError(f"backlogQuotaDefaultRetentionPolicy must be one of "
                          f"{', '.join(backlog_quota.RETENTION_POLICIES)}")
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
    if hasattr(topic, "set_deduplication"):
        d = topic.set_deduplication(policies.deduplication_enabled)
        if isinstance(d, defer.Deferred):
            d.addErrback(lambda f: log.failure("{topic}: switching deduplication", f, topic=topic.name))
    ratelimit.apply_policies(topic, policies)


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
        self.config = config
        self.clock = clock
        self.defaults = NamespacePolicies.defaults(config)
        self.quotas = BacklogQuotaEnforcer(clock)
        self._cache = {}            # "tenant/ns" -> NamespacePolicies
        self._listening = False
        self._loops = []
        self._topic_idle = {}       # topic name -> (topic, idle since, counter totals)
        self._sub_idle = {}         # (topic name, subscription name) -> (subscription, idle since)

    # ---------------------------------------------------------------- policies
    def start(self) -> None:
        if not self._listening:
            self._listening = True
            self.store.register_listener(self._on_notification)

    def _on_notification(self, notification) -> None:
        path = notification.path
        if not path.startswith(POLICIES_ROOT + "/"):
            return
        parts = path[len(POLICIES_ROOT) + 1:].split("/")
        if len(parts) != 2 or notification.kind not in ("created", "modified", "deleted"):
            return
        namespace = "/".join(parts)
        if notification.kind == "deleted":
            self._cache.pop(namespace, None)
            return
        self.refresh(namespace).addErrback(
            lambda f: log.failure("applying policies of {ns}", f, ns=namespace))

    async def _read(self, namespace: str) -> NamespacePolicies:
        node = await self.store.get(f"{POLICIES_ROOT}/{namespace}")
        if node is None:
            return self.defaults
        try:
            data = json.loads(node[0] or b"{}")
        except ValueError:
            log.warn("policies of {ns} are not JSON; broker defaults apply", ns=namespace)
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
            self._cache.setdefault(key, policies)
            return self._cache[key]
        return defer.Deferred.fromCoroutine(read())

    def topic_loaded(self, topic) -> defer.Deferred:
        """Apply the namespace's policies to a topic being loaded (before it serves clients)."""
        d = self.policies_of(topic.topic_name.namespace_name)
        d.addCallback(lambda policies: apply_to_topic(topic, policies))
        return d

    def refresh(self, namespace) -> defer.Deferred:
        """Re-read the namespace's policies and apply them to its loaded topics at once, running
        the TTL and backlog quota checks of those topics right away."""
        key = str(namespace)

        async def run():
            policies = await self._read(key)
            self._cache[key] = policies
            for topic in self._topics_of(key):
                apply_to_topic(topic, policies)
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
            log.info("Deleting topic {topic}: inactive for {s} s ({mode})", topic=topic.name,
                     s=int(now - entry[1]), mode=inactive.mode)
            await self.broker.delete_topic(topic.name, force=False)
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
