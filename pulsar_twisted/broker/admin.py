"""
AdminService: the logic of Pulsar's admin REST API (v2) and HTTP lookup, over a BrokerService and
its metadata store. The web resources (``pulsar_twisted.web``) only parse requests, call one
method here and serialise what it returns; everything Pulsar decides (what exists, what conflicts,
which defaults a namespace has) is decided here.

Every public method is a coroutine (``async def``) or returns a plain value; failures are
``AdminError`` subclasses carrying the HTTP status Pulsar answers with (404 unknown, 409 exists or
concurrent change, 412 precondition failed, 400/406 bad input, 405 not allowed).

Metadata layout shared with BrokerService:

* ``/admin/clusters/<cluster>``                                  ClusterData JSON
* ``/admin/policies/<tenant>``                                   TenantInfo JSON
* ``/admin/policies/<tenant>/<ns>``                              Policies JSON (Pulsar's field names)
* ``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>``   ``{"partitions": N}``

Stats: Pulsar's rates (msgRateIn, ...) are computed over a stats period (``stats_interval``,
Pulsar's ``statsUpdateFrequencyInSecs``, 60 s): ``sample_rates()`` runs every period (a
LoopingCall while the service runs) and rates are the counter deltas between the last two samples.
"""

import copy
import json
import re
import time

from twisted.application import service
from twisted.internet import task
from twisted.logger import Logger

from pulsar_twisted.broker import compaction
from pulsar_twisted.broker.entryinfo import entry_metadata
from pulsar_twisted.broker.policies import INACTIVE_TOPIC_MODES
from pulsar_twisted.broker.service import TopicBusyError
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import (
    InvalidTopicNameError, NON_PERSISTENT, PERSISTENT, TopicName, parse_topic)
from pulsar_twisted.common.position import Position
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError, BadVersionError, NotEmptyError, NotFoundError)
from pulsar_twisted.metadata.layout import BROKERS_ROOT, CLUSTERS_ROOT, PARTITIONED_ROOT, POLICIES_ROOT
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames


#: Pulsar's NamedEntity rule for tenant, namespace and cluster names.
_NAME = re.compile(r"^[-=:.\w]+$")
_DOMAINS = (PERSISTENT, NON_PERSISTENT)
_AUTH_ACTIONS = {"produce", "consume", "functions", "sources", "sinks", "packages"}
_SCHEMA_STRATEGIES = {"UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD",
                      "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"}
_BACKLOG_QUOTA_TYPES = {"destination_storage", "message_age"}
_BACKLOG_POLICIES = {"producer_request_hold", "producer_exception", "consumer_backlog_eviction"}
_SUB_TYPE_NAMES = {api.CommandSubscribe.Exclusive: "Exclusive", api.CommandSubscribe.Shared: "Shared",
                   api.CommandSubscribe.Failover: "Failover", api.CommandSubscribe.Key_Shared: "Key_Shared"}


# ------------------------------------------------------------------------------------ errors
class AdminError(Exception):
    """An admin failure with the HTTP status Pulsar answers; ``str(e)`` is the ``reason``."""

    status = 500

    def __init__(self, reason: str, status: int = None):
        super().__init__(reason)
        if status is not None:
            self.status = status


class BadRequest(AdminError):
    status = 400


class NotFound(AdminError):
    status = 404


class NotAllowed(AdminError):
    status = 405


class NotAcceptable(AdminError):
    status = 406


class Conflict(AdminError):
    status = 409


class PreconditionFailed(AdminError):
    status = 412


#: Broker errors as the REST API reports them (Pulsar's RestException statuses).
_PULSAR_ERROR_STATUS = {
    errors.TopicNotFound: 404, errors.SubscriptionNotFound: 404, errors.ConsumerNotFound: 404,
    errors.InvalidTopicName: 412, errors.NotAllowedError: 405, errors.ConsumerBusy: 412,
    errors.ProducerBusy: 412, errors.ServiceNotReady: 503, errors.TopicTerminatedError: 412,
    errors.AuthorizationError: 403, errors.AuthenticationError: 401,
}


def http_status_of(error: Exception) -> int:
    """The HTTP status for any error an admin call may raise (500 for the unexpected)."""
    if isinstance(error, AdminError):
        return error.status
    if isinstance(error, errors.PulsarError):
        for cls, status in _PULSAR_ERROR_STATUS.items():
            if isinstance(error, cls):
                return status
        return 500
    if isinstance(error, (NotFoundError,)):
        return 404
    if isinstance(error, (AlreadyExistsError, BadVersionError, NotEmptyError)):
        return 409
    return 500


# ------------------------------------------------------------------------------------ validation
def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PreconditionFailed(f"{kind} name is not valid: {name!r}")
    return name


def _int(value, what: str, minimum: int = None) -> int:
    # bool is an int in Python; Pulsar's Jackson refuses true for an int field.
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be an integer")
    if minimum is not None and value < minimum:
        raise PreconditionFailed(f"{what} must be >= {minimum}")
    return value


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{what} must be true or false")
    return value


def _object(value, what: str, fields: dict, required=()) -> dict:
    """A JSON object whose known ``fields`` (name -> checker) are checked; unknown ones are kept."""
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    for name in required:
        if name not in value:
            raise BadRequest(f"{what}: missing field {name}")
    out = dict(value)
    for name, checker in fields.items():
        if name in value and value[name] is not None:
            out[name] = checker(value[name], f"{what}.{name}")
    return out


def _string_list(value, what: str) -> list:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{what} must be a list of strings")
    return value


def _retention(value, what):
    return _object(value, what, {"retentionTimeInMinutes": lambda v, w: _int(v, w, -1),
                                 "retentionSizeInMB": lambda v, w: _int(v, w, -1)},
                   required=("retentionTimeInMinutes", "retentionSizeInMB"))


def _publish_rate(value, what):
    return _object(value, what, {"publishThrottlingRateInMsg": lambda v, w: _int(v, w, -1),
                                 "publishThrottlingRateInByte": lambda v, w: _int(v, w, -1)})


def _dispatch_rate(value, what):
    out = _object(value, what, {"dispatchThrottlingRateInMsg": lambda v, w: _int(v, w, -1),
                                "dispatchThrottlingRateInByte": lambda v, w: _int(v, w, -1),
                                "relativeToPublishRate": _bool,
                                "ratePeriodInSecond": lambda v, w: _int(v, w, 1)})
    out.setdefault("ratePeriodInSecond", 1)
    out.setdefault("relativeToPublishRate", False)
    return out


