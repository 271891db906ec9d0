"""
The object-store contract of tiered storage (``offload/blobstore.py``), one mixin run against every
store: in memory, a directory (``filesystem``) and S3 (``aws-s3`` / ``S3``) on a throw-away moto
server on 127.0.0.1 (``testing/s3.py``; these tests skip, saying why, where moto is missing).
Then what only one store has: refused keys and a second store on the same directory; a missing
bucket, a dead endpoint and a hung one for S3; and ``drivers`` (names, settings, reopening).

Trial has no ``setUpClass``: an S3 class's first test starts its server and its last one stops it
(``_SharedS3Server``); the atexit hook of ``testing/s3.py`` kills whatever a partial run left.
Every S3 call is bounded by the store's timeouts and retries, so no test here can hang.
"""

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from pulsar_twisted.mledger.offload import drivers
from pulsar_twisted.mledger.offload.blobstore import (
    BlobNotFoundError, BlobStore, BlobStoreError, MemoryBlobStore)
from pulsar_twisted.mledger.offload.filesystem import UPLOADS, FileSystemBlobStore
from pulsar_twisted.testing import s3 as s3_testing
from pulsar_twisted.testing.process import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Bound of the calls that must fail fast (a closed port, a server that never answers).
FAIL_WITHIN = 20.0
#: Bound of waiting on the worker threads of the concurrency test.
THREAD_WAIT = 120.0


