"""
Namespace-bundle ownership (``pulsar_twisted.broker.ownership``) in memory: bundle arithmetic, the
ephemeral-node protocol between brokers (two sessions of one embedded store standing for two
brokers' ZooKeeper sessions), and the broker's LOOKUP / PRODUCER answers through it.
"""

import json

from twisted.internet import defer, task
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.ownership import (
    BundleOwnership, LocalOwnership, NamespaceBundle, NotOwnedError, bundle_for, topic_hash)
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import (
    boundaries_of_policies, bundle_boundaries, even_boundaries)
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand
A = {"nativeUrl": "pulsar://a:6650", "httpUrl": "http://a:8080"}
B = {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}


class BundleMathTests(TestCase):

    def test_even_boundaries_match_admin_policies(self):
        """The split is Pulsar's, the same the admin service writes into new namespaces."""
        for n in (1, 2, 4, 16):
            self.assertEqual(["0x%08x" % b for b in even_boundaries(n)], bundle_boundaries(n))
        self.assertRaises(ValueError, even_boundaries, 0)

    def test_bundle_for_edges(self):
        """Hash h is in [lower, upper); the last bundle also holds 0xffffffff."""
        bounds = [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
        import pulsar_twisted.broker.ownership as ownership
        for h, lower in [(0, 0), (0x3FFFFFFF, 0), (0x40000000, 0x40000000),
                         (0xC0000000, 0xC0000000), (0xFFFFFFFF, 0xC0000000)]:
            original = ownership.topic_hash
            ownership.topic_hash = lambda _t, h=h: h
            try:
                bundle = bundle_for("t/n", bounds, "x")
            finally:
                ownership.topic_hash = original
            self.assertEqual(bundle.lower, lower)
            self.assertTrue(bundle.includes(h))

    def test_hash_is_crc32_of_the_full_name(self):
        """The documented hash: zlib CRC32 of persistent://tenant/ns/local."""
        import zlib
        name = "persistent://public/default/x-partition-3"
        self.assertEqual(topic_hash(name), zlib.crc32(name.encode()))

    def test_names_and_paths(self):
        bundle = NamespaceBundle("public/default", 0x40000000, 0x80000000)
        self.assertEqual(bundle.range_name, "0x40000000_0x80000000")
        self.assertEqual(bundle.path, "/namespace/public/default/0x40000000_0x80000000")

    def test_policies(self):
        """boundaries win over numBundles; numBundles alone gives an even split; junk is refused."""
        self.assertEqual(boundaries_of_policies({"bundles": {"numBundles": 2}}), even_boundaries(2))
        self.assertEqual(boundaries_of_policies({}), even_boundaries(4))
        self.assertEqual(boundaries_of_policies(
            {"bundles": {"boundaries": ["0x00000000", "0x10000000", "0xffffffff"], "numBundles": 2}}),
            [0, 0x10000000, 0xFFFFFFFF])
        self.assertRaises(ValueError, boundaries_of_policies,
                          {"bundles": {"boundaries": ["0x00000010", "0xffffffff"]}})


class BundleOwnershipTests(TestCase):
    """Two brokers (two sessions over one tree) sharing bundles."""

    def setUp(self):
        self.clock = task.Clock()
        self.root = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.root.start())
        self.session_a = self.root.new_session()
        self.session_b = self.root.new_session()
        self.lost_a, self.lost_b = [], []
        self.a = BundleOwnership(self.session_a, self.clock, A, self.lost_a.append, check_interval=5)
        self.b = BundleOwnership(self.session_b, self.clock, B, self.lost_b.append, check_interval=5)
        self.a.start()
        self.b.start()
        self.addCleanup(self.b.stop)
        self.addCleanup(self.a.stop)
        self.topic = parse_topic("persistent://public/default/owned")

    def test_first_asker_owns_and_others_redirect(self):
        """The first lookup takes the bundle (Connect); another broker answers Redirect to it."""
        result = self.successResultOf(self.a.lookup(self.topic))
        self.assertEqual((tuple(result), result.redirect), (("pulsar://a:6650", ""), False))
        result = self.successResultOf(self.b.lookup(self.topic))
        self.assertEqual((tuple(result), result.redirect), (("pulsar://a:6650", ""), True))
        self.assertEqual(result.http_url, "http://a:8080")
        bundle = self.successResultOf(self.a.bundle_of(self.topic))
        raw, stat = self.successResultOf(self.root.get(bundle.path))
        self.assertTrue(stat.ephemeral)
        self.assertEqual(json.loads(raw)["nativeUrl"], "pulsar://a:6650")

    def test_check_owned_refuses_on_a_non_owner(self):
        """Producers/consumers on the wrong broker: ServiceNotReady (the client looks up again)."""
        self.successResultOf(self.a.check_owned(self.topic))
        f = self.failureResultOf(self.b.check_owned(self.topic), errors.ServiceNotReady)
        self.assertIn("pulsar://a:6650", str(f.value))

    def test_session_end_frees_the_bundle(self):
        """A dead broker's session takes its nodes away: the next lookup elsewhere acquires."""
        self.successResultOf(self.a.lookup(self.topic))
        self.successResultOf(self.session_a.close())
        result = self.successResultOf(self.b.lookup(self.topic))
        self.assertFalse(result.redirect)
        self.assertEqual(result[0], "pulsar://b:6650")

    def test_deleted_node_means_lost(self):
        """The owner's node deleted under it: on_bundle_lost once, then it is free again."""
        self.successResultOf(self.a.lookup(self.topic))
        bundle = self.successResultOf(self.a.bundle_of(self.topic))
        self.successResultOf(self.root.delete(bundle.path))
        self.assertEqual(self.lost_a, [bundle])
        self.assertFalse(self.a.owns(bundle))
        self.successResultOf(self.b.check_owned(self.topic))
        self.assertEqual(self.lost_b, [])

    def test_periodic_check_notices_a_foreign_node(self):
        """The check loop compares the node with this broker's data (a missed notification)."""
        self.successResultOf(self.a.lookup(self.topic))
        bundle = self.successResultOf(self.a.bundle_of(self.topic))
        # A rewrite (not a delete) is only seen by the check: notifications of "modified" are not
        # taken as a loss, since one's own session may rewrite its nodes.
        self.successResultOf(self.root.put(bundle.path, json.dumps(B).encode()))
        self.clock.advance(5)
        self.assertEqual(self.lost_a, [bundle])

    def test_stop_gives_bundles_back(self):
        """A graceful stop deletes the nodes so others need not wait for the session timeout."""
        self.successResultOf(self.a.lookup(self.topic))
        self.successResultOf(self.a.stop())
        self.assertFalse(self.successResultOf(self.b.lookup(self.topic)).redirect)

    def test_namespace_bundle_count_from_policies(self):
        """numBundles of the namespace's policies decides the ranges."""
        self.successResultOf(self.root.put("/admin/policies/t/ns",
                                           json.dumps({"bundles": {"numBundles": 2}}).encode()))
        bundle = self.successResultOf(self.a.bundle_of(parse_topic("persistent://t/ns/x")))
        self.assertIn(bundle.range_name, ("0x00000000_0x80000000", "0x80000000_0xffffffff"))

    def test_local_ownership(self):
        local = LocalOwnership("pulsar://me:6650")
        result = self.successResultOf(local.lookup(self.topic))
        self.assertEqual((tuple(result), result.redirect), (("pulsar://me:6650", ""), False))
        self.successResultOf(local.check_owned(self.topic))


