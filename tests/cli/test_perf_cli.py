"""pulsar-perf: statistics, progress lines and the summary histogram (the run: tests.client)."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli import perf


class StatsTests(SynchronousTestCase):
    def test_progress_and_summary(self):
        """Progress gives the interval's rate and percentiles; the summary a histogram."""
        stats = perf.Stats("ours")
        stats.start(100.0)
        for i in range(100):
            stats.record(0.001 * (i + 1), 100)    # 1..100 ms
        line = stats.progress(101.0)
        self.assertIn("[ours] Throughput produced:      100.0 msg/s", line)
        self.assertIn("p50 50.", line)
        self.assertIn("max 100.", line)
        self.assertIn("     0.0 msg/s", stats.progress(102.0))
        stats.ended = 102.0
        summary = stats.summary()
        self.assertIn("100 records sent --- 50.0 msg/s", summary)
        self.assertIn("<= 100", summary)
        self.assertIn("100.000", summary)
        self.assertAlmostEqual(stats.rate(), 50.0)

    def test_arguments(self):
        """The produce options and their defaults."""
        args = perf.parser().parse_args(["produce", "t", "-r", "10", "-s", "100",
                                         "--disable-batching", "--client", "official"])
        self.assertEqual((args.rate, args.size, args.disable_batching, args.client, args.max_pending),
                         (10, 100, True, "official", 1000))
        conf = perf._our_producer_conf(args)
        self.assertFalse(conf["batching_enabled"])
        self.assertTrue(conf["block_if_queue_full"])
