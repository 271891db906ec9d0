"""Tiered storage over the admin REST API: the namespace's offload settings and policies, a
topic's offload trigger and status (on a stub of the topic's offload methods), the stats field."""

import json

from twisted.internet import defer

from pulsar_twisted.mledger.interfaces import OffloadAlreadyRunningError
from tests.web.support import WebTestCase

V2 = "/admin/v2"
NS = f"{V2}/namespaces/public/default"
P = f"{V2}/persistent/public/default"
TOPIC = "persistent://public/default/t"
S3 = {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "b",
      "s3ManagedLedgerOffloadRegion": "eu-west-3"}


class NamespaceOffloadTests(WebTestCase):
    @defer.inlineCallbacks
    def stored(self):
        node = yield self.harness.store.get("/admin/policies/public/default")
        return json.loads(node[0])

    @defer.inlineCallbacks
    def effective(self):
        policies = yield self.broker.policies.policies_of("public/default")
        return policies.offload

    @defer.inlineCallbacks
    def test_thresholds(self):
        """offloadThreshold and offloadThresholdInSeconds: -1 unset; PUT stores them in the
        namespace's offload_policies object and they apply at once."""
        for name, key, attribute in (
                ("offloadThreshold", "managedLedgerOffloadThresholdInBytes", "threshold_bytes"),
                ("offloadThresholdInSeconds", "managedLedgerOffloadThresholdInSeconds",
                 "threshold_seconds")):
            self.assertEqual((yield self.expect("GET", f"{NS}/{name}", 200)), -1)
            yield self.expect("PUT", f"{NS}/{name}", 204, 1024)
            self.assertEqual((yield self.expect("GET", f"{NS}/{name}", 200)), 1024)
            self.assertEqual((yield self.stored())["offload_policies"][key], 1024)
            self.assertEqual(getattr((yield self.effective()), attribute), 1024)
        self.assertEqual((yield self.stored()).get("offload_threshold", -1), -1)

    @defer.inlineCallbacks
    def test_threshold_not_a_long(self):
        """A body that is not a long: 400."""
        yield self.expect("PUT", f"{NS}/offloadThreshold", 400, "lots")

    @defer.inlineCallbacks
    def test_deletion_lag(self):
        """offloadDeletionLagMs: 204 unset, PUT sets, DELETE clears back to the broker's 4 h."""
        yield self.expect("GET", f"{NS}/offloadDeletionLagMs", 204)
        yield self.expect("PUT", f"{NS}/offloadDeletionLagMs", 204, 60000)
        self.assertEqual((yield self.expect("GET", f"{NS}/offloadDeletionLagMs", 200)), 60000)
        self.assertEqual((yield self.effective()).deletion_lag_ms, 60000)
        yield self.expect("DELETE", f"{NS}/offloadDeletionLagMs", 204)
        yield self.expect("GET", f"{NS}/offloadDeletionLagMs", 204)
        self.assertEqual((yield self.effective()).deletion_lag_ms, 4 * 3600 * 1000)

    @defer.inlineCallbacks
    def test_policies_set_get_remove(self):
        """POST stores Pulsar's OffloadPoliciesImpl (its defaults filled in); GET reads it back;
        DELETE .../removeOffloadPolicies unsets it and the old fields."""
        yield self.expect("GET", f"{NS}/offloadPolicies", 204)
        yield self.expect("POST", f"{NS}/offloadPolicies", 204,
                          dict(S3, managedLedgerOffloadedReadPriority="bookkeeper-first"))
        body = yield self.expect("GET", f"{NS}/offloadPolicies", 200)
        self.assertEqual(body["s3ManagedLedgerOffloadBucket"], "b")
        self.assertEqual(body["managedLedgerOffloadMaxThreads"], 2)
        self.assertEqual(body["managedLedgerOffloadedReadPriority"], "BOOKKEEPER_FIRST")
        offload = yield self.effective()
        self.assertEqual((offload.driver, offload.bucket, offload.region, offload.read_priority),
                         ("aws-s3", "b", "eu-west-3", "bookkeeper-first"))
        yield self.expect("DELETE", f"{NS}/removeOffloadPolicies", 204)
        yield self.expect("GET", f"{NS}/offloadPolicies", 204)
        self.assertEqual((yield self.effective()).driver, "")

    @defer.inlineCallbacks
    def test_policies_refused(self):
        """Pulsar's 412s: no body, a driver it does not know (or that has no store here), an S3
        driver without a bucket. A wrongly typed field is a 400."""
        yield self.expect("POST", f"{NS}/offloadPolicies", 412)
        for bad in ({"managedLedgerOffloadDriver": "tape"},
                    {"managedLedgerOffloadDriver": "google-cloud-storage",
                     "gcsManagedLedgerOffloadBucket": "b"},
                    {"managedLedgerOffloadDriver": "S3"}):
            code, body, _ = yield self.post(f"{NS}/offloadPolicies", bad)
            self.assertEqual(code, 412, bad)
        yield self.expect("POST", f"{NS}/offloadPolicies", 400,
                          dict(S3, managedLedgerOffloadThresholdInBytes="big"))
        yield self.expect("POST", f"{NS}/offloadPolicies", 204,
                          {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///o"})

    @defer.inlineCallbacks
    def test_old_fields_read_and_folded(self):
        """A document with Pulsar's pre-2.6 offload_threshold: GET reads it, and the next offload
        write folds it into offload_policies (the old field reset to -1)."""
        def old(p):
            p["offload_threshold"] = 7
            return p
        yield self.admin.context.namespaces.update("public/default", old)
        yield self.broker.policies.refresh("public/default")
        self.assertEqual((yield self.expect("GET", f"{NS}/offloadThreshold", 200)), 7)
        self.assertEqual((yield self.effective()).threshold_bytes, 7)
        yield self.expect("PUT", f"{NS}/offloadDeletionLagMs", 204, 5)
        stored = yield self.stored()
        self.assertEqual(stored["offload_threshold"], -1)
        self.assertEqual(stored["offload_policies"]["managedLedgerOffloadThresholdInBytes"], 7)
        self.assertEqual(stored["offload_policies"]["managedLedgerOffloadDeletionLagInMillis"], 5)

    @defer.inlineCallbacks
    def test_unknown_namespace(self):
        yield self.expect("GET", f"{V2}/namespaces/public/nope/offloadThreshold", 404)
        yield self.expect("PUT", f"{V2}/namespaces/public/nope/offloadThreshold", 404, 5)


class _Stand_in:
    """``target`` with some attributes replaced (the real classes have __slots__)."""

    def __init__(self, target, **overrides):
        self._target = target
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._target, name)


class TopicOffloadTests(WebTestCase):
    def setUp(self):
        self.replaced = {}
        return super().setUp()

    def tearDown(self):
        self.broker.topics.update(self.replaced)   # the real topics close with the broker
        return super().tearDown()

    def stand_in(self, name, topic, **overrides):
        self.replaced.setdefault(name, topic)
        self.broker.topics[name] = _Stand_in(topic, **overrides)

    @defer.inlineCallbacks
    def stub_topic(self, status=None, error=None):
        """The loaded topic ``t`` with stand-ins of the offload methods: calls are recorded."""
        yield self.expect("PUT", f"{P}/t", 204)
        topic = yield self.broker.get_topic(TOPIC, create=False)
        calls = []

        def trigger(ledger_id, entry_id):
            calls.append((ledger_id, entry_id))
            if error is not None:
                raise error
        self.stand_in(TOPIC, topic, trigger_offload=trigger, offload_status=lambda: status)
        return calls

    @defer.inlineCallbacks
    def test_trigger(self):
        """PUT .../offload hands the message id's ledger and entry to the topic (204)."""
        calls = yield self.stub_topic()
        yield self.expect("PUT", f"{P}/t/offload", 204,
                          {"ledgerId": 12, "entryId": 0, "partitionIndex": -1})
        self.assertEqual(calls, [(12, 0)])

    @defer.inlineCallbacks
    def test_already_running(self):
        """An offload in progress: 409 "Offload already running"."""
        yield self.stub_topic(error=OffloadAlreadyRunningError("running"))
        body = yield self.expect("PUT", f"{P}/t/offload", 409, {"ledgerId": 3, "entryId": 0})
        self.assertEqual(body["reason"], "Offload already running")

    @defer.inlineCallbacks
    def test_not_configured_accepted(self):
        """No offload driver (the real topic of a broker without one): accepted, as Pulsar does;
        the run fails at once and the status says why."""
        yield self.expect("PUT", f"{P}/t", 204)
        yield self.expect("PUT", f"{P}/t/offload", 204, {"ledgerId": 3, "entryId": 0})
        body = yield self.expect("GET", f"{P}/t/offload", 200)
        self.assertEqual(body["status"], "ERROR")
        self.assertIn("NullLedgerOffloader", body["lastError"])

    @defer.inlineCallbacks
    def test_bad_message_id(self):
        yield self.stub_topic()
        yield self.expect("PUT", f"{P}/t/offload", 400, {"ledgerId": "x", "entryId": 0})
        yield self.expect("PUT", f"{P}/t/offload", 400)

    @defer.inlineCallbacks
    def test_status(self):
        """GET .../offload: Pulsar's OffloadProcessStatus, the partition index added."""
        yield self.stub_topic(status={"status": "ERROR", "lastError": "boom",
                                      "firstUnoffloadedMessage": {"ledgerId": 5, "entryId": 0}})
        body = yield self.expect("GET", f"{P}/t/offload", 200)
        self.assertEqual(body, {"status": "ERROR", "lastError": "boom",
                                "firstUnoffloadedMessage": {"ledgerId": 5, "entryId": 0,
                                                            "partitionIndex": -1}})

    @defer.inlineCallbacks
    def test_status_before_any_run(self):
        yield self.expect("PUT", f"{P}/t", 204)
        body = yield self.expect("GET", f"{P}/t/offload", 200)
        self.assertEqual(body["status"], "NOT_RUN")
        self.assertEqual(body["lastError"], "")
        self.assertEqual(body["firstUnoffloadedMessage"],
                         {"ledgerId": -1, "entryId": -1, "partitionIndex": -1})

    @defer.inlineCallbacks
    def test_refusals(self):
        """Non-persistent topics: 405; a partitioned topic's name, or no topic: 404."""
        yield self.expect("GET", f"{V2}/non-persistent/public/default/np/offload", 405)
        yield self.expect("GET", f"{P}/missing/offload", 404)
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 2)
        yield self.expect("GET", f"{P}/pt/offload", 404)

    @defer.inlineCallbacks
    def test_stats_offloaded_size(self):
        """offloadedStorageSize is the ledger's offloaded_size(); partitioned stats sum it."""
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 2)
        for i in range(2):
            name = f"persistent://public/default/pt-partition-{i}"
            topic = yield self.broker.get_topic(name, create=False)
            self.stand_in(name, topic, ledger=_Stand_in(topic.ledger, offloaded_size=lambda i=i: 100 + i))
        stats = yield self.expect("GET", f"{P}/pt-partition-1/stats", 200)
        self.assertEqual(stats["offloadedStorageSize"], 101)
        stats = yield self.expect("GET", f"{P}/pt/partitioned-stats", 200)
        self.assertEqual(stats["offloadedStorageSize"], 201)
