"""
Who may do what: the authorization of every admin route and every binary command, in two tables.

Each entry names one ``Rule`` (Pulsar's check for that endpoint, from ``BrokersBase``,
``ClustersBase``, ``TenantsBase``, ``NamespacesBase``, ``PersistentTopicsBase``,
``SchemasResourceBase`` and ``ServerCnx``):

* ``NONE``: no credentials needed (CONNECT, PING; ``/metrics`` is ``METRICS``, see below);
* ``AUTHENTICATED``: any role that proved itself (Pulsar's methods with no validate* call:
  the cluster list, ``brokers/ready``);
* ``SUPER_USER``: ``superUserRoles`` only (validateSuperUserAccess: broker and cluster details,
  the tenant list and tenants themselves);
* ``TENANT_ADMIN``: a super user or one of the tenant's ``adminRoles`` (validateTenantOperation,
  validateAdminAccessForTenant, and the topic operations Pulsar's default provider reserves to
  admins: create, delete, terminate, compact, unload, partitions, permissions, schema writes);
* ``NAMESPACE_GET_TOPICS``: a tenant admin or a role granted ``consume`` on the namespace (Pulsar's
  NamespaceOperation.GET_TOPICS -> allowConsumeOpsAsync; topic-level grants do not count);
* ``TOPIC_LOOKUP`` / ``TOPIC_PRODUCE`` / ``TOPIC_CONSUME``: a tenant admin, or a role granted the
  action on the topic or its namespace (lookup = produce or consume: TopicOperation.LOOKUP,
  GET_STATS, GET_METADATA; consume: GET_SUBSCRIPTIONS, SUBSCRIBE, UNSUBSCRIBE, SKIP, EXPIRE_MESSAGES,
  RESET_CURSOR, PEEK_MESSAGES, SET/GET_REPLICATED_SUBSCRIPTION_STATUS);
* ``SCOPED`` (binary only): a command acting on a producer or consumer of the connection, which was
  authorized when it was created (SEND, ACK, FLOW...): nothing more to check;
* ``METRICS``: Pulsar's ``authenticateMetricsEndpoint``: public when false (Pulsar's default),
  else an authenticated role that is a super user or in ``metricsRoles`` (401 / 403 otherwise).

Binary GET_SCHEMA is ``TOPIC_LOOKUP`` and GET_OR_CREATE_SCHEMA ``TOPIC_PRODUCE`` (the REST reads
of a schema need GET_METADATA, and only a producer adds a schema version over the binary
protocol). A route or command with no entry is refused (and ``tests/security/test_policy_table.py``
fails), so a new endpoint cannot skip authorization.

Route keys are ``(method, template)`` with the literal topic domain spelled ``{domain}``.
"""

import typing

from pulsar_twisted.common.errors import AuthorizationError
from pulsar_twisted.common.naming import (
    InvalidTopicNameError, NON_PERSISTENT, PERSISTENT, NamespaceName, parse_topic)
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import NAMESPACE_POLICIES

T = api.BaseCommand

#: The topic policy sub-resources (``web/topic_policies.py``; broker/admin/topic_policies.py's
#: TOPIC_POLICIES, named here because security sits below broker in the layering).
TOPIC_POLICY_NAMES = ("retention", "messageTTL", "deduplicationEnabled", "replication", "maxProducers",
                      "maxConsumers", "maxConsumersPerSubscription", "inactiveTopicPolicies",
                      "publishRate", "dispatchRate", "subscriptionDispatchRate", "offloadPolicies")


class Rule(typing.NamedTuple):
    """One kind of check: ``kind`` and, for namespace and topic rules, the ``action``."""

    kind: str
    action: str = ""


NONE = Rule("none")
AUTHENTICATED = Rule("authenticated")
SUPER_USER = Rule("super_user")
TENANT_ADMIN = Rule("tenant_admin")
NAMESPACE_GET_TOPICS = Rule("namespace", "consume")
TOPIC_LOOKUP = Rule("topic", "lookup")
TOPIC_PRODUCE = Rule("topic", "produce")
TOPIC_CONSUME = Rule("topic", "consume")
SCOPED = Rule("scoped")
METRICS = Rule("metrics")

