"""The ``pulsar`` command: initialize-cluster-metadata and autorecovery."""

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import redirect_stderr

from twisted.internet import defer, reactor, task
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from pulsar_twisted.cli.pulsar import CommandError, initialize_cluster_metadata, main
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.urls import MetadataUrlError, parse_metadata_store_url

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_ROOT = "/pulsar-twisted-tests"


def run_pulsar(*args, timeout=60):
    """Run ``pulsar ARGS`` from this working tree in a child process (blocking)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pulsar_twisted.cli.pulsar", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def init_args(cluster, url, *extra):
    return ("initialize-cluster-metadata", "--cluster", cluster, "--metadata-store", url,
            "--web-service-url", "http://broker-1:8080",
            "--broker-service-url", "pulsar://broker-1:6650", *extra)


class UrlTests(unittest.TestCase):

    def test_zk_urls(self):
        """zk:HOST:PORT[,HOST:PORT][/chroot], the legacy bare form and metadata-store:zk:."""
        self.assertEqual(parse_metadata_store_url("zk:127.0.0.1:2181"), ("127.0.0.1:2181", "/"))
        self.assertEqual(parse_metadata_store_url("zk:a:1,b:2/pulsar/c1"), ("a:1,b:2", "/pulsar/c1"))
        self.assertEqual(parse_metadata_store_url("zk:a:1/"), ("a:1", "/"))
        self.assertEqual(parse_metadata_store_url("zk1:2181"), ("zk1:2181", "/"))
        self.assertEqual(parse_metadata_store_url("metadata-store:zk:a:1"), ("a:1", "/"))

    def test_bad_urls(self):
        """Anything else is a MetadataUrlError naming the URL (the command prints it, exit 1)."""
        for url in ("", "zk:", "zk:host", "zk:host:port", "zk:host:99999", "bogus://x",
                    "memory:local", "etcd:http://x:2379", "zk:a:1//x", "zk:a:1/../b"):
            with self.assertRaises(MetadataUrlError, msg=url) as caught:
                parse_metadata_store_url(url)
            self.assertIn(repr(url), str(caught.exception))


class InitializeTests(unittest.TestCase):
    """The work itself, against the embedded memory store."""

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)

    def init(self, cluster="c1", store=None, config=None, **kw):
        store = store or self.store
        return self.successResultOf(defer.ensureDeferred(initialize_cluster_metadata(
            store, config or store, cluster, kw.get("web", "http://b:8080"),
            kw.get("broker", "pulsar://b:6650"), kw.get("web_tls", ""), kw.get("broker_tls", ""))))

    def json_of(self, path, store=None):
        raw, _ = self.successResultOf((store or self.store).get(path))
        return json.loads(raw)

    def test_creates_cluster_tenants_namespaces_and_ledger_roots(self):
        """Everything brokers and bookies expect is created, in Pulsar's formats."""
        changed = self.init(web_tls="https://b:8443", broker_tls="pulsar+ssl://b:6651")
        self.assertTrue(all(action == "created" for action, _ in changed))
        self.assertEqual(self.json_of("/admin/clusters/c1"), {
            "serviceUrl": "http://b:8080", "brokerServiceUrl": "pulsar://b:6650",
            "serviceUrlTls": "https://b:8443", "brokerServiceUrlTls": "pulsar+ssl://b:6651"})
        for tenant, ns in (("public", "default"), ("pulsar", "system")):
            self.assertEqual(self.json_of(f"/admin/policies/{tenant}"),
                             {"adminRoles": [], "allowedClusters": ["c1"]})
            policies = self.json_of(f"/admin/policies/{tenant}/{ns}")
            self.assertEqual(policies["replication_clusters"], ["c1"])
            self.assertEqual(policies["bundles"]["numBundles"], 4)
        for path in ("/ledgers", "/ledgers/available", "/ledgers/available/readonly",
                     "/ledgers/idgen", "/ledgers/underreplication", "/managed-ledgers"):
            stat = self.successResultOf(self.store.exists(path))
            self.assertIsNotNone(stat, path)
            self.assertFalse(stat.ephemeral)
        self.assertEqual(self.successResultOf(self.store.get_children("/admin/clusters")), ["c1"])

    def test_idempotent(self):
        """A second run changes nothing, and keeps what admins changed meanwhile."""
        self.init()
        instance = self.successResultOf(self.store.get("/ledgers/INSTANCEID"))[0]
        self.successResultOf(self.store.put("/admin/policies/public/default",
                                            json.dumps({"replication_clusters": ["c1"],
                                                        "retention_policies": {"x": 1}}).encode()))
        self.assertEqual(self.init(), [])
        self.assertEqual(self.successResultOf(self.store.get("/ledgers/INSTANCEID"))[0], instance)
        self.assertEqual(self.json_of("/admin/policies/public/default")["retention_policies"],
                         {"x": 1})

    def test_second_cluster_on_shared_configuration_store(self):
        """A second cluster is added to the default tenants and namespaces."""
        self.init("c1")
        changed = self.init("c2")
        self.assertIn(("created", "/admin/clusters/c2"), changed)
        self.assertIn(("updated", "/admin/policies/public/default"), changed)
        self.assertEqual(self.json_of("/admin/policies/public")["allowedClusters"], ["c1", "c2"])
        self.assertEqual(self.json_of("/admin/policies/pulsar/system")["replication_clusters"],
                         ["c1", "c2"])

    def test_separate_configuration_store(self):
        """Admin nodes go to the configuration store, BookKeeper's to the metadata store."""
        config = EmbeddedMetadataStore(None, self.clock)
        self.init(config=config)
        self.assertIsNone(self.successResultOf(self.store.exists("/admin")))
        self.assertIsNone(self.successResultOf(config.exists("/ledgers")))
        self.assertEqual(self.json_of("/admin/clusters/c1", config)["serviceUrl"], "http://b:8080")

    def test_broker_accepts_the_layout(self):
        """The broker's own start-up finds the cluster, tenant and namespace already there."""
        from pulsar_twisted.broker.service import BrokerService
        from pulsar_twisted.config import BrokerConfig

        self.init()
        before = self.json_of("/admin/clusters/c1")
        broker = BrokerService(BrokerConfig(clusterName="c1"), None, self.store, self.clock,
                               "pulsar://other:6650")
        self.successResultOf(broker.start())
        self.assertEqual(self.json_of("/admin/clusters/c1"), before)

    def test_bad_cluster_name(self):
        d = defer.ensureDeferred(initialize_cluster_metadata(
            self.store, self.store, "a/b", "http://x", "pulsar://x"))
        self.failureResultOf(d, CommandError)