def _schema_strategy(value, what):
    if not isinstance(value, str) or value.upper() not in _SCHEMA_STRATEGIES:
        raise BadRequest(f"{what} must be one of {sorted(_SCHEMA_STRATEGIES)}")
    return value.upper()


def _backlog_quota(value, what):
    def policy(v, w):
        if not isinstance(v, str) or v not in _BACKLOG_POLICIES:
            raise BadRequest(f"{w} must be one of {sorted(_BACKLOG_POLICIES)}")
        return v
    out = _object(value, what, {"limitSize": lambda v, w: _int(v, w, -1),
                                "limitTime": lambda v, w: _int(v, w, -1), "policy": policy})
    out.setdefault("limitSize", -1)
    out.setdefault("limitTime", -1)
    out.setdefault("policy", "producer_request_hold")
    return out


def _inactive_topic_policies(value, what):
    def mode(v, w):
        if v not in INACTIVE_TOPIC_MODES:
            raise BadRequest(f"{w} must be one of {list(INACTIVE_TOPIC_MODES)}")
        return v
    out = _object(value, what, {"inactiveTopicDeleteMode": mode, "deleteWhileInactive": _bool,
                                "maxInactiveDurationSeconds": lambda v, w: _int(v, w, 0)},
                  required=("deleteWhileInactive",))
    out.setdefault("inactiveTopicDeleteMode", INACTIVE_TOPIC_MODES[0])
    out.setdefault("maxInactiveDurationSeconds", 60)
    return out


class _Policy:
    """One namespace policy sub-resource: where it lives in Policies and how its value is checked."""

    def __init__(self, field, check, per_cluster=False, default=None, removable=True):
        self.field = field
        self.check = check
        self.per_cluster = per_cluster   # stored as {cluster: value} (Pulsar's rate maps)
        self.default = default           # what GET answers when unset (None: 204 No Content)
        self.removable = removable


#: Namespace policy sub-resources by their URL name (``/admin/v2/namespaces/t/ns/<name>``).
NAMESPACE_POLICIES = {
    "retention": _Policy("retention_policies", _retention),
    "messageTTL": _Policy("message_ttl_in_seconds", lambda v, w: _int(v, w, 0)),
    "deduplication": _Policy("deduplicationEnabled", _bool),
    "replication": _Policy("replication_clusters", _string_list, removable=False),
    "maxProducersPerTopic": _Policy("max_producers_per_topic", lambda v, w: _int(v, w, 0)),
    "maxConsumersPerTopic": _Policy("max_consumers_per_topic", lambda v, w: _int(v, w, 0)),
    "maxConsumersPerSubscription": _Policy("max_consumers_per_subscription", lambda v, w: _int(v, w, 0)),
    "subscriptionExpirationTime": _Policy("subscription_expiration_time_minutes",
                                          lambda v, w: _int(v, w, 0)),
    "inactiveTopicPolicies": _Policy("inactive_topic_policies", _inactive_topic_policies),
    "schemaCompatibilityStrategy": _Policy("schema_compatibility_strategy", _schema_strategy,
                                           default="UNDEFINED"),
    "publishRate": _Policy("publishMaxMessageRate", _publish_rate, per_cluster=True),
    "dispatchRate": _Policy("topicDispatchRate", _dispatch_rate, per_cluster=True),
    "subscriptionDispatchRate": _Policy("subscriptionDispatchRate", _dispatch_rate, per_cluster=True),
}


def bundle_boundaries(num_bundles: int) -> list:
    """Pulsar's even split of the 32-bit hash range into ``num_bundles`` bundles."""
    step = 0x100000000 // num_bundles
    bounds = [i * step for i in range(num_bundles)] + [0xFFFFFFFF]
    return ["0x%08x" % b for b in bounds]


def default_policies(cluster: str) -> dict:
    """A new namespace's Policies as ``pulsar-admin namespaces policies`` prints it (nulls omitted)."""
    return {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        "bundles": {"boundaries": bundle_boundaries(4), "numBundles": 4},
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        "subscription_auth_mode": "None",
        "offload_threshold": -1,
        "schema_auto_update_compatibility_strategy": "Full",
        "schema_compatibility_strategy": "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
    }


def _normalise_policies(stored: dict, cluster: str) -> dict:
    """Stored (possibly partial, as BrokerService writes public/default) Policies with defaults."""
    policies = default_policies(cluster)
    for key, value in stored.items():
        if value is not None:
            policies[key] = value
    bundles = policies.get("bundles") or {}
    n = bundles.get("numBundles") or 4
    if not bundles.get("boundaries"):
        policies["bundles"] = {"boundaries": bundle_boundaries(n), "numBundles": n}
    return policies


