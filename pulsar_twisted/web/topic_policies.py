"""
Routes of topic-level policies (Pulsar's PIP-39) under both topic domains:
GET/POST/DELETE ``/admin/v2/{persistent,non-persistent}/{tenant}/{namespace}/{topic}/<policy>``
for every ``TOPIC_POLICIES`` name, plus ``backlogQuotaMap`` (GET) and ``backlogQuota`` (POST,
DELETE, ``?backlogQuotaType=``). GETs take ``?applied=``, every route ``?isGlobal=``; a topic's
``messageTTL`` is set by the query parameter ``?messageTTL=`` (not a body), as Pulsar's.

Handlers parse and call AdminService; the rules live in ``broker/admin/topic_policies.py``.
"""

from pulsar_twisted.broker.admin.topic_policies import TOPIC_POLICIES
from pulsar_twisted.common.naming import NON_PERSISTENT, PERSISTENT
from pulsar_twisted.web.openapi import Operation
from pulsar_twisted.web.routing import int_param, json_body, query, query_bool

_TOPIC = "/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}"
_BOOL = {"type": "boolean"}
_GET_QUERY = {"applied": _BOOL, "isGlobal": _BOOL}
_SET_QUERY = {"isGlobal": _BOOL}
_QUOTA_TYPE = {"$ref": "#/components/schemas/BacklogQuotaType"}


def _ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


#: The JSON of each policy (the namespace policies' schemas, with Pulsar's topic-level names).
SCHEMAS = {
    "retention": _ref("RetentionPolicies"),
    "messageTTL": {"type": "integer", "minimum": 0},
    "deduplicationEnabled": _BOOL,
    "replication": {"type": "array", "items": {"type": "string"}},
    "maxProducers": {"type": "integer", "minimum": 0},
    "maxConsumers": {"type": "integer", "minimum": 0},
    "maxConsumersPerSubscription": {"type": "integer", "minimum": 0},
    "inactiveTopicPolicies": _ref("InactiveTopicPolicies"),
    "publishRate": _ref("PublishRate"),
    "dispatchRate": _ref("DispatchRate"),
    "subscriptionDispatchRate": _ref("DispatchRate"),
    "offloadPolicies": _ref("OffloadPolicies"),
}


def _setting(request, policy: str):
    """The value a POST sets: ``?messageTTL=`` for the TTL (None: absent), else the JSON body."""
    if policy == "messageTTL":
        raw = query(request, "messageTTL")
        return None if raw is None else int_param(raw, "messageTTL")
    return json_body(request, required=False)


def add_topic_policy_routes(router, admin) -> None:
    for domain in (PERSISTENT, NON_PERSISTENT):
        base = _TOPIC.format(domain=domain)
        for policy in TOPIC_POLICIES:
            _add_policy(router, admin, domain, base, policy)
        _add_backlog_quota(router, admin, domain, base)


def _is_global(request, policy: str) -> bool:
    # Pulsar's replication routes take no isGlobal (ignored there, as by Jersey).
    return policy != "replication" and query_bool(request, "isGlobal")


def _add_policy(router, admin, domain, base, policy) -> None:
    template = f"{base}/{policy}"
    schema = SCHEMAS[policy]
    set_query = dict(_SET_QUERY, messageTTL=schema) if policy == "messageTTL" else _SET_QUERY

    def get(request, tenant, namespace, topic):
        return admin.get_topic_policy(admin.topic_name(domain, tenant, namespace, topic), policy,
                                      applied=query_bool(request, "applied"),
                                      is_global=_is_global(request, policy))

    def set_(request, tenant, namespace, topic):
        name = admin.topic_name(domain, tenant, namespace, topic)
        return admin.set_topic_policy(name, policy, _setting(request, policy),
                                      is_global=_is_global(request, policy))

    def remove(request, tenant, namespace, topic):
        return admin.remove_topic_policy(admin.topic_name(domain, tenant, namespace, topic), policy,
                                         is_global=_is_global(request, policy))

    router.add("GET", template, get, doc=Operation(
        f"Topic policy {policy} (204 when unset; applied: the value in force)", "topic policies",
        {200: schema, 204: None}, query=_GET_QUERY, errors=(403,)))
    router.add("POST", template, set_, doc=Operation(
        f"Set topic policy {policy}", "topic policies",
        body=None if policy == "messageTTL" else schema, query=set_query, errors=(403,)))
    router.add("DELETE", template, remove, doc=Operation(
        f"Remove topic policy {policy}", "topic policies", query=_SET_QUERY, errors=(403,)))


def _add_backlog_quota(router, admin, domain, base) -> None:
    def get_map(request, tenant, namespace, topic):
        return admin.get_topic_backlog_quota_map(admin.topic_name(domain, tenant, namespace, topic),
                                                 applied=query_bool(request, "applied"),
                                                 is_global=query_bool(request, "isGlobal"))

    def set_(request, tenant, namespace, topic):
        name = admin.topic_name(domain, tenant, namespace, topic)
        return admin.set_topic_backlog_quota(name, json_body(request, required=False),
                                             query(request, "backlogQuotaType"),
                                             is_global=query_bool(request, "isGlobal"))

    def remove(request, tenant, namespace, topic):
        return admin.remove_topic_backlog_quota(admin.topic_name(domain, tenant, namespace, topic),
                                                query(request, "backlogQuotaType"),
                                                is_global=query_bool(request, "isGlobal"))

    quota_query = dict(_SET_QUERY, backlogQuotaType=_QUOTA_TYPE)
    router.add("GET", f"{base}/backlogQuotaMap", get_map, doc=Operation(
        "Backlog quotas of a topic ({} when none; applied: the quotas in force)", "topic policies",
        {200: {"type": "object", "additionalProperties": _ref("BacklogQuota")}}, query=_GET_QUERY,
        errors=(403,)))
    router.add("POST", f"{base}/backlogQuota", set_, doc=Operation(
        "Set a backlog quota of a topic", "topic policies", body=_ref("BacklogQuota"),
        query=quota_query, errors=(403,)))
    router.add("DELETE", f"{base}/backlogQuota", remove, doc=Operation(
        "Remove a backlog quota of a topic", "topic policies", query=quota_query, errors=(403,)))
