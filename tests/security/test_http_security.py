"""HTTP authentication (401), authorization (403) and topic-level permission routes, on a real
socket over the in-memory broker (tests/web/support.py)."""

import base64

from twisted.internet import defer

from pulsar_twisted.security import jwt
from pulsar_twisted.security.auth import apr1_hash
from tests.web.support import WebTestCase

SECRET = b"h" * 32


def bearer(role):
    return {b"Authorization": [b"Bearer " + jwt.encode({"sub": role}, SECRET).encode()]}


class HttpSecurityTests(WebTestCase):
    config = dict(authenticationEnabled=True, authorizationEnabled=True, superUserRoles=["root"],
                  authenticationProviders=["token", "basic"],
                  tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
                  basicAuthConf=base64.b64encode(b"web:" + apr1_hash(b"pw", b"salt").encode()).decode())

    @defer.inlineCallbacks
    def test_authentication(self):
        status, body, response = yield self.request("GET", "/admin/v2/clusters")
        self.assertEqual(status, 401)
        self.assertIn("no credentials", body["reason"])
        status, _, _ = yield self.request("GET", "/admin/v2/clusters", headers={
            b"Authorization": [b"Basic " + base64.b64encode(b"web:pw")]})
        self.assertEqual(status, 200)
        status, _, _ = yield self.request("GET", "/admin/v2/clusters", headers={
            b"Authorization": [b"Basic " + base64.b64encode(b"web:bad")]})
        self.assertEqual(status, 401)

    @defer.inlineCallbacks
    def test_topic_permissions_routes(self):
        """Grant, list and revoke topic-level permissions; only admins may."""
        base = "/admin/v2/persistent/public/default/t/permissions"
        status, _, _ = yield self.request("POST", f"{base}/app", ["produce"], headers=bearer("nobody"))
        self.assertEqual(status, 403)
        status, _, _ = yield self.request("POST", f"{base}/app", ["produce", "consume"], headers=bearer("root"))
        self.assertEqual(status, 204)
        status, body, _ = yield self.request("GET", base, headers=bearer("root"))
        self.assertEqual(body, {"app": ["consume", "produce"]})
        status, body, _ = yield self.request("POST", f"{base}/app", ["fly"], headers=bearer("root"))
        self.assertEqual(status, 400)
        status, _, _ = yield self.request("GET", "/admin/v2/persistent/public/default/t/partitions",
                                          headers=bearer("app"))
        self.assertEqual(status, 200)  # lookup-level access for produce/consume roles
        status, _, _ = yield self.request("DELETE", f"{base}/app", headers=bearer("root"))
        self.assertEqual(status, 204)
        status, _, _ = yield self.request("DELETE", f"{base}/app", headers=bearer("root"))
        self.assertEqual(status, 412)

    @defer.inlineCallbacks
    def test_functions_need_a_tenant_admin(self):
        """/admin/v3/functions/{tenant}/...: a role that is not the tenant's admin gets 403; a
        super user passes authorization (then 503: this site runs no functions worker)."""
        path = "/admin/v3/functions/public/default"
        status, _, _ = yield self.request("GET", path, headers=bearer("nobody"))
        self.assertEqual(status, 403)
        status, body, _ = yield self.request("GET", path, headers=bearer("root"))
        self.assertEqual(status, 503, body)

    @defer.inlineCallbacks
    def test_unload_and_split_need_a_super_user(self):
        """Pulsar's unload and split-bundle check validateSuperUserAccess, not the tenant's admins."""
        yield self.request("POST", "/admin/v2/tenants/public", {"adminRoles": ["owner"], "allowedClusters":
                                                                ["standalone"]}, headers=bearer("root"))
        ns = "/admin/v2/namespaces/public/default"
        status, _, _ = yield self.request("GET", ns, headers=bearer("owner"))
        self.assertEqual(status, 200)       # a tenant admin indeed
        for path in (f"{ns}/unload", f"{ns}/0x00000000_0x40000000/unload", f"{ns}/0x00000000_0x40000000/split"):
            status, _, _ = yield self.request("PUT", path, headers=bearer("owner"))
            self.assertEqual(status, 403, path)
        status, _, _ = yield self.request("PUT", f"{ns}/0x00000000_0x40000000/unload", headers=bearer("root"))
        self.assertEqual(status, 204)
