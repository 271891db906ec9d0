"""Storage write latency and entry size histograms of a persistent topic (``broker/storage_stats.py``)."""

from twisted.internet import task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.storage_stats import (
    ENTRY_SIZE_BOUNDS, WRITE_LATENCY_BOUNDS_US, StorageWriteStats)
from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import FeatureCase

T = api.BaseCommand


class BucketTests(SynchronousTestCase):

    def test_pulsar_bucket_edges(self):
        """Bucket i holds bounds[i-1] < v <= bounds[i] (Pulsar's StatsBuckets); above: overflow."""
        clock = task.Clock()
        stats = StorageWriteStats(clock)
        for latency_ms, size in [(0.5, 128), (0.6, 129), (1000, 1_232_896), (1000.001, 1_232_897)]:
            started = clock.seconds()
            clock.advance(latency_ms / 1000)
            self.assertEqual(stats.written("r", started, size), "r")
        self.assertEqual(stats.latency_buckets, [1, 1, 0, 0, 0, 0, 0, 0, 1, 1])
        self.assertEqual(stats.size_buckets, [1, 1, 0, 0, 0, 0, 0, 1, 1])
        values = dict(stats.metrics())
        self.assertEqual(values["pulsar_storage_write_latency_count"], 4)
        self.assertEqual(values["pulsar_entry_size_count"], 4)
        self.assertAlmostEqual(values["pulsar_storage_write_latency_sum"], 2001.101, places=2)
        self.assertEqual(values["pulsar_entry_size_sum"], 128 + 129 + 1_232_896 + 1_232_897)
        self.assertEqual(len(values), len(WRITE_LATENCY_BOUNDS_US) + len(ENTRY_SIZE_BOUNDS) + 6)


class PublishLatencyTests(FeatureCase):
    """The topic measures from add_entry to its completion on its clock."""

    def test_latency_and_size_of_published_entries(self):
        client = self.harness.client()
        self.create_producer(client)
        ledger_client = self.harness.ledger_client
        ledger_client.pause_adds()
        self.send(client, 0, payload=b"x" * 10)
        self.send(client, 1, payload=b"y" * 5000)
        self.harness.pump()
        self.clock.advance(0.003)           # both adds held 3 ms: bucket le_5
        ledger_client.resume_adds()
        receipts = [c for c in client.commands() if c.type == T.SEND_RECEIPT]
        self.assertEqual(len(receipts), 2)
        ledger_client.pause_adds()
        self.send(client, 2, payload=b"z")
        self.harness.pump()
        self.clock.advance(2.5)             # 2.5 s: overflow
        ledger_client.resume_adds()
        stats = self.harness.broker.topics[self.topic].counters.storage
        self.assertEqual(stats.latency_buckets, [0, 0, 2, 0, 0, 0, 0, 0, 0, 1])
        self.assertAlmostEqual(stats.latency_sum_ms(), 2506.0, places=3)
        # Entries are metadata + payload: the two small ones <= 128 bytes, the 5000-byte one le_16_kb.
        self.assertEqual(stats.size_buckets, [2, 0, 0, 0, 0, 1, 0, 0, 0])
        self.assertEqual(stats.count, 3)
