"""
Replicated subscriptions on one broker (broker/replicated_subscriptions.py): cluster ``east``
replicating to a fake ``west`` (test_replication's fakes). West's side of the exchange is played
by publishing what west's replicator would send: markers from ``pulsar.repl.west-->east`` with
``replicated_from`` = west.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker import replicated_subscriptions as rsubs
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proto import PulsarMarkers_pb2 as pm
from pulsar_twisted.wire import frames
from tests.broker.test_replication import TOPIC, ReplicationCase

T = api.BaseCommand
Sub = api.CommandSubscribe


class WireFormatTests(unittest.SynchronousTestCase):
    """The marker bodies are Pulsar's (PulsarMarkers.proto field numbers and types)."""

    def test_request_bytes(self):
        body = pm.ReplicatedSubscriptionsSnapshotRequest(snapshot_id="id", source_cluster="c")
        self.assertEqual(body.SerializeToString(), b"\n\x02id\x12\x01c")

    def test_snapshot_bytes(self):
        snapshot = pm.ReplicatedSubscriptionsSnapshot(snapshot_id="s")
        snapshot.local_message_id.ledger_id = 3
        snapshot.local_message_id.entry_id = 4
        cluster = snapshot.clusters.add(cluster="w")
        cluster.message_id.ledger_id = 5
        cluster.message_id.entry_id = 6
        self.assertEqual(snapshot.SerializeToString(),
                         b"\n\x01s\x12\x04\x08\x03\x10\x04\x1a\x09\n\x01w\x12\x04\x08\x05\x10\x06")

    def test_marker_metadata(self):
        data = rsubs.encode_marker(rsubs.RESPONSE, pm.ReplicatedSubscriptionsSnapshotResponse(
            snapshot_id="x"), 1234, replicate_to=("east",))
        metadata = frames.entry_metadata(data)
        self.assertEqual((metadata.producer_name, metadata.sequence_id, metadata.publish_time,
                          metadata.marker_type, list(metadata.replicate_to)),
                         ("pulsar.marker", 0, 1234, 11, ["east"]))


def snapshot_at(ledger_id, entry_id, remote=(9, 9)):
    snapshot = pm.ReplicatedSubscriptionsSnapshot(snapshot_id=f"{ledger_id}:{entry_id}")
    snapshot.local_message_id.ledger_id = ledger_id
    snapshot.local_message_id.entry_id = entry_id
    entry = snapshot.clusters.add(cluster="west")
    entry.message_id.ledger_id, entry.message_id.entry_id = remote
    return snapshot


class SnapshotCacheTests(unittest.SynchronousTestCase):

    def test_newest_passed_is_answered_and_older_dropped(self):
        cache = rsubs.SnapshotCache(10)
        for entry in (5, 10, 15):
            cache.add(snapshot_at(1, entry))
        self.assertIsNone(cache.advanced(Position(1, 4)))
        self.assertEqual(cache.advanced(Position(1, 12)).snapshot_id, "1:10")
        self.assertEqual(len(cache), 1)
        self.assertIsNone(cache.advanced(Position(1, 14)))
        self.assertEqual(cache.advanced(Position(2, 0)).snapshot_id, "1:15")

    def test_out_of_order_snapshots_are_not_kept_but_passed_ones_are(self):
        cache = rsubs.SnapshotCache(10)
        cache.add(snapshot_at(1, 3))
        cache.add(snapshot_at(1, 8))
        cache.add(snapshot_at(1, 7))     # read again after a rewind
        self.assertEqual(len(cache), 2)
        # Already passed when met (a consumer that keeps up): handed on at once.
        self.assertEqual(cache.advanced(Position(1, 9)).snapshot_id, "1:8")

    def test_full_cache_keeps_the_oldest_and_stays_spread(self):
        cache = rsubs.SnapshotCache(4)
        for entry in range(1, 21):
            cache.add(snapshot_at(1, entry))
        kept = [position.entry_id for position, _, _ in cache._items]
        self.assertEqual(len(kept), 4)
        self.assertEqual(kept[0], 1)    # the one nearest the mark-delete stays until passed
        self.assertEqual(kept[-1], 20)  # and the newest
        self.assertEqual(cache.advanced(Position(1, 1)).snapshot_id, "1:1")


