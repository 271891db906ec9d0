"""
The bundle routes of /admin/v2 on a standalone broker: namespace and bundle unload, split-bundle,
a topic's bundle, the load report and the decisions log.
"""

from twisted.internet import defer

from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.web.support import WebTestCase, settle

T = api.BaseCommand
NS = "/admin/v2/namespaces/public/default"
TOPIC_PATH = "/admin/v2/persistent/public/default/webby"


class BundleRouteTests(WebTestCase):

    @defer.inlineCallbacks
    def test_bundle_unload_closes_the_topics_of_the_bundle(self):
        client = yield self.producer("persistent://public/default/webby")
        bundle = yield self.expect("GET", TOPIC_PATH + "/bundle", 200)
        self.assertRegex(bundle, r"^0x[0-9a-f]{8}_0x[0-9a-f]{8}$")
        yield self.expect("PUT", f"{NS}/{bundle}/unload", 204)
        yield settle()
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        self.assertNotIn("persistent://public/default/webby", self.broker.topics)

    @defer.inlineCallbacks
    def test_namespace_unload_and_bad_ranges(self):
        client = yield self.producer("persistent://public/default/webby")
        yield self.expect("PUT", f"{NS}/unload", 204)
        yield settle()
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        yield self.expect("PUT", f"{NS}/0x00000000_0x10000000/unload", 412)
        yield self.expect("PUT", "/admin/v2/namespaces/public/nope/unload", 404)

    @defer.inlineCallbacks
    def test_split_bundle_rewrites_the_boundaries(self):
        yield self.expect("PUT", f"{NS}/0x00000000_0x40000000/split?splitAlgorithmName=range_equally_divide", 204)
        policies = yield self.expect("GET", NS, 200)
        self.assertEqual(policies["bundles"]["numBundles"], 5)
        self.assertEqual(policies["bundles"]["boundaries"][:3], ["0x00000000", "0x20000000", "0x40000000"])
        yield self.expect("PUT", f"{NS}/0x20000000_0x40000000/split?splitAlgorithmName=bogus", 412)
        decisions = yield self.expect("GET", "/admin/v2/broker-stats/load-decisions?kind=split", 200)
        self.assertEqual([d["bundle"] for d in decisions], ["public/default/0x00000000_0x40000000"])

    @defer.inlineCallbacks
    def test_load_report_has_pulsar_field_names(self):
        yield self.producer("persistent://public/default/webby")
        report = yield self.expect("GET", "/admin/v2/broker-stats/load-report", 200)
        for field in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut", "msgRateIn",
                      "msgRateOut", "msgThroughputIn", "msgThroughputOut", "numTopics", "numBundles",
                      "numProducers", "numConsumers", "lastStats", "bundles", "pulsarServiceUrl"):
            self.assertIn(field, report)
        self.assertEqual((report["numTopics"], report["numProducers"]), (1, 1))
        self.assertEqual(set(report["cpu"]), {"usage", "limit"})


class DefaultBundlesTests(WebTestCase):
    config = {"defaultNumberOfNamespaceBundles": 8}

    @defer.inlineCallbacks
    def test_new_namespaces_get_default_number_of_namespace_bundles(self):
        yield self.expect("PUT", "/admin/v2/namespaces/public/eight", 204)
        policies = yield self.expect("GET", "/admin/v2/namespaces/public/eight", 200)
        self.assertEqual(policies["bundles"]["numBundles"], 8)
        self.assertEqual(len(policies["bundles"]["boundaries"]), 9)
        yield self.expect("PUT", "/admin/v2/namespaces/public/two", 204, {"bundles": {"numBundles": 2}})
        policies = yield self.expect("GET", "/admin/v2/namespaces/public/two", 200)
        self.assertEqual(policies["bundles"]["numBundles"], 2)
