"""
The admin API's OpenAPI document: built from the routing table, served at /admin/v2/openapi.json,
valid OpenAPI 3, and true of the live server (schemathesis against a real standalone).
"""

import json
import os
import subprocess
import sys
import urllib.request

from twisted.internet import defer
from twisted.trial import unittest
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from pulsar_twisted.testing.process import StandaloneProcess
from pulsar_twisted.web import openapi
from pulsar_twisted.web.openapi import OPENAPI_PATH, build_document, undocumented
from pulsar_twisted.web.site import make_router
from tests.web.support import WebTestCase

try:
    import schemathesis  # noqa: F401
except ImportError:  # pragma: no cover - a test dependency
    schemathesis = None

try:
    from openapi_spec_validator import validate as validate_spec
except ImportError:  # pragma: no cover - comes with schemathesis's dependencies here, not always
    validate_spec = None


class _Config:
    clusterName = "standalone"


def _router():
    # The handlers are never called: the table alone is what the document is built from.
    return make_router(object(), _Config())


class DocumentTests(unittest.SynchronousTestCase):

    def setUp(self):
        self.router = _router()
        self.doc = build_document(self.router)

    def test_every_route_documented(self):
        """Every route of the table has an OPERATIONS entry (a summary and schemas of its own)."""
        self.assertEqual(undocumented(self.router), [])

    def test_every_route_listed(self):
        """The document lists each (method, template) of the table, and nothing else."""
        routes = {(r.method.lower(), r.template) for r in self.router.routes}
        listed = {(m, p) for p, ops in self.doc["paths"].items() for m in ops}
        self.assertEqual(routes, listed)

    def test_valid_openapi(self):
        """The document is valid OpenAPI 3.0 (all $refs resolve, every path parameter declared)."""
        if validate_spec is None:
            raise SkipTest("openapi-spec-validator is not installed")
        validate_spec(self.doc)
        self.assertEqual(self.doc["openapi"], "3.0.3")

    def test_operation_ids_unique(self):
        """operationId is unique across the document (generators name functions by it)."""
        ids = [op["operationId"] for ops in self.doc["paths"].values() for op in ops.values()]
        self.assertEqual(len(ids), len(set(ids)))

    def test_bodies_and_responses(self):
        """Request and response schemas point at Pulsar's objects; errors are {reason}."""
        ns = self.doc["paths"]["/admin/v2/namespaces/{tenant}/{namespace}/retention"]
        self.assertEqual(ns["post"]["requestBody"]["content"]["application/json"]["schema"],
                         {"$ref": "#/components/schemas/RetentionPolicies"})
        self.assertIn("204", ns["get"]["responses"])
        stats = self.doc["paths"]["/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats"]["get"]
        self.assertEqual(stats["responses"]["200"]["content"]["application/json"]["schema"],
                         {"$ref": "#/components/schemas/TopicStats"})
        self.assertEqual(stats["responses"]["404"]["content"]["application/json"]["schema"],
                         {"$ref": "#/components/schemas/Error"})
        peek = self.doc["paths"]["/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}"
                                 "/position/{position}"]["get"]
        self.assertIn("application/octet-stream", peek["responses"]["200"]["content"])
        for name in ("TenantInfo", "ClusterData", "Policies", "BacklogQuota", "MessageId",
                     "PartitionedTopicMetadata", "LookupData", "PersistentTopicInternalStats"):
            self.assertIn(name, self.doc["components"]["schemas"])

    def test_unknown_route_still_listed(self):
        """A route added without an OPERATIONS entry is listed with a generic description."""
        self.router.add("GET", "/admin/v2/new-thing/{x}", lambda request, x: None)
        self.assertEqual(undocumented(self.router), ["GET /admin/v2/new-thing/{x}"])
        doc = build_document(self.router)
        op = doc["paths"]["/admin/v2/new-thing/{x}"]["get"]
        self.assertEqual(op["tags"], ["other"])
        self.assertEqual(op["parameters"][0]["name"], "x")

    def test_route_doc(self):
        """A route registered with ``doc=`` is documented by it (no OPERATIONS entry needed)."""
        self.router.add("POST", "/admin/v2/own/{x}", lambda request, x: None,
                        doc=openapi.Operation("Own thing", "own", {200: openapi._ref("MessageId")},
                                              body={"type": "integer"}))
        self.assertEqual(undocumented(self.router), [])
        op = build_document(self.router)["paths"]["/admin/v2/own/{x}"]["post"]
        self.assertEqual((op["summary"], op["tags"]), ("Own thing", ["own"]))
        self.assertEqual(op["requestBody"]["content"]["application/json"]["schema"], {"type": "integer"})

    def test_policy_schemas_cover_policies(self):
        """Each namespace policy sub-resource has a body schema."""
        from pulsar_twisted.resources.policies import NAMESPACE_POLICIES
        self.assertEqual(sorted(set(NAMESPACE_POLICIES) - set(openapi.POLICY_SCHEMAS)), [])


