"""
The admin API's OpenAPI 3 document, built from the routing table itself so that it lists exactly
the routes the site answers (served at ``/admin/v2/openapi.json``).

Each route of the table is described by its own ``doc`` (an ``Operation`` passed to
``Router.add(..., doc=...)``), else by the ``Operation`` found in ``OPERATIONS`` under its method and
template, where the topic domain is spelled ``{domain}`` (the table registers the literal
``persistent`` and ``non-persistent`` copies; the document keeps both, as the site answers both).
A route with no entry is still listed, with a generic description, so the document never omits a
route; ``undocumented(router)`` names them and a test keeps that list empty.

The bodies' schemas (``SCHEMAS``) follow Pulsar's JSON: TenantInfo, ClusterData, Policies,
RetentionPolicies, BacklogQuota, TopicStats, PersistentTopicInternalStats, MessageId, ... They
state the fields we produce and accept and leave objects open (``additionalProperties``), because
Pulsar's own objects carry more fields than we fill, and clients ignore the ones they do not know.
"""

import json
import re

from pulsar_twisted.web.routing import Response

OPENAPI_PATH = "/admin/v2/openapi.json"

_PARAM = re.compile(r"\{(\w+)\}")
#: A literal topic domain segment in a registered template, turned back into ``{domain}``.
_DOMAIN = re.compile(r"/(persistent|non-persistent)/")

