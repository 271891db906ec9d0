"""
Moves lose nothing (issue 15, item 5): a real cluster (ZooKeeper, 3 bookies, 3 brokers) with the
official client producing and consuming a partitioned topic while the chaos nemesis unloads and
splits bundles through the admin API of random brokers. The chaos checker's verdict must be clean:
no acknowledged message lost, none stored or delivered twice, none out of order, every send
answered, with deduplication off so that a resend of a stored message would show. Bounded to about 90 s with start-up; skipped without ZooKeeper or the official client.
"""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.chaos import checker


class BundleMovesUnderLoadTests(SynchronousTestCase):

    def setUp(self):
        from tests.cluster.test_processes import pulsar
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
