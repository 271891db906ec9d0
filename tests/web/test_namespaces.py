"""Admin REST API v2 over HTTP: clusters, tenants, namespaces, policies, brokers; bad input."""

from twisted.internet import defer

from tests.web.support import WebTestCase

V2 = "/admin/v2"


class ClusterTests(WebTestCase):
    @defer.inlineCallbacks
    def test_list_and_get(self):
        """The broker's own cluster is listed and readable."""
        self.assertEqual((yield self.expect("GET", f"{V2}/clusters", 200)), ["standalone"])
        data = yield self.expect("GET", f"{V2}/clusters/standalone", 200)
        self.assertEqual(data["brokerServiceUrl"], "pulsar://localhost:6650")

    @defer.inlineCallbacks
    def test_create_update_delete(self):
        """PUT creates (409 twice), POST updates, DELETE removes (404 after)."""
        body = {"serviceUrl": "http://b:8080", "brokerServiceUrl": "pulsar://b:6650"}
        yield self.expect("PUT", f"{V2}/clusters/other", 204, body)
        yield self.expect("PUT", f"{V2}/clusters/other", 409, body)
        yield self.expect("POST", f"{V2}/clusters/other", 204, dict(body, serviceUrl="http://c:8080"))
        self.assertEqual((yield self.expect("GET", f"{V2}/clusters/other", 200))["serviceUrl"], "http://c:8080")
        yield self.expect("DELETE", f"{V2}/clusters/other", 204)
        yield self.expect("GET", f"{V2}/clusters/other", 404)
        yield self.expect("POST", f"{V2}/clusters/other", 404, body)

    @defer.inlineCallbacks
    def test_cluster_in_use_not_deleted(self):
        """A cluster a tenant is allowed on cannot be deleted (412)."""
        yield self.expect("DELETE", f"{V2}/clusters/standalone", 412)

    @defer.inlineCallbacks
    def test_bad_cluster_data(self):
        yield self.expect("PUT", f"{V2}/clusters/x", 400, raw=b"{not json")
        yield self.expect("PUT", f"{V2}/clusters/x", 400, {"serviceUrl": 5})
        yield self.expect("PUT", f"{V2}/clusters/x", 400, ["a"])


class TenantTests(WebTestCase):
    @defer.inlineCallbacks
    def test_crud(self):
        """Create, read back, update, list, delete a tenant."""
        yield self.expect("PUT", f"{V2}/tenants/acme", 204, {"adminRoles": ["root"], "allowedClusters": ["standalone"]})
        info = yield self.expect("GET", f"{V2}/tenants/acme", 200)
        self.assertEqual(info, {"adminRoles": ["root"], "allowedClusters": ["standalone"]})
        yield self.expect("POST", f"{V2}/tenants/acme", 204, {"adminRoles": ["a", "b"], "allowedClusters": []})
        self.assertEqual((yield self.expect("GET", f"{V2}/tenants/acme", 200))["adminRoles"], ["a", "b"])
        self.assertEqual(sorted((yield self.expect("GET", f"{V2}/tenants", 200))), ["acme", "public"])
        yield self.expect("DELETE", f"{V2}/tenants/acme", 204)
        yield self.expect("GET", f"{V2}/tenants/acme", 404)

    @defer.inlineCallbacks
    def test_duplicate_conflicts(self):
        yield self.expect("PUT", f"{V2}/tenants/acme", 204, {"allowedClusters": ["standalone"]})
        body = yield self.expect("PUT", f"{V2}/tenants/acme", 409, {"allowedClusters": ["standalone"]})
        self.assertIn("reason", body)

    @defer.inlineCallbacks
    def test_unknown_cluster_precondition(self):
        """allowedClusters naming a cluster that does not exist: 412."""
        yield self.expect("PUT", f"{V2}/tenants/acme", 412, {"allowedClusters": ["nowhere"]})
        yield self.expect("GET", f"{V2}/tenants/acme", 404)

    @defer.inlineCallbacks
    def test_non_empty_tenant_not_deleted(self):
        """A tenant with namespaces: 409; with ?force=true everything goes."""
        yield self.expect("PUT", f"{V2}/tenants/acme", 204, {"allowedClusters": ["standalone"]})
        yield self.expect("PUT", f"{V2}/namespaces/acme/ns", 204)
        yield self.expect("DELETE", f"{V2}/tenants/acme", 409)
        yield self.expect("DELETE", f"{V2}/tenants/acme?force=true", 204)
        yield self.expect("GET", f"{V2}/namespaces/acme", 404)

    @defer.inlineCallbacks
    def test_bad_input(self):
        """Malformed JSON 400, wrong types 400, invalid names 412, unknown 404: never a crash."""
        yield self.expect("PUT", f"{V2}/tenants/acme", 400, raw=b"{")
        yield self.expect("PUT", f"{V2}/tenants/acme", 400, raw=b"\xff\xfe")
        yield self.expect("PUT", f"{V2}/tenants/acme", 400, {"adminRoles": "root"})
        yield self.expect("PUT", f"{V2}/tenants/a%20b", 412, {})
        yield self.expect("PUT", f"{V2}/tenants/%00", 412, {})
        yield self.expect("GET", f"{V2}/tenants/ghost", 404)
        yield self.expect("DELETE", f"{V2}/tenants/ghost", 404)
        yield self.expect("PATCH", f"{V2}/tenants/acme", 405)
        self.assertEqual(self.flushLoggedErrors(), [])


