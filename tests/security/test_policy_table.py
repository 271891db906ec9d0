"""
The authorization table (security/policy_table.py): complete for every route and command, and
each rule class checked for alice (produce+consume on acme/ns), bob (no grant), admin (super
user), acme-admin (tenant admin) and an anonymous caller.
"""

import base64
import json
import types

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.broker.cnx import ServerConnection
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.security import jwt, policy_table
from pulsar_twisted.testing.broker import BrokerHarness, FakeClient
from pulsar_twisted.web.site import make_router, make_v3_router
from tests.web.support import WebTestCase

T = api.BaseCommand
SECRET = b"p" * 32
ROLES = ("alice", "bob", "admin", "acme-admin", None)
CONFIG = dict(authenticationEnabled=True, authorizationEnabled=True, superUserRoles=["admin"],
              authenticationProviders=["token"],
              tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode())


def bearer(role):
    if role is None:
        return {}
    return {b"Authorization": [b"Bearer " + jwt.encode({"sub": role}, SECRET).encode()]}


def all_routes():
    """The v2 table and the functions worker's v3 table (the site serves both)."""
    admin = types.SimpleNamespace(broker=None)
    return make_router(admin, StandaloneConfig()).routes + make_v3_router(lambda: None).routes


class CompletenessTests(unittest.TestCase):
    def test_every_route_has_a_rule(self):
        """Every route of the web router has an entry in HTTP_RULES (a new route cannot skip it)."""
        missing = [(r.method, r.template) for r in all_routes()
                   if policy_table.http_rule(r.method, r.template) is None]
        self.assertEqual(missing, [])

    def test_no_rule_without_route(self):
        """Every entry of HTTP_RULES names a route that exists (no stale rules)."""
        keys = {policy_table.route_key(r.method, r.template) for r in all_routes()}
        self.assertEqual(sorted(set(policy_table.HTTP_RULES) - keys), [])

    def test_every_command_has_a_rule(self):
        """Every command ServerConnection dispatches has an entry in BINARY_RULES, and no more."""
        config = StandaloneConfig()
        service = types.SimpleNamespace(config=config)
        handled = set(ServerConnection(service, task.Clock())._handlers)
        self.assertEqual({T.Type.Name(t) for t in handled - set(policy_table.BINARY_RULES)}, set())
        self.assertEqual({T.Type.Name(t) for t in set(policy_table.BINARY_RULES) - handled}, set())

    def test_route_key_spells_the_domain(self):
        """Both literal domains map to one {domain} key; schema routes default to persistent."""
        self.assertEqual(policy_table.route_key("GET", "/admin/v2/non-persistent/{tenant}/x"),
                         ("GET", "/admin/v2/{domain}/{tenant}/x"))
        self.assertEqual(policy_table.domain_of("/admin/v2/schemas/{tenant}"), "persistent")


# What each role gets, per rule class: "ok" means past authorization (any answer but 401/403).
EXPECTED = {
    "super_user": {"alice": 403, "bob": 403, "admin": "ok", "acme-admin": 403, None: 401},
    "tenant_admin": {"alice": 403, "bob": 403, "admin": "ok", "acme-admin": "ok", None: 401},
    "lookup": {"alice": "ok", "bob": 403, "admin": "ok", "acme-admin": "ok", None: 401},
    "consume": {"alice": "ok", "bob": 403, "admin": "ok", "acme-admin": "ok", None: 401},
    "get_topics": {"alice": "ok", "bob": 403, "admin": "ok", "acme-admin": "ok", None: 401},
    "authenticated": {"alice": "ok", "bob": "ok", "admin": "ok", "acme-admin": "ok", None: 401},
    "public": {"alice": "ok", "bob": "ok", "admin": "ok", "acme-admin": "ok", None: "ok"},
}

TOPIC = "/admin/v2/persistent/acme/ns/t"
SCHEMA = "/admin/v2/schemas/acme/ns/t/schema"
SCHEMA_BODY = {"type": "STRING", "schema": "", "properties": {}}

#: (method, path, body, rule class): at least one route per rule, the issue's holes first.
HTTP_CASES = [
    ("GET", SCHEMA, None, "lookup"),
    ("GET", "/admin/v2/schemas/acme/ns/t/schemas", None, "lookup"),
    ("POST", SCHEMA, SCHEMA_BODY, "tenant_admin"),
    ("DELETE", SCHEMA, None, "tenant_admin"),
    ("GET", "/admin/v2/brokers/health", None, "super_user"),
    ("GET", "/admin/v2/brokers/leaderBroker", None, "super_user"),
    ("GET", "/admin/v2/brokers/standalone", None, "super_user"),
    ("GET", "/admin/v2/clusters/standalone", None, "super_user"),
    ("GET", "/admin/v2/tenants", None, "super_user"),
    ("GET", "/admin/v2/tenants/acme", None, "super_user"),
    ("GET", "/admin/v2/clusters", None, "authenticated"),
    ("GET", "/admin/v2/brokers/ready", None, "authenticated"),
    ("GET", "/admin/v2/namespaces/acme", None, "tenant_admin"),
    ("GET", "/admin/v2/namespaces/acme/ns/retention", None, "tenant_admin"),
    ("GET", "/admin/v2/namespaces/acme/ns/topics", None, "get_topics"),
    ("GET", "/admin/v2/persistent/acme/ns", None, "get_topics"),
    ("GET", f"{TOPIC}/partitions", None, "lookup"),
    ("GET", f"{TOPIC}/stats", None, "lookup"),
    ("GET", f"{TOPIC}/subscriptions", None, "consume"),
    ("PUT", f"{TOPIC}/unload", None, "tenant_admin"),
    ("GET", f"{TOPIC}/permissions", None, "tenant_admin"),
    ("GET", "/lookup/v2/topic/persistent/acme/ns/t", None, "lookup"),
    ("GET", "/metrics", None, "public"),
]


