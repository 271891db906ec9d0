"""
/metrics generated in slices (web/metrics.py, web/metrics_text.py): the page equals what the
prometheus_client collector it replaced wrote for the same broker (golden files), no slice walks
more than ``slice_topics`` topics, scrapes arriving during a generation share it, and the page is
streamed in chunks.
"""

import json

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer, task
from twisted.trial import unittest
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.broker.admin import base, broker_stats
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.testing.patching import patch_method
from pulsar_twisted.web.broker_metrics import ScrapeRates
from pulsar_twisted.web.broker_stats import json_chunks
from pulsar_twisted.web.metrics import MetricsPage
from pulsar_twisted.web.metrics_text import FamilySet, escape, fmt, labels
from pulsar_twisted.web.routing import ChunkProducer
from tests.broker.messaging import FeatureCase
from tests.web import metrics_scenario
from tests.web.metrics_scenario import OTHER

GOLDEN = __file__.rsplit("/", 1)[0] + "/data/"


def families_of(text: str) -> dict:
    """``{family: (type, help, sorted samples)}`` of the pulsar_* families of a page."""
    out = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("pulsar_"):
            continue
        assert family.name not in out, f"family {family.name} in two groups"
        out[family.name] = (family.type, family.documentation, sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples))
    return out


class Turns:
    """A fake reactor loop for a Cooperator: ``turn()`` runs what was scheduled before it (a
    ``task.Clock`` would run the calls scheduled during ``advance(0)`` in the same advance)."""

    def __init__(self):
        self.pending = []

    def schedule(self, work):
        self.pending.append(work)

    def turn(self) -> None:
        due, self.pending = self.pending, []
        for work in due:
            work()

    def cooperator(self):
        """One slice per turn."""
        return task.Cooperator(terminationPredicateFactory=lambda: (lambda: True),
                               scheduler=self.schedule)


class PageCase(FeatureCase):
    golden = None
    slice_topics = 1

    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self._page())
        return d

    def _page(self):
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.clock)
        self.turns = Turns()
        self.page = MetricsPage(self.admin, "standalone", slice_topics=self.slice_topics,
                                cooperator=self.turns.cooperator())

    def scrape_sliced(self) -> str:
        d = self.page.render()
        while not d.called:
            self.turns.turn()
        return b"".join(self.successResultOf(d)).decode()

    def check_golden(self):
        text = metrics_scenario.play(self, self.scrape_sliced)
        with open(GOLDEN + self.golden) as f:
            expected = families_of(f.read())
        got = families_of(text)
        for name, family in expected.items():
            self.assertEqual(got.get(name), family, name)
        self.assertEqual(sorted(set(expected) - set(got)), [])


class TopicLevelGoldenTests(PageCase):
    config = {"exposeConsumerLevelMetricsInPrometheus": True}
    golden = "metrics_topic_level.txt"

    def test_same_families_and_samples(self):
        """Topic and consumer level: every family, help, type and sample as before."""
        self.check_golden()


class NamespaceLevelGoldenTests(PageCase):
    config = {"exposeTopicLevelMetricsInPrometheus": False}
    golden = "metrics_namespace_level.txt"

    def test_same_families_and_samples(self):
        """Namespace level: the same sums per namespace, the same families left out."""
        self.check_golden()


