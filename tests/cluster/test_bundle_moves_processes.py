"""
Moves lose nothing (issue 15, item 5): a real cluster (ZooKeeper, 3 bookies, 3 brokers) with the
official client producing and consuming a partitioned topic while the chaos nemesis unloads and
splits bundles through the admin API of random brokers. The chaos checker's verdict must be clean:
no acknowledged message lost, none stored or delivered twice, none out of order, every send
answered, with deduplication off so that a resend of a stored message would show. Bounded to about 90 s with start-up; skipped without ZooKeeper or the official client.
"""

import io
import json
import time
import urllib.request
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli import admin as cli
from pulsar_twisted.testing.chaos import checker
from pulsar_twisted.testing.cluster import wait_for
from tests.cluster.test_load_evens_out_processes import join_brokers
from tests.cluster.test_processes import AsyncPublisher, ClusterCase, pulsar


class BundleMovesUnderLoadTests(SynchronousTestCase):

    def setUp(self):
        if pulsar is None:
            raise self.skipTest("the official pulsar-client package is not installed")
        from pulsar_twisted.testing.cluster import ZooKeeperServer, ZooKeeperUnavailable
        try:
            self.zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))

    def test_unloads_and_splits_lose_nothing(self):
        """Seed 15, 25 s of unload-bundle / split-bundle faults on 3 brokers, deduplication off
        (a stored message resent by a producer shows as STORED TWICE): a clean verdict."""
        from pulsar_twisted.testing.chaos.nemesis import BUNDLE_KINDS
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, run
        lines = []
        config = ChaosConfig(seed=15, duration=25.0, brokers=3, kinds=BUNDLE_KINDS, producers=4, dedup=False,
                             rate=150.0, warmup=2.0, after_heal=3.0, send_timeout_ms=15000,
                             settle=20.0, read_timeout=30.0, drain_idle=5.0, drain_timeout=30.0,
                             zk_hosts=self.zk.hosts, log=lines.append)
        history, verdict = run(config)
        print("\n  " + "\n  ".join(lines + checker.format_verdict(verdict).splitlines()))
        moves = [f for f in history.faults if f.kind in BUNDLE_KINDS]
        self.assertGreaterEqual(len(moves), 3, "the nemesis moved too few bundles")
        self.assertEqual(history.meta["nemesis_errors"], [])
        self.assertGreater(verdict.acked, 500)
        self.assertTrue(verdict.ok, f"violations: {verdict.violations}")


class AdminOnClusterTests(ClusterCase):
    """The admin verbs on real brokers: pulsar-admin through a broker that does not own the
    bundle, the load report of a cluster broker, the decisions log."""

    def admin(self, broker, *argv):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["--admin-url", broker.web_service_url, *argv], out=out, err=err)
        self.assertEqual(code, 0, err.getvalue())
        text = out.getvalue().strip()
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text

    def test_unload_and_split_through_a_non_owner(self):
        cluster = self.make_cluster(bookies=2, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "zooKeeperSessionTimeoutMillis": 4000})
        first, second = cluster.brokers
        wait_for(lambda: {first.broker_id, second.broker_id} <= set(cluster.registered_brokers()),
                 10, "broker registrations", on_timeout=cluster.logs)
        topic = f"persistent://public/default/moves-{uuid.uuid4().hex[:8]}"
        client = self.client(first.service_url)
        # Subscribed first: without retention, what no subscription holds may be trimmed.
        consumer = client.subscribe(topic, "check")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        bundle = self.admin(second, "topics", "bundle-range", topic)
        # The leader placed the bundle on either broker (idle ones score the same).
        owner = first if cluster.bundle_owners().get(bundle) == first.service_url else second
        other = second if owner is first else first
        self.assertEqual(cluster.bundle_owners().get(bundle), owner.service_url)

        report = self.admin(owner, "broker-stats", "load-report")
        self.assertEqual((report["numTopics"], report["pulsarServiceUrl"]), (1, owner.service_url))
        self.assertIn(f"public/default/{bundle}", report["bundles"])
        raw, _ = cluster.zk.get(cluster.path(f"/loadbalance/brokers/{owner.broker_id}"))
        self.assertIn("cpu", json.loads(raw))

        # Unload through the other broker: the owner closes the topic; the producer comes back.
        self.admin(other, "namespaces", "unload", "public/default", "-b", bundle)
        self.assertIn(f"Unloading topic {topic}", owner.log_text())
        producer.send(b"after unload")
        # Split through the other broker: 307 to the owner (followed), which keeps the halves.
        owner_now = cluster.bundle_owners()[bundle]
        serving = owner if owner_now == owner.service_url else other
        asked = other if serving is owner else owner
        self.admin(asked, "namespaces", "split-bundle", "public/default", "-b", bundle)
        policies = self.admin(asked, "namespaces", "policies", "public/default")
        self.assertEqual(policies["bundles"]["numBundles"], 5)
        half = self.admin(asked, "topics", "bundle-range", topic)
        self.assertEqual(cluster.bundle_owners().get(half), serving.service_url)
        producer.send(b"after split")
        kinds = [d["kind"] for d in self.admin(serving, "broker-stats", "load-decisions")]
        self.assertIn("split", kinds)
        got = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
        self.assertEqual(got, [b"before", b"after unload", b"after split"])


