"""Delayed delivery: Shared/Key_Shared hold messages until deliver_at_time; Exclusive/Failover do not."""

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.broker.delayed import DelayedDeliveryTracker
from pulsar_twisted.common.position import Position

from tests.broker.messaging import T, FeatureCase, Sub, payloads


class TrackerTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1000)
        self.released = []
        self.tracker = DelayedDeliveryTracker(self.clock, 100, self.released.extend)

    def test_due_within_a_tick_not_held(self):
        self.assertFalse(self.tracker.hold(Position(1, 0), 1000_050))
        self.assertEqual(len(self.tracker), 0)

    def test_released_in_time_order(self):
        self.assertTrue(self.tracker.hold(Position(1, 1), 1005_000))
        self.assertTrue(self.tracker.hold(Position(1, 2), 1002_000))
        self.assertTrue(self.tracker.hold(Position(2, 7), 1002_000))
        self.clock.advance(1.5)
        self.assertEqual(self.released, [])
        self.clock.advance(0.5)
        self.assertEqual(self.released, [Position(1, 2), Position(2, 7)])
        self.clock.advance(3)
        self.assertEqual(self.released[-1], Position(1, 1))
        self.assertEqual(len(self.tracker), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_large_ids_round_trip(self):
        big = Position((1 << 62) + 5, (1 << 40) + 3)
        self.tracker.hold(big, 1001_000)
        self.clock.advance(1)
        self.assertEqual(self.released, [big])

    def test_clear_cancels_timer(self):
        self.tracker.hold(Position(1, 1), 1005_000)
        self.tracker.clear()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class DelayedDispatchTests(FeatureCase):
    config = {"delayedDeliveryTickTimeMillis": 100}

    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self.clock.advance(1000))
        return d

    def publish(self, client, seq, delay_s=None, key=None):
        fields = {}
        if delay_s is not None:
            fields["deliver_at_time"] = int((self.clock.seconds() + delay_s) * 1000)
        if key is not None:
            fields["partition_key"] = key
        return self.send(client, seq, **fields)

    def start(self, kind):
        p = self.harness.client()
        self.create_producer(p)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=kind)
        consumer.received()
        return p, consumer

    def test_shared_holds_until_due(self):
        """Shared: a delayed message arrives when due; later undelayed ones are not held behind it."""
        p, consumer = self.start(Sub.Shared)
        self.publish(p, 0, delay_s=10)
        self.publish(p, 1)
        self.assertEqual(payloads(consumer.received()), ["m1"])
        self.clock.advance(9.5)
        self.assertEqual(payloads(consumer.received()), [])
        self.clock.advance(0.5)
        self.harness.pump()
        self.assertEqual(payloads(consumer.received()), ["m0"])

    def test_key_shared_holds_until_due(self):
        p, consumer = self.start(Sub.Key_Shared)
        self.publish(p, 0, delay_s=5, key="k")
        self.publish(p, 1, key="k")
        self.assertEqual(payloads(consumer.received()), ["m1"])
        self.clock.advance(5)
        self.harness.pump()
        self.assertEqual(payloads(consumer.received()), ["m0"])

    def test_exclusive_and_failover_deliver_at_once(self):
        """Pulsar delays only for Shared and Key_Shared subscriptions."""
        for kind, sub in ((Sub.Exclusive, "e"), (Sub.Failover, "f")):
            p = self.harness.client()
            self.create_producer(p, name=f"p-{sub}", topic=f"{self.topic}-{sub}")
            consumer = self.harness.client()
            self.subscribe(consumer, 1, kind=kind, topic=f"{self.topic}-{sub}")
            self.clock.advance(2)
            consumer.received()
            self.publish(p, 0, delay_s=60)
            self.assertEqual(payloads(consumer.received()), ["m0"], sub)

    def test_many_delayed_release_in_time_order(self):
        p, consumer = self.start(Sub.Shared)
        for seq, delay in enumerate([30, 10, 20]):
            self.publish(p, seq, delay_s=delay)
        got = []
        for _ in range(4):
            self.clock.advance(10)
            self.harness.pump()
            got.extend(payloads(consumer.received()))
        self.assertEqual(got, ["m1", "m2", "m0"])

    def test_held_messages_take_no_permits(self):
        p = self.harness.client()
        self.create_producer(p)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared, permits=2)
        for seq in range(5):
            self.publish(p, seq, delay_s=10)
        self.publish(p, 5)
        self.publish(p, 6)
        self.assertEqual(payloads(consumer.received()), ["m5", "m6"])
        self.assertEqual(len(self.topic_object().subscriptions["s"].dispatcher.delayed), 5)

    @defer.inlineCallbacks
    def test_survives_restart(self):
        """Held messages are unacked entries: after a restart they are read and held again."""
        p, consumer = self.start(Sub.Shared)
        self.publish(p, 0, delay_s=30)
        self.publish(p, 1)
        got = consumer.received()
        self.ack(consumer, 1, [c.message.message_id for c, _ in got if c.type == T.MESSAGE])
        yield self.restart()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.assertEqual(payloads(consumer.received()), [])
        self.clock.advance(30)
        self.harness.pump()
        self.assertEqual(payloads(consumer.received()), ["m0"])

    def test_seek_clears_held(self):
        p, consumer = self.start(Sub.Shared)
        self.publish(p, 0, delay_s=30)
        dispatcher = self.topic_object().subscriptions["s"].dispatcher
        self.assertEqual(len(dispatcher.delayed), 1)
        dispatcher.reset()
        self.assertEqual(len(dispatcher.delayed), 0)


class DelayedDisabledTests(FeatureCase):
    config = {"delayedDeliveryEnabled": False}

    def test_delivered_at_once(self):
        p = self.harness.client()
        self.create_producer(p)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared)
        self.send(p, 0, deliver_at_time=int((self.clock.seconds() + 60) * 1000))
        self.assertEqual(payloads(consumer.received()), ["m0"])
