"""
The load manager's arithmetic (``pulsar_twisted.broker.loadbalance``): split points and boundaries,
report updates on Pulsar's thresholds, LeastLongTermMessageRate scoring, the ThresholdShedder, the
bundle data averages, the decisions log, and the leader's placement (an in-memory store).
task.Clock only.
"""

import json
import math
import random

from twisted.internet import defer, task
from twisted.trial.unittest import TestCase

from pulsar_twisted.broker.loadbalance import bundle_data, placement, reports, shedding, split
from pulsar_twisted.broker.loadbalance.decisions import DecisionLog
from pulsar_twisted.broker.loadbalance.manager import LoadManager
from pulsar_twisted.broker.ownership import NamespaceBundle
from pulsar_twisted.config import BrokerConfig
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import LEADER_PATH, broker_path
from pulsar_twisted.resources.policies import DEFAULT_NUM_BUNDLES, boundaries_of_policies, even_boundaries

NS = "public/default"


def report(cpu=0.0, bundles=(), stats=None, tput=0.0, bw_in=0.0):
    """A LocalBrokerData with CPU at ``cpu`` percent (limit 100) and the given bundles."""
    return {"cpu": {"usage": cpu, "limit": 100.0}, "memory": {"usage": 0, "limit": 100.0},
            "bandwidthIn": {"usage": bw_in, "limit": 100.0}, "bandwidthOut": {"usage": 0, "limit": 100.0},
            "directMemory": {"usage": 0, "limit": 100.0}, "bundles": list(bundles),
            "lastStats": stats or {}, "msgThroughputIn": tput, "msgThroughputOut": 0.0}


class SplitTests(TestCase):

    def test_namespaces_start_with_four_bundles(self):
        """defaultNumberOfNamespaceBundles is 4, the policies' default too."""
        self.assertEqual(BrokerConfig().defaultNumberOfNamespaceBundles, 4)
        self.assertEqual(DEFAULT_NUM_BUNDLES, 4)
        self.assertEqual(len(boundaries_of_policies({})) - 1, 4)

    def test_range_equally_divide_halves_the_range(self):
        bundle = NamespaceBundle(NS, 0x40000000, 0x80000000)
        self.assertEqual(split.split_point(bundle, split.RANGE_EQUALLY_DIVIDE), 0x60000000)

    def test_topic_count_equally_divide_puts_half_the_topics_in_each_half(self):
        """The cut falls between the two middle hashes: each half gets half of the topics."""
        bundle = NamespaceBundle(NS, 0, 0x100)
        hashes = [0x10, 0x20, 0x30, 0xA0, 0x500]        # 0x500 outside the bundle
        point = split.split_point(bundle, split.TOPIC_COUNT_EQUALLY_DIVIDE, hashes)
        inside = [h for h in hashes if bundle.includes(h)]
        self.assertEqual(sum(h < point for h in inside), 2)
        self.assertEqual(sum(h >= point for h in inside), 2)

    def test_refusals(self):
        """One topic cannot be divided, a one-hash range cannot be cut, names are checked."""
        bundle = NamespaceBundle(NS, 0, 0x100)
        self.assertRaises(split.SplitRefused, split.split_point, bundle, split.TOPIC_COUNT_EQUALLY_DIVIDE, [5])
        self.assertRaises(split.SplitRefused, split.split_point, NamespaceBundle(NS, 7, 8),
                          split.RANGE_EQUALLY_DIVIDE)
        self.assertRaises(ValueError, split.split_point, bundle, "flow_or_qps_equally_divide")

    def test_split_bounds_and_policies(self):
        """The point goes between the bundle's bounds; the policies get Pulsar's hex strings."""
        bounds = even_boundaries(4)
        bundle = NamespaceBundle(NS, bounds[1], bounds[2])
        new = split.split_bounds(bounds, bundle, 0x60000000)
        self.assertEqual(new, [0, 0x40000000, 0x60000000, 0x80000000, 0xC0000000, 0xFFFFFFFF])
        policies = split.policies_with_bounds({"bundles": {"numBundles": 4}, "x": 1}, new)
        self.assertEqual(policies["bundles"]["numBundles"], 5)
        self.assertEqual(policies["bundles"]["boundaries"][2], "0x60000000")
        self.assertEqual(policies["x"], 1)
        self.assertEqual(boundaries_of_policies(policies), new)
        stale = NamespaceBundle(NS, 0x40000000, 0x60000000)
        self.assertRaises(Exception, split.split_bounds, bounds, stale, 0x50000000)

    def test_parse_range(self):
        self.assertEqual(split.parse_range(NS, "0x40000000_0x80000000"),
                         NamespaceBundle(NS, 0x40000000, 0x80000000))
        for bad in ("0x4", "zz_0x1", "0x80000000_0x40000000"):
            self.assertRaises(ValueError, split.parse_range, NS, bad)


