"""Message deduplication by producer name and sequence id (Pulsar's MessageDeduplication)."""

from twisted.internet import defer

from pulsar_twisted.broker.dedup import DEDUP_CURSOR, DUP, NOT_DUP, UNKNOWN, MessageDeduplication
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.messaging import T, FeatureCase, Sub, payloads

NEG1 = 0xFFFFFFFFFFFFFFFF


def receipts(commands):
    return [c.send_receipt for c in commands if c.type == T.SEND_RECEIPT]


class DedupOnTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True, "brokerDeduplicationEntriesInterval": 3}

    def test_duplicate_answered_not_stored(self):
        """A sequence id not above the last stored one: receipt with id -1:-1, nothing stored."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        [r0] = receipts(self.send(c, 0))
        [r1] = receipts(self.send(c, 1))
        [dup] = receipts(self.send(c, 1))
        self.assertGreaterEqual(r0.message_id.entryId, 0)
        self.assertEqual((dup.sequence_id, dup.message_id.ledgerId, dup.message_id.entryId), (1, NEG1, NEG1))
        [dup0] = receipts(self.send(c, 0))
        self.assertEqual(dup0.message_id.entryId, NEG1)
        self.assertEqual(self.topic_object().ledger.number_of_entries(), 2)
        consumer = self.harness.client()
        self.subscribe(consumer, 1)
        self.assertEqual(payloads(consumer.received()), ["m0", "m1"])

    def test_batch_highest_sequence_id(self):
        """A batch advances its producer to highest_sequence_id; any id inside it is a duplicate."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        [r] = receipts(self.send(c, 0, highest=4, num_messages=5, num_messages_in_batch=5))
        self.assertEqual(r.highest_sequence_id, 4)
        [dup] = receipts(self.send(c, 3))
        self.assertEqual(dup.message_id.entryId, NEG1)
        [ok] = receipts(self.send(c, 5))
        self.assertNotEqual(ok.message_id.entryId, NEG1)

    def test_reconnecting_producer_told_last_sequence_id(self):
        """PRODUCER_SUCCESS.last_sequence_id is the last id stored under that producer name."""
        c = self.harness.client()
        [ok] = self.create_producer(c, name="p")
        self.assertEqual(ok.producer_success.last_sequence_id, -1)
        for seq in range(4):
            self.send(c, seq)
        c.close()
        c2 = self.harness.client()
        [ok] = self.create_producer(c2, name="p")
        self.assertEqual(ok.producer_success.last_sequence_id, 3)
        [dup] = receipts(self.send(c2, 2))
        self.assertEqual(dup.message_id.entryId, NEG1)

    def test_producers_are_independent(self):
        c = self.harness.client()
        self.create_producer(c, producer_id=1, name="a")
        self.create_producer(c, producer_id=2, name="b")
        self.send(c, 5, producer_id=1, producer="a")
        [r] = receipts(self.send(c, 0, producer_id=2, producer="b"))
        self.assertNotEqual(r.message_id.entryId, NEG1)

    @defer.inlineCallbacks
    def test_state_survives_restart(self):
        """Snapshot in the pulsar.dedup cursor + replay of the entries after it on load."""
        c = self.harness.client()
        self.subscribe(self.harness.client(), 9, permits=0)   # keeps the data (no retention)
        self.create_producer(c, name="p")
        for seq in range(5):     # interval 3: a snapshot after the third, two entries after it
            self.send(c, seq)
        cursor = self.topic_object().ledger.cursors[DEDUP_CURSOR]
        self.assertEqual(cursor.mark_delete_properties, {"p": 2})
        yield self.restart()
        c2 = self.harness.client()
        [ok] = self.create_producer(c2, name="p")
        self.assertEqual(ok.producer_success.last_sequence_id, 4)
        [dup] = receipts(self.send(c2, 4))
        self.assertEqual(dup.message_id.entryId, NEG1)
        [new] = receipts(self.send(c2, 5))
        self.assertNotEqual(new.message_id.entryId, NEG1)
        consumer = self.harness.client()
        self.subscribe(consumer, 1)
        self.assertEqual(payloads(consumer.received()), ["m0", "m1", "m2", "m3", "m4", "m5"])

    def test_dedup_cursor_is_not_a_subscription(self):
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        topic = self.topic_object()
        self.assertIn(DEDUP_CURSOR, topic.ledger.cursors)
        self.assertNotIn(DEDUP_CURSOR, topic.subscriptions)

    @defer.inlineCallbacks
    def test_restart_does_not_load_dedup_cursor_as_subscription(self):
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        yield self.restart()
        c2 = self.harness.client()
        self.create_producer(c2, name="p")
        self.assertNotIn(DEDUP_CURSOR, self.topic_object().subscriptions)

    @defer.inlineCallbacks
    def test_turning_off_deletes_cursor_and_stops_dedup(self):
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        topic = self.topic_object()
        yield topic.set_deduplication(False)
        self.harness.pump()
        self.assertNotIn(DEDUP_CURSOR, topic.ledger.cursors)
        [r] = receipts(self.send(c, 0))
        self.assertNotEqual(r.message_id.entryId, NEG1)


    def test_duplicates_in_a_read_answered_in_order(self):
        """A read with new SENDs and duplicates: each answered in SEND order (a duplicate's
        receipt is not sent before the receipt of a new message before it), new ones stored once."""
        from pulsar_twisted.proto import PulsarApi_pb2 as api
        from pulsar_twisted.wire import frames
        from tests.broker.messaging import message
        c = self.harness.client()
        self.create_producer(c, name="p")
        receipts(self.send(c, 0))
        c.send_raw(b"".join(frames.encode_payload_command(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)), message(seq))
            for seq in (1, 0, 2, 1, 3)))
        got = receipts(c.commands())
        self.assertEqual([(r.sequence_id, r.message_id.entryId == NEG1) for r in got],
                         [(1, False), (0, True), (2, False), (1, True), (3, False)])
        self.assertEqual(self.topic_object().ledger.number_of_entries(), 4)


