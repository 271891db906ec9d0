"""Instances' credentials (functions/credentials.py: spec fields, 0600 spec files, the official
client's plugin, the Authorization header of state and schema calls) and the external worker's
HTTP security (daemons/functions_worker.py: 401, 403, 200, 413) on a real socket."""

import base64
import json
import os
import stat
import urllib.request

from twisted.internet import defer, reactor
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers

from pulsar_twisted.config import ConfigError, FunctionsWorkerConfig
from pulsar_twisted.daemons.functions_worker import (
    check_functions_worker, client_credentials, secured_site)
from pulsar_twisted.functions import credentials
from pulsar_twisted.functions.connectors.schemas import SchemaValues
from pulsar_twisted.functions.context import StateClient
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import tenant_path
from pulsar_twisted.security import jwt
from pulsar_twisted.web.routing import Router, RouterResource
from tests.functions.test_io import SINK
from tests.functions.test_worker import WorkerTestCase

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
SECRET = b"w" * 32


class FakePulsar:
    """The two plugin classes of the official ``pulsar`` module, recording their arguments."""

    class AuthenticationToken:
        def __init__(self, token):
            self.token = token

    class AuthenticationBasic:
        def __init__(self, username, password):
            self.username, self.password = username, password


class SpecTests(WorkerTestCase):

    def setUp(self):
        super().setUp()
        self.worker.instance_credentials = credentials.instance_spec_fields(
            TOKEN_PLUGIN, "token:secret-jwt", "/etc/ca.pem")

    def _spec(self, path):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        self.assertEqual(mode, 0o600, oct(mode))
        with open(path) as f:
            return json.load(f)

    def test_function_spec_carries_credentials_0600(self):
        self.register()
        spec = self._spec(os.path.join(self.worker.download_directory, "public", "default", "f",
                                       "instance.json"))
        self.assertEqual((spec["clientAuthenticationPlugin"], spec["clientAuthenticationParameters"],
                          spec["tlsTrustCertsFilePath"]), (TOKEN_PLUGIN, "token:secret-jwt", "/etc/ca.pem"))
        self.assertNotIn("tlsAllowInsecureConnection", spec)

    def test_connector_spec_carries_credentials_0600(self):
        self.result(self.worker.sinks.register("public", "default", "k", dict(SINK)))
        spec = self._spec(os.path.join(self.worker.download_directory, "io", "sinks", "public",
                                       "default", "k", "instance.json"))
        self.assertEqual(spec["clientAuthenticationParameters"], "token:secret-jwt")
        self.assertEqual(spec["componentType"], "SINK")