class SlicingTests(PageCase):
    slice_topics = 3

    def make_topics(self, n):
        client = self.harness.client()
        for i in range(n):
            self.create_producer(client, producer_id=i + 1, topic=f"persistent://public/default/t{i}")
        self.assertEqual(len(self.harness.broker.topics), n)

    def test_no_slice_over_the_bound(self):
        """10 topics, slices of 3: 4 slices of 3, 3, 3, 1 topics, and every topic on the page."""
        self.make_topics(10)
        seen = []
        walked = self.page._topic
        self.page._topic = lambda topic: (seen.append(topic.name), walked(topic))
        out, sizes = [], []
        for _ in self.page.steps(out):
            sizes.append(len(seen) - sum(sizes))
        self.assertEqual(sizes, [3, 3, 3, 1])
        text = b"".join(out).decode()
        for i in range(10):
            self.assertIn(f'topic="persistent://public/default/t{i}"', text)

    def test_reactor_runs_between_slices(self):
        """A sliced scrape does not finish in one turn: each turn of the clock runs one slice."""
        self.make_topics(7)
        d = self.page.render()
        turns = 0
        while not d.called:
            self.assertLessEqual(turns, 3)
            self.turns.turn()
            turns += 1
        self.assertEqual(turns, 4)   # 3 slices + the final step
        self.assertIn(b"pulsar_broker_topics_count", b"".join(self.successResultOf(d)))
        # The page's chunks went to the answer: the families keep none until the next scrape.
        self.assertEqual([f for f in self.page.storage_families.families if f.chunks], [])

    def test_concurrent_scrapes_share_one_generation(self):
        """Two scrapes while one is generated: one walk, the same page for both."""
        self.make_topics(4)
        calls = []
        steps = self.page.steps
        self.page.steps = lambda out: (calls.append(1), steps(out))[1]
        first = self.page.render()
        self.turns.turn()
        second = self.page.render()
        self.assertNoResult(first)
        while not (first.called and second.called):
            self.turns.turn()
        self.assertEqual(len(calls), 1)
        first, second = self.successResultOf(first), self.successResultOf(second)
        self.assertEqual(first, second)
        self.assertIsNot(first, second)   # each answer drops its own list's chunks as it writes
        self.page.render()
        self.assertEqual(len(calls), 2)   # a scrape after it makes a new page

    def test_valid_exposition(self):
        """The sliced page parses, with each family in one group and the topic label set."""
        self.make_topics(5)
        got = families_of(self.scrape_sliced())
        self.assertEqual(len([s for s in got["pulsar_rate_in"][2]]), 5)


class TextTests(unittest.TestCase):
    def test_values_as_prometheus_client(self):
        """Values are written as prometheus_client's floatToGoString writes them."""
        from prometheus_client.utils import floatToGoString
        for value in (0, 1, -3, 999_999, 1_000_000, 12_345_678, 0.5, 1e-9, 2.5e10, float("inf"),
                      float("nan"), True):
            self.assertEqual(fmt(value), floatToGoString(value), value)

    def test_label_values_escaped(self):
        """Backslash, quote and newline in a label value are escaped; labels sorted."""
        self.assertEqual(escape('a"b\\c\nd'), 'a\\"b\\\\c\\nd')
        self.assertEqual(labels(topic="t", cluster="c"), 'cluster="c",topic="t"')
        families = FamilySet()
        family = families.family("x", "help")
        family.add(labels(topic='q"uote'), "", 1)
        text = b"".join(families.chunks()).decode()
        parsed = list(text_string_to_metric_families(text))
        self.assertEqual(parsed[0].samples[0].labels, {"topic": 'q"uote'})


class ChunkProducerTests(unittest.TestCase):
    def test_written_in_budgets_then_finished(self):
        """Chunks are written about ``budget`` bytes per call, all of them, then finished."""
        request = DummyRequest([b""])
        chunks = [b"a" * 10] * 7
        calls = []
        producer = ChunkProducer(request, chunks, budget=25)
        resume = producer.resumeProducing
        producer.resumeProducing = lambda: (calls.append(len(request.written)), resume())
        producer.start()
        self.assertEqual(b"".join(request.written), b"a" * 70)
        self.assertEqual(calls, [0, 3, 6])
        self.assertEqual(chunks, [None] * 7)   # dropped as written
        self.assertEqual(request.finished, 1)


