"""``pulsar-admin topics`` topic-policy verbs: the requests each makes (Pulsar's CmdTopics names,
flags and bodies) on a recording client, then a few run for real against the broker's site."""

import io

from twisted.internet import defer, threads
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli import admin as cli
from tests.cli.recording import RecordingClient
from tests.web.support import WebTestCase

T = "/admin/v2/persistent/public/default/t"


def run(argv, client=None):
    client = client or RecordingClient(queries=True)
    args = cli.build_parser().parse_args(argv)
    args.run(args, client)
    return client.requests


class VerbTests(SynchronousTestCase):
    def test_retention(self):
        """set-retention -t 3h -s 10G: minutes and MB, as Pulsar's CLI converts them."""
        self.assertEqual(run(["topics", "set-retention", "t", "-t", "3h", "-s", "10G"]),
                         [("POST", f"{T}/retention",
                           {"retentionTimeInMinutes": 180, "retentionSizeInMB": 10240}, None)])
        self.assertEqual(run(["topics", "set-retention", "t", "--time", "-1", "--size", "-1"])[0][2],
                         {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        self.assertEqual(run(["topics", "get-retention", "t", "--applied"]),
                         [("GET", f"{T}/retention", None, {"applied": "true"})])
        self.assertEqual(run(["topics", "remove-retention", "t"]), [("DELETE", f"{T}/retention", None, None)])

    def test_message_ttl(self):
        """set-message-ttl -t sends ?messageTTL= (seconds; units accepted), no body."""
        self.assertEqual(run(["topics", "set-message-ttl", "t", "-t", "3600"]),
                         [("POST", f"{T}/messageTTL", None, {"messageTTL": "3600"})])
        self.assertEqual(run(["topics", "set-message-ttl", "t", "--ttl", "2h"])[0][3], {"messageTTL": "7200"})
        self.assertRaises(cli.CommandError, run, ["topics", "set-message-ttl", "t", "-t", "-1"])
        self.assertEqual(run(["topics", "get-message-ttl", "t", "-ap"])[0][3], {"applied": "true"})

    def test_deduplication(self):
        """set-deduplication -e/-d (exactly one), and Pulsar's deprecated verbs."""
        self.assertEqual(run(["topics", "set-deduplication", "t", "-e"]),
                         [("POST", f"{T}/deduplicationEnabled", True, None)])
        self.assertEqual(run(["topics", "set-deduplication", "t", "--disable"])[0][2], False)
        self.assertRaises(cli.CommandError, run, ["topics", "set-deduplication", "t"])
        self.assertRaises(cli.CommandError, run, ["topics", "set-deduplication", "t", "-e", "-d"])
        self.assertEqual(run(["topics", "enable-deduplication", "t"])[0][:3],
                         ("POST", f"{T}/deduplicationEnabled", True))
        self.assertEqual(run(["topics", "disable-deduplication", "t"])[0][2], False)
        for verb in ("get-deduplication", "get-deduplication-enabled"):
            self.assertEqual(run(["topics", verb, "t"]), [("GET", f"{T}/deduplicationEnabled", None, None)])
        self.assertEqual(run(["topics", "remove-deduplication", "t"])[0][:2],
                         ("DELETE", f"{T}/deduplicationEnabled"))

    def test_limits(self):
        """set-max-producers -p, set-max-consumers -c, set-max-consumers-per-subscription -c,
        and the deprecated set-maxProducers."""
        self.assertEqual(run(["topics", "set-max-producers", "t", "-p", "2"]),
                         [("POST", f"{T}/maxProducers", 2, None)])
        self.assertEqual(run(["topics", "set-maxProducers", "t", "--max-producers", "3"])[0][2], 3)
        self.assertEqual(run(["topics", "set-max-consumers", "t", "-c", "4"]),
                         [("POST", f"{T}/maxConsumers", 4, None)])
        self.assertEqual(run(["topics", "set-max-consumers-per-subscription", "t", "-c", "5"]),
                         [("POST", f"{T}/maxConsumersPerSubscription", 5, None)])
        self.assertEqual(run(["topics", "get-max-consumers", "t", "--applied"])[0][3], {"applied": "true"})
        self.assertEqual(run(["topics", "remove-max-producers", "t"])[0][:2], ("DELETE", f"{T}/maxProducers"))
        self.assertEqual(run(["topics", "remove-maxProducers", "t"])[0][:2], ("DELETE", f"{T}/maxProducers"))
        self.assertEqual(run(["topics", "remove-max-consumers-per-subscription", "t"])[0][:2],
                         ("DELETE", f"{T}/maxConsumersPerSubscription"))

    def test_replication_clusters(self):
        self.assertEqual(run(["topics", "set-replication-clusters", "t", "-c", "a,b"]),
                         [("POST", f"{T}/replication", ["a", "b"], None)])
        self.assertEqual(run(["topics", "get-replication-clusters", "t", "-ap"])[0][:2],
                         ("GET", f"{T}/replication"))
        self.assertEqual(run(["topics", "remove-replication-clusters", "t"])[0][:2],
                         ("DELETE", f"{T}/replication"))

    def test_inactive_topic_policies(self):
        self.assertEqual(run(["topics", "set-inactive-topic-policies", "t", "-e", "-t", "1h",
                              "-m", "delete_when_subscriptions_caught_up"]),
                         [("POST", f"{T}/inactiveTopicPolicies", {
                             "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                             "maxInactiveDurationSeconds": 3600, "deleteWhileInactive": True}, None)])
        self.assertRaises(cli.CommandError, run, ["topics", "set-inactive-topic-policies", "t",
                                                  "-t", "1h", "-m", "delete_when_no_subscriptions"])
        self.assertRaises(cli.CommandError, run, ["topics", "set-inactive-topic-policies", "t", "-d",
                                                  "-t", "1h", "-m", "sometimes"])

    def test_rates(self):
        """set-publish-rate -m -b; set-(subscription-)dispatch-rate -md -bd -dt -rp (Pulsar's
        defaults -1, -1, 1 s, false)."""
        self.assertEqual(run(["topics", "set-publish-rate", "t", "-m", "10"]),
                         [("POST", f"{T}/publishRate", {"publishThrottlingRateInMsg": 10,
                                                        "publishThrottlingRateInByte": -1}, None)])
        body = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": -1,
                "ratePeriodInSecond": 2, "relativeToPublishRate": True}
        self.assertEqual(run(["topics", "set-dispatch-rate", "t", "-md", "5", "-dt", "2", "-rp"]),
                         [("POST", f"{T}/dispatchRate", body, None)])
        self.assertEqual(run(["topics", "set-subscription-dispatch-rate", "t", "--msg-dispatch-rate", "5",
                              "--dispatch-rate-period", "2", "--relative-to-publish-rate"]),
                         [("POST", f"{T}/subscriptionDispatchRate", body, None)])
        self.assertEqual(run(["topics", "get-subscription-dispatch-rate", "t", "-ap"])[0][3],
                         {"applied": "true"})
        self.assertEqual(run(["topics", "remove-publish-rate", "t"])[0][:2], ("DELETE", f"{T}/publishRate"))

    def test_backlog_quota(self):
        """set-backlog-quota -l 10G -p producer_request_hold [-t message_age -lt 1h]."""
        self.assertEqual(run(["topics", "set-backlog-quota", "t", "-l", "10G", "-p", "producer_request_hold"]),
                         [("POST", f"{T}/backlogQuota", {"limitSize": 10 * 1024 ** 3, "limitTime": -1,
                                                         "policy": "producer_request_hold"},
                           {"backlogQuotaType": "destination_storage"})])
        requests = run(["topics", "set-backlog-quota", "t", "-lt", "1h", "-p", "producer_exception",
                        "-t", "message_age"])
        self.assertEqual(requests[0][2:], ({"limitSize": -1, "limitTime": 3600, "policy": "producer_exception"},
                                           {"backlogQuotaType": "message_age"}))
        self.assertRaises(cli.CommandError, run, ["topics", "set-backlog-quota", "t", "-p", "hold"])
        self.assertEqual(run(["topics", "get-backlog-quotas", "t", "-ap"]),
                         [("GET", f"{T}/backlogQuotaMap", None, {"applied": "true"})])
        self.assertEqual(run(["topics", "remove-backlog-quota", "t", "-t", "message_age"]),
                         [("DELETE", f"{T}/backlogQuota", None, {"backlogQuotaType": "message_age"})])

    def test_offload_policies(self):
        """set-offload-policies takes the namespace verb's flags and body."""
        [(method, path, body, _)] = run(["topics", "set-offload-policies", "t", "-d", "filesystem",
                                         "-t", "10M", "-b", "bucket"])
        self.assertEqual((method, path), ("POST", f"{T}/offloadPolicies"))
        self.assertEqual(body["managedLedgerOffloadThresholdInBytes"], 10 * 1024 * 1024)
        self.assertEqual(run(["topics", "remove-offload-policies", "t"])[0][:2],
                         ("DELETE", f"{T}/offloadPolicies"))

    def test_global_flag(self):
        """-g/--global sends Pulsar's isGlobal=true (which the broker refuses)."""
        self.assertEqual(run(["topics", "set-max-producers", "t", "-p", "1", "-g"])[0][3], {"isGlobal": "true"})
        self.assertEqual(run(["topics", "get-retention", "t", "--global", "-ap"])[0][3],
                         {"applied": "true", "isGlobal": "true"})
        self.assertEqual(run(["topics", "remove-backlog-quota", "t", "-g"])[0][3],
                         {"backlogQuotaType": "destination_storage", "isGlobal": "true"})


class LiveTests(WebTestCase):
    """The real pulsar-admin (blocking urllib, in a thread) against the broker's site."""

    def pulsar_admin(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        d = threads.deferToThread(cli.main, ["--admin-url", self.base, "topics", *argv], out, err)
        return d.addCallback(lambda code: (code, out.getvalue(), err.getvalue()))

    @defer.inlineCallbacks
    def test_set_get_remove(self):
        yield self.expect("PUT", T, 204)
        self.assertEqual((yield self.pulsar_admin("get-max-producers", "t")), (0, "null\n", ""))
        self.assertEqual((yield self.pulsar_admin("set-max-producers", "t", "-p", "2"))[0], 0)
        self.assertEqual((yield self.pulsar_admin("get-max-producers", "t")), (0, "2\n", ""))
        yield self.expect("POST", "/admin/v2/namespaces/public/default/messageTTL", 204, 60)
        self.assertEqual((yield self.pulsar_admin("get-message-ttl", "t", "--applied")), (0, "60\n", ""))
        self.assertEqual((yield self.pulsar_admin("set-message-ttl", "t", "-t", "2m"))[0], 0)
        self.assertEqual((yield self.pulsar_admin("get-message-ttl", "t")), (0, "120\n", ""))
        self.assertEqual((yield self.pulsar_admin("set-retention", "t", "-t", "1h", "-s", "5M"))[0], 0)
        code, out, _ = yield self.pulsar_admin("get-retention", "t")
        self.assertEqual(out, '{\n  "retentionTimeInMinutes" : 60,\n  "retentionSizeInMB" : 5\n}\n')
        self.assertEqual((yield self.pulsar_admin("remove-max-producers", "t"))[0], 0)
        self.assertEqual((yield self.pulsar_admin("get-max-producers", "t")), (0, "null\n", ""))

    @defer.inlineCallbacks
    def test_errors(self):
        """Pulsar's failures print as the other verbs' do: status, then the broker's reason."""
        code, _, err = yield self.pulsar_admin("get-retention", "ghost")
        self.assertEqual(code, 1)
        self.assertEqual(err, "HTTP 404 Not Found\n\nReason: Topic persistent://public/default/ghost not found\n")
        yield self.expect("PUT", T, 204)
        code, _, err = yield self.pulsar_admin("set-max-producers", "t", "-p", "-1")
        self.assertEqual((code, err.splitlines()[-1]), (1, "Reason: maxProducers must be 0 or more"))
        code, _, err = yield self.pulsar_admin("set-max-producers", "t", "-p", "1", "--global")
        self.assertEqual((code, err.splitlines()[0]), (1, "HTTP 412 Precondition Failed"))