class DedupOffTests(FeatureCase):
    def test_off_by_default(self):
        """brokerDeduplicationEnabled=false: repeated sequence ids are stored; no dedup cursor."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 1)
        [r] = receipts(self.send(c, 1))
        self.assertNotEqual(r.message_id.entryId, NEG1)
        topic = self.topic_object()
        self.assertIsNone(topic.dedup)
        self.assertNotIn(DEDUP_CURSOR, topic.ledger.cursors)

    @defer.inlineCallbacks
    def test_turn_on_live_disconnects_producers(self):
        """Enabling on a live topic recovers what is stored and makes producers reconnect."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        for seq in range(3):
            self.send(c, seq)
        topic = self.topic_object()
        yield topic.set_deduplication(True)
        self.assertEqual([x.type for x in c.commands()], [T.CLOSE_PRODUCER])
        [ok] = self.create_producer(c, producer_id=2, name="p")
        self.assertEqual(ok.producer_success.last_sequence_id, 2)
        [dup] = receipts(self.send(c, 1, producer_id=2))
        self.assertEqual(dup.message_id.entryId, NEG1)


class CheckUnitTests(FeatureCase):
    """The state machine alone: pushed vs persisted ids."""

    def test_unknown_while_first_copy_in_flight(self):
        dedup = MessageDeduplication(self.topic_ledger(), self.harness.config, "t")
        dedup.recovering = False
        self.assertEqual(dedup.check("p", 0, 0), NOT_DUP)
        self.assertEqual(dedup.check("p", 0, 0), UNKNOWN)
        dedup.persisted("p", 0, (1, 0))
        self.assertEqual(dedup.check("p", 0, 0), DUP)

    def test_reset_pushed_falls_back_to_persisted(self):
        """After a failure's writes drained, pushed = persisted: resends of what failed are stored."""
        dedup = MessageDeduplication(self.topic_ledger(), self.harness.config, "t")
        dedup.recovering = False
        self.assertEqual(dedup.check("p", 0, 0), NOT_DUP)
        self.assertEqual(dedup.check("p", 1, 1), NOT_DUP)
        dedup.persisted("p", 0, (1, 0))     # 1 failed
        self.assertEqual(dedup.check("p", 1, 1), UNKNOWN)
        dedup.reset_pushed()
        self.assertEqual(dedup.check("p", 0, 0), DUP)
        self.assertEqual(dedup.check("p", 1, 1), NOT_DUP)

    def test_persisted_above_pushed_is_still_a_duplicate(self):
        """A sequence id at or below persisted is a duplicate whatever pushed says."""
        dedup = MessageDeduplication(self.topic_ledger(), self.harness.config, "t")
        dedup.recovering = False
        dedup.persisted("p", 5, (1, 0))
        self.assertEqual(dedup.check("p", 3, 3), DUP)
        self.assertEqual(dedup.check("p", 6, 6), NOT_DUP)

    def test_negative_one_sequence_id(self):
        """uint64 2**64-1 on the wire is -1 (a producer that never sent)."""
        dedup = MessageDeduplication(self.topic_ledger(), self.harness.config, "t")
        self.assertEqual(dedup.check("p", 0, 0), NOT_DUP)
        self.assertEqual(dedup.check("p", (1 << 64) - 1, (1 << 64) - 1), UNKNOWN)

    def topic_ledger(self):
        c = self.harness.client()
        self.create_producer(c)
        return self.topic_object().ledger


class SubscribeUnaffectedTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    def test_consumer_sees_each_message_once(self):
        c = self.harness.client()
        self.create_producer(c, name="p")
        for seq in (0, 1, 1, 2, 0, 3):
            self.send(c, seq)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.assertEqual(payloads(consumer.received()), ["m0", "m1", "m2", "m3"])


del api


class DedupChunkTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    def chunk(self, c, seq, chunk_id, total=3):
        return receipts(self.send(c, seq, is_chunk=True, uuid=f"u{seq}", chunk_id=chunk_id,
                                  num_chunks_from_msg=total, total_chunk_msg_size=9))

    def test_chunks_share_a_sequence_id(self):
        """Every chunk of a message is stored; only the last counts for deduplication."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        for i in range(3):
            [r] = self.chunk(c, 0, i)
            self.assertNotEqual(r.message_id.entryId, NEG1)
        for i in range(3):
            [dup] = self.chunk(c, 0, i)
            self.assertEqual(dup.message_id.entryId, NEG1)
        self.assertEqual(self.topic_object().dedup.last_sequence_id("p"), 0)


class DedupRecoveryFailureTests(FeatureCase):

    @defer.inlineCallbacks
    def test_bookies_unreachable_is_one_line(self):
        """Recovering the state fails because the bookies cannot be reached (a broker cut off
        from the network, chaos seed 78's partition-broker: BookieTimeoutError): the topic is
        unloaded for a later retry as before, logged in one line, not as an unexpected failure
        with its traceback (the chaos checker counts those as daemon tracebacks). Anything else
        still logs its traceback."""
        from pulsar_twisted.common.bk_errors import BookieUnavailableError
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        for error, logged in ((BookieUnavailableError("bookie b did not answer"), 0),
                              (RuntimeError("a bug"), 1)):
            topic = self.topic_object()
            failed = []
            self.patch(topic.service, "topic_failed", lambda t, why: failed.append(why))
            self.patch(MessageDeduplication, "start", lambda self, e=error: defer.fail(e))
            topic.dedup = None
            yield topic.set_deduplication(True)
            self.assertEqual(len(failed), 1)
            self.assertEqual(len(self.flushLoggedErrors(type(error))), logged)
