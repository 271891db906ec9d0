"""
Topic-level policies of the admin API (Pulsar's PIP-39, ``PersistentTopicsBase``'s
``internalGet/Set/Remove*`` behind ``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/<policy>``).

The values live in the topic's own document (``resources/topic_policies.py``), under the field
names of the namespace Policies document; the broker watches it and applies changes to the loaded
topics. This module only checks and writes, with Pulsar's answers:

* every call first passes Pulsar's ``preValidation``: 405 when ``topicLevelPoliciesEnabled`` is
  off, 412 for a partition's name (a partitioned topic's policies are set on its own name), 404
  "Topic <name> not found" for a topic that does not exist, 307 to the owner broker when another
  broker serves the topic (for a partitioned topic: its partition 0);
* ``isGlobal=true`` (Pulsar's geo-replicated topic policies) is refused with 412: this broker keeps
  topic policies in its own cluster's metadata, and writing them there while the client asked for
  every cluster would be silently wrong;
* a GET of an unset policy answers 204 (Pulsar resumes with null); ``applied=true`` answers what is
  in force, each level's stored JSON as Pulsar answers it: the topic's value, else the namespace's,
  else the broker configuration's (``internalGet*(applied)``); for ``offloadPolicies`` the
  field-by-field merge of the three (Pulsar's mergeConfiguration), as the PolicyService resolves
  it (``effective_for``). ``publishRate`` and ``maxConsumersPerSubscription`` have no ``applied``
  in Pulsar and ignore it here too;
* values are checked by the namespace policies' checks (``NAMESPACE_POLICIES``: same rules, 400
  for a wrong type, 412 out of range) with Pulsar's topic-level texts where it has its own.
"""

from dataclasses import dataclass

from pulsar_twisted.broker.admin.base import AdminArea
from pulsar_twisted.broker.admin.errors import (
    AdminError, BadRequest, NotFound, PreconditionFailed)
from pulsar_twisted.common.naming import TopicName
from pulsar_twisted.resources.checks import check_int, check_string_list
from pulsar_twisted.resources.policies import (
    DESTINATION_STORAGE, NAMESPACE_POLICIES, OFFLOAD_POLICIES, QUOTA_TYPES, broker_offload_fields,
    check_backlog_quota, check_offload_policies)

BACKLOG_QUOTA_MAP = "backlog_quota_map"
RETENTION = "retention_policies"


class TopicPoliciesDisabled(AdminError):
    """Pulsar's answer while ``topicLevelPoliciesEnabled`` is false."""

    status = 405


class Forbidden(AdminError):
    """Pulsar's 403 of a replication cluster that does not exist or the tenant may not use."""

    status = 403


def _negative_message(message: str):
    """A non-negative integer check with Pulsar's topic-level 412 text."""
    def check(value, what):
        value = check_int(value, what)
        if value < 0:
            raise PreconditionFailed(message)
        return value
    return check


def _check_replication(value, what):
    # Pulsar's internalSetReplicationClusters: the existence of each cluster is checked later.
    if value is None or value == []:
        raise PreconditionFailed("ClusterIds should not be null or empty")
    clusters = check_string_list(value, what)
    if "global" in clusters:
        raise PreconditionFailed("Cannot specify global in the list of replication clusters")
    return sorted(set(clusters))