class ReplicatedSubscriptionCase(ReplicationCase):
    """East with a replicated subscription ``s`` on TOPIC, a producer, and west's replicator."""

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.harness.config.replicatedSubscriptionsSnapshotFrequencyMillis = 1000
        self.write_policies(replication_clusters=["east", "west"])
        self.client, self.pid = self.producer()
        self.west_client, self.west_pid = self.producer(name="pulsar.repl.west-->east")
        self.west_seq = 0
        self.harness.pump()
        [self.west] = self.remote().producers

    def subscribe(self, sub="s", replicated=True, consumer_id=1, permits=1000):
        consumer = self.harness.client()
        consumer.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=TOPIC, subscription=sub, subType=Sub.Exclusive, consumer_id=consumer_id,
            request_id=500 + consumer_id, initialPosition=Sub.Earliest,
            replicate_subscription_state=replicated)))
        consumer.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id,
                                                          messagePermits=permits)))
        self.harness.pump()
        return consumer

    def from_west(self, marker_type, body, replicate_to=()):
        """What west's replicator sends us: a west marker, ``replicated_from`` west."""
        metadata = api.MessageMetadata(producer_name="pulsar.marker", sequence_id=0,
                                       publish_time=1, marker_type=marker_type,
                                       replicated_from="west")
        metadata.replicate_to.extend(replicate_to)
        self.west_client.send(
            T(type=T.SEND, send=api.CommandSend(producer_id=self.west_pid,
                                                sequence_id=self.west_seq, marker=True)),
            frames.encode_message(metadata, body.SerializeToString()))
        self.west_seq += 1
        self.harness.pump()

    def sent_markers(self, marker_type):
        return [(m, p) for m, p, _, _ in self.west.sent if m.marker_type == marker_type]

    def delivered(self, consumer):
        return [(c.message.message_id.ledgerId, c.message.message_id.entryId, m)
                for c, m in consumer.received() if c.type == T.MESSAGE]

    def answer_request(self, remote_position=(7, 42)):
        """West's answer to east's last request, at west's position ``remote_position``."""
        [(_, body)] = self.sent_markers(rsubs.REQUEST)[-1:]
        request = pm.ReplicatedSubscriptionsSnapshotRequest.FromString(body)
        response = pm.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=request.snapshot_id)
        response.cluster.cluster = "west"
        response.cluster.message_id.ledger_id, response.cluster.message_id.entry_id = \
            remote_position
        self.from_west(rsubs.RESPONSE, response, replicate_to=("east",))
        return request


