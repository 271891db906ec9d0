"""
Bundle moves between two in-memory brokers (one embedded store, two sessions, one ledger client):
unload (``BundleOwnership.release`` / ``request_unload`` and the admin calls), split on demand
and automatic, placement of free bundles on the least loaded broker, and the leader's shedding.
"""

import json

from twisted.internet import defer, task
from twisted.trial.unittest import TestCase

from pulsar_twisted.broker.admin.errors import PreconditionFailed
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.loadbalance.decisions import DecisionLog
from pulsar_twisted.broker.leader import leader_data
from pulsar_twisted.broker.loadbalance.manager import LoadManager
from pulsar_twisted.broker.loadbalance.reports import HostUsage
from pulsar_twisted.broker.ownership import BundleOwnership, NotOwnedError, StaleBundleError, unload_bundle
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import LEADER_PATH, broker_path
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import boundaries_of_policies
from pulsar_twisted.testing.broker import BrokerHarness

T = api.BaseCommand
A_URLS = {"nativeUrl": "pulsar://localhost:6650", "httpUrl": "http://a:8080"}
B_URLS = {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}
TOPIC = "persistent://public/default/moving"


def lookup(client, topic, request_id=1, authoritative=False):
    client.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(
        topic=topic, request_id=request_id, authoritative=authoritative)))
    return [c.lookupTopicResponse for c in client.commands(T.LOOKUP_RESPONSE)][-1]


def produce(client, topic, producer_id=1, request_id=2):
    client.send(T(type=T.PRODUCER, producer=api.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=request_id)))
    return client.received()[-1][0]


def idle_host(clock):
    return HostUsage(clock, cpu_seconds=lambda: 0.0, resident_mb=lambda: 100.0, machine_mb=lambda: 1000.0,
                     cores=1)


class TwoBrokers(TestCase):

    config = {}

    def setUp(self):
        self.clock = task.Clock()
        self.root = EmbeddedMetadataStore(None, self.clock)
        self.a = BrokerHarness(clock=self.clock, store=self.root, **self.config)
        self.successResultOf(self.a.start())
        self.b = BrokerHarness(clock=self.clock, store=self.root.new_session(),
                               ledger_client=self.a.ledger_client, **self.config)
        self.successResultOf(self.b.start())
        self.b.broker.broker_url = "pulsar://b:6650"
        self.own_a = self._ownership(self.a, A_URLS)
        self.own_b = self._ownership(self.b, B_URLS)
        self.admin_a = AdminService(self.a.broker, self.a.store, self.a.config, self.clock)
        self.admin_b = AdminService(self.b.broker, self.b.store, self.b.config, self.clock)
        self.name = parse_topic(TOPIC)
        self.bundle = self.successResultOf(self.own_a.bundle_of(self.name))

    def _ownership(self, harness, urls):
        ownership = BundleOwnership(
            harness.store, self.clock, urls,
            on_bundle_lost=lambda bundle: unload_bundle(harness.broker, bundle),
            on_bundle_unload=lambda bundle: unload_bundle(harness.broker, bundle), check_interval=5)
        harness.broker.ownership = ownership
        harness.broker.decisions = DecisionLog(self.clock)     # as the broker daemon does
        ownership.start()
        self.addCleanup(ownership.stop)
        return ownership

    def go(self, coroutine):
        d = defer.ensureDeferred(coroutine)
        self.a.pump()
        return d

    def owner_of(self, bundle):
        node = self.successResultOf(self.root.get(bundle.path))
        return None if node is None else json.loads(node[0])


