"""
Geo-replication on one broker (broker/replication.py): the namespace's ``replication_clusters``
policy gives a persistent topic a replicator per remote cluster, whose producer (a fake of our
client's, ``send_entry``) gets every entry stored after the replicator's cursor was made, with
its metadata kept but for ``replicated_from``; receipts delete the entries from the cursor,
failures send them again, and the receiving side deduplicates by the original producer.
"""


from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker import replication, schema
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand
TOPIC = "persistent://public/default/t"


class FakeProducer:
    """What a replicator uses of our client's Producer: ``send_entry`` answered by the test."""

    def __init__(self, topic, name):
        self.topic = topic
        self.name = name
        self.sent = []          # (metadata, payload, num_messages, Deferred)
        self.closed = False
        self.cnx = None

    def send_entry(self, metadata, payload, num_messages=1):
        d = defer.Deferred()
        copy = api.MessageMetadata()
        copy.CopyFrom(metadata)
        self.sent.append((copy, payload, num_messages, d))
        return d

    def is_connected(self):
        return not self.closed

    def close(self):
        self.closed = True
        for _, _, _, d in self.sent:
            if not d.called:
                d.errback(Exception("producer closed"))
        return defer.succeed(None)

    def ack_all(self):
        for _, _, _, d in self.sent:
            if not d.called:
                d.callback(("ledger", "entry"))


class FakeRemoteClient:
    def __init__(self, url):
        self.url = url
        self.producers = []
        self.refuse = None
        self.schemas = []

    def create_producer(self, topic, **conf):
        if self.refuse is not None:
            return defer.fail(self.refuse)
        producer = FakeProducer(topic, conf["producer_name"])
        self.producers.append(producer)
        return defer.succeed(producer)

    def get_or_create_schema(self, topic, schema):
        self.schemas.append((topic, schema))
        return defer.succeed(b"remote-%d" % len(self.schemas))

    def close(self):
        return defer.succeed(None)


class ReplicationCase(unittest.TestCase):

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(clusterName="east")
        yield self.harness.start()
        self.broker = self.harness.broker
        self.clock = self.harness.clock
        self.clock.advance(1000)
        self.remotes = {}
        self.broker.replication_clients.client_factory = self._client
        self.admin = AdminService(self.broker, self.harness.store, self.harness.config, self.clock)
        yield self.broker.clusters.create("west", {"serviceUrl": "http://west:8080",
                                                   "brokerServiceUrl": "pulsar://west:6650"})
        self._ids = iter(range(1, 10000))
        self.seq = 0

    def _client(self, url):
        client = self.remotes[url] = FakeRemoteClient(url)
        return client

    def remote(self):
        return self.remotes["pulsar://west:6650"]

    def write_policies(self, **fields):
        self.harness.write_policies(**fields)

    def producer(self, topic=TOPIC, name=None):
        client = self.harness.client()
        pid = next(self._ids)
        request = api.CommandProducer(topic=topic, producer_id=pid, request_id=pid)
        if name is not None:
            request.producer_name = name
        client.send(T(type=T.PRODUCER, producer=request))
        [reply] = [c for c in client.commands() if c.type in (T.PRODUCER_SUCCESS, T.ERROR)]
        self.assertEqual(reply.type, T.PRODUCER_SUCCESS, reply)
        return client, pid

    def publish(self, client, pid, payload=b"x", **metadata_fields):
        fields = dict(producer_name="p1", sequence_id=self.seq,
                      publish_time=int(self.clock.seconds() * 1000))
        fields.update(metadata_fields)
        meta = api.MessageMetadata(**fields)
        client.send(T(type=T.SEND, send=api.CommandSend(producer_id=pid, sequence_id=self.seq)),
                    frames.encode_message(meta, payload))
        self.seq += 1
        return [c for c in client.commands() if c.type in (T.SEND_RECEIPT, T.SEND_ERROR)]

    def topic(self, name=TOPIC):
        return self.broker.topics[name]