class NamespaceTests(WebTestCase):
    @defer.inlineCallbacks
    def test_create_list_get_delete(self):
        yield self.expect("PUT", f"{V2}/namespaces/public/ns1", 204)
        self.assertEqual(sorted((yield self.expect("GET", f"{V2}/namespaces/public", 200))),
                         ["public/default", "public/ns1"])
        policies = yield self.expect("GET", f"{V2}/namespaces/public/ns1", 200)
        self.assertEqual(policies["replication_clusters"], ["standalone"])
        self.assertEqual(policies["bundles"]["numBundles"], 4)
        self.assertEqual(len(policies["bundles"]["boundaries"]), 5)
        self.assertEqual(policies["schema_compatibility_strategy"], "UNDEFINED")
        self.assertEqual(policies["auth_policies"]["namespace_auth"], {})
        self.assertNotIn("message_ttl_in_seconds", policies)
        yield self.expect("PUT", f"{V2}/namespaces/public/ns1", 409)
        yield self.expect("DELETE", f"{V2}/namespaces/public/ns1", 204)
        yield self.expect("GET", f"{V2}/namespaces/public/ns1", 404)
        yield self.expect("DELETE", f"{V2}/namespaces/public/ns1", 404)

    @defer.inlineCallbacks
    def test_policies_shape_of_pulsar_4(self):
        """Pulsar 4.x stores null for the deprecated schema_auto_update_compatibility_strategy
        and for is_allow_auto_update_schema (omitted, as every null): neither a new namespace nor
        public/default shows them, in the stored document or in GET;
        schema_compatibility_strategy stays UNDEFINED."""
        from pulsar_twisted.metadata.layout import namespace_path
        from pulsar_twisted.resources.policies import from_json
        yield self.expect("PUT", f"{V2}/namespaces/public/ns4", 204)
        for namespace in ("public/ns4", "public/default"):
            policies = yield self.expect("GET", f"{V2}/namespaces/{namespace}", 200)
            self.assertNotIn("schema_auto_update_compatibility_strategy", policies)
            self.assertNotIn("is_allow_auto_update_schema", policies)
            self.assertEqual(policies["schema_compatibility_strategy"], "UNDEFINED")
            raw, _ = yield self.harness.store.get(namespace_path(namespace))
            self.assertNotIn("schema_auto_update_compatibility_strategy", from_json(raw))

    @defer.inlineCallbacks
    def test_old_document_with_full_still_read(self):
        """A document stored by earlier versions, carrying Pulsar 2.x's "Full" default, is still
        read: GET answers it as stored, and the broker's schemaCompatibilityStrategy applies on
        its topics (the stale default does not hide it)."""
        from pulsar_twisted.metadata.layout import namespace_path
        from pulsar_twisted.resources.policies import from_json, to_json
        yield self.expect("PUT", f"{V2}/namespaces/public/old", 204)
        path = namespace_path("public/old")
        raw, stat = yield self.harness.store.get(path)
        document = from_json(raw)
        document["schema_auto_update_compatibility_strategy"] = "Full"
        yield self.harness.store.put(path, to_json(document), expected_version=stat.version)
        policies = yield self.expect("GET", f"{V2}/namespaces/public/old", 200)
        self.assertEqual(policies["schema_auto_update_compatibility_strategy"], "Full")
        self.harness.config.schemaCompatibilityStrategy = "BACKWARD"
        strategy = yield self.broker.schema_registry.strategy("persistent://public/old/t")
        self.assertEqual(strategy, "BACKWARD")

    @defer.inlineCallbacks
    def test_create_with_policies(self):
        """A Policies body is kept (bundles recomputed for the requested count)."""
        yield self.expect("PUT", f"{V2}/namespaces/public/ns2", 204,
                          {"bundles": {"numBundles": 8}, "message_ttl_in_seconds": 30})
        policies = yield self.expect("GET", f"{V2}/namespaces/public/ns2", 200)
        self.assertEqual(policies["bundles"]["numBundles"], 8)
        self.assertEqual(len(policies["bundles"]["boundaries"]), 9)
        self.assertEqual(policies["message_ttl_in_seconds"], 30)
        yield self.expect("PUT", f"{V2}/namespaces/public/ns3", 412, {"bundles": {"numBundles": 0}})
        yield self.expect("PUT", f"{V2}/namespaces/public/ns3", 400, {"message_ttl_in_seconds": "x"})
        yield self.expect("PUT", f"{V2}/namespaces/public/ns3", 400, raw=b"[1,")

    @defer.inlineCallbacks
    def test_unknown_tenant(self):
        yield self.expect("PUT", f"{V2}/namespaces/ghost/ns", 404)
        yield self.expect("GET", f"{V2}/namespaces/ghost", 404)
        yield self.expect("GET", f"{V2}/namespaces/public/ghost", 404)
        yield self.expect("GET", f"{V2}/namespaces/public/ghost/topics", 404)

    @defer.inlineCallbacks
    def test_namespace_with_topics_not_deleted(self):
        """Deleting a namespace with topics: 409; force deletes the topics too."""
        yield self.expect("PUT", f"{V2}/namespaces/public/busy", 204)
        yield self.expect("PUT", f"{V2}/persistent/public/busy/t1", 204)
        self.assertEqual((yield self.expect("GET", f"{V2}/namespaces/public/busy/topics", 200)),
                         ["persistent://public/busy/t1"])
        yield self.expect("DELETE", f"{V2}/namespaces/public/busy", 409)
        yield self.expect("DELETE", f"{V2}/namespaces/public/busy?force=true", 204)
        self.assertNotIn("public/busy/persistent/t1", (yield self.harness.ml_factory.list_names()))

    @defer.inlineCallbacks
    def test_topics_mode(self):
        yield self.expect("PUT", f"{V2}/persistent/public/default/p", 204)
        yield self.expect("PUT", f"{V2}/non-persistent/public/default/np", 204)
        ns = f"{V2}/namespaces/public/default/topics"
        self.assertEqual((yield self.expect("GET", ns, 200)), ["persistent://public/default/p"])
        self.assertEqual((yield self.expect("GET", ns + "?mode=NON_PERSISTENT", 200)),
                         ["non-persistent://public/default/np"])
        self.assertEqual(len((yield self.expect("GET", ns + "?mode=ALL", 200))), 2)
        yield self.expect("GET", ns + "?mode=BOGUS", 400)


