"""Batch index acknowledgements (acknowledgmentAtBatchIndexLevelEnabled) and redelivery counts."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker.batch_acks import BatchIndexAcks, int_to_words, words_to_int
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.messaging import FeatureCase, Sub, messages


def remaining_set(size, acked):
    """The ack_set a client sends: bits of the indexes still unacked (java BitSet words)."""
    return int_to_words(sum(1 << i for i in range(size) if i not in acked))


def with_ack_set(message_id, ack_set):
    mid = api.MessageIdData()
    mid.CopyFrom(message_id)
    mid.ClearField("ack_set")
    mid.ack_set.extend(ack_set)
    return mid


class _MemoryCursor:
    """The cursor methods BatchIndexAcks uses, over a dict (the real cursor is tested in mledger)."""

    def __init__(self):
        self.sets = {}

    def set_batch_deleted_indexes(self, position, bits):
        self.sets[position] = bits
        return defer.succeed(None)

    def batch_deleted_indexes(self, position):
        bits = self.sets.get(position)
        return None if bits is None else int_to_words(bits)

    def batch_deleted_count(self):
        return len(self.sets)


class BitSetTests(unittest.TestCase):
    def test_words_round_trip(self):
        for value in (1, 0b1011, (1 << 63), (1 << 64) - 1, (1 << 130) | 5):
            self.assertEqual(words_to_int(int_to_words(value)), value)
        self.assertEqual(int_to_words(1 << 63), [-(1 << 63)])

    def test_and_of_ack_sets(self):
        """Successive ack sets are ANDed into the cursor; the last index acks the entry whole."""
        cursor = _MemoryCursor()
        acks = BatchIndexAcks(cursor)
        p = Position(1, 2)
        self.assertFalse(acks.ack(p, remaining_set(4, {0})))
        self.assertFalse(acks.ack(p, remaining_set(4, {1, 2})))
        self.assertEqual(acks.ack_set_for(p), remaining_set(4, {0, 1, 2}))
        self.assertTrue(acks)
        self.assertTrue(acks.ack(p, remaining_set(4, {3})))


class BatchIndexAckTests(FeatureCase):
    config = {"acknowledgmentAtBatchIndexLevelEnabled": True}

    def publish_batch(self, size=5, seq=0):
        p = self.harness.client()
        self.create_producer(p, producer_id=seq + 1, name=f"p{seq}")
        self.send(p, seq, producer_id=seq + 1, num_messages=size, num_messages_in_batch=size)

    def exclusive_consumer_and_second_batch(self):
        """An Exclusive consumer (id 1) on a new client, then batches of 2 and 3 published; returns
        the client and the second batch's message id as delivered."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1)
        self.publish_batch(2, seq=0)
        self.publish_batch(3, seq=1)
        got = messages(consumer.received())
        second = got[1][0].message.message_id
        return consumer, second

    def test_partly_acked_batch_redelivered_with_ack_set(self):
        """Redelivery of a batch acked in part carries the unacked indexes; the cursor waits."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.publish_batch(5)
        [(cmd, _)] = messages(consumer.received())
        self.assertEqual(list(cmd.message.ack_set), [])
        mid = cmd.message.message_id
        self.ack(consumer, 1, [with_ack_set(mid, remaining_set(5, {0, 1}))])
        subscription = self.topic_object().subscriptions["s"]
        self.assertEqual(subscription.cursor.mark_delete_position.entry_id, -1)
        self.redeliver(consumer, 1)
        [(again, _)] = messages(consumer.received())
        self.assertEqual(list(again.message.ack_set), remaining_set(5, {0, 1}))
        self.ack(consumer, 1, [with_ack_set(mid, remaining_set(5, {2, 3, 4}))])
        self.assertEqual(subscription.cursor.mark_delete_position.entry_id, 0)
        self.assertFalse(subscription.batch_acks)

    def test_exclusive_rewind_keeps_ack_set(self):
        consumer = self.harness.client()
        self.subscribe(consumer, 1)
        self.publish_batch(3)
        [(cmd, _)] = messages(consumer.received())
        self.ack(consumer, 1, [with_ack_set(cmd.message.message_id, remaining_set(3, {1}))])
        consumer.close()
        consumer = self.harness.client()
        self.subscribe(consumer, 2)
        [(again, _)] = messages(consumer.received())
        self.assertEqual(list(again.message.ack_set), remaining_set(3, {1}))

    def test_plain_ack_acks_whole_entry(self):
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.publish_batch(3)
        [(cmd, _)] = messages(consumer.received())
        self.ack(consumer, 1, [cmd.message.message_id])
        self.assertEqual(self.topic_object().subscriptions["s"].cursor.mark_delete_position.entry_id, 0)

    def test_cumulative_partial_moves_to_previous_entry(self):
        consumer, second = self.exclusive_consumer_and_second_batch()
        self.ack(consumer, 1, [with_ack_set(second, remaining_set(3, {0}))], cumulative=True)
        subscription = self.topic_object().subscriptions["s"]
        self.assertEqual(subscription.cursor.mark_delete_position.entry_id, 0)
        self.assertEqual(subscription.batch_acks.ack_set_for(Position(second.ledgerId, second.entryId)),
                         remaining_set(3, {0}))

    @defer.inlineCallbacks
    def test_partly_acked_batch_survives_broker_restart(self):
        """After a broker restart a partly acked batch comes back with only its unacked indexes."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.publish_batch(5, seq=0)
        self.publish_batch(4, seq=1)
        self.publish_batch(3, seq=2)
        first, second, third = [c.message.message_id for c, _ in messages(consumer.received())]
        self.ack(consumer, 1, [with_ack_set(first, remaining_set(5, {0, 3}))])
        self.ack(consumer, 1, [with_ack_set(first, remaining_set(5, {4}))])
        self.ack(consumer, 1, [with_ack_set(third, remaining_set(3, {1}))])
        # the second batch: every index acked one by one = the entry acked whole
        for i in range(4):
            self.ack(consumer, 1, [with_ack_set(second, remaining_set(4, {i}))])
        self.harness.pump()
        yield self.restart()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        again = {c.message.message_id.entryId: list(c.message.ack_set)
                 for c, _ in messages(consumer.received())}
        self.assertEqual(again, {first.entryId: remaining_set(5, {0, 3, 4}),
                                 third.entryId: remaining_set(3, {1})})
        # acking the rest completes the entries, and that holds across one more restart
        self.ack(consumer, 1, [with_ack_set(first, remaining_set(5, {1, 2}))])
        self.ack(consumer, 1, [third])
        subscription = self.topic_object().subscriptions["s"]
        self.assertEqual(subscription.cursor.mark_delete_position.entry_id, third.entryId)
        self.assertFalse(subscription.batch_acks)
        self.harness.pump()
        yield self.restart()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.assertEqual(messages(consumer.received()), [])

    @defer.inlineCallbacks
    def test_cumulative_partial_survives_restart(self):
        """A cumulative ack ending inside a batch: after a restart only that batch's rest comes back."""
        consumer, second = self.exclusive_consumer_and_second_batch()
        self.ack(consumer, 1, [with_ack_set(second, remaining_set(3, {0, 1}))], cumulative=True)
        self.harness.pump()
        yield self.restart()
        consumer = self.harness.client()
        self.subscribe(consumer, 1)
        [(again, _)] = messages(consumer.received())
        self.assertEqual(again.message.message_id.entryId, second.entryId)
        self.assertEqual(list(again.message.ack_set), remaining_set(3, {0, 1}))

    @defer.inlineCallbacks
    def test_seek_forgets_partial_acks(self):
        """A seek (reset of the cursor) forgets the partial acks, also after a restart."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.publish_batch(3)
        [(cmd, _)] = messages(consumer.received())
        mid = cmd.message.message_id
        self.ack(consumer, 1, [with_ack_set(mid, remaining_set(3, {1}))])
        subscription = self.topic_object().subscriptions["s"]
        yield subscription.seek(Position(mid.ledgerId, 0))
        self.assertFalse(subscription.batch_acks)
        self.harness.pump()
        yield self.restart()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        [(again, _)] = messages(consumer.received())
        self.assertEqual(list(again.message.ack_set), [])


class BatchIndexAckDisabledTests(FeatureCase):
    def test_ack_set_ignored_entry_acked(self):
        """Disabled (the default): an ack with ack_set acks the whole entry, as before."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        p = self.harness.client()
        self.create_producer(p)
        self.send(p, 0, num_messages=3, num_messages_in_batch=3)
        [(cmd, _)] = messages(consumer.received())
        self.ack(consumer, 1, [with_ack_set(cmd.message.message_id, remaining_set(3, {0}))])
        self.assertEqual(self.topic_object().subscriptions["s"].cursor.mark_delete_position.entry_id, 0)


