"""/metrics: the storage write latency and entry size histograms, with Pulsar's names and labels."""

from twisted.internet import defer

from tests.web.support import WebTestCase

TOPIC = "persistent://public/default/storage-metrics"
LABELS = 'cluster="standalone",namespace="public/default",topic="persistent://public/default/storage-metrics"'


class StorageMetricsTests(WebTestCase):

    @defer.inlineCallbacks
    def test_histograms_scraped(self):
        """After 4 small entries: every bucket family present, counts 4, sizes in le_128."""
        client = yield self.producer(TOPIC)
        yield self.publish(client, 4)
        code, text, _ = yield self.get("/metrics")
        self.assertEqual(code, 200)
        text = text.decode()
        for suffix in ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow"):
            self.assertIn(f"\npulsar_storage_write_latency_le_{suffix}{{{LABELS}}} ", text)
        for suffix in ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow"):
            self.assertIn(f"\npulsar_entry_size_le_{suffix}{{{LABELS}}} ", text)
        for line in (f"pulsar_storage_write_latency_count{{{LABELS}}} 4.0",
                     f"pulsar_entry_size_count{{{LABELS}}} 4.0",
                     f"pulsar_entry_size_le_128{{{LABELS}}} 4.0",
                     f"pulsar_entry_size_le_overflow{{{LABELS}}} 0.0"):
            self.assertIn(line, text)
        self.assertIn(f"\npulsar_storage_write_latency_sum{{{LABELS}}} ", text)
        self.assertIn(f"\npulsar_entry_size_sum{{{LABELS}}} ", text)
        latency = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("pulsar_storage_write_latency_le_"))
        self.assertEqual(latency, 4.0)

    @defer.inlineCallbacks
    def test_non_persistent_topics_left_out(self):
        """A non-persistent topic stores nothing: no storage histograms for it."""
        client = yield self.producer("non-persistent://public/default/np")
        yield self.publish(client, 1)
        code, text, _ = yield self.get("/metrics")
        self.assertEqual(code, 200)
        self.assertNotIn('topic="non-persistent://public/default/np"}',
                         "\n".join(l for l in text.decode().splitlines() if "_le_" in l))