class BrokerWithOwnershipTests(TestCase):
    """The broker's binary answers through BundleOwnership (two in-memory brokers)."""

    def setUp(self):
        self.clock = task.Clock()
        store = EmbeddedMetadataStore(None, self.clock)
        self.harness_a = BrokerHarness(clock=self.clock, store=store)
        self.successResultOf(self.harness_a.start())
        session_b = store.new_session()
        self.harness_b = BrokerHarness(clock=self.clock, store=session_b,
                                       ledger_client=self.harness_a.ledger_client)
        self.successResultOf(self.harness_b.start())
        self.harness_b.broker.broker_url = "pulsar://b:6650"
        self.ownership_a = BundleOwnership(store, self.clock, {"nativeUrl": "pulsar://localhost:6650"},
                                           self._unload_a, check_interval=0)
        self.ownership_b = BundleOwnership(session_b, self.clock, {"nativeUrl": "pulsar://b:6650"},
                                           check_interval=0)
        self.harness_a.broker.ownership = self.ownership_a
        self.harness_b.broker.ownership = self.ownership_b
        self.unloaded = []

    def _unload_a(self, bundle):
        self.unloaded.append(bundle)
        self.harness_a.broker.unload_topics(
            lambda name: bundle.includes(topic_hash(str(name))))

    def lookup(self, client, topic, request_id=1):
        client.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic=topic, request_id=request_id)))
        [r] = client.commands(T.LOOKUP_RESPONSE)
        return r.lookupTopicResponse

    def producer(self, client, topic, producer_id=1, request_id=2):
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic=topic, producer_id=producer_id, request_id=request_id)))
        return client.received()

    def test_lookup_connect_then_redirect(self):
        """Owner answers Connect; the other broker Redirect with the owner's URL."""
        a, b = self.harness_a.client(), self.harness_b.client()
        r = self.lookup(a, "persistent://public/default/x")
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Connect, "pulsar://localhost:6650"))
        r = self.lookup(b, "persistent://public/default/x")
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Redirect, "pulsar://localhost:6650"))

    def test_producer_on_non_owner_gets_service_not_ready(self):
        """A producer on the wrong broker is refused with ServiceNotReady; on the owner it works."""
        a, b = self.harness_a.client(), self.harness_b.client()
        self.lookup(a, "persistent://public/default/y")
        [(command, _)] = self.producer(b, "persistent://public/default/y")
        self.assertEqual((command.type, command.error.error), (T.ERROR, api.ServiceNotReady))
        [(command, _)] = self.producer(a, "persistent://public/default/y")
        self.assertEqual(command.type, T.PRODUCER_SUCCESS)

    def test_lost_bundle_unloads_topics_and_other_broker_takes_over(self):
        """Losing the bundle closes its topics (clients told to reconnect); B then serves it."""
        a, b = self.harness_a.client(), self.harness_b.client()
        topic = "persistent://public/default/z"
        [(command, _)] = self.producer(a, topic)
        self.assertEqual(command.type, T.PRODUCER_SUCCESS)
        bundle = self.successResultOf(self.ownership_a.bundle_of(parse_topic(topic)))
        self.successResultOf(self.harness_a.store.delete(bundle.path))
        self.harness_a.pump()
        self.assertEqual(self.unloaded, [bundle])
        self.assertNotIn(topic, self.harness_a.broker.topics)
        self.assertIn(T.CLOSE_PRODUCER, [c.type for c, _ in a.received()])
        [(command, _)] = self.producer(b, topic)
        self.assertEqual(command.type, T.PRODUCER_SUCCESS)
        r = self.lookup(a, topic, request_id=9)
        self.assertEqual((r.response, r.brokerServiceUrl), (r.Redirect, "pulsar://b:6650"))