class UnloadTests(TwoBrokers):

    def test_unload_on_the_owner_closes_topics_and_frees_the_bundle(self):
        """Producers get CLOSE_PRODUCER, the node goes, and the next lookup (elsewhere) takes it."""
        client = self.a.client()
        self.assertEqual(produce(client, TOPIC).type, T.PRODUCER_SUCCESS)
        self.successResultOf(self.go(self.admin_a.unload_bundle("public", "default", self.bundle.range_name)))
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        self.assertNotIn(TOPIC, self.a.broker.topics)
        self.assertIsNone(self.owner_of(self.bundle))
        self.assertFalse(self.own_a.owns(self.bundle))
        r = lookup(self.b.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, "pulsar://b:6650"))
        self.assertEqual([d["kind"] for d in self.a.broker.decisions.entries()], ["unload"])

    def test_unload_through_a_non_owner(self):
        """B disables A's node; A sees its own data disabled and releases the bundle; B's call
        returns once the bundle is free."""
        client = self.a.client()
        self.assertEqual(produce(client, TOPIC).type, T.PRODUCER_SUCCESS)
        d = self.go(self.admin_b.unload_bundle("public", "default", self.bundle.range_name))
        self.clock.advance(0.1)
        self.successResultOf(d)
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        self.assertIsNone(self.owner_of(self.bundle))
        self.assertNotIn(TOPIC, self.a.broker.topics)

    def test_lookups_retry_while_the_topics_close(self):
        """Between disabling the node and deleting it, every broker answers ServiceNotReady."""
        self.successResultOf(self.own_a.check_owned(self.name))
        closing = defer.Deferred()
        self.own_a.on_bundle_unload = lambda bundle: closing
        released = self.own_a.release(self.bundle)
        self.assertTrue(self.owner_of(self.bundle)["disabled"])
        self.failureResultOf(self.own_a.lookup(self.name), errors.ServiceNotReady)
        self.failureResultOf(self.own_b.lookup(self.name), errors.ServiceNotReady)
        self.assertNoResult(released)
        closing.callback(None)
        self.assertTrue(self.successResultOf(released))
        self.assertFalse(self.successResultOf(self.own_b.lookup(self.name)).redirect)

    def test_unload_of_a_free_bundle_and_of_the_namespace(self):
        """Nobody owning a bundle is not an error (Pulsar); the namespace unload frees all."""
        self.successResultOf(self.go(self.admin_a.unload_bundle("public", "default", self.bundle.range_name)))
        other = parse_topic("persistent://public/default/other-x")
        self.successResultOf(self.own_a.check_owned(self.name))
        self.successResultOf(self.own_b.check_owned(other))
        d = self.go(self.admin_a.unload_namespace("public", "default"))
        self.clock.advance(0.1)
        self.successResultOf(d)
        self.assertEqual((self.own_a.owned, self.own_b.owned), ({}, {}))

    def test_bad_range_is_412(self):
        for name in ("0x00000000_0x20000000", "junk"):
            f = self.failureResultOf(self.go(self.admin_a.unload_bundle("public", "default", name)))
            self.assertIsInstance(f.value, PreconditionFailed)

    def test_bundle_range_of_a_topic(self):
        self.assertEqual(self.successResultOf(self.go(self.admin_a.bundle_range(self.name))),
                         self.bundle.range_name)


