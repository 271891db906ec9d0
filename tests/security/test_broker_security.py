"""Authentication, token refresh, authorization and limits on the broker's binary protocol
(BrokerHarness: real BrokerService and ServerConnection on a task.Clock, StringTransport clients)."""

import base64
import json

from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.logger import LogLevel, capturedLogs
from twisted.trial import unittest

from pulsar_twisted.broker.cnx import BrokerProtocolFactory
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.security import jwt
from pulsar_twisted.testing.broker import BrokerHarness, FakeClient

T = api.BaseCommand
SECRET = b"k" * 32
AUTH = dict(authenticationEnabled=True, authenticationProviders=["token"],
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
            authenticationRefreshCheckSeconds=10)


def token(role, exp=None):
    claims = {"sub": role}
    if exp is not None:
        claims["exp"] = exp
    return jwt.encode(claims, SECRET)


def connect(client, method="token", data=b"", refresh=True):
    command = T(type=T.CONNECT, connect=api.CommandConnect(
        client_version="test", protocol_version=21, auth_method_name=method, auth_data=data))
    command.connect.feature_flags.supports_auth_refresh = refresh
    client.send(command)
    return client.received()


def producer(topic, request_id=1, producer_id=1):
    return T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=producer_id,
                                                           request_id=request_id))


def subscribe(topic, request_id=2, consumer_id=1):
    return T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
        topic=topic, subscription="s", subType=api.CommandSubscribe.Shared, consumer_id=consumer_id,
        request_id=request_id))


class SecurityHarnessCase(unittest.TestCase):
    config = AUTH

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(**self.config)
        self.harness.clock.advance(1000)
        yield self.harness.start()
        self.ports = iter(range(20000, 30000))

    def new_client(self):
        return FakeClient(self.harness, next(self.ports))


class AuthenticationTests(SecurityHarnessCase):
    def test_valid_token_connects_with_role(self):
        """A valid token gives CONNECTED and the connection's role is the token's subject."""
        client = self.new_client()
        frames = connect(client, data=token("alice").encode())
        self.assertEqual([c.type for c, _ in frames], [T.CONNECTED])
        self.assertEqual(client.protocol.role, "alice")

    def test_refusals_have_reason_and_hide_credentials(self):
        """Expired, wrongly signed, missing or unknown-method credentials: AuthenticationError with
        a reason, the connection closed, a log line without the token."""
        cases = [("token", jwt.encode({"sub": "a", "exp": 10}, SECRET), "expired"),
                 ("token", jwt.encode({"sub": "a"}, b"x" * 32), "signature"),
                 ("", "", "no credentials"),
                 ("basic", "a:b", "Unsupported")]
        for method, data, reason in cases:
            client = self.new_client()
            with capturedLogs() as events:
                frames = connect(client, method, data.encode())
            [(command, _)] = frames
            self.assertEqual(command.type, T.ERROR)
            self.assertEqual(command.error.error, api.AuthenticationError)
            self.assertIn(reason, command.error.message)
            self.assertTrue(client.transport.disconnecting)
            text = " ".join(str(e.get("log_format", "")).format(**e) if "log_format" in e else "" for e in events)
            self.assertIn("authentication refused", text)
            if data:
                self.assertNotIn(data, text)

    def test_no_auth_when_disabled(self):
        """With authenticationEnabled off credentials are ignored and the role is None."""
        harness = BrokerHarness()
        self.successResultOf(harness.start())
        client = harness.client()
        self.assertIsNone(client.protocol.role)