class BlobStoreContractMixin:
    """What every BlobStore does. A class sets ``self.store`` in its ``setUp`` (before calling
    this one's) and may override ``part_size`` to respect the store's ``min_part_size``."""

    def setUp(self):
        self.addCleanup(self.store.close)

    def part(self, fill: int) -> bytes:
        """A part a little over the store's smallest one (any but the last part is this)."""
        return bytes([fill]) * (self.store.min_part_size + 7)

    def upload(self, key, parts):
        upload_id = self.store.create_multipart(key)
        tokens = [self.store.upload_part(key, upload_id, n, data)
                  for n, data in enumerate(parts, 1)]
        return upload_id, list(enumerate(tokens, 1))

    def test_is_a_blob_store(self):
        """A store is a BlobStore whose metadata is JSON-able and names no secret."""
        self.assertIsInstance(self.store, BlobStore)
        self.assertEqual(json.loads(json.dumps(self.store.metadata)), self.store.metadata)
        self.assertNotIn("secret", json.dumps(self.store.metadata).lower())
        self.assertGreaterEqual(self.store.min_part_size, 1)

    def test_put_get_range_size(self):
        """put stores the bytes; get_range reads any slice of them and size their length."""
        self.store.put("ledger/1", b"0123456789")
        self.assertEqual(self.store.get_range("ledger/1", 0, 10), b"0123456789")
        self.assertEqual(self.store.get_range("ledger/1", 3, 4), b"3456")
        self.assertEqual(self.store.size("ledger/1"), 10)

    def test_put_replaces(self):
        """A second put of a key replaces the object whole."""
        self.store.put("k", b"first version")
        self.store.put("k", b"second")
        self.assertEqual(self.store.get_range("k", 0, 100), b"second")
        self.assertEqual(self.store.size("k"), 6)

    def test_get_range_past_the_end(self):
        """A range running past the end returns the bytes there are; one starting there, none."""
        self.store.put("k", b"abcdef")
        self.assertEqual(self.store.get_range("k", 4, 100), b"ef")
        self.assertEqual(self.store.get_range("k", 6, 10), b"")
        self.assertEqual(self.store.get_range("k", 60, 10), b"")

    def test_missing_key(self):
        """get_range and size of a key that was never put raise BlobNotFoundError."""
        self.assertRaises(BlobNotFoundError, self.store.get_range, "nothing", 0, 10)
        self.assertRaises(BlobNotFoundError, self.store.size, "nothing")

    def test_delete(self):
        """delete removes the keys given; the missing ones among them are no error."""
        self.store.put("a", b"1")
        self.store.put("b", b"2")
        self.store.delete(["a", "never-put", "b"])
        self.store.delete(["a"])
        self.store.delete([])
        self.assertRaises(BlobNotFoundError, self.store.size, "a")
        self.assertRaises(BlobNotFoundError, self.store.get_range, "b", 0, 1)

    def test_multipart_concatenates(self):
        """Three parts completed make one object, their concatenation in number order."""
        parts = [self.part(1), self.part(2), b"last part, shorter"]
        upload_id, tokens = self.upload("big", parts)
        self.store.complete_multipart("big", upload_id, tokens)
        whole = b"".join(parts)
        self.assertEqual(self.store.size("big"), len(whole))
        self.assertEqual(self.store.get_range("big", 0, len(whole)), whole)
        middle = len(parts[0]) - 3
        self.assertEqual(self.store.get_range("big", middle, 6), whole[middle:middle + 6])

    def test_multipart_invisible_until_complete(self):
        """Before complete_multipart the object does not exist for readers."""
        upload_id, tokens = self.upload("big", [self.part(1), b"end"])
        self.assertRaises(BlobNotFoundError, self.store.size, "big")
        self.assertRaises(BlobNotFoundError, self.store.get_range, "big", 0, 1)
        self.store.complete_multipart("big", upload_id, tokens)
        self.assertEqual(self.store.size("big"), len(self.part(1)) + 3)

    def test_abort_drops_the_upload(self):
        """After abort_multipart the object never appears and the upload takes no more parts."""
        upload_id, tokens = self.upload("big", [self.part(1)])
        self.store.abort_multipart("big", upload_id)
        self.assertRaises(BlobNotFoundError, self.store.size, "big")
        # moto 5.2 answers 500 here (not S3's NoSuchUpload): the contract only asks for an error.
        self.assertRaises(BlobStoreError, self.store.upload_part, "big", upload_id, 2, b"x")
        self.assertRaises(BlobStoreError, self.store.complete_multipart, "big", upload_id, tokens)
        self.assertRaises(BlobNotFoundError, self.store.size, "big")

    def test_small_part_refused(self):
        """A part but the last under min_part_size makes the completion fail."""
        small = b"s" * (self.store.min_part_size - 1)
        upload_id, tokens = self.upload("big", [small, b"end"])
        self.assertRaises(BlobStoreError, self.store.complete_multipart, "big", upload_id, tokens)
        self.store.abort_multipart("big", upload_id)
        self.assertRaises(BlobNotFoundError, self.store.size, "big")

    def test_concurrent_calls(self):
        """Several threads put, read, size and delete at once, and upload the parts of one
        object in parallel; every answer is the right one."""
        def one_key(i):
            key, data = f"thread/{i}", os.urandom(1000 + i)
            self.store.put(key, data)
            got = (self.store.get_range(key, 0, len(data)), self.store.size(key))
            self.store.delete([key])
            return got == (data, len(data))

        parts = [self.part(1), self.part(2), self.part(3), b"end"]
        upload_id = self.store.create_multipart("shared")
        with ThreadPoolExecutor(max_workers=8) as pool:
            keys = [pool.submit(one_key, i) for i in range(16)]
            tokens = [pool.submit(self.store.upload_part, "shared", upload_id, n, data)
                      for n, data in enumerate(parts, 1)]
            self.assertEqual([f.result(THREAD_WAIT) for f in keys], [True] * 16)
            tokens = [(n, f.result(THREAD_WAIT)) for n, f in enumerate(tokens, 1)]
        self.store.complete_multipart("shared", upload_id, tokens)
        self.assertEqual(self.store.get_range("shared", 0, 1 << 26), b"".join(parts))


class ReopenMixin:
    """A store opened again from its ``(driver_name, metadata)`` sees what the first one wrote."""

    def test_reopened_through_drivers(self):
        """drivers.open_blob_store(driver_name, metadata) opens the same store."""
        self.store.put("ledger/7", b"payload")
        again = drivers.open_blob_store(self.store.driver_name,
                                        json.loads(json.dumps(self.store.metadata)))
        self.addCleanup(again.close)
        self.assertEqual(type(again), type(self.store))
        self.assertEqual((again.driver_name, again.metadata),
                         (self.store.driver_name, self.store.metadata))
        self.assertEqual(again.get_range("ledger/7", 0, 100), b"payload")