class ReportTests(TestCase):

    def test_needs_update_thresholds(self):
        """Rewritten when never written, past the max interval, or when a figure moved > 10%."""
        last = {"msgRateIn": 100.0, "cpu": {"usage": 20, "limit": 100}}
        same = dict(last)
        self.assertTrue(reports.needs_update(None, same, 0, 10, 900))
        self.assertFalse(reports.needs_update(last, same, 60, 10, 900))
        self.assertTrue(reports.needs_update(last, same, 900, 10, 900))
        self.assertFalse(reports.needs_update(last, dict(last, msgRateIn=109.0), 60, 10, 900))
        self.assertTrue(reports.needs_update(last, dict(last, msgRateIn=111.0), 60, 10, 900))
        self.assertTrue(reports.needs_update(last, dict(last, cpu={"usage": 31, "limit": 100}), 60, 10, 900))
        self.assertFalse(reports.needs_update(last, dict(last, msgRateIn=500.0), 1, 10, 900, 5))

    def test_host_usage_cpu_is_the_rate_between_samples(self):
        clock = task.Clock()
        cpu = [10.0]
        host = reports.HostUsage(clock, cpu_seconds=lambda: cpu[0], resident_mb=lambda: 512.0,
                                 machine_mb=lambda: 2048.0, cores=2)
        self.assertEqual(host.sample()["cpu"], {"usage": 0.0, "limit": 200.0})
        clock.advance(10)
        cpu[0] = 15.0
        sample = host.sample()
        self.assertEqual(sample["cpu"], {"usage": 50.0, "limit": 200.0})
        self.assertEqual(reports.usage_percent(sample["memory"]), 25.0)

    def test_max_resource_usage_with_weights(self):
        data = report(cpu=50, bw_in=80)
        self.assertAlmostEqual(reports.max_resource_usage(data), 0.8)
        self.assertAlmostEqual(reports.max_resource_usage(data, {"bandwidthIn": 0.5}), 0.5)


class PlacementTests(TestCase):

    def test_least_long_term_message_rate_wins(self):
        """The broker whose bundles carry the least long-term msg rate gets the bundle."""
        data = {"ns/a": {"longTermData": {"msgRateIn": 500, "msgRateOut": 500}},
                "ns/b": {"longTermData": {"msgRateIn": 10, "msgRateOut": 20}}}
        reps = {"a:8080": report(bundles=["ns/a"]), "b:8080": report(bundles=["ns/b"])}
        chosen, scores = placement.choose_broker(reps, data)
        self.assertEqual(chosen, "b:8080")
        self.assertEqual(scores, {"a:8080": 1000.0, "b:8080": 30.0})

    def test_overloaded_brokers_are_excluded(self):
        """Above loadBalancerBrokerOverloadedThresholdPercentage a broker scores infinity."""
        reps = {"a:8080": report(cpu=90), "b:8080": report(cpu=10, bundles=["ns/b"])}
        data = {"ns/b": {"longTermData": {"msgRateIn": 1e6}}}
        chosen, scores = placement.choose_broker(reps, data, overload_threshold=0.85)
        self.assertEqual((chosen, scores["a:8080"]), ("b:8080", math.inf))

    def test_preallocated_bundles_count(self):
        """Bundles just placed on a broker (not yet in its report) count against it."""
        data = {"ns/x": {"longTermData": {"msgRateIn": 100}}}
        reps = {"a:8080": report(), "b:8080": report()}
        chosen, _ = placement.choose_broker(reps, data, {"a:8080": {"ns/x"}})
        self.assertEqual(chosen, "b:8080")
        # Never seen (a split's half): Pulsar's default 50 msg/s in and 50 out.
        _, scores = placement.choose_broker(reps, {}, {"a:8080": {"ns/new"}})
        self.assertEqual(scores, {"a:8080": placement.DEFAULT_BUNDLE_RATE, "b:8080": 0.0})

    def test_ties_are_random_among_the_best(self):
        reps = {"a:8080": report(), "b:8080": report(), "c:8080": report(cpu=99)}
        seen = {placement.choose_broker(reps, {}, rng=random.Random(i))[0] for i in range(20)}
        self.assertEqual(seen, {"a:8080", "b:8080"})

    def test_short_term_stats_stand_in_for_unknown_bundles(self):
        reps = {"a:8080": report(bundles=["ns/a"], stats={"ns/a": {"msgRateIn": 7.0, "msgRateOut": 3.0}})}
        self.assertEqual(placement.broker_score(reps["a:8080"], {}), 10.0)