def message_id_json(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> dict:
    """A MessageIdImpl as Pulsar's REST API prints it."""
    out = {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": partition}
    if batch_index >= 0:
        out["batchIndex"] = batch_index
    return out


# ------------------------------------------------------------------------------------ the service
class AdminService(service.Service):
    """
    ``AdminService(broker, store, config, clock, web_service_url="", stats_interval=60)``.

    ``broker`` is the BrokerService, ``store`` its IMetadataStore, ``config`` the broker config
    (clusterName, advertisedAddress, webServicePort), ``clock`` an IReactorTime.
    ``web_service_url`` is what lookups advertise as ``httpUrl`` (default
    ``http://<advertisedAddress>:<webServicePort>``). Start it (``startService``) to sample rates.
    """

    log = Logger()

    def __init__(self, broker, store, config, clock, web_service_url: str = "", stats_interval: float = 60):
        self.broker = broker
        self.store = store
        self.config = config
        self.clock = clock
        self.cluster = config.clusterName
        self.web_service_url = web_service_url or (
            f"http://{config.advertisedAddress}:{config.webServicePort}")
        self.stats_interval = stats_interval
        self._sampler = None

    def startService(self):
        super().startService()
        self._sampler = task.LoopingCall(self.sample_rates)
        self._sampler.clock = self.clock
        self._sampler.start(self.stats_interval, now=True)

    def stopService(self):
        super().stopService()
        if self._sampler is not None and self._sampler.running:
            self._sampler.stop()
        self._sampler = None

    # ---------------------------------------------------------------- metadata helpers
    async def _read_json(self, path: str, missing: str):
        node = await self.store.get(path)
        if node is None:
            raise NotFound(missing)
        try:
            return json.loads(node[0] or b"{}"), node[1]
        except ValueError:
            raise AdminError(f"corrupt metadata at {path}")

    async def _exists(self, path: str) -> bool:
        return (await self.store.exists(path)) is not None

    async def _create_json(self, path: str, value, exists: str) -> None:
        try:
            await self.store.put(path, json.dumps(value).encode(), expected_version=-1)
        except AlreadyExistsError:
            raise Conflict(exists)

    async def _update_json(self, path: str, missing: str, change) -> dict:
        """Read-modify-write with compare-and-set, retried on a concurrent change."""
        for _ in range(5):
            value, stat = await self._read_json(path, missing)
            new = change(value)
            try:
                await self.store.put(path, json.dumps(new).encode(), expected_version=stat.version)
                return new
            except BadVersionError:
                continue
            except NotFoundError:
                raise NotFound(missing)
        raise Conflict("Concurrent modification")

    # ---------------------------------------------------------------- clusters
    async def list_clusters(self) -> list:
        return await self.store.get_children(CLUSTERS_ROOT)

    async def get_cluster(self, cluster: str) -> dict:
        check_name("Cluster", cluster)
        data, _ = await self._read_json(f"{CLUSTERS_ROOT}/{cluster}", "Cluster does not exist")
        return data

    def _cluster_data(self, data) -> dict:
        return _object(data if data is not None else {}, "ClusterData",
                       {"serviceUrl": _str, "serviceUrlTls": _str, "brokerServiceUrl": _str,
                        "brokerServiceUrlTls": _str})

    async def create_cluster(self, cluster: str, data) -> None:
        check_name("Cluster", cluster)
        await self._create_json(f"{CLUSTERS_ROOT}/{cluster}", self._cluster_data(data),
                                "Cluster already exists")

    async def update_cluster(self, cluster: str, data) -> None:
        check_name("Cluster", cluster)
        value = self._cluster_data(data)
        await self._update_json(f"{CLUSTERS_ROOT}/{cluster}", "Cluster does not exist", lambda _: value)

    async def delete_cluster(self, cluster: str) -> None:
        check_name("Cluster", cluster)
        if not await self._exists(f"{CLUSTERS_ROOT}/{cluster}"):
            raise NotFound("Cluster does not exist")
        for tenant in await self.list_tenants():
            info = await self.get_tenant(tenant)
            if cluster in info.get("allowedClusters", []):
                raise PreconditionFailed(f"Cluster {cluster} is used by tenant {tenant}")
        await self.store.delete(f"{CLUSTERS_ROOT}/{cluster}")

    # ---------------------------------------------------------------- tenants
    async def list_tenants(self) -> list:
        return await self.store.get_children(POLICIES_ROOT)

    async def get_tenant(self, tenant: str) -> dict:
        check_name("Tenant", tenant)
        info, _ = await self._read_json(f"{POLICIES_ROOT}/{tenant}", "Tenant does not exist")
        info.setdefault("adminRoles", [])
        info.setdefault("allowedClusters", [])
        return info

    async def _tenant_info(self, info) -> dict:
        info = _object(info if info is not None else {}, "TenantInfo",
                       {"adminRoles": _string_list, "allowedClusters": _string_list})
        # An explicit null reads as unset (Jackson gives an empty set), not as a list to iterate.
        info["adminRoles"] = info.get("adminRoles") or []
        info["allowedClusters"] = info.get("allowedClusters") or []
        known = set(await self.list_clusters())
        unknown = [c for c in info["allowedClusters"] if c not in known]
        if unknown:
            raise PreconditionFailed(f"Clusters do not exist: {', '.join(unknown)}")
        return info

    async def create_tenant(self, tenant: str, info) -> None:
        check_name("Tenant", tenant)
        value = await self._tenant_info(info)
        await self._create_json(f"{POLICIES_ROOT}/{tenant}", value, "Tenant already exists")

    async def update_tenant(self, tenant: str, info) -> None:
        check_name("Tenant", tenant)
        value = await self._tenant_info(info)
        await self._update_json(f"{POLICIES_ROOT}/{tenant}", "Tenant does not exist", lambda _: value)

    async def delete_tenant(self, tenant: str, force: bool = False) -> None:
        check_name("Tenant", tenant)
        path = f"{POLICIES_ROOT}/{tenant}"
        if not await self._exists(path):
            raise NotFound("Tenant does not exist")
        namespaces = await self.store.get_children(path)
        if namespaces and not force:
            raise Conflict("The tenant still has active namespaces")
        for ns in namespaces:
            await self.delete_namespace(tenant, ns, force=True)
        try:
            await self.store.delete(path)
        except NotEmptyError:
            raise Conflict("The tenant still has active namespaces")
        await self.store.delete_recursive(f"{PARTITIONED_ROOT}/{tenant}")

    # ---------------------------------------------------------------- namespaces
    def _ns_path(self, tenant: str, ns: str) -> str:
        check_name("Tenant", tenant)
        check_name("Namespace", ns)
        return f"{POLICIES_ROOT}/{tenant}/{ns}"

    async def list_namespaces(self, tenant: str) -> list:
        check_name("Tenant", tenant)
        if not await self._exists(f"{POLICIES_ROOT}/{tenant}"):
            raise NotFound("Tenant does not exist")
        return [f"{tenant}/{ns}" for ns in await self.store.get_children(f"{POLICIES_ROOT}/{tenant}")]

    async def create_namespace(self, tenant: str, ns: str, policies=None) -> None:
        path = self._ns_path(tenant, ns)
        info = await self.get_tenant(tenant)
        value = default_policies(self.cluster)
        if policies is not None:
            if not isinstance(policies, dict):
                raise BadRequest("Policies must be a JSON object")
            for name, spec in NAMESPACE_POLICIES.items():
                if policies.get(spec.field) is not None and not spec.per_cluster:
                    policies[spec.field] = spec.check(policies[spec.field], spec.field)
            value.update({k: v for k, v in policies.items() if v is not None})
            bundles = value.get("bundles")
            if not isinstance(bundles, dict) or not isinstance(bundles.get("numBundles", 4), int) or (
                    bundles.get("numBundles", 4) < 1):
                raise PreconditionFailed("bundles.numBundles must be a positive integer")
            n = bundles.get("numBundles", 4)
            value["bundles"] = {"boundaries": bundles.get("boundaries") or bundle_boundaries(n),
                                "numBundles": n}
        await self._check_clusters(value["replication_clusters"], info)
        await self._create_json(path, value, "Namespace already exists")

    async def _check_clusters(self, clusters, tenant_info) -> None:
        known = set(await self.list_clusters())
        for cluster in clusters:
            if cluster not in known:
                raise PreconditionFailed(f"Invalid cluster id: {cluster}")
            allowed = tenant_info.get("allowedClusters")
            if allowed and cluster not in allowed:
                raise PreconditionFailed(f"Cluster {cluster} is not in the list of allowed clusters")

    async def get_policies(self, tenant: str, ns: str) -> dict:
        stored, _ = await self._read_json(self._ns_path(tenant, ns), "Namespace does not exist")
        return _normalise_policies(stored, self.cluster)

    async def namespace_topics(self, tenant: str, ns: str, mode: str = "PERSISTENT") -> list:
        """Topics (and partitions) of a namespace: Pulsar's ``getTopics?mode=``."""
        self._ns_path(tenant, ns)
        modes = {"PERSISTENT": api.CommandGetTopicsOfNamespace.PERSISTENT,
                 "NON_PERSISTENT": api.CommandGetTopicsOfNamespace.NON_PERSISTENT,
                 "ALL": api.CommandGetTopicsOfNamespace.ALL}
        if (mode or "PERSISTENT").upper() not in modes:
            raise BadRequest(f"Invalid mode {mode!r}: PERSISTENT, NON_PERSISTENT or ALL")
        try:
            topics, _, _ = await self.broker.topics_of_namespace(
                f"{tenant}/{ns}", modes[(mode or "PERSISTENT").upper()], None)
        except errors.TopicNotFound:
            raise NotFound("Namespace does not exist")
        return topics

    async def delete_namespace(self, tenant: str, ns: str, force: bool = False) -> None:
        path = self._ns_path(tenant, ns)
        if not await self._exists(path):
            raise NotFound("Namespace does not exist")
        topics = await self.namespace_topics(tenant, ns, "ALL")
        partitioned = []
        for domain in _DOMAINS:
            partitioned += await self.list_partitioned_topics(domain, tenant, ns)
        if (topics or partitioned) and not force:
            raise Conflict("Cannot delete non empty namespace")
        for name in partitioned:
            await self.delete_partitioned_topic(parse_topic(name), force=True)
        for name in topics:
            try:
                await self.delete_topic(parse_topic(name), force=True)
            except NotFound:
                pass
        await self.store.delete_recursive(path)
        await self.store.delete_recursive(f"{PARTITIONED_ROOT}/{tenant}/{ns}")

    # ---------------------------------------------------------------- namespace policies
    def _policy(self, name: str) -> _Policy:
        spec = NAMESPACE_POLICIES.get(name)
        if spec is None:
            raise NotFound(f"Unknown policy {name}")
        return spec

    async def get_namespace_policy(self, tenant: str, ns: str, name: str):
        """The policy's value, or None when unset (Pulsar answers 204 No Content)."""
        spec = self._policy(name)
        policies = await self.get_policies(tenant, ns)
        value = policies.get(spec.field)
        if spec.per_cluster:
            value = (value or {}).get(self.cluster)
        return spec.default if value is None else value

    async def set_namespace_policy(self, tenant: str, ns: str, name: str, value) -> None:
        spec = self._policy(name)
        value = spec.check(value, name)
        if spec.field == "replication_clusters":
            await self._check_clusters(value, await self.get_tenant(tenant))
        await self._change_policies(tenant, ns, lambda p: self._put_field(p, spec, value))

    async def remove_namespace_policy(self, tenant: str, ns: str, name: str) -> None:
        spec = self._policy(name)
        if not spec.removable:
            raise NotAllowed(f"{name} cannot be removed")
        await self._change_policies(tenant, ns, lambda p: self._put_field(p, spec, None))

    def _put_field(self, policies: dict, spec: _Policy, value) -> dict:
        if spec.per_cluster:
            rates = dict(policies.get(spec.field) or {})
            if value is None:
                rates.pop(self.cluster, None)
            else:
                rates[self.cluster] = value
            policies[spec.field] = rates
        elif value is None:
            policies.pop(spec.field, None)
        else:
            policies[spec.field] = value
        return policies

    async def _change_policies(self, tenant, ns, change) -> dict:
        path = self._ns_path(tenant, ns)
        new = await self._update_json(path, "Namespace does not exist", change)
        # Applied to the loaded topics before answering (the store's watch would also do it,
        # but a client acting on the 204 must find the policy in force).
        await self.broker.policies.refresh(f"{tenant}/{ns}")
        return new

    async def get_backlog_quota_map(self, tenant, ns) -> dict:
        return (await self.get_policies(tenant, ns)).get("backlog_quota_map") or {}

    async def set_backlog_quota(self, tenant, ns, quota, quota_type=None) -> None:
        quota_type = quota_type or "destination_storage"
        if quota_type not in _BACKLOG_QUOTA_TYPES:
            raise BadRequest(f"Invalid backlogQuotaType {quota_type!r}")
        quota = _backlog_quota(quota, "BacklogQuota")

        def change(p):
            p["backlog_quota_map"] = dict(p.get("backlog_quota_map") or {}, **{quota_type: quota})
            return p
        await self._change_policies(tenant, ns, change)

    async def remove_backlog_quota(self, tenant, ns, quota_type=None) -> None:
        quota_type = quota_type or "destination_storage"

        def change(p):
            quotas = dict(p.get("backlog_quota_map") or {})
            quotas.pop(quota_type, None)
            p["backlog_quota_map"] = quotas
            return p
        await self._change_policies(tenant, ns, change)

    async def get_permissions(self, tenant, ns) -> dict:
        policies = await self.get_policies(tenant, ns)
        return policies["auth_policies"].get("namespace_auth", {})

    async def grant_permission(self, tenant, ns, role: str, actions) -> None:
        actions = _string_list(actions, "actions")
        bad = [a for a in actions if a not in _AUTH_ACTIONS]
        if bad:
            raise BadRequest(f"Unknown auth actions {bad}: use {sorted(_AUTH_ACTIONS)}")

        def change(p):
            auth = copy.deepcopy(_normalise_policies(p, self.cluster)["auth_policies"])
            auth["namespace_auth"][role] = sorted(set(actions))
            p["auth_policies"] = auth
            return p
        await self._change_policies(tenant, ns, change)

    async def revoke_permission(self, tenant, ns, role: str) -> None:
        def change(p):
            auth = copy.deepcopy(_normalise_policies(p, self.cluster)["auth_policies"])
            if role not in auth["namespace_auth"]:
                raise PreconditionFailed(f"Role {role} has no permission on the namespace")
            del auth["namespace_auth"][role]
            p["auth_policies"] = auth
            return p
        await self._change_policies(tenant, ns, change)

    # ---------------------------------------------------------------- topic names
    def topic_name(self, domain: str, tenant: str, ns: str, topic: str) -> TopicName:
        if domain not in _DOMAINS:
            raise NotFound(f"Unknown domain {domain}")
        check_name("Tenant", tenant)
        check_name("Namespace", ns)
        try:
            return parse_topic(f"{domain}://{tenant}/{ns}/{topic}")
        except InvalidTopicNameError:
            raise PreconditionFailed("Topic name is not valid")

    async def _check_namespace(self, name: TopicName) -> None:
        if not await self._exists(f"{POLICIES_ROOT}/{name.tenant}/{name.namespace}"):
            raise NotFound("Namespace does not exist")

    def _partitioned_path(self, name: TopicName) -> str:
        return f"{PARTITIONED_ROOT}/{name.tenant}/{name.namespace}/{name.domain}/{name.local_name}"

    async def _topic_exists(self, name: TopicName) -> bool:
        if str(name) in self.broker.topics:
            return True
        if name.persistent:
            return name.managed_ledger_name in await self.broker.ml_factory.list_names()
        return False

    async def _load(self, name: TopicName):
        """The loaded topic ``name`` (persistent ones loaded on demand), else NotFound."""
        await self._check_namespace(name)
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            raise NotFound(f"Topic {name} is a partitioned topic: use its partitions")
        topic = self.broker.topics.get(str(name))
        if topic is not None:
            return topic
        if not await self._topic_exists(name):
            raise NotFound("Topic not found")
        return await self.broker.get_topic(str(name), create=False)

    # ---------------------------------------------------------------- topics
    async def list_topics(self, domain: str, tenant: str, ns: str) -> list:
        """Non-partitioned topics and partitions of ``domain`` in a namespace."""
        if domain not in _DOMAINS:
            raise NotFound(f"Unknown domain {domain}")
        mode = "PERSISTENT" if domain == PERSISTENT else "NON_PERSISTENT"
        return await self.namespace_topics(tenant, ns, mode)

    async def list_partitioned_topics(self, domain: str, tenant: str, ns: str) -> list:
        if domain not in _DOMAINS:
            raise NotFound(f"Unknown domain {domain}")
        path = self._ns_path(tenant, ns)
        if not await self._exists(path):
            raise NotFound("Namespace does not exist")
        children = await self.store.get_children(f"{PARTITIONED_ROOT}/{tenant}/{ns}/{domain}")
        return [f"{domain}://{tenant}/{ns}/{c}" for c in children]

    async def create_topic(self, name: TopicName) -> None:
        """Create a non-partitioned topic (409 when it, or a partitioned one, exists)."""
        await self._check_namespace(name)
        if await self._topic_exists(name) or await self.broker.partitions_of(name) > 0:
            raise Conflict("This topic already exists")
        await self._create_topic_storage(name)

    async def _create_topic_storage(self, name: TopicName) -> None:
        if name.persistent:
            # Opening the managed ledger creates it; BrokerService then loads it on first use
            # even with allowAutoTopicCreation off, as Pulsar does for created topics.
            await self.broker.ml_factory.open(name.managed_ledger_name)
            await self.broker.get_topic(str(name), create=False)
        else:
            # Non-persistent topics exist while loaded; create one even without auto-creation.
            await self.broker.create_non_persistent_topic(name)

    async def delete_topic(self, name: TopicName, force: bool = False) -> None:
        await self._check_namespace(name)
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            raise Conflict(f"{name} is a partitioned topic: delete it through its /partitions")
        try:
            await self.broker.delete_topic(name, force=force)
        except errors.TopicNotFound:
            raise NotFound("Topic not found")
        except TopicBusyError as e:
            raise PreconditionFailed(str(e))

    async def unload_topic(self, name: TopicName) -> None:
        """Close the topic (clients reconnect); the next use loads it again."""
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            for i in range(await self.broker.partitions_of(name)):
                await self.unload_topic(name.partition(i))
            return
        await self._load(name)
        await self.broker.unload_topic(name)

    # ---------------------------------------------------------------- partitioned topics
    async def get_partitioned_metadata(self, name: TopicName, auto_create: bool = False) -> dict:
        await self._check_namespace(name)
        try:
            partitions = await self.broker.partitioned_metadata(str(name), auto_create=auto_create)
        except errors.TopicNotFound:
            raise NotFound("Namespace does not exist")
        return {"partitions": partitions}

    async def create_partitioned_topic(self, name: TopicName, partitions) -> None:
        partitions = _int(partitions, "partitions")
        if partitions <= 0:
            raise NotAcceptable("Number of partitions should be more than 0")
        if name.partition_index >= 0:
            raise PreconditionFailed("Partitioned topic name must not end with -partition-N")
        await self._check_namespace(name)
        if await self.broker.partitions_of(name) > 0 or await self._topic_exists(name):
            raise Conflict("This topic already exists")
        try:
            await self.broker.create_partitioned_topic(name, partitions)
        except AlreadyExistsError:
            raise Conflict("This topic already exists")
        # Pulsar creates the partitions eagerly, so that they exist without auto-creation.
        for i in range(partitions):
            if name.persistent:
                await self.broker.ml_factory.open(name.partition(i).managed_ledger_name)

    async def update_partitioned_topic(self, name: TopicName, partitions) -> None:
        partitions = _int(partitions, "partitions")
        await self._check_namespace(name)
        current = await self.broker.partitions_of(name)
        if current == 0:
            raise NotFound("Partitioned topic does not exist")
        if partitions <= current:
            raise Conflict("Number of new partitions must be greater than existing number of partitions")

        def change(value):
            value["partitions"] = partitions
            return value
        await self._update_json(self._partitioned_path(name), "Partitioned topic does not exist", change)
        for i in range(current, partitions):
            if name.persistent:
                await self.broker.ml_factory.open(name.partition(i).managed_ledger_name)

    async def delete_partitioned_topic(self, name: TopicName, force: bool = False) -> None:
        await self._check_namespace(name)
        partitions = await self.broker.partitions_of(name)
        if partitions == 0:
            raise NotFound("Partitioned topic does not exist")
        if not force:
            for i in range(partitions):
                topic = self.broker.topics.get(str(name.partition(i)))
                if topic is not None and (topic.producers or any(
                        s.consumers for s in topic.subscriptions.values())):
                    raise PreconditionFailed("Topic has active producers/subscriptions")
        for i in range(partitions):
            try:
                await self.delete_topic(name.partition(i), force=True)
            except NotFound:
                pass
        await self.store.delete_recursive(self._partitioned_path(name))

    # ---------------------------------------------------------------- stats
    def sample_rates(self) -> None:
        """Take a stats sample of every loaded topic (rates are deltas between samples)."""
        now = self.clock.seconds()
        for topic in list(self.broker.topics.values()):
            topic.counters.sample(now)

    def topic_stats(self, topic) -> dict:
        """Pulsar's TopicStats of a loaded topic."""
        counters = topic.counters
        msg_in, bytes_in, msg_out, bytes_out = counters.totals()
        rate_in, tput_in, rate_out, tput_out = counters.rates
        base = topic.stats()
        subscriptions = {name: self._subscription_stats(topic, s)
                         for name, s in list(topic.subscriptions.items())}
        ledger = getattr(topic, "ledger", None)
        backlog_size = 0
        if ledger is not None:
            for s in topic.subscriptions.values():
                backlog_size = max(backlog_size, subscriptions[s.name]["backlogSize"])
        return {
            "msgRateIn": rate_in, "msgThroughputIn": tput_in,
            "msgRateOut": rate_out, "msgThroughputOut": tput_out,
            "bytesInCounter": bytes_in, "msgInCounter": msg_in,
            "bytesOutCounter": bytes_out, "msgOutCounter": msg_out,
            "averageMsgSize": (bytes_in / msg_in) if msg_in else 0.0,
            "msgChunkPublished": False,
            "storageSize": ledger.total_size() if ledger is not None else 0,
            "backlogSize": backlog_size,
            "offloadedStorageSize": 0,
            "publishers": [dict(p, msgRateIn=0.0, msgThroughputIn=0.0, averageMsgSize=0.0)
                           for p in base["publishers"]],
            "waitingPublishers": 0,
            "subscriptions": subscriptions,
            "replication": {},
            "deduplicationStatus": "Disabled",
            "nonContiguousDeletedMessagesRanges": sum(
                s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()),
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        }

    def _subscription_stats(self, topic, subscription) -> dict:
        consumers = list(subscription.consumers)
        cursor = getattr(subscription, "cursor", None)
        ranges = len(cursor.individually_deleted_ranges()) if cursor is not None else 0
        backlog_size = 0
        if cursor is not None and hasattr(cursor, "estimated_backlog_size"):
            try:
                backlog_size = cursor.estimated_backlog_size()
            except Exception:
                backlog_size = 0
        sub_type = subscription.sub_type
        return {
            "msgRateOut": 0.0, "msgThroughputOut": 0.0,
            "bytesOutCounter": sum(c.bytes_out for c in consumers),
            "msgOutCounter": sum(c.msg_out for c in consumers),
            "msgRateRedeliver": 0.0, "chunkedMessageRate": 0,
            "msgBacklog": subscription.backlog(),
            "backlogSize": backlog_size,
            "msgBacklogNoDelayed": subscription.backlog(),
            "blockedSubscriptionOnUnackedMsgs": False,
            "msgDelayed": 0,
            "unackedMessages": sum(c.unacked for c in consumers),
            "type": _SUB_TYPE_NAMES.get(sub_type, "Exclusive"),
            "activeConsumerName": consumers[0].name if consumers and sub_type in (
                api.CommandSubscribe.Exclusive, api.CommandSubscribe.Failover) else None,
            "msgRateExpired": 0.0,
            "consumers": [self._consumer_stats(c) for c in consumers],
            "isDurable": subscription.durable,
            "isReplicated": False,
            "nonContiguousDeletedMessagesRanges": ranges,
        }

    @staticmethod
    def _consumer_stats(consumer) -> dict:
        stats = consumer.stats()
        stats.pop("msgBacklog", None)
        stats.pop("type", None)
        stats.update(bytesOutCounter=consumer.bytes_out, msgOutCounter=consumer.msg_out,
                     metadata=consumer.metadata)
        return stats

    async def get_topic_stats(self, name: TopicName) -> dict:
        return self.topic_stats(await self._load(name))

    async def get_partitioned_stats(self, name: TopicName, per_partition: bool = True) -> dict:
        await self._check_namespace(name)
        partitions = await self.broker.partitions_of(name)
        if partitions == 0:
            raise NotFound("Partitioned topic does not exist")
        total = {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
                 "bytesInCounter": 0, "msgInCounter": 0, "bytesOutCounter": 0, "msgOutCounter": 0,
                 "averageMsgSize": 0.0, "storageSize": 0, "backlogSize": 0, "publishers": [],
                 "subscriptions": {}, "replication": {},
                 "metadata": {"partitions": partitions}, "partitions": {}}
        for i in range(partitions):
            try:
                stats = await self.get_topic_stats(name.partition(i))
            except NotFound:
                continue
            for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
                        "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize"):
                total[key] += stats[key]
            total["publishers"] += stats["publishers"]
            for sub, s in stats["subscriptions"].items():
                agg = total["subscriptions"].setdefault(sub, dict(s, msgBacklog=0, consumers=[],
                                                                   msgOutCounter=0, bytesOutCounter=0))
                agg["msgBacklog"] += s["msgBacklog"]
                agg["msgOutCounter"] += s["msgOutCounter"]
                agg["bytesOutCounter"] += s["bytesOutCounter"]
                agg["consumers"] += s["consumers"]
            if per_partition:
                total["partitions"][str(name.partition(i))] = stats
        if total["msgInCounter"]:
            total["averageMsgSize"] = total["bytesInCounter"] / total["msgInCounter"]
        return total

    async def get_internal_stats(self, name: TopicName) -> dict:
        """Pulsar's PersistentTopicInternalStats (managed ledger and cursors)."""
        topic = await self._load(name)
        ledger = getattr(topic, "ledger", None)
        if ledger is None:
            raise NotAllowed("Internal stats exist only for persistent topics")
        ledgers = ledger.ledgers_info()
        current = ledgers[-1] if ledgers else {"entries": 0, "size": 0, "timestamp": 0}
        lce = ledger.last_confirmed_entry()
        cursors = {}
        for cname, cursor in list(ledger.cursors.items()):
            cursors[cname] = {
                "markDeletePosition": _pos(cursor.mark_delete_position),
                "readPosition": _pos(cursor.read_position),
                "waitingReadOp": False, "pendingReadOps": 0,
                "messagesConsumedCounter": 0,
                "cursorLedger": getattr(getattr(cursor, "_ledger", None), "ledger_id", -1),
                "cursorLedgerLastEntry": -1,
                "individuallyDeletedMessages": "[" + ", ".join(
                    f"({_pos(a)}..{_pos(b)}]" for a, b in cursor.individually_deleted_ranges()) + "]",
                "lastLedgerSwitchTimestamp": "",
                "state": getattr(getattr(cursor, "_state", None), "name", "Open"),
                "numberOfEntriesSinceFirstNotAckedMessage": cursor.number_of_entries_in_backlog(),
                "totalNonContiguousDeletedMessagesRange": len(cursor.individually_deleted_ranges()),
                "properties": dict(getattr(cursor, "properties", {}) or {}),
            }
        return {
            "entriesAddedCounter": ledger.number_of_entries(),
            "numberOfEntries": ledger.number_of_entries(),
            "totalSize": ledger.total_size(),
            "currentLedgerEntries": current["entries"],
            "currentLedgerSize": current["size"],
            "lastLedgerCreatedTimestamp": _iso_ms(current.get("timestamp", 0)),
            "waitingCursorsCount": 0,
            "pendingAddEntriesCount": getattr(topic, "pending_adds", 0),
            "lastConfirmedEntry": _pos(lce),
            "state": getattr(getattr(ledger, "state", None), "name", "LedgerOpened"),
            "ledgers": [{"ledgerId": i["ledgerId"], "entries": i["entries"], "size": i["size"],
                         "offloaded": False, "underReplicated": False} for i in ledgers],
            "cursors": cursors,
            "schemaLedgers": [],
            "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False,
                                "underReplicated": False},
        }

    # ---------------------------------------------------------------- subscriptions
    async def list_subscriptions(self, name: TopicName) -> list:
        partitions = 0 if name.partition_index >= 0 else await self.broker.partitions_of(name)
        if partitions:
            found = set()
            for i in range(partitions):
                try:
                    found.update(await self.list_subscriptions(name.partition(i)))
                except NotFound:
                    pass
            return sorted(found)
        topic = await self._load(name)
        return sorted(topic.subscriptions)

    async def _subscription(self, name: TopicName, sub: str):
        topic = await self._load(name)
        subscription = topic.subscriptions.get(sub)
        if subscription is None:
            raise NotFound("Subscription not found")
        return topic, subscription

    async def _each_partition(self, name: TopicName, call) -> None:
        """Run ``call(topic_name)`` on every partition of a partitioned topic, else on it."""
        partitions = 0 if name.partition_index >= 0 else await self.broker.partitions_of(name)
        if partitions:
            await self._check_namespace(name)
            for i in range(partitions):
                await call(name.partition(i))
        else:
            await call(name)

    async def create_subscription(self, name: TopicName, sub: str, message_id=None) -> None:
        """A durable subscription at ``message_id`` (a dict {ledgerId, entryId}) or the end."""
        if not sub:
            raise PreconditionFailed("Subscription name is not valid")
        position = _position_from(message_id) if message_id is not None else None

        async def create(topic_name):
            topic = await self._load(topic_name)
            if not topic_name.persistent:
                raise NotAllowed("Subscriptions of non-persistent topics exist only with consumers")
            if sub in topic.subscriptions:
                raise Conflict("Subscription already exists for topic")
            await self.broker.create_subscription(topic_name, sub, position)
        await self._each_partition(name, create)

    async def delete_subscription(self, name: TopicName, sub: str, force: bool = False) -> None:
        async def delete(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            try:
                await self.broker.delete_subscription(topic, sub, force=force)
            except errors.ConsumerBusy as e:
                raise PreconditionFailed(str(e))
        await self._each_partition(name, delete)

    async def skip_messages(self, name: TopicName, sub: str, count) -> None:
        """Acknowledge the next ``count`` unacknowledged messages (entries) of the subscription."""
        count = _int(count, "numMessages", 0)

        async def skip(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            cursor = getattr(subscription, "cursor", None)
            if cursor is None:
                raise NotAllowed("Skip is not supported on non-persistent topics")
            if await cursor.skip_unacked(count):
                subscription.new_entries()
        await self._each_partition(name, skip)

    async def skip_all(self, name: TopicName, sub: str) -> None:
        """Clear the backlog: everything up to the last entry acknowledged."""
        async def clear(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            cursor = getattr(subscription, "cursor", None)
            if cursor is None:
                return
            last = topic.ledger.last_confirmed_entry()
            if last > cursor.mark_delete_position:
                await cursor.mark_delete(last)
        await self._each_partition(name, clear)

    async def reset_cursor_to_time(self, name: TopicName, sub: str, timestamp_ms) -> None:
        timestamp_ms = _int(timestamp_ms, "timestamp")

        async def reset(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            if not topic_name.persistent:
                raise NotAllowed("Reset cursor is not supported on non-persistent topics")
            await subscription.seek_by_time(timestamp_ms)
        await self._each_partition(name, reset)

    async def reset_cursor_to_id(self, name: TopicName, sub: str, message_id, excluded=False) -> None:
        position = _position_from(message_id)
        topic, subscription = await self._subscription(name, sub)
        if not name.persistent:
            raise NotAllowed("Reset cursor is not supported on non-persistent topics")
        if excluded:
            position = Position(position.ledger_id, position.entry_id + 1)
        await subscription.seek(position)

    async def expire_messages(self, name: TopicName, sub: str, seconds) -> None:
        """Acknowledge every message published more than ``seconds`` ago."""
        seconds = _int(seconds, "expireTimeInSeconds", 0)

        async def expire(topic_name):
            topic, subscription = await self._subscription(topic_name, sub)
            cursor = getattr(subscription, "cursor", None)
            if cursor is None:
                return
            cutoff_ms = int(self.clock.seconds() * 1000) - seconds * 1000
            first_kept = await topic.find_position_by_time(cutoff_ms + 1)
            last_expired = _previous_position(topic.ledger, first_kept)
            if last_expired is not None and last_expired > cursor.mark_delete_position:
                await cursor.mark_delete(last_expired)
                subscription.new_entries()
        await self._each_partition(name, expire)

    async def peek_message(self, name: TopicName, sub: str, n) -> tuple:
        """
        The ``n``-th (1-based) unacknowledged entry of the subscription as
        ``(headers: dict, payload: bytes)`` with Pulsar's X-Pulsar-* headers (payload decompressed).
        """
        n = _int(n, "messagePosition", 1)
        topic, subscription = await self._subscription(name, sub)
        cursor = getattr(subscription, "cursor", None)
        if cursor is None:
            raise NotAllowed("Peek is not supported on non-persistent topics")
        position = cursor.nth_unacked_position(n)
        if position is None:
            raise NotFound("Message not found")
        entries = await topic.ledger.read_entries(position, 1)
        if not entries:
            raise NotFound("Message not found")
        return entry_response(entries[0].position, entries[0].data)

    async def last_message_id(self, name: TopicName) -> dict:
        topic = await self._load(name)
        ledger_id, entry_id, batch_index = await topic.last_message_id()
        return message_id_json(ledger_id, entry_id, name.partition_index, batch_index)

    async def terminate(self, name: TopicName) -> dict:
        topic = await self._load(name)
        if not name.persistent:
            raise NotAllowed("Termination of a non-persistent topic is not allowed")
        last = await topic.ledger.terminate()
        return message_id_json(last.ledger_id, last.entry_id, name.partition_index)

    async def compact(self, name: TopicName) -> None:
        """Start compacting (Pulsar answers at once; ``compaction_status`` follows the run)."""
        topic = await self._load(name)
        if not name.persistent:
            raise NotAllowed("Compaction is only supported on persistent topics")
        compactor = compaction.compactor_of(self.broker)
        if compactor.is_running(topic.name):
            raise Conflict("Compaction already in progress")
        compactor.compact(topic).addErrback(lambda f: None)  # the failure is logged and kept as status

    async def compaction_status(self, name: TopicName) -> dict:
        await self._load(name)
        return compaction.compactor_of(self.broker).status(str(name))

    # ---------------------------------------------------------------- lookup and brokers
    async def lookup(self, name: TopicName) -> dict:
        """Pulsar's LookupData of the broker serving ``name``. In a cluster that is the bundle's
        owner, possibly another broker: like Pulsar's TopicLookupBase, an owned bundle is answered
        200 with the owner's URLs (a 307 is only for unowned bundles assigned elsewhere, which
        never happens here: the asked broker takes a free bundle itself)."""
        await self._check_namespace(name)
        result = await self.broker.lookup(str(name))
        broker_url, broker_url_tls = result
        # Ownership results (broker/ownership.py) carry the serving broker's web URLs; a plain
        # (url, url_tls) pair, or an empty http_url (standalone), means this broker.
        http_url = getattr(result, "http_url", "") or self.web_service_url
        http_url_tls = getattr(result, "http_url_tls", "") if getattr(result, "http_url", "") else ""
        return {"brokerUrl": broker_url, "brokerUrlTls": broker_url_tls or "",
                "httpUrl": http_url, "httpUrlTls": http_url_tls, "nativeUrl": broker_url}

    def broker_id(self) -> str:
        return f"{self.config.advertisedAddress}:{self.config.webServicePort}"

    async def list_brokers(self, cluster: str) -> list:
        """The ``host:webport`` of every broker registered under /loadbalance/brokers (cluster
        brokers, broker/cluster.py); a standalone broker registers nothing and lists itself."""
        check_name("Cluster", cluster)
        if not await self._exists(f"{CLUSTERS_ROOT}/{cluster}"):
            raise NotFound("Cluster does not exist")
        if cluster != self.cluster:
            return []
        return await self.store.get_children(BROKERS_ROOT) or [self.broker_id()]

    async def leader_broker(self) -> dict:
        """The elected leader (the /loadbalance/leader node, broker/leader.py); without one
        (standalone, or between a leader's end and the next election) this broker."""
        from pulsar_twisted.broker.leader import read_leader
        return await read_leader(self.store) or {"brokerId": self.broker_id(),
                                                 "serviceUrl": self.web_service_url}

    async def health_check(self) -> str:
        """"ok" when the metadata store answers (Pulsar also round-trips a message; not yet)."""
        await self.store.exists(CLUSTERS_ROOT)
        return "ok"

    # ---------------------------------------------------------------- metrics
    def topic_metrics(self) -> list:
        """One dict per loaded topic with what /metrics exports (read at scrape time)."""
        rows = []
        for topic in list(self.broker.topics.values()):
            counters = topic.counters
            msg_in, bytes_in, msg_out, bytes_out = counters.totals()
            rate_in, tput_in, rate_out, tput_out = counters.rates
            ledger = getattr(topic, "ledger", None)
            rows.append({
                "namespace": str(topic.topic_name.namespace_name), "topic": topic.name,
                "rate_in": rate_in, "rate_out": rate_out, "throughput_in": tput_in,
                "throughput_out": tput_out, "in_messages_total": msg_in, "in_bytes_total": bytes_in,
                "out_messages_total": msg_out, "out_bytes_total": bytes_out,
                "msg_backlog": sum(s.backlog() for s in list(topic.subscriptions.values())),
                "storage_size": ledger.total_size() if ledger is not None else 0,
                "producers_count": len(topic.producers),
                "subscriptions_count": len(topic.subscriptions),
                "consumers_count": sum(len(s.consumers) for s in list(topic.subscriptions.values())),
            })
        return rows


# ------------------------------------------------------------------------------------ helpers
def _str(value, what):
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    return value


def _pos(position) -> str:
    return f"{position[0]}:{position[1]}"


def _iso_ms(ms) -> str:
    if not ms:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ".%03dZ" % (ms % 1000)


def _position_from(message_id) -> Position:
    if not isinstance(message_id, dict):
        raise BadRequest("MessageId must be a JSON object {ledgerId, entryId}")
    ledger_id = _int(message_id.get("ledgerId"), "ledgerId")
    entry_id = _int(message_id.get("entryId"), "entryId")
    return Position(ledger_id, entry_id)


def _previous_position(ledger, position):
    """The stored entry just before ``position`` (None if there is none)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    previous = None
    for info in ledger.ledgers_info():
        if info["ledgerId"] >= position.ledger_id:
            break
        if info["entries"] > 0:
            previous = Position(info["ledgerId"], info["entries"] - 1)
    return previous


def _decompress(kind: int, data: bytes, size: int) -> bytes:
    """The payload decoded with the codecs the clients use (one implementation of Pulsar's
    encodings, ``client/compression.py``); a payload that does not decode is an AdminError."""
    from pulsar_twisted.client.compression import decompress
    from pulsar_twisted.client.errors import InvalidMessage
    try:
        return decompress(kind, data, size)
    except InvalidMessage as e:
        raise AdminError(str(e))


def entry_response(position, data: bytes) -> tuple:
    """A stored entry as Pulsar's peek answers it: X-Pulsar-* headers and the (decoded) payload."""
    meta_bytes, payload = frames.split_message(data, verify=False)
    metadata = entry_metadata(data)
    headers = {"X-Pulsar-Message-ID": _pos(position),
               "X-Pulsar-publish-time": _iso_ms(metadata.publish_time)}
    if metadata.HasField("producer_name"):
        headers["X-Pulsar-producer-name"] = metadata.producer_name
    if metadata.HasField("sequence_id"):
        headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("event_time") and metadata.event_time:
        headers["X-Pulsar-event-time"] = _iso_ms(metadata.event_time)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.HasField("compression") and metadata.compression != api.NONE:
        headers["X-Pulsar-compression"] = api.CompressionType.Name(metadata.compression)
    for kv in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    body = _decompress(metadata.compression if metadata.HasField("compression") else api.NONE,
                       payload, metadata.uncompressed_size)
    return headers, body
