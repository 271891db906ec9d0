"""
``pulsar-admin``: argument parsing and output units, then every verb family run as a process
(``python -m pulsar_twisted.cli.admin``) against a real ``twistd pulsar-standalone``.
"""

import io
import json
import os
import subprocess
import sys
import time
import uuid

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from pulsar_twisted.cli import admin as cli
from pulsar_twisted.testing.process import StandaloneProcess, free_port

try:
    import pulsar
except ImportError:  # pragma: no cover - a test dependency
    pulsar = None

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class UnitTests(SynchronousTestCase):

    def test_times(self):
        """Pulsar's relative times: bare seconds, s/m/h/d/w/y units, -1 for infinite."""
        self.assertEqual([cli.parse_seconds(t) for t in ("30", "10m", "3h", "2d", "1w", "-1")],
                         [30, 600, 10800, 172800, 604800, -1])
        for bad in ("x", "10q", "-5", ""):
            self.assertRaises(cli.CommandError, cli.parse_seconds, bad)

    def test_sizes(self):
        """Pulsar's sizes: bytes, K/M/G/T (binary), -1 for infinite."""
        self.assertEqual([cli.parse_bytes(t) for t in ("100", "10K", "10M", "10G", "1t", "-1")],
                         [100, 10240, 10 * 1024 ** 2, 10 * 1024 ** 3, 1024 ** 4, -1])
        self.assertRaises(cli.CommandError, cli.parse_bytes, "10X")

    def test_message_id(self):
        self.assertEqual(cli.parse_message_id("3:7"), {"ledgerId": 3, "entryId": 7})
        self.assertEqual(cli.parse_message_id("3:7:1"), {"ledgerId": 3, "entryId": 7, "partitionIndex": 1})
        self.assertRaises(cli.CommandError, cli.parse_message_id, "3")

    def test_topic_names(self):
        """Short topic names expand as Pulsar's do; each segment is URL-encoded."""
        self.assertEqual(cli.topic_path("t"), "/persistent/public/default/t")
        self.assertEqual(cli.topic_path("a/b/t"), "/persistent/a/b/t")
        self.assertEqual(cli.topic_path("non-persistent://a/b/t x"), "/non-persistent/a/b/t%20x")
        self.assertRaises(cli.CommandError, cli.topic_path, "http://a/b/c")
        self.assertRaises(cli.CommandError, cli.namespace_path, "just-a-tenant")

    def test_jackson_output(self):
        """Objects print as Jackson's pretty printer does, and stay JSON."""
        value = {"a": [], "b": {}, "c": ["x", "y"], "d": {"e": 1}}
        text = cli.jackson(value)
        self.assertEqual(text, '{\n  "a" : [ ],\n  "b" : { },\n  "c" : [ "x", "y" ],\n'
                               '  "d" : {\n    "e" : 1\n  }\n}')
        self.assertEqual(json.loads(text), value)

    def test_lists_one_per_line(self):
        out = io.StringIO()
        cli.print_result(["a", "b"], out)
        self.assertEqual(out.getvalue(), "a\nb\n")

    def test_http_error_text(self):
        """Errors read as Pulsar's: the status line, then the server's reason."""
        self.assertEqual(str(cli.HttpError(404, "Tenant does not exist")),
                         "HTTP 404 Not Found\n\nReason: Tenant does not exist")

    def test_client_conf(self):
        """webServiceUrl comes from PULSAR_CLIENT_CONF (else conf/client.conf) when no --admin-url."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("# comment\nbrokerServiceUrl=pulsar://h:6650\nwebServiceUrl=http://h:8081/\n")
        self.assertEqual(cli.client_conf_url({"PULSAR_CLIENT_CONF": path}), "http://h:8081/")
        self.assertIsNone(cli.client_conf_url({}, cwd=self.mktemp()))

    def test_unreachable(self):
        """A broker that is not there: a one-line error and exit code 1."""
        err = io.StringIO()
        code = cli.main(["--admin-url", f"http://127.0.0.1:{free_port()}", "tenants", "list"],
                        out=io.StringIO(), err=err)
        self.assertEqual(code, 1)
        self.assertIn("Failed to reach http://127.0.0.1:", err.getvalue())


class CliProcessTests(SynchronousTestCase):
    """Each test runs pulsar-admin processes against a standalone of its own."""

    def setUp(self):
        self.standalone = StandaloneProcess({"journalSyncData": "false"})
        self.addCleanup(self.standalone.cleanup)
        self.standalone.start()

    def admin(self, *args, expect=0):
        """``(stdout, stderr)`` of ``pulsar-admin --admin-url URL ARGS`` asserting its exit code
        (``expect=None``: the CompletedProcess, unchecked)."""
        env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        result = subprocess.run(
            [sys.executable, "-m", "pulsar_twisted.cli.admin", "--admin-url",
             self.standalone.web_service_url, *args], env=env, capture_output=True, text=True,
            timeout=60, stdin=subprocess.DEVNULL)
        if expect is None:
            return result
        self.assertEqual(result.returncode, expect, f"pulsar-admin {' '.join(args)}: {result.stderr}")
        return result.stdout, result.stderr

    def json(self, *args):
        return json.loads(self.admin(*args)[0])

    def lines(self, *args):
        return self.admin(*args)[0].splitlines()

    def unique(self, prefix):
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def namespace(self):
        tenant = self.unique("t")
        self.admin("tenants", "create", tenant, "-c", "standalone")
        self.admin("namespaces", "create", f"{tenant}/ns")
        return f"{tenant}/ns"

    def test_clusters(self):
        """clusters list/get/create/update/delete, and 404 on a deleted one."""
        self.assertIn("standalone", self.lines("clusters", "list"))
        self.assertIn("serviceUrl", self.json("clusters", "get", "standalone"))
        name = self.unique("c")
        self.admin("clusters", "create", name, "--url", "http://h:8080", "--broker-url", "pulsar://h:6650")
        self.assertEqual(self.json("clusters", "get", name),
                         {"serviceUrl": "http://h:8080", "brokerServiceUrl": "pulsar://h:6650"})
        self.admin("clusters", "update", name, "--url", "http://h2:8080")
        self.assertEqual(self.json("clusters", "get", name), {"serviceUrl": "http://h2:8080"})
        self.admin("clusters", "delete", name)
        _, err = self.admin("clusters", "get", name, expect=1)
        self.assertEqual(err, "HTTP 404 Not Found\n\nReason: Cluster does not exist\n")

    def test_tenants(self):
        """tenants create (-c, -r), get, list, update, delete; conflicts and unknown ones fail."""
        name = self.unique("t")
        self.admin("tenants", "create", name, "-r", "admin1,admin2", "-c", "standalone")
        out, _ = self.admin("tenants", "get", name)
        self.assertIn('"allowedClusters" : [ "standalone" ]', out)
        self.assertEqual(json.loads(out), {"adminRoles": ["admin1", "admin2"],
                                           "allowedClusters": ["standalone"]})
        self.assertIn(name, self.lines("tenants", "list"))
        self.admin("tenants", "update", name, "-r", "boss")
        self.assertEqual(self.json("tenants", "get", name),
                         {"adminRoles": ["boss"], "allowedClusters": ["standalone"]})
        _, err = self.admin("tenants", "create", name, expect=1)
        self.assertIn("HTTP 409 Conflict", err)
        _, err = self.admin("tenants", "create", self.unique("t"), "-c", "nowhere", expect=1)
        self.assertIn("HTTP 412 Precondition Failed", err)
        self.admin("tenants", "delete", name)
        _, err = self.admin("tenants", "get", name, expect=1)
        self.assertIn("Reason: Tenant does not exist", err)

    def test_namespaces(self):
        """namespaces create/list/policies/topics/delete and the policy verbs, read back."""
        ns = self.namespace()
        tenant = ns.split("/")[0]
        self.assertEqual(self.lines("namespaces", "list", tenant), [ns])
        self.assertEqual(self.json("namespaces", "policies", ns)["replication_clusters"], ["standalone"])
        self.assertEqual(self.lines("namespaces", "topics", ns), [])

        self.admin("namespaces", "set-retention", ns, "--size", "10G", "--time", "3h")
        self.assertEqual(self.json("namespaces", "get-retention", ns),
                         {"retentionTimeInMinutes": 180, "retentionSizeInMB": 10240})
        self.admin("namespaces", "set-retention", ns, "--size", "-1", "--time", "-1")
        self.assertEqual(self.json("namespaces", "get-retention", ns),
                         {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})

        self.assertEqual(self.lines("namespaces", "get-message-ttl", ns), ["null"])
        self.admin("namespaces", "set-message-ttl", ns, "--messageTTL", "1h")
        self.assertEqual(self.lines("namespaces", "get-message-ttl", ns), ["3600"])

        self.admin("namespaces", "set-deduplication", ns, "--enable")
        self.assertEqual(self.json("namespaces", "policies", ns)["deduplicationEnabled"], True)
        self.admin("namespaces", "set-deduplication", ns, "--disable")
        self.assertEqual(self.json("namespaces", "policies", ns)["deduplicationEnabled"], False)

        self.admin("namespaces", "set-backlog-quota", ns, "--limit", "2G", "--policy", "producer_exception")
        self.assertEqual(self.json("namespaces", "get-backlog-quotas", ns),
                         {"destination_storage": {"limitSize": 2 * 1024 ** 3, "limitTime": -1,
                                                  "policy": "producer_exception"}})

        self.admin("namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,consume")
        self.assertEqual(self.json("namespaces", "permissions", ns), {"app": ["consume", "produce"]})
        self.admin("namespaces", "revoke-permission", ns, "--role", "app")
        self.assertEqual(self.json("namespaces", "permissions", ns), {})
        _, err = self.admin("namespaces", "grant-permission", ns, "--role", "x", "--actions", "fly",
                            expect=1)
        self.assertIn("HTTP 400 Bad Request", err)

        self.admin("namespaces", "set-max-producers-per-topic", ns, "-p", "3")
        self.admin("namespaces", "set-max-consumers-per-topic", ns, "-c", "4")
        policies = self.json("namespaces", "policies", ns)
        self.assertEqual((policies["max_producers_per_topic"], policies["max_consumers_per_topic"]), (3, 4))
        self.assertEqual(self.lines("namespaces", "get-max-producers-per-topic", ns), ["3"])

        self.admin("topics", "create", f"persistent://{ns}/t1")
        self.assertEqual(self.lines("namespaces", "topics", ns), [f"persistent://{ns}/t1"])
        _, err = self.admin("namespaces", "delete", ns, expect=1)
        self.assertIn("HTTP 409 Conflict", err)
        self.admin("namespaces", "delete", ns, "-f")
        _, err = self.admin("namespaces", "policies", ns, expect=1)
        self.assertIn("Reason: Namespace does not exist", err)
        _, err = self.admin("namespaces", "set-message-ttl", "no-slash", "--messageTTL", "1", expect=1)
        self.assertIn("Invalid namespace name", err)
        _, err = self.admin("namespaces", "set-message-ttl", ns, "--messageTTL", "soon", expect=1)
        self.assertIn("Invalid time 'soon'", err)

    def test_partitioned_topics(self):
        """create/update/get-metadata/partitioned-stats/delete of a partitioned topic."""
        ns = self.namespace()
        topic = f"persistent://{ns}/pt"
        self.admin("topics", "create-partitioned-topic", topic, "-p", "2")
        self.assertEqual(self.json("topics", "get-partitioned-topic-metadata", topic), {"partitions": 2})
        self.admin("topics", "update-partitioned-topic", topic, "-p", "3")
        self.assertEqual(self.json("topics", "get-partitioned-topic-metadata", topic)["partitions"], 3)
        stats = self.json("topics", "partitioned-stats", topic, "--per-partition")
        self.assertEqual(stats["metadata"], {"partitions": 3})
        self.assertEqual(len(stats["partitions"]), 3)
        self.assertIn(f"{topic}-partition-0", self.lines("topics", "list", ns))
        _, err = self.admin("topics", "create-partitioned-topic", topic, "-p", "2", expect=1)
        self.assertIn("HTTP 409 Conflict", err)
        self.admin("topics", "delete-partitioned-topic", topic)
        _, err = self.admin("topics", "get-partitioned-topic-metadata", "persistent://nope/ns/x", expect=1)
        self.assertIn("HTTP 404 Not Found", err)

    def test_topics_and_subscriptions(self):
        """Topic stats, subscriptions, cursor verbs, peek, last-message-id, lifecycle verbs."""
        if pulsar is None:
            raise SkipTest("pulsar-client is not installed")
        ns = self.namespace()
        topic = f"persistent://{ns}/t"
        self.admin("topics", "create", topic)
        self.assertEqual(self.lines("topics", "list", ns), [topic])
        self.admin("topics", "create-subscription", topic, "-s", "early", "-m", "earliest")
        client = pulsar.Client(self.standalone.service_url,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.addCleanup(client.close)
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"hello-%d" % i, properties={"k": "v"}) for i in range(5)]
        producer.close()

        self.assertEqual(self.lines("topics", "subscriptions", topic), ["early"])
        stats = self.json("topics", "stats", topic)
        self.assertEqual(stats["subscriptions"]["early"]["msgBacklog"], 5)
        internal = self.json("topics", "stats-internal", topic)
        self.assertEqual(internal["numberOfEntries"], 5)
        last = self.json("topics", "last-message-id", topic)
        self.assertEqual((last["ledgerId"], last["entryId"]), (ids[-1].ledger_id(), ids[-1].entry_id()))

        out, _ = self.admin("topics", "peek-messages", topic, "-s", "early", "-n", "2")
        self.assertEqual(out.count("Message ID: "), 2)
        self.assertIn(f"Message ID: {ids[0].ledger_id()}:{ids[0].entry_id()}", out)
        self.assertIn("|hello-0         |", out)
        # Properties travel as X-Pulsar-PROPERTY-<key> headers, whose case HTTP does not keep.
        self.assertIn('"k" : "v"', out.lower())

        self.admin("topics", "skip", topic, "-s", "early", "-n", "2")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 3)
        self.admin("topics", "clear-backlog", topic, "-s", "early")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 0)
        self.admin("topics", "reset-cursor", topic, "-s", "early", "-t", "1h")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 5)
        self.admin("topics", "reset-cursor", topic, "-s", "early", "-m",
                   f"{ids[3].ledger_id()}:{ids[3].entry_id()}")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 2)
        self.admin("topics", "expire-messages", topic, "-s", "early", "-t", "0")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 0)

        self.admin("topics", "create-subscription", topic, "-s", "late")
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["late"]["msgBacklog"], 0)
        self.admin("topics", "unsubscribe", topic, "-s", "late")
        _, err = self.admin("topics", "unsubscribe", topic, "-s", "late", expect=1)
        self.assertIn("HTTP 404 Not Found", err)

        self.admin("topics", "unload", topic)
        self.assertEqual(self.json("topics", "stats", topic)["subscriptions"]["early"]["msgBacklog"], 0)
        out, _ = self.admin("topics", "terminate", topic)
        self.assertEqual(out.strip(), f"Topic {topic} successfully terminated at "
                                      f"{ids[-1].ledger_id()}:{ids[-1].entry_id()}")
        self.admin("topics", "delete", topic)
        _, err = self.admin("topics", "stats", topic, expect=1)
        self.assertIn("HTTP 404 Not Found", err)

    def test_compaction_verbs(self):
        """compact and compaction-status reach the server; their answers print as Pulsar's."""
        ns = self.namespace()
        topic = f"persistent://{ns}/c"
        self.admin("topics", "create", topic)
        self.assertEqual(self.json("topics", "compaction-status", topic)["status"], "NOT_RUN")
        out, _ = self.admin("topics", "compact", topic)
        self.assertEqual(out.strip(), f"Topic compaction requested for {topic}")
        # The compaction runs in the background: RUNNING, then SUCCESS (bounded wait).
        deadline = time.monotonic() + 10
        status = self.json("topics", "compaction-status", topic)
        while status["status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
            status = self.json("topics", "compaction-status", topic)
        self.assertEqual(status["status"], "SUCCESS")

    def test_brokers(self):
        """brokers list/healthcheck/leader-broker."""
        host = f"127.0.0.1:{self.standalone.web_port}"
        self.assertEqual(self.lines("brokers", "list", "standalone"), [host])
        self.assertEqual(self.lines("brokers", "healthcheck"), ["ok"])
        self.assertEqual(self.json("brokers", "leader-broker")["brokerId"], host)
        _, err = self.admin("brokers", "list", "nowhere", expect=1)
        self.assertIn("HTTP 404 Not Found", err)

    def test_usage_errors(self):
        """A missing verb or flag is argparse's usage error (exit code 2), as with any CLI."""
        self.admin("topics", expect=2)
        self.admin("topics", "skip", "t", "-s", "x", expect=2)