class BrokerStatsSlicingTests(PageCase):
    def setUp(self):
        d = super().setUp()
        self.patch(base, "SLICE_TOPICS", 2)
        return d

    def stats_admin(self, n):
        client = self.harness.client()
        for i in range(n):
            self.create_producer(client, producer_id=i + 1, topic=f"persistent://public/default/t{i}")
        return broker_stats.BrokerStatsAdmin(self.admin.context, self.admin.stats, self.admin.brokers)

    def test_topics_walked_in_slices(self):
        """/broker-stats/topics over 5 topics, 2 per turn: it waits for the reactor, then all 5."""
        stats = self.stats_admin(5)
        d = defer.ensureDeferred(stats.topics())
        self.assertNoResult(d)
        while not d.called:
            self.clock.advance(0)
        bundles = self.successResultOf(d)["public/default"]
        names = [t for bundle in bundles.values() for t in bundle["persistent"]]
        self.assertEqual(len(names), 5)

    def test_metrics_and_load_report_sliced(self):
        """/broker-stats/metrics and load-report wait between slices and count every topic."""
        stats = self.stats_admin(5)
        d = defer.ensureDeferred(stats.metrics())
        self.assertNoResult(d)
        while not d.called:
            self.clock.advance(0)
        [row] = self.successResultOf(d)
        self.assertEqual(row["metrics"]["brk_no_of_producers"], 5)
        d = defer.ensureDeferred(stats.load_report())
        self.assertNoResult(d)
        while not d.called:
            self.clock.advance(0)
        self.assertEqual(self.successResultOf(d)["numTopics"], 5)

    def test_rates_sampled_in_slices(self):
        """The stats sampler takes 2 topics, then waits for the reactor; every topic gets the
        same period (the test clock runs every due turn in one advance)."""
        stats = self.stats_admin(5)
        taken = []
        for topic in self.harness.broker.topics.values():
            patch_method(self, topic.counters, "sample",
                         lambda now, name=topic.name: taken.append((name, now)))
        first = self.admin.stats.sample_rates()
        self.clock.advance(0)
        self.successResultOf(first)
        taken.clear()
        self.clock.advance(10)
        d = self.admin.stats.sample_rates()
        self.assertEqual(len(taken), 2)
        self.assertNoResult(d)
        self.clock.advance(1)
        self.successResultOf(d)
        self.assertEqual([period for _, period in taken], [10] * 5)
        del stats

    def test_json_chunks(self):
        """Encoded in chunks of 2 leaves with turns between them; parses as json.dumps does."""
        value = {"a": {"b": {"x": [1, {"y": 2}], "z": None}, "c": {}}, 'q"': {"k": {"t": 1.5}}}
        d = defer.ensureDeferred(json_chunks(json.loads(json.dumps(value)), self.clock, levels=2))
        self.assertNoResult(d)
        self.clock.advance(0)
        chunks = self.successResultOf(d)
        self.assertGreater(len(chunks), 1)
        self.assertEqual(json.loads(b"".join(chunks)), value)


class ScrapeRatesTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.rates = ScrapeRates(self.clock)

    def scrape(self, values: dict) -> dict:
        self.rates.begin()
        got = {k: self.rates.rate(k, v) for k, v in values.items()}
        again = {k: self.rates.rate(k, v) for k, v in values.items()}
        self.assertEqual(got, again)   # asked twice in one scrape: the same answer
        self.rates.end()
        return got

    def test_rates_between_scrapes(self):
        """0 at the first scrape; growth / elapsed later; a new key counts from 0; repeated at
        the same instant."""
        self.assertEqual(self.scrape({"a": 5}), {"a": 0.0})
        self.clock.advance(10)
        self.assertEqual(self.scrape({"a": 25, "b": 4}), {"a": 2.0, "b": 0.4})
        self.assertEqual(self.scrape({"a": 99, "b": 4}), {"a": 2.0, "b": 0.4})
        self.clock.advance(2)
        self.assertEqual(self.scrape({"a": 29, "b": 4}), {"a": 2.0, "b": 0.0})

    def test_entries_kept_in_place_and_gone_keys_dropped(self):
        """A repeat scrape reuses each counter's entry; keys gone for good are dropped."""
        keys = [("c", i) for i in range(1500)]
        self.scrape({k: 1 for k in keys})
        entries = dict(self.rates._entries)
        self.clock.advance(1)
        self.scrape({k: 2 for k in keys})
        self.assertTrue(all(self.rates._entries[k] is entries[k] for k in keys))
        self.clock.advance(1)
        self.scrape({"x": 1})
        self.assertEqual(list(self.rates._entries), ["x"])
