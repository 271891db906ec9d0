"""
The bookie's /metrics with BookKeeper's names (bookie/metrics.py): a real storage and server on
127.0.0.1, entries added and read over the bookie protocol, the exposition scraped over HTTP and
parsed with prometheus_client's parser.
"""

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.common.bk_errors import BKException
from pulsar_twisted.ledger.tcp import TcpBookieClient
from tests.bookie import test_server
from tests.bookie.test_server import KEY, packed


class BookieMetricsTests(unittest.TestCase):
    timeout = 30
    get = test_server.HttpTests.get

    def test_bookkeeper_names(self):
        return defer.ensureDeferred(self._test_bookkeeper_names())

    async def _test_bookkeeper_names(self):
        """3 adds, 2 reads, 1 refused read: request summaries by success, bytes, journal, ledgers."""
        from twisted.internet import reactor
        base = self.mktemp()
        storage = BookieStorage(f"{base}/journal", [f"{base}/ledgers"], reactor,
                                journal_sync_data=True, flush_interval_ms=0, gc_wait_time_ms=0)
        server = BookieServer(storage, reactor, endpoint="tcp:0:interface=127.0.0.1",
                              advertised_address="127.0.0.1", data_dirs=[base],
                              http_endpoint="tcp:0:interface=127.0.0.1", disk_usage=lambda: 0.1,
                              disk_check_interval=0)
        await server.start()
        self.addCleanup(server.stop)
        client = TcpBookieClient(reactor)
        self.addCleanup(client.close)
        for entry in range(3):
            await client.add_entry(server.bookie_id, 9, entry, KEY, packed(9, entry))
        for entry in range(2):
            await client.read_entry(server.bookie_id, 9, entry)
        with self.assertRaises(BKException):
            await client.read_entry(server.bookie_id, 9, 77)
        code, _, body = await self.get(server.http_port.getHost().port, "/metrics")
        self.assertEqual(code, 200)
        samples = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        ok, failed = (("success", "true"),), (("success", "false"),)
        self.assertEqual(samples[("bookkeeper_server_ADD_ENTRY_REQUEST_count", ok)], 3)
        self.assertEqual(samples[("bookkeeper_server_READ_ENTRY_REQUEST_count", ok)], 2)
        self.assertEqual(samples[("bookkeeper_server_READ_ENTRY_REQUEST_count", failed)], 1)
        self.assertGreater(samples[("bookkeeper_server_ADD_ENTRY_REQUEST_sum", ok)], 0)
        self.assertEqual(samples[("bookkeeper_server_ADD_ENTRY_count", ok)], 3)
        self.assertEqual(samples[("bookkeeper_server_READ_ENTRY_count", failed)], 1)
        self.assertIn(("bookkeeper_server_ADD_ENTRY_REQUEST", (("quantile", "0.99"), ("success", "true"))),
                      samples)
        size = len(packed(9, 0))
        self.assertEqual(samples[("bookie_WRITE_BYTES", ())], 3 * size)
        self.assertEqual(samples[("bookie_READ_BYTES", ())], 2 * size)
        self.assertEqual(samples[("bookie_SERVER_STATUS", ())], 1)
        self.assertEqual(samples[("bookie_ledgers_count", ())], 1)
        self.assertEqual(samples[("bookie_write_cache_size", ())], 3 * size)
        self.assertEqual(samples[("bookie_ledger_writable_dirs", ())], 1)
        # The 3 entries and the ledger's master-key record went through the journal, each synced.
        self.assertGreaterEqual(samples[("bookie_journal_JOURNAL_ADD_ENTRY_count", ok)], 3)
        self.assertGreaterEqual(samples[("bookie_journal_JOURNAL_SYNC_count", ok)], 1)
        self.assertEqual(samples[("bookie_journal_JOURNAL_QUEUE_SIZE", ())], 0)