class ReplicatorTests(ReplicationCase):

    def test_entries_go_to_the_remote_cluster_with_their_metadata(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        topic = self.topic()
        self.assertEqual(set(topic.replicators), {"west"})
        self.assertIn("pulsar.repl.west", topic.ledger.cursors)
        self.assertNotIn("pulsar.repl.west", topic.subscriptions)
        [producer] = self.remote().producers
        self.assertEqual(producer.name, "pulsar.repl.east-->west")
        self.assertEqual(producer.topic, TOPIC)
        self.publish(client, pid, b"one", properties=[api.KeyValue(key="k", value="v")],
                     event_time=77, partition_key="key")
        self.publish(client, pid, b"two")
        self.harness.pump()
        self.assertEqual([(m.producer_name, m.sequence_id, m.replicated_from, p)
                          for m, p, _, _ in producer.sent],
                         [("p1", 0, "east", b"one"), ("p1", 1, "east", b"two")])
        first = producer.sent[0][0]
        self.assertEqual((first.event_time, first.partition_key, first.properties[0].value),
                         (77, "key", "v"))
        replicator = topic.replicators["west"]
        self.assertEqual(replicator.backlog(), 2)
        producer.ack_all()
        self.harness.pump()
        self.assertEqual(replicator.backlog(), 0)
        self.assertEqual(replicator.msg_out, 2)

    def test_replicated_and_excluded_messages_are_not_sent(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.publish(client, pid, b"from-elsewhere", replicated_from="south")
        self.publish(client, pid, b"local-only", replicate_to=["__local__"])
        self.publish(client, pid, b"to-west", replicate_to=["west"])
        self.publish(client, pid, b"to-north", replicate_to=["north"])
        self.harness.pump()
        [producer] = self.remote().producers
        self.assertEqual([p for _, p, _, _ in producer.sent], [b"to-west"])
        producer.ack_all()
        self.harness.pump()
        self.assertEqual(self.topic().replicators["west"].backlog(), 0)

    def test_messages_before_replication_are_not_sent(self):
        client, pid = self.producer()
        self.publish(client, pid, b"before")
        self.write_policies(replication_clusters=["east", "west"])
        self.publish(client, pid, b"after")
        self.harness.pump()
        [producer] = self.remote().producers
        self.assertEqual([p for _, p, _, _ in producer.sent], [b"after"])

    def test_a_failed_send_is_sent_again_in_order(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        for i in range(3):
            self.publish(client, pid, b"m%d" % i)
        self.harness.pump()
        [first] = self.remote().producers
        first.sent[0][3].callback(None)         # m0 stored remotely
        first.sent[1][3].errback(Exception("refused"))
        self.harness.pump()
        self.assertTrue(first.closed)
        self.clock.advance(0.1)                 # the back-off
        self.harness.pump()
        second = self.remote().producers[1]
        self.assertEqual([p for _, p, _, _ in second.sent], [b"m1", b"m2"])
        second.ack_all()
        self.harness.pump()
        self.assertEqual(self.topic().replicators["west"].backlog(), 0)

    def test_an_unreachable_remote_is_retried_with_back_off(self):
        self.harness.pump()
        self.remotes["pulsar://west:6650"] = remote = FakeRemoteClient("pulsar://west:6650")
        remote.refuse = Exception("connection refused")
        self.broker.replication_clients.client_factory = lambda url: remote
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.publish(client, pid, b"waiting")
        self.assertEqual(remote.producers, [])
        remote.refuse = None
        self.clock.advance(0.1)
        self.harness.pump()
        [producer] = remote.producers
        self.assertEqual([p for _, p, _, _ in producer.sent], [b"waiting"])

    def test_unacknowledged_entries_are_sent_again_after_a_reload(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.publish(client, pid, b"a")
        self.publish(client, pid, b"b")
        self.harness.pump()
        [producer] = self.remote().producers
        producer.sent[0][3].callback(None)
        self.harness.pump()
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.assertTrue(producer.closed)
        self.producer()
        again = self.remote().producers[1]
        self.assertEqual([p for _, p, _, _ in again.sent], [b"b"])

    def test_removing_the_cluster_deletes_the_cursor(self):
        self.write_policies(replication_clusters=["east", "west"])
        self.producer()
        topic = self.topic()
        self.write_policies(replication_clusters=["east"])
        self.assertEqual(dict(topic.replicators), {})
        self.assertNotIn("pulsar.repl.west", topic.ledger.cursors)
        self.assertTrue(self.remote().producers[0].closed)

    def test_a_stale_cursor_is_deleted_at_load(self):
        self.write_policies(replication_clusters=["east", "west"])
        self.producer()
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.write_policies(replication_clusters=["east"])
        self.producer()
        self.assertNotIn("pulsar.repl.west", self.topic().ledger.cursors)

    def test_no_replication_unless_this_cluster_is_listed(self):
        self.write_policies(replication_clusters=["west", "north"])
        self.producer()
        self.assertEqual(dict(self.topic().replicators), {})

    def test_a_message_with_a_schema_gets_the_remote_version_of_it(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.successResultOf(self.broker.schema_registry.add(
            TOPIC, api.Schema.Json, b'{"type": "record"}', name="t"))
        local = schema.encode_version(0)
        self.publish(client, pid, b"{}", schema_version=local)
        self.publish(client, pid, b"{}", schema_version=local)
        self.publish(client, pid, b"plain")
        self.harness.pump()
        remote = self.remote()
        self.assertEqual([(t, s.type, s.schema_data) for t, s in remote.schemas],
                         [(TOPIC, api.Schema.Json, b'{"type": "record"}')])
        [producer] = remote.producers
        self.assertEqual([(m.schema_version, p) for m, p, _, _ in producer.sent],
                         [(b"remote-1", b"{}"), (b"remote-1", b"{}"), (b"", b"plain")])

    def test_the_ttl_expires_what_was_not_sent(self):
        self.harness.pump()
        remote = self.remotes["pulsar://west:6650"] = FakeRemoteClient("pulsar://west:6650")
        remote.refuse = Exception("connection refused")
        self.broker.replication_clients.client_factory = lambda url: remote
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.publish(client, pid, b"old")
        self.clock.advance(120)
        self.publish(client, pid, b"new")
        self.write_policies(message_ttl_in_seconds=60)
        replicator = self.topic().replicators["west"]
        self.assertEqual((replicator.backlog(), replicator.msg_expired), (1, 1))
        remote.refuse = None
        self.clock.advance(60)      # past every back-off
        self.harness.pump()
        self.assertEqual([p for _, p, _, _ in remote.producers[0].sent], [b"new"])

    def test_an_inactive_topic_is_kept_until_replicated(self):
        self.harness.pump()
        remote = self.remotes["pulsar://west:6650"] = FakeRemoteClient("pulsar://west:6650")
        remote.refuse = Exception("connection refused")
        self.broker.replication_clients.client_factory = lambda url: remote
        self.write_policies(replication_clusters=["east", "west"],
                            inactive_topic_policies={"deleteWhileInactive": True,
                                                     "maxInactiveDurationSeconds": 1,
                                                     "inactiveTopicDeleteMode": "delete_when_no_subscriptions"})
        client, pid = self.producer()
        self.publish(client, pid, b"not yet copied")
        client.close()
        for _ in range(3):
            self.successResultOf(self.broker.policies.check_inactive_topics())
            self.clock.advance(2)
        self.assertIn(TOPIC, self.broker.topics)
        remote.refuse = None
        self.clock.advance(60)
        self.harness.pump()
        remote.producers[0].ack_all()
        self.harness.pump()
        for _ in range(3):
            self.successResultOf(self.broker.policies.check_inactive_topics())
            self.clock.advance(2)
        self.assertNotIn(TOPIC, self.broker.topics)

    def test_stats(self):
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer()
        self.publish(client, pid, b"x" * 10)
        self.harness.pump()
        stats = self.topic().replicators["west"].stats()
        self.assertEqual(stats["replicationBacklog"], 1)
        self.assertTrue(stats["connected"])
        self.assertEqual(set(stats), {"msgRateOut", "msgThroughputOut", "msgRateExpired",
                                      "replicationBacklog", "connected", "replicationDelayInSeconds",
                                      "outboundConnection", "outboundConnectedSince"})


class NonPersistentTests(ReplicationCase):
    """Non-persistent topics replicate what is published while the producer is there, as
    Pulsar's NonPersistentReplicator; the rest is dropped and counted."""

    NP = "non-persistent://public/default/np"

    def test_sent_while_connected_dropped_otherwise(self):
        self.harness.pump()
        remote = self.remotes["pulsar://west:6650"] = FakeRemoteClient("pulsar://west:6650")
        remote.refuse = Exception("connection refused")
        self.broker.replication_clients.client_factory = lambda url: remote
        self.write_policies(replication_clusters=["east", "west"])
        client, pid = self.producer(self.NP)
        topic = self.topic(self.NP)
        self.publish(client, pid, b"while away")
        replicator = topic.replicators["west"]
        self.assertEqual((replicator.msg_out, replicator.msg_expired), (0, 1))
        remote.refuse = None
        self.clock.advance(0.1)
        self.harness.pump()
        self.publish(client, pid, b"connected")
        self.publish(client, pid, b"back", replicated_from="west")
        [producer] = remote.producers
        self.assertEqual([(m.replicated_from, p) for m, p, _, _ in producer.sent],
                         [("east", b"connected")])
        producer.ack_all()
        self.assertEqual(replicator.msg_out, 1)
        self.write_policies(replication_clusters=["east"])
        self.assertEqual(dict(topic.replicators), {})
        self.assertTrue(producer.closed)


class ReceivingSideTests(ReplicationCase):
    """A replication producer's messages are deduplicated by their original producer."""

    def test_resent_replicated_messages_are_stored_once(self):
        self.write_policies(deduplicationEnabled=True)
        client, pid = self.producer(name="pulsar.repl.west-->east")
        [receipt] = self.publish(client, pid, b"a", producer_name="west-p", sequence_id=5,
                                 replicated_from="west")
        self.assertGreaterEqual(receipt.send_receipt.message_id.entryId, 0)
        # The replicator sends it again (its own sequence id moved on): a duplicate.
        [again] = self.publish(client, pid, b"a", producer_name="west-p", sequence_id=5,
                               replicated_from="west")
        self.assertEqual(again.type, T.SEND_RECEIPT)
        self.assertEqual(again.send_receipt.message_id.entryId, (1 << 64) - 1)
        # Another original producer with a lower sequence id is not a duplicate.
        [other] = self.publish(client, pid, b"b", producer_name="west-q", sequence_id=1,
                               replicated_from="west")
        self.assertGreaterEqual(other.send_receipt.message_id.entryId, 0)
        self.assertLess(other.send_receipt.message_id.entryId, 1 << 63)


class NamingTests(unittest.TestCase):

    def test_names(self):
        self.assertEqual(replication.cursor_name("west"), "pulsar.repl.west")
        self.assertEqual(replication.producer_name("east", "west"), "pulsar.repl.east-->west")
        self.assertEqual(replication.source_cluster("pulsar.repl.east-->west"), "east")
        self.assertIsNone(replication.source_cluster("standalone-0-1"))
        self.assertEqual(replication.configured_remotes(["a", "b", "c"], "a"), {"b", "c"})
        self.assertEqual(replication.configured_remotes(["b"], "a"), set())