class CommandLineTests(unittest.TestCase):

    def test_bad_url_in_process(self):
        """A malformed URL: a clear message on stderr and exit code 1, before any connection."""
        err = io.StringIO()
        with redirect_stderr(err):
            code = main(list(init_args("c1", "zk:localhost:notaport")))
        self.assertEqual(code, 1)
        self.assertIn("pulsar initialize-cluster-metadata: error:", err.getvalue())
        self.assertIn("'localhost:notaport' is not HOST:PORT", err.getvalue())

    def test_bad_url_subprocess(self):
        """The real command exits 1 with the message and no traceback."""
        d = deferToThread(run_pulsar, *init_args("c1", "bogus://nowhere"))

        def check(result):
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("error: metadata store 'bogus://nowhere'", result.stderr)
            self.assertNotIn("Traceback", result.stderr)
        return d.addCallback(check)


class ZooKeeperCommandTests(unittest.TestCase):
    """The real command against the ZooKeeper in PULSAR_TEST_ZK (skipped without one)."""

    def setUp(self):
        from tests.metadata.test_zookeeper import _remove_tree, _zk_address
        self.hosts = _zk_address()
        self.chroot = f"{TEST_ROOT}/cli-{uuid.uuid4().hex}"
        self.url = f"zk:{self.hosts}{self.chroot}"
        self.addCleanup(deferToThread, _remove_tree, self.hosts, self.chroot)

    async def _open(self):
        from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
        store = ZooKeeperMetadataStore(self.hosts, reactor, root=self.chroot, session_timeout=10)
        self.addCleanup(store.close)
        await store.start()
        return store

    @defer.inlineCallbacks
    def test_initialize_twice(self):
        """Run it twice as a process; the nodes read back through ZooKeeperMetadataStore."""
        cluster = f"c-{uuid.uuid4().hex[:8]}"
        first = yield deferToThread(run_pulsar, *init_args(cluster, self.url))
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn(f"created /admin/clusters/{cluster}", first.stdout)
        second = yield deferToThread(run_pulsar, *init_args(cluster, self.url))
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn("nothing to do", second.stdout)
        store = yield defer.ensureDeferred(self._open())
        raw, _ = yield store.get(f"/admin/clusters/{cluster}")
        self.assertEqual(json.loads(raw), {"serviceUrl": "http://broker-1:8080",
                                           "brokerServiceUrl": "pulsar://broker-1:6650"})
        raw, _ = yield store.get("/admin/policies/public/default")
        self.assertEqual(json.loads(raw)["replication_clusters"], [cluster])
        raw, _ = yield store.get("/admin/policies/pulsar/system")
        self.assertEqual(json.loads(raw)["replication_clusters"], [cluster])
        children = yield store.get_children("/ledgers")
        for name in ("available", "idgen", "underreplication", "INSTANCEID"):
            self.assertIn(name, children)

    @defer.inlineCallbacks
    def test_autorecovery_process_elects_itself(self):
        """`pulsar autorecovery` becomes the auditor and gives the election up on SIGTERM."""
        env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        child = subprocess.Popen(
            [sys.executable, "-m", "pulsar_twisted.cli.pulsar", "autorecovery",
             "--metadata-store", self.url], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: child.poll() is None and child.kill())
        from pulsar_twisted.ledger.autorecovery import AUDITOR_ELECTION_PATH
        election = self.chroot + AUDITOR_ELECTION_PATH

        def wait_for(present):
            # A real process: poll ZooKeeper, bounded in time.
            from kazoo.client import KazooClient
            client = KazooClient(hosts=self.hosts)
            client.start(timeout=10)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if (client.exists(election) is not None) == present:
                        return True
                    time.sleep(0.1)
                return False
            finally:
                client.stop()
                client.close()

        elected = yield deferToThread(wait_for, True)
        self.assertTrue(elected, "the autorecovery process never became auditor")
        child.send_signal(signal.SIGTERM)
        output, _ = yield deferToThread(child.communicate, timeout=30)
        self.assertEqual(child.returncode, 0, output)
        gone = yield deferToThread(wait_for, False)
        self.assertTrue(gone, output)