class ServedTests(WebTestCase):

    @defer.inlineCallbacks
    def test_served(self):
        """GET /admin/v2/openapi.json answers the document of the site's own table."""
        code, doc, response = yield self.get(OPENAPI_PATH)
        self.assertEqual(code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/json"])
        self.assertEqual(doc, json.loads(json.dumps(build_document(_router()))))
        self.assertIn("/admin/v2/tenants/{tenant}", doc["paths"])

    @defer.inlineCallbacks
    def test_answers_match_schemas(self):
        """A few real answers validate against the document's schemas."""
        import jsonschema
        doc = build_document(_router())

        def check(value, name):
            # The component schemas refer to each other as #/components/...: carry them along.
            schema = dict(doc["components"]["schemas"][name], components=doc["components"])
            jsonschema.validate(value, schema)

        cluster = self.harness.config.clusterName
        yield self.expect("PUT", "/admin/v2/tenants/t1", 204, {"allowedClusters": [cluster]})
        check((yield self.expect("GET", "/admin/v2/tenants/t1", 200)), "TenantInfo")
        yield self.expect("PUT", "/admin/v2/namespaces/t1/ns", 204)
        check((yield self.expect("GET", "/admin/v2/namespaces/t1/ns", 200)), "Policies")
        yield self.expect("PUT", "/admin/v2/persistent/t1/ns/topic", 204)
        check((yield self.expect("GET", "/admin/v2/persistent/t1/ns/topic/stats", 200)), "TopicStats")
        check((yield self.expect("GET", "/admin/v2/persistent/t1/ns/topic/internalStats", 200)),
              "PersistentTopicInternalStats")
        reason = yield self.expect("GET", "/admin/v2/tenants/nope", 404)
        check(reason, "Error")


def _http(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


#: Values for the path parameters in the examples phase, naming resources the test creates so that
#: those cases get past "not found" into the handlers' logic (fuzzing still tries random names).
EXAMPLES = {"cluster": "standalone", "tenant": "st", "namespace": "ns", "topic": "t", "sub": "s",
            "role": "r", "count": 1, "timestamp": 0, "seconds": 1, "position": 1}


class SchemathesisTests(SynchronousTestCase):
    """schemathesis against a real ``twistd pulsar-standalone``: no 5xx, answers as documented."""

    #: Bounds: examples per operation and seconds for the whole run (~130 operations).
    max_examples = 15
    timeout = 240

    def setUp(self):
        if schemathesis is None:
            raise SkipTest("schemathesis is not installed")
        self.standalone = StandaloneProcess({"journalSyncData": "false"})
        self.addCleanup(self.standalone.cleanup)
        self.standalone.start()
        base = self.standalone.web_service_url
        _http(base, "PUT", "/admin/v2/tenants/st", {"allowedClusters": ["standalone"]})
        _http(base, "PUT", "/admin/v2/namespaces/st/ns")
        _http(base, "PUT", "/admin/v2/persistent/st/ns/t")
        _http(base, "PUT", "/admin/v2/persistent/st/ns/t/subscription/s")
        _http(base, "PUT", "/admin/v2/persistent/st/ns/pt/partitions", 2)

    def _document_with_examples(self, path):
        with urllib.request.urlopen(self.standalone.web_service_url + OPENAPI_PATH, timeout=10) as r:
            doc = json.load(r)
        for operations in doc["paths"].values():
            for operation in operations.values():
                for param in operation.get("parameters", []):
                    if param["in"] == "path" and param["name"] in EXAMPLES:
                        param["example"] = EXAMPLES[param["name"]]
        with open(path, "w") as f:
            json.dump(doc, f)

    def test_schemathesis(self):
        """Generated requests to every operation: never a 5xx, status/content type/body as documented."""
        workdir = os.path.abspath(self.mktemp())
        os.makedirs(workdir)
        spec = os.path.join(workdir, "openapi.json")
        self._document_with_examples(spec)
        checks = ("not_a_server_error,status_code_conformance,content_type_conformance,"
                  "response_schema_conformance")
        command = [sys.executable, "-m", "schemathesis.cli", "run", spec,
                   "--url", self.standalone.web_service_url, "--checks", checks,
                   "--phases", "examples,coverage,fuzzing", "--max-examples", str(self.max_examples),
                   "--request-timeout", "10", "--seed", "20240601", "--workers", "1",
                   "--generation-database", "none", "--no-color", "--max-failures", "20"]
        try:
            result = subprocess.run(command, cwd=workdir, capture_output=True, text=True,
                                    timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            self.fail(f"schemathesis ran past {self.timeout}s (a hang?)\n{(e.stdout or '')[-4000:]}")
        output = result.stdout + result.stderr
        summary = "\n".join(line for line in output.splitlines() if "127.0.0.1\" - -" not in line)
        self.assertEqual(result.returncode, 0, summary[-8000:])
        self.assertIn("Fuzzing", output)
        self.assertNotIn("Traceback", self.standalone.log_text())
