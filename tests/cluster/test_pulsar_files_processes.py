"""
A Pulsar user's own configuration files START the daemons (issue 13, item 9): ``twistd
pulsar-bookie`` on Pulsar's bookkeeper.conf, ``twistd pulsar-broker`` on Pulsar's broker.conf and
``twistd pulsar-standalone`` on Pulsar's standalone.conf (the files in tests/fixtures/, unchanged),
each followed by override lines that change only what must differ on a shared test machine:

- bookkeeper.conf: ``bookiePort``, ``journalDirectory``, ``ledgerDirectories`` (ports and
  directories), ``zkServers`` (the ZooKeeper address: the fixture relies on this deprecated key with
  an empty ``metadataServiceUri``, as Pulsar's file does) and ``zkLedgersRootPath`` (the ZooKeeper
  directory, so that runs sharing the server see nothing of each other);
- broker.conf: ``brokerServicePort``, ``webServicePort``, ``zookeeperServers`` (the ZooKeeper
  address with the run's chroot, through the deprecated key, metadataStoreUrl staying empty as in
  the file) and ``clusterName``, which Pulsar's file leaves empty for the operator to fill in;
- standalone.conf: ``brokerServicePort``, ``webServicePort``, ``dataDirectory``,
  ``journalDirectory``, ``ledgerDirectories`` (the process harness also writes ``bindAddress`` and
  ``advertisedAddress``, here with the values the fixture already means: 0.0.0.0 and localhost).

The bookie is checked by its registration in ZooKeeper, the broker and the standalone by the official
client producing and consuming. Skipped without ZooKeeper (``PULSAR_TEST_ZK``) or the official
client; each test is bounded to well under 30 s.
"""

import os
import shutil
import tempfile
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.metadata import layout
from pulsar_twisted.testing.cluster import (
    HOST, Cluster, DaemonProcess, ZooKeeperServer, ZooKeeperUnavailable, wait_for)
from pulsar_twisted.testing.process import StandaloneProcess, free_port
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def fixture_text(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def round_trip(service_url: str, topic: str, count: int = 5) -> list:
    """Produce ``count`` messages on ``topic`` with the official client and consume them; the
    payloads received, in order."""
    logger = official_client_logger("pulsar-files",
                                    os.path.join(tempfile.gettempdir(), "pulsar-files-client.log"))
    client = pulsar.Client(service_url, operation_timeout_seconds=15, logger=logger)
    try:
        consumer = client.subscribe(topic, "files")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(f"m{i}".encode())
        received = []
        for _ in range(count):
            message = consumer.receive(timeout_millis=10000)
            consumer.acknowledge(message)
            received.append(message.data().decode())
        return received
    finally:
        client.close()


def bookie_from_fixture(name: str, directory: str, zk_hosts: str, chroot: str) -> DaemonProcess:
    """``twistd pulsar-bookie`` on Pulsar's bookkeeper.conf plus the override lines of the module
    docstring. Its bookie id is the fixture's: advertisedAddress (empty: localhost) and its port."""
    port = free_port(HOST)
    settings = {
        "bookiePort": port,
        "journalDirectory": os.path.join(directory, "journal"),
        "ledgerDirectories": os.path.join(directory, "ledgers"),
        "zkServers": zk_hosts,
        "zkLedgersRootPath": f"{chroot}/ledgers",
    }
    bookie = DaemonProcess(name, "pulsar-bookie", directory, settings, port,
                           base_text=fixture_text("pulsar-bookkeeper.conf"))
    bookie.bookie_id = f"localhost:{port}"
    return bookie


class PulsarFilesProcessCase(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def setUp(self):
        try:
            self.zk_server = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        self.directory = tempfile.mkdtemp(prefix="pulsar-files-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        # A Cluster with no process of its own: its chroot, its initialized metadata and its
        # kazoo client for inspection; every daemon below is started from a Pulsar file.
        self.cluster = Cluster(self.zk_server, bookies=0, brokers=0)
        self.addCleanup(self.cluster.cleanup)
        self.cluster.start()

    def start(self, process):
        # Listed in the cluster too, for its log tails in failure messages (and its cleanup).
        (self.cluster.bookies if process.plugin == "pulsar-bookie" else self.cluster.brokers).append(process)
        process.start()
        return process

    def start_bookies(self, count: int) -> list:
        bookies = [self.start(bookie_from_fixture(f"bookie{i}", os.path.join(self.directory, f"bookie{i}"),
                                                  self.zk_server.hosts, self.cluster.chroot))
                   for i in range(count)]
        wanted = {bookie.bookie_id for bookie in bookies}
        wait_for(lambda: wanted <= set(self.cluster.available_bookies()), 15,
                 "registrations of the bookies started on Pulsar's bookkeeper.conf",
                 on_timeout=self.cluster.logs)
        return bookies


class BookieFromPulsarFileTests(PulsarFilesProcessCase):
    def test_bookie_registers(self):
        """Pulsar's bookkeeper.conf (autoRecoveryDaemonEnabled=true, metadataServiceUri empty,
        zkServers set) starts the bookie: it registers under zkLedgersRootPath's available bookies
        and the auto-recovery daemon runs on the metadata service derived from zkServers."""
        bookie, = self.start_bookies(1)
        self.assertIn(bookie.bookie_id, self.cluster.available_bookies())
        self.assertIsNotNone(self.cluster.session_of(f"{layout.AVAILABLE_PATH}/{bookie.bookie_id}"))
        log = bookie.log_text()
        self.assertIn("auditor", log)
        self.assertIn(f"root {self.cluster.chroot}", log)
        self.assertIn("not implemented", log)


class BrokerFromPulsarFileTests(PulsarFilesProcessCase):
    def test_broker_serves(self):
        """Pulsar's broker.conf with zookeeperServers (metadataStoreUrl left empty, as in old
        deployments) starts a broker on two bookies started from Pulsar's bookkeeper.conf (the
        file's ensemble 2 / write 2 / ack 2); the official client produces and consumes through it."""
        self.start_bookies(2)
        port, web_port = free_port(HOST), free_port(HOST)
        settings = {
            "brokerServicePort": port, "webServicePort": web_port,
            "zookeeperServers": f"{self.zk_server.hosts}{self.cluster.chroot}",
            "clusterName": "test",
        }
        broker = self.start(DaemonProcess("broker", "pulsar-broker", os.path.join(self.directory, "broker"),
                                          settings, port, base_text=fixture_text("pulsar-broker.conf")))
        wait_for(lambda: any(name.endswith(f":{web_port}") for name in self.cluster.registered_brokers()),
                 15, "the broker's registration", on_timeout=self.cluster.logs)
        topic = f"persistent://public/default/files-{uuid.uuid4().hex[:8]}"
        self.assertEqual(round_trip(f"pulsar://{HOST}:{port}", topic), [f"m{i}" for i in range(5)])
        self.assertIn("not implemented", broker.log_text())


class StandaloneFromPulsarFileTests(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def test_standalone_serves(self):
        """Pulsar's standalone.conf starts ``twistd pulsar-standalone``; the official client
        produces and consumes on public/default."""
        standalone = StandaloneProcess(config={"bindAddress": "0.0.0.0", "advertisedAddress": "localhost"},
                                       base_text=fixture_text("pulsar-standalone.conf"))
        self.addCleanup(standalone.cleanup)
        standalone.start()
        topic = f"persistent://public/default/files-{uuid.uuid4().hex[:8]}"
        self.assertEqual(round_trip(standalone.service_url, topic), [f"m{i}" for i in range(5)])
        self.assertIn("not implemented", standalone.log_text())