class SplitTests(TwoBrokers):

    def policies_bounds(self):
        node = self.successResultOf(self.root.get("/admin/policies/public/default"))
        return boundaries_of_policies(json.loads(node[0]))

    def test_split_keeps_the_topics_and_owns_both_halves(self):
        """The halves replace the bundle on the same broker; the producer is not disturbed."""
        client = self.a.client()
        self.assertEqual(produce(client, TOPIC).type, T.PRODUCER_SUCCESS)
        self.successResultOf(self.go(self.admin_a.split_bundle("public", "default", self.bundle.range_name)))
        bounds = self.policies_bounds()
        self.assertEqual(len(bounds) - 1, 5)
        middle = self.bundle.lower + (self.bundle.upper - self.bundle.lower) // 2
        self.assertIn(middle, bounds)
        self.assertIsNone(self.owner_of(self.bundle))
        halves = [b for b in self.own_a.owned.values() if self.bundle.lower <= b.lower < self.bundle.upper]
        self.assertEqual(sorted((h.lower, h.upper) for h in halves),
                         [(self.bundle.lower, middle), (middle, self.bundle.upper)])
        for half in halves:
            self.assertEqual(self.owner_of(half)["nativeUrl"], A_URLS["nativeUrl"])
        self.assertIn(TOPIC, self.a.broker.topics)
        self.assertNotIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        # B reads the new boundaries and redirects to A for the topic's half.
        r = lookup(self.b.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Redirect, A_URLS["nativeUrl"]))
        [entry] = self.a.broker.decisions.entries("split")
        self.assertIn("range_equally_divide", entry["reason"])

    def test_split_with_unload(self):
        client = self.a.client()
        self.assertEqual(produce(client, TOPIC).type, T.PRODUCER_SUCCESS)
        self.successResultOf(self.go(self.admin_a.split_bundle(
            "public", "default", self.bundle.range_name, unload=True)))
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        self.assertEqual(self.own_a.owned, {})
        self.assertEqual(len(self.policies_bounds()) - 1, 5)

    def test_stale_boundaries_never_take_a_split_parent(self):
        """Split with unload on A; B still holds the old boundaries (the policies notification
        not there yet): B's lookup does not take the parent (which would overlap the halves) but
        reads the boundaries again and takes the topic's half."""
        self.successResultOf(self.own_b.bundle_of(self.name))     # B caches the 4 bundles
        self.assertEqual(produce(self.a.client(), TOPIC).type, T.PRODUCER_SUCCESS)
        self.successResultOf(self.go(self.admin_a.split_bundle(
            "public", "default", self.bundle.range_name, unload=True)))
        self.own_b._bounds["public/default"] = list(boundaries_of_policies({}))   # stale again
        self.assertIsInstance(self.failureResultOf(self.go(self.own_b.acquire(self.bundle))).value,
                              StaleBundleError)
        r = lookup(self.b.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, "pulsar://b:6650"))
        self.assertIsNone(self.owner_of(self.bundle))
        [half] = self.own_b.owned.values()
        self.assertTrue(self.bundle.lower <= half.lower < half.upper <= self.bundle.upper)
        self.assertNotEqual(half, self.bundle)

    def test_split_on_a_non_owner_redirects_to_the_owner(self):
        self.successResultOf(self.own_a.check_owned(self.name))
        f = self.failureResultOf(self.go(self.admin_b.split_bundle("public", "default", self.bundle.range_name)))
        self.assertIsInstance(f.value, NotOwnedError)
        self.assertEqual(f.value.owner["httpUrl"], A_URLS["httpUrl"])
        self.assertEqual(len(self.policies_bounds()) - 1, 4)

    def test_topic_count_algorithm_and_refusals(self):
        f = self.failureResultOf(self.go(self.admin_a.split_bundle(
            "public", "default", self.bundle.range_name, algorithm="topic_count_equally_divide")))
        self.assertIsInstance(f.value, PreconditionFailed)     # no topics loaded in it
        f = self.failureResultOf(self.go(self.admin_a.split_bundle(
            "public", "default", self.bundle.range_name, algorithm="nope")))
        self.assertIsInstance(f.value, PreconditionFailed)
        self.assertEqual(self.own_a.owned, {})

    def test_maximum_bundles(self):
        self.a.config.loadBalancerNamespaceMaximumBundles = 4
        f = self.failureResultOf(self.go(self.admin_a.split_bundle("public", "default", self.bundle.range_name)))
        self.assertIsInstance(f.value, PreconditionFailed)
        self.assertEqual(len(self.policies_bounds()) - 1, 4)
        self.assertEqual(self.owner_of(self.bundle)["nativeUrl"], A_URLS["nativeUrl"])


class LoadManagerBase(TwoBrokers):
    """Both brokers with a LoadManager (A the leader), driven by hand (no loop)."""

    def manager(self, harness, ownership, broker_id, urls, leader=False):
        class Leader:
            is_leader = leader
        base = {"pulsarServiceUrl": urls["nativeUrl"], "webServiceUrl": urls["httpUrl"],
                "pulsarServiceUrlTls": "", "webServiceUrlTls": ""}
        manager = LoadManager(harness.broker, ownership, harness.store, self.clock, harness.config,
                              broker_id, base, leader=Leader(), decisions=harness.broker.decisions,
                              host=idle_host(self.clock), interval=0)
        harness.broker.load_manager = manager
        ownership.placement = manager.place
        return manager

    def setUp(self):
        super().setUp()
        self.lm_a = self.manager(self.a, self.own_a, "a:8080", A_URLS, leader=True)
        self.lm_b = self.manager(self.b, self.own_b, "b:8080", B_URLS)
        # A's LeaderElection node (broker/leader.py), which B reads to forward placements.
        self.successResultOf(self.go(self.root.put(LEADER_PATH, leader_data("a:8080", "http://a:8080"),
                                                   ephemeral=True)))

    def write(self, manager, **load):
        report = manager.current_report()
        report.update(load)
        manager._last_written = None
        self.successResultOf(self.go(self.store_report(manager, report)))

    async def store_report(self, manager, report):
        await manager.store.put(broker_path(manager.broker_id), json.dumps(report).encode(), ephemeral=True)