V2 = "/admin/v2"
_NS = f"{V2}/namespaces/{{tenant}}/{{namespace}}"
_DNS = f"{V2}/{{domain}}/{{tenant}}/{{namespace}}"
_TOPIC = f"{_DNS}/{{topic}}"
_SUB = f"{_TOPIC}/subscription/{{sub}}"
_SCHEMA = f"{V2}/schemas/{{tenant}}/{{namespace}}/{{topic}}"


def _routes() -> dict:
    table = {
        # -- BrokersBase
        ("GET", f"{V2}/brokers/health"): SUPER_USER,
        ("GET", f"{V2}/brokers/leaderBroker"): SUPER_USER,
        ("GET", f"{V2}/brokers/ready"): AUTHENTICATED,
        ("GET", f"{V2}/brokers/{{cluster}}"): SUPER_USER,
        # -- ClustersBase (the list has no check; a cluster itself is super user, as are changes)
        ("GET", f"{V2}/clusters"): AUTHENTICATED,
        ("GET", f"{V2}/clusters/{{cluster}}"): SUPER_USER,
        ("GET", f"{V2}/clusters/{{cluster}}/brokers"): SUPER_USER,
        ("PUT", f"{V2}/clusters/{{cluster}}"): SUPER_USER,
        ("POST", f"{V2}/clusters/{{cluster}}"): SUPER_USER,
        ("DELETE", f"{V2}/clusters/{{cluster}}"): SUPER_USER,
        # -- TenantsBase
        ("GET", f"{V2}/tenants"): SUPER_USER,
        ("GET", f"{V2}/tenants/{{tenant}}"): SUPER_USER,
        ("PUT", f"{V2}/tenants/{{tenant}}"): SUPER_USER,
        ("POST", f"{V2}/tenants/{{tenant}}"): SUPER_USER,
        ("DELETE", f"{V2}/tenants/{{tenant}}"): SUPER_USER,
        # -- NamespacesBase
        ("GET", f"{V2}/namespaces/{{tenant}}"): TENANT_ADMIN,
        ("PUT", _NS): TENANT_ADMIN,
        ("GET", _NS): TENANT_ADMIN,
        ("DELETE", _NS): TENANT_ADMIN,
        ("GET", f"{_NS}/topics"): NAMESPACE_GET_TOPICS,
        ("GET", f"{_NS}/backlogQuotaMap"): TENANT_ADMIN,
        ("POST", f"{_NS}/backlogQuota"): TENANT_ADMIN,
        ("PUT", f"{_NS}/backlogQuota"): TENANT_ADMIN,
        ("DELETE", f"{_NS}/backlogQuota"): TENANT_ADMIN,
        ("GET", f"{_NS}/permissions"): TENANT_ADMIN,
        ("POST", f"{_NS}/permissions/{{role}}"): TENANT_ADMIN,
        ("DELETE", f"{_NS}/permissions/{{role}}"): TENANT_ADMIN,
        # offload settings: validateNamespacePolicyOperation(OFFLOAD, READ / WRITE)
        ("GET", f"{_NS}/offloadThreshold"): TENANT_ADMIN,
        ("PUT", f"{_NS}/offloadThreshold"): TENANT_ADMIN,
        ("GET", f"{_NS}/offloadThresholdInSeconds"): TENANT_ADMIN,
        ("PUT", f"{_NS}/offloadThresholdInSeconds"): TENANT_ADMIN,
        ("GET", f"{_NS}/offloadDeletionLagMs"): TENANT_ADMIN,
        ("PUT", f"{_NS}/offloadDeletionLagMs"): TENANT_ADMIN,
        ("DELETE", f"{_NS}/offloadDeletionLagMs"): TENANT_ADMIN,
        ("GET", f"{_NS}/offloadPolicies"): TENANT_ADMIN,
        ("POST", f"{_NS}/offloadPolicies"): TENANT_ADMIN,
        ("DELETE", f"{_NS}/removeOffloadPolicies"): TENANT_ADMIN,
        # unload and split-bundle: validateSuperUserAccess (NamespacesBase)
        ("PUT", f"{_NS}/unload"): SUPER_USER,
        ("PUT", f"{_NS}/{{bundle}}/unload"): SUPER_USER,
        ("PUT", f"{_NS}/{{bundle}}/split"): SUPER_USER,
        # -- PersistentTopicsBase / NonPersistentTopics
        ("GET", _DNS): NAMESPACE_GET_TOPICS,
        ("GET", f"{_DNS}/partitioned"): NAMESPACE_GET_TOPICS,
        ("PUT", _TOPIC): TENANT_ADMIN,
        ("DELETE", _TOPIC): TENANT_ADMIN,
        ("PUT", f"{_TOPIC}/partitions"): TENANT_ADMIN,
        ("POST", f"{_TOPIC}/partitions"): TENANT_ADMIN,
        ("GET", f"{_TOPIC}/partitions"): TOPIC_LOOKUP,
        ("DELETE", f"{_TOPIC}/partitions"): TENANT_ADMIN,
        ("GET", f"{_TOPIC}/stats"): TOPIC_LOOKUP,
        ("GET", f"{_TOPIC}/partitioned-stats"): TOPIC_LOOKUP,
        ("GET", f"{_TOPIC}/internalStats"): TOPIC_LOOKUP,
        ("GET", f"{_TOPIC}/lastMessageId"): TOPIC_CONSUME,
        ("PUT", f"{_TOPIC}/unload"): TENANT_ADMIN,
        # getNamespaceBundle of a topic: validateTopicOperation(..., LOOKUP)
        ("GET", f"{_TOPIC}/bundle"): TOPIC_LOOKUP,
        ("PUT", f"{_TOPIC}/compaction"): TENANT_ADMIN,
        ("GET", f"{_TOPIC}/compaction"): TENANT_ADMIN,
        # triggerOffload / offloadStatus: validateTopicOperation(..., OFFLOAD), a tenant admin's
        ("PUT", f"{_TOPIC}/offload"): TENANT_ADMIN,
        ("GET", f"{_TOPIC}/offload"): TENANT_ADMIN,
        ("POST", f"{_TOPIC}/terminate"): TENANT_ADMIN,
        ("GET", f"{_TOPIC}/subscriptions"): TOPIC_CONSUME,
        ("PUT", _SUB): TOPIC_CONSUME,
        ("DELETE", _SUB): TOPIC_CONSUME,
        ("POST", f"{_SUB}/skip/{{count}}"): TOPIC_CONSUME,
        ("POST", f"{_SUB}/skip_all"): TOPIC_CONSUME,
        ("POST", f"{_SUB}/resetcursor/{{timestamp}}"): TOPIC_CONSUME,
        ("POST", f"{_SUB}/resetcursor"): TOPIC_CONSUME,
        ("POST", f"{_SUB}/expireMessages/{{seconds}}"): TOPIC_CONSUME,
        ("GET", f"{_SUB}/position/{{position}}"): TOPIC_CONSUME,
        # TopicOperation.SET/GET_REPLICATED_SUBSCRIPTION_STATUS: canConsume in Pulsar's provider
        ("POST", f"{_SUB}/replicatedSubscriptionStatus"): TOPIC_CONSUME,
        ("GET", f"{_SUB}/replicatedSubscriptionStatus"): TOPIC_CONSUME,
        ("GET", f"{_TOPIC}/permissions"): TENANT_ADMIN,
        ("POST", f"{_TOPIC}/permissions/{{role}}"): TENANT_ADMIN,
        ("DELETE", f"{_TOPIC}/permissions/{{role}}"): TENANT_ADMIN,
        # -- SchemasResourceBase: reads GET_METADATA, writes validateAdminAccessForTenant
        ("GET", f"{_SCHEMA}/schema"): TOPIC_LOOKUP,
        ("GET", f"{_SCHEMA}/schema/{{version}}"): TOPIC_LOOKUP,
        ("GET", f"{_SCHEMA}/schemas"): TOPIC_LOOKUP,
        ("GET", f"{_SCHEMA}/versions"): TOPIC_LOOKUP,
        ("POST", f"{_SCHEMA}/schema"): TENANT_ADMIN,
        ("DELETE", f"{_SCHEMA}/schema"): TENANT_ADMIN,
        # testCompatibility: validateDestinationAndAdminOperation (tenant admin), stores nothing
        ("POST", f"{_SCHEMA}/compatibility"): TENANT_ADMIN,
        # -- BrokerStatsBase and BookiesBase: validateSuperUserAccess on every route
        ("GET", f"{V2}/broker-stats/topics"): SUPER_USER,
        ("GET", f"{V2}/broker-stats/metrics"): SUPER_USER,
        ("GET", f"{V2}/broker-stats/load-report"): SUPER_USER,
        # beyond Pulsar: the load manager's decisions, as sensitive as the load report
        ("GET", f"{V2}/broker-stats/load-decisions"): SUPER_USER,
        ("GET", f"{V2}/bookies/all"): SUPER_USER,
        ("GET", f"{V2}/bookies/racks-info"): SUPER_USER,
        ("GET", f"{V2}/bookies/racks-info/{{bookie}}"): SUPER_USER,
        ("POST", f"{V2}/bookies/racks-info/{{bookie}}"): SUPER_USER,
        ("DELETE", f"{V2}/bookies/racks-info/{{bookie}}"): SUPER_USER,
        # -- TopicLookup
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"): TOPIC_LOOKUP,
        ("GET", "/lookup/v2/destination/{domain}/{tenant}/{namespace}/{topic}"): TOPIC_LOOKUP,
        # -- ours and Pulsar's servlets
        ("GET", "/metrics"): METRICS,
        ("GET", f"{V2}/openapi.json"): AUTHENTICATED,
    }
    table.update(_v3_routes())
    # Topic policies (PersistentTopicsBase get/set/remove*): validateTopicPolicyOperation, which
    # Pulsar's default provider grants to tenant admins (allowTopicPolicyOperationAsync ->
    # validateTenantAdminAccess), reads as well as writes.
    for name in TOPIC_POLICY_NAMES:
        for method in ("GET", "POST", "DELETE"):
            table[(method, f"{_TOPIC}/{name}")] = TENANT_ADMIN
    table[("GET", f"{_TOPIC}/backlogQuotaMap")] = TENANT_ADMIN
    table[("POST", f"{_TOPIC}/backlogQuota")] = TENANT_ADMIN
    table[("DELETE", f"{_TOPIC}/backlogQuota")] = TENANT_ADMIN
    # Namespace policies (NamespacesBase get/set/remove*): validateNamespacePolicyOperation,
    # which Pulsar's default provider grants to tenant admins.
    for name in NAMESPACE_POLICIES:
        for method in ("GET", "POST", "PUT", "DELETE"):
            table[(method, f"{_NS}/{name}")] = TENANT_ADMIN
    return table