class PolicyTests(WebTestCase):
    ns = f"{V2}/namespaces/public/default"

    @defer.inlineCallbacks
    def check_policy(self, name, value, field=None):
        """Unset -> 204; POST then GET reads it back, persisted in the Policies node; DELETE unsets."""
        path = f"{self.ns}/{name}"
        yield self.expect("GET", path, 204)
        yield self.expect("POST", path, 204, value)
        self.assertEqual((yield self.expect("GET", path, 200)), value)
        if field is not None:
            node = yield self.harness.store.get("/admin/policies/public/default")
            import json
            stored = json.loads(node[0])[field]
            self.assertEqual(stored.get("standalone", stored) if isinstance(stored, dict) and
                             "standalone" in stored else stored, value)
        yield self.expect("DELETE", path, 204)
        yield self.expect("GET", path, 204)

    def test_retention(self):
        return self.check_policy("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
                                 "retention_policies")

    def test_message_ttl(self):
        return self.check_policy("messageTTL", 3600, "message_ttl_in_seconds")

    def test_deduplication(self):
        return self.check_policy("deduplication", True, "deduplicationEnabled")

    def test_max_producers(self):
        return self.check_policy("maxProducersPerTopic", 2, "max_producers_per_topic")

    def test_max_consumers(self):
        return self.check_policy("maxConsumersPerTopic", 3, "max_consumers_per_topic")

    def test_subscription_expiration(self):
        return self.check_policy("subscriptionExpirationTime", 10, "subscription_expiration_time_minutes")

    def test_publish_rate(self):
        return self.check_policy("publishRate", {"publishThrottlingRateInMsg": 10,
                                                 "publishThrottlingRateInByte": -1}, "publishMaxMessageRate")

    def test_dispatch_rate(self):
        return self.check_policy("dispatchRate", {"dispatchThrottlingRateInMsg": 5,
                                                  "dispatchThrottlingRateInByte": 1000,
                                                  "relativeToPublishRate": False, "ratePeriodInSecond": 1},
                                 "topicDispatchRate")

    @defer.inlineCallbacks
    def test_schema_compatibility(self):
        path = f"{self.ns}/schemaCompatibilityStrategy"
        self.assertEqual((yield self.expect("GET", path, 200)), "UNDEFINED")
        yield self.expect("PUT", path, 204, "FULL")
        self.assertEqual((yield self.expect("GET", path, 200)), "FULL")
        yield self.expect("PUT", path, 400, "SOMETIMES")

    @defer.inlineCallbacks
    def test_replication(self):
        path = f"{self.ns}/replication"
        self.assertEqual((yield self.expect("GET", path, 200)), ["standalone"])
        yield self.expect("POST", path, 412, ["nowhere"])
        yield self.expect("POST", path, 204, ["standalone"])
        yield self.expect("DELETE", path, 405)

    @defer.inlineCallbacks
    def test_backlog_quota(self):
        yield self.expect("POST", f"{self.ns}/backlogQuota", 204,
                          {"limitSize": 1024, "policy": "producer_exception"})
        quotas = yield self.expect("GET", f"{self.ns}/backlogQuotaMap", 200)
        self.assertEqual(quotas, {"destination_storage": {"limitSize": 1024, "limitTime": -1,
                                                          "policy": "producer_exception"}})
        yield self.expect("POST", f"{self.ns}/backlogQuota", 400, {"policy": "whatever"})
        yield self.expect("DELETE", f"{self.ns}/backlogQuota", 204)
        self.assertEqual((yield self.expect("GET", f"{self.ns}/backlogQuotaMap", 200)), {})

    @defer.inlineCallbacks
    def test_permissions(self):
        yield self.expect("POST", f"{self.ns}/permissions/alice", 204, ["produce", "consume"])
        self.assertEqual((yield self.expect("GET", f"{self.ns}/permissions", 200)),
                         {"alice": ["consume", "produce"]})
        policies = yield self.expect("GET", self.ns, 200)
        self.assertEqual(policies["auth_policies"]["namespace_auth"], {"alice": ["consume", "produce"]})
        yield self.expect("POST", f"{self.ns}/permissions/bob", 400, ["fly"])
        yield self.expect("DELETE", f"{self.ns}/permissions/alice", 204)
        yield self.expect("DELETE", f"{self.ns}/permissions/alice", 412)
        self.assertEqual((yield self.expect("GET", f"{self.ns}/permissions", 200)), {})

    @defer.inlineCallbacks
    def test_bad_policy_values(self):
        """Wrong types 400, negative counts 412, unknown namespace 404."""
        yield self.expect("POST", f"{self.ns}/messageTTL", 400, "soon")
        yield self.expect("POST", f"{self.ns}/messageTTL", 400, True)
        yield self.expect("POST", f"{self.ns}/messageTTL", 412, -5)
        yield self.expect("POST", f"{self.ns}/deduplication", 400, 1)
        yield self.expect("POST", f"{self.ns}/retention", 400, {"retentionTimeInMinutes": 1})
        yield self.expect("POST", f"{self.ns}/retention", 400, raw=b"{{")
        yield self.expect("POST", f"{V2}/namespaces/public/ghost/messageTTL", 404, 10)
        yield self.expect("GET", f"{V2}/namespaces/public/ghost/retention", 404)

    @defer.inlineCallbacks
    def test_max_producers_applied_to_loaded_topics(self):
        """maxProducersPerTopic set on the namespace refuses the extra producer of a loaded topic."""
        topic = "persistent://public/default/limited"
        yield self.producer(topic, 1, name="p1")
        yield self.expect("POST", f"{self.ns}/maxProducersPerTopic", 204, 1)
        from tests.web.support import settle, T
        from pulsar_twisted.proto import PulsarApi_pb2 as api
        client = self.client()
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=2, request_id=2)))
        yield settle()
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.ProducerBusy)
        yield self.expect("DELETE", f"{self.ns}/maxProducersPerTopic", 204)
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=3, request_id=3)))
        yield settle()
        self.assertEqual(len(client.commands(T.PRODUCER_SUCCESS)), 1)


class BrokerTests(WebTestCase):
    @defer.inlineCallbacks
    def test_brokers_health_leader(self):
        self.assertEqual((yield self.expect("GET", f"{V2}/brokers/standalone", 200)), ["localhost:8080"])
        yield self.expect("GET", f"{V2}/brokers/nowhere", 404)
        self.assertEqual((yield self.expect("GET", f"{V2}/brokers/health", 200)), "ok")
        leader = yield self.expect("GET", f"{V2}/brokers/leaderBroker", 200)
        self.assertEqual(leader["serviceUrl"], "http://127.0.0.1:8080")