class LoadManagerTests(LoadManagerBase):

    def test_report_written_on_thresholds(self):
        """The first report is written; an unchanged one not before the max interval."""
        self.assertTrue(self.successResultOf(self.go(self.lm_a.write_report())))
        node = json.loads(self.successResultOf(self.root.get(broker_path("a:8080")))[0])
        for field in ("cpu", "memory", "bandwidthIn", "bandwidthOut", "msgRateIn", "msgThroughputOut",
                      "numTopics", "numBundles", "numProducers", "numConsumers", "lastStats", "bundles",
                      "pulsarServiceUrl"):
            self.assertIn(field, node)
        self.clock.advance(60)
        self.assertFalse(self.successResultOf(self.go(self.lm_a.write_report())))
        self.clock.advance(15 * 60)
        self.assertTrue(self.successResultOf(self.go(self.lm_a.write_report())))

    def test_free_bundle_goes_to_the_least_loaded_broker(self):
        """A is busy: a lookup on A redirects to B without taking the bundle; the client's
        authoritative lookup on B takes it there. The decision is logged with the scores."""
        self.write(self.lm_a, bundles=["public/default/busy"],
                   lastStats={"public/default/busy": {"msgRateIn": 5000.0}})
        self.write(self.lm_b)
        self.lm_a.last_report = None
        r = lookup(self.a.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl, r.authoritative), (r.Redirect, "pulsar://b:6650", True))
        self.assertIsNone(self.owner_of(self.bundle))
        r = lookup(self.b.client(), TOPIC, authoritative=True)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, "pulsar://b:6650"))
        self.assertTrue(self.own_b.owns(self.bundle))
        [entry] = self.a.broker.decisions.entries("placement")
        self.assertEqual((entry["target"], entry["bundle"]), ("b:8080", str(self.bundle)))
        self.assertEqual(entry["scores"], {"a:8080": 5000.0, "b:8080": 0.0})

    def test_failing_placement_takes_the_bundle_here(self):
        """A placement that fails (reports unreadable) does not fail the lookup."""
        self.own_a.placement = lambda bundle: defer.fail(RuntimeError("no reports"))
        r = lookup(self.a.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, A_URLS["nativeUrl"]))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_overloaded_broker_gets_nothing(self):
        """B (overloaded, not the leader) forwards the lookup to the leader A, not authoritative;
        A places the bundle on itself and takes it."""
        self.write(self.lm_a)
        self.write(self.lm_b, cpu={"usage": 95.0, "limit": 100.0})
        self.lm_a.last_report = self.lm_b.last_report = None
        r = lookup(self.b.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl, r.authoritative),
                         (r.Redirect, A_URLS["nativeUrl"], False))
        self.assertEqual(self.b.broker.decisions.entries(), [])
        r = lookup(self.a.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, A_URLS["nativeUrl"]))
        self.assertTrue(self.own_a.owns(self.bundle))
        [entry] = self.a.broker.decisions.entries("placement")
        self.assertEqual(entry["scores"]["b:8080"], "overloaded")

    def test_non_leader_to_leader_to_chosen_broker(self):
        """B is asked, A leads and is busy: B -> A (not authoritative) -> B (authoritative), where
        the bundle is taken; two hops, no loop. Over HTTP the same hops are 307s."""
        self.write(self.lm_a, bundles=["public/default/busy"],
                   lastStats={"public/default/busy": {"msgRateIn": 5000.0}})
        self.write(self.lm_b)
        self.lm_a.last_report = self.lm_b.last_report = None
        path = "/lookup/v2/topic/persistent/public/default/moving"
        redirect = self.successResultOf(self.http_lookup(self.admin_b, "http://b:8080", path))
        self.assertEqual((redirect.status, redirect.headers["Location"]),
                         (307, "http://a:8080" + path + "?authoritative=false"))
        redirect = self.successResultOf(self.http_lookup(self.admin_a, "http://a:8080", path))
        self.assertEqual(redirect.headers["Location"], "http://b:8080" + path + "?authoritative=true")
        self.assertIsNone(self.owner_of(self.bundle))
        r = lookup(self.b.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl, r.authoritative),
                         (r.Redirect, A_URLS["nativeUrl"], False))
        r = lookup(self.a.client(), TOPIC)
        self.assertEqual((r.response, r.brokerServiceUrl, r.authoritative), (r.Redirect, "pulsar://b:6650", True))
        r = lookup(self.b.client(), TOPIC, authoritative=r.authoritative)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, "pulsar://b:6650"))
        self.assertTrue(self.own_b.owns(self.bundle))
        # Only the leader decided, once (the HTTP lookup's and the binary one's answer: b).
        self.assertEqual([e["target"] for e in self.a.broker.decisions.entries("placement")], ["b:8080"])
        self.assertEqual(self.b.broker.decisions.entries(), [])
        answer = self.successResultOf(self.http_lookup(self.admin_a, "http://a:8080", path))
        self.assertEqual(answer["brokerUrl"], "pulsar://b:6650")     # owned now: 200, the owner

    def http_lookup(self, admin, web_url, path):
        from twisted.web.test.requesthelper import DummyRequest
        from pulsar_twisted.web.routing import Router
        from pulsar_twisted.web.topics import add_lookup_routes
        router = Router()
        add_lookup_routes(router, admin)
        handler, params = router.match("GET", path)
        request = DummyRequest(path.encode().lstrip(b"/").split(b"/"))
        request.path = path.encode()
        request.isSecure = lambda: False
        return defer.ensureDeferred(handler(request, **params))

    def test_leader_sheds_from_the_hot_broker(self):
        """The ThresholdShedder picks A's biggest bundle; A releases it; the shed is logged."""
        client = self.a.client()
        self.assertEqual(produce(client, TOPIC).type, T.PRODUCER_SUCCESS)
        other = "persistent://public/default/cool-y"
        other_bundle = self.successResultOf(self.own_a.bundle_of(parse_topic(other)))
        if other_bundle == self.bundle:
            other = "persistent://public/default/other-x"
            other_bundle = self.successResultOf(self.own_a.bundle_of(parse_topic(other)))
        self.assertNotEqual(other_bundle, self.bundle)
        self.successResultOf(self.own_a.check_owned(parse_topic(other)))
        hot = {str(self.bundle): {"msgThroughputIn": 900.0}, str(other_bundle): {"msgThroughputIn": 100.0}}
        reports = {"a:8080": {"cpu": {"usage": 90.0, "limit": 100.0}, "bundles": list(hot),
                              "lastStats": hot, "msgThroughputIn": 1000.0},
                   "b:8080": {"cpu": {"usage": 10.0, "limit": 100.0}, "bundles": []}}
        picked = self.successResultOf(self.go(self.lm_a.shed(reports, now=0)))
        self.assertEqual([(b, n) for b, n, _ in picked], [("a:8080", str(self.bundle))])
        self.clock.advance(0)
        self.a.pump()
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in client.received()])
        self.assertFalse(self.own_a.owns(self.bundle))
        self.assertTrue(self.own_a.owns(other_bundle))
        [entry] = self.a.broker.decisions.entries("shed")
        self.assertIn("ThresholdShedder", entry["reason"])

    def test_automatic_split_over_max_topics(self):
        """Two topics of one bundle over loadBalancerNamespaceBundleMaxTopics=1: the owner
        splits it and (loadBalancerAutoUnloadSplitBundlesEnabled) unloads the halves."""
        self.a.config.loadBalancerNamespaceBundleMaxTopics = 1
        names = [f"persistent://public/default/t{i}" for i in range(40)]
        same = [n for n in names
                if self.successResultOf(self.own_a.bundle_of(parse_topic(n))) == self.bundle][:2]
        for i, name in enumerate(same):
            self.assertEqual(produce(self.a.client(), name, producer_id=i + 1).type, T.PRODUCER_SUCCESS)
        self.lm_a.current_report()
        done = self.successResultOf(self.go(self.lm_a.split_hot_bundles()))
        self.assertEqual(len(done), 1)
        self.assertEqual([e["kind"] for e in self.a.broker.decisions.entries()], ["split", "unload", "unload"])
        self.assertEqual(self.own_a.owned, {})
        # Its report is rewritten at once: the leader places the halves without A's old load.
        node = json.loads(self.successResultOf(self.root.get(broker_path("a:8080")))[0])
        self.assertEqual((node["bundles"], node["lastStats"]), ([], {}))