class HttpRuleTests(WebTestCase):
    """Each rule class over HTTP, on tenant acme (admin acme-admin), alice granted on acme/ns."""

    config = CONFIG

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        cluster = self.harness.config.clusterName
        yield self.expect("PUT", "/admin/v2/tenants/acme", 204,
                          {"adminRoles": ["acme-admin"], "allowedClusters": [cluster]},
                          headers=bearer("admin"))
        yield self.expect("PUT", "/admin/v2/namespaces/acme/ns", 204, headers=bearer("admin"))
        yield self.expect("POST", "/admin/v2/namespaces/acme/ns/permissions/alice", 204,
                          ["produce", "consume"], headers=bearer("admin"))
        yield self.expect("PUT", TOPIC, 204, headers=bearer("admin"))
        yield self.expect("POST", SCHEMA, 200, SCHEMA_BODY, headers=bearer("admin"))

    @defer.inlineCallbacks
    def test_rules_by_role(self):
        """Every case answers each role as its rule says (401 anonymous, 403 refused)."""
        wrong = []
        for method, path, body, rule in HTTP_CASES:
            for role in ROLES:
                if method == "DELETE" and EXPECTED[rule][role] == "ok":
                    continue   # deletions that pass are checked in test_schema_writes_need_tenant_admin
                status, content, _ = yield self.request(method, path, body, headers=bearer(role))
                want = EXPECTED[rule][role]
                if (want == "ok" and status in (401, 403)) or (want != "ok" and status != want):
                    wrong.append((method, path, role, status, content))
        self.assertEqual(wrong, [])

    @defer.inlineCallbacks
    def test_schema_writes_need_tenant_admin(self):
        """bob and alice cannot post or delete acme's schema: it is still there; acme-admin can."""
        for role in ("bob", "alice"):
            yield self.expect("DELETE", SCHEMA, 403, headers=bearer(role))
            yield self.expect("POST", SCHEMA, 403, {"type": "JSON", "schema": "{}"}, headers=bearer(role))
        found = yield self.expect("GET", SCHEMA, 200, headers=bearer("alice"))
        self.assertEqual((found["type"], found["version"]), ("STRING", 0))
        yield self.expect("DELETE", SCHEMA, 200, headers=bearer("acme-admin"))
        yield self.expect("GET", SCHEMA, 404, headers=bearer("alice"))


class MetricsAuthenticationTests(WebTestCase):
    """authenticateMetricsEndpoint=true: 401 anonymous, 403 for roles neither super user nor in
    metricsRoles, 200 for both (Pulsar's MetricsAuthenticationTest)."""

    config = dict(CONFIG, authenticateMetricsEndpoint=True, metricsRoles=["scraper"])

    @defer.inlineCallbacks
    def test_metrics_roles(self):
        for role, status in ((None, 401), ("bob", 403), ("admin", 200), ("scraper", 200)):
            code, _, _ = yield self.request("GET", "/metrics", headers=bearer(role))
            self.assertEqual((role, code), (role, status))


def token_connect(client, role):
    client.send(T(type=T.CONNECT, connect=api.CommandConnect(
        client_version="test", protocol_version=21, auth_method_name="token",
        auth_data=jwt.encode({"sub": role}, SECRET).encode())))
    [connected] = client.commands(T.CONNECTED)
    return client


BINARY_TOPIC = "persistent://acme/ns/t"
BINARY_CASES = [
    # (command, how to read the answer's error code, rule class)
    (T(type=T.PARTITIONED_METADATA, partitionMetadata=api.CommandPartitionedTopicMetadata(
        topic=BINARY_TOPIC, request_id=1)), T.PARTITIONED_METADATA_RESPONSE,
     lambda c: c.partitionMetadataResponse.error if c.partitionMetadataResponse.HasField("error")
     else None, "lookup"),
    (T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=api.CommandGetTopicsOfNamespace(
        namespace="acme/ns", request_id=2)), None, None, "get_topics"),
    (T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic=BINARY_TOPIC, request_id=3)),
     T.LOOKUP_RESPONSE, lambda c: c.lookupTopicResponse.error
     if c.lookupTopicResponse.HasField("error") else None, "lookup"),
    (T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(topic=BINARY_TOPIC, request_id=4)),
     T.GET_SCHEMA_RESPONSE, lambda c: c.getSchemaResponse.error_code
     if c.getSchemaResponse.HasField("error_code") else None, "lookup"),
    (T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=api.CommandGetOrCreateSchema(
        topic=BINARY_TOPIC, request_id=5, schema=api.Schema(name="s", schema_data=b"",
                                                            type=api.Schema.String))),
     T.GET_OR_CREATE_SCHEMA_RESPONSE, lambda c: c.getOrCreateSchemaResponse.error_code
     if c.getOrCreateSchemaResponse.HasField("error_code") else None, "produce"),
    (T(type=T.PRODUCER, producer=api.CommandProducer(topic=BINARY_TOPIC, producer_id=1,
                                                     request_id=6)), None, None, "produce"),
    (T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
        topic=BINARY_TOPIC, subscription="s", subType=api.CommandSubscribe.Shared, consumer_id=1,
        request_id=7)), None, None, "consume"),
]