class CredentialTests(SynchronousTestCase):

    def test_no_plugin_no_fields(self):
        self.assertEqual(credentials.instance_spec_fields("", ""), {})
        spec = {"serviceUrl": "pulsar://x:6650"}
        self.assertEqual(credentials.official_client_options(spec, FakePulsar), {})
        self.assertEqual(credentials.http_headers(spec), {})

    def test_malformed_plugin_refused(self):
        self.assertRaises(ValueError, credentials.instance_spec_fields, BASIC_PLUGIN, "not json")
        self.assertRaises(ValueError, credentials.instance_spec_fields, "com.example.Kerberos", "")

    def test_write_spec_tightens_an_existing_file(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("old")
        os.chmod(path, 0o644)
        credentials.write_spec(path, {"a": 1})
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path) as f:
            self.assertEqual(json.load(f), {"a": 1})

    def test_token_spec_builds_official_token_and_bearer(self):
        spec = dict(credentials.instance_spec_fields(TOKEN_PLUGIN, "token:abc.def", "/ca.pem", True))
        options = credentials.official_client_options(spec, FakePulsar)
        self.assertIsInstance(options["authentication"], FakePulsar.AuthenticationToken)
        self.assertEqual(options["authentication"].token(), "abc.def")
        self.assertEqual((options["tls_trust_certs_file_path"], options["tls_allow_insecure_connection"]),
                         ("/ca.pem", True))
        self.assertEqual(credentials.http_headers(spec), {"Authorization": "Bearer abc.def"})

    def test_token_file_read_at_use(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("first\n")
        spec = credentials.instance_spec_fields(TOKEN_PLUGIN, f"file://{path}")
        token = credentials.official_client_options(spec, FakePulsar)["authentication"].token
        self.assertEqual(token(), "first")
        with open(path, "w") as f:
            f.write("second")
        self.assertEqual(token(), "second")
        self.assertEqual(credentials.http_headers(spec), {"Authorization": "Bearer second"})

    def test_basic_spec_builds_official_basic(self):
        params = json.dumps({"userId": "fn", "password": "pw"})
        spec = credentials.instance_spec_fields(BASIC_PLUGIN, params)
        auth = credentials.official_client_options(spec, FakePulsar)["authentication"]
        self.assertEqual((auth.username, auth.password), ("fn", "pw"))
        self.assertEqual(credentials.http_headers(spec),
                         {"Authorization": "Basic " + base64.b64encode(b"fn:pw").decode()})

    def test_real_official_client_accepts_the_options(self):
        import pulsar
        spec = credentials.instance_spec_fields(TOKEN_PLUGIN, "token:abc")
        client = pulsar.Client("pulsar://127.0.0.1:1", **credentials.official_client_options(spec, pulsar))
        client.close()

    def test_state_and_schema_calls_send_the_header(self):
        sent = []

        class Response:
            def __init__(self, body):
                self.body = body

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def read(self):
                return self.body

        def urlopen(request, timeout=None):
            sent.append((request.full_url, request.get_header("Authorization")))
            return Response(b'{"type": "STRING", "data": ""}')
        self.patch(urllib.request, "urlopen", urlopen)
        headers = {"Authorization": "Bearer abc"}
        StateClient("http://w:6750", "t", "n", "f", headers=headers).put("k", "v")
        SchemaValues("http://w:6750", headers=headers)._fetch("t", "n", "topic", 1)
        self.assertEqual([h for _, h in sent], ["Bearer abc", "Bearer abc"])
        self.assertTrue(sent[0][0].startswith("http://w:6750/admin/v3/functions/t/n/f/state/k"))


class WorkerConfigTests(SynchronousTestCase):

    def test_deprecated_client_keys_stand_in(self):
        config = FunctionsWorkerConfig(configurationMetadataStoreUrl="zk:127.0.0.1:2181",
                                       clientAuthenticationPlugin=TOKEN_PLUGIN,
                                       clientAuthenticationParameters="token:x")
        self.assertEqual(client_credentials(config), (TOKEN_PLUGIN, "token:x"))
        config.brokerClientAuthenticationPlugin = BASIC_PLUGIN
        config.brokerClientAuthenticationParameters = '{"userId": "a", "password": "b"}'
        self.assertEqual(client_credentials(config)[0], BASIC_PLUGIN)
        check_functions_worker(config)

    def test_token_provider_without_key_refused(self):
        config = FunctionsWorkerConfig(configurationMetadataStoreUrl="zk:127.0.0.1:2181",
                                       authenticationEnabled=True, authenticationProviders=["token"])
        self.assertRaises(ConfigError, check_functions_worker, config)


class WorkerDaemonSiteTests(SynchronousTestCase):

    def test_daemon_site_is_guarded(self):
        """The daemon's own site: bounded channels always, SecuredResource with authentication."""
        from pulsar_twisted.daemons.functions_worker import FunctionsWorkerDaemon
        from pulsar_twisted.security.http import GuardedHTTPChannel, SecuredResource
        config = FunctionsWorkerConfig(
            configurationMetadataStoreUrl="zk:127.0.0.1:2181", authenticationEnabled=True,
            authenticationProviders=["token"], tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode())
        daemon = FunctionsWorkerDaemon(config, reactor=reactor)
        daemon.store = EmbeddedMetadataStore(None, reactor)
        site = daemon._site()
        self.assertTrue(issubclass(site.protocol, GuardedHTTPChannel))
        self.assertIsInstance(site.resource, SecuredResource)
        daemon = FunctionsWorkerDaemon(FunctionsWorkerConfig(configurationMetadataStoreUrl="zk:h:1"),
                                       reactor=reactor)
        site = daemon._site()
        self.assertTrue(issubclass(site.protocol, GuardedHTTPChannel))   # the body limit, still
        self.assertNotIsInstance(site.resource, SecuredResource)


def bearer(role):
    return Headers({b"Authorization": [b"Bearer " + jwt.encode({"sub": role}, SECRET).encode()]})


class WorkerSiteTests(TestCase):
    """The external worker's site: the broker's HTTP security layer with the worker's keys and
    the tenants' admin roles from the metadata store."""

    timeout = 20

    @defer.inlineCallbacks
    def setUp(self):
        self.store = EmbeddedMetadataStore(None, reactor)
        yield self.store.put(tenant_path("acme"), json.dumps({"adminRoles": ["owner"]}).encode())
        config = FunctionsWorkerConfig(
            configurationMetadataStoreUrl="zk:127.0.0.1:2181", authenticationEnabled=True,
            authorizationEnabled=True, superUserRoles=["root"], authenticationProviders=["token"],
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(), httpMaxRequestSize=1000)
        router = Router()
        router.add("GET", "/admin/v3/functions/{tenant}/{namespace}",
                   lambda request, tenant, namespace: [tenant, namespace])
        router.add("POST", "/admin/v3/functions/{tenant}/{namespace}/{name}",
                   lambda request, tenant, namespace, name: {"name": name})
        self.port = reactor.listenTCP(0, secured_site(RouterResource(router), config, reactor, self.store),
                                      interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.agent = Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))

    @defer.inlineCallbacks
    def call(self, method, path, headers=None, body=None):
        url = f"http://127.0.0.1:{self.port.getHost().port}{path}".encode()
        producer = None if body is None else FileBodyProducer(__import__("io").BytesIO(body))
        response = yield self.agent.request(method, url, headers, producer)
        content = yield readBody(response)
        return response.code, content

    @defer.inlineCallbacks
    def test_401_403_200(self):
        path = "/admin/v3/functions/acme/ns"
        code, body = yield self.call(b"GET", path)
        self.assertEqual(code, 401, body)
        code, body = yield self.call(b"GET", path, bearer("nobody"))
        self.assertEqual(code, 403, body)
        code, body = yield self.call(b"GET", path, bearer("root"))
        self.assertEqual((code, json.loads(body)), (200, ["acme", "ns"]))
        code, body = yield self.call(b"GET", path, bearer("owner"))
        self.assertEqual(code, 200, body)     # the tenant's admin
        code, body = yield self.call(b"GET", "/admin/v3/functions/other/ns", bearer("owner"))
        self.assertEqual(code, 403, body)

    @defer.inlineCallbacks
    def test_413_for_an_oversized_body(self):
        code, body = yield self.call(b"POST", "/admin/v3/functions/acme/ns/f", bearer("root"), b"x" * 5000)
        self.assertEqual(code, 413, body)
        code, body = yield self.call(b"POST", "/admin/v3/functions/acme/ns/f", bearer("root"), b"x" * 10)
        self.assertEqual(code, 200, body)