class RedeliveryCountMixin:
    def check_counts(self, kind):
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=kind)
        self.harness.clock.advance(1.0)     # Failover: activeConsumerFailoverDelayTimeMillis
        p = self.harness.client()
        self.create_producer(p)
        self.send(p, 0)
        self.send(p, 1)
        got = messages(consumer.received())
        self.assertEqual([c.message.redelivery_count for c, _ in got], [0, 0])
        first = got[0][0].message.message_id
        for expected in (1, 2):
            self.redeliver(consumer, 1, [first])
            again = messages(consumer.received())
            counts = {c.message.message_id.entryId: c.message.redelivery_count for c, _ in again}
            self.assertEqual(counts[first.entryId], expected)
        return consumer



class RedeliveryCountTests(RedeliveryCountMixin, FeatureCase):
    def test_shared_counts(self):
        self.check_counts(Sub.Shared)

    def test_key_shared_counts(self):
        self.check_counts(Sub.Key_Shared)

    def test_exclusive_and_failover_send_zero(self):
        """Pulsar's single-active dispatchers keep no redelivery tracker: redelivered messages
        of Exclusive and Failover subscriptions come again with redelivery_count 0."""
        consumers = [self.harness.client(), self.harness.client()]
        self.subscribe(consumers[0], 1, kind=Sub.Exclusive, sub="ex")
        self.subscribe(consumers[1], 1, kind=Sub.Failover, sub="fo")
        self.harness.clock.advance(1.0)     # Failover: activeConsumerFailoverDelayTimeMillis
        p = self.harness.client()
        self.create_producer(p)
        self.send(p, 0)
        for consumer in consumers:
            [(cmd, _)] = messages(consumer.received())
            for _ in range(2):
                self.redeliver(consumer, 1, [cmd.message.message_id])
                again = messages(consumer.received())
                self.assertEqual([c.message.redelivery_count for c, _ in again], [0])


class SingleActiveRedeliveryCountTests(RedeliveryCountMixin, FeatureCase):
    config = {"singleActiveConsumerRedeliveryCountEnabled": True}

    def test_exclusive_counts_when_ids_given(self):
        """With the switch, the given ids of Exclusive/Failover count as redelivered."""
        self.check_counts(Sub.Exclusive)

    def test_failover_counts_when_ids_given(self):
        self.check_counts(Sub.Failover)
