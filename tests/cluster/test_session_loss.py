"""
A real ZooKeeper session loss in a real cluster (ZooKeeper + 3 ``pulsar-bookie`` + 1 ``pulsar-broker``
processes, ``pulsar_twisted.testing.cluster``), with the official client publishing by async sends.
Skipped without ZooKeeper or the official client.

How a daemon's session is expired: the process is frozen (SIGSTOP) until ZooKeeper has expired its
session, seen from outside as its ephemeral registration vanishing, then thawed (SIGCONT). This is the
failure that expiry exists for (a long pause or a partition): the daemon resumes believing it still
holds its ephemeral nodes, kazoo learns on reconnecting that the session is gone ("lost") and opens a
new one ("expired-new-session"). The session-id-and-password trick used in
``tests/metadata/test_zookeeper_session.py`` needs the session's password, which only the daemon knows.
The old and new sessions are the ``ephemeralOwner`` of the registration node.

Each test prints its figures and stays well under 60 seconds after the cluster has started.
"""

import os
import signal
import threading
import time
import uuid

from pulsar_twisted.testing.cluster import wait_for
from tests.cluster.test_processes import ClusterCase, pulsar, subscribed_publisher


class SessionLossCase(ClusterCase):

    def owner_of(self, path: str):
        """The session id owning the ephemeral node at ``path`` (under the chroot), or None."""
        try:
            stat = self.cluster.zk.exists(self.cluster.path(path))
        except Exception:
            return None
        return None if stat is None else stat.ephemeralOwner

    def expire_by_freezing(self, process, path: str, timeout: float = 20.0) -> tuple:
        """Freeze ``process`` until the ephemeral ``path`` it owns vanishes; thaw it. Returns
        (old session id, seconds frozen)."""
        old = self.owner_of(path)
        self.assertIsNotNone(old, f"{path} is not registered")
        pid = process.process.pid
        os.kill(pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            wait_for(lambda: self.owner_of(path) is None, timeout, f"{path} to expire",
                     on_timeout=self.cluster.logs)
        finally:
            os.kill(pid, signal.SIGCONT)
        return old, time.monotonic() - frozen

    def publish_across_expiry(self, publisher, process, path: str, before: int = 400,
                              after: int = 400) -> dict:
        """Send ``before`` messages, then keep sending (about 1,000/s) while another thread
        expires ``process``'s session, until it has registered again, then ``after`` more.
        Returns the figures: old and new session, seconds frozen, messages sent meanwhile."""
        figures = {}
        for i in range(before):
            publisher.send(b"m-%06d" % publisher.sent)
        publisher.producer.flush()

        def expire():
            try:
                figures["old"], figures["frozen"] = self.expire_by_freezing(process, path)
                thawed = time.monotonic()
                figures["new"] = wait_for(lambda: self.owner_of(path), 20, f"{path} again",
                                          on_timeout=self.cluster.logs)
                figures["reregistered"] = time.monotonic() - thawed
            except Exception as e:
                figures["error"] = e

        freezer = threading.Thread(target=expire)
        freezer.start()
        first = publisher.sent
        while freezer.is_alive():
            for _ in range(10):
                publisher.send(b"m-%06d" % publisher.sent)
            time.sleep(0.01)
        freezer.join()
        figures["during"] = publisher.sent - first
        if "error" in figures:
            raise figures["error"]
        for i in range(after):
            publisher.send(b"m-%06d" % publisher.sent)
            if i % 100 == 0:
                time.sleep(0.02)
        publisher.producer.flush()
        return figures


class BrokerSessionLossTests(SessionLossCase):
    """The broker's session expires mid-stream: it re-registers, drops and re-acquires its bundle,
    and no acknowledged message is lost."""

    def test_broker_session_expiry_during_async_publish(self):
        cluster = self.make_cluster(bookies=3, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "zooKeeperSessionTimeoutMillis": 4000})
        broker = cluster.brokers[0]
        registration = f"/loadbalance/brokers/{broker.broker_id}"
        client = self.client(broker.service_url)
        topic = f"persistent://public/default/zk-expiry-{uuid.uuid4().hex[:8]}"
        consumer, producer, publisher = subscribed_publisher(client, topic)
        started = time.monotonic()
        owners_before = wait_for(lambda: cluster.bundle_owners() or None, 10, "a bundle owner")
        figures = self.publish_across_expiry(publisher, broker, registration)
        old_session, new_session = figures["old"], figures["new"]
        publish_seconds = time.monotonic() - started
        received = self.receive_all(consumer, publisher.acked, timeout=30)
        owners_after = wait_for(lambda: cluster.bundle_owners() or None, 10, "a bundle owner")
        log = broker.log_text()
        recoveries = log.count("recovered: LAC")
        print(f"\n  broker session expiry: sent {publisher.sent} ({figures['during']} while frozen or "
              f"re-registering), acknowledged {len(publisher.acked)}, failed {len(publisher.failed)}, "
              f"consumed {len(received & publisher.acked)} of the acknowledged; frozen "
              f"{figures['frozen']:.1f}s, registered again {figures['reregistered']:.1f}s after the "
              f"thaw; session {old_session:#x} -> {new_session:#x}; ledgers recovered (fenced) on "
              f"reopening: {recoveries}; publish took {publish_seconds:.1f}s")
        self.assertNotEqual(new_session, old_session)
        self.assertIn("lost (expired)", log)
        self.assertIn("lost bundle", log)
        self.assert_all_received(publisher.acked, received)
        self.assertEqual(len(publisher.acked), publisher.sent,
                         f"sends failed: {list(publisher.failed.items())[:5]}")
        # The ledger the expired session wrote is either closed by the unload before the topic
        # is loaded again (a clean close: nothing to recover) or recovered (fenced) on reopening.
        ml_name = "public/default/persistent/" + topic.rsplit("/", 1)[1]
        self.assertTrue(recoveries >= 1 or f"managed ledger {ml_name} closed" in log,
                        "the managed ledger was neither closed by the unload nor recovered")
        # The same broker serves the topic again: its bundle node is back, in the new session.
        self.assertEqual(set(owners_after.values()), {broker.service_url})
        self.assertTrue(set(owners_before.values()) <= {broker.service_url})
        for name in owners_after:
            self.assertEqual(self.owner_of(f"/namespace/public/default/{name}"), new_session)


