"""
The four subscription types, acks and redelivery on persistent topics, as Pulsar behaves, driven
through real broker connections (StringTransport) over the managed ledger on a fake ledger client.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from tests.broker.messaging import harness_with_producer

T = api.BaseCommand
Sub = api.CommandSubscribe
TOPIC = "persistent://public/default/t"


def message(seq, key=None, batch=None):
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq)
    if key is not None:
        meta.partition_key = key
    if batch is not None:
        meta.num_messages_in_batch = batch
    return frames.encode_message(meta, b"m%d" % seq)


def payloads(frames_list):
    return [frames.split_message(m)[1].decode() for c, m in frames_list if c.type == T.MESSAGE]


class Base(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness, self.producer, answers = yield harness_with_producer(TOPIC)
        self.assertEqual(len(answers), 1)
        self.seq = 0

    def publish(self, n=1, key=None, batch=None):
        receipts = []
        for _ in range(n):
            self.producer.send(T(type=T.SEND, send=api.CommandSend(
                producer_id=1, sequence_id=self.seq, num_messages=batch or 1)), message(self.seq, key, batch))
            self.seq += 1
        for c in self.producer.commands():
            if c.type == T.SEND_RECEIPT:
                receipts.append(c.send_receipt)
        return receipts

    def subscribe(self, client, consumer_id, kind=Sub.Exclusive, sub="s", name=None, priority=0,
                  initial=Sub.Latest, permits=0, key_shared_meta=None):
        request = api.CommandSubscribe(topic=TOPIC, subscription=sub, subType=kind, consumer_id=consumer_id,
                                       request_id=1000 + consumer_id, consumer_name=name or f"c{consumer_id}",
                                       priority_level=priority, initialPosition=initial)
        if key_shared_meta is not None:
            request.keySharedMeta.CopyFrom(key_shared_meta)
        client.send(T(type=T.SUBSCRIBE, subscribe=request))
        if permits:
            self.flow(client, consumer_id, permits)

    def flow(self, client, consumer_id, permits):
        client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))

    def ack(self, client, consumer_id, msg_frames, cumulative=False, request_id=None):
        ids = [c.message.message_id for c, m in msg_frames if c.type == T.MESSAGE]
        ack = api.CommandAck(consumer_id=consumer_id, ack_type=api.CommandAck.Cumulative if cumulative
                             else api.CommandAck.Individual, message_id=ids[-1:] if cumulative else ids)
        if request_id is not None:
            ack.request_id = request_id
        client.send(T(type=T.ACK, ack=ack))


class ProducerTests(Base):
    def test_receipts_ordered_ids(self):
        """Receipts carry (ledger, entry) ids increasing per topic."""
        receipts = self.publish(5)
        ids = [(r.message_id.ledgerId, r.message_id.entryId) for r in receipts]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), 5)
        self.assertEqual([r.sequence_id for r in receipts], list(range(5)))

    def test_producer_name_in_use_refused(self):
        c = self.harness.client()
        for pid in (1, 2):
            c.send(T(type=T.PRODUCER, producer=api.CommandProducer(
                topic=TOPIC, producer_id=pid, request_id=10 + pid, producer_name="named")))
        replies = c.commands()
        self.assertEqual(replies[0].type, T.PRODUCER_SUCCESS)
        self.assertEqual((replies[1].type, replies[1].error.error), (T.ERROR, api.ProducerBusy))

    def test_checksum_mismatch_refused_nothing_stored(self):
        bad = bytearray(message(0))
        bad[-1] ^= 0xFF
        self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=0)), bytes(bad))
        [err] = self.producer.commands(T.SEND_ERROR)
        self.assertEqual(err.send_error.error, api.ChecksumError)
        topic = self.harness.broker.topics[TOPIC]
        self.assertEqual(topic.ledger.number_of_entries(), 0)

    def test_send_for_unknown_producer(self):
        self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=99, sequence_id=0)), message(0))
        [err] = self.producer.commands(T.SEND_ERROR)
        self.assertEqual(err.send_error.producer_id, 99)


class ExclusiveTests(Base):
    def test_second_consumer_busy(self):
        c = self.harness.client()
        self.subscribe(c, 1)
        self.subscribe(c, 2)
        replies = c.commands()
        self.assertEqual([r.type for r in replies], [T.SUCCESS, T.ERROR])
        self.assertEqual(replies[1].error.error, api.ConsumerBusy)

    def test_permits_bound_delivery(self):
        """A consumer never gets more messages than its permits; batches count per message."""
        c = self.harness.client()
        self.subscribe(c, 1, permits=3)
        c.received()
        self.publish(5)
        self.assertEqual(payloads(c.received()), ["m0", "m1", "m2"])
        self.flow(c, 1, 2)
        self.assertEqual(payloads(c.received()), ["m3", "m4"])

    def test_earliest_and_latest(self):
        self.publish(3)
        early, late = self.harness.client(), self.harness.client()
        self.subscribe(early, 1, sub="e", initial=Sub.Earliest, permits=100)
        self.subscribe(late, 2, sub="l", initial=Sub.Latest, permits=100)
        self.publish(1)
        self.assertEqual(payloads(early.received()), ["m0", "m1", "m2", "m3"])
        self.assertEqual(payloads(late.received()), ["m3"])

    def test_unacked_redelivered_to_next_consumer(self):
        c = self.harness.client()
        self.subscribe(c, 1, permits=10)
        self.publish(4)
        got = c.received()
        self.ack(c, 1, [f for f in got if f[0].type == T.MESSAGE][:1])
        c.close()
        c2 = self.harness.client()
        self.subscribe(c2, 2, permits=10)
        self.assertEqual(payloads(c2.received()), ["m1", "m2", "m3"])

    def test_cumulative_ack(self):
        c = self.harness.client()
        self.subscribe(c, 1, permits=10)
        self.publish(4)
        got = [f for f in c.received() if f[0].type == T.MESSAGE]
        self.ack(c, 1, got[:3], cumulative=True, request_id=7)
        [resp] = c.commands(T.ACK_RESPONSE)
        self.assertEqual(resp.ackResponse.request_id, 7)
        self.assertFalse(resp.ackResponse.HasField("error"))
        c.close()
        c2 = self.harness.client()
        self.subscribe(c2, 2, permits=10)
        self.assertEqual(payloads(c2.received()), ["m3"])


class FailoverTests(Base):
    def test_active_consumer_by_priority_and_name(self):
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(b, 2, Sub.Failover, name="b", permits=10)
        self.subscribe(a, 1, Sub.Failover, name="a", priority=1, permits=10)
        self.harness.clock.advance(2)
        self.publish(3)
        got_b = b.received()
        changes_b = [c.active_consumer_change.is_active for c, _ in got_b if c.type == T.ACTIVE_CONSUMER_CHANGE]
        self.assertTrue(changes_b[-1])
        got_a = a.received()
        self.assertEqual([c.active_consumer_change.is_active for c, _ in got_a
                          if c.type == T.ACTIVE_CONSUMER_CHANGE], [False])
        self.assertEqual(payloads(got_a), [])
        self.assertEqual(payloads(got_b), ["m0", "m1", "m2"])

    def test_switch_on_disconnect_with_unacked(self):
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, Sub.Failover, name="a", permits=10)
        self.subscribe(b, 2, Sub.Failover, name="b", permits=10)
        self.harness.clock.advance(1.0)     # activeConsumerFailoverDelayTimeMillis
        self.publish(3)
        got_a = [f for f in a.received() if f[0].type == T.MESSAGE]
        got_b = [f for f in b.received() if f[0].type == T.MESSAGE]
        # The topic's name picks one of the two (Pulsar's ring); the other gets nothing.
        (active, active_id, got), other = ((a, 1, got_a), b) if got_a else ((b, 2, got_b), a)
        self.assertEqual(payloads(got_a + got_b), ["m0", "m1", "m2"])
        self.ack(active, active_id, got[:1])
        other.received()
        active.close()
        self.assertEqual(payloads(other.received()), [])    # the switch waits for the delay
        self.harness.clock.advance(1.0)
        replies = other.received()
        changes = [c.active_consumer_change.is_active for c, _ in replies if c.type == T.ACTIVE_CONSUMER_CHANGE]
        self.assertEqual(changes, [True])
        self.assertEqual(payloads(replies), ["m1", "m2"])


class SharedTests(Base):
    def test_round_robin(self):
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, Sub.Shared, permits=10)
        self.subscribe(b, 2, Sub.Shared, permits=10)
        self.publish(6)
        pa, pb = payloads(a.received()), payloads(b.received())
        self.assertEqual(sorted(pa + pb), sorted(f"m{i}" for i in range(6)))
        self.assertEqual(len(pa), 3)

    def test_leaving_consumer_messages_go_to_others_with_count(self):
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, Sub.Shared, permits=2)
        self.publish(2)
        self.assertEqual(payloads(a.received()), ["m0", "m1"])
        self.subscribe(b, 2, Sub.Shared, permits=10)
        a.close()
        got = [(c.message.redelivery_count, frames.split_message(m)[1]) for c, m in b.received()
               if c.type == T.MESSAGE]
        self.assertEqual(got, [(1, b"m0"), (1, b"m1")])

    def test_cumulative_ack_refused(self):
        a = self.harness.client()
        self.subscribe(a, 1, Sub.Shared, permits=10)
        self.publish(1)
        got = [f for f in a.received() if f[0].type == T.MESSAGE]
        self.ack(a, 1, got, cumulative=True, request_id=3)
        [resp] = a.commands(T.ACK_RESPONSE)
        self.assertEqual(resp.ackResponse.error, api.NotAllowedError)

    def test_redeliver_unacknowledged(self):
        a = self.harness.client()
        self.subscribe(a, 1, Sub.Shared, permits=10)
        self.publish(2)
        got = [f for f in a.received() if f[0].type == T.MESSAGE]
        a.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=
                 api.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=[got[1][0].message.message_id])))
        again = [(c.message.redelivery_count, frames.split_message(m)[1]) for c, m in a.received()
                 if c.type == T.MESSAGE]
        self.assertEqual(again, [(1, b"m1")])


class KeySharedTests(Base):
    def test_one_key_one_consumer_in_order(self):
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, Sub.Key_Shared, name="a", permits=1000)
        self.subscribe(b, 2, Sub.Key_Shared, name="b", permits=1000)
        for i in range(40):
            self.publish(1, key=f"k{i % 8}")
        owners = {}
        for consumer, client in (("a", a), ("b", b)):
            for c, m in client.received():
                if c.type == T.MESSAGE:
                    key = api.MessageMetadata.FromString(frames.split_message(m)[0]).partition_key
                    owners.setdefault(key, set()).add(consumer)
        self.assertEqual(len(owners), 8)
        self.assertTrue(all(len(v) == 1 for v in owners.values()))

    def test_sticky_overlapping_ranges_refused(self):
        meta = api.KeySharedMeta(keySharedMode=api.STICKY, hashRanges=[api.IntRange(start=0, end=100)])
        a = self.harness.client()
        self.subscribe(a, 1, Sub.Key_Shared, key_shared_meta=meta)
        self.subscribe(a, 2, Sub.Key_Shared, key_shared_meta=meta)
        replies = a.commands()
        self.assertEqual(replies[1].error.error, api.ConsumerAssignError)

    def test_new_consumer_waits_for_earlier_messages_of_its_keys(self):
        """Keys moving to a newcomer are held until what the old owner holds is acked."""
        a = self.harness.client()
        self.subscribe(a, 1, Sub.Key_Shared, name="a", permits=1000)
        for i in range(20):
            self.publish(1, key=f"k{i}")
        first = [f for f in a.received() if f[0].type == T.MESSAGE]
        self.assertEqual(len(first), 20)
        b = self.harness.client()
        self.subscribe(b, 2, Sub.Key_Shared, name="b", permits=1000)
        for i in range(20):
            self.publish(1, key=f"k{i}")
        self.assertEqual(payloads(b.received()), [])
        self.ack(a, 1, first)
        later_b = payloads(b.received())
        later_a = payloads(a.received())
        self.assertEqual(len(later_a) + len(later_b), 20)
        self.assertTrue(later_b)


class DurabilityTests(Base):
    @defer.inlineCallbacks
    def test_acks_survive_broker_restart(self):
        """Individually acked messages are not redelivered after a restart; unacked ones are."""
        c = self.harness.client()
        self.subscribe(c, 1, Sub.Shared, permits=10)
        self.publish(5)
        got = [f for f in c.received() if f[0].type == T.MESSAGE]
        self.ack(c, 1, [got[0], got[2], got[4]], request_id=5)
        self.assertEqual(len(c.commands(T.ACK_RESPONSE)), 1)
        harness = self.harness.restart()
        yield harness.start()
        c2 = harness.client()
        c2.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=TOPIC, subscription="s", subType=Sub.Shared, consumer_id=1, request_id=1)))
        c2.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10)))
        self.assertEqual(payloads(c2.received()), ["m1", "m3"])

    def test_last_message_id_and_batches(self):
        c = self.harness.client()
        self.subscribe(c, 1, permits=10)
        self.publish(1, batch=4)
        c.send(T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=api.CommandGetLastMessageId(consumer_id=1, request_id=9)))
        [r] = c.commands(T.GET_LAST_MESSAGE_ID_RESPONSE)
        self.assertEqual(r.getLastMessageIdResponse.last_message_id.batch_index, 3)

    def test_seek_rewinds_and_disconnects(self):
        c = self.harness.client()
        self.subscribe(c, 1, permits=10)
        receipts = self.publish(3)
        got = [f for f in c.received() if f[0].type == T.MESSAGE]
        self.ack(c, 1, got, cumulative=True)
        c.send(T(type=T.SEEK, seek=api.CommandSeek(consumer_id=1, request_id=11,
                                                    message_id=receipts[1].message_id)))
        replies = c.commands()
        self.assertEqual([r.type for r in replies], [T.CLOSE_CONSUMER, T.SUCCESS])
        self.subscribe(c, 2, permits=10)
        self.assertEqual(payloads(c.received()), ["m1", "m2"])

    def test_unsubscribe_deletes_cursor(self):
        c = self.harness.client()
        self.subscribe(c, 1, permits=10)
        c.received()
        c.send(T(type=T.UNSUBSCRIBE, unsubscribe=api.CommandUnsubscribe(consumer_id=1, request_id=12)))
        [ok] = c.commands(T.SUCCESS)
        self.assertEqual(ok.success.request_id, 12)
        topic = self.harness.broker.topics[TOPIC]
        self.assertNotIn("s", topic.subscriptions)
        self.assertNotIn("s", topic.ledger.cursors)


class InitialSubscriptionTests(Base):
    def test_producer_creates_initial_subscription_at_earliest(self):
        """PRODUCER.initial_subscription_name creates that durable subscription (DLQ producers)."""
        self.publish(2)
        c = self.harness.client()
        c.send(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic=TOPIC, producer_id=7, request_id=70, initial_subscription_name="init")))
        self.assertEqual(len(c.commands(T.PRODUCER_SUCCESS)), 1)
        self.assertIn("init", self.harness.broker.topics[TOPIC].subscriptions)
        self.subscribe(c, 8, sub="init", permits=10)
        self.assertEqual(payloads(c.received()), ["m0", "m1"])


class UnloadWithPublishesInFlightTests(Base):
    def test_receipts_before_close_producer(self):
        """Unloading a topic answers the publishes in flight before CLOSE_PRODUCER (no resends)."""
        self.harness.ledger_client.pause_adds()
        for seq in range(3):
            self.producer.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)),
                               message(seq))
        topic = self.harness.broker.topics[TOPIC]
        closing = topic.close()
        self.assertEqual(self.producer.commands(), [])
        self.harness.ledger_client.resume_adds()
        self.harness.pump()
        self.successResultOf(closing)
        kinds = [(c.type, c.send_receipt.sequence_id if c.type == T.SEND_RECEIPT else None)
                 for c in self.producer.commands()]
        self.assertEqual(kinds, [(T.SEND_RECEIPT, 0), (T.SEND_RECEIPT, 1), (T.SEND_RECEIPT, 2),
                                 (T.CLOSE_PRODUCER, None)])


class RedeliveryCountPruningTests(Base):
    def test_counts_of_acknowledged_messages_are_swept(self):
        """Redelivery counts of messages acknowledged behind the subscription's back do not pile up
        (Exclusive counts only with singleActiveConsumerRedeliveryCountEnabled)."""
        self.harness.broker.config.singleActiveConsumerRedeliveryCountEnabled = True
        c = self.harness.client()
        self.subscribe(c, 1, permits=100)
        self.publish(5)
        got = [f for f in c.received() if f[0].type == T.MESSAGE]
        sub = self.harness.broker.topics[TOPIC].subscriptions["s"]
        ids = [f[0].message.message_id for f in got]
        c.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=
                 api.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=ids)))
        self.assertEqual(len(sub.redelivery_counts), 5)
        # An admin skip: the cursor moves without acknowledge().
        self.successResultOf(sub.cursor.skip_unacked(3))
        sub.PRUNE_COUNTS_ABOVE = 0
        c.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=
                 api.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=ids[3:])))
        self.assertEqual(sorted(sub.redelivery_counts.values()), [2, 2])