#: Error statuses any admin operation may answer (``AdminError`` subclasses): bad input (400), unknown
#: resource (404), not allowed on this kind of topic (405), exists or concurrent change (409),
#: invalid name or precondition (412).
COMMON_ERRORS = (400, 404, 405, 409, 412)
_REASONS = {400: "Bad request", 401: "Not authenticated", 403: "Not authorized", 404: "Not found",
            405: "Not allowed", 406: "Not acceptable", 409: "Conflict", 412: "Precondition failed",
            500: "Server error", 503: "Service not ready"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _array(items: dict) -> dict:
    return {"type": "array", "items": items}


def _map(values: dict) -> dict:
    return {"type": "object", "additionalProperties": values}


_STR = {"type": "string"}
_INT = {"type": "integer", "format": "int64"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_ANY = {}
_STRINGS = _array(_STR)


def _obj(properties: dict, required=()) -> dict:
    out = {"type": "object", "properties": properties, "additionalProperties": True}
    if required:
        out["required"] = list(required)
    return out


# ------------------------------------------------------------------------------------ schemas
SCHEMAS = {
    "Error": _obj({"reason": _STR}, required=("reason",)),
    "ClusterData": _obj({"serviceUrl": _STR, "serviceUrlTls": _STR, "brokerServiceUrl": _STR,
                         "brokerServiceUrlTls": _STR}),
    "TenantInfo": _obj({"adminRoles": _STRINGS, "allowedClusters": _STRINGS}),
    "AuthAction": {"type": "string",
                   "enum": ["produce", "consume", "functions", "sources", "sinks", "packages"]},
    "RetentionPolicies": _obj({"retentionTimeInMinutes": {"type": "integer", "minimum": -1},
                               "retentionSizeInMB": {"type": "integer", "minimum": -1}},
                              required=("retentionTimeInMinutes", "retentionSizeInMB")),
    "BacklogQuota": _obj({
        "limitSize": {"type": "integer", "minimum": -1, "description": "bytes (-1: no limit)"},
        "limitTime": {"type": "integer", "minimum": -1, "description": "seconds (-1: no limit)"},
        "policy": {"type": "string", "enum": ["producer_request_hold", "producer_exception",
                                              "consumer_backlog_eviction"]}}),
    "BacklogQuotaType": {"type": "string", "enum": ["destination_storage", "message_age"]},
    "PublishRate": _obj({"publishThrottlingRateInMsg": {"type": "integer", "minimum": -1},
                         "publishThrottlingRateInByte": {"type": "integer", "minimum": -1}}),
    "DispatchRate": _obj({"dispatchThrottlingRateInMsg": {"type": "integer", "minimum": -1},
                          "dispatchThrottlingRateInByte": {"type": "integer", "minimum": -1},
                          "relativeToPublishRate": _BOOL,
                          "ratePeriodInSecond": {"type": "integer", "minimum": 1}}),
    "SchemaCompatibilityStrategy": {"type": "string", "enum": [
        "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
        "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"]},
    "BundlesData": _obj({"boundaries": _STRINGS, "numBundles": {"type": "integer", "minimum": 1}}),
    "AuthPolicies": _obj({"namespace_auth": _map(_array(_ref("AuthAction"))),
                          "destination_auth": _map(_map(_array(_ref("AuthAction")))),
                          "subscription_auth_roles": _map(_STRINGS)}),
    "Policies": _obj({
        "auth_policies": _ref("AuthPolicies"),
        "replication_clusters": _STRINGS,
        "bundles": _ref("BundlesData"),
        "backlog_quota_map": _map(_ref("BacklogQuota")),
        "topicDispatchRate": _map(_ref("DispatchRate")),
        "subscriptionDispatchRate": _map(_ref("DispatchRate")),
        "publishMaxMessageRate": _map(_ref("PublishRate")),
        "retention_policies": _ref("RetentionPolicies"),
        "message_ttl_in_seconds": _INT,
        "deduplicationEnabled": _BOOL,
        "max_producers_per_topic": _INT,
        "max_consumers_per_topic": _INT,
        "max_consumers_per_subscription": _INT,
        "deleted": _BOOL,
        "encryption_required": _BOOL,
        "schema_compatibility_strategy": _ref("SchemaCompatibilityStrategy"),
        "properties": _map(_STR)}),
    "MessageId": _obj({"ledgerId": _INT, "entryId": _INT, "partitionIndex": _INT, "batchIndex": _INT},
                      required=("ledgerId", "entryId")),
    "PartitionedTopicMetadata": _obj({"partitions": {"type": "integer", "minimum": 0}},
                                     required=("partitions",)),
    "LookupData": _obj({"brokerUrl": _STR, "brokerUrlTls": _STR, "httpUrl": _STR, "httpUrlTls": _STR,
                        "nativeUrl": _STR}, required=("brokerUrl", "httpUrl")),
    "LeaderBroker": _obj({"brokerId": _STR, "serviceUrl": _STR}),
    "LongRunningProcessStatus": _obj({"status": {"type": "string", "enum": [
        "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"]}, "lastError": _STR}, required=("status",)),
    "InactiveTopicPolicies": _obj({
        "inactiveTopicDeleteMode": {"type": "string", "enum": [
            "delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]},
        "maxInactiveDurationSeconds": {"type": "integer", "minimum": 0},
        "deleteWhileInactive": _BOOL}, required=("deleteWhileInactive",)),
    "PostSchemaPayload": _obj({"type": _STR, "schema": _STR, "properties": _map(_STR)},
                              required=("type",)),
    "GetSchemaResponse": _obj({"version": _INT, "type": _STR, "timestamp": _INT, "data": _STR,
                               "properties": _map(_STR)}),
    "GetAllVersionsSchemaResponse": _obj({"getSchemaResponses": _array(_ref("GetSchemaResponse"))}),
    "SchemaVersion": _obj({"version": _obj({"version": _INT})}),
    "PublisherStats": _obj({"msgRateIn": _NUM, "msgThroughputIn": _NUM, "averageMsgSize": _NUM,
                            "producerId": _INT, "producerName": _STR, "address": _STR,
                            "connectedSince": _STR}),
    "ConsumerStats": _obj({"msgRateOut": _NUM, "msgThroughputOut": _NUM, "bytesOutCounter": _INT,
                           "msgOutCounter": _INT, "consumerName": _STR, "unackedMessages": _INT,
                           "metadata": _map(_STR)}),
    "SubscriptionStats": _obj({
        "msgRateOut": _NUM, "msgThroughputOut": _NUM, "bytesOutCounter": _INT, "msgOutCounter": _INT,
        "msgBacklog": _INT, "backlogSize": _INT, "unackedMessages": _INT,
        "type": {"type": "string", "enum": ["Exclusive", "Shared", "Failover", "Key_Shared"]},
        "activeConsumerName": {"type": "string", "nullable": True},
        "consumers": _array(_ref("ConsumerStats")), "isDurable": _BOOL,
        "nonContiguousDeletedMessagesRanges": _INT}),
    "ReplicatorStats": _obj({
        "msgRateIn": _NUM, "msgThroughputIn": _NUM, "msgRateOut": _NUM, "msgThroughputOut": _NUM,
        "msgRateExpired": _NUM, "replicationBacklog": _INT, "connected": _BOOL,
        "replicationDelayInSeconds": _INT,
        "inboundConnection": {"type": "string", "nullable": True},
        "inboundConnectedSince": {"type": "string", "nullable": True},
        "outboundConnection": {"type": "string", "nullable": True},
        "outboundConnectedSince": {"type": "string", "nullable": True}}),
    "TopicStats": _obj({
        "msgRateIn": _NUM, "msgThroughputIn": _NUM, "msgRateOut": _NUM, "msgThroughputOut": _NUM,
        "bytesInCounter": _INT, "msgInCounter": _INT, "bytesOutCounter": _INT, "msgOutCounter": _INT,
        "averageMsgSize": _NUM, "storageSize": _INT, "backlogSize": _INT,
        "publishers": _array(_ref("PublisherStats")),
        "subscriptions": _map(_ref("SubscriptionStats")),
        "replication": _map(_ref("ReplicatorStats")), "deduplicationStatus": _STR},
        required=("msgRateIn", "msgRateOut", "publishers", "subscriptions")),
    "PartitionedTopicStats": {"allOf": [_ref("TopicStats"), _obj({
        "metadata": _ref("PartitionedTopicMetadata"), "partitions": _map(_ref("TopicStats"))})]},
    "CursorStats": _obj({"markDeletePosition": _STR, "readPosition": _STR,
                         "individuallyDeletedMessages": _STR, "state": _STR,
                         "numberOfEntriesSinceFirstNotAckedMessage": _INT,
                         "properties": _map(_ANY)}),
    "OffloadProcessStatus": _obj({
        "status": {"type": "string", "enum": ["NOT_RUN", "RUNNING", "SUCCESS", "ERROR"]},
        "lastError": _STR, "firstUnoffloadedMessage": _ref("MessageId")}, required=("status",)),
    "OffloadPolicies": _obj({
        "managedLedgerOffloadDriver": _STR, "managedLedgerOffloadThresholdInBytes": _INT,
        "managedLedgerOffloadThresholdInSeconds": _INT, "managedLedgerOffloadDeletionLagInMillis": _INT,
        "managedLedgerOffloadedReadPriority": {"type": "string", "enum": [
            "TIERED_STORAGE_FIRST", "BOOKKEEPER_FIRST", "tiered-storage-first", "bookkeeper-first"]},
        "s3ManagedLedgerOffloadBucket": _STR, "s3ManagedLedgerOffloadRegion": _STR,
        "s3ManagedLedgerOffloadServiceEndpoint": _STR, "s3ManagedLedgerOffloadMaxBlockSizeInBytes": _INT,
        "s3ManagedLedgerOffloadReadBufferSizeInBytes": _INT, "managedLedgerOffloadBucket": _STR,
        "managedLedgerOffloadRegion": _STR, "managedLedgerOffloadServiceEndpoint": _STR,
        "fileSystemURI": _STR}),
    "LedgerInfo": _obj({"ledgerId": _INT, "entries": _INT, "size": _INT, "offloaded": _BOOL}),
    "PersistentTopicInternalStats": _obj({
        "entriesAddedCounter": _INT, "numberOfEntries": _INT, "totalSize": _INT,
        "currentLedgerEntries": _INT, "currentLedgerSize": _INT, "lastLedgerCreatedTimestamp": _STR,
        "lastConfirmedEntry": _STR, "state": _STR, "ledgers": _array(_ref("LedgerInfo")),
        "cursors": _map(_ref("CursorStats")), "compactedLedger": _ref("LedgerInfo")},
        required=("numberOfEntries", "lastConfirmedEntry", "ledgers", "cursors")),
}

#: Bodies of the namespace policy sub-resources, by their URL name (``NAMESPACE_POLICIES``).
POLICY_SCHEMAS = {
    "retention": _ref("RetentionPolicies"),
    "messageTTL": {"type": "integer", "minimum": 0},
    "deduplication": _BOOL,
    "replication": _STRINGS,
    "maxProducersPerTopic": {"type": "integer", "minimum": 0},
    "maxConsumersPerTopic": {"type": "integer", "minimum": 0},
    "maxConsumersPerSubscription": {"type": "integer", "minimum": 0},
    "subscriptionExpirationTime": {"type": "integer", "minimum": 0},
    "schemaCompatibilityStrategy": _ref("SchemaCompatibilityStrategy"),
    "publishRate": _ref("PublishRate"),
    "dispatchRate": _ref("DispatchRate"),
    "subscriptionDispatchRate": _ref("DispatchRate"),
    "inactiveTopicPolicies": _ref("InactiveTopicPolicies"),
}

#: Path parameters: Pulsar's NamedEntity rule for tenant, namespace and cluster names.
_NAME = {"type": "string", "pattern": r"^[-=:.\w]+$"}
PATH_PARAMS = {
    "cluster": _NAME, "tenant": _NAME, "namespace": _NAME, "topic": {"type": "string", "minLength": 1},
    "sub": {"type": "string", "minLength": 1}, "role": {"type": "string", "minLength": 1},
    "count": {"type": "integer", "minimum": 0}, "timestamp": _INT,
    "seconds": {"type": "integer", "minimum": 0}, "position": {"type": "integer", "minimum": 1},
    "version": {"type": "integer", "minimum": 0},
}


class Operation:
    """
    How one route is documented: ``summary``; ``tag``; ``body`` (request schema, or None);
    ``ok`` a dict ``status -> schema`` (None for no content, ``"text"``/``"bytes"`` for plain text
    or octets); ``query`` a dict ``name -> schema``; ``errors`` the statuses besides COMMON_ERRORS.
    """

    def __init__(self, summary, tag, ok=None, body=None, body_required=True, query=None, errors=()):
        self.summary = summary
        self.tag = tag
        self.ok = ok if ok is not None else {204: None}
        self.body = body
        self.body_required = body_required
        self.query = query or {}
        self.errors = tuple(errors)


_FORCE = {"force": _BOOL}
_NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_SUB = _TOPIC + "/subscription/{sub}"
_SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


def _operations() -> dict:
    op = Operation
    ops = {
        ("GET", "/admin/v2/clusters"): op("List clusters", "clusters", {200: _STRINGS}),
        ("GET", "/admin/v2/clusters/{cluster}"): op("Cluster data", "clusters", {200: _ref("ClusterData")}),
        ("PUT", "/admin/v2/clusters/{cluster}"): op("Create a cluster", "clusters", body=_ref("ClusterData"),
                                                    body_required=False),
        ("POST", "/admin/v2/clusters/{cluster}"): op("Update a cluster", "clusters",
                                                     body=_ref("ClusterData")),
        ("DELETE", "/admin/v2/clusters/{cluster}"): op("Delete a cluster", "clusters"),
        ("GET", "/admin/v2/clusters/{cluster}/brokers"): op("Brokers of a cluster", "brokers",
                                                            {200: _STRINGS}),
        ("GET", "/admin/v2/brokers/health"): op("Health check", "brokers", {200: _STR}),
        ("GET", "/admin/v2/brokers/leaderBroker"): op("The leader broker", "brokers",
                                                      {200: _ref("LeaderBroker")}),
        ("GET", "/admin/v2/brokers/ready"): op("Readiness probe", "brokers", {200: _STR}),
        ("GET", "/admin/v2/brokers/{cluster}"): op("Brokers of a cluster", "brokers", {200: _STRINGS}),
        ("GET", "/admin/v2/tenants"): op("List tenants", "tenants", {200: _STRINGS}),
        ("GET", "/admin/v2/tenants/{tenant}"): op("Tenant info", "tenants", {200: _ref("TenantInfo")}),
        ("PUT", "/admin/v2/tenants/{tenant}"): op("Create a tenant", "tenants", body=_ref("TenantInfo"),
                                                  body_required=False),
        ("POST", "/admin/v2/tenants/{tenant}"): op("Update a tenant", "tenants", body=_ref("TenantInfo")),
        ("DELETE", "/admin/v2/tenants/{tenant}"): op("Delete a tenant", "tenants", query=_FORCE),
        ("GET", "/admin/v2/namespaces/{tenant}"): op("Namespaces of a tenant", "namespaces",
                                                     {200: _STRINGS}),
        ("PUT", _NS): op("Create a namespace", "namespaces", body=_ref("Policies"), body_required=False),
        ("GET", _NS): op("Policies of a namespace", "namespaces", {200: _ref("Policies")}),
        ("DELETE", _NS): op("Delete a namespace", "namespaces", query=_FORCE),
        ("GET", _NS + "/topics"): op("Topics of a namespace", "namespaces", {200: _STRINGS}, query={
            "mode": {"type": "string", "enum": ["PERSISTENT", "NON_PERSISTENT", "ALL"]}}),
        ("GET", _NS + "/backlogQuotaMap"): op("Backlog quotas", "namespaces",
                                              {200: _map(_ref("BacklogQuota"))}),
        ("POST", _NS + "/backlogQuota"): op("Set a backlog quota", "namespaces", body=_ref("BacklogQuota"),
                                            query={"backlogQuotaType": _ref("BacklogQuotaType")}),
        ("DELETE", _NS + "/backlogQuota"): op("Remove a backlog quota", "namespaces",
                                              query={"backlogQuotaType": _ref("BacklogQuotaType")}),
        ("GET", _NS + "/permissions"): op("Permissions", "namespaces",
                                          {200: _map(_array(_ref("AuthAction")))}),
        ("POST", _NS + "/permissions/{role}"): op("Grant permissions to a role", "namespaces",
                                                  body=_array(_ref("AuthAction"))),
        ("DELETE", _NS + "/permissions/{role}"): op("Revoke a role's permissions", "namespaces"),
        # -- topics
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}"): op("Topics (and partitions)", "topics",
                                                               {200: _STRINGS}),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/partitioned"): op("Partitioned topics", "topics",
                                                                           {200: _STRINGS}),
        ("PUT", _TOPIC): op("Create a non-partitioned topic", "topics"),
        ("DELETE", _TOPIC): op("Delete a topic", "topics", query=_FORCE),
        ("PUT", _TOPIC + "/partitions"): op("Create a partitioned topic", "topics",
                                            body={"type": "integer", "minimum": 1}, errors=(406,)),
        ("POST", _TOPIC + "/partitions"): op("Add partitions", "topics",
                                             body={"type": "integer", "minimum": 1}),
        ("GET", _TOPIC + "/partitions"): op("Partitioned-topic metadata", "topics",
                                            {200: _ref("PartitionedTopicMetadata")},
                                            query={"checkAllowAutoCreation": _BOOL}),
        ("DELETE", _TOPIC + "/partitions"): op("Delete a partitioned topic", "topics", query=_FORCE),
        ("GET", _TOPIC + "/stats"): op("Topic stats", "topics", {200: _ref("TopicStats")}),
        ("GET", _TOPIC + "/partitioned-stats"): op("Partitioned-topic stats", "topics",
                                                   {200: _ref("PartitionedTopicStats")},
                                                   query={"perPartition": _BOOL}),
        ("GET", _TOPIC + "/internalStats"): op("Managed-ledger stats", "topics",
                                               {200: _ref("PersistentTopicInternalStats")}),
        ("GET", _TOPIC + "/lastMessageId"): op("Last message id", "topics", {200: _ref("MessageId")}),
        ("PUT", _TOPIC + "/unload"): op("Unload a topic", "topics"),
        ("GET", _TOPIC + "/bundle"): op("The bundle range of a topic", "topics", {200: _STR}),
        ("PUT", _NS + "/unload"): op("Unload every bundle of a namespace", "namespaces",
                                     errors=(503,)),
        ("PUT", _NS + "/{bundle}/unload"): op("Unload a namespace bundle", "namespaces",
                                              errors=(503,)),
        ("PUT", _NS + "/{bundle}/split"): op(
            "Split a namespace bundle", "namespaces",
            query={"unload": _BOOL, "splitAlgorithmName": _STR}, errors=(503,)),
        ("PUT", _TOPIC + "/compaction"): op("Trigger compaction", "topics"),
        ("GET", _TOPIC + "/compaction"): op("Compaction status", "topics",
                                            {200: _ref("LongRunningProcessStatus")}),
        ("PUT", _TOPIC + "/offload"): op("Offload the ledgers before a message id to tiered storage",
                                         "topics", body=_ref("MessageId"), errors=(405, 409)),
        ("GET", _TOPIC + "/offload"): op("Offload status", "topics", {200: _ref("OffloadProcessStatus")}),
        ("GET", _NS + "/offloadPolicies"): op("Offload policies (204 when unset)", "namespaces",
                                              {200: _ref("OffloadPolicies"), 204: None}),
        ("POST", _NS + "/offloadPolicies"): op("Set the offload policies", "namespaces",
                                               body=_ref("OffloadPolicies")),
        ("DELETE", _NS + "/removeOffloadPolicies"): op("Remove the offload policies", "namespaces"),
        ("DELETE", _NS + "/offloadDeletionLagMs"): op("Clear the offload deletion lag", "namespaces"),
        ("GET", _TOPIC + "/permissions"): op("Permissions on a topic", "topics",
                                             {200: _map(_array(_ref("AuthAction")))}),
        ("POST", _TOPIC + "/permissions/{role}"): op("Grant permissions on a topic", "topics",
                                                     body=_array(_ref("AuthAction"))),
        ("DELETE", _TOPIC + "/permissions/{role}"): op("Revoke permissions on a topic", "topics"),
        # -- schemas (the persistent topic of the path)
        ("GET", _SCHEMA + "/schema"): op("Latest schema", "schemas", {200: _ref("GetSchemaResponse")}),
        ("GET", _SCHEMA + "/schema/{version}"): op("One schema version", "schemas",
                                                   {200: _ref("GetSchemaResponse")}),
        ("GET", _SCHEMA + "/schemas"): op("Every schema version", "schemas",
                                          {200: _ref("GetAllVersionsSchemaResponse")}),
        ("GET", _SCHEMA + "/versions"): op("Every schema version", "schemas",
                                           {200: _ref("GetAllVersionsSchemaResponse")}),
        ("POST", _SCHEMA + "/schema"): op("Add a schema version", "schemas", {200: _ref("SchemaVersion")},
                                          body=_ref("PostSchemaPayload")),
        ("DELETE", _SCHEMA + "/schema"): op("Delete the schema", "schemas", {200: _ref("SchemaVersion")}),
        ("POST", _TOPIC + "/terminate"): op("Terminate a topic", "topics", {200: _ref("MessageId")}),
        ("GET", _TOPIC + "/subscriptions"): op("Subscriptions", "topics", {200: _STRINGS}),
        ("PUT", _SUB): op("Create a subscription (at a message id, else at the end)", "subscriptions",
                          body=_ref("MessageId"), body_required=False),
        ("DELETE", _SUB): op("Delete a subscription", "subscriptions", query=_FORCE),
        ("POST", _SUB + "/skip/{count}"): op("Skip messages", "subscriptions"),
        ("POST", _SUB + "/skip_all"): op("Clear the backlog", "subscriptions"),
        ("POST", _SUB + "/resetcursor/{timestamp}"): op("Reset the cursor to a time", "subscriptions"),
        ("POST", _SUB + "/resetcursor"): op("Reset the cursor to a message id", "subscriptions",
                                            body=_ref("MessageId"), query={"isExcluded": _BOOL}),
        ("POST", _SUB + "/expireMessages/{seconds}"): op("Expire old messages", "subscriptions"),
        ("POST", _SUB + "/replicatedSubscriptionStatus"): op(
            "Enable or disable a replicated subscription (every partition of a partitioned topic)",
            "subscriptions", body=_BOOL, errors=(500,)),
        ("GET", _SUB + "/replicatedSubscriptionStatus"): op(
            "Whether the subscription is replicated, per topic or partition", "subscriptions",
            {200: _map(_BOOL)}),
        ("GET", _SUB + "/position/{position}"): op("Peek the n-th unacknowledged message",
                                                   "subscriptions", {200: "bytes"}),
        # -- lookup, metrics, this document
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"): op(
            "Look a topic up", "lookup", {200: _ref("LookupData")}),
        ("GET", "/lookup/v2/destination/{domain}/{tenant}/{namespace}/{topic}"): op(
            "Look a topic up (v2 destination spelling)", "lookup", {200: _ref("LookupData")}),
        ("GET", "/metrics"): op("Prometheus metrics", "metrics", {200: "text"}),
        ("GET", OPENAPI_PATH): op("This document", "openapi", {200: {"type": "object"}}),
    }
    ops[("PUT", _NS + "/backlogQuota")] = ops[("POST", _NS + "/backlogQuota")]
    for name in ("offloadThreshold", "offloadThresholdInSeconds", "offloadDeletionLagMs"):
        ops[("GET", f"{_NS}/{name}")] = op(f"Namespace setting {name}", "namespaces",
                                           {200: _INT, 204: None})
        ops[("PUT", f"{_NS}/{name}")] = op(f"Set namespace setting {name}", "namespaces", body=_INT)
    for name, schema in POLICY_SCHEMAS.items():
        _add_policy(ops, name, schema)
    return ops


