"""
Taking a dead broker's bundle as soon as its node vanishes (issue 14, item 5): a broker that sent
clients to the old owner takes the bundle and loads those clients' topics before they come back.
Two sessions of one embedded store stand for two brokers' ZooKeeper sessions.
"""

from twisted.internet import defer, task
from twisted.trial.unittest import TestCase

from pulsar_twisted.broker.ownership import BundleOwnership, load_topics
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.testing.broker import BrokerHarness

A = {"nativeUrl": "pulsar://a:6650", "httpUrl": "http://a:8080"}
B = {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}
TOPIC = "persistent://public/default/owned"


class TakeOverTests(TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.root = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.root.start())
        self.session_a = self.root.new_session()
        self.session_b = self.root.new_session()
        self.taken = []
        self.a = BundleOwnership(self.session_a, self.clock, A, check_interval=0)
        self.b = BundleOwnership(self.session_b, self.clock, B, check_interval=0,
                                 on_bundle_taken=lambda bundle, topics: self.taken.append(
                                     (bundle, topics)))
        self.topic = parse_topic(TOPIC)

    def test_redirecting_broker_takes_the_bundle_when_the_owner_dies(self):
        """B redirected a lookup to A; A's session ends; B owns the bundle at once and is handed
        the topic to load, before any client asks again."""
        self.successResultOf(self.a.lookup(self.topic))
        self.assertTrue(self.successResultOf(self.b.lookup(self.topic)).redirect)
        bundle = self.successResultOf(self.b.bundle_of(self.topic))
        self.successResultOf(self.session_a.close())
        self.assertTrue(self.b.owns(bundle))
        self.assertEqual(self.taken, [(bundle, [TOPIC])])
        self.assertFalse(self.successResultOf(self.b.lookup(self.topic)).redirect)

    def test_bundles_nobody_asked_for_stay_free(self):
        """Without a redirected lookup, the bundle waits for its next lookup as before."""
        self.successResultOf(self.a.lookup(self.topic))
        bundle = self.successResultOf(self.a.bundle_of(self.topic))
        self.successResultOf(self.session_a.close())
        self.assertFalse(self.b.owns(bundle))
        self.assertIsNone(self.successResultOf(self.root.get(bundle.path)))
        self.assertEqual(self.taken, [])

    def test_placement_naming_another_broker_wins(self):
        """With a load manager, the bundle is only taken when its placement names this broker."""
        self.b.placement = lambda bundle: defer.succeed(
            {"nativeUrl": "pulsar://c:6650", "nativeUrlTls": "", "httpUrl": "http://c:8080",
             "httpUrlTls": ""})
        self.successResultOf(self.a.lookup(self.topic))
        self.assertTrue(self.successResultOf(self.b.lookup(self.topic)).redirect)
        bundle = self.successResultOf(self.b.bundle_of(self.topic))
        self.successResultOf(self.session_a.close())
        self.assertFalse(self.b.owns(bundle))
        self.assertEqual(self.taken, [])

    def test_old_redirects_are_forgotten(self):
        """Topics redirected longer ago than wanted_seconds are not loaded, nor taken for."""
        self.successResultOf(self.a.lookup(self.topic))
        self.successResultOf(self.b.lookup(self.topic))
        self.clock.advance(self.b.wanted_seconds + 1)
        bundle = self.successResultOf(self.b.bundle_of(self.topic))
        self.successResultOf(self.session_a.close())
        self.assertFalse(self.b.owns(bundle))
        self.assertEqual(self.taken, [])

    def test_another_taker_wins_and_is_redirected_to(self):
        """When a third broker took the bundle first, B finds that owner and takes nothing."""
        self.successResultOf(self.a.lookup(self.topic))
        self.successResultOf(self.b.lookup(self.topic))
        bundle = self.successResultOf(self.b.bundle_of(self.topic))
        session_c = self.root.new_session()
        # C's node appears in the same change as A's goes (as if C had been faster).
        self.b.acquire_original = self.b.acquire

        async def raced(b):
            self.successResultOf(session_c.put(b.path, b'{"nativeUrl": "pulsar://c:6650"}',
                                               expected_version=-1, ephemeral=True))
            return await self.b.acquire_original(b)
        self.b.acquire = raced
        self.successResultOf(self.session_a.close())
        self.assertFalse(self.b.owns(bundle))
        self.assertEqual(self.taken, [])


class HeldLookupTests(TestCase):
    """Lookups of a bundle whose owner refuses connections wait for the bundle to be free."""

    def setUp(self):
        self.clock = task.Clock()
        self.root = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.root.start())
        self.session_a = self.root.new_session()
        self.alive = True
        self.a = BundleOwnership(self.session_a, self.clock, A, check_interval=0)
        self.b = BundleOwnership(self.root.new_session(), self.clock, B, check_interval=0,
                                 owner_alive=lambda owner: defer.succeed(self.alive),
                                 hold_seconds=10)
        self.topic = parse_topic(TOPIC)
        self.successResultOf(self.a.lookup(self.topic))

    def test_live_owner_is_redirected_to_at_once(self):
        self.assertTrue(self.successResultOf(self.b.lookup(self.topic)).redirect)

    def test_live_owner_is_probed_once_a_second(self):
        """Redirected lookups within alive_seconds share one probe of the owner."""
        probes = []
        self.b.owner_alive = lambda owner: (probes.append(owner["nativeUrl"]), defer.succeed(True))[1]
        for _ in range(3):
            self.assertTrue(self.successResultOf(self.b.lookup(self.topic)).redirect)
        self.clock.advance(self.b.alive_seconds)
        self.successResultOf(self.b.lookup(self.topic))
        self.assertEqual(probes, ["pulsar://a:6650"] * 2)

    def test_dead_owner_lookup_answers_once_the_bundle_is_free(self):
        """The answer comes when the owner's session ends: connect here, not to the dead owner."""
        self.alive = False
        d = self.b.lookup(self.topic)
        self.assertNoResult(d)
        self.clock.advance(5)
        self.successResultOf(self.session_a.close())
        result = self.successResultOf(d)
        self.assertFalse(result.redirect)
        self.assertEqual(result[0], "pulsar://b:6650")

    def test_hold_ends_with_the_usual_redirect(self):
        """An owner whose node stays past hold_seconds: redirected to as before."""
        self.alive = False
        d = self.b.lookup(self.topic)
        self.clock.advance(10)
        self.assertTrue(self.successResultOf(d).redirect)
        self.assertEqual(self.b._deletion_waiters, {})


class LoadTopicsTests(TestCase):
    def test_loads_existing_persistent_topics_only(self):
        """load_topics opens existing persistent topics; missing or non-persistent ones are skipped."""
        harness = BrokerHarness()
        self.successResultOf(harness.start())
        broker = harness.broker
        self.successResultOf(broker.get_topic("persistent://public/default/there"))
        self.successResultOf(broker.unload_topic("persistent://public/default/there"))
        load_topics(broker, None, ["persistent://public/default/there",
                                   "persistent://public/default/gone",
                                   "non-persistent://public/default/np"])
        self.assertEqual(sorted(broker.topics), ["persistent://public/default/there"])