class LeaderRoundTests(LoadManagerBase):

    def test_leader_writes_bundle_data_and_sheds_after_one_interval(self):
        """The leader's round: bundle data under /loadbalance/bundle-data at once; the first
        shedding only one loadBalancerSheddingIntervalMinutes after it started leading."""
        self.successResultOf(self.own_a.check_owned(self.name))
        names = ["persistent://public/default/cool-y", "persistent://public/default/other-x",
                 "persistent://public/default/third-z"]
        other = next(b for b in (self.successResultOf(self.own_a.bundle_of(parse_topic(n))) for n in names)
                     if b != self.bundle)
        self.successResultOf(self.own_a.acquire(other))
        hot = {str(self.bundle): {"msgThroughputIn": 900.0, "msgRateIn": 9.0},
               str(other): {"msgThroughputIn": 100.0}}
        self.write(self.lm_a, cpu={"usage": 90.0, "limit": 100.0}, bundles=list(hot), lastStats=hot,
                   msgThroughputIn=1000.0)
        self.write(self.lm_b, cpu={"usage": 10.0, "limit": 100.0})
        self.successResultOf(self.go(self.lm_a.lead()))
        raw = self.successResultOf(self.root.get(f"/loadbalance/bundle-data/{self.bundle}"))[0]
        self.assertEqual(json.loads(raw)["longTermData"]["msgRateIn"], 9.0)
        self.assertEqual(self.a.broker.decisions.entries("shed"), [])
        self.clock.advance(60)
        self.successResultOf(self.go(self.lm_a.lead()))
        self.a.pump()
        [entry] = self.a.broker.decisions.entries("shed")
        self.assertEqual((entry["bundle"], entry["source"]), (str(self.bundle), "a:8080"))
        self.assertFalse(self.own_a.owns(self.bundle))
        # No report names the bundle any more: its bundle data goes.
        self.write(self.lm_a, bundles=[str(other)], lastStats={str(other): hot[str(other)]})
        self.successResultOf(self.go(self.lm_a.lead()))
        self.assertIsNone(self.successResultOf(self.root.get(f"/loadbalance/bundle-data/{self.bundle}")))

    def test_other_brokers_read_the_leaders_bundle_data(self):
        """B (not the leader) scores with the long-term data the leader wrote."""
        stats = {str(self.bundle): {"msgRateIn": 7.0}}
        self.write(self.lm_a, bundles=list(stats), lastStats=stats)
        self.successResultOf(self.go(self.lm_a.lead()))
        self.successResultOf(self.go(self.lm_b.tick()))
        self.assertEqual(self.lm_b.aggregator.data[str(self.bundle)]["longTermData"]["msgRateIn"], 7.0)

    def test_report_bundles_and_stats_of_loaded_topics(self):
        """The report lists the owned bundles and, per bundle, the topics and producers."""
        self.assertEqual(produce(self.a.client(), TOPIC).type, T.PRODUCER_SUCCESS)
        report = self.lm_a.current_report()
        self.assertEqual(report["bundles"], [str(self.bundle)])
        self.assertEqual((report["numTopics"], report["numProducers"], report["numBundles"]), (1, 1, 1))
        stats = report["lastStats"][str(self.bundle)]
        self.assertEqual((stats["topics"], stats["producerCount"]), (1, 1))