def _add_policy(ops: dict, name: str, schema: dict) -> None:
    template = f"{_NS}/{name}"
    ops[("GET", template)] = Operation(f"Namespace policy {name} (204 when unset)", "namespaces",
                                       {200: schema, 204: None})
    ops[("POST", template)] = Operation(f"Set namespace policy {name}", "namespaces", body=schema)
    ops[("PUT", template)] = ops[("POST", template)]
    ops[("DELETE", template)] = Operation(f"Remove namespace policy {name}", "namespaces")


OPERATIONS = _operations()


# ------------------------------------------------------------------------------------ the document
def doc_key(route) -> tuple:
    """``(method, template)`` of a route with its literal topic domain spelled ``{domain}``."""
    return route.method, _DOMAIN.sub("/{domain}/", route.template, count=1)


def undocumented(router) -> list:
    """``"METHOD template"`` of the routes with neither a ``doc`` of their own nor an entry in
    OPERATIONS (a test keeps this empty)."""
    return sorted({"%s %s" % doc_key(r) for r in router.routes
                   if r.doc is None and doc_key(r) not in OPERATIONS})


def _content(schema) -> dict:
    if schema == "text":
        return {"text/plain": {"schema": _STR}}
    if schema == "bytes":
        return {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    return {"application/json": {"schema": schema}}


def _operation_object(route, operation: Operation) -> dict:
    params = [{"name": name, "in": "path", "required": True,
               "schema": PATH_PARAMS.get(name, {"type": "string", "minLength": 1})}
              for name in _PARAM.findall(route.template)]
    params += [{"name": name, "in": "query", "required": False, "schema": schema}
               for name, schema in operation.query.items()]
    responses = {}
    for status, schema in operation.ok.items():
        responses[str(status)] = {"description": "OK" if status == 200 else "No content"}
        if schema is not None:
            responses[str(status)]["content"] = _content(schema)
    if route.template != OPENAPI_PATH and route.template != "/metrics":
        for status in sorted(set(COMMON_ERRORS + operation.errors)):
            responses[str(status)] = {"description": _REASONS.get(status, "Error"),
                                      "content": _content(_ref("Error"))}
    slug = re.sub(r"[^A-Za-z0-9]+", "_", route.template.strip("/")).strip("_")
    out = {"summary": operation.summary, "tags": [operation.tag],
           "operationId": f"{route.method.lower()}_{slug}", "responses": responses}
    if params:
        out["parameters"] = params
    if operation.body is not None:
        out["requestBody"] = {"required": operation.body_required, "content": _content(operation.body)}
    return out


def build_document(router, title: str = "pulsar-twisted admin API", version: str = "v2") -> dict:
    """The OpenAPI 3.0 document of every route in ``router`` (a pure function of the table)."""
    paths = {}
    for route in router.routes:
        operation = getattr(route, "doc", None) or OPERATIONS.get(doc_key(route))
        if operation is None:
            name = getattr(route.handler, "__name__", "handler")
            operation = Operation(f"{route.method} {route.template} ({name})", "other",
                                  {200: _ANY, 204: None})
        paths.setdefault(route.template, {})[route.method.lower()] = _operation_object(route, operation)
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": version,
                 "description": "Apache Pulsar's admin REST API v2, HTTP lookup and metrics, as "
                                "served by pulsar-twisted. Errors are {\"reason\": ...} with "
                                "Pulsar's status codes."},
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }


def add_openapi_route(router) -> None:
    """Serve ``build_document(router)`` at OPENAPI_PATH (built on first request: the table is
    complete by then, and this route is part of it)."""
    cached = []

    def openapi(request):
        if not cached:
            cached.append(json.dumps(build_document(router)).encode())
        return Response(200, cached[0])
    router.add("GET", OPENAPI_PATH, openapi)
