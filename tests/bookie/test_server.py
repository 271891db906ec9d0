"""BookieServer: registration, read-only switching on disk usage, HTTP health and metrics, and
``twistd -n pulsar-bookie`` as a real process."""

import os
import signal
import subprocess
import sys

from twisted.internet import defer, task
from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim
from twisted.trial import unittest

from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.common.bk_errors import BookieReadOnlyError, LedgerFencedError
from pulsar_twisted.resources.ledgers import LedgerManager, LedgerMetadata
from pulsar_twisted.wire.bookie import pack_entry
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.testing.fake_bookie import FakeBookie
from pulsar_twisted.testing.process import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = b"key"
WRITABLE = "/ledgers/available/b1:3181"
READONLY = "/ledgers/available/readonly/b1:3181"


def packed(ledger_id, entry_id, payload=b"data"):
    return pack_entry(ledger_id, entry_id, -1, len(payload), payload)


def record_ledger(store, ledger_id, bookie_id):
    """Ledger metadata naming ``bookie_id``: a cluster bookie takes adds only for such ledgers."""
    metadata = LedgerMetadata(ensemble_size=1, write_quorum=1, ack_quorum=1,
                              ensembles=((0, (bookie_id,)),), password_digest="", ctime_ms=0)
    return LedgerManager(store).create(ledger_id, metadata)



class _ServerEndpoint:
    """Client endpoint reaching a BookieServer's factory through iosim."""

    def __init__(self, server):
        self.server = server
        self.pump = None

    def connect(self, factory):
        client = factory.buildProtocol(None)
        server = self.server.factory.buildProtocol(None)
        self.pump = iosim.connect(server, iosim.makeFakeServer(server), client,
                                  iosim.makeFakeClient(client), greet=False)
        return defer.succeed(client)


class RegistrationTests(unittest.TestCase):
    """On one MemoryReactorClock: no sockets, no threads."""

    def setUp(self):
        self.reactor = MemoryReactorClock()
        self.store = EmbeddedMetadataStore(None, self.reactor)
        self.successResultOf(self.store.start())
        self.usage = 0.5
        self.bookie = FakeBookie("b1", self.reactor)
        self.server = BookieServer(self.bookie, self.reactor, endpoint="tcp:3181", bookie_id="b1:3181",
                                   metadata_store=self.store.new_session(), own_storage=False,
                                   disk_usage=lambda: self.usage, disk_check_interval=10.0)
        self.endpoint = _ServerEndpoint(self.server)
        self.client = TcpBookieClient(self.reactor, endpoint_factory=lambda _: self.endpoint)
        self.successResultOf(record_ledger(self.store, 1, "b1:3181"))

    def exists(self, path):
        return self.successResultOf(self.store.exists(path))

    def add(self, entry_id):
        d = self.client.add_entry("b1:3181", 1, entry_id, KEY, packed(1, entry_id))
        self.endpoint.pump.flush()
        return d

    def test_registration_ephemeral_and_removed_on_stop(self):
        """Start registers an ephemeral node; stop removes it (and stops listening)."""
        self.successResultOf(self.server.start())
        stat = self.exists(WRITABLE)
        self.assertTrue(stat.ephemeral)
        self.assertEqual(len(self.reactor.tcpServers), 1)
        self.successResultOf(self.server.stop())
        self.assertIsNone(self.exists(WRITABLE))

    def test_read_only_switch(self):
        """Above diskUsageThreshold: read-only, registered under readonly/, adds refused; back
        writable only below diskUsageLwmThreshold."""
        self.successResultOf(self.server.start())
        self.successResultOf(self.add(0))
        self.usage = 0.96
        self.reactor.advance(10)
        self.assertTrue(self.server.read_only)
        self.assertIsNone(self.exists(WRITABLE))
        self.assertTrue(self.exists(READONLY).ephemeral)
        self.failureResultOf(self.add(1), BookieReadOnlyError)
        self.usage = 0.92   # between the thresholds: stays read-only
        self.reactor.advance(10)
        self.assertTrue(self.server.read_only)
        self.usage = 0.85
        self.reactor.advance(10)
        self.assertFalse(self.server.read_only)
        self.assertIsNotNone(self.exists(WRITABLE))
        self.assertIsNone(self.exists(READONLY))
        self.successResultOf(self.add(1))
        self.successResultOf(self.server.stop())
        self.assertIsNone(self.exists(WRITABLE))

    def test_full_disk_at_start_registers_read_only(self):
        self.usage = 0.99
        self.successResultOf(self.server.start())
        self.assertIsNone(self.exists(WRITABLE))
        self.assertIsNotNone(self.exists(READONLY))

    def test_registration_remade_after_loss(self):
        """A registration removed behind the bookie's back (session loss) is made again."""
        self.successResultOf(self.server.start())
        self.successResultOf(self.store.delete(WRITABLE))
        self.assertIsNotNone(self.exists(WRITABLE))

    def test_registration_checked_periodically(self):
        """Each disk check also verifies the node (covers losses no notification reported)."""
        self.successResultOf(self.server.start())
        self.server.registered_path = None   # as if a notification had been missed
        self.successResultOf(self.store.delete(WRITABLE))
        self.reactor.advance(10)
        self.assertIsNotNone(self.exists(WRITABLE))

    def test_metadata_unavailable_is_a_warning_and_retried(self):
        """A periodic check meeting a lost ZooKeeper connection logs a warning (no traceback, no
        critical line) and the next check registers."""
        self.successResultOf(self.server.start())
        self.successResultOf(self.store.delete(WRITABLE))
        self.server.registered_path = None
        events = []
        from twisted.logger import globalLogPublisher
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        original = self.server.sync_registration
        self.server.sync_registration = lambda: defer.fail(MetadataUnavailableError("zookeeper: ConnectionLoss"))
        self.reactor.advance(10)
        failures = [e for e in events if "log_failure" in e]
        warnings = [e for e in events if "metadata unavailable" in e.get("log_format", "")]
        self.assertEqual((len(failures), len(warnings)), (0, 1))
        self.server.sync_registration = original
        self.reactor.advance(10)
        self.assertIsNotNone(self.exists(WRITABLE))

    def test_no_store_no_registration(self):
        server = BookieServer(self.bookie, self.reactor, endpoint="tcp:0", own_storage=False,
                              disk_usage=lambda: 0.1)
        self.successResultOf(server.start())
        self.assertEqual(server.bookie_id, "localhost:0")
        self.successResultOf(server.stop())


