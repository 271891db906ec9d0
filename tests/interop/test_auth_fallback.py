"""
Interop (issue 13 item 1): the official client authenticating with a method the broker does not
configure (``AuthenticationBasic`` on a token-only standalone). With ``anonymousUserRole`` the
client connects as that role and its producer fails with AuthorizationError at once (not an
authentication retry until the operation timeout); without one the CONNECT is refused.
"""

import time

from tests.interop.test_core import pulsar
from tests.interop.test_security import SECRET_SPEC, SecureCase, token

_TOKEN_ONLY = {"authenticationEnabled": "true", "authorizationEnabled": "true",
               "superUserRoles": "admin", "tokenSecretKey": SECRET_SPEC,
               "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"}


class AnonymousFallbackTests(SecureCase):
    needs_auth = True
    extra_config = dict(_TOKEN_ONLY, anonymousUserRole="guest")

    def test_unconfigured_method_meets_authorization(self):
        """Basic on a token-only broker: connected as ``guest``, then AuthorizationError, fast."""
        client = self.new_client(authentication=pulsar.AuthenticationBasic("user", "password"),
                                 operation_timeout_seconds=20)
        started = time.monotonic()
        with self.assertRaises(pulsar.AuthorizationError):
            client.create_producer(self.topic())
        # Far below the 20 s operation timeout: no authentication retry loop happened.
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("authenticated as guest (none)", self.standalone.log_text())
        log = self.standalone.log_text()
        self.assertIn("role guest refused", log)
        self.assertIn("Role guest is not authorized to lookup", log)

    def test_token_still_works(self):
        self.round_trip(self.new_client(authentication=pulsar.AuthenticationToken(token("admin"))))

    def test_http_anonymous(self):
        """HTTP with an unconfigured scheme gets the anonymous role too (reads, may not write)."""
        import base64
        basic = {"Authorization": "Basic " + base64.b64encode(b"user:password").decode()}
        status, _ = self.http("GET", "/admin/v2/clusters", headers=basic)
        self.assertEqual(status, 200)
        status, _ = self.http("PUT", "/admin/v2/tenants/anon", {"allowedClusters": ["standalone"]},
                              headers=basic)
        self.assertEqual(status, 403)


class NoAnonymousTests(SecureCase):
    needs_auth = True
    extra_config = _TOKEN_ONLY

    def test_unconfigured_method_refused(self):
        """Without anonymousUserRole the CONNECT is refused (ERROR AuthenticationError, then the
        connection closes, as Pulsar; tests/security/test_auth_fallback.py checks the frames)."""
        client = self.new_client(authentication=pulsar.AuthenticationBasic("user", "password"),
                                 operation_timeout_seconds=3)
        # The C++ client retries a CONNECT refused with AuthenticationError until its operation
        # timeout (against Pulsar too); the refusal itself is in the broker's log.
        with self.assertRaises(pulsar.Timeout):
            client.create_producer(self.topic())
        self.assertIn("Unsupported authentication method: basic", self.standalone.log_text())