class ReplicatedSubscriptionTests(ReplicatedSubscriptionCase):

    def test_snapshot_then_update_when_the_mark_delete_passes_it(self):
        consumer = self.subscribe()
        topic = self.topic()
        self.assertIsNotNone(topic.replicated_subscriptions)
        self.assertTrue(topic.subscriptions["s"].replicated)
        for i in range(3):
            self.publish(self.client, self.pid, b"m%d" % i)
        self.clock.advance(1.0)
        self.harness.pump()
        # One request when the subscription came (Pulsar's first tick), one after the data.
        metadata, body = self.sent_markers(rsubs.REQUEST)[-1]
        self.assertEqual(list(metadata.replicate_to), [])
        self.assertEqual(metadata.replicated_from, "east")
        request = self.answer_request((7, 42))
        self.assertEqual(request.source_cluster, "east")
        stats = self.broker.counters.snapshots
        self.assertEqual(stats.completed, 1)
        # The snapshot stays here: west never gets it.
        self.assertEqual(self.sent_markers(rsubs.SNAPSHOT), [])
        delivered = self.delivered(consumer)
        self.assertEqual([m for _, _, m in delivered],
                         [frames.encode_message(api.MessageMetadata(
                             producer_name="p1", sequence_id=i, publish_time=1000000),
                             b"m%d" % i) for i in range(3)])
        ledger, entry, _ = delivered[-1]
        client = consumer
        client.send(T(type=T.ACK, ack=api.CommandAck(
            consumer_id=1, ack_type=api.CommandAck.Cumulative,
            message_id=[api.MessageIdData(ledgerId=ledger, entryId=entry)])))
        self.harness.pump()
        [(metadata, body)] = self.sent_markers(rsubs.UPDATE)
        update = pm.ReplicatedSubscriptionsUpdate.FromString(body)
        self.assertEqual(update.subscription_name, "s")
        self.assertEqual([(c.cluster, c.message_id.ledger_id, c.message_id.entry_id)
                          for c in update.clusters], [("west", 7, 42)])
        # Every marker was acknowledged for the subscription as it passed.
        self.assertEqual(topic.subscriptions["s"].backlog(), 0)

    def test_no_update_before_the_mark_delete_passes_the_snapshot(self):
        consumer = self.subscribe()
        self.publish(self.client, self.pid, b"a")
        self.clock.advance(1.0)
        self.harness.pump()
        self.publish(self.client, self.pid, b"b")       # between the request and the answer
        self.answer_request()
        [a, b] = self.delivered(consumer)

        def ack(delivered):
            consumer.send(T(type=T.ACK, ack=api.CommandAck(
                consumer_id=1, ack_type=api.CommandAck.Individual,
                message_id=[api.MessageIdData(ledgerId=delivered[0], entryId=delivered[1])])))
            self.harness.pump()
        ack(a)
        self.assertEqual(self.sent_markers(rsubs.UPDATE), [])
        ack(b)
        self.assertEqual(len(self.sent_markers(rsubs.UPDATE)), 1)

    def test_no_snapshot_without_new_data_or_with_a_cluster_away(self):
        self.subscribe()
        self.publish(self.client, self.pid, b"a")
        self.clock.advance(1.0)
        self.harness.pump()
        self.answer_request()
        requests = len(self.sent_markers(rsubs.REQUEST))
        self.clock.advance(1.0)
        self.harness.pump()
        self.assertEqual(len(self.sent_markers(rsubs.REQUEST)), requests)  # nothing new since
        self.west.closed = True                                            # west unreachable
        self.publish(self.client, self.pid, b"b")
        self.clock.advance(1.0)
        self.harness.pump()
        self.assertEqual(len(self.sent_markers(rsubs.REQUEST)), requests)

    def test_unanswered_snapshots_time_out(self):
        self.subscribe()
        self.publish(self.client, self.pid, b"a")
        self.clock.advance(1.0)
        self.harness.pump()
        stats = self.broker.counters.snapshots
        started = stats.pending
        first = pm.ReplicatedSubscriptionsSnapshotRequest.FromString(
            self.sent_markers(rsubs.REQUEST)[0][1])
        self.assertGreaterEqual(started, 1)
        for _ in range(31):
            self.clock.advance(1.0)
            self.harness.pump()
        # As Pulsar's: a new attempt each period while none completes, each given up after
        # replicatedSubscriptionsSnapshotTimeoutSeconds.
        self.assertGreaterEqual(stats.timed_out, started)
        self.assertLessEqual(stats.pending, 31)
        # A late answer (to the first request, long given up) is ignored.
        response = pm.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=first.snapshot_id)
        response.cluster.cluster = "west"
        response.cluster.message_id.ledger_id = response.cluster.message_id.entry_id = 1
        self.from_west(rsubs.RESPONSE, response, replicate_to=("east",))
        self.assertEqual(stats.completed, 0)

    def test_a_consumer_that_keeps_up_sends_updates(self):
        """Everything acknowledged before the snapshot marker is read: the dispatcher's ack of
        the answer already moved the mark-delete past the snapshot's position (review)."""
        consumer = self.subscribe()
        self.publish(self.client, self.pid, b"a")
        ledger, entry, _ = self.delivered(consumer)[0]
        consumer.send(T(type=T.ACK, ack=api.CommandAck(
            consumer_id=1, ack_type=api.CommandAck.Individual,
            message_id=[api.MessageIdData(ledgerId=ledger, entryId=entry)])))
        self.harness.pump()
        self.clock.advance(1.0)
        self.harness.pump()
        self.answer_request((7, 42))
        [(_, body)] = self.sent_markers(rsubs.UPDATE)
        update = pm.ReplicatedSubscriptionsUpdate.FromString(body)
        self.assertEqual([(c.cluster, c.message_id.entry_id) for c in update.clusters],
                         [("west", 42)])

    def test_reserved_names(self):
        """No update and no SUBSCRIBE may take a cursor of the broker's own (review)."""
        topic = self.topic()
        self.publish(self.client, self.pid, b"a")
        replicator_cursor = topic.ledger.cursors["pulsar.repl.west"]
        before = replicator_cursor.mark_delete_position
        update = pm.ReplicatedSubscriptionsUpdate(subscription_name="pulsar.repl.west")
        mine = update.clusters.add(cluster="east")
        last = topic.ledger.last_confirmed_entry()
        mine.message_id.ledger_id, mine.message_id.entry_id = last.ledger_id, last.entry_id
        self.from_west(rsubs.UPDATE, update)
        self.assertNotIn("pulsar.repl.west", topic.subscriptions)
        self.assertEqual(replicator_cursor.mark_delete_position, before)
        for name in ("pulsar.repl.west", "pulsar.dedup"):
            consumer = self.subscribe(name, replicated=False, consumer_id=7)
            [error] = consumer.commands(T.ERROR)
            self.assertEqual((error.error.error, error.error.message),
                             (api.ProducerBusy,
                              "Subscription with reserved subscription name attempted"))
            self.assertNotIn(name, topic.subscriptions)

    def test_markers_are_never_delivered_to_any_subscription(self):
        plain = self.subscribe("plain", replicated=False, consumer_id=2)
        self.subscribe()
        self.publish(self.client, self.pid, b"a")
        self.clock.advance(1.0)
        self.harness.pump()
        self.answer_request()
        self.publish(self.client, self.pid, b"b")
        self.assertEqual([frames.split_message(m)[1] for _, _, m in self.delivered(plain)],
                         [b"a", b"b"])
        self.assertEqual(self.topic().subscriptions["plain"].snapshots, None)

    def test_markers_from_west_bypass_deduplication(self):
        self.write_policies(deduplicationEnabled=True)      # producers reconnect
        self.west_client, self.west_pid = self.producer(name="pulsar.repl.west-->east")
        self.subscribe()
        topic = self.topic()
        before = topic.ledger.last_confirmed_entry()
        for _ in range(3):
            self.from_west(rsubs.UPDATE, pm.ReplicatedSubscriptionsUpdate(subscription_name="x"))
        after = topic.ledger.last_confirmed_entry()
        self.assertEqual(after.entry_id - before.entry_id, 3)
        self.assertEqual(topic.counters.msg_in, 0)      # markers are not published data

    def test_an_update_from_west_makes_then_moves_the_subscription(self):
        topic = self.topic()
        for i in range(4):
            self.publish(self.client, self.pid, b"m%d" % i)
        first = topic.ledger.first_position()
        update = pm.ReplicatedSubscriptionsUpdate(subscription_name="failover")
        mine = update.clusters.add(cluster="east")
        mine.message_id.ledger_id, mine.message_id.entry_id = first.ledger_id, first.entry_id + 1
        other = update.clusters.add(cluster="north")
        other.message_id.ledger_id, other.message_id.entry_id = 1, 1
        self.from_west(rsubs.UPDATE, update)
        sub = topic.subscriptions["failover"]
        self.assertTrue(sub.replicated)
        self.assertEqual(sub.mark_delete_position(), Position(first.ledger_id, first.entry_id + 1))
        self.assertEqual(sub.cursor.properties, {rsubs.REPLICATED_PROPERTY: 1})
        mine.message_id.entry_id = first.entry_id + 3
        self.from_west(rsubs.UPDATE, update)
        self.assertEqual(sub.mark_delete_position(), Position(first.ledger_id, first.entry_id + 3))
        # Behind the mark-delete or past the end: nothing moves.
        mine.message_id.entry_id = first.entry_id
        self.from_west(rsubs.UPDATE, update)
        mine.message_id.entry_id = first.entry_id + 1000
        self.from_west(rsubs.UPDATE, update)
        self.assertEqual(sub.mark_delete_position(), Position(first.ledger_id, first.entry_id + 3))

    def test_a_request_from_west_is_answered_with_our_last_position(self):
        self.publish(self.client, self.pid, b"a")
        self.from_west(rsubs.REQUEST, pm.ReplicatedSubscriptionsSnapshotRequest(
            snapshot_id="w1", source_cluster="west"))
        # The request itself is the last entry when the replicator back to west meets it.
        last = self.topic().ledger.last_confirmed_entry()
        last = Position(last.ledger_id, last.entry_id - 1)
        self.assertIsNotNone(self.topic().replicated_subscriptions)
        [(metadata, body)] = self.sent_markers(rsubs.RESPONSE)
        self.assertEqual(list(metadata.replicate_to), ["west"])
        response = pm.ReplicatedSubscriptionsSnapshotResponse.FromString(body)
        self.assertEqual((response.snapshot_id, response.cluster.cluster,
                          response.cluster.message_id.ledger_id,
                          response.cluster.message_id.entry_id),
                         ("w1", "east", last.ledger_id, last.entry_id))

    def test_a_marker_that_does_not_parse_is_ignored(self):
        self.subscribe()
        self.west_client.send(
            T(type=T.SEND, send=api.CommandSend(producer_id=self.west_pid, sequence_id=99)),
            frames.encode_message(api.MessageMetadata(
                producer_name="pulsar.marker", sequence_id=0, publish_time=1,
                marker_type=rsubs.RESPONSE, replicated_from="west"), b"\xff\xff\xff"))
        self.harness.pump()
        self.publish(self.client, self.pid, b"after")
        self.harness.pump()
        self.assertIn(b"after", [p for _, p, _, _ in self.west.sent])

    def test_last_message_id_passes_over_markers(self):
        self.subscribe()
        self.publish(self.client, self.pid, b"a")
        data_position = self.topic().ledger.last_confirmed_entry()
        self.clock.advance(1.0)
        self.harness.pump()
        self.answer_request()
        self.assertGreater(self.topic().ledger.last_confirmed_entry(), data_position)
        last = self.successResultOf(self.topic().last_message_id())
        self.assertEqual(last, (data_position.ledger_id, data_position.entry_id, -1))

    def test_last_message_id_follows_new_markers_and_new_data(self):
        self.publish(self.client, self.pid, b"a")
        a = self.topic().ledger.last_confirmed_entry()
        for _ in range(3):
            self.from_west(rsubs.UPDATE, pm.ReplicatedSubscriptionsUpdate(subscription_name="x"))
            self.assertEqual(self.successResultOf(self.topic().last_message_id())[:2],
                             (a.ledger_id, a.entry_id))
        self.publish(self.client, self.pid, b"b")
        b = self.topic().ledger.last_confirmed_entry()
        self.from_west(rsubs.UPDATE, pm.ReplicatedSubscriptionsUpdate(subscription_name="x"))
        self.assertEqual(self.successResultOf(self.topic().last_message_id())[:2],
                         (b.ledger_id, b.entry_id))

    def test_a_topic_of_markers_only_answers_no_message(self):
        self.from_west(rsubs.UPDATE, pm.ReplicatedSubscriptionsUpdate(subscription_name="x"))
        ledger_id, entry_id, _ = self.successResultOf(self.topic().last_message_id())
        self.assertEqual(entry_id, -1)

    def test_the_flag_survives_a_restart_and_can_be_turned_off(self):
        self.subscribe()
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.subscribe(replicated=False, consumer_id=3)
        sub = self.topic().subscriptions["s"]
        self.assertTrue(sub.replicated)
        self.assertIsNotNone(self.topic().replicated_subscriptions)
        self.successResultOf(sub.set_replicated(False))
        self.assertFalse(sub.replicated)
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.subscribe(replicated=False, consumer_id=4)
        self.assertFalse(self.topic().subscriptions["s"].replicated)

    def test_an_existing_subscription_becomes_replicated(self):
        self.subscribe(replicated=False)
        self.assertFalse(self.topic().subscriptions["s"].replicated)
        self.subscribe(replicated=True, consumer_id=2)
        self.assertTrue(self.topic().subscriptions["s"].replicated)
        self.assertEqual(self.topic().subscriptions["s"].stats()["isReplicated"], True)

    def test_disabled_broker_ignores_the_flag(self):
        self.harness.config.enableReplicatedSubscriptions = False
        self.subscribe()
        self.assertFalse(self.topic().subscriptions["s"].replicated)
        self.assertIsNone(self.topic().replicated_subscriptions)


