"""Topic-level policies over HTTP (Pulsar's PIP-39 routes): set, get, get applied, remove, bad
values, missing topics, partitioned topics, isGlobal, ownership and authorization."""

import base64

import treq
from twisted.internet import defer

from pulsar_twisted.broker.admin.topic_policies import TOPIC_POLICIES
from pulsar_twisted.broker.ownership import NotOwnedError
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.security import jwt, policy_table
from tests.web.support import WebTestCase

V2 = "/admin/v2"
NS = f"{V2}/namespaces/public/default"
TOPIC = "persistent://public/default/t"
T = f"{V2}/persistent/public/default/t"
RATE = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": 1000,
        "relativeToPublishRate": False, "ratePeriodInSecond": 1}

#: URL name -> (a valid value, its stored field, whether stored per cluster).
VALUES = {
    "retention": ({"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}, "retention_policies", False),
    "deduplicationEnabled": (True, "deduplicationEnabled", False),
    "replication": (["standalone"], "replication_clusters", False),
    "maxProducers": (2, "max_producers_per_topic", False),
    "maxConsumers": (3, "max_consumers_per_topic", False),
    "maxConsumersPerSubscription": (4, "max_consumers_per_subscription", False),
    "inactiveTopicPolicies": ({"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                               "maxInactiveDurationSeconds": 30, "deleteWhileInactive": True},
                              "inactive_topic_policies", False),
    "publishRate": ({"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1},
                    "publishMaxMessageRate", True),
    "dispatchRate": (RATE, "topicDispatchRate", True),
    "subscriptionDispatchRate": (dict(RATE, dispatchThrottlingRateInMsg=7), "subscriptionDispatchRate", True),
}


class TopicPolicyCase(WebTestCase):
    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.expect("PUT", T, 204)

    def stored(self, topic=TOPIC):
        return self.broker.policies.topic_policies.get(parse_topic(topic))


class SetGetRemoveTests(TopicPolicyCase):
    @defer.inlineCallbacks
    def check_policy(self, name):
        """Unset: 204; POST then GET reads it back, stored in the topic's document under the
        namespace field name (this cluster's entry for the rate maps); DELETE unsets it."""
        value, field, per_cluster = VALUES[name]
        path = f"{T}/{name}"
        yield self.expect("GET", path, 204)
        yield self.expect("POST", path, 204, value)
        self.assertEqual((yield self.expect("GET", path, 200)), value)
        document = yield self.stored()
        self.assertEqual(document[field], {"standalone": value} if per_cluster else value)
        yield self.expect("DELETE", path, 204)
        yield self.expect("GET", path, 204)
        self.assertNotIn(field, (yield self.stored()) or {})

    def test_retention(self):
        return self.check_policy("retention")

    def test_deduplication(self):
        return self.check_policy("deduplicationEnabled")

    def test_replication(self):
        return self.check_policy("replication")

    def test_max_producers(self):
        return self.check_policy("maxProducers")

    def test_max_consumers(self):
        return self.check_policy("maxConsumers")

    def test_max_consumers_per_subscription(self):
        return self.check_policy("maxConsumersPerSubscription")

    def test_inactive_topic_policies(self):
        return self.check_policy("inactiveTopicPolicies")

    def test_publish_rate(self):
        return self.check_policy("publishRate")

    def test_dispatch_rate(self):
        return self.check_policy("dispatchRate")

    def test_subscription_dispatch_rate(self):
        return self.check_policy("subscriptionDispatchRate")

    @defer.inlineCallbacks
    def test_message_ttl_is_a_query_parameter(self):
        """Pulsar's topic messageTTL: POST ?messageTTL=N (no body); negative 412 with Pulsar's
        text; not a number 400; a POST without the parameter sets null, removing it."""
        path = f"{T}/messageTTL"
        yield self.expect("GET", path, 204)
        yield self.expect("POST", f"{path}?messageTTL=3600", 204)
        self.assertEqual((yield self.expect("GET", path, 200)), 3600)
        self.assertEqual((yield self.stored())["message_ttl_in_seconds"], 3600)
        body = yield self.expect("POST", f"{path}?messageTTL=-1", 412)
        self.assertEqual(body["reason"], "Invalid value for message TTL")
        yield self.expect("POST", f"{path}?messageTTL=soon", 400)
        yield self.expect("POST", path, 204)
        yield self.expect("GET", path, 204)
        yield self.expect("POST", f"{path}?messageTTL=60", 204)
        yield self.expect("DELETE", path, 204)
        yield self.expect("GET", path, 204)

    @defer.inlineCallbacks
    def test_offload_policies(self):
        """offloadPolicies: the namespace's OffloadPoliciesImpl checks (defaults filled in), set,
        read back, removed by DELETE of the same path (not removeOffloadPolicies)."""
        path = f"{T}/offloadPolicies"
        yield self.expect("GET", path, 204)
        value = {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///tmp/o",
                 "managedLedgerOffloadThresholdInBytes": 1024}
        yield self.expect("POST", path, 204, value)
        stored = yield self.expect("GET", path, 200)
        self.assertEqual(stored["managedLedgerOffloadThresholdInBytes"], 1024)
        self.assertEqual(stored["managedLedgerOffloadedReadPriority"], "TIERED_STORAGE_FIRST")
        self.assertEqual((yield self.stored())["offload_policies"], stored)
        body = yield self.expect("POST", path, 412, {"managedLedgerOffloadDriver": "tape"})
        self.assertIn("driver is not supported", body["reason"])
        yield self.expect("DELETE", path, 204)
        yield self.expect("GET", path, 204)

    @defer.inlineCallbacks
    def test_policies_are_independent(self):
        """Removing one policy keeps the others; removing the last leaves no document."""
        yield self.expect("POST", f"{T}/maxProducers", 204, 1)
        yield self.expect("POST", f"{T}/maxConsumers", 204, 2)
        yield self.expect("DELETE", f"{T}/maxProducers", 204)
        self.assertEqual((yield self.expect("GET", f"{T}/maxConsumers", 200)), 2)
        yield self.expect("DELETE", f"{T}/maxConsumers", 204)
        self.assertFalse((yield self.stored()))

    @defer.inlineCallbacks
    def test_non_persistent_topic(self):
        """The routes are served for non-persistent topics too (Pulsar's NonPersistentTopics
        extends PersistentTopics)."""
        path = f"{V2}/non-persistent/public/default/np"
        yield self.expect("GET", f"{path}/maxProducers", 404)
        yield self.expect("PUT", path, 204)
        yield self.expect("POST", f"{path}/maxProducers", 204, 1)
        self.assertEqual((yield self.expect("GET", f"{path}/maxProducers", 200)), 1)


class AppliedTests(TopicPolicyCase):
    @defer.inlineCallbacks
    def check_levels(self, name, ns_name, broker_value, ns_value, topic_value, config=None):
        """applied=true: the broker's value, then the namespace's over it, then the topic's over
        both; without applied only the topic's (204 while unset)."""
        path = f"{T}/{name}"
        for key, value in (config or {}).items():
            setattr(self.harness.config, key, value)
        self.assertEqual((yield self.expect("GET", f"{path}?applied=true", 200)), broker_value)
        yield self.expect("POST", f"{NS}/{ns_name}", 204, ns_value)
        self.assertEqual((yield self.expect("GET", f"{path}?applied=true", 200)), ns_value)
        yield self.expect("GET", path, 204)
        if name == "messageTTL":
            yield self.expect("POST", f"{path}?messageTTL={topic_value}", 204)
        else:
            yield self.expect("POST", path, 204, topic_value)
        self.assertEqual((yield self.expect("GET", f"{path}?applied=true", 200)), topic_value)
        self.assertEqual((yield self.expect("GET", path, 200)), topic_value)

    def test_retention(self):
        return self.check_levels("retention", "retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 6},
                                 {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
                                 {"retentionTimeInMinutes": 120, "retentionSizeInMB": 200},
                                 {"defaultRetentionTimeInMinutes": 5, "defaultRetentionSizeInMB": 6})

    def test_message_ttl(self):
        return self.check_levels("messageTTL", "messageTTL", 7, 30, 90, {"ttlDurationDefaultInSeconds": 7})

    def test_deduplication(self):
        return self.check_levels("deduplicationEnabled", "deduplication", False, True, False)

    def test_max_producers(self):
        return self.check_levels("maxProducers", "maxProducersPerTopic", 9, 3, 1, {"maxProducersPerTopic": 9})

    def test_max_consumers(self):
        return self.check_levels("maxConsumers", "maxConsumersPerTopic", 0, 3, 1)

    def test_inactive_topic_policies(self):
        broker = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                  "maxInactiveDurationSeconds": 60, "deleteWhileInactive": False}
        ns = dict(broker, deleteWhileInactive=True)
        return self.check_levels("inactiveTopicPolicies", "inactiveTopicPolicies", broker, ns,
                                 dict(ns, maxInactiveDurationSeconds=10))

    def test_dispatch_rate(self):
        broker = {"dispatchThrottlingRateInMsg": 11, "dispatchThrottlingRateInByte": 0,
                  "relativeToPublishRate": False, "ratePeriodInSecond": 1}
        return self.check_levels("dispatchRate", "dispatchRate", broker, RATE,
                                 dict(RATE, dispatchThrottlingRateInMsg=1),
                                 {"dispatchThrottlingRatePerTopicInMsg": 11})

    def test_subscription_dispatch_rate(self):
        broker = {"dispatchThrottlingRateInMsg": 0, "dispatchThrottlingRateInByte": 12,
                  "relativeToPublishRate": False, "ratePeriodInSecond": 1}
        return self.check_levels("subscriptionDispatchRate", "subscriptionDispatchRate", broker, RATE,
                                 dict(RATE, dispatchThrottlingRateInMsg=1),
                                 {"dispatchThrottlingRatePerSubscriptionInByte": 12})

    @defer.inlineCallbacks
    def test_replication(self):
        """applied: the namespace's clusters (always set), the topic's over them."""
        path = f"{T}/replication"
        self.assertEqual((yield self.expect("GET", f"{path}?applied=true", 200)), ["standalone"])
        yield self.expect("GET", path, 204)

    @defer.inlineCallbacks
    def test_no_applied_where_pulsar_has_none(self):
        """publishRate and maxConsumersPerSubscription: Pulsar's GET takes no applied."""
        yield self.expect("POST", f"{NS}/maxConsumersPerSubscription", 204, 3)
        yield self.expect("GET", f"{T}/maxConsumersPerSubscription?applied=true", 204)
        yield self.expect("GET", f"{T}/publishRate?applied=true", 204)


class OffloadAppliedTests(TopicPolicyCase):
    config = dict(managedLedgerOffloadDriver="filesystem", fileSystemURI="file:///tmp/broker")

    @defer.inlineCallbacks
    def test_offload_policies(self):
        """applied: the broker's offload settings, with the namespace's fields over them and the
        topic's over both (field by field, as Pulsar's mergeConfiguration and the broker)."""
        applied = yield self.expect("GET", f"{T}/offloadPolicies?applied=true", 200)
        self.assertEqual(applied["managedLedgerOffloadDriver"], "filesystem")
        yield self.expect("PUT", f"{NS}/offloadThreshold", 204, 2048)
        yield self.expect("POST", f"{T}/offloadPolicies", 204, {
            "managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///tmp/topic",
            "managedLedgerOffloadDeletionLagInMillis": 1000})
        applied = yield self.expect("GET", f"{T}/offloadPolicies?applied=true", 200)
        self.assertEqual((applied["fileSystemURI"], applied["managedLedgerOffloadThresholdInBytes"],
                          applied["managedLedgerOffloadDeletionLagInMillis"]),
                         ("file:///tmp/topic", 2048, 1000))
        own = yield self.expect("GET", f"{T}/offloadPolicies", 200)
        self.assertNotIn("managedLedgerOffloadThresholdInBytes", own)


class BacklogQuotaTests(TopicPolicyCase):
    @defer.inlineCallbacks
    def test_set_get_remove(self):
        """backlogQuota (POST/DELETE, ?backlogQuotaType=) and backlogQuotaMap (GET): {} when
        none; each type on its own; stored as the topic's backlog_quota_map."""
        self.assertEqual((yield self.expect("GET", f"{T}/backlogQuotaMap", 200)), {})
        yield self.expect("POST", f"{T}/backlogQuota", 204, {"limitSize": 1024, "policy": "producer_exception"})
        yield self.expect("POST", f"{T}/backlogQuota?backlogQuotaType=message_age", 204,
                          {"limitTime": 60, "policy": "consumer_backlog_eviction"})
        quotas = yield self.expect("GET", f"{T}/backlogQuotaMap", 200)
        self.assertEqual(quotas, {
            "destination_storage": {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"},
            "message_age": {"limitSize": -1, "limitTime": 60, "policy": "consumer_backlog_eviction"}})
        self.assertEqual((yield self.stored())["backlog_quota_map"], quotas)
        yield self.expect("DELETE", f"{T}/backlogQuota", 204)
        self.assertEqual(list((yield self.expect("GET", f"{T}/backlogQuotaMap", 200))), ["message_age"])
        yield self.expect("DELETE", f"{T}/backlogQuota?backlogQuotaType=message_age", 204)
        self.assertEqual((yield self.expect("GET", f"{T}/backlogQuotaMap", 200)), {})
        self.assertFalse((yield self.stored()))

    @defer.inlineCallbacks
    def test_bad_quotas(self):
        yield self.expect("POST", f"{T}/backlogQuota", 400, {"policy": "whatever"})
        yield self.expect("POST", f"{T}/backlogQuota?backlogQuotaType=forever", 400, {"limitSize": 1})
        yield self.expect("DELETE", f"{T}/backlogQuota?backlogQuotaType=forever", 400)
        yield self.expect("POST", f"{T}/backlogQuota", 400)
        yield self.expect("POST", f"{T}/backlogQuota", 412, {"limitSize": -5})

    @defer.inlineCallbacks
    def test_applied(self):
        """applied with no topic quota: the namespace's, else the broker default for each type."""
        self.harness.config.backlogQuotaDefaultLimitBytes = 4096
        default = {"limitSize": 4096, "limitTime": -1, "policy": "producer_request_hold"}
        self.assertEqual((yield self.expect("GET", f"{T}/backlogQuotaMap?applied=true", 200)),
                         {"destination_storage": default, "message_age": default})
        yield self.expect("POST", f"{NS}/backlogQuota", 204, {"limitSize": 2048, "policy": "producer_exception"})
        applied = yield self.expect("GET", f"{T}/backlogQuotaMap?applied=true", 200)
        self.assertEqual(applied["destination_storage"]["limitSize"], 2048)
        yield self.expect("POST", f"{T}/backlogQuota", 204, {"limitSize": 512})
        applied = yield self.expect("GET", f"{T}/backlogQuotaMap?applied=true", 200)
        self.assertEqual(applied["destination_storage"]["limitSize"], 512)

    @defer.inlineCallbacks
    def test_quota_and_retention_checked_against_each_other(self):
        """Pulsar's checkBacklogQuota: a size quota at or over a limited retention is refused
        (412), from either side."""
        yield self.expect("POST", f"{T}/retention", 204, {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1})
        body = yield self.expect("POST", f"{T}/backlogQuota", 412, {"limitSize": 2 * 1024 * 1024})
        self.assertEqual(body["reason"], "Backlog Quota exceeds configured retention quota for topic. "
                                         "Please increase retention quota and retry")
        yield self.expect("POST", f"{T}/backlogQuota", 204, {"limitSize": 1024})
        yield self.expect("POST", f"{T}/retention", 204, {"retentionTimeInMinutes": -1, "retentionSizeInMB": 100})
        yield self.expect("POST", f"{T}/backlogQuota", 204, {"limitSize": 10 * 1024 * 1024})
        body = yield self.expect("POST", f"{T}/retention", 412,
                                 {"retentionTimeInMinutes": -1, "retentionSizeInMB": 5})
        self.assertEqual(body["reason"], "Retention Quota must exceed backlog quota")


class RefusalTests(TopicPolicyCase):
    @defer.inlineCallbacks
    def test_bad_values(self):
        """The namespace checks: wrong types 400, out of range 412 (Pulsar's topic texts)."""
        body = yield self.expect("POST", f"{T}/maxProducers", 412, -1)
        self.assertEqual(body["reason"], "maxProducers must be 0 or more")
        body = yield self.expect("POST", f"{T}/maxConsumers", 412, -1)
        self.assertEqual(body["reason"], "maxConsumers must be 0 or more")
        body = yield self.expect("POST", f"{T}/maxConsumersPerSubscription", 412, -1)
        self.assertEqual(body["reason"], "Invalid value for maxConsumersPerSubscription")
        yield self.expect("POST", f"{T}/maxProducers", 400, "many")
        yield self.expect("POST", f"{T}/maxProducers", 400)
        yield self.expect("POST", f"{T}/retention", 400, {"retentionTimeInMinutes": 1})
        yield self.expect("POST", f"{T}/retention", 412, {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1})
        yield self.expect("POST", f"{T}/retention", 400, raw=b"{{")
        yield self.expect("POST", f"{T}/deduplicationEnabled", 400, 1)
        yield self.expect("POST", f"{T}/inactiveTopicPolicies", 400,
                          {"deleteWhileInactive": True, "inactiveTopicDeleteMode": "sometimes"})
        yield self.expect("POST", f"{T}/dispatchRate", 400, {"dispatchThrottlingRateInMsg": "fast"})
        yield self.expect("POST", f"{T}/publishRate", 412, {"publishThrottlingRateInMsg": -3})
        self.assertFalse((yield self.stored()))

    @defer.inlineCallbacks
    def test_replication_clusters(self):
        """Pulsar's topic-level texts: empty or "global" 412, an unknown cluster or one the
        tenant may not use 403."""
        body = yield self.expect("POST", f"{T}/replication", 412, [])
        self.assertEqual(body["reason"], "ClusterIds should not be null or empty")
        body = yield self.expect("POST", f"{T}/replication", 412, ["global"])
        self.assertEqual(body["reason"], "Cannot specify global in the list of replication clusters")
        body = yield self.expect("POST", f"{T}/replication", 403, ["nowhere"])
        self.assertEqual(body["reason"], "Invalid cluster id: nowhere")
        yield self.expect("PUT", f"{V2}/clusters/other", 204, {"serviceUrl": "http://o:8080"})
        body = yield self.expect("POST", f"{T}/replication", 403, ["standalone", "other"])
        self.assertIn("Cluster [other] is not in the list of allowed clusters", body["reason"])
        yield self.expect("POST", f"{T}/replication", 400, "standalone")

    @defer.inlineCallbacks
    def test_missing_topic(self):
        """Pulsar's preValidation: 404 "Topic <name> not found", before any value check."""
        ghost = f"{V2}/persistent/public/default/ghost"
        for method, path, body in (("GET", f"{ghost}/retention", None), ("POST", f"{ghost}/maxProducers", 1),
                                   ("POST", f"{ghost}/maxProducers", -1), ("DELETE", f"{ghost}/maxProducers", None),
                                   ("GET", f"{ghost}/backlogQuotaMap", None),
                                   ("POST", f"{ghost}/messageTTL?messageTTL=5", None)):
            reply = yield self.expect(method, path, 404, body)
            self.assertEqual(reply["reason"], "Topic persistent://public/default/ghost not found")
        yield self.expect("GET", f"{V2}/persistent/public/nowhere/t/retention", 404)
        yield self.expect("GET", f"{V2}/persistent/ghost/nowhere/t/retention", 404)
        yield self.expect("GET", f"{V2}/persistent/public/default/a%00b/retention", 412)

    @defer.inlineCallbacks
    def test_partitioned_topic(self):
        """Set on the partitioned topic's name (stored once, for every partition); a partition's
        name is refused (412), as Pulsar's preValidation."""
        p = f"{V2}/persistent/public/default/p"
        yield self.expect("PUT", f"{p}/partitions", 204, 3)
        yield self.expect("POST", f"{p}/maxProducers", 204, 2)
        self.assertEqual((yield self.expect("GET", f"{p}/maxProducers", 200)), 2)
        stored = yield self.stored("persistent://public/default/p")
        self.assertEqual(stored["max_producers_per_topic"], 2)
        for method, path, body in (("GET", f"{p}-partition-0/maxProducers", None),
                                   ("POST", f"{p}-partition-1/maxProducers", 1),
                                   ("DELETE", f"{p}-partition-1/maxProducers", None),
                                   ("POST", f"{p}-partition-1/backlogQuota", {"limitSize": 1})):
            reply = yield self.expect(method, path, 412, body)
            self.assertEqual(reply["reason"], "Not allowed to set/get topic policy for a partition")

    @defer.inlineCallbacks
    def test_is_global_refused(self):
        """isGlobal=true (geo-replicated topic policies) is refused with 412: they would be kept
        in this cluster only."""
        for method, path, body in (("POST", f"{T}/maxProducers?isGlobal=true", 1),
                                   ("GET", f"{T}/maxProducers?isGlobal=true", None),
                                   ("DELETE", f"{T}/maxProducers?isGlobal=true", None),
                                   ("POST", f"{T}/backlogQuota?isGlobal=true", {"limitSize": 1})):
            reply = yield self.expect(method, path, 412, body)
            self.assertIn("isGlobal", reply["reason"])
        self.assertFalse((yield self.stored()))
        yield self.expect("POST", f"{T}/maxProducers?isGlobal=false", 204, 1)
        # Pulsar's replication routes take no isGlobal: ignored there.
        yield self.expect("POST", f"{T}/replication?isGlobal=true", 204, ["standalone"])

    @defer.inlineCallbacks
    def test_disabled(self):
        """topicLevelPoliciesEnabled=false: Pulsar's 405 on every route."""
        config = self.harness.config
        object.__setattr__(config, "topicLevelPoliciesEnabled", False)
        self.addCleanup(object.__setattr__, config, "topicLevelPoliciesEnabled", True)
        body = yield self.expect("GET", f"{T}/retention", 405)
        self.assertEqual(body["reason"],
                         "Topic level policies is disabled, to enable the topic level policy and retry.")
        yield self.expect("POST", f"{T}/maxProducers", 405, 1)

    @defer.inlineCallbacks
    def test_not_owned_redirects(self):
        """A topic another broker serves: 307 to it, as the neighbouring topic routes."""
        owner = {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}

        class Elsewhere:
            def check_owned(self, name):
                return defer.fail(NotOwnedError("served by b", owner))
        self.patch(self.broker, "ownership", Elsewhere())
        for method, path, body in (("POST", f"{T}/maxProducers", b"1"), ("GET", f"{T}/retention?applied=true", None)):
            response = yield treq.request(method, self.base + path, data=body, allow_redirects=False,
                                          pool=self.pool)
            yield response.content()
            self.assertEqual(response.code, 307)
            self.assertEqual(response.headers.getRawHeaders(b"location"), [b"http://b:8080" + path.encode()])
        self.assertFalse((yield self.stored()))


SECRET = b"h" * 32


def bearer(role):
    return {b"Authorization": [b"Bearer " + jwt.encode({"sub": role}, SECRET).encode()]}


class AuthorizationTests(TopicPolicyCase):
    config = dict(authenticationEnabled=True, authorizationEnabled=True, superUserRoles=["root"],
                  authenticationProviders=["token"],
                  tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode())

    @defer.inlineCallbacks
    def setUp(self):
        yield WebTestCase.setUp(self)
        yield self.request("PUT", T, headers=bearer("root"))
        yield self.request("POST", f"{V2}/tenants/public", {"adminRoles": ["owner"],
                                                            "allowedClusters": ["standalone"]},
                           headers=bearer("root"))
        yield self.request("POST", f"{NS}/permissions/app", ["produce", "consume"], headers=bearer("root"))

    @defer.inlineCallbacks
    def test_tenant_admins_only(self):
        """Pulsar's default provider answers validateTopicPolicyOperation with the tenant admin
        check, for reads as for writes: a role with produce/consume gets 403."""
        for role in ("app", "nobody"):
            for method, path, body in (("GET", f"{T}/retention", None), ("POST", f"{T}/maxProducers", 1),
                                       ("DELETE", f"{T}/maxProducers", None),
                                       ("GET", f"{T}/backlogQuotaMap", None),
                                       ("POST", f"{T}/backlogQuota", {"limitSize": 1})):
                status, _, _ = yield self.request(method, path, body, headers=bearer(role))
                self.assertEqual(status, 403, (role, method, path))
        for role in ("owner", "root"):
            status, _, _ = yield self.request("POST", f"{T}/maxProducers", 1, headers=bearer(role))
            self.assertEqual(status, 204)
            status, body, _ = yield self.request("GET", f"{T}/maxProducers", headers=bearer(role))
            self.assertEqual((status, body), (200, 1))

    def test_table_names_every_policy(self):
        """The policy table's names are the routes' (security sits below broker, so it keeps its
        own list)."""
        self.assertEqual(set(policy_table.TOPIC_POLICY_NAMES), set(TOPIC_POLICIES))
        template = "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/offloadPolicies"
        self.assertEqual(policy_table.http_rule("DELETE", template), policy_table.TENANT_ADMIN)


class EnforcementTests(TopicPolicyCase):
    """Set through the routes, enforced by the broker (the core's PolicyService)."""

    @defer.inlineCallbacks
    def test_max_producers_refuses_the_extra_producer(self):
        """maxProducers=1 on the topic (its namespace has no limit): a loaded topic refuses the
        second producer at once; removed, a new one is accepted again."""
        from pulsar_twisted.proto import PulsarApi_pb2 as api
        from tests.web.support import T as Command, settle
        yield self.producer(TOPIC, 1, name="p1")
        yield self.expect("POST", f"{T}/maxProducers", 204, 1)
        client = self.client()
        client.send(Command(type=Command.PRODUCER, producer=api.CommandProducer(
            topic=TOPIC, producer_id=2, request_id=2)))
        yield settle()
        [error] = client.commands(Command.ERROR)
        self.assertEqual(error.error.error, api.ProducerBusy)
        yield self.expect("DELETE", f"{T}/maxProducers", 204)
        client.send(Command(type=Command.PRODUCER, producer=api.CommandProducer(
            topic=TOPIC, producer_id=3, request_id=3)))
        yield settle()
        self.assertEqual(len(client.commands(Command.PRODUCER_SUCCESS)), 1)

    @defer.inlineCallbacks
    def test_retention_reaches_the_managed_ledger(self):
        """retention on the topic: the loaded topic's managed-ledger config retains it."""
        topic = yield self.broker.get_topic(TOPIC)
        yield self.expect("POST", f"{T}/retention", 204, {"retentionTimeInMinutes": -1, "retentionSizeInMB": 5})
        config = topic.ledger.config
        self.assertEqual((config.retention_time_ms, config.retention_size_mb), (-1, 5))

    @defer.inlineCallbacks
    def test_partitioned_topic_policy_reaches_every_partition(self):
        """Set on the partitioned topic's name, in force on each loaded partition."""
        p = f"{V2}/persistent/public/default/p"
        yield self.expect("PUT", f"{p}/partitions", 204, 2)
        partitions = []
        for i in range(2):
            partitions.append((yield self.broker.get_topic(f"persistent://public/default/p-partition-{i}")))
        yield self.expect("POST", f"{p}/maxConsumers", 204, 4)
        self.assertEqual([t.policies.max_consumers_per_topic for t in partitions], [4, 4])

    @defer.inlineCallbacks
    def test_applied_is_what_the_broker_enforces(self):
        """GET ?applied=true answers what the PolicyService resolves for the topic, level by
        level (topic over namespace over broker)."""
        name = parse_topic(TOPIC)

        @defer.inlineCallbacks
        def both():
            applied = yield self.expect("GET", f"{T}/maxProducers?applied=true", 200)
            ttl = yield self.expect("GET", f"{T}/messageTTL?applied=true", 200)
            effective = yield self.broker.policies.effective_for(name)
            self.assertEqual((applied, ttl), (effective.max_producers_per_topic,
                                              effective.message_ttl_seconds))
            return applied, ttl
        self.assertEqual((yield both()), (0, 0))
        yield self.expect("POST", f"{NS}/maxProducersPerTopic", 204, 5)
        yield self.expect("POST", f"{NS}/messageTTL", 204, 50)
        self.assertEqual((yield both()), (5, 50))
        yield self.expect("POST", f"{T}/maxProducers", 204, 2)
        yield self.expect("POST", f"{T}/messageTTL?messageTTL=20", 204)
        self.assertEqual((yield both()), (2, 20))
