"""Chunked messages on the broker: stored and dispatched as entries; refused where Pulsar refuses
them; on Shared subscriptions every chunk of one message goes to one consumer."""

from twisted.trial import unittest
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.messaging import T, FeatureCase, NON_PERSISTENT, Sub, messages, payloads


def chunk_fields(uuid, chunk_id, total):
    return {"uuid": uuid, "chunk_id": chunk_id, "num_chunks_from_msg": total, "total_chunk_msg_size": 30}


class ChunkingTests(FeatureCase):
    def send_chunks(self, p, uuid, total, seq):
        for i in range(total):
            self.send(p, seq, payload=b"%s-%d" % (uuid.encode(), i), is_chunk=True, **chunk_fields(uuid, i, total))

    def test_non_persistent_refuses_chunks(self):
        """A chunk sent to a non-persistent topic: SEND_ERROR NotAllowedError, nothing delivered."""
        p, consumer = self.harness.client(), self.harness.client()
        self.create_producer(p, topic=NON_PERSISTENT)
        self.subscribe(consumer, 1, topic=NON_PERSISTENT)
        consumer.received()
        [error] = self.send(p, 0, is_chunk=True, **chunk_fields("u", 0, 2))
        self.assertEqual((error.type, error.send_error.error), (T.SEND_ERROR, api.NotAllowedError))
        self.assertIn("non-persistent", error.send_error.message)
        self.assertEqual(payloads(consumer.received()), [])
        [ok] = self.send(p, 1)
        self.assertEqual(ok.type, T.SEND_RECEIPT)

    def test_exclusive_gets_chunks_in_order(self):
        p, consumer = self.harness.client(), self.harness.client()
        self.create_producer(p)
        self.subscribe(consumer, 1)
        consumer.received()
        self.send_chunks(p, "a", 3, 0)
        self.assertEqual(payloads(consumer.received()), ["a-0", "a-1", "a-2"])

    def test_shared_sends_all_chunks_of_a_message_to_one_consumer(self):
        """Round robin would split a message's chunks; Pulsar keeps them on one consumer."""
        p, c1, c2 = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(p)
        self.subscribe(c1, 1, kind=Sub.Shared)
        self.subscribe(c2, 2, kind=Sub.Shared)
        c1.received(), c2.received()
        # Interleaved chunks of two messages, as two producers would store them.
        for i in range(3):
            for uuid in ("a", "b"):
                self.send(p, i, payload=b"%s-%d" % (uuid.encode(), i), is_chunk=True,
                          **chunk_fields(uuid, i, 3))
        got1, got2 = payloads(c1.received()), payloads(c2.received())
        self.assertEqual(sorted([got1, got2]), [["a-0", "a-1", "a-2"], ["b-0", "b-1", "b-2"]])
        self.assertEqual(self.topic_object().subscriptions["s"].dispatcher.chunk_owners, {})

    def test_shared_chunk_waits_for_its_consumer(self):
        p, c1, c2 = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(p)
        self.subscribe(c1, 1, kind=Sub.Shared, permits=1)
        self.subscribe(c2, 2, kind=Sub.Shared, permits=10)
        self.send(p, 0, payload=b"a-0", is_chunk=True, **chunk_fields("a", 0, 2))
        self.send(p, 1, payload=b"a-1", is_chunk=True, **chunk_fields("a", 1, 2))
        first, other = (c1, c2) if payloads(c1.received()) == ["a-0"] else (c2, c1)
        self.assertEqual(payloads(other.received()), [])
        if first is c1:
            self.assertEqual(payloads(c1.received()), [])
            c1.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=5)))
            self.assertEqual(payloads(c1.received()), ["a-1"])

    def test_key_shared_chunks_follow_the_key(self):
        p, c1, c2 = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(p)
        self.subscribe(c1, 1, kind=Sub.Key_Shared)
        self.subscribe(c2, 2, kind=Sub.Key_Shared)
        c1.received(), c2.received()
        for i in range(3):
            self.send(p, 0, payload=b"k-%d" % i, is_chunk=True, partition_key="k", **chunk_fields("u", i, 3))
        got = [payloads(c1.received()), payloads(c2.received())]
        self.assertIn(["k-0", "k-1", "k-2"], got)

    def test_chunk_count_as_one_message_each(self):
        p, consumer = self.harness.client(), self.harness.client()
        self.create_producer(p)
        self.subscribe(consumer, 1, permits=2)
        self.send_chunks(p, "a", 3, 0)
        self.assertEqual(len(messages(consumer.received())), 2)