class HttpTests(unittest.TestCase):
    """Real reactor, real storage: health and metrics over HTTP on 127.0.0.1."""

    timeout = 30

    async def get(self, port, path):
        from twisted.internet import reactor
        from twisted.web.client import Agent, readBody
        response = await Agent(reactor).request(b"GET", f"http://127.0.0.1:{port}{path}".encode())
        body = await readBody(response)
        return response.code, response.headers.getRawHeaders(b"content-type")[0], body

    def test_http(self):
        return defer.ensureDeferred(self._test_http())

    async def _test_http(self):
        """/heartbeat answers OK, /api/v1/bookie/state JSON, /metrics Prometheus text with the add
        counted."""
        from twisted.internet import reactor
        base = self.mktemp()
        storage = BookieStorage(f"{base}/journal", [f"{base}/ledgers"], reactor,
                                journal_sync_data=False, flush_interval_ms=0, gc_wait_time_ms=0)
        store = EmbeddedMetadataStore(None, reactor)
        await store.start()
        self.addCleanup(store.close)
        server = BookieServer(storage, reactor, endpoint="tcp:0:interface=127.0.0.1",
                              advertised_address="127.0.0.1", metadata_store=store,
                              data_dirs=[base], http_endpoint="tcp:0:interface=127.0.0.1",
                              disk_usage=lambda: 0.25, disk_check_interval=0)
        await server.start()
        self.addCleanup(server.stop)
        client = TcpBookieClient(reactor)
        self.addCleanup(client.close)
        await record_ledger(store, 4, server.bookie_id)
        await client.add_entry(server.bookie_id, 4, 0, KEY, packed(4, 0))
        self.assertEqual(await client.read_entry(server.bookie_id, 4, 0), packed(4, 0))
        port = server.http_port.getHost().port
        self.assertEqual(await self.get(port, "/heartbeat"), (200, b"text/plain", b"OK"))
        code, _, body = await self.get(port, "/api/v1/bookie/state")
        import json
        self.assertEqual((code, json.loads(body)), (200, {
            "running": True, "readOnly": False, "shuttingDown": False,
            "availableForHighPriorityWrites": True}))
        code, _, body = await self.get(port, "/api/v1/bookie/info")
        self.assertEqual(json.loads(body)["bookieId"], server.bookie_id)
        code, content_type, body = await self.get(port, "/metrics")
        self.assertEqual(code, 200)
        self.assertIn(b"text/plain", content_type)
        text = body.decode()
        for line in ("bookie_add_entry_total 1.0", "bookie_read_entry_total 1.0", "bookie_read_only 0.0",
                     "bookie_disk_usage_ratio 0.25",
                     'bookie_requests_total{op="add_entry",status="OK"} 1.0'):
            self.assertIn(line, text)
        self.assertIn("bookie_journal_fsync_total", text)
        self.assertIn("bookie_journal_groups_total", text)