def _v3_routes() -> dict:
    """The functions worker's API (``web/functions.py``): Pulsar's FunctionsApiV3Resource lets a
    namespace's functions be managed by the tenant's admins (and super users; Pulsar also lets a
    role granted the namespace's ``functions`` action, not yet here). The Pulsar IO routes
    the same; the built-in connector lists any authenticated role."""
    fn = "/admin/v3/functions/{tenant}/{namespace}"
    one = fn + "/{name}"
    table = {("GET", fn): TENANT_ADMIN}
    for method in ("GET", "POST", "PUT", "DELETE"):
        table[(method, one)] = TENANT_ADMIN
    for method, suffix in (("GET", "/status"), ("GET", "/stats"), ("GET", "/{instanceId}/status"),
                           ("GET", "/{instanceId}/stats"), ("POST", "/trigger"),
                           ("GET", "/state/{key}"), ("POST", "/state/{key}"),
                           ("DELETE", "/state/{key}"), ("POST", "/counter/{key}")):
        table[(method, one + suffix)] = TENANT_ADMIN
    for verb in ("start", "stop", "restart"):
        table[("POST", f"{one}/{verb}")] = TENANT_ADMIN
        table[("POST", f"{one}/{{instanceId}}/{verb}")] = TENANT_ADMIN
    for kind in ("sources", "sinks"):
        table[("GET", f"/admin/v3/{kind}/{{tenant}}/{{namespace}}")] = TENANT_ADMIN
        for method in ("GET", "POST", "PUT", "DELETE"):
            table[(method, f"/admin/v3/{kind}/{{tenant}}/{{namespace}}/{{name}}")] = TENANT_ADMIN
        for suffix in ("status", "stats", "{instanceId}/status", "{instanceId}/stats"):
            table[("GET", f"/admin/v3/{kind}/{{tenant}}/{{namespace}}/{{name}}/{suffix}")] = TENANT_ADMIN
        for verb in ("start", "stop", "restart"):
            table[("POST", f"/admin/v3/{kind}/{{tenant}}/{{namespace}}/{{name}}/{verb}")] = TENANT_ADMIN
            table[("POST", f"/admin/v3/{kind}/{{tenant}}/{{namespace}}/{{name}}/{{instanceId}}/{verb}")] = \
                TENANT_ADMIN
        table[("GET", f"/admin/v3/{kind}/builtin{kind}")] = AUTHENTICATED
    return table