class MemoryBlobStoreTests(BlobStoreContractMixin, SynchronousTestCase):
    def setUp(self):
        self.store = MemoryBlobStore()
        super().setUp()


class FileSystemBlobStoreTests(BlobStoreContractMixin, ReopenMixin, SynchronousTestCase):
    def setUp(self):
        self.directory = os.path.abspath(self.mktemp())
        self.uri = "file://" + self.directory
        self.store = FileSystemBlobStore(self.uri)
        super().setUp()

    def test_driver_and_metadata(self):
        """driver_name is Pulsar's 'filesystem'; metadata is the URI."""
        self.assertEqual(self.store.driver_name, "filesystem")
        self.assertEqual(self.store.metadata, {"uri": self.uri})

    def test_keys_leaving_the_directory_refused(self):
        """Absolute keys and keys with '..' (or empty parts, or under .uploads/) are refused."""
        for key in ["/etc/passwd", "../outside", "a/../../outside", "a/..", "..", "a//b", "",
                    f"{UPLOADS}/x"]:
            self.assertRaises(BlobStoreError, self.store.put, key, b"x")
            self.assertRaises(BlobStoreError, self.store.get_range, key, 0, 1)
            self.assertRaises(BlobStoreError, self.store.create_multipart, key)
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.directory), "outside")))

    def test_fresh_store_sees_objects(self):
        """A new store on the same directory reads what an earlier one put and completed."""
        self.store.put("tenant/ns/topic/1-ledger", b"data")
        upload_id, tokens = self.upload("tenant/ns/topic/1-index", [b"a", b"b"])
        self.store.complete_multipart("tenant/ns/topic/1-index", upload_id, tokens)
        fresh = FileSystemBlobStore(self.uri)
        self.assertEqual(fresh.get_range("tenant/ns/topic/1-ledger", 0, 10), b"data")
        self.assertEqual(fresh.get_range("tenant/ns/topic/1-index", 0, 10), b"ab")

    def test_no_temporary_files_left(self):
        """After put and a completed or aborted upload, only the objects are on disk."""
        self.store.put("d/one", b"1")
        upload_id, tokens = self.upload("d/two", [b"2", b"2"])
        self.store.complete_multipart("d/two", upload_id, tokens)
        aborted, _ = self.upload("d/three", [b"3"])
        self.store.abort_multipart("d/three", aborted)
        self.assertEqual(sorted(os.listdir(os.path.join(self.directory, "d"))), ["one", "two"])
        self.assertEqual(os.listdir(os.path.join(self.directory, UPLOADS)), [])

    def test_wrong_token_refused(self):
        """complete_multipart with a token that is not the part's fails and writes nothing."""
        upload_id, tokens = self.upload("k", [b"a", b"b"])
        tokens[1] = (2, "not-the-token")
        self.assertRaises(BlobStoreError, self.store.complete_multipart, "k", upload_id, tokens)
        self.assertRaises(BlobNotFoundError, self.store.size, "k")
        self.assertEqual(os.listdir(self.directory), [UPLOADS])

    def test_only_file_uris(self):
        """A URI other than file:// is a ValueError naming fileSystemURI."""
        for uri in ["hdfs://namenode:9000/offload", "/plain/path", "s3://bucket", ""]:
            error = self.assertRaises(ValueError, FileSystemBlobStore, uri)
            self.assertIn("fileSystemURI", str(error))
            self.assertIn("file://", str(error))