def _rate_default(msgs: str, bytes_: str):
    def default(config):
        return {"dispatchThrottlingRateInMsg": getattr(config, msgs),
                "dispatchThrottlingRateInByte": getattr(config, bytes_),
                "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    return default


def _inactive_default(config) -> dict:
    return {"inactiveTopicDeleteMode": config.brokerDeleteInactiveTopicsMode,
            "maxInactiveDurationSeconds": (config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
                                           or config.brokerDeleteInactiveTopicsFrequencySeconds),
            "deleteWhileInactive": config.brokerDeleteInactiveTopicsEnabled}


@dataclass(frozen=True)
class TopicPolicy:
    """One topic policy sub-resource: its stored ``field``, the ``check`` of a value, whether it
    is stored per cluster, and ``broker_default(config)``, what ``applied`` answers when neither
    the topic nor its namespace sets it (None: the policy has no ``applied``)."""

    field: str
    check: object
    per_cluster: bool = False
    broker_default: object = None
    #: ``effective(NamespacePolicies) -> value``: what ``applied`` answers when it is the merge
    #: the broker resolves rather than one level's value (offload settings merge field by field).
    effective: object = None


def _from_namespace(name: str, **kw) -> TopicPolicy:
    spec = NAMESPACE_POLICIES[name]
    kw.setdefault("check", spec.check)
    return TopicPolicy(spec.field, per_cluster=spec.per_cluster, **kw)


#: Topic policy sub-resources by their URL name (``.../{topic}/<name>``), Pulsar's spelling.
TOPIC_POLICIES = {
    "retention": _from_namespace("retention", broker_default=lambda c: {
        "retentionTimeInMinutes": c.defaultRetentionTimeInMinutes,
        "retentionSizeInMB": c.defaultRetentionSizeInMB}),
    "messageTTL": _from_namespace("messageTTL", check=_negative_message("Invalid value for message TTL"),
                                  broker_default=lambda c: c.ttlDurationDefaultInSeconds),
    "deduplicationEnabled": _from_namespace("deduplication",
                                            broker_default=lambda c: c.brokerDeduplicationEnabled),
    "replication": _from_namespace("replication", check=_check_replication,
                                   broker_default=lambda c: [c.clusterName]),
    "maxProducers": _from_namespace("maxProducersPerTopic",
                                    check=_negative_message("maxProducers must be 0 or more"),
                                    broker_default=lambda c: c.maxProducersPerTopic),
    "maxConsumers": _from_namespace("maxConsumersPerTopic",
                                    check=_negative_message("maxConsumers must be 0 or more"),
                                    broker_default=lambda c: c.maxConsumersPerTopic),
    "maxConsumersPerSubscription": _from_namespace(
        "maxConsumersPerSubscription",
        check=_negative_message("Invalid value for maxConsumersPerSubscription")),
    "inactiveTopicPolicies": _from_namespace("inactiveTopicPolicies", broker_default=_inactive_default),
    "publishRate": _from_namespace("publishRate"),
    "dispatchRate": _from_namespace("dispatchRate", broker_default=_rate_default(
        "dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte")),
    "subscriptionDispatchRate": _from_namespace("subscriptionDispatchRate", broker_default=_rate_default(
        "dispatchThrottlingRatePerSubscriptionInMsg", "dispatchThrottlingRatePerSubscriptionInByte")),
    # applied: Pulsar's OffloadPoliciesImpl.mergeConfiguration, each field from the topic, else
    # the namespace, else the broker: the merge the PolicyService resolves and enforces.
    "offloadPolicies": TopicPolicy(OFFLOAD_POLICIES, lambda value, what: check_offload_policies(value),
                                   broker_default=broker_offload_fields,
                                   effective=lambda policies: policies.broker_offload),
}


def backlog_quota_fits(quota: dict, retention: dict) -> bool:
    """Pulsar's checkBacklogQuota: a size or time quota must stay below a limited retention."""
    if retention is None:
        return True
    size_mb = retention.get("retentionSizeInMB", 0)
    minutes = retention.get("retentionTimeInMinutes", 0)
    if size_mb <= 0 and minutes <= 0:
        return True
    if size_mb > 0 and quota.get("limitSize", -1) >= size_mb * 1024 * 1024:
        return False
    if minutes > 0 and quota.get("limitTime", -1) >= minutes * 60:
        return False
    return True


class TopicPoliciesAdmin(AdminArea):
    """The topic policy sub-resources (``TOPIC_POLICIES``) and the topic's backlog quotas."""

    @property
    def resources(self):
        """The TopicPoliciesResources the broker's PolicyService watches."""
        return self.broker.policies.topic_policies

    @staticmethod
    def _policy(policy: str) -> TopicPolicy:
        spec = TOPIC_POLICIES.get(policy)
        if spec is None:
            raise NotFound(f"Unknown topic policy {policy}")
        return spec

    # ---------------------------------------------------------------- Pulsar's preValidation
    async def _pre_validation(self, name: TopicName, is_global: bool = False) -> None:
        if not self.context.config.topicLevelPoliciesEnabled:
            raise TopicPoliciesDisabled(
                "Topic level policies is disabled, to enable the topic level policy and retry.")
        if name.partition_index >= 0:
            raise PreconditionFailed("Not allowed to set/get topic policy for a partition")
        partitions = await self.broker.partitions_of(name)
        if partitions == 0 and not await self.topic_exists(name):
            raise NotFound(f"Topic {name} not found")
        if is_global:
            raise PreconditionFailed(
                "isGlobal topic policies are not supported: topic policies are kept in this "
                "cluster's metadata only")
        ownership = getattr(self.broker, "ownership", None)
        if ownership is not None:
            # Pulsar's validateTopicOwnership (of partition 0 for a partitioned topic): a
            # non-owner answers 307 to the owner (web/routing.py, NotOwnedError).
            await ownership.check_owned(name.partition(0) if partitions > 0 else name)

    async def _topic_document(self, name: TopicName) -> dict:
        return await self.resources.get(name) or {}

    async def _namespace_document(self, name: TopicName) -> dict:
        return await self.context.namespaces.get(name.namespace_name) or {}

    def _level_value(self, document: dict, spec: TopicPolicy):
        value = document.get(spec.field)
        if spec.per_cluster:
            value = (value or {}).get(self.cluster) if isinstance(value, dict) else None
        return value

    # ---------------------------------------------------------------- one-value policies
    async def get_topic_policy(self, name: TopicName, policy: str, applied: bool = False,
                               is_global: bool = False):
        """The topic's value (None: unset, Pulsar's 204); with ``applied`` the value in force."""
        spec = self._policy(policy)
        await self._pre_validation(name, is_global)
        value = self._level_value(await self._topic_document(name), spec)
        if applied and spec.effective is not None:
            return spec.effective(await self.broker.policies.effective_for(name))
        if value is not None or not applied or spec.broker_default is None:
            return value
        value = self._level_value(await self._namespace_document(name), spec)
        return spec.broker_default(self.context.config) if value is None else value

    async def set_topic_policy(self, name: TopicName, policy: str, value, is_global: bool = False) -> None:
        spec = self._policy(policy)
        await self._pre_validation(name, is_global)
        if value is None and policy == "messageTTL":
            # Pulsar's POST without ?messageTTL= sets null: the topic's TTL is removed.
            return await self.remove_topic_policy(name, policy)
        if value is None:
            raise BadRequest("Request body is required")
        value = spec.check(value, policy)
        if policy == "replication":
            await self._check_replication_clusters(name, value)
        elif policy == "retention":
            await self._check_retention_fits_quota(name, value)
        await self._write(name, spec, value)

    async def remove_topic_policy(self, name: TopicName, policy: str, is_global: bool = False) -> None:
        spec = self._policy(policy)
        await self._pre_validation(name, is_global)
        await self._write(name, spec, None)

    async def _write(self, name: TopicName, spec: TopicPolicy, value) -> None:
        if spec.per_cluster:
            # This cluster's entry of the map (the map holds only ours: topic policies are local).
            value = _entry_change(self.cluster, value)
        await self._update(name, {spec.field: value})

    async def _update(self, name: TopicName, changes: dict) -> None:
        await self.resources.update(name, changes)
        # Applied to the loaded topics before answering, as the namespace policies are (the
        # store's watch does it too, but a client acting on the 204 must find it in force).
        await self.broker.policies.refresh_topic(str(name.namespace_name), str(name))

    async def _check_replication_clusters(self, name: TopicName, clusters: list) -> None:
        """Pulsar's topic-level checks: 403 for a cluster that does not exist or that the tenant
        may not use."""
        known = set(await self.context.clusters.list())
        info = await self.tenant_info(name.tenant)
        allowed = info.get("allowedClusters")
        for cluster in clusters:
            if cluster not in known:
                raise Forbidden(f"Invalid cluster id: {cluster}")
            if allowed and cluster not in allowed:
                raise Forbidden(f"Cluster [{cluster}] is not in the list of allowed clusters list "
                                f"for tenant [{name.tenant}]")

    async def _check_retention_fits_quota(self, name: TopicName, retention: dict) -> None:
        quota = ((await self._topic_document(name)).get(BACKLOG_QUOTA_MAP) or {}).get(DESTINATION_STORAGE)
        if quota is None:
            quota = ((await self._namespace_document(name)).get(BACKLOG_QUOTA_MAP) or {}).get(
                DESTINATION_STORAGE)
        if quota is None:
            quota = self._default_quota()
        if not backlog_quota_fits(quota, retention):
            raise PreconditionFailed("Retention Quota must exceed backlog quota")

    # ---------------------------------------------------------------- backlog quotas
    def _default_quota(self) -> dict:
        config = self.context.config
        return {"limitSize": config.backlogQuotaDefaultLimitBytes,
                "limitTime": config.backlogQuotaDefaultLimitSecond,
                "policy": config.backlogQuotaDefaultRetentionPolicy}

    async def get_topic_backlog_quota_map(self, name: TopicName, applied: bool = False,
                                          is_global: bool = False) -> dict:
        """The topic's quotas by type ({} when none); with ``applied``, when the topic has none,
        the namespace's, else the broker's default quota for every type (Pulsar's)."""
        await self._pre_validation(name, is_global)
        quotas = (await self._topic_document(name)).get(BACKLOG_QUOTA_MAP) or {}
        if applied and not quotas:
            quotas = (await self._namespace_document(name)).get(BACKLOG_QUOTA_MAP) or {}
            if not quotas:
                quotas = {kind: self._default_quota() for kind in QUOTA_TYPES}
        return quotas

    async def set_topic_backlog_quota(self, name: TopicName, quota, quota_type=None,
                                      is_global: bool = False) -> None:
        quota_type = _quota_type(quota_type)
        await self._pre_validation(name, is_global)
        if quota is None:
            raise BadRequest("Request body is required")
        quota = check_backlog_quota(quota, "BacklogQuota")
        document = await self._topic_document(name)
        retention = document.get(RETENTION) or (await self._namespace_document(name)).get(RETENTION)
        if retention is None:
            retention = TOPIC_POLICIES["retention"].broker_default(self.context.config)
        if not backlog_quota_fits(quota, retention):
            raise PreconditionFailed("Backlog Quota exceeds configured retention quota for topic. "
                                     "Please increase retention quota and retry")
        await self._write_quota(name, document, quota_type, quota)

    async def remove_topic_backlog_quota(self, name: TopicName, quota_type=None,
                                         is_global: bool = False) -> None:
        quota_type = _quota_type(quota_type)
        await self._pre_validation(name, is_global)
        await self._write_quota(name, await self._topic_document(name), quota_type, None)

    async def _write_quota(self, name, document, quota_type, quota) -> None:
        await self._update(name, {BACKLOG_QUOTA_MAP: _entry_change(quota_type, quota)})


def _entry_change(key: str, value):
    """The change of one entry of a map field (``value`` None: removed), made on the stored map
    within the update's compare-and-set, so that two writers of different entries both stay."""
    def change(current):
        entries = dict(current or {})
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        return entries or None
    return change


def _quota_type(quota_type) -> str:
    """Pulsar's BacklogQuotaType query parameter (destination_storage when absent)."""
    quota_type = quota_type or DESTINATION_STORAGE
    if quota_type not in QUOTA_TYPES:
        raise BadRequest(f"Invalid backlogQuotaType {quota_type!r}")
    return quota_type