#: ``(method, template with {domain}) -> Rule`` for every admin route.
HTTP_RULES = _routes()

#: ``BaseCommand.Type -> Rule`` for every command ``ServerConnection`` handles.
BINARY_RULES = {
    T.CONNECT: NONE,
    T.PING: NONE,
    T.PONG: NONE,
    T.AUTH_RESPONSE: NONE,
    T.LOOKUP: TOPIC_LOOKUP,
    T.PARTITIONED_METADATA: TOPIC_LOOKUP,
    T.GET_TOPICS_OF_NAMESPACE: NAMESPACE_GET_TOPICS,
    T.GET_SCHEMA: TOPIC_LOOKUP,
    T.GET_OR_CREATE_SCHEMA: TOPIC_PRODUCE,
    T.PRODUCER: TOPIC_PRODUCE,
    T.SUBSCRIBE: TOPIC_CONSUME,
    T.SEND: SCOPED,
    T.CLOSE_PRODUCER: SCOPED,
    T.FLOW: SCOPED,
    T.ACK: SCOPED,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: SCOPED,
    T.UNSUBSCRIBE: SCOPED,
    T.CLOSE_CONSUMER: SCOPED,
    T.GET_LAST_MESSAGE_ID: SCOPED,
    T.SEEK: SCOPED,
    T.CONSUMER_STATS: SCOPED,
}