class RefreshTests(SecurityHarnessCase):
    def test_challenge_answered_keeps_connection(self):
        """An expired token triggers AUTH_CHALLENGE; a fresh token answer keeps the connection."""
        client = self.new_client()
        connect(client, data=token("alice", exp=1015).encode())
        self.harness.clock.advance(10)
        self.assertEqual(client.commands(), [])  # not expired yet
        self.harness.clock.advance(10)
        [challenge] = client.commands(T.AUTH_CHALLENGE)
        self.assertEqual(challenge.authChallenge.challenge.auth_method_name, "token")
        response = T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
            response=api.AuthData(auth_method_name="token", auth_data=token("alice", exp=1100).encode())))
        client.send(response)
        for _ in range(5):
            self.harness.clock.advance(10)
        self.assertFalse(client.transport.disconnecting)
        self.harness.clock.advance(40)  # 1100 passed: challenged again
        self.assertEqual(len(client.commands(T.AUTH_CHALLENGE)), 1)

    def test_unanswered_challenge_closes(self):
        client = self.new_client()
        connect(client, data=token("alice", exp=1005).encode())
        self.harness.clock.advance(10)
        self.assertEqual(len(client.commands(T.AUTH_CHALLENGE)), 1)
        self.assertFalse(client.transport.disconnecting)
        self.harness.clock.advance(10)
        self.assertTrue(client.transport.disconnecting)

    def test_invalid_answer_or_other_role_closes(self):
        for data in (token("alice", exp=900), token("mallory", exp=5000), "junk"):
            client = self.new_client()
            connect(client, data=token("alice", exp=self.harness.clock.seconds() + 5).encode())
            self.harness.clock.advance(10)
            client.send(T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
                response=api.AuthData(auth_method_name="token", auth_data=data.encode()))))
            [error] = client.commands(T.ERROR)
            self.assertEqual(error.error.error, api.AuthenticationError)
            self.assertTrue(client.transport.disconnecting)

    def test_client_without_refresh_support_is_closed(self):
        client = self.new_client()
        connect(client, data=token("alice", exp=1005).encode(), refresh=False)
        self.harness.clock.advance(10)
        self.assertEqual(client.commands(T.AUTH_CHALLENGE), [])
        self.assertTrue(client.transport.disconnecting)

    def test_closed_connection_stops_checks(self):
        client = self.new_client()
        connect(client, data=token("alice", exp=1005).encode())
        client.close()
        self.assertEqual(self.harness.broker.security.sessions, {})


class AuthorizationTests(SecurityHarnessCase):
    config = dict(AUTH, authorizationEnabled=True, superUserRoles=["admin"])

    def grant(self, role, actions, topic=None):
        @defer.inlineCallbacks
        def change():
            path = "/admin/policies/public/default"
            value, stat = yield self.harness.store.get(path)
            policies = json.loads(value)
            auth = policies.setdefault("auth_policies", {})
            if topic is None:
                auth.setdefault("namespace_auth", {})[role] = actions
            else:
                auth.setdefault("destination_auth", {}).setdefault(topic, {})[role] = actions
            yield self.harness.store.put(path, json.dumps(policies).encode(), expected_version=stat.version)
        self.successResultOf(change())
        self.harness.pump()

    def as_role(self, role):
        client = self.new_client()
        connect(client, data=token(role).encode())
        return client

    def test_produce_needs_permission(self):
        """Without produce: AuthorizationError and no topic is created; a grant allows it."""
        topic = "persistent://public/default/t1"
        client = self.as_role("bob")
        client.send(producer(topic))
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthorizationError)
        self.assertIn("not authorized to produce", error.error.message)
        self.assertNotIn(topic, self.harness.broker.topics)
        self.assertEqual(self.successResultOf(self.harness.ml_factory.list_names()), [])
        self.grant("bob", ["produce"])
        client.send(producer(topic, request_id=3))
        self.assertEqual(len(client.commands(T.PRODUCER_SUCCESS)), 1)

    def test_consume_needs_permission_topic_level(self):
        topic = "persistent://public/default/t2"
        client = self.as_role("carol")
        client.send(subscribe(topic))
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthorizationError)
        self.grant("carol", ["consume"], topic=topic)
        client.send(subscribe(topic, request_id=5))
        self.assertEqual(len(client.commands(T.SUCCESS)), 1)
        # consume does not give produce
        client.send(producer(topic, request_id=6))
        self.assertEqual(client.commands(T.ERROR)[0].error.error, api.AuthorizationError)

    def test_lookup_and_super_user(self):
        lookup = T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(
            topic="persistent://public/default/t3", request_id=7))
        client = self.as_role("dave")
        client.send(lookup)
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.error, api.AuthorizationError)
        admin = self.as_role("admin")
        admin.send(lookup)
        [answer] = admin.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.response, api.CommandLookupTopicResponse.Connect)
        admin.send(producer("persistent://public/default/t3"))
        self.assertEqual(len(admin.commands(T.PRODUCER_SUCCESS)), 1)

    def test_tenant_admin_may_produce(self):
        path = "/admin/policies/public"
        value, stat = self.successResultOf(self.harness.store.get(path))
        info = json.loads(value)
        info["adminRoles"] = ["ops"]
        self.successResultOf(self.harness.store.put(path, json.dumps(info).encode(),
                                                    expected_version=stat.version))
        client = self.as_role("ops")
        client.send(producer("persistent://public/default/t4"))
        self.assertEqual(len(client.commands(T.PRODUCER_SUCCESS)), 1)


    def test_check_topic_refuses_without_permission(self):
        """With authorization on, check_topic still asks the policies: refused without a grant
        (AuthorizationError), InvalidTopicName for a name that does not parse, allowed after a grant."""
        security = self.harness.broker.security
        client = self.as_role("erin")
        topic = "persistent://public/default/t5"
        failure = self.failureResultOf(security.check_topic(client.protocol, topic, "produce"))
        failure.trap(errors.AuthorizationError)
        failure = self.failureResultOf(security.check_topic(client.protocol, "persistent://a/b/c/d/e", "lookup"))
        failure.trap(errors.InvalidTopicName)
        self.grant("erin", ["produce"])
        self.assertIsNone(self.successResultOf(security.check_topic(client.protocol, topic, "produce")))


