"""
A real cluster: ZooKeeper, ``twistd pulsar-bookie`` and ``twistd pulsar-broker`` processes on
127.0.0.1 (``pulsar_twisted.testing.cluster``), driven by the official client. Skipped without
ZooKeeper or the official client. Each test prints its figures.
"""

import os
import threading
import time
import urllib.request
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.ownership import bundle_for
from pulsar_twisted.resources.policies import even_boundaries
from pulsar_twisted.testing.cluster import Cluster, ZooKeeperServer, ZooKeeperUnavailable, wait_for
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None


def _client_logger(path):
    return official_client_logger(f"pulsar-cluster.{path}", path)


class AsyncPublisher:
    """Async sends recording the payloads whose callback reported success."""

    def __init__(self, producer):
        self.producer = producer
        self.acked = set()
        self.failed = {}
        self.sent = 0
        self._lock = threading.Lock()

    def send(self, payload: bytes):
        def done(result, _msg_id, payload=payload):
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.acked.add(payload)
                else:
                    self.failed[payload] = str(result)
        self.producer.send_async(payload, done)
        self.sent += 1


def subscribed_publisher(client, topic):
    """On ``topic``: a consumer of subscription "sub", then an unbatched producer (send timeout 60 s,
    blocking when its queue is full) wrapped in an AsyncPublisher; returns all three."""
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60000,
                                      block_if_queue_full=True)
    return consumer, producer, AsyncPublisher(producer)


class ClusterCase(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def make_cluster(self, **kwargs) -> Cluster:
        try:
            zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        cluster = Cluster(zk, **kwargs)
        self.addCleanup(cluster.cleanup)
        self.addCleanup(self._report_tracebacks, cluster)
        cluster.start()
        self.cluster = cluster
        return cluster

    @staticmethod
    def _report_tracebacks(cluster):
        for name, blocks in cluster.tracebacks().items():
            print(f"\n  {name} logged {len(blocks)} traceback(s); first:\n{blocks[0]}")

    def client(self, url):
        client = pulsar.Client(url, operation_timeout_seconds=30,
                               logger=_client_logger(os.path.join(self.cluster.directory, "client.log")))
        self.addCleanup(self._close, client)
        return client

    @staticmethod
    def _close(client):
        try:
            client.close()
        except Exception:
            pass

    def receive_all(self, consumer, wanted: set, timeout: float) -> set:
        """Receive (and ack) until every payload of ``wanted`` arrived or ``timeout`` passes."""
        received = set()
        deadline = time.monotonic() + timeout
        while not wanted <= received and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            received.add(message.data())
            consumer.acknowledge(message)
        return received

    def assert_all_received(self, wanted, received):
        missing = wanted - received
        if missing:
            self.fail(f"{len(missing)} acknowledged messages never consumed "
                      f"(e.g. {sorted(missing)[:5]})\n" + self.cluster.logs())


class BookieFailureTests(ClusterCase):
    """Publishing goes on through an ensemble change when a bookie dies (kill -9)."""

    def test_kill_bookie_during_async_publish(self):
        """4 bookies, E=3 Qw=2 Qa=2: kill -9 one bookie of the ensemble in mid-stream; every
        message whose send callback succeeded is consumed afterwards. (An ensemble change needs a
        spare bookie: with E=3 that means at least 4.)"""
        cluster = self.make_cluster(bookies=4, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 3, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "bookkeeperClientTimeoutInSeconds": 5})
        client = self.client(cluster.brokers[0].service_url)
        topic = f"persistent://public/default/bookie-kill-{uuid.uuid4().hex[:8]}"
        consumer, producer, publisher = subscribed_publisher(client, topic)
        total, kill_at = 1500, 500
        victim = None
        started = time.monotonic()
        for i in range(total):
            publisher.send(b"m-%06d" % i)
            if i == kill_at:
                producer.flush()
                # The bookie holding the most ledgers: certainly in the topic ledger's ensemble.
                ledgers = cluster.ledger_metadata()
                counts = {}
                for metadata in ledgers.values():
                    for bookie in metadata.last_ensemble[1]:
                        counts[bookie] = counts.get(bookie, 0) + 1
                victim_id = max(sorted(counts), key=counts.get)
                victim = next(b for b in cluster.bookies if b.bookie_id == victim_id)
                victim.kill9()
            if i % 100 == 0:
                time.sleep(0.02)
        producer.flush()
        publish_seconds = time.monotonic() - started
        received = self.receive_all(consumer, publisher.acked, timeout=60)
        changed = [lid for lid, m in cluster.ledger_metadata().items() if len(m.ensembles) > 1]
        print(f"\n  bookie kill: sent {publisher.sent}, acknowledged {len(publisher.acked)}, "
              f"failed {len(publisher.failed)}, consumed {len(received & publisher.acked)} of the "
              f"acknowledged; ledgers with an ensemble change: {changed}; publish took "
              f"{publish_seconds:.1f}s; killed {victim.bookie_id}")
        self.assert_all_received(publisher.acked, received)
        self.assertGreater(len(publisher.acked), kill_at, "publishing stopped after the bookie died")
        self.assertTrue(changed, "no ensemble change happened\n" + cluster.logs())