_DOMAINS = (PERSISTENT, NON_PERSISTENT)


def route_key(method: str, template: str) -> tuple:
    """The table key of a route: its first literal topic domain segment spelled ``{domain}``."""
    for domain in _DOMAINS:
        marker = f"/{domain}/"
        if marker in template:
            return method, template.replace(marker, "/{domain}/", 1)
    return method, template


def domain_of(template: str) -> str:
    """The literal topic domain of a route template (``persistent`` when it names none, as for
    the schema routes, which Pulsar serves for persistent topics)."""
    for domain in _DOMAINS:
        if f"/{domain}/" in template:
            return domain
    return PERSISTENT


def http_rule(method: str, template: str):
    """The Rule of a route (HEAD as GET); None when the table has no entry."""
    if method == "HEAD":
        method = "GET"
    return HTTP_RULES.get(route_key(method, template))


async def enforce(authz, rule: Rule, role, tenant=None, namespace=None, topic=None,
                  domain=PERSISTENT) -> None:
    """
    ``AuthorizationError`` unless ``role`` passes ``rule`` (with authorization on; authentication
    is the caller's). ``topic`` is the local name (or a full name with ``domain`` None); a topic
    or namespace that cannot be parsed is checked as a tenant-admin operation, the handler then
    refusing the name itself.
    """
    if not authz.enabled or rule.kind in ("none", "authenticated", "scoped", "metrics"):
        return
    if rule.kind == "super_user":
        authz.check_super_user(role)
        return
    if rule.kind == "topic":
        name = _topic_name(domain, tenant, namespace, topic)
        if name is not None:
            if not await authz.allowed(name, role, rule.action):
                raise AuthorizationError(f"Role {role} is not authorized to {rule.action} on {name}")
            return
    elif rule.kind == "namespace":
        ns = _namespace_name(tenant, namespace)
        if ns is not None:
            if not await authz.namespace_allows(ns, role, rule.action):
                raise AuthorizationError(f"Role {role} is not authorized to list the topics of {ns}")
            return
    elif rule.kind != "tenant_admin":
        raise AuthorizationError(f"No authorization rule {rule.kind!r}")
    if tenant is None:
        raise AuthorizationError(f"Role {role} is not authorized (no tenant named)")
    await authz.check_tenant_admin(tenant, role)


def _topic_name(domain, tenant, namespace, topic):
    text = topic if domain is None else f"{domain}://{tenant}/{namespace}/{topic}"
    try:
        return parse_topic(text)
    except (InvalidTopicNameError, TypeError, ValueError):
        return None


def _namespace_name(tenant, namespace):
    try:
        return NamespaceName.parse(f"{tenant}/{namespace}" if namespace is not None else tenant)
    except (InvalidTopicNameError, TypeError, ValueError):
        return None