class ShedderTests(TestCase):

    def settings(self, **kw):
        return shedding.ShedderSettings(**dict({"history_fraction": 0.0}, **kw))

    def hot_and_cold(self, hot_cpu=90):
        stats = {"ns/0x0_0x1": {"msgThroughputIn": 600.0}, "ns/0x1_0x2": {"msgThroughputIn": 300.0},
                 "ns/0x2_0x3": {"msgThroughputIn": 100.0}}
        return {"hot:8080": report(cpu=hot_cpu, bundles=list(stats), stats=stats, tput=1000.0),
                "cold:8080": report(cpu=10, bundles=["ns/0x3_0x4"], tput=10.0)}

    def test_sheds_from_the_broker_above_average_plus_threshold(self):
        """usage 90%, average 50%, threshold 10%: offload 90-50-10+5 = 35% of 1000 B/s, biggest
        bundle first until that much is marked."""
        shedder = shedding.ThresholdShedder(self.settings())
        picked = shedder.find(self.hot_and_cold(), now=0)
        self.assertEqual([(b, n) for b, n, _ in picked], [("hot:8080", "ns/0x0_0x1")])
        self.assertIn("above the average", picked[0][2])

    def test_more_bundles_when_one_is_not_enough(self):
        """usage 100%, average 55%, threshold -20%: 100-55+20+5 = 70% of 1000 B/s: the 600 B/s
        bundle is not enough, the 300 B/s one is added."""
        shedder = shedding.ThresholdShedder(self.settings(threshold_percent=-20))
        picked = shedder.find(self.hot_and_cold(hot_cpu=100), now=0)
        self.assertEqual([n for _, n, _ in picked], ["ns/0x0_0x1", "ns/0x1_0x2"])

    def test_nothing_below_the_threshold_or_with_one_bundle(self):
        shedder = shedding.ThresholdShedder(self.settings())
        self.assertEqual(shedder.find(self.hot_and_cold(hot_cpu=25), now=0), [])
        single = {"a:8080": report(cpu=95, bundles=["ns/x"], tput=100.0), "b:8080": report(cpu=5)}
        self.assertEqual(shedding.ThresholdShedder(self.settings()).find(single, now=0), [])
        idle = {"a:8080": report(), "b:8080": report()}
        self.assertEqual(shedding.ThresholdShedder(self.settings()).find(idle, now=0), [])

    def test_minimum_throughput_to_offload(self):
        shedder = shedding.ThresholdShedder(self.settings(minimum_throughput=1e6))
        self.assertEqual(shedder.find(self.hot_and_cold(), now=0), [])

    def test_grace_period_per_bundle(self):
        """A bundle shed recently is skipped until loadBalancerSheddingGracePeriodMinutes passed."""
        shedder = shedding.ThresholdShedder(self.settings(grace_seconds=1800))
        shedder.unloaded("ns/0x0_0x1", now=0)
        picked = shedder.find(self.hot_and_cold(), now=60)
        # 350 B/s to move without the 600 B/s bundle: 300 + 100.
        self.assertEqual([n for _, n, _ in picked], ["ns/0x1_0x2", "ns/0x2_0x3"])
        picked = shedder.find(self.hot_and_cold(), now=1801)
        self.assertEqual([n for _, n, _ in picked], ["ns/0x0_0x1"])

    def test_history_smooths_usage(self):
        """usage = history * 0.9 + current * 0.1: one hot sample after cool ones sheds nothing."""
        shedder = shedding.ThresholdShedder(self.settings(history_fraction=0.9))
        cool = self.hot_and_cold(hot_cpu=10)
        shedder.find(cool, now=0)
        self.assertEqual(shedder.find(self.hot_and_cold(hot_cpu=90), now=60), [])
        self.assertAlmostEqual(shedder.usage["hot:8080"], 0.18)

    def test_settings_from_config(self):
        s = shedding.ShedderSettings.from_config(BrokerConfig())
        self.assertEqual((s.threshold_percent, s.history_fraction, s.grace_seconds), (10.0, 0.9, 1800.0))


