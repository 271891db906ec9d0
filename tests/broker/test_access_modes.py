"""Producer access modes and the topic epoch (Pulsar's AbstractTopic.incrementTopicEpochIfNeeded)."""

from twisted.internet import defer

from pulsar_twisted.broker.access_modes import EPOCH_PROPERTY
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.messaging import T, FeatureCase, NON_PERSISTENT


class AccessModeTests(FeatureCase):
    def test_shared_producers_coexist_without_epoch(self):
        c = self.harness.client()
        [a] = self.create_producer(c, 1, "a")
        [b] = self.create_producer(c, 2, "b")
        self.assertEqual((a.type, b.type), (T.PRODUCER_SUCCESS, T.PRODUCER_SUCCESS))
        self.assertFalse(a.producer_success.HasField("topic_epoch"))

    def test_exclusive_gets_epoch_and_blocks_others(self):
        """Exclusive: epoch 0 first; Shared then gets ProducerBusy, Exclusive ProducerFenced."""
        c = self.harness.client()
        [ok] = self.create_producer(c, 1, "x", mode=api.Exclusive)
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)
        self.assertTrue(ok.producer_success.producer_ready)
        self.assertEqual(ok.producer_success.topic_epoch, 0)
        [shared] = self.create_producer(c, 2, "s")
        self.assertEqual((shared.type, shared.error.error), (T.ERROR, api.ProducerBusy))
        [other] = self.create_producer(c, 3, "y", mode=api.Exclusive)
        self.assertEqual((other.type, other.error.error), (T.ERROR, api.ProducerFenced))

    def test_exclusive_refused_while_shared_producers(self):
        c = self.harness.client()
        self.create_producer(c, 1, "s")
        [refused] = self.create_producer(c, 2, "x", mode=api.Exclusive)
        self.assertEqual(refused.error.error, api.ProducerFenced)
        self.assertIn("shared producers", refused.error.message)

    def test_epoch_increments_per_exclusive_grant(self):
        c = self.harness.client()
        [first] = self.create_producer(c, 1, "x", mode=api.Exclusive)
        c.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(producer_id=1, request_id=9)))
        c.received()
        [second] = self.create_producer(c, 2, "x2", mode=api.Exclusive)
        self.assertEqual((first.producer_success.topic_epoch, second.producer_success.topic_epoch), (0, 1))

    def test_stale_epoch_fenced(self):
        """A producer presenting an epoch older than the topic's is fenced (someone came between)."""
        c = self.harness.client()
        self.create_producer(c, 1, "x", mode=api.Exclusive)
        c.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(producer_id=1, request_id=9)))
        self.create_producer(c, 2, "y", mode=api.Exclusive)
        c.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(producer_id=2, request_id=9)))
        c.received()
        [fenced] = self.create_producer(c, 3, "x", mode=api.Exclusive, epoch=0)
        self.assertEqual(fenced.error.error, api.ProducerFenced)
        [ok] = self.create_producer(c, 4, "y", mode=api.Exclusive, epoch=1)
        self.assertEqual(ok.producer_success.topic_epoch, 1)

    def test_wait_for_exclusive_queued_then_granted(self):
        """
        WaitForExclusive behind a producer: PRODUCER_SUCCESS producer_ready=false at once (the
        official clients keep waiting without timing out), the ready one when the topic frees.
        """
        a, b = self.harness.client(), self.harness.client()
        self.create_producer(a, 1, "x", mode=api.Exclusive)
        [queued] = self.create_producer(b, 1, "w", mode=api.WaitForExclusive)
        self.assertEqual(queued.type, T.PRODUCER_SUCCESS)
        self.assertFalse(queued.producer_success.producer_ready)
        self.assertEqual(queued.producer_success.request_id, 101)
        a.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(producer_id=1, request_id=9)))
        [ready] = b.commands()
        self.assertEqual(ready.type, T.PRODUCER_SUCCESS)
        self.assertTrue(ready.producer_success.producer_ready)
        self.assertEqual((ready.producer_success.request_id, ready.producer_success.topic_epoch), (101, 1))
        [receipt] = self.send(b, 0)
        self.assertEqual(receipt.type, T.SEND_RECEIPT)

    def test_wait_for_exclusive_behind_shared_and_in_order(self):
        a, b, c = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(a, 1, "s")
        self.create_producer(b, 1, "w1", mode=api.WaitForExclusive)
        self.create_producer(c, 1, "w2", mode=api.WaitForExclusive)
        [busy] = self.create_producer(a, 2, "s2")
        self.assertEqual(busy.error.error, api.ProducerBusy)
        a.close()
        self.assertTrue(b.commands()[0].producer_success.producer_ready)
        self.assertEqual(c.commands(), [])
        b.close()
        [ready] = c.commands()
        self.assertTrue(ready.producer_success.producer_ready)

    def test_wait_for_exclusive_free_topic_granted_at_once(self):
        c = self.harness.client()
        [ok] = self.create_producer(c, 1, "w", mode=api.WaitForExclusive)
        self.assertTrue(ok.producer_success.producer_ready)
        self.assertEqual(ok.producer_success.topic_epoch, 0)

    def test_waiter_gone_skipped(self):
        """A queued producer whose connection closed is skipped for the next one."""
        a, b, c = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(a, 1, "x", mode=api.Exclusive)
        self.create_producer(b, 1, "w1", mode=api.WaitForExclusive)
        self.create_producer(c, 1, "w2", mode=api.WaitForExclusive)
        b.close()
        a.close()
        [ready] = c.commands()
        self.assertTrue(ready.producer_success.producer_ready)
        self.assertEqual(list(self.topic_object().producers), ["w2"])

    def test_exclusive_with_fencing_closes_others(self):
        """ExclusiveWithFencing: CLOSE_PRODUCER to every current producer, then it has the topic."""
        a, b = self.harness.client(), self.harness.client()
        self.create_producer(a, 1, "s1")
        self.create_producer(a, 2, "s2")
        [ok] = self.create_producer(b, 1, "f", mode=api.ExclusiveWithFencing)
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)
        self.assertEqual(ok.producer_success.topic_epoch, 0)
        closed = sorted(x.close_producer.producer_id for x in a.commands(T.CLOSE_PRODUCER))
        self.assertEqual(closed, [1, 2])
        self.assertEqual(list(self.topic_object().producers), ["f"])
        # A SEND the client had in flight for the closed producer: ignored (it resends after
        # reconnecting), neither stored nor answered with a SEND_ERROR.
        self.assertEqual(self.send(a, 0, producer_id=1), [])
        self.assertEqual(self.topic_object().ledger.number_of_entries(), 0)

    def test_exclusive_with_fencing_fails_waiters(self):
        a, b, c = self.harness.client(), self.harness.client(), self.harness.client()
        self.create_producer(a, 1, "x", mode=api.Exclusive)
        self.create_producer(b, 1, "w", mode=api.WaitForExclusive)
        [ok] = self.create_producer(c, 1, "f", mode=api.ExclusiveWithFencing)
        self.assertEqual(ok.producer_success.topic_epoch, 1)
        [fenced] = b.commands()
        self.assertEqual((fenced.type, fenced.error.error), (T.ERROR, api.ProducerFenced))

    @defer.inlineCallbacks
    def test_epoch_survives_restart(self):
        c = self.harness.client()
        self.create_producer(c, 1, "x", mode=api.Exclusive)
        c.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(producer_id=1, request_id=9)))
        self.create_producer(c, 2, "y", mode=api.Exclusive)
        self.assertEqual(self.topic_object().ledger.properties[EPOCH_PROPERTY], "1")
        yield self.restart()
        c = self.harness.client()
        [ok] = self.create_producer(c, 1, "z", mode=api.Exclusive)
        self.assertEqual(ok.producer_success.topic_epoch, 2)

    def test_non_persistent_exclusive(self):
        c = self.harness.client()
        [ok] = self.create_producer(c, 1, "x", mode=api.Exclusive, topic=NON_PERSISTENT)
        self.assertEqual(ok.producer_success.topic_epoch, 0)
        [busy] = self.create_producer(c, 2, "s", topic=NON_PERSISTENT)
        self.assertEqual(busy.error.error, api.ProducerBusy)