BINARY_EXPECTED = {
    "lookup": {"alice": True, "bob": False, "admin": True, "acme-admin": True, "carol": True},
    "get_topics": {"alice": True, "bob": False, "admin": True, "acme-admin": True, "carol": False},
    "produce": {"alice": True, "bob": False, "admin": True, "acme-admin": True, "carol": False},
    "consume": {"alice": True, "bob": False, "admin": True, "acme-admin": True, "carol": True},
}


class BinaryRuleTests(unittest.TestCase):
    """Each rule class over the binary protocol; carol has only a topic-level consume grant,
    which gives lookups but not the namespace's topic list (Pulsar's GET_TOPICS)."""

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(**CONFIG)
        self.harness.clock.advance(1000)
        yield self.harness.start()
        store = self.harness.store
        tenant, _ = yield store.get("/admin/policies/public")
        info = json.loads(tenant)
        info["adminRoles"] = ["acme-admin"]
        yield store.put("/admin/policies/acme", json.dumps(info).encode(), expected_version=-1)
        policies, _ = yield store.get("/admin/policies/public/default")
        policies = json.loads(policies)
        policies["auth_policies"] = {
            "namespace_auth": {"alice": ["produce", "consume"]},
            "destination_auth": {BINARY_TOPIC: {"carol": ["consume"]}}}
        yield store.put("/admin/policies/acme/ns", json.dumps(policies).encode(), expected_version=-1)
        self.ports = iter(range(20000, 30000))

    def answer_error(self, role, command, kind, error_of):
        client = token_connect(FakeClient(self.harness, next(self.ports)), role)
        client.send(command)
        frames = client.commands()
        self.assertTrue(frames, f"no answer to {T.Type.Name(command.type)} for {role}")
        errors = [c.error.error for c in frames if c.type == T.ERROR]
        if kind is not None:
            errors += [error_of(c) for c in frames if c.type == kind]
        return [e for e in errors if e is not None]

    def test_rules_by_role(self):
        """AuthorizationError exactly where the rule refuses the role; other answers otherwise."""
        wrong = []
        for command, kind, error_of, rule in BINARY_CASES:
            for role, allowed in BINARY_EXPECTED[rule].items():
                got = self.answer_error(role, command, kind, error_of)
                refused = api.AuthorizationError in got
                if refused == allowed:
                    wrong.append((T.Type.Name(command.type), role, got))
        self.assertEqual(wrong, [])

    def test_refused_schema_creation_stores_nothing(self):
        """bob's GET_OR_CREATE_SCHEMA and PRODUCER with a schema add no schema version."""
        command, kind, error_of, _ = BINARY_CASES[4]
        self.assertIn(api.AuthorizationError, self.answer_error("bob", command, kind, error_of))
        client = token_connect(FakeClient(self.harness, next(self.ports)), "bob")
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic=BINARY_TOPIC, producer_id=1, request_id=9,
            schema=api.Schema(name="s", schema_data=b"{}", type=api.Schema.Json))))
        self.assertEqual([c.error.error for c in client.commands(T.ERROR)], [api.AuthorizationError])
        versions = self.successResultOf(self.harness.broker.schema_registry.versions(BINARY_TOPIC))
        self.assertEqual(list(versions), [])


class FailClosedTests(unittest.TestCase):
    def test_route_without_rule_is_refused(self):
        """A route missing from the table is answered 403 and its handler never runs."""
        from twisted.web.test.requesthelper import DummyRequest
        from pulsar_twisted.security.http import SecuredResource
        from pulsar_twisted.web.routing import Router, RouterResource
        ran = []
        router = Router()
        router.add("GET", "/admin/v2/brand-new/{tenant}", lambda request, tenant: ran.append(tenant))
        security = types.SimpleNamespace(authn=None, authz=None, authenticate_metrics=False,
                                         metrics_roles=frozenset())
        request = DummyRequest([b"admin", b"v2", b"brand-new", b"acme"])
        request.method, request.path = b"GET", b"/admin/v2/brand-new/acme"
        body = SecuredResource(RouterResource(router), security).render(request)
        self.assertEqual(request.responseCode, 403)
        self.assertIn("No authorization rule", json.loads(body)["reason"])
        self.assertEqual(ran, [])