class _SharedS3Server:
    """One moto server per test class, started by its first test and stopped after its last
    (counted), with the dummy credentials in os.environ during each test only (boto3 reads them
    when a client is created)."""

    skip = s3_testing.skip_reason()
    server = None

    @classmethod
    def _test_count(cls) -> int:
        return len([n for n in dir(cls) if n.startswith("test") and callable(getattr(cls, n))])

    def start_shared_server(self):
        cls = type(self)
        if cls.__dict__.get("server") is None:
            cls.server = s3_testing.S3Server(os.path.abspath(self.mktemp()))
            cls._remaining = cls._test_count()
            cls.server.start()
        self.addCleanup(self._class_test_done)
        self.server = cls.server
        self.server.install_env()
        self.addCleanup(self.server.restore_env)

    @classmethod
    def _class_test_done(cls):
        cls._remaining -= 1
        if cls._remaining <= 0 and cls.server is not None:
            server, cls.server = cls.server, None
            server.stop()

    _buckets = itertools.count()

    def new_bucket(self) -> str:
        name = f"offload-{os.getpid()}-{next(self._buckets)}"
        self.server.create_bucket(name)
        return name


class S3BlobStoreTests(_SharedS3Server, BlobStoreContractMixin, ReopenMixin, SynchronousTestCase):
    def setUp(self):
        self.start_shared_server()
        self.bucket = self.new_bucket()
        from pulsar_twisted.mledger.offload.s3 import S3BlobStore
        self.store = S3BlobStore("S3", self.bucket, endpoint=self.server.endpoint)
        super().setUp()

    def s3_store(self, bucket=None, endpoint=None, **kw):
        from pulsar_twisted.mledger.offload.s3 import S3BlobStore
        store = S3BlobStore("aws-s3", bucket or self.bucket, endpoint=endpoint or self.server.endpoint,
                            **kw)
        self.addCleanup(store.close)
        return store

    def test_driver_and_metadata(self):
        """driver_name is the name given; metadata names bucket, region and endpoint."""
        self.assertEqual(self.store.driver_name, "S3")
        self.assertEqual(self.s3_store().driver_name, "aws-s3")
        self.assertEqual(self.store.metadata, {"bucket": self.bucket, "region": "us-east-1",
                                               "endpoint": self.server.endpoint})
        self.assertEqual(self.store.min_part_size, 5 * 1024 * 1024)

    def test_missing_bucket_named(self):
        """Every call on a bucket that does not exist is a BlobStoreError naming the bucket (and
        not BlobNotFoundError: a wrong bucket is no missing ledger)."""
        store = self.s3_store(bucket="no-such-bucket-here")
        calls = [lambda: store.put("k", b"x"), lambda: store.get_range("k", 0, 1),
                 lambda: store.size("k"), lambda: store.delete(["k"]),
                 lambda: store.create_multipart("k")]
        for call in calls:
            error = self.assertRaises(BlobStoreError, call)
            self.assertNotIsInstance(error, BlobNotFoundError)
            self.assertIn("'no-such-bucket-here' does not exist", str(error))

    def test_closed_port_fails_in_bounded_time(self):
        """With nothing listening on the endpoint a call fails, within the bound, with a
        BlobStoreError naming the operation and the key."""
        store = self.s3_store(endpoint=f"http://127.0.0.1:{free_port()}")
        began = time.monotonic()
        error = self.assertRaises(BlobStoreError, store.put, "ledger/1", b"x")
        self.assertLess(time.monotonic() - began, FAIL_WITHIN)
        self.assertIn("put of 'ledger/1'", str(error))
        self.assertIn(self.bucket, str(error))

    def test_silent_endpoint_fails_in_bounded_time(self):
        """An endpoint that accepts connections and never answers (a hung server) fails a call
        once the read timeout has passed on every attempt, not never."""
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        store = self.s3_store(endpoint=f"http://127.0.0.1:{listener.getsockname()[1]}",
                              read_timeout=0.5)
        began = time.monotonic()
        self.assertRaises(BlobStoreError, store.size, "ledger/1")
        self.assertLess(time.monotonic() - began, FAIL_WITHIN)


