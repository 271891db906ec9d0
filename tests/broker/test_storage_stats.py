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


class LedgerWriteStatsTests(SynchronousTestCase):
    """A persistent topic's histograms are its managed ledger's counters (issue 14: no copy per
    topic); they read the same as the topic's own would."""

    def test_same_metrics_as_the_topics_own(self):
        from pulsar_twisted.broker.storage_stats import LedgerWriteStats
        from pulsar_twisted.mledger.counters import ManagedLedgerCounters
        clock = task.Clock()
        own, counters = StorageWriteStats(clock), ManagedLedgerCounters(clock)
        for latency_ms, size in [(0.2, 10), (3, 5000), (40, 200_000), (2500, 2_000_000)]:
            started = clock.seconds()
            clock.advance(latency_ms / 1000)
            own.written(None, started, size)
            counters.add_done(None, started, size)
        view = LedgerWriteStats(counters)
        mine, theirs = dict(own.metrics()), dict(view.metrics())
        self.assertEqual(list(mine), list(theirs))
        for name, value in mine.items():
            self.assertAlmostEqual(theirs[name], value, places=3, msg=name)
        self.assertEqual(view.count, 4)

    def test_ledger_without_counters_keeps_the_topics_own(self):
        """A managed ledger keeping no counters: the topic records its writes itself."""
        from pulsar_twisted.broker.topic import TopicCounters

        class Topic:
            clock = task.Clock()
        counters = TopicCounters(Topic(), 0.0)
        counters.use_ledger(object())
        self.assertEqual(counters.written("r", 0.0, 100), "r")
        self.assertEqual(counters.storage.count, 1)
        self.assertIs(counters.storage, counters.storage)


class PersistentTopicStorageTests(FeatureCase):
    def test_topic_reads_the_ledger_counters(self):
        """A loaded persistent topic holds no histograms; its stats follow the ledger's adds."""
        client = self.harness.client()
        self.create_producer(client)
        self.send(client, 0, payload=b"x" * 10)
        topic = self.harness.broker.topics[self.topic]
        self.assertIsNone(topic.counters._storage)
        self.assertEqual(topic.counters.storage.count, 1)
        self.assertEqual(dict(topic.counters.storage.metrics())["pulsar_entry_size_sum"],
                         topic.ledger.counters.add_bytes)