class BundleDataTests(TestCase):

    def test_running_means_and_dropping(self):
        agg = bundle_data.BundleDataAggregator()
        for rate in (10.0, 20.0, 30.0):
            agg.update({"a": {"lastStats": {"ns/b": {"msgRateIn": rate, "topics": 3}}}})
        entry = agg.data["ns/b"]
        self.assertEqual(entry["longTermData"]["msgRateIn"], 20.0)
        self.assertEqual((entry["longTermData"]["numSamples"], entry["topics"]), (3, 3))
        self.assertEqual(bundle_data.bundle_data_path("ns/b"), "/loadbalance/bundle-data/ns/b")
        agg.update({"a": {"lastStats": {}}})
        self.assertEqual(agg.data, {})

    def test_samples_stop_at_the_maximum(self):
        avg = bundle_data.time_average(2)
        for rate in (0.0, 0.0, 10.0):
            bundle_data.update_average(avg, {"msgRateIn": rate})
        self.assertEqual((avg["numSamples"], avg["msgRateIn"]), (2, 5.0))


class DecisionLogTests(TestCase):

    def test_bounded_ring_with_reasons(self):
        clock = task.Clock()
        log = DecisionLog(clock, max_entries=2)
        log.record("placement", "ns/0x0_0x1", "least loaded", broker="a", target="b")
        clock.advance(2)
        log.record("split", "ns/0x0_0x1", "too many topics", broker="a")
        log.record("shed", "ns/0x1_0x2", "hot", broker="a")
        entries = log.entries()
        self.assertEqual([e["kind"] for e in entries], ["split", "shed"])
        self.assertEqual((entries[0]["timestamp"], entries[0]["reason"]), (2000, "too many topics"))
        self.assertEqual([e["bundle"] for e in log.entries("shed")], ["ns/0x1_0x2"])


def urls(broker_id):
    host = broker_id.split(":")[0]
    return {"pulsarServiceUrl": f"pulsar://{host}:6650", "webServiceUrl": f"http://{host}:8080",
            "pulsarServiceUrlTls": "", "webServiceUrlTls": ""}


class FakeLeader:
    """LeaderElection's ``is_leader`` only (the node, when any, is written by the test)."""

    def __init__(self, is_leader=False):
        self.is_leader = is_leader