class TwistdTests(unittest.TestCase):
    """``twistd -n pulsar-bookie -c <conf>`` as a real process."""

    timeout = 60

    def test_twistd_bookie(self):
        return defer.ensureDeferred(self._test_twistd())

    async def _test_twistd(self):
        """The daemon serves an add and a read to a TcpBookieClient, registers in ZooKeeper when
        PULSAR_TEST_ZK is set, and stops on SIGTERM."""
        from twisted.internet import reactor
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        port, http_port = free_port(), free_port()
        zk = os.environ.get("PULSAR_TEST_ZK")
        conf = os.path.join(base, "bookkeeper.conf")
        with open(conf, "w") as f:
            f.write(f"bookiePort={port}\nadvertisedAddress=127.0.0.1\n"
                    f"journalDirectory={base}/journal\nledgerDirectories={base}/ledgers\n"
                    f"journalSyncData=false\nhttpServerHost=127.0.0.1\nhttpServerPort={http_port}\n"
                    + (f"metadataServiceUri=zk+null://{zk}/ledgers\n" if zk else ""))
        log_path = os.path.join(base, "bookie.log")
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n",
                 "--pidfile=", "-l", "-", "pulsar-bookie", "-c", conf],
                cwd=base, env=env, stdout=log_file, stderr=subprocess.STDOUT)

        def kill():
            if process.poll() is None:
                process.kill()
                process.wait()
        self.addCleanup(kill)

        def log_tail():
            with open(log_path, errors="replace") as f:
                return f.read()[-3000:]

        bookie = f"127.0.0.1:{port}"
        client = TcpBookieClient(reactor, request_timeout=5.0, backoff_initial=0.05, backoff_max=0.2)
        self.addCleanup(client.close)
        for _ in range(300):   # bounded wait for the port: at most ~30 s
            if process.poll() is not None:
                self.fail(f"pulsar-bookie exited with {process.returncode}:\n{log_tail()}")
            try:
                info = await client.info(bookie)
                break
            except Exception:
                await task.deferLater(reactor, 0.1, lambda: None)
        else:
            self.fail(f"pulsar-bookie did not answer on {bookie}:\n{log_tail()}")
        self.assertEqual(info["bookie_id"], bookie)
        ledger_id = 11
        if zk:
            from pulsar_twisted.resources.ledgers import ledger_path
            from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
            store = ZooKeeperMetadataStore(zk, reactor)
            await store.start()
            self.addCleanup(store.close)
            self.assertIn(bookie, await store.get_children("/ledgers/available"))
            # A cluster bookie refuses a ledger without metadata, and takes one naming it. The id
            # is the port, so parallel runs sharing this ZooKeeper root do not collide.
            ledger_id = 9_000_000_000 + port
            with self.assertRaises(LedgerFencedError):
                await client.add_entry(bookie, ledger_id, 0, KEY, packed(ledger_id, 0, b"hello"))
            await record_ledger(store, ledger_id, bookie)
            self.addCleanup(store.delete, ledger_path(ledger_id))
        await client.add_entry(bookie, ledger_id, 0, KEY, packed(ledger_id, 0, b"hello"))
        self.assertEqual(await client.read_entry(bookie, ledger_id, 0), packed(ledger_id, 0, b"hello"))
        await client.close()
        process.send_signal(signal.SIGTERM)
        for _ in range(200):
            if process.poll() is not None:
                break
            await task.deferLater(reactor, 0.1, lambda: None)
        else:
            self.fail(f"pulsar-bookie did not stop on SIGTERM:\n{log_tail()}")
        # Recent twistd re-raises the SIGTERM it stopped on, so -SIGTERM is a clean stop too.
        self.assertIn(process.returncode, (0, -signal.SIGTERM), log_tail())
        self.assertIn("pulsar-bookie " + bookie + " ready", log_tail())
        if zk:
            self.assertNotIn(bookie, await store.get_children("/ledgers/available"))


class ConfigTests(unittest.SynchronousTestCase):

    def test_bookkeeper_conf(self):
        """conf/bookkeeper.conf loads into BookieConfig with BookKeeper's defaults."""
        from pulsar_twisted.metadata.urls import parse_metadata_service_uri
        from pulsar_twisted.config import BookieConfig, ConfigError
        config = BookieConfig.from_file(os.path.join(ROOT, "conf", "bookkeeper.conf"))
        self.assertEqual((config.bookiePort, config.httpServerPort), (3181, 8000))
        self.assertEqual((config.diskUsageThreshold, config.diskUsageLwmThreshold), (0.95, 0.90))
        self.assertEqual(config.metadataServiceUri, "")
        self.assertEqual(parse_metadata_service_uri("zk+null://a:2181;b:2181/ledgers"),
                         ("a:2181,b:2181", "/"))
        self.assertEqual(parse_metadata_service_uri("zk://a:2181/pulsar/ledgers"), ("a:2181", "/pulsar"))
        self.assertRaises(ConfigError, parse_metadata_service_uri, "http://a/ledgers")
