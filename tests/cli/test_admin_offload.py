"""pulsar-admin's tiered-storage verbs on a recording stand-in of the HTTP client: the requests
they make, Pulsar's texts, and the size-threshold choice of ``topics offload``."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli import admin as cli
from tests.cli.recording import RecordingClient
from pulsar_twisted.cli.admin import offload

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/t"


def run(argv, client):
    args = cli.build_parser().parse_args(argv)
    return args.run(args, client)


class NamespaceVerbTests(SynchronousTestCase):
    def test_threshold_units(self):
        """set-offload-threshold -s takes Pulsar's sizes; -1 is sent as is."""
        client = RecordingClient()
        run(["namespaces", "set-offload-threshold", "public/default", "-s", "10M"], client)
        run(["namespaces", "set-offload-threshold", "public/default", "--size", "-1"], client)
        self.assertEqual(client.requests, [("PUT", NS + "/offloadThreshold", 10 * 1024 * 1024),
                                           ("PUT", NS + "/offloadThreshold", -1)])

    def test_deletion_lag(self):
        """-l 1h is sent in milliseconds; get prints seconds, or Pulsar's text when unset."""
        client = RecordingClient({("GET", NS + "/offloadDeletionLagMs"): [3600000, None]})
        run(["namespaces", "set-offload-deletion-lag", "public/default", "-l", "1h"], client)
        self.assertEqual(client.requests[-1], ("PUT", NS + "/offloadDeletionLagMs", 3600000))
        self.assertEqual(run(["namespaces", "get-offload-deletion-lag", "public/default"], client),
                         "3600 second(s)")
        self.assertEqual(run(["namespaces", "get-offload-deletion-lag", "public/default"], client),
                         "Unset for namespace. Defaulting to broker setting.")
        run(["namespaces", "clear-offload-deletion-lag", "public/default"], client)
        self.assertEqual(client.requests[-1], ("DELETE", NS + "/offloadDeletionLagMs", None))

    def test_set_policies_s3(self):
        """Pulsar's flags: an S3 driver sends the generic and the s3* fields."""
        client = RecordingClient()
        run(["namespaces", "set-offload-policies", "public/default", "-d", "aws-s3", "-b", "bk",
             "-r", "eu-west-3", "-oat", "1G", "-ts", "1h", "-dl", "10m", "-orp", "bookkeeper-first",
             "-mbs", "32M"], client)
        [(method, path, body)] = client.requests
        self.assertEqual((method, path), ("POST", NS + "/offloadPolicies"))
        self.assertEqual(body["managedLedgerOffloadDriver"], "aws-s3")
        self.assertEqual(body["s3ManagedLedgerOffloadBucket"], "bk")
        self.assertEqual(body["managedLedgerOffloadBucket"], "bk")
        self.assertEqual(body["managedLedgerOffloadThresholdInBytes"], 1024 ** 3)
        self.assertEqual(body["managedLedgerOffloadThresholdInSeconds"], 3600)
        self.assertEqual(body["managedLedgerOffloadDeletionLagInMillis"], 600000)
        self.assertEqual(body["managedLedgerOffloadedReadPriority"], "bookkeeper-first")
        self.assertEqual(body["s3ManagedLedgerOffloadMaxBlockSizeInBytes"], 32 * 1024 * 1024)

    def test_set_policies_refused(self):
        """Pulsar's CLI checks: a driver it does not know; S3 with neither region nor endpoint."""
        for argv in (["-d", "tape"], ["-d", "S3", "-b", "bk"], ["-d", "filesystem", "-orp", "fast"]):
            self.assertRaises(cli.CommandError, run,
                              ["namespaces", "set-offload-policies", "public/default"] + argv,
                              RecordingClient())

    def test_get_and_remove_policies(self):
        client = RecordingClient()
        run(["namespaces", "get-offload-policies", "public/default"], client)
        run(["namespaces", "remove-offload-policies", "public/default"], client)
        run(["namespaces", "get-offload-threshold", "public/default"], client)
        self.assertEqual([r[:2] for r in client.requests],
                         [("GET", NS + "/offloadPolicies"), ("DELETE", NS + "/removeOffloadPolicies"),
                          ("GET", NS + "/offloadThreshold")])


class SizeThresholdTests(SynchronousTestCase):
    def test_choice(self):
        """Newest first: the ledger after the one that makes the kept size exceed the threshold."""
        ledgers = [(1, 100), (2, 100), (3, 100)]
        # 3 and 2 would keep 200 > 150: keep 3 only, offload before it.
        self.assertEqual(offload.first_ledger_within_threshold(ledgers, 150)["ledgerId"], 3)
        self.assertEqual(offload.first_ledger_within_threshold(ledgers, 0)["ledgerId"], 3)
        self.assertEqual(offload.first_ledger_within_threshold(ledgers, 200)["ledgerId"], 2)
        self.assertIsNone(offload.first_ledger_within_threshold(ledgers, 300))

    def test_offload_command(self):
        """The current ledger's size is internal stats' currentLedgerSize; Pulsar's text."""
        stats = {"ledgers": [{"ledgerId": 1, "size": 500}, {"ledgerId": 2, "size": 0}],
                 "currentLedgerSize": 300}
        client = RecordingClient({("GET", TOPIC + "/internalStats"): stats})
        out = run(["topics", "offload", "t", "-s", "400"], client)
        self.assertEqual(client.requests[-1],
                         ("PUT", TOPIC + "/offload", {"ledgerId": 2, "entryId": 0, "partitionIndex": -1}))
        self.assertEqual(out, "Offload triggered for persistent://public/default/t for messages "
                              "before 2:0:-1")

    def test_nothing_to_offload(self):
        stats = {"ledgers": [{"ledgerId": 1, "size": 10}], "currentLedgerSize": 10}
        client = RecordingClient({("GET", TOPIC + "/internalStats"): stats})
        self.assertEqual(run(["topics", "offload", "t", "--size-threshold", "1M"], client),
                         "Nothing to offload")
        self.assertEqual(len(client.requests), 1)

    def test_no_data(self):
        client = RecordingClient({("GET", TOPIC + "/internalStats"): {"ledgers": []}})
        self.assertRaises(cli.CommandError, run, ["topics", "offload", "t", "-s", "1M"], client)


class OffloadStatusTests(SynchronousTestCase):
    def setUp(self):
        self.patch(offload, "_sleep", lambda seconds: None)

    def status(self, *states, wait=False):
        answers = [{"status": s, "lastError": "boom" if s == "ERROR" else ""} for s in states]
        client = RecordingClient({("GET", TOPIC + "/offload"): answers})
        argv = ["topics", "offload-status", "t"] + (["-w"] if wait else [])
        return run(argv, client), client

    def test_texts(self):
        self.assertEqual(self.status("NOT_RUN")[0], "Offload has not been run for "
                                                    "persistent://public/default/t since broker startup")
        self.assertEqual(self.status("RUNNING")[0], "Offload is currently running")
        self.assertEqual(self.status("SUCCESS")[0], "Offload was a success")
        e = self.assertRaises(cli.CommandError, self.status, "ERROR")
        self.assertIn("Error offloading: boom", str(e))

    def test_wait_polls_until_done(self):
        out, client = self.status("RUNNING", "RUNNING", "SUCCESS", wait=True)
        self.assertEqual(out, "Offload was a success")
        self.assertEqual(len(client.requests), 3)