class LeaderPlacementTests(TestCase):
    """``LoadManager.place`` as Pulsar's NamespaceService.searchForCandidateBroker: non-leaders
    forward to the leader, the leader chooses and preallocates, no leader means a local choice.
    Over an in-memory store holding the brokers' reports and the leader node."""

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.bundle = NamespaceBundle(NS, 0, 0x40000000)

    def put(self, path, value):
        self.successResultOf(defer.ensureDeferred(self.store.put(path, json.dumps(value).encode())))

    def reports(self, **loads):
        """Registered brokers ``name=(cpu, bundles, stats)`` under /loadbalance/brokers."""
        for name, (cpu, bundles, stats) in loads.items():
            self.put(broker_path(f"{name}:8080"), dict(report(cpu=cpu, bundles=bundles, stats=stats),
                                                       **urls(f"{name}:8080")))

    def manager(self, broker_id, is_leader, seed=1):
        return LoadManager(None, None, self.store, self.clock, BrokerConfig(), broker_id,
                           urls(broker_id), leader=FakeLeader(is_leader),
                           decisions=DecisionLog(self.clock), interval=0, rng=random.Random(seed))

    def place(self, manager, bundle=None):
        return self.successResultOf(manager.place(bundle or self.bundle))

    def busy_a(self):
        stats = {"ns/hot": {"msgRateIn": 900.0}}
        self.reports(a=(10, ["ns/hot"], stats), b=(10, [], {}), c=(10, ["ns/warm"], {"ns/warm": {"msgRateIn": 5.0}}))

    def test_non_leader_redirects_to_the_leader(self):
        """A non-leader forwards a free bundle's lookup to the leader, not authoritative (the
        leader places it), and decides nothing itself."""
        self.busy_a()
        self.put(LEADER_PATH, {"brokerId": "c:8080", "serviceUrl": "http://c:8080"})
        a = self.manager("a:8080", is_leader=False)
        answer = self.place(a)
        self.assertEqual((answer["nativeUrl"], answer["httpUrl"], answer["authoritative"]),
                         ("pulsar://c:6650", "http://c:8080", False))
        self.assertEqual(a.decisions.entries(), [])
        self.assertEqual(a.preallocated, {})

    def test_leader_preallocates_and_answers_the_chosen_broker(self):
        """The leader picks the least loaded broker (b), answers it authoritatively, logs the
        placement and keeps answering b for that bundle until b reports owning it; the next
        bundle counts b's preallocation."""
        self.busy_a()
        self.put(LEADER_PATH, {"brokerId": "c:8080", "serviceUrl": "http://c:8080"})
        c = self.manager("c:8080", is_leader=True)
        answer = self.place(c)
        self.assertEqual((answer["nativeUrl"], answer["authoritative"]), ("pulsar://b:6650", True))
        [entry] = c.decisions.entries("placement")
        self.assertEqual((entry["target"], entry["broker"], entry["bundle"]), ("b:8080", "c:8080", str(self.bundle)))
        self.assertEqual(entry["scores"], {"a:8080": 900.0, "b:8080": 0.0, "c:8080": 5.0})
        self.assertEqual(c.preallocated, {str(self.bundle): ("b:8080", 0)})
        # Asked again before b took it (the client on its way, or another client): b again.
        self.assertEqual(self.place(c)["nativeUrl"], "pulsar://b:6650")
        self.assertEqual(len(c.decisions.entries("placement")), 1)
        # With its bundle data, the preallocation weighs on b: the next bundle goes to c.
        c.aggregator.data = {str(self.bundle): {"longTermData": {"msgRateIn": 50.0}}}
        other = NamespaceBundle(NS, 0x40000000, 0x80000000)
        self.assertIsNone(self.place(c, other))      # c itself: taken on the leader
        self.assertEqual(c.decisions.entries("placement")[-1]["target"], "c:8080")
        # b's report lists the bundle: the preallocation is done with.
        self.reports(b=(10, [str(self.bundle)], {}))
        self.place(c, NamespaceBundle(NS, 0x80000000, 0xC0000000))
        self.assertNotIn(str(self.bundle), c.preallocated)

    def test_a_taken_preallocation_does_not_bind_the_next_placement(self):
        """b took the bundle (its ownership node appeared), then it was unloaded before b's report
        listed it: the next lookup is placed anew (not sent back to b by the old answer), and
        the bundle still weighs on b meanwhile."""
        self.busy_a()
        c = self.manager("c:8080", is_leader=True)
        c.aggregator.data = {str(self.bundle): {"longTermData": {"msgRateIn": 50.0}}}
        self.assertEqual(self.place(c)["nativeUrl"], "pulsar://b:6650")
        self.put(self.bundle.path, {"nativeUrl": "pulsar://b:6650"})
        self.successResultOf(defer.ensureDeferred(self.store.delete(self.bundle.path)))
        self.assertIsNone(self.place(c))        # c (5 msg/s) now beats b (50, the bundle itself)
        self.assertEqual([e["target"] for e in c.decisions.entries("placement")], ["b:8080", "c:8080"])

    def test_preallocation_to_a_broker_gone_or_stale_is_dropped(self):
        self.busy_a()
        c = self.manager("c:8080", is_leader=True)
        self.assertEqual(self.place(c)["nativeUrl"], "pulsar://b:6650")
        self.successResultOf(defer.ensureDeferred(self.store.delete(broker_path("b:8080"))))
        # b left (died, or its session ended): the bundle is placed again, on c now.
        self.assertIsNone(self.place(c))
        self.assertEqual(c.preallocated[str(self.bundle)][0], "c:8080")
        self.clock.advance(c.preallocation_seconds + 1)
        c._prune_preallocations({"c:8080": {"bundles": []}}, self.clock.seconds())
        self.assertEqual(c.preallocated, {})

    def test_no_leader_places_locally(self):
        """No leader node (between two elections), or one naming a broker no longer registered:
        the broker asked places the bundle itself, says so in the decisions log and a warning,
        and answers authoritatively (the chosen broker must not forward it again)."""
        self.busy_a()
        a = self.manager("a:8080", is_leader=False)
        answer = self.place(a)
        self.assertEqual((answer["nativeUrl"], answer["authoritative"]), ("pulsar://b:6650", True))
        [entry] = a.decisions.entries("placement")
        self.assertIn("no leader broker is elected", entry["reason"])
        self.put(LEADER_PATH, {"brokerId": "gone:8080", "serviceUrl": "http://gone:8080"})
        answer = self.place(a, NamespaceBundle(NS, 0x40000000, 0x80000000))
        self.assertTrue(answer["authoritative"])
        self.assertIn("gone:8080 is not registered", a.decisions.entries("placement")[-1]["reason"])

    def test_a_broker_named_by_the_leader_node_acts_as_leader(self):
        """Its election flag not yet up (the node is its own): it places, no redirect to itself."""
        self.busy_a()
        self.put(LEADER_PATH, {"brokerId": "b:8080", "serviceUrl": "http://b:8080"})
        b = self.manager("b:8080", is_leader=False)
        self.assertIsNone(self.place(b))
        self.assertEqual(b.decisions.entries("placement")[0]["target"], "b:8080")
        self.assertNotIn("leader", b.decisions.entries("placement")[0]["reason"])

    def test_all_overloaded_draws_among_all(self):
        """A tiny NIC makes every broker overloaded: the bundle is drawn among all of them."""
        self.reports(a=(99, [], {}), b=(99, [], {}), c=(99, [], {}))
        targets = set()
        for seed in range(12):
            m = self.manager("c:8080", is_leader=True, seed=seed)
            answer = self.place(m)
            targets.add(answer["nativeUrl"] if answer else "pulsar://c:6650")
            self.assertIn("every broker is overloaded", m.decisions.entries()[0]["reason"])
        self.assertEqual(len(targets), 3)


class RoundFailureTests(TestCase):
    """A round that cannot reach the metadata store (a lost ZooKeeper connection) is a warning; any
    other failure is logged with its traceback. The loop goes on either way."""

    def failing_round(self, error):
        clock = task.Clock()
        manager = LoadManager(None, None, EmbeddedMetadataStore(None, clock), clock, BrokerConfig(),
                              "a:8080", urls("a:8080"), leader=FakeLeader(False),
                              decisions=DecisionLog(clock), interval=0)

        async def write_report():
            raise error
        manager.write_report = write_report
        self.successResultOf(manager.tick())

    def test_metadata_unavailable_is_a_warning(self):
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
        self.failing_round(MetadataUnavailableError("zookeeper: ConnectionLoss"))
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_other_errors_keep_their_traceback(self):
        self.failing_round(ValueError("a bug"))
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