class AuthorizationOffTests(SecurityHarnessCase):
    """Authorization off (the default): the checks have already fired when they return."""

    config = {}

    def test_check_topic_has_fired(self):
        """check_topic and authorized answer at once (no coroutine per request) and never parse
        the name, as before: any role may do anything."""
        security = self.harness.broker.security
        cnx = self.new_client().protocol
        for action in ("lookup", "produce", "consume"):
            self.assertIsNone(self.successResultOf(security.check_topic(cnx, "persistent://public/default/x", action)))
        self.assertIsNone(self.successResultOf(security.check_topic(cnx, "not//a topic", "produce")))
        self.assertIsNone(self.successResultOf(
            security.authorized(cnx, T.GET_TOPICS_OF_NAMESPACE, namespace="public/default")))
        self.assertIsNone(self.successResultOf(security.authorized(None, T.PRODUCER, topic="x")))

    def test_command_without_rule_refused(self):
        """A command with no authorization rule is refused even with authorization off."""
        security = self.harness.broker.security
        cnx = self.new_client().protocol
        self.failureResultOf(security.authorize_command(cnx, 9999, topic="persistent://public/default/x"),
                             errors.AuthorizationError)


class LimitTests(unittest.TestCase):
    def test_max_connections(self):
        """brokerMaxConnections and brokerMaxConnectionsPerIp refuse connections at accept time."""
        harness = BrokerHarness(brokerMaxConnections=3, brokerMaxConnectionsPerIp=2)
        self.successResultOf(harness.start())
        factory = BrokerProtocolFactory(harness.broker, harness.clock)
        from twisted.internet.testing import StringTransport
        accepted = []
        for n, host in enumerate(["10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3"]):
            addr = IPv4Address("TCP", host, 5000 + n)
            proto = factory.buildProtocol(addr)
            if proto is not None:
                proto.makeConnection(StringTransport(peerAddress=addr))
                accepted.append(proto)
            else:
                accepted.append(None)
        self.assertEqual([p is not None for p in accepted], [True, True, False, True, False])
        accepted[0].connectionLost(None)
        self.assertIsNotNone(factory.buildProtocol(IPv4Address("TCP", "10.0.0.3", 6000)))

    def test_max_concurrent_lookups(self):
        """Past maxConcurrentLookupRequest a lookup fails with TooManyRequests."""
        harness = BrokerHarness(maxConcurrentLookupRequest=1)
        self.successResultOf(harness.start())
        security = harness.broker.security
        security.lookup_started()  # one lookup in flight
        client = harness.client()
        client.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="t", request_id=1)))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.error, api.TooManyRequests)
        security.lookup_finished()
        client.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="t", request_id=2)))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.response, api.CommandLookupTopicResponse.Connect)
        self.assertEqual(security.pending_lookups, 0)