class BookieSessionLossTests(SessionLossCase):
    """A bookie's session expires mid-stream: it registers again and publishing goes on."""

    def test_bookie_session_expiry_during_async_publish(self):
        cluster = self.make_cluster(bookies=3, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "bookkeeperClientTimeoutInSeconds": 5})
        client = self.client(cluster.brokers[0].service_url)
        topic = f"persistent://public/default/bk-expiry-{uuid.uuid4().hex[:8]}"
        consumer, producer, publisher = subscribed_publisher(client, topic)
        started = time.monotonic()
        producer.send(b"first")
        publisher.acked.add(b"first")
        counts = {}
        for metadata in cluster.ledger_metadata().values():
            for bookie in metadata.last_ensemble[1]:
                counts[bookie] = counts.get(bookie, 0) + 1
        victim_id = max(sorted(counts), key=counts.get)     # certainly in the topic's ensemble
        victim = next(b for b in cluster.bookies if b.bookie_id == victim_id)
        figures = self.publish_across_expiry(publisher, victim, f"/ledgers/available/{victim_id}")
        old_session, new_session = figures["old"], figures["new"]
        publish_seconds = time.monotonic() - started
        received = self.receive_all(consumer, publisher.acked, timeout=30)
        changed = [lid for lid, m in cluster.ledger_metadata().items() if len(m.ensembles) > 1]
        print(f"\n  bookie session expiry: sent {publisher.sent} ({figures['during']} while frozen or "
              f"re-registering), acknowledged {len(publisher.acked) - 1}, failed "
              f"{len(publisher.failed)}, consumed {len(received & publisher.acked)} of the "
              f"acknowledged; frozen {figures['frozen']:.1f}s, registered again "
              f"{figures['reregistered']:.1f}s after the thaw; {victim_id} session {old_session:#x} -> "
              f"{new_session:#x}; ledgers with an ensemble change: {changed}; publish took "
              f"{publish_seconds:.1f}s")
        self.assertNotEqual(new_session, old_session)
        self.assertIn("lost (expired)", victim.log_text())
        self.assert_all_received(publisher.acked, received)
        self.assertEqual(len(publisher.acked) - 1, publisher.sent,
                         f"sends failed: {list(publisher.failed.items())[:5]}")
        self.assertIn(victim.bookie_id, cluster.available_bookies())


if pulsar is None:  # pragma: no cover
    SessionLossCase.skip = "the official pulsar-client package is not installed"
