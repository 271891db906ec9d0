"""
The admin/lookup answers of a cluster broker, in memory (two brokers = two sessions of one embedded
store): HTTP lookup answers the bundle owner's URLs, /brokers/{cluster} lists every registered
broker, /brokers/leaderBroker the elected leader (``broker/leader.py``).
"""

import json

from twisted.internet import task
from twisted.trial.unittest import TestCase

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.leader import LeaderElection, read_leader
from pulsar_twisted.broker.ownership import BundleOwnership
from pulsar_twisted.metadata.layout import BROKERS_ROOT, LEADER_PATH
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.web.site import make_router

A = {"nativeUrl": "pulsar://a:6650", "nativeUrlTls": "pulsar+ssl://a:6651",
     "httpUrl": "http://a:8080", "httpUrlTls": "https://a:8443"}
B = {"nativeUrl": "pulsar://b:6650", "nativeUrlTls": "pulsar+ssl://b:6651",
     "httpUrl": "http://b:8080", "httpUrlTls": "https://b:8443"}


class TwoBrokers(TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.root = EmbeddedMetadataStore(None, self.clock)
        self.harness_a = BrokerHarness(clock=self.clock, store=self.root)
        self.successResultOf(self.harness_a.start())
        self.session_b = self.root.new_session()
        self.harness_b = BrokerHarness(clock=self.clock, store=self.session_b,
                                       ledger_client=self.harness_a.ledger_client)
        self.successResultOf(self.harness_b.start())
        self.successResultOf(self.root.put("/admin/clusters/standalone", b"{}"))
        self.admins = {}
        for name, harness, urls in (("a", self.harness_a, A), ("b", self.harness_b, B)):
            harness.broker.ownership = BundleOwnership(harness.store, self.clock, urls,
                                                       check_interval=0)
            self.admins[name] = AdminService(harness.broker, harness.store, harness.config,
                                             self.clock, web_service_url=urls["httpUrl"])

    def lookup(self, admin, topic="persistent://public/default/t"):
        name = admin.topic_name("persistent", "public", "default", topic.rsplit("/", 1)[1])
        return self.successResultOf(admin.lookup(name))


class HttpLookupTests(TwoBrokers):

    def test_owner_and_other_broker_answer_the_owners_urls(self):
        """Pulsar's TopicLookupBase: an owned bundle is a 200 LookupData of the owner, from any
        broker; httpUrl/httpUrlTls are the owner's, not the answering broker's."""
        expected = {"brokerUrl": A["nativeUrl"], "brokerUrlTls": A["nativeUrlTls"],
                    "httpUrl": A["httpUrl"], "httpUrlTls": A["httpUrlTls"],
                    "nativeUrl": A["nativeUrl"]}
        self.assertEqual(self.lookup(self.admins["a"]), expected)      # a takes the bundle
        self.assertEqual(self.lookup(self.admins["b"]), expected)      # b points at a

    def test_through_the_route(self):
        """The /lookup/v2/topic route calls the same answer."""
        self.lookup(self.admins["a"])
        handler, params = make_router(self.admins["b"], self.harness_b.config).match(
            "GET", "/lookup/v2/topic/persistent/public/default/t")
        answer = self.successResultOf(handler(None, **params))
        self.assertEqual((answer["brokerUrl"], answer["httpUrl"]), (A["nativeUrl"], A["httpUrl"]))

    def test_standalone_answers_its_own_web_url(self):
        self.harness_a.broker.ownership = None
        answer = self.lookup(self.admins["a"])
        self.assertEqual((answer["brokerUrl"], answer["httpUrl"], answer["httpUrlTls"]),
                         ("pulsar://localhost:6650", A["httpUrl"], ""))


class BrokerListTests(TwoBrokers):

    def test_lists_every_registered_broker(self):
        admin = self.admins["b"]
        # No registrations (standalone): the broker itself.
        self.assertEqual(self.successResultOf(admin.list_brokers("standalone")), ["localhost:8080"])
        self.successResultOf(self.root.put(f"{BROKERS_ROOT}/b:8080", b"{}", ephemeral=True))
        self.successResultOf(self.session_b.put(f"{BROKERS_ROOT}/a:8080", b"{}", ephemeral=True))
        self.assertEqual(self.successResultOf(admin.list_brokers("standalone")), ["a:8080", "b:8080"])
        self.assertEqual(self.successResultOf(self.admins["a"].list_brokers("standalone")),
                         ["a:8080", "b:8080"])
        self.successResultOf(self.session_b.close())        # b's session ends: its node goes
        self.assertEqual(self.successResultOf(self.admins["a"].list_brokers("standalone")),
                         ["b:8080"])


class LeaderTests(TwoBrokers):

    def election(self, store, broker_id, url):
        election = LeaderElection(store, self.clock, broker_id, url, check_interval=5)
        self.addCleanup(election.stop)
        return election

    def test_one_leader_and_takeover(self):
        a = self.election(self.root, "a:8080", "http://a:8080")
        b = self.election(self.session_b, "b:8080", "http://b:8080")
        self.assertTrue(self.successResultOf(a.start()))
        self.assertFalse(self.successResultOf(b.start()))
        leader = {"brokerId": "a:8080", "serviceUrl": "http://a:8080"}
        self.assertEqual(self.successResultOf(self.admins["b"].leader_broker()), leader)
        raw, stat = self.successResultOf(self.root.get(LEADER_PATH))
        self.assertTrue(stat.ephemeral)
        self.assertEqual(json.loads(raw), leader)
        # A graceful stop hands over at once (the deletion notification).
        self.successResultOf(a.stop())
        self.assertTrue(b.is_leader)
        self.assertEqual(self.successResultOf(read_leader(self.root))["brokerId"], "b:8080")

    def test_session_end_hands_over(self):
        b = self.election(self.session_b, "b:8080", "http://b:8080")
        a = self.election(self.root, "a:8080", "http://a:8080")
        self.assertTrue(self.successResultOf(b.start()))
        self.assertFalse(self.successResultOf(a.start()))
        self.successResultOf(self.session_b.close())
        self.clock.advance(5)       # notification or, at the latest, the periodic retry
        self.assertTrue(a.is_leader)
        self.assertEqual(self.successResultOf(self.admins["a"].leader_broker())["brokerId"], "a:8080")

    def test_without_a_leader_node_the_broker_answers_itself(self):
        self.assertEqual(self.successResultOf(self.admins["a"].leader_broker()),
                         {"brokerId": "localhost:8080", "serviceUrl": A["httpUrl"]})
        self.successResultOf(self.root.put(LEADER_PATH, b"junk"))
        self.assertEqual(self.successResultOf(self.admins["a"].leader_broker())["brokerId"],
                         "localhost:8080")
