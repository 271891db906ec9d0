"""
``pulsar-admin`` schemas, broker-stats, bookies and proxy-stats (issue 13, item 11), run in a
thread against an in-process broker's HTTP service on a real socket (tests/web/support.py), and
proxy-stats against a fake proxy web service (Pulsar's /proxy-stats routes).
"""

import io
import json
import sys

from twisted.internet import defer, reactor, threads
from twisted.web import resource, server

from pulsar_twisted.cli import admin as cli
from pulsar_twisted.resources.bookies import register_bookie
from tests.web.support import WebTestCase, settle

AVRO_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
AVRO_V2 = {"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]}
AVRO_BAD = {"type": "record", "name": "User", "fields": [{"name": "age", "type": "int"}]}


class AdminCliCase(WebTestCase):
    """``self.pulsar_admin(*args)`` runs pulsar-admin in a thread: ``(exit code, stdout, stderr)``."""

    def pulsar_admin(self, *args, url=None):
        def run():
            out, err = io.StringIO(), io.StringIO()
            code = cli.main(["--admin-url", url or self.base, *args], out=out, err=err)
            return code, out.getvalue(), err.getvalue()
        return threads.deferToThread(run)

    @defer.inlineCallbacks
    def ok(self, *args, **kw):
        code, out, err = yield self.pulsar_admin(*args, **kw)
        self.assertEqual(code, 0, f"pulsar-admin {' '.join(args)}: {err}")
        return out

    def schema_file(self, definition, type_="AVRO") -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            json.dump({"type": type_, "schema": json.dumps(definition), "properties": {"k": "v"}}, f)
        return path


class SchemasCliTests(AdminCliCase):
    @defer.inlineCallbacks
    def test_upload_get_versions(self):
        """upload then get: latest as SchemaInfoWithVersion, --version N and --all-version."""
        topic = "persistent://public/default/schema-cli"
        yield self.ok("schemas", "upload", topic, "-f", self.schema_file(AVRO_V1))
        yield self.ok("schemas", "upload", topic, "--filename", self.schema_file(AVRO_V2))
        latest = json.loads((yield self.ok("schemas", "get", topic)))
        self.assertEqual(latest["version"], 1)
        info = latest["schemaInfo"]
        self.assertEqual((info["name"], info["type"], info["properties"]),
                         ("schema-cli", "AVRO", {"k": "v"}))
        self.assertEqual(info["schema"], AVRO_V2)
        first = json.loads((yield self.ok("schemas", "get", topic, "--version", "0")))
        self.assertEqual(first["schema"], AVRO_V1)
        every = json.loads((yield self.ok("schemas", "get", topic, "-a")))
        self.assertEqual([v["type"] for v in every], ["AVRO", "AVRO"])
        code, _, err = yield self.pulsar_admin("schemas", "get", topic, "-v", "0", "-a")
        self.assertEqual(code, 1)
        self.assertIn("Only one or neither", err)

    @defer.inlineCallbacks
    def test_test_compatibility(self):
        """test-compatibility answers for the topic's strategy and stores nothing."""
        topic = "public/default/schema-compat"
        yield self.ok("schemas", "upload", topic, "-f", self.schema_file(AVRO_V1))
        good = json.loads((yield self.ok("schemas", "test-compatibility", topic,
                                         "-f", self.schema_file(AVRO_V2))))
        strategy = self.harness.config.schemaCompatibilityStrategy
        self.assertEqual(good, {"compatibility": True, "schemaCompatibilityStrategy": strategy})
        bad = json.loads((yield self.ok("schemas", "compatibility", topic,
                                        "-f", self.schema_file(AVRO_BAD))))
        self.assertFalse(bad["compatibility"])
        latest = json.loads((yield self.ok("schemas", "get", topic)))
        self.assertEqual(latest["version"], 0)

    @defer.inlineCallbacks
    def test_delete(self):
        """delete removes the schema: get then fails with Pulsar's 404."""
        topic = "schema-delete"
        yield self.ok("schemas", "upload", topic, "-f", self.schema_file(AVRO_V1))
        yield self.ok("schemas", "delete", topic)
        code, _, err = yield self.pulsar_admin("schemas", "get", topic)
        self.assertEqual(code, 1)
        self.assertIn("HTTP 404 Not Found", err)

    @defer.inlineCallbacks
    def test_bad_file(self):
        """A file that is not a schema definition is refused before any request."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("not json")
        code, _, err = yield self.pulsar_admin("schemas", "upload", "t", "-f", path)
        self.assertEqual(code, 1)
        self.assertIn("is not a schema definition", err)


class BrokerStatsCliTests(AdminCliCase):
    @defer.inlineCallbacks
    def loaded_topic(self, name="persistent://public/default/stats-cli"):
        client = yield self.producer(name)
        yield self.publish(client, 3)
        return name

    @defer.inlineCallbacks
    def test_topics(self):
        """topics (and its alias destinations): namespace -> bundle -> domain -> topic stats,
        compact by default, indented four spaces with -i."""
        topic = yield self.loaded_topic()
        out = yield self.ok("broker-stats", "topics")
        self.assertNotIn("\n", out.strip())
        stats = json.loads(out)
        [bundle] = stats["public/default"].values()
        self.assertEqual(bundle["persistent"][topic]["msgInCounter"], 3)
        self.assertEqual(len(bundle["persistent"][topic]["publishers"]), 1)
        indented = yield self.ok("broker-stats", "destinations", "-i")
        self.assertIn('\n    "public/default": {', indented)
        self.assertEqual(json.loads(indented), stats)

    @defer.inlineCallbacks
    def test_monitoring_metrics(self):
        """monitoring-metrics: one metrics object per namespace with Pulsar's dimension names."""
        yield self.loaded_topic()
        out = yield self.ok("broker-stats", "monitoring-metrics", "--indent")
        [metric] = [json.loads(part) for part in out.strip().split("\n\n")]
        self.assertEqual(metric["dimensions"]["namespace"], "public/default")
        self.assertEqual(metric["dimensions"]["cluster"], self.harness.config.clusterName)
        self.assertEqual(metric["metrics"]["brk_no_of_producers"], 1)
        self.assertIn("brk_in_rate", metric["metrics"])

    @defer.inlineCallbacks
    def test_load_report(self):
        """load-report: LocalBrokerData, pretty as Jackson prints it."""
        yield self.loaded_topic()
        out = yield self.ok("broker-stats", "load-report")
        self.assertIn('"loadReportType" : "LocalBrokerData"', out)
        report = json.loads(out)
        self.assertEqual((report["numTopics"], report["numProducers"]), (1, 1))
        self.assertGreater(report["memory"]["usage"], 0)

    @defer.inlineCallbacks
    def test_jvm_views_not_served(self):
        """Pulsar's JVM-only views are not served (404) and not offered by the CLI."""
        code, _, _ = yield self.get("/admin/v2/broker-stats/mbeans")
        self.assertEqual(code, 404)
        self.patch(sys, "stderr", io.StringIO())   # argparse's usage message
        self.assertRaises(SystemExit, cli.build_parser().parse_args, ["broker-stats", "mbeans"])


class BookiesCliTests(AdminCliCase):
    @defer.inlineCallbacks
    def test_list_bookies(self):
        """list-bookies: every registered bookie as BookiesClusterInfo."""
        yield register_bookie(self.harness.store, "127.0.0.1:3181")
        yield register_bookie(self.harness.store, "127.0.0.2:3181", read_only=True)
        out = yield self.ok("bookies", "list-bookies")
        self.assertEqual(json.loads(out), {"bookies": [{"bookieId": "127.0.0.1:3181"},
                                                       {"bookieId": "127.0.0.2:3181"}]})

    @defer.inlineCallbacks
    def test_rack_placement(self):
        """set-bookie-rack / get-bookie-rack / racks-placement / delete-bookie-rack, Pulsar's
        {group: {bookie: BookieInfo}} document; a bookie moves between groups."""
        self.assertEqual(json.loads((yield self.ok("bookies", "racks-placement"))), {})
        yield self.ok("bookies", "set-bookie-rack", "-b", "b1:3181", "-r", "rack-1", "--hostname", "b1")
        yield self.ok("bookies", "set-bookie-rack", "--bookie", "b2:3181", "--rack", "rack-2",
                      "--group", "g2")
        self.assertEqual(json.loads((yield self.ok("bookies", "get-bookie-rack", "-b", "b1:3181"))),
                         {"rack": "rack-1", "hostname": "b1"})
        yield self.ok("bookies", "set-bookie-rack", "-b", "b1:3181", "-r", "rack-3", "-g", "g2")
        self.assertEqual(json.loads((yield self.ok("bookies", "racks-placement"))),
                         {"g2": {"b2:3181": {"rack": "rack-2"}, "b1:3181": {"rack": "rack-3"}}})
        yield self.ok("bookies", "delete-bookie-rack", "-b", "b2:3181")
        code, _, err = yield self.pulsar_admin("bookies", "get-bookie-rack", "-b", "b2:3181")
        self.assertEqual(code, 1)
        self.assertIn("Reason: Bookie address not found: b2:3181", err)
        code, _, err = yield self.pulsar_admin("bookies", "delete-bookie-rack", "-b", "nobody:1")
        self.assertIn("HTTP 404 Not Found", err)

    @defer.inlineCallbacks
    def test_bad_rack(self):
        """An empty or "/" rack is refused by the CLI (as Pulsar's) and by the server."""
        code, _, err = yield self.pulsar_admin("bookies", "set-bookie-rack", "-b", "b1:3181", "-r", "/")
        self.assertEqual(code, 1)
        self.assertIn("rack name is invalid", err)
        code, body, _ = yield self.post("/admin/v2/bookies/racks-info/b1:3181", {"hostname": "x"})
        self.assertEqual(code, 400)


class _FakeProxyStats(resource.Resource):
    """Pulsar's proxy ``/proxy-stats/connections`` and ``/proxy-stats/topics`` answers."""

    isLeaf = True
    ANSWERS = {
        b"/proxy-stats/connections": [{"remoteAddress": "/127.0.0.1:50000", "msgRateIn": 1.5,
                                       "msgThroughputIn": 30.0, "msgRateOut": 0.0,
                                       "msgThroughputOut": 0.0}],
        b"/proxy-stats/topics": {"persistent://public/default/t": {
            "msgRateIn": 1.5, "msgByteIn": 30.0, "msgRateOut": 0.0, "msgByteOut": 0.0}},
    }

    def render_GET(self, request):
        answer = self.ANSWERS.get(request.path)
        if answer is None:
            request.setResponseCode(404)
            return b'{"reason": "Not Found"}'
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(answer).encode()


class ProxyStatsCliTests(AdminCliCase):
    def setUp(self):
        self.proxy = reactor.listenTCP(0, server.Site(_FakeProxyStats()), interface="127.0.0.1")
        self.proxy_url = f"http://127.0.0.1:{self.proxy.getHost().port}"
        return super().setUp()

    @defer.inlineCallbacks
    def tearDown(self):
        yield self.proxy.stopListening()
        yield super().tearDown()
        yield settle()

    @defer.inlineCallbacks
    def test_connections(self):
        """connections: compact JSON, pretty (two spaces, Gson) with -i."""
        out = yield self.ok("proxy-stats", "connections", url=self.proxy_url)
        self.assertEqual(out, json.dumps(_FakeProxyStats.ANSWERS[b"/proxy-stats/connections"],
                                         separators=(",", ":")) + "\n")
        pretty = yield self.ok("proxy-stats", "connections", "-i", url=self.proxy_url)
        self.assertIn('\n    "remoteAddress": "/127.0.0.1:50000",', pretty)

    @defer.inlineCallbacks
    def test_topics(self):
        out = yield self.ok("proxy-stats", "topics", "--indent", url=self.proxy_url)
        self.assertEqual(json.loads(out), _FakeProxyStats.ANSWERS[b"/proxy-stats/topics"])

    @defer.inlineCallbacks
    def test_broker_is_not_a_proxy(self):
        """Asked of a broker (no /proxy-stats there), the command fails with the HTTP error."""
        code, _, err = yield self.pulsar_admin("proxy-stats", "topics")
        self.assertEqual(code, 1)
        self.assertIn("HTTP 404", err)
