"""
Authentication fallback to ``anonymousUserRole`` (issue 13 item 1): a CONNECT or an HTTP request
whose method names no configured provider gets the anonymous role when one is set (then meets
authorization), and is refused without one; a configured provider's refusal is never bypassed on
the binary protocol.
"""

import base64

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.common.errors import AuthenticationError
from pulsar_twisted.daemons.standalone import StandaloneConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.security import jwt
from pulsar_twisted.security.auth import AuthenticationService, Credentials
from tests.security.test_broker_security import AUTH, SECRET, SecurityHarnessCase, connect, producer, token
from tests.web.support import WebTestCase

T = api.BaseCommand
SECRET_SPEC = "data:;base64," + base64.b64encode(SECRET).decode()


def service(**config):
    return AuthenticationService(StandaloneConfig(authenticationEnabled=True, **config), task.Clock())


class ServiceFallbackTests(unittest.TestCase):
    def test_unknown_method_gets_anonymous_role(self):
        """basic/none/empty on a token-only broker with anonymousUserRole: the anonymous role."""
        authn = service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"],
                        anonymousUserRole="guest")
        for method in ("basic", "none", "", "sasl"):
            identity = authn.authenticate(Credentials(method, b"a:b"))
            self.assertEqual((identity.role, identity.method), ("guest", "none"))

    def test_unknown_method_refused_without_anonymous_role(self):
        authn = service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"])
        e = self.assertRaises(AuthenticationError, authn.authenticate, Credentials("basic", b"a:b"))
        self.assertIn("Unsupported authentication method: basic", str(e))

    def test_configured_provider_refusal_is_kept(self):
        """A bad token is refused even with an anonymous role (the provider decides its method)."""
        authn = service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"],
                        anonymousUserRole="guest")
        self.assertRaises(AuthenticationError, authn.authenticate, Credentials("token", b"junk"))
        self.assertEqual(authn.authenticate(Credentials("token", token("ann").encode())).role, "ann")

    def test_http_fallback(self):
        """HTTP: no proof, an unconfigured scheme or a refused one give the anonymous role;
        X-Pulsar-Auth-Method-Name picks one provider, which decides alone."""
        authn = service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"],
                        anonymousUserRole="guest")
        basic = b"Basic " + base64.b64encode(b"u:p")
        for header in (None, basic, b"Bearer junk", b"Digest x"):
            self.assertEqual(authn.authenticate_http(header).role, "guest")
        good = b"Bearer " + token("ann").encode()
        self.assertEqual(authn.authenticate_http(good).role, "ann")
        self.assertEqual(authn.authenticate_http(good, method_name=b"token").role, "ann")
        self.assertRaises(AuthenticationError, authn.authenticate_http, b"Bearer junk", method_name=b"token")
        e = self.assertRaises(AuthenticationError, authn.authenticate_http, basic, method_name=b"basic")
        self.assertIn("Unsupported authentication method", str(e))
        strict = service(tokenSecretKey=SECRET_SPEC, authenticationProviders=["token"])
        for header in (None, basic, b"Bearer junk"):
            self.assertRaises(AuthenticationError, strict.authenticate_http, header)


class BinaryFallbackTests(SecurityHarnessCase):
    config = dict(AUTH, anonymousUserRole="guest", authorizationEnabled=True, superUserRoles=["admin"])

    def test_unknown_method_connects_as_anonymous_then_authorization_refuses(self):
        """CONNECT with method basic on a token-only broker: CONNECTED as the anonymous role, and
        a producer then gets AuthorizationError (no authentication retry loop)."""
        client = self.new_client()
        frames = connect(client, method="basic", data=b"user:password")
        self.assertEqual([c.type for c, _ in frames], [T.CONNECTED])
        self.assertEqual(client.protocol.role, "guest")
        client.send(producer("persistent://public/default/anon"))
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthorizationError)
        self.assertIn("guest", error.error.message)

    def test_bad_token_still_refused(self):
        client = self.new_client()
        [(command, _)] = connect(client, data=jwt.encode({"sub": "a"}, b"x" * 32).encode())
        self.assertEqual(command.error.error, api.AuthenticationError)
        self.assertTrue(client.transport.disconnecting)


class BinaryNoAnonymousTests(SecurityHarnessCase):
    def test_unknown_method_refused_and_closed(self):
        """Without anonymousUserRole: ERROR AuthenticationError, then the connection closes."""
        client = self.new_client()
        [(command, _)] = connect(client, method="basic", data=b"user:password")
        self.assertEqual(command.type, T.ERROR)
        self.assertEqual(command.error.error, api.AuthenticationError)
        self.assertTrue(client.transport.disconnecting)


class HttpFallbackTests(WebTestCase):
    config = dict(authenticationEnabled=True, authorizationEnabled=True, superUserRoles=["root"],
                  authenticationProviders=["token"], tokenSecretKey=SECRET_SPEC, anonymousUserRole="guest")

    @defer.inlineCallbacks
    def test_anonymous_http(self):
        """No credentials or Basic on a token-only broker: the anonymous role (may read clusters,
        may not create tenants); the method header naming an unconfigured provider: 401."""
        status, _, _ = yield self.request("GET", "/admin/v2/clusters")
        self.assertEqual(status, 200)
        basic = {b"Authorization": [b"Basic " + base64.b64encode(b"u:p")]}
        status, _, _ = yield self.request("GET", "/admin/v2/clusters", headers=basic)
        self.assertEqual(status, 200)
        status, _, _ = yield self.request("PUT", "/admin/v2/tenants/t1", {"allowedClusters": []},
                                          headers=basic)
        self.assertEqual(status, 403)
        status, body, _ = yield self.request("GET", "/admin/v2/clusters", headers={
            **basic, b"X-Pulsar-Auth-Method-Name": [b"basic"]})
        self.assertEqual(status, 401)
        self.assertIn("Unsupported authentication method", body["reason"])