class ChunkOwnerBoundTests(unittest.SynchronousTestCase):
    def test_incomplete_chunked_messages_do_not_pile_up(self):
        """Chunk owners of messages whose last chunk never comes are bounded."""
        from unittest import mock

        from pulsar_twisted.broker.dispatch import shared
        from pulsar_twisted.proto import PulsarApi_pb2 as api

        dispatcher = shared.SharedDispatcher.__new__(shared.SharedDispatcher)
        dispatcher.chunk_owners = {}
        consumer = mock.Mock(closed=False)
        dispatcher.next_consumer = lambda: consumer
        with mock.patch.object(shared, "MAX_CHUNK_OWNERS", 3):
            for i in range(10):
                meta = api.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1,
                                           uuid=f"u{i}", chunk_id=0, num_chunks_from_msg=2)
                self.assertIs(dispatcher._chunk_consumer(meta), consumer)
        self.assertEqual(list(dispatcher.chunk_owners), ["u7", "u8", "u9"])


class DuplicateChunkTests(FeatureCase):
    """With deduplication on, chunks sent again (a producer's or a replicator's resend after a
    reconnect) are not stored twice: the official client drops a message whose chunks come
    0,1,0,1,2 (seen under the two-cluster nemesis, checked with pulsar-client 3.13)."""

    config = {"brokerDeduplicationEnabled": True}

    def send_chunk(self, p, seq, chunk_id, total=3):
        [answer] = self.send(p, seq, payload=b"c%d" % chunk_id, is_chunk=True,
                             **chunk_fields("u", chunk_id, total))
        return answer

    def stored(self):
        topic = self.topic_object()
        entries = self.successResultOf(topic.ledger.read_entries(topic.ledger.first_position(), 100))
        return [frames_payload(e.data) for e in entries]

    def test_resent_chunks_are_answered_not_stored(self):
        p = self.harness.client()
        self.create_producer(p)
        for chunk_id in (0, 1):
            self.assertNotEqual(self.send_chunk(p, 0, chunk_id).send_receipt.message_id.ledgerId,
                                2 ** 64 - 1)
        resent = [self.send_chunk(p, 0, chunk_id) for chunk_id in (0, 1)]
        self.assertEqual([(a.type, a.send_receipt.message_id.entryId) for a in resent],
                         [(T.SEND_RECEIPT, 2 ** 64 - 1)] * 2)
        self.assertEqual(self.send_chunk(p, 0, 2).type, T.SEND_RECEIPT)
        self.assertEqual(self.stored(), [b"c0", b"c1", b"c2"])
        # The next message's chunks are new ones.
        self.send_chunk(p, 1, 0)
        self.assertEqual(self.stored(), [b"c0", b"c1", b"c2", b"c0"])

    def test_known_after_a_restart(self):
        p = self.harness.client()
        self.create_producer(p, name="p")       # the name its messages carry
        self.send_chunk(p, 0, 0)
        self.send_chunk(p, 0, 1)
        self.successResultOf(self.restart())
        p = self.harness.client()
        self.create_producer(p, name="p")
        self.send_chunk(p, 0, 0)
        self.send_chunk(p, 0, 1)
        self.send_chunk(p, 0, 2)
        self.assertEqual(self.stored(), [b"c0", b"c1", b"c2"])


def frames_payload(data):
    from pulsar_twisted.wire import frames
    return frames.split_message(data)[1]