class EvensOutTests(LoadManagerBase):

    def test_shed_bundle_is_placed_on_the_idle_broker(self):
        """The loop of the load manager: A serves two busy bundles, B none; the leader sheds
        one of A's, and the next lookup of its topic (asked of A) places it on B."""
        names = [f"persistent://public/default/even-{i}" for i in range(40)]
        by_bundle = {}
        for name in names:
            by_bundle.setdefault(self.successResultOf(self.own_a.bundle_of(parse_topic(name))), name)
        (first, topic1), (second, topic2) = list(by_bundle.items())[:2]
        for i, topic in enumerate((topic1, topic2)):
            self.assertEqual(produce(self.a.client(), topic, producer_id=i + 1).type, T.PRODUCER_SUCCESS)
        hot = {str(first): {"msgThroughputIn": 600.0, "msgRateIn": 60.0},
               str(second): {"msgThroughputIn": 400.0, "msgRateIn": 40.0}}
        self.write(self.lm_a, cpu={"usage": 90.0, "limit": 100.0}, bundles=list(hot), lastStats=hot,
                   msgThroughputIn=1000.0)
        self.write(self.lm_b, cpu={"usage": 10.0, "limit": 100.0})
        self.lm_a.last_report = None
        reports = self.successResultOf(self.go(self.lm_a.read_reports()))
        picked = self.successResultOf(self.go(self.lm_a.shed(reports, now=0)))
        self.a.pump()
        self.assertEqual([n for _, n, _ in picked], [str(first)])
        self.assertFalse(self.own_a.owns(first))
        # The shed bundle's topic comes back through A: placed on B (A is busy), taken there.
        r = lookup(self.a.client(), topic1, request_id=7)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Redirect, "pulsar://b:6650"))
        r = lookup(self.b.client(), topic1, request_id=8, authoritative=True)
        self.assertEqual(r.response, r.Connect)
        self.assertEqual((self.own_a.owns(second), self.own_b.owns(first)), (True, True))
        kinds = [e["kind"] for e in self.a.broker.decisions.entries()]
        self.assertEqual(kinds, ["shed", "placement"])