class ThreeClusterTests(ReplicatedSubscriptionCase):

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.broker.clusters.create("north", {"serviceUrl": "http://north:8080",
                                                    "brokerServiceUrl": "pulsar://north:6650"})
        self.write_policies(replication_clusters=["east", "west", "north"])
        self.harness.pump()

    def test_two_rounds_before_the_snapshot(self):
        self.subscribe()
        self.publish(self.client, self.pid, b"a")
        self.clock.advance(1.0)
        self.harness.pump()
        requests = len(self.sent_markers(rsubs.REQUEST))
        request = self.answer_request()
        stats = self.broker.counters.snapshots
        self.assertEqual(stats.completed, 0)        # north has not answered
        topic = self.topic()
        attempt = topic.replicated_subscriptions.pending[request.snapshot_id]
        self.assertEqual(attempt.missing, {"north"})
        # North's answer, as north's replicator would send it (simulated through the controller).
        response = pm.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=request.snapshot_id)
        response.cluster.cluster = "north"
        response.cluster.message_id.ledger_id = 3
        response.cluster.message_id.entry_id = 4
        controller = topic.replicated_subscriptions
        controller.received_marker(Position(99, 0), rsubs.RESPONSE, response.SerializeToString())
        self.harness.pump()
        self.assertTrue(attempt.first_round_done)
        self.assertEqual(attempt.missing, {"west", "north"})
        self.assertEqual(len(self.sent_markers(rsubs.REQUEST)), requests + 1)
        # North's first answer again (its replicator sent it twice): not the second round's.
        controller.received_marker(Position(99, 9), rsubs.RESPONSE, response.SerializeToString())
        self.assertEqual(attempt.missing, {"west", "north"})
        response.cluster.message_id.entry_id = 8
        controller.received_marker(Position(99, 10), rsubs.RESPONSE, response.SerializeToString())
        self.assertEqual(attempt.missing, {"west"})
        # West's second answer is met last, at a lower position than north's (the replicators
        # run apart): the snapshot takes the highest of the round (review).
        self.answer_request((7, 50))
        self.harness.pump()
        self.assertEqual(stats.completed, 1)
        snapshots = [rsubs.parse_snapshot(e.data) for e in self.successResultOf(
            topic.ledger.read_entries(topic.ledger.first_position(), 1000))
            if frames.entry_metadata(e.data).marker_type == rsubs.SNAPSHOT]
        [snapshot] = snapshots
        self.assertEqual((snapshot.local_message_id.ledger_id, snapshot.local_message_id.entry_id),
                         (99, 10))
        # The first round's positions are the ones kept.
        self.assertEqual({c.cluster: c.message_id.entry_id for c in snapshot.clusters},
                         {"west": 42, "north": 4})