class TwoBrokerTests(ClusterCase):
    """Two brokers sharing ZooKeeper and bookies: bundles, redirects, takeover after kill -9."""

    def test_redirect_and_takeover(self):
        cluster = self.make_cluster(bookies=3, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2})
        broker_a, broker_b = cluster.brokers
        wait_for(lambda: {broker_a.broker_id, broker_b.broker_id} <= set(cluster.registered_brokers()),
                 10, "broker registrations", on_timeout=cluster.logs)
        prefix = uuid.uuid4().hex[:8]
        bounds = even_boundaries(4)
        names = {}
        i = 0
        while len(names) < 2:
            name = f"persistent://public/default/{prefix}-{i}"
            names.setdefault(bundle_for("public/default", bounds, name), name)
            i += 1
        (bundle_a, topic_a), (bundle_b, topic_b) = names.items()

        # The leader places each free bundle (idle brokers tie: drawn at random); unloaded, a
        # bundle is placed anew: until the two bundles sit on different brokers.
        setup = self.client(broker_a.service_url)
        for _ in range(12):
            for topic in (topic_a, topic_b):
                setup.create_producer(topic).close()
            owners = cluster.bundle_owners()
            if owners.get(bundle_a.range_name) != owners.get(bundle_b.range_name):
                break
            request = urllib.request.Request(
                f"{broker_a.web_service_url}/admin/v2/namespaces/public/default/{bundle_b.range_name}/unload",
                method="PUT")
            urllib.request.urlopen(request, timeout=20).read()
        if owners.get(bundle_a.range_name) == broker_b.service_url:
            broker_a, broker_b = broker_b, broker_a
        self.assertEqual(owners.get(bundle_a.range_name), broker_a.service_url)
        self.assertEqual(owners.get(bundle_b.range_name), broker_b.service_url)
        client_a = self.client(broker_a.service_url)
        producer_a = client_a.create_producer(topic_a)
        producer_a.send(b"on A")

        # Through A, a topic of B's bundle: redirected to B, and it works.
        consumer, producer, publisher = subscribed_publisher(client_a, topic_b)
        for i in range(200):
            publisher.send(b"b-%05d" % i)
        producer.flush()
        self.assertEqual(len(publisher.acked), 200, publisher.failed)
        # The load log gathers a burst's lines for up to load_log.WINDOW_SECONDS: wait for it.
        wait_for(lambda: "Loaded topic " + topic_b in broker_b.log_text(), 10,
                 "B's Loaded topic line", on_timeout=cluster.logs)
        self.assertNotIn("Loaded topic " + topic_b, broker_a.log_text())

        # kill -9 B in mid-stream: its bundle node expires with its session, A takes over.
        killed_at = time.monotonic()
        broker_b.kill9()
        for i in range(200, 400):
            publisher.send(b"b-%05d" % i)
            if i % 50 == 0:
                time.sleep(0.05)
        producer.flush()
        wait_for(lambda: cluster.bundle_owners().get(bundle_b.range_name) == broker_a.service_url,
                 30, "broker A to own B's bundle", on_timeout=cluster.logs)
        takeover = time.monotonic() - killed_at
        received = self.receive_all(consumer, publisher.acked, timeout=60)
        print(f"\n  two brokers: sent {publisher.sent} to {topic_b}, acknowledged "
              f"{len(publisher.acked)}, failed {len(publisher.failed)}, consumed "
              f"{len(received & publisher.acked)} of the acknowledged; A served the topic "
              f"{takeover:.1f}s after B's kill -9 (session timeout 4s)")
        self.assert_all_received(publisher.acked, received)
        wait_for(lambda: "Loaded topic " + topic_b in broker_a.log_text(), 10,
                 "A's Loaded topic line", on_timeout=cluster.logs)
        self.assertEqual(cluster.registered_brokers(), [broker_a.broker_id])


