"""
A failed write fences the topic (Pulsar's PersistentTopic.addFailed): nothing is stored after a
message that was not, producers are closed with CLOSE_PRODUCER (never a SEND_ERROR), and their
resends after reconnecting are stored in sequence order; deduplication never acknowledges a
message that is not stored.
"""

from twisted.internet import defer

from pulsar_twisted.broker.dedup import DEDUP_CURSOR, MessageDeduplication
from pulsar_twisted.common.bk_errors import BKException, LedgerFencedError
from pulsar_twisted.proto import PulsarApi_pb2 as api

from pulsar_twisted.testing.broker import BrokerHarness

from tests.broker.messaging import T, FeatureCase, payloads

NEG1 = 0xFFFFFFFFFFFFFFFF


def kinds(commands):
    return [c.type for c in commands]


def producer_before_failing_add(case):
    """On ``case`` (a FeatureCase): a producer "p" on a new client that stored m0; then adds are held
    and the next one fails. Returns the client and the ledger client (to resume its adds)."""
    c = case.harness.client()
    case.create_producer(c, name="p")
    case.send(c, 0)
    ledger_client = case.harness.ledger_client
    ledger_client.pause_adds()
    ledger_client.fail_next_adds(1)
    return c, ledger_client


class WriteFailureFencingTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    checks = 0

    def stored(self):
        """Payloads stored in the topic, in order (read back through a new subscription)."""
        self.checks += 1
        consumer = self.harness.client()
        self.subscribe(consumer, 77, sub=f"check-{self.checks}")
        return payloads(consumer.received())

    def test_failed_add_closes_producer_without_send_error(self):
        """The failed publish and those behind it: no SEND_ERROR, one CLOSE_PRODUCER, none stored."""
        c, ledger_client = producer_before_failing_add(self)
        self.assertEqual(self.send(c, 1), [])
        self.assertEqual(self.send(c, 2), [])
        ledger_client.resume_adds()
        answers = c.commands()
        self.assertEqual(kinds(answers), [T.CLOSE_PRODUCER])
        self.assertEqual(self.stored(), ["m0"])

    def send_read(self, c, seqs):
        """SENDs of ``seqs`` in one read (one ``dataReceived``); returns the commands back."""
        from pulsar_twisted.wire import frames
        from tests.broker.messaging import message
        c.send_raw(b"".join(frames.encode_payload_command(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)), message(seq))
            for seq in seqs))
        return c.commands()

    def test_add_failing_at_once_in_a_read(self):
        """An add of a read's SENDs that fails at once fences the topic before the next SEND of
        that read is stored, as one SEND at a time: none after it is stored or answered, and the
        resends after reconnecting are all stored, in order (deduplication acknowledges none)."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        self.harness.ledger_client.fail_next_adds(1)
        self.assertEqual(kinds(self.send_read(c, [1, 2, 3])), [T.CLOSE_PRODUCER])
        self.assertEqual(self.stored(), ["m0"])
        [ok] = self.create_producer(c, name="p", request_id=200)
        self.assertEqual(ok.producer_success.last_sequence_id, 0)
        receipts = self.send_read(c, [1, 2, 3])
        self.assertEqual([r.send_receipt.sequence_id for r in receipts], [1, 2, 3])
        self.assertNotIn(NEG1, [r.send_receipt.message_id.entryId for r in receipts])
        self.assertEqual(self.stored(), ["m0", "m1", "m2", "m3"])

    def test_refusal_in_a_read_after_an_add_failing_at_once(self):
        """A read whose first SEND fails at once (closing the producer) and whose next SENDs the
        connection refuses (bad checksum, no message part): as one SEND at a time, those find
        the producer closed and are dropped, not answered; the client sees CLOSE_PRODUCER only."""
        from pulsar_twisted.wire import frames
        from tests.broker.messaging import message
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        bad = bytearray(message(2))
        bad[-1] ^= 0xFF
        read = (frames.encode_payload_command(
                    T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=1)), message(1))
                + frames.encode_payload_command(
                    T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=2)), bytes(bad))
                + frames.encode_command(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=3))))
        self.harness.ledger_client.fail_next_adds(1)
        c.send_raw(read)
        self.assertEqual(kinds(c.commands()), [T.CLOSE_PRODUCER])
        self.assertEqual(self.stored(), ["m0"])

    def test_ledger_fenced_at_once_in_a_read(self):
        """A read's first SEND whose write fails at once because another owner fenced the ledger
        (the topic unloads itself, closing the producer): as one SEND at a time, the later SENDs
        of the read find the producer closed and are dropped, not answered with a SEND_ERROR
        (the official client drops its connection on one); nothing after it is stored."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        self.harness.ledger_client.fail_next_adds(1, LedgerFencedError)
        self.assertEqual(kinds(self.send_read(c, [1, 2, 3])), [T.CLOSE_PRODUCER])

    def test_resends_after_reconnect_are_stored_in_order(self):
        """The client resends everything unacknowledged: stored once each, in sequence order."""
        c, ledger_client = producer_before_failing_add(self)
        self.send(c, 1)
        self.send(c, 2)
        ledger_client.resume_adds()
        self.assertEqual(kinds(c.commands()), [T.CLOSE_PRODUCER])
        # A SEND the client had in flight before it saw CLOSE_PRODUCER: ignored, not stored.
        self.assertEqual(self.send(c, 3), [])
        [ok] = self.create_producer(c, name="p", request_id=200)
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)
        self.assertEqual(ok.producer_success.last_sequence_id, 0)
        for seq in (1, 2, 3):
            [receipt] = self.send(c, seq)
            self.assertEqual(receipt.type, T.SEND_RECEIPT)
            self.assertNotEqual(receipt.send_receipt.message_id.entryId, NEG1,
                                f"sequence id {seq} acknowledged as a duplicate, never stored")
        self.assertEqual(self.stored(), ["m0", "m1", "m2", "m3"])

    def test_nothing_written_while_fenced(self):
        """Fenced with an add in flight: a later SEND is neither stored nor answered; the add in
        flight is answered, then CLOSE_PRODUCER; unfenced once it is done."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        topic = self.topic_object()
        ledger_client = self.harness.ledger_client
        ledger_client.pause_adds()
        self.send(c, 0)
        topic.fence("test")
        self.assertTrue(topic.fenced)
        self.assertEqual(self.send(c, 1), [])
        other = self.harness.client()
        [refused] = self.create_producer(other, name="q")
        self.assertEqual((refused.type, refused.error.error), (T.ERROR, api.ServiceNotReady))
        ledger_client.resume_adds()
        answers = c.commands()
        self.assertEqual(kinds(answers), [T.SEND_RECEIPT, T.CLOSE_PRODUCER])
        self.assertEqual(answers[0].send_receipt.sequence_id, 0)
        self.assertFalse(topic.fenced)
        self.assertEqual(self.stored(), ["m0"])
        [ok] = self.create_producer(c, name="p", request_id=201)
        self.assertEqual(ok.producer_success.last_sequence_id, 0)
        [receipt] = self.send(c, 1)
        self.assertNotEqual(receipt.send_receipt.message_id.entryId, NEG1)
        self.assertEqual(self.stored(), ["m0", "m1"])

    def test_every_producer_of_the_topic_is_closed(self):
        a, b = self.harness.client(), self.harness.client()
        self.create_producer(a, name="a")
        self.create_producer(b, name="b")
        self.harness.ledger_client.fail_next_adds(1)
        self.assertEqual(kinds(self.send(a, 0, producer="a")), [T.CLOSE_PRODUCER])
        self.assertEqual(kinds(b.commands()), [T.CLOSE_PRODUCER])
        self.assertEqual(self.topic_object().producers, {})

    def test_failing_storage_keeps_fencing_then_resumes(self):
        """With writes failing again and again, each attempt fences; once storage is back the
        resends are stored (the topic is never stuck fenced)."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        ledger_client = self.harness.ledger_client
        for attempt in range(3):
            ledger_client.fail_next_adds(1)
            self.assertEqual(kinds(self.send(c, 0)), [T.CLOSE_PRODUCER])
            self.assertFalse(self.topic_object().fenced)
            self.create_producer(c, name="p", request_id=300 + attempt)
        [receipt] = self.send(c, 0)
        self.assertNotEqual(receipt.send_receipt.message_id.entryId, NEG1)
        self.assertEqual(self.stored(), ["m0"])

    def test_ledger_fenced_by_new_owner_unloads_topic(self):
        """ManagedLedgerFencedError (another broker owns the ledger): the topic is unloaded here."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        topic = self.topic_object()
        self.harness.ledger_client.fail_next_adds(1, error=LedgerFencedError)
        self.assertEqual(kinds(self.send(c, 1)), [T.CLOSE_PRODUCER])
        self.assertTrue(topic.closed)
        self.assertNotIn(self.topic, self.harness.broker.topics)
        self.assertIsNone(self.harness.ml_factory.get(topic.ledger.name))


class DedupRecoveryFailureTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    @defer.inlineCallbacks
    def test_unrecoverable_dedup_state_fails_the_load(self):
        """Recovering the dedup state fails: the load fails (retriable), dedup is never turned
        off; the next load recovers it."""
        c = self.harness.client()
        self.subscribe(self.harness.client(), 9, permits=0)    # keeps the entries
        self.create_producer(c, name="p")
        for seq in range(3):
            self.send(c, seq)
        yield self.restart()
        # The replay's read fails (a bookie error), once.
        replay = MessageDeduplication._replay
        calls = []

        async def failing_replay(dedup, after):
            calls.append(after)
            if len(calls) == 1:
                raise BKException("injected read failure")
            return await replay(dedup, after)
        self.patch(MessageDeduplication, "_replay", failing_replay)
        c2 = self.harness.client()
        [refused] = self.create_producer(c2, name="p")
        self.assertEqual((refused.type, refused.error.error), (T.ERROR, api.ServiceNotReady))
        self.assertNotIn(self.topic, self.harness.broker.topics)
        # A bookie error is an outage, logged in one line, not a logged failure with a traceback.
        self.assertEqual(self.flushLoggedErrors(BKException), [])
        [ok] = self.create_producer(c2, name="p", request_id=400)
        self.assertEqual(ok.producer_success.last_sequence_id, 2)
        [dup] = [x for x in self.send(c2, 2) if x.type == T.SEND_RECEIPT]
        self.assertEqual(dup.send_receipt.message_id.entryId, NEG1)
        self.assertIn(DEDUP_CURSOR, self.topic_object().ledger.cursors)


class TakenOverTests(FeatureCase):
    """Another broker opened the managed ledger (recovery fences ours): this broker unloads."""

    def test_other_owner_fences_and_unloads_the_topic(self):
        self.subscribe(self.harness.client(), 9, permits=0)    # keeps the entries
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        topic = self.topic_object()
        other = BrokerHarness(clock=self.clock, store=self.harness.store,
                              ledger_client=self.harness.ledger_client)
        self.successResultOf(other.start())
        self.successResultOf(other.ml_factory.open(topic.ledger.name))
        answers = self.send(c, 1)
        self.assertEqual(kinds(answers), [T.CLOSE_PRODUCER])
        self.assertTrue(topic.closed)
        self.assertNotIn(self.topic, self.harness.broker.topics)
        self.assertIsNone(self.harness.ml_factory.get(topic.ledger.name))
        # The new owner holds m0 only: nothing was written after the takeover.
        reader = other.client()
        reader.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=self.topic, subscription="after", subType=api.CommandSubscribe.Exclusive,
            consumer_id=1, request_id=1, initialPosition=api.CommandSubscribe.Earliest)))
        reader.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10)))
        self.assertEqual(payloads(reader.received()), ["m0"])


class FailureDuringRolloverTests(FeatureCase):
    """The add that fills a ledger fails while the next publishes wait for the next ledger."""

    config = {"brokerDeduplicationEnabled": True, "managedLedgerMaxEntriesPerLedger": 2,
              "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def test_publishes_queued_behind_a_failed_add_are_not_stored(self):
        """m1 (the ledger's last entry) fails, m2 waits for the next ledger: m2 is not stored
        either, so the resend of m1 is stored and not answered as a duplicate of m2."""
        c, ledger_client = producer_before_failing_add(self)
        self.assertEqual(self.send(c, 1), [])
        self.assertEqual(self.send(c, 2), [])
        ledger_client.resume_adds()
        self.assertEqual(kinds(c.commands()), [T.CLOSE_PRODUCER])
        [ok] = self.create_producer(c, name="p", request_id=200)
        self.assertEqual(ok.producer_success.last_sequence_id, 0)
        for seq in (1, 2):
            [receipt] = self.send(c, seq)
            self.assertNotEqual(receipt.send_receipt.message_id.entryId, NEG1,
                                f"sequence id {seq} acknowledged as a duplicate, never stored")
        consumer = self.harness.client()
        self.subscribe(consumer, 77, sub="check")
        self.assertEqual(payloads(consumer.received()), ["m0", "m1", "m2"])


class ReloadWhileClosingTests(FeatureCase):
    """A topic unloaded with an add in flight and loaded again before its managed ledger closed."""

    def test_reloaded_topic_writes_to_a_new_managed_ledger(self):
        consumer = self.harness.client()
        self.subscribe(consumer, 77, sub="check", permits=0)    # keeps the entries
        c = self.harness.client()
        self.create_producer(c, name="p")
        self.send(c, 0)
        old = self.topic_object()
        ledger_client = self.harness.ledger_client
        ledger_client.pause_adds()
        self.send(c, 1)
        self.harness.broker.unload_topic(self.topic)
        c2 = self.harness.client()
        self.create_producer(c2, name="q")      # loads the topic again: waits for the close
        ledger_client.resume_adds()
        self.harness.pump()
        self.assertEqual(kinds(c2.commands()), [T.PRODUCER_SUCCESS])
        topic = self.topic_object()
        self.assertIsNot(topic.ledger, old.ledger)
        self.assertEqual(kinds(self.send(c2, 5)), [T.SEND_RECEIPT])
        consumer = self.harness.client()
        self.subscribe(consumer, 78, sub="check")
        self.assertEqual(payloads(consumer.received()), ["m0", "m1", "m5"])