class S3ServerFaultTests(_SharedS3Server, SynchronousTestCase):
    """A store whose server dies and comes back (on the same port, empty: moto is in memory)."""

    def setUp(self):
        self.start_shared_server()

    def test_killed_then_restarted(self):
        """While the server is down calls fail in bounded time; once back they work again."""
        from pulsar_twisted.mledger.offload.s3 import S3BlobStore
        bucket = self.new_bucket()
        store = S3BlobStore("S3", bucket, endpoint=self.server.endpoint)
        self.addCleanup(store.close)
        store.put("k", b"before")
        self.server.kill()
        began = time.monotonic()
        self.assertRaises(BlobStoreError, store.get_range, "k", 0, 10)
        self.assertLess(time.monotonic() - began, FAIL_WITHIN)
        self.server.restart()
        self.server.create_bucket(bucket)
        store.put("k", b"after")
        self.assertEqual(store.get_range("k", 0, 10), b"after")


class DriverTests(SynchronousTestCase):
    def test_supported(self):
        """Pulsar's two S3 driver names and its filesystem driver."""
        self.assertEqual(drivers.SUPPORTED, ("aws-s3", "S3", "filesystem"))

    def test_unknown_driver(self):
        """An unknown driver is a ValueError naming it and the ones we have."""
        error = self.assertRaises(ValueError, drivers.open_blob_store, "google-cloud-storage",
                                  {"bucket": "b"})
        self.assertEqual(str(error), "managedLedgerOffloadDriver 'google-cloud-storage' is not "
                                     "supported: use aws-s3, S3 or filesystem")
        error = self.assertRaises(ValueError, drivers.settings_from, "azureblob", bucket="b")
        self.assertIn("'azureblob' is not supported", str(error))

    def test_s3_without_bucket(self):
        """An S3 driver without a bucket names s3ManagedLedgerOffloadBucket."""
        for driver in ("aws-s3", "S3"):
            for settings in ({}, {"bucket": "", "region": "eu-west-1"}):
                error = self.assertRaises(ValueError, drivers.open_blob_store, driver, settings)
                self.assertIn("s3ManagedLedgerOffloadBucket", str(error))

    def test_filesystem_without_uri(self):
        """The filesystem driver without a URI names fileSystemURI."""
        for settings in ({}, {"uri": ""}, {"bucket": "b"}):
            error = self.assertRaises(ValueError, drivers.open_blob_store, "filesystem", settings)
            self.assertIn("fileSystemURI", str(error))

    def test_settings_from(self):
        """Configuration values become the settings of the driver, empty ones dropped."""
        self.assertEqual(drivers.settings_from("aws-s3", "b", "eu-west-1", "", "file:///x"),
                         {"bucket": "b", "region": "eu-west-1"})
        self.assertEqual(drivers.settings_from("S3", "b", "", "http://minio:9000", ""),
                         {"bucket": "b", "endpoint": "http://minio:9000"})
        self.assertEqual(drivers.settings_from("filesystem", "b", "r", "e", "file:///x"),
                         {"uri": "file:///x"})
        self.assertEqual(drivers.settings_from("filesystem"), {})

    def test_open_filesystem(self):
        """open_blob_store('filesystem', settings_from(...)) is a FileSystemBlobStore there."""
        uri = "file://" + os.path.abspath(self.mktemp())
        store = drivers.open_blob_store("filesystem", drivers.settings_from("filesystem",
                                                                            file_system_uri=uri))
        self.assertIsInstance(store, FileSystemBlobStore)
        self.assertEqual(store.metadata, {"uri": uri})

    def test_open_s3_offline(self):
        """Opening an S3 store contacts nothing; region defaults to us-east-1."""
        if s3_testing.skip_reason():
            raise SkipTest(s3_testing.skip_reason())
        store = drivers.open_blob_store("aws-s3", {"bucket": "b"})
        self.addCleanup(store.close)
        self.assertEqual((store.driver_name, store.metadata),
                         ("aws-s3", {"bucket": "b", "region": "us-east-1", "endpoint": ""}))

    def test_boto3_imported_only_for_s3(self):
        """Importing drivers and opening a filesystem store (fresh interpreter) loads no boto3."""
        code = ("import sys, tempfile\n"
                "from pulsar_twisted.mledger.offload import drivers\n"
                "drivers.open_blob_store('filesystem', {'uri': 'file://' + tempfile.mkdtemp()})\n"
                "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))")
        env = dict(os.environ, PYTHONPATH=ROOT)
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
        self.assertEqual(out, "[]")