class AutoRecoveryTests(ClusterCase):
    """A bookie lost for good: the auto-recovery daemon in the bookies restores the replicas."""

    def test_replicas_restored_after_bookie_loss(self):
        cluster = self.make_cluster(
            bookies=3, brokers=1,
            broker_config={"managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
                           "managedLedgerDefaultAckQuorum": 2},
            bookie_config={"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": 0})
        broker = cluster.brokers[0]
        client = self.client(broker.service_url)
        topic = f"persistent://public/default/recovery-{uuid.uuid4().hex[:8]}"
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic, batching_enabled=False)
        payloads = {b"r-%04d" % i for i in range(100)}
        for payload in sorted(payloads):
            producer.send(payload)
        client.close()
        broker.stop()       # closes the ledgers: auto-recovery copies closed segments only

        ledgers = cluster.ledger_metadata()
        topic_ledger, metadata = max(ledgers.items(), key=lambda kv: kv[1].last_entry_id)
        victim_id, original_id = metadata.last_ensemble[1]
        by_id = {b.bookie_id: b for b in cluster.bookies}
        by_id[victim_id].kill9()
        started = time.monotonic()

        def restored():
            current = cluster.ledger_metadata()
            return all(victim_id not in m.all_bookies() for m in current.values()) and current
        current = wait_for(restored, 60, f"ledger metadata without {victim_id}",
                           interval=0.5, on_timeout=cluster.logs)
        seconds = time.monotonic() - started
        new_id = (set(current[topic_ledger].last_ensemble[1]) - {original_id}).pop()
        print(f"\n  auto-recovery: {len(ledgers)} ledgers, {victim_id} replaced in "
              f"{seconds:.1f}s; topic ledger {topic_ledger} now on "
              f"{current[topic_ledger].last_ensemble[1]}")

        # Only the new replica left: the broker (restarted with E=Qw=Qa=1 since one bookie
        # remains) must read every entry from it.
        by_id[original_id].kill9()
        broker.settings.update({"managedLedgerDefaultEnsembleSize": 1,
                                "managedLedgerDefaultWriteQuorum": 1,
                                "managedLedgerDefaultAckQuorum": 1})
        broker.write_config()
        broker.start()
        client = self.client(broker.service_url)
        consumer = client.subscribe(topic, "sub")
        received = self.receive_all(consumer, payloads, timeout=30)
        print(f"  read {len(received & payloads)} of {len(payloads)} messages from {new_id} alone")
        self.assert_all_received(payloads, received)


class BookieTLSTests(ClusterCase):
    """The broker talks TLS to bookies (bookkeeperTLS* keys), with a client certificate."""

    def test_publish_over_mutual_tls_to_bookies(self):
        from pulsar_twisted.testing.certs import TestPKI
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        pki = TestPKI(directory)
        bookie_cert = pki.issue("bookie", hosts=["127.0.0.1"])
        broker_cert = pki.issue("broker", client=True)
        cluster = self.make_cluster(
            bookies=2, brokers=1,
            broker_config={"managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
                           "managedLedgerDefaultAckQuorum": 2,
                           "bookkeeperTLSTrustCertsFilePath": pki.ca_cert,
                           "bookkeeperTLSClientAuthentication": "true",
                           "bookkeeperTLSCertificateFilePath": broker_cert.cert,
                           "bookkeeperTLSKeyFilePath": broker_cert.key},
            bookie_config={"bookieEndpoint": "", "tlsCertificatePath": bookie_cert.cert,
                           "tlsKeyStore": bookie_cert.key, "tlsTrustStore": pki.ca_cert,
                           "tlsClientAuthentication": "true"})
        client = self.client(cluster.brokers[0].service_url)
        topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        payloads = {b"tls-%03d" % i for i in range(20)}
        for payload in sorted(payloads):
            producer.send(payload)
        self.assert_all_received(payloads, self.receive_all(consumer, payloads, timeout=20))
        log = cluster.brokers[0].log_text()
        self.assertIn("connected to bookie", log)