class SheddingOnClusterTests(ClusterCase):
    """The leader's ThresholdShedder on real brokers: every partition starts on one broker, the
    traffic makes it hot (bandwidth only: CPU and memory weigh 0, the NIC is made small), and a
    bundle moves to the idle broker; nothing acknowledged is lost on the way."""

    def test_hot_broker_sheds_a_bundle_to_the_idle_one(self):
        config = {
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "zooKeeperSessionTimeoutMillis": 4000,
            "statsUpdateFrequencyInSecs": 1, "loadBalancerHostUsageCheckIntervalMinutes": 0.03,
            "loadBalancerSheddingIntervalMinutes": 0.1, "loadBalancerReportUpdateMinIntervalMillis": 500,
            "loadBalancerHistoryResourcePercentage": 0, "loadBalancerCPUResourceWeight": 0,
            "loadBalancerMemoryResourceWeight": 0, "loadBalancerDirectMemoryResourceWeight": 0,
            # 4000 Kbit/s: about 250 KB/s in and out is 50% of it.
            "loadBalancerOverrideBrokerNicSpeedGbps": 4000 / 1024 / 1024}
        # The hot broker alone first: every bundle goes to it; the idle one joins afterwards.
        cluster = self.make_cluster(bookies=2, brokers=1, broker_config=config)
        hot = cluster.brokers[0]
        local = f"hot-{uuid.uuid4().hex[:8]}"
        topic = f"persistent://public/default/{local}"
        admin = cli.AdminClient(hot.web_service_url)
        admin.put(f"/admin/v2/persistent/public/default/{local}/partitions", 4)
        client = self.client(hot.service_url)
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60000,
                                          block_if_queue_full=True)
        owners = set(cluster.bundle_owners().values())
        self.assertEqual(owners, {hot.service_url})
        [idle] = join_brokers(cluster, 1, config)
        publisher = AsyncPublisher(producer)
        payload = b"x" * 1000
        moved_at = None
        started = time.monotonic()
        while time.monotonic() - started < 40 and moved_at is None:
            for _ in range(25):
                publisher.send(payload + b"%08d" % publisher.sent)
            producer.flush()
            time.sleep(0.1)
            if idle.service_url in cluster.bundle_owners().values():
                moved_at = time.monotonic() - started
        producer.flush()
        self.assertIsNotNone(moved_at, "no bundle moved to the idle broker\n" + cluster.logs())
        decisions = json.loads(urllib.request.urlopen(
            f"{hot.web_service_url}/admin/v2/broker-stats/load-decisions?kind=shed", timeout=10).read())
        if not decisions:
            decisions = json.loads(urllib.request.urlopen(
                f"{idle.web_service_url}/admin/v2/broker-stats/load-decisions?kind=shed", timeout=10).read())
        self.assertTrue(decisions, "the move was not a logged shed")
        received = self.receive_all(consumer, publisher.acked, timeout=60)
        print(f"\n  shedding: a bundle moved to the idle broker {moved_at:.1f}s into the traffic; "
              f"sent {publisher.sent}, acknowledged {len(publisher.acked)}, consumed "
              f"{len(received & publisher.acked)}; shed: {decisions[0]['reason']}")
        self.assert_all_received(publisher.acked, received)
