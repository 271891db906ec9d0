"""
The embedded store under input it cannot record (issue 12): a write whose path the log format cannot
encode fails its caller and changes nothing; a snapshot that fails is logged, surfaced to an explicit
``snapshot()`` and retried later while the log keeps every write; close always completes.
"""

import os

from twisted.internet import reactor
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase, TestCase

from pulsar_twisted.metadata.embedded import log_format, store as store_module
from pulsar_twisted.metadata.embedded.log_format import HEADER_SIZE, LOG_NAME, MAX_PATH_BYTES
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore, SnapshotFailedError
from pulsar_twisted.metadata.embedded.tree import check_path

_real_write_snapshot = log_format.write_snapshot


class PathLimitTests(SynchronousTestCase):
    """Paths the log could not record are refused before the tree changes."""

    def setUp(self):
        self.store = EmbeddedMetadataStore(None, Clock())

    def test_check_path_limits(self):
        """Too long (in UTF-8 bytes), lone surrogates and NUL are ValueErrors."""
        check_path("/" + "a" * (MAX_PATH_BYTES - 1))
        for bad in ("/" + "a" * MAX_PATH_BYTES, "/" + "é" * (MAX_PATH_BYTES // 2 + 1), "/a\udcff", "/a\x00b"):
            self.assertRaises(ValueError, check_path, bad)

    def test_long_path_refused_nothing_created(self):
        """A 100 KB path fails the put with ValueError and leaves no ancestor behind."""
        path = "/managed-ledgers/acme/ns/persistent/" + "H" * 100_000
        self.failureResultOf(self.store.put(path, b"x"), ValueError)
        self.assertEqual(self.successResultOf(self.store.get_children("/")), [])

    def test_sequential_suffix_checked(self):
        """The sequence number a sequential put appends is counted in the limit too."""
        path = "/q/" + "s" * (MAX_PATH_BYTES - len("/q/") - 5)
        self.failureResultOf(self.store.put(path, b"", sequential=True), ValueError)


class DurableLimitTests(TestCase):
    """The durable store keeps working, and closes, when snapshots fail."""

    def setUp(self):
        self.data_dir = self.mktemp()

    async def open(self, **kwargs):
        store = EmbeddedMetadataStore(self.data_dir, reactor, **kwargs)
        self.addCleanup(store.close)
        await store.start()
        return store

    async def test_refused_write_then_snapshot_and_close(self):
        """After a refused 100 KB path, later writes land, the snapshot works and close completes."""
        store = await self.open()
        await self.assertFailure(store.put("/t/" + "H" * 100_000, b"x"), ValueError)
        await store.put("/t/ok", b"1")
        await store.snapshot()
        await store.close()
        store = await self.open()
        self.assertEqual(await store.get_children("/t"), ["ok"])

    async def test_snapshot_disk_failure_surfaced_and_log_kept(self):
        """A snapshot the disk refuses fails snapshot(), is logged, and the batch still reaches the log."""
        store = await self.open()
        await store.put("/a", b"1")
        original = log_format.write_snapshot

        def broken(*args):
            raise OSError(28, "No space left on device")

        self.patch(log_format, "write_snapshot", broken)
        with capturedLogs() as events:
            store.put("/b", b"2")
            await self.assertFailure(store.snapshot(), SnapshotFailedError)
        self.assertTrue([e for e in events if e["log_level"] == LogLevel.error
                         and "snapshot failed" in e["log_format"]])
        self.assertEqual(store._core.snapshot_failures, 1)
        self.assertGreater(os.path.getsize(os.path.join(self.data_dir, LOG_NAME)), HEADER_SIZE)
        await store.put("/c", b"3")    # the store still takes writes
        self.patch(log_format, "write_snapshot", original)
        await store.close()            # and still closes (its final snapshot works again)
        store = await self.open()
        self.assertEqual(await store.get_children("/"), ["a", "b", "c"])

    async def test_unencodable_snapshot_logged_and_close_completes(self):
        """A node that slipped past the checks cannot stop the log or the close."""
        store = await self.open()
        await store.put("/a", b"1")
        store._core.tree.nodes["/a"].value = None     # as a bug would leave it: not encodable
        with capturedLogs() as events:
            await self.assertFailure(store.snapshot(), SnapshotFailedError)
        self.assertTrue([e for e in events if "could not be encoded" in e["log_format"]])
        self.assertEqual(len(self.flushLoggedErrors(TypeError)), 1)
        await store.put("/b", b"2")
        store._core.tree.nodes["/a"].value = b"1"
        await store.close()

    async def test_threshold_waits_after_failure(self):
        """After a failed snapshot the size threshold waits SNAPSHOT_RETRY_SECONDS before another."""
        store = await self.open(snapshot_log_bytes=1)
        self.patch(log_format, "write_snapshot", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO")))
        await store.put("/a", b"1")     # over the threshold: tries a snapshot, fails, logs the batch
        await store._core.snapshot_settled()
        self.assertEqual(store._core.snapshot_failures, 1)
        await store.put("/b", b"2")     # within the retry delay: no second attempt
        await store._core.snapshot_settled()
        self.assertEqual(store._core.snapshot_failures, 1)
        self.assertGreater(store._core.snapshot_retry_at, reactor.seconds())
        self.assertEqual(store_module.SNAPSHOT_RETRY_SECONDS, 30.0)
        store._core.snapshot_retry_at = 0
        self.patch(log_format, "write_snapshot", _real_write_snapshot)
        await store.put("/c", b"3")     # the delay over: the threshold snapshots again, and works
        await store._core.snapshot_settled()
        self.assertEqual(store._core.log_size, HEADER_SIZE)
