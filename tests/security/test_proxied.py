"""Connections a proxy opens for its clients, on the broker (security/proxied.py): proxyRoles and
original_principal as Pulsar >= 3.0 checks them, both roles authorized, forwarded credentials
authenticated and refreshed (BrokerHarness: real BrokerService and ServerConnection on a Clock)."""

import json

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.security.proxied import INVALID_ROLES
from pulsar_twisted.testing.broker import BrokerHarness, FakeClient
from tests.security.test_broker_security import AUTH, producer, token

T = api.BaseCommand
PROXIED = dict(AUTH, proxyRoles=["proxy"], authorizationEnabled=True, superUserRoles=["admin"])


def connect_as_proxy(client, proxy_token, original=None, forwarded=None, refresh=True):
    command = T(type=T.CONNECT, connect=api.CommandConnect(
        client_version="proxy", protocol_version=21, auth_method_name="token",
        auth_data=proxy_token.encode()))
    if original is not None:
        command.connect.original_principal = original
    if forwarded is not None:
        command.connect.original_auth_method = "token"
        command.connect.original_auth_data = forwarded.encode()
    command.connect.feature_flags.supports_auth_refresh = refresh
    client.send(command)
    return client.received()


class ProxiedCase(unittest.TestCase):
    config = PROXIED

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(**self.config)
        self.harness.clock.advance(1000)
        yield self.harness.start()
        self.ports = iter(range(20000, 30000))

    def new_client(self):
        return FakeClient(self.harness, next(self.ports))

    def grant(self, role, actions):
        path = "/admin/policies/public/default"
        value, stat = self.successResultOf(self.harness.store.get(path))
        policies = json.loads(value)
        policies.setdefault("auth_policies", {}).setdefault("namespace_auth", {})[role] = actions
        self.successResultOf(self.harness.store.put(path, json.dumps(policies).encode(),
                                                    expected_version=stat.version))

    def assert_refused(self, frames, client):
        [(error, _)] = frames
        self.assertEqual((error.type, error.error.error, error.error.message),
                         (T.ERROR, api.AuthorizationError, INVALID_ROLES))
        self.assertTrue(client.transport.disconnecting)


class RoleCombinationTests(ProxiedCase):
    def test_non_proxy_role_with_original_principal_refused(self):
        """A role outside proxyRoles may not speak for anyone: "Invalid roles." (AuthorizationError)."""
        client = self.new_client()
        self.assert_refused(connect_as_proxy(client, token("mallory"), original="admin"), client)

    def test_proxy_role_without_original_principal_refused(self):
        """A proxy role must say whom it proxies (else it would act with its own rights)."""
        client = self.new_client()
        self.assert_refused(connect_as_proxy(client, token("proxy")), client)

    def test_original_principal_cannot_be_a_proxy_role(self):
        client = self.new_client()
        self.assert_refused(connect_as_proxy(client, token("proxy"), original="proxy"), client)

    def test_proxy_with_original_principal_connects(self):
        """The valid combination: CONNECTED, the role is the proxy's, the original principal kept."""
        client = self.new_client()
        [(connected, _)] = connect_as_proxy(client, token("proxy"), original="alice")
        self.assertEqual(connected.type, T.CONNECTED)
        self.assertEqual((client.protocol.role, client.protocol.original_principal), ("proxy", "alice"))

    def test_direct_client_unchanged(self):
        client = self.new_client()
        [(connected, _)] = connect_as_proxy(client, token("alice"))
        self.assertEqual(connected.type, T.CONNECTED)
        self.assertIsNone(client.protocol.original_principal)


class BothRolesAuthorizedTests(ProxiedCase):
    def test_both_roles_need_the_permission(self):
        """Pulsar >= 3.0: the proxy role and the original principal must each be allowed."""
        topic = "persistent://public/default/both"
        client = self.new_client()
        connect_as_proxy(client, token("proxy"), original="alice")
        self.grant("alice", ["produce"])
        client.send(producer(topic))
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthorizationError)
        self.assertIn("Role proxy is not authorized", error.error.message)
        self.grant("proxy", ["produce"])
        client.send(producer(topic, request_id=2))
        self.assertEqual(len(client.commands(T.PRODUCER_SUCCESS)), 1)

    def test_original_principal_without_permission_refused(self):
        """A super-user proxy does not lend its rights to a client that has none."""
        config = dict(PROXIED, superUserRoles=["proxy"])
        harness = BrokerHarness(**config)
        harness.clock.advance(1000)
        self.successResultOf(harness.start())
        client = FakeClient(harness, 1)
        connect_as_proxy(client, token("proxy"), original="eve")
        client.send(producer("persistent://public/default/eve"))
        [error] = client.commands(T.ERROR)
        self.assertIn("Role eve is not authorized", error.error.message)


class ForwardedCredentialsTests(ProxiedCase):
    config = dict(PROXIED, authenticateOriginalAuthData=True, authorizationEnabled=False)

    def test_forwarded_credentials_must_name_the_original_principal(self):
        client = self.new_client()
        self.assert_refused(connect_as_proxy(client, token("proxy"), original="alice",
                                             forwarded=token("bob")), client)

    def test_bad_forwarded_credentials_refused(self):
        client = self.new_client()
        [(error, _)] = connect_as_proxy(client, token("proxy"), original="alice", forwarded="junk")
        self.assertEqual(error.error.error, api.AuthenticationError)

    def test_client_credentials_refreshed_through_the_proxy(self):
        """The broker challenges for the *client's* expiring token; the client's answer (relayed
        by the proxy) refreshes it; the proxy's own token is not challenged."""
        now = self.harness.clock.seconds()
        client = self.new_client()
        [(connected, _)] = connect_as_proxy(client, token("proxy", exp=now + 5), original="alice",
                                            forwarded=token("alice", exp=now + 15))
        self.assertEqual(connected.type, T.CONNECTED)
        self.harness.clock.advance(10)     # the proxy's token has expired: no challenge for it
        self.assertEqual(client.commands(T.AUTH_CHALLENGE), [])
        self.harness.clock.advance(10)     # the client's has: challenged
        self.assertEqual(len(client.commands(T.AUTH_CHALLENGE)), 1)
        answer = T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
            response=api.AuthData(auth_method_name="token",
                                  auth_data=token("alice", exp=now + 100).encode())))
        client.send(answer)
        self.harness.clock.advance(10)
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(client.commands(T.AUTH_CHALLENGE), [])
