"""
Tiered storage end to end: a standalone offloading to a throw-away S3-compatible server (moto,
``testing/s3.py``), messages written and read with the official client, offloads asked for and
watched through the admin REST API as ``pulsar-admin topics offload`` does.

Ledgers are small (20 entries) and the deletion lag 0, so that a test sees ledgers sealed, offloaded
and gone from the bookies within seconds. Each wait is bounded; every process is stopped after each
test.
"""

import json
import os
import time
import urllib.error
import urllib.request
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing import s3
from pulsar_twisted.testing.process import StandaloneProcess
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

BUCKET = "offload"
ENTRIES_PER_LEDGER = 20
WAIT = 30.0


class TieredStorageTests(SynchronousTestCase):

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"
    elif s3.skip_reason():
        skip = s3.skip_reason()

    def setUp(self):
        work = os.path.abspath(self.mktemp())
        os.makedirs(work)
        self.s3 = s3.S3Server(os.path.join(work, "s3"))
        self.s3.start()
        self.addCleanup(self.s3.stop)
        self.s3.install_env()
        self.s3.create_bucket(BUCKET)
        self.standalone = StandaloneProcess(config={
            "managedLedgerOffloadDriver": "S3",
            "s3ManagedLedgerOffloadBucket": BUCKET,
            "s3ManagedLedgerOffloadRegion": self.s3.region,
            "s3ManagedLedgerOffloadServiceEndpoint": self.s3.endpoint,
            "managedLedgerOffloadDeletionLagMs": 0,
            "managedLedgerMaxEntriesPerLedger": ENTRIES_PER_LEDGER,
            "managedLedgerMinLedgerRolloverTimeMinutes": 0,
            # Consumed or not, the messages stay: the tests read them back from the start.
            "defaultRetentionTimeInMinutes": -1,
            "defaultRetentionSizeInMB": -1,
        }, base_dir=work)
        self.addCleanup(self.standalone.cleanup)
        self.standalone.start()
        self.topic = f"persistent://public/default/tiered-{uuid.uuid4().hex[:8]}"
        self.path = self.topic.replace("persistent://", "")

    # ---------------------------------------------------------------- helpers
    def admin(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.standalone.web_service_url + path, data=data,
                                         method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read()
                return answer.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def internal_stats(self):
        status, stats = self.admin("GET", f"/admin/v2/persistent/{self.path}/internalStats")
        self.assertEqual(status, 200, stats)
        return stats

    def client(self):
        log = official_client_logger("tiered-storage", os.path.join(self.standalone.directory, "client.log"))
        client = pulsar.Client(self.standalone.service_url, operation_timeout_seconds=10, logger=log)
        self.addCleanup(client.close)
        return client

    def produce(self, n, size=100):
        producer = self.client().create_producer(self.topic, batching_enabled=False)
        sent = []
        for i in range(n):
            payload = b"%06d-" % i + b"x" * size
            producer.send(payload)
            sent.append(payload)
        producer.close()
        return sent

    def read_all(self, count, timeout_ms=10_000):
        reader = self.client().create_reader(self.topic, pulsar.MessageId.earliest)
        got = []
        try:
            while len(got) < count:
                got.append(reader.read_next(timeout_ms).data())
        finally:
            reader.close()
        return got

    def offload_all(self):
        """``pulsar-admin topics offload -s 0``: every sealed ledger before the last."""
        last = self.internal_stats()["ledgers"][-1]["ledgerId"]
        status, text = self.admin("PUT", f"/admin/v2/persistent/{self.path}/offload",
                                  {"ledgerId": last, "entryId": 0, "partitionIndex": -1})
        self.assertIn(status, (200, 204), text)
        return self.wait_offload()

    def wait_offload(self, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while True:
            status, answer = self.admin("GET", f"/admin/v2/persistent/{self.path}/offload")
            self.assertEqual(status, 200, answer)
            if answer["status"] != "RUNNING" or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)

    def objects(self):
        client = self.s3.client()
        try:
            return [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        finally:
            client.close()

    def unload(self):
        """The topic is closed and opened again on the next use (whose open trims: offloaded
        ledgers past the lag leave the bookies then)."""
        status, text = self.admin("PUT", f"/admin/v2/persistent/{self.path}/unload")
        self.assertIn(status, (200, 204), text)

    # ---------------------------------------------------------------- tests
    def test_offload_then_read_from_tiered_storage_only(self):
        """Messages of offloaded ledgers are read back whole and in order after a kill -9, when the
        bookies' copies are gone: reads then wait for the S3 server, paused, and finish once it
        answers again."""
        sent = self.produce(5 * ENTRIES_PER_LEDGER + 7)
        status = self.offload_all()
        self.assertEqual(status["status"], "SUCCESS", status)
        ledgers = self.internal_stats()["ledgers"]
        offloaded = [lg["ledgerId"] for lg in ledgers if lg["offloaded"]]
        self.assertEqual(offloaded, [lg["ledgerId"] for lg in ledgers[:-1]])
        self.assertEqual(status["firstUnoffloadedMessage"]["ledgerId"], ledgers[-1]["ledgerId"])
        self.assertEqual(len(self.objects()), 2 * len(offloaded))
        status, stats = self.admin("GET", f"/admin/v2/persistent/{self.path}/stats")
        self.assertEqual(stats["offloadedStorageSize"], sum(lg["size"] for lg in ledgers[:-1]))
        # Lag 0: the next trim (at the reopen) deletes them from the bookies.
        self.unload()
        self.assertEqual(self.read_all(len(sent)), sent)
        self.standalone.kill9()
        self.standalone.start()
        self.s3.pause()
        try:
            reader = self.client().create_reader(self.topic, pulsar.MessageId.earliest)
            self.assertRaises(Exception, reader.read_next, 3000)
            reader.close()
        finally:
            self.s3.resume()
        self.assertEqual(self.read_all(len(sent), timeout_ms=int(WAIT * 1000)), sent)

    def test_threshold_offloads_automatically(self):
        """Namespace offloadThreshold 0: every ledger is offloaded as soon as it is sealed."""
        status, text = self.admin("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", 0)
        self.assertIn(status, (200, 204), text)
        sent = self.produce(4 * ENTRIES_PER_LEDGER + 3)
        deadline = time.monotonic() + WAIT
        while True:
            ledgers = self.internal_stats()["ledgers"]
            if all(lg["offloaded"] for lg in ledgers[:-1]) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertTrue(all(lg["offloaded"] for lg in ledgers[:-1]), ledgers)
        self.assertGreaterEqual(len(ledgers), 5)
        self.assertEqual(self.read_all(len(sent)), sent)

    def test_s3_down_fails_the_offload_and_loses_nothing(self):
        """With the S3 server gone the offload ends in ERROR saying why; every message is still read
        from the bookies, and once the server is back the offload succeeds."""
        sent = self.produce(3 * ENTRIES_PER_LEDGER + 1)
        self.s3.kill()
        status = self.offload_all()
        self.assertEqual(status["status"], "ERROR", status)
        self.assertTrue(status["lastError"])
        self.assertEqual(self.read_all(len(sent)), sent)
        self.s3.restart()
        self.s3.create_bucket(BUCKET)
        status = self.offload_all()
        self.assertEqual(status["status"], "SUCCESS", status)
        self.unload()
        self.assertEqual(self.read_all(len(sent)), sent)

    def test_kill_during_offload(self):
        """kill -9 while an offload copies (its attempt recorded, its upload hanging): after the
        restart every message is read back, in order; a new offload succeeds, and after it (and
        the bookies' copies gone) still every message is read back."""
        sent = self.produce(8 * ENTRIES_PER_LEDGER + 5, size=20_000)
        last = self.internal_stats()["ledgers"][-1]["ledgerId"]
        # Caught half-way: the S3 server is paused before the offload starts, so that its attempt
        # is recorded and its first upload hangs; then the broker is killed, and only then does
        # the server answer again.
        self.s3.pause()
        try:
            status, text = self.admin("PUT", f"/admin/v2/persistent/{self.path}/offload",
                                      {"ledgerId": last, "entryId": 0, "partitionIndex": -1})
            self.assertIn(status, (200, 204), text)
            time.sleep(1.0)
            self.assertEqual(self.wait_offload(timeout=0.5)["status"], "RUNNING")
            self.standalone.kill9()
        finally:
            self.s3.resume()
        self.standalone.start()
        self.assertEqual(self.read_all(len(sent)), sent)
        status = self.offload_all()
        self.assertEqual(status["status"], "SUCCESS", status)
        self.unload()
        self.assertEqual(self.read_all(len(sent)), sent)
        ledgers = self.internal_stats()["ledgers"]
        self.assertTrue(all(lg["offloaded"] for lg in ledgers[:-1]), ledgers)