class LocalrunCredentialsTests(SynchronousTestCase):
    """``functions|sources|sinks localrun`` take Pulsar's --client-auth-plugin/--client-auth-params
    (and TLS trust) flags into the instances' spec, written 0600; a malformed plugin is refused."""

    def run_localrun(self, argv):
        import io
        import subprocess

        from pulsar_twisted.cli.admin import main
        specs = []

        class Child:
            def __init__(self, args, **kw):
                with open(args[-2]) as f:
                    specs.append((json.load(f), stat.S_IMODE(os.stat(args[-2]).st_mode)))

            def wait(self, timeout=None):
                return 0
        self.patch(subprocess, "Popen", Child)
        err = io.StringIO()
        code = main(["--admin-url", "http://127.0.0.1:1", *argv], out=io.StringIO(), err=err)
        return code, specs, err.getvalue()

    def test_function_and_connector_specs_carry_credentials(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("def process(input):\n    return input\n")
        flags = ["--client-auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                 "--client-auth-params", "token:abc", "--tls-trust-cert-path", "/ca.pem"]
        code, specs, err = self.run_localrun(
            ["functions", "localrun", "--name", "f", "--py", path, "--classname", "f",
             "--inputs", "persistent://public/default/in", *flags])
        self.assertEqual(code, 0, err)
        code, more, err = self.run_localrun(
            ["sources", "localrun", "--name", "g", "--source-type", "data-generator",
             "--destination-topic-name", "persistent://public/default/out", *flags])
        self.assertEqual(code, 0, err)
        for spec, mode in specs + more:
            self.assertEqual((spec[credentials.PARAMETERS], spec[credentials.TLS_TRUST], mode),
                             ("token:abc", "/ca.pem", 0o600))

    def test_malformed_plugin_refused(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("def process(input):\n    return input\n")
        code, specs, err = self.run_localrun(
            ["functions", "localrun", "--name", "f", "--py", path, "--classname", "f",
             "--inputs", "persistent://public/default/in", "--client-auth-plugin", "kerberos"])
        self.assertEqual((code, specs), (1, []))
        self.assertIn("--client-auth-plugin", err)
