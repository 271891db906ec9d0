"""
Partitions past a partitioned topic's count (issue 13 item 4): ``<topic>-partition-<i>`` with
``i >= partitions`` is refused for producers and consumers (NotAllowed "Illegal topic partition
name ...", as Pulsar's BrokerService.getTopic) and binary lookups (the same NotAllowed, which the official client reports; HTTP lookup: 404), and nothing is created
or listed for it.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from tests.security.test_broker_security import producer, subscribe
from tests.web.support import WebTestCase

T = api.BaseCommand
PARENT = "persistent://public/default/parts"


def lookup(topic, request_id=9):
    return T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic=topic, request_id=request_id))


class PartitionBoundsTests(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness()
        yield self.harness.start()
        yield self.harness.broker.create_partitioned_topic(parse_topic(PARENT), 2)
        yield self.harness.broker.create_partitioned_topic(
            parse_topic("non-persistent://public/default/np"), 2)
        self.client = self.harness.client()

    def names(self):
        return self.successResultOf(self.harness.ml_factory.list_names())

    def test_producer_and_consumer_refused_past_count(self):
        """-partition-2 of a 2-partition topic: NotAllowedError, no topic loaded or stored."""
        self.client.send(producer(f"{PARENT}-partition-2"))
        self.client.send(subscribe(f"{PARENT}-partition-7"))
        errors = self.client.commands(T.ERROR)
        self.assertEqual([e.error.error for e in errors], [api.NotAllowedError] * 2)
        self.assertIn(f"Illegal topic partition name {PARENT}-partition-2 with max allowed 2 partitions",
                      errors[0].error.message)
        self.assertEqual(self.harness.broker.topics, {})
        self.assertEqual(self.names(), [])

    def test_partitions_in_range_work(self):
        self.client.send(producer(f"{PARENT}-partition-1"))
        self.assertEqual(len(self.client.commands(T.PRODUCER_SUCCESS)), 1)

    def test_lookup_refused_past_count(self):
        self.client.send(lookup(f"{PARENT}-partition-2"))
        self.client.send(lookup(f"{PARENT}-partition-0", request_id=10))
        bad, good = self.client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(bad.lookupTopicResponse.response, api.CommandLookupTopicResponse.Failed)
        self.assertEqual(bad.lookupTopicResponse.error, api.NotAllowedError)
        self.assertIn("Illegal topic partition name", bad.lookupTopicResponse.message)
        self.assertEqual(good.lookupTopicResponse.response, api.CommandLookupTopicResponse.Connect)

    def test_non_persistent_past_count_not_found(self):
        self.client.send(producer("non-persistent://public/default/np-partition-2"))
        [error] = self.client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.TopicNotFound)
        self.assertEqual(self.harness.broker.topics, {})

    def test_not_listed(self):
        """GET_TOPICS lists no out-of-range partition after the refused attempts."""
        self.client.send(producer(f"{PARENT}-partition-5"))
        self.client.send(producer("non-persistent://public/default/np-partition-5", request_id=2,
                                  producer_id=2))
        topics, _, _ = self.successResultOf(defer.ensureDeferred(
            self.harness.broker.topics_of_namespace("public/default", api.CommandGetTopicsOfNamespace.ALL,
                                                    None)))
        self.assertFalse([t for t in topics if t.endswith("-partition-5")], topics)

    def test_plain_topic_with_partition_suffix(self):
        """A -partition-N name whose parent is not partitioned stays a plain topic (Pulsar allows it)."""
        self.client.send(producer("persistent://public/default/plain-partition-4"))
        self.assertEqual(len(self.client.commands(T.PRODUCER_SUCCESS)), 1)


class AdminPartitionNameTests(WebTestCase):
    @defer.inlineCallbacks
    def test_admin_create_refused_past_count(self):
        """PUT of a non-partitioned topic named like a partition past the count: 412 (Pulsar's
        validateNonPartitionTopicName), and the namespace's topic list does not show it."""
        status, _, _ = yield self.request("PUT", "/admin/v2/persistent/public/default/adm/partitions", 2)
        self.assertEqual(status, 204)
        status, body, _ = yield self.request("PUT", "/admin/v2/persistent/public/default/adm-partition-2")
        self.assertEqual(status, 412)
        self.assertIn("partitioned topic adm", body["reason"])
        status, body, _ = yield self.request("PUT", "/admin/v2/persistent/public/default/none-partition-0")
        self.assertEqual(status, 412)
        status, _, _ = yield self.request("PUT", "/admin/v2/persistent/public/default/adm-partition-1")
        self.assertEqual(status, 409)
        status, listed, _ = yield self.request("GET", "/admin/v2/persistent/public/default")
        self.assertEqual(sorted(listed), [f"persistent://public/default/adm-partition-{i}" for i in (0, 1)])
        status, _, _ = yield self.request("GET", "/lookup/v2/topic/persistent/public/default/adm-partition-2")
        self.assertEqual(status, 404)