class OwnershipTokenTests(BundleOwnershipTests):
    """``check_owned`` tokens: a load can tell whether its bundle was lost while it ran."""

    def test_token_valid_until_lost_and_not_after_reacquiring(self):
        token = self.successResultOf(self.a.check_owned(self.topic))
        self.assertTrue(self.a.still_owns(token))
        bundle = self.successResultOf(self.a.bundle_of(self.topic))
        self.successResultOf(self.root.delete(bundle.path))
        self.assertFalse(self.a.still_owns(token))
        again = self.successResultOf(self.a.check_owned(self.topic))
        self.assertTrue(self.a.still_owns(again))
        self.assertFalse(self.a.still_owns(token), "a bundle lost and retaken is a new ownership")

    def test_not_owned_error_carries_the_owner(self):
        """NotOwnedError is a ServiceNotReady (binary clients retry) naming the owner's web URL."""
        self.successResultOf(self.a.check_owned(self.topic))
        f = self.failureResultOf(self.b.check_owned(self.topic), NotOwnedError)
        self.assertIsInstance(f.value, errors.ServiceNotReady)
        self.assertEqual(f.value.owner["httpUrl"], "http://a:8080")


class OwnershipGuardsLoadsTests(BrokerWithOwnershipTests):
    """A broker opens nothing of a topic whose bundle it does not own (issue 11, item 1)."""

    def admin(self, harness):
        return AdminService(harness.broker, harness.store, harness.config, self.clock)

    def test_partitions_created_on_a_non_owner_open_no_managed_ledger(self):
        """PUT .../partitions on a non-owner: metadata only; the owner opens them on first use."""
        a = self.harness_a.client()
        topic = parse_topic("persistent://public/default/parts")
        for i in range(3):      # A owns the partitions' bundles
            self.successResultOf(self.ownership_a.check_owned(topic.partition(i)))
        self.successResultOf(defer.ensureDeferred(
            self.admin(self.harness_b).create_partitioned_topic(topic, 3)))
        self.assertEqual(self.harness_b.ml_factory.ledgers, {})
        names = self.successResultOf(self.harness_b.ml_factory.list_names())
        for i in range(3):
            self.assertIn(topic.partition(i).managed_ledger_name, names)
        [(command, _)] = self.producer(a, str(topic.partition(0)))
        self.assertEqual(command.type, T.PRODUCER_SUCCESS)
        self.assertEqual(self.harness_b.ml_factory.ledgers, {})

    def test_admin_on_non_owner_is_refused_without_loading(self):
        """Admin calls needing a topic's state on a non-owner: NotOwnedError (307), nothing opened."""
        topic = parse_topic("persistent://public/default/stats-here")
        [(command, _)] = self.producer(self.harness_a.client(), str(topic))
        self.assertEqual(command.type, T.PRODUCER_SUCCESS)
        admin_b = self.admin(self.harness_b)
        self.failureResultOf(defer.ensureDeferred(admin_b.get_topic_stats(topic)), NotOwnedError)
        self.assertEqual(self.harness_b.ml_factory.ledgers, {})
        self.assertNotIn(str(topic), self.harness_b.broker.topics)

    def test_http_answer_is_307_to_the_owner(self):
        """The web layer turns NotOwnedError into Pulsar's 307 to the owner's web URL."""
        from twisted.web.test.requesthelper import DummyRequest
        from pulsar_twisted.web.routing import RouterResource

        resource = RouterResource(None)
        request = DummyRequest([b""])
        request.uri = b"/admin/v2/persistent/public/default/t/stats"
        resource._write_failure(Failure(NotOwnedError("elsewhere", {"httpUrl": "http://a:8080/"})),
                                request, [False])
        self.assertEqual(request.responseCode, 307)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"location"),
                         [b"http://a:8080/admin/v2/persistent/public/default/t/stats"])

    def test_load_finishing_after_the_bundle_was_lost_is_refused(self):
        """Ownership lost while the managed ledger was opening: the load fails, the ML is closed,
        the topic is never served from this broker."""
        topic = "persistent://public/default/racing"
        factory = self.harness_a.ml_factory
        real_open = factory.open
        gate = defer.Deferred()
        self.patch(factory, "open", lambda name, config=None: gate.addCallback(lambda _: real_open(name)))
        a = self.harness_a.client()
        a.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=2)))
        self.assertEqual(a.received(), [])
        bundle = self.successResultOf(self.ownership_a.bundle_of(parse_topic(topic)))
        self.successResultOf(self.harness_a.store.delete(bundle.path))
        gate.callback(None)
        self.harness_a.pump()
        [(command, _)] = a.received()
        self.assertEqual((command.type, command.error.error), (T.ERROR, api.ServiceNotReady))
        self.assertNotIn(topic, self.harness_a.broker.topics)
        self.assertIsNone(factory.get(parse_topic(topic).managed_ledger_name))

    def test_new_owner_serves_what_the_old_one_stored(self):
        """The bundle moves: the new owner opens the ML afresh and serves every stored message."""
        topic = "persistent://public/default/moving"
        a, b = self.harness_a.client(), self.harness_b.client()
        subscribe = api.CommandSubscribe(
            topic=topic, subscription="s", subType=api.CommandSubscribe.Exclusive, consumer_id=1,
            request_id=5, initialPosition=api.CommandSubscribe.Earliest)
        a.send(T(type=T.SUBSCRIBE, subscribe=subscribe))     # keeps the entry (no retention)
        answers = self.producer(a, topic, producer_id=1, request_id=3)
        self.assertEqual([c.type for c, _ in answers], [T.SUCCESS, T.PRODUCER_SUCCESS])
        meta = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        a.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=0, num_messages=1)),
               frames.encode_message(meta, b"first"))
        self.assertIn(T.SEND_RECEIPT, [c.type for c, _ in a.received()])
        bundle = self.successResultOf(self.ownership_a.bundle_of(parse_topic(topic)))
        self.successResultOf(self.harness_a.store.delete(bundle.path))
        self.harness_a.pump()
        self.assertEqual(self.harness_a.ml_factory.ledgers, {})
        b.send(T(type=T.SUBSCRIBE, subscribe=subscribe))
        b.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10)))
        got = [frames.split_message(m)[1] for c, m in b.received() if c.type == T.MESSAGE]
        self.assertEqual(got, [b"first"])
