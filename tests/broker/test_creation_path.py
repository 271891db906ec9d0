"""
The topic-creation path of one client (issue 14, item 4): lookup, partitioned metadata, producer
creation and the topic load, as chains of callbacks. In the usual case (authorization off, the
namespace known, standalone) each answer is there when the call returns; every failure is a
failed Deferred (never an exception out of the call), and the load cleans up what it opened.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker.cnx import producer_request
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness

TOPIC = "persistent://public/default/creation"


class CreationPathTests(unittest.TestCase):
    def setUp(self):
        self.harness = BrokerHarness()
        self.successResultOf(self.harness.start())
        self.broker = self.harness.broker
        self.client = self.harness.client()

    def request(self, topic=TOPIC, producer_id=1, **fields):
        return producer_request(api.CommandProducer(topic=topic, producer_id=producer_id,
                                                    request_id=producer_id, **fields))

    def test_lookup_answers_at_once_and_releases_its_slot(self):
        """The answer is there when lookup returns; the pending-lookup count goes back to 0 after an
        answer and after each kind of failure (bad name, unknown namespace, unknown listener)."""
        security = self.broker.security
        self.assertEqual(self.successResultOf(self.broker.lookup(TOPIC, cnx=self.client.protocol)),
                         ("pulsar://localhost:6650", ""))
        self.assertEqual(security.pending_lookups, 0)
        self.failureResultOf(self.broker.lookup("persistent://a/b/c/d/e"), errors.InvalidTopicName)
        self.failureResultOf(self.broker.lookup("persistent://public/nowhere/t"), errors.TopicNotFound)
        self.failureResultOf(self.broker.lookup(TOPIC, listener_name="internal"), errors.ServiceNotReady)
        self.assertEqual(security.pending_lookups, 0)
        self.assertEqual(self.broker.counters.lookup_pending, 0)

    def test_partitioned_metadata_answers_at_once(self):
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata(TOPIC, cnx=self.client.protocol)), 0)
        self.successResultOf(self.broker.create_partitioned_topic(
            self.broker._parse("persistent://public/default/parted"), 3))
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata("persistent://public/default/parted")), 3)
        # A partition is a plain topic: 0, not its parent's count.
        self.assertEqual(self.successResultOf(
            self.broker.partitioned_metadata("persistent://public/default/parted-partition-1")), 0)
        self.failureResultOf(self.broker.partitioned_metadata("persistent://a/b/c/d/e"), errors.InvalidTopicName)
        self.failureResultOf(self.broker.partitioned_metadata("persistent://public/nowhere/t"), errors.TopicNotFound)

    def test_partitioned_auto_creation(self):
        """allowAutoTopicCreationType=partitioned: a new name becomes a partitioned topic of
        defaultNumPartitions; an existing plain topic stays plain."""
        self.harness.config.allowAutoTopicCreationType = "partitioned"
        self.harness.config.defaultNumPartitions = 2
        self.successResultOf(self.broker.create_topic_storage(self.broker._parse(TOPIC)))
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata(TOPIC)), 0)
        other = "persistent://public/default/auto"
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata(other)), 2)
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata(other, auto_create=False)), 2)

    def test_producer_on_a_loaded_topic_answers_at_once(self):
        first = self.broker.create_producer(self.client.protocol, self.request())
        self.harness.pump()
        first = self.successResultOf(first)
        second = self.successResultOf(self.broker.create_producer(self.client.protocol, self.request(producer_id=2)))
        self.assertIs(second.topic, self.broker.topics[TOPIC])
        self.assertNotEqual(second.name, first.name)

    def test_producer_errors_are_failures(self):
        """A bad name, a partitioned topic's own name and a bad initial subscription fail the
        Deferred with Pulsar's errors."""
        cnx = self.client.protocol
        self.failureResultOf(self.broker.create_producer(cnx, self.request("persistent://a/b/c/d/e")),
                             errors.InvalidTopicName)
        self.successResultOf(self.broker.create_partitioned_topic(
            self.broker._parse("persistent://public/default/parted"), 2))
        d = self.broker.create_producer(cnx, self.request("persistent://public/default/parted"))
        self.harness.pump()
        self.failureResultOf(d, errors.NotAllowedError)
        d = self.broker.create_producer(cnx, self.request(initial_subscription_name="bad\x00name"))
        self.harness.pump()
        self.failureResultOf(d, errors.NotAllowedError)

    def test_producer_with_initial_subscription(self):
        d = self.broker.create_producer(self.client.protocol, self.request(initial_subscription_name="dlq"))
        self.harness.pump()
        producer = self.successResultOf(d)
        self.assertIn("dlq", producer.topic.subscriptions)

    def test_load_without_auto_creation_refuses_a_missing_topic(self):
        self.harness.config.allowAutoTopicCreation = False
        d = self.broker.get_topic(TOPIC)
        self.harness.pump()
        self.failureResultOf(d, errors.TopicNotFound)
        self.assertNotIn(TOPIC, self.broker.topics)

    def _failing_policies(self, how):
        opened = []

        def apply_cached(topic):
            if how == "cached":
                opened.append(topic)
                raise RuntimeError("policies broken")
            return False    # not known: the load reads them (topic_loaded)

        def topic_loaded(topic):
            opened.append(topic)
            if how == "raise":
                raise RuntimeError("policies broken")
            return defer.fail(RuntimeError("policies broken"))
        self.patch(self.broker.policies, "apply_cached", apply_cached)
        self.patch(self.broker.policies, "topic_loaded", topic_loaded)
        return opened

    def test_failed_load_closes_the_topic(self):
        """A load failing after the managed ledger opened (here: applying the namespace policies,
        whether they were known already or read, whether it raises or fails its Deferred) closes
        the topic, forgets it, and fails with the reason; the next use loads it afresh."""
        for how in ("cached", "raise", "fail"):
            opened = self._failing_policies(how)
            d = self.broker.get_topic(TOPIC)
            self.harness.pump()
            self.assertEqual(self.failureResultOf(d, RuntimeError).getErrorMessage(), "policies broken")
            [topic] = opened
            self.assertTrue(topic.closed)
            self.assertNotIn(TOPIC, self.broker.topics)
            self.assertEqual(self.broker._loading, {})
            self.flushLoggedErrors(RuntimeError)
        policies = self.broker.policies
        self.patch(policies, "topic_loaded", type(policies).topic_loaded.__get__(policies))
        self.patch(policies, "apply_cached", type(policies).apply_cached.__get__(policies))
        d = self.broker.get_topic(TOPIC)
        self.harness.pump()
        self.assertFalse(self.successResultOf(d).closed)

    def _forget_namespace(self):
        """As a broker that has not yet seen ``public/default`` nor read its policies."""
        self.broker.known_namespaces._seen.clear()
        self.broker.policies._cache.clear()

    def test_lookup_and_metadata_check_what_is_not_known(self):
        """With the namespace not known yet, lookup and partitioned metadata check it through the
        store (and remember it); with authorization on, the check is made every time."""
        self._forget_namespace()
        self.assertEqual(self.successResultOf(self.broker.lookup(TOPIC, cnx=self.client.protocol)),
                         ("pulsar://localhost:6650", ""))
        self.assertTrue(self.broker.known_namespaces.known("public/default"))
        self._forget_namespace()
        self.assertEqual(self.successResultOf(self.broker.partitioned_metadata(TOPIC, cnx=self.client.protocol)), 0)
        self.assertTrue(self.broker.known_namespaces.known("public/default"))
        asked = []

        def authorize_command(cnx, command_type, **where):
            asked.append(command_type)
            return defer.fail(errors.AuthorizationError("no"))
        security = self.broker.security
        self.patch(security, "allows_unchecked", lambda command_type: False)
        self.patch(security, "authorize_command", authorize_command)
        cnx = self.client.protocol
        self.failureResultOf(self.broker.lookup(TOPIC, cnx=cnx), errors.AuthorizationError)
        self.failureResultOf(self.broker.partitioned_metadata(TOPIC, cnx=cnx), errors.AuthorizationError)
        self.failureResultOf(self.broker.create_producer(cnx, self.request()), errors.AuthorizationError)
        self.assertEqual(asked, [api.BaseCommand.LOOKUP, api.BaseCommand.PARTITIONED_METADATA,
                                 api.BaseCommand.PRODUCER])
        self.assertEqual(self.broker.counters.lookup_pending, 0)
        self.assertEqual(security.pending_lookups, 0)

    def test_load_reads_what_is_not_known(self):
        """A topic loads with its namespace's policies also when neither the namespace nor its
        policies are known yet: they are read (and kept) on the way."""
        self._forget_namespace()
        d = self.broker.get_topic(TOPIC)
        self.harness.pump()
        topic = self.successResultOf(d)
        self.assertIs(topic.policies, self.broker.policies.cached("public/default"))
        self.assertTrue(self.broker.known_namespaces.known("public/default"))
        self.assertIs(self.broker.topics[TOPIC], topic)

    def test_concurrent_loads_share_one_topic(self):
        """Two uses of a new topic before its load ends get the same topic (one managed ledger)."""
        first = self.broker.get_topic(TOPIC)
        second = self.broker.get_topic(TOPIC)
        self.harness.pump()
        self.assertIs(self.successResultOf(first), self.successResultOf(second))

    def test_bundle_lost_while_loading_closes_the_topic(self):
        """In a cluster the bundle is checked before and after the load; lost meanwhile (here with
        the policies known, so the steps after the managed ledger opens run at once), the load
        fails ServiceNotReady and closes the topic and its managed ledger."""
        asked = []

        class Ownership:
            def check_owned(self, name):
                asked.append(str(name))
                return defer.succeed("token")

            def still_owns(self, token):
                asked.append(token)
                return False
        self.broker.get_topic("persistent://public/default/before")
        self.harness.pump()
        self.assertIsNotNone(self.broker.policies.cached("public/default"))
        self.patch(self.broker, "ownership", Ownership())
        d = self.broker.get_topic(TOPIC)
        self.harness.pump()
        self.failureResultOf(d, errors.ServiceNotReady)
        self.assertEqual(asked, [TOPIC, "token"])
        self.assertNotIn(TOPIC, self.broker.topics)
        self.assertIsNone(self.broker.ml_factory.get(self.broker._parse(TOPIC).managed_ledger_name))
        self.flushLoggedErrors()
