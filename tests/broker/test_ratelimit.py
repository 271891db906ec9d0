"""
Publish and dispatch rate limiting (ratelimit.py): the period budget, producers' connections paused
over a publish rate and resumed at the next period, dispatch capped per topic and per
subscription, limits from the broker configuration and from namespace policies applied to live
topics at once.
"""

import json

from twisted.internet import defer, task
from twisted.logger import capturedLogs
from twisted.trial import unittest

from pulsar_twisted.broker import ratelimit
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.ratelimit import RateLimiter
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.policies import NamespacePolicies, RateLimit

from pulsar_twisted.testing.broker import BrokerHarness

from tests.broker.messaging import FeatureCase, message, messages

T = api.BaseCommand
Sub = api.CommandSubscribe


class RateLimiterTests(unittest.TestCase):
    def test_budget_per_period(self):
        """A period's messages are spent by consume; the next boundary brings them back."""
        clock = task.Clock()
        limiter = RateLimiter(clock, RateLimit(msgs=3))
        self.assertEqual(limiter.available_msgs(), 3)
        self.assertFalse(limiter.consume(2, 10))
        self.assertTrue(limiter.consume(1, 10))
        self.assertTrue(limiter.exhausted())
        self.assertEqual(limiter.until_next_period(), 1.0)
        clock.advance(0.5)
        self.assertTrue(limiter.exhausted())
        self.assertAlmostEqual(limiter.until_next_period(), 0.5)
        clock.advance(0.5)
        self.assertFalse(limiter.exhausted())
        self.assertEqual(limiter.available_msgs(), 3)

    def test_debt_is_carried_and_idle_does_not_bank(self):
        """Overshooting a budget is paid off in the next periods; idle periods add at most one budget."""
        clock = task.Clock()
        limiter = RateLimiter(clock, RateLimit(msgs=10))
        limiter.consume(25, 0)
        clock.advance(1)
        self.assertTrue(limiter.exhausted())        # -15 + 10
        clock.advance(1)
        self.assertEqual(limiter.available_msgs(), 5)
        clock.advance(10)
        self.assertEqual(limiter.available_msgs(), 10)

    def test_bytes_and_period(self):
        """A byte budget over a longer period; no message limit means any count."""
        clock = task.Clock()
        limiter = RateLimiter(clock, RateLimit(bytes=100, period=5.0))
        self.assertGreater(limiter.available_msgs(), 10 ** 9)
        self.assertTrue(limiter.consume(1, 100))
        clock.advance(4.9)
        self.assertTrue(limiter.exhausted())
        clock.advance(0.1)
        self.assertFalse(limiter.exhausted())

    def test_update_keeps_what_is_spent(self):
        """A new limit caps the budget left; raising it from unlimited starts a full budget."""
        clock = task.Clock()
        limiter = RateLimiter(clock, RateLimit(msgs=100))
        limiter.consume(95, 0)
        limiter.update(RateLimit(msgs=50))
        self.assertEqual(limiter.available_msgs(), 5)
        limiter.update(RateLimit(msgs=50, bytes=10))
        self.assertFalse(limiter.consume(0, 5))
        self.assertTrue(limiter.consume(0, 5))


class PolicyParsingTests(unittest.TestCase):
    def setUp(self):
        self.config = StandaloneConfig()

    def test_defaults_from_config(self):
        """The broker's keys are the rates of namespaces without rate policies (0: none)."""
        config = StandaloneConfig(maxPublishRatePerTopicInMessages=10, maxPublishRatePerTopicInBytes=99,
                                  dispatchThrottlingRatePerTopicInMsg=20,
                                  dispatchThrottlingRatePerSubscriptionInByte=30)
        policies = NamespacePolicies.defaults(config)
        self.assertEqual(policies.publish_rate, RateLimit(10, 99))
        self.assertEqual(policies.topic_dispatch_rate, RateLimit(20, 0))
        self.assertEqual(policies.subscription_dispatch_rate, RateLimit(0, 30))
        self.assertFalse(NamespacePolicies.defaults(self.config).publish_rate.enabled)

    def test_stored_rates_of_this_cluster(self):
        """Pulsar's per-cluster maps: this cluster's entry is used, another cluster's ignored."""
        data = {"publishMaxMessageRate": {"standalone": {"publishThrottlingRateInMsg": 100,
                                                         "publishThrottlingRateInByte": -1}},
                "topicDispatchRate": {"other": {"dispatchThrottlingRateInMsg": 5}},
                "subscriptionDispatchRate": {"standalone": {
                    "dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 1000,
                    "ratePeriodInSecond": 2, "relativeToPublishRate": False}}}
        policies = NamespacePolicies.from_json(data, self.config)
        self.assertEqual(policies.publish_rate, RateLimit(100, -1))
        self.assertFalse(policies.topic_dispatch_rate.enabled)
        self.assertEqual(policies.subscription_dispatch_rate, RateLimit(50, 1000, 2.0))

    def test_bad_rate_is_logged_and_ignored(self):
        """A malformed rate leaves the broker default in force (and the other policies apply)."""
        data = {"topicDispatchRate": {"standalone": {"dispatchThrottlingRateInMsg": "many"}},
                "publishMaxMessageRate": {"standalone": {"publishThrottlingRateInMsg": 7}},
                "subscriptionDispatchRate": {"standalone": {"ratePeriodInSecond": 0}}}
        config = StandaloneConfig(dispatchThrottlingRatePerTopicInMsg=3)
        with capturedLogs() as logged:
            policies = NamespacePolicies.from_json(data, config, where="t/ns")
        self.assertEqual(policies.topic_dispatch_rate, RateLimit(3, 0))
        self.assertEqual(policies.publish_rate, RateLimit(7, -1))
        self.assertFalse(policies.subscription_dispatch_rate.enabled)
        text = " ".join(str(e.get("error")) for e in logged)
        self.assertIn("dispatchThrottlingRateInMsg", text)
        self.assertIn("ratePeriodInSecond", text)


class RateCase(FeatureCase):
    topic = "persistent://public/default/rates"

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config, self.clock)

    def set_policy(self, name, value):
        self.successResultOf(defer.Deferred.fromCoroutine(
            self.admin.set_namespace_policy("public", "default", name, value)))
        self.harness.pump()

    def remove_policy(self, name):
        self.successResultOf(defer.Deferred.fromCoroutine(
            self.admin.remove_namespace_policy("public", "default", name)))
        self.harness.pump()

    def produce(self, count, start=0):
        client = self.harness.client()
        self.create_producer(client, producer_id=1)
        for seq in range(start, start + count):
            self.send(client, seq)
        return client

    def received(self, client):
        return len(messages(client.received()))


class PublishRateTests(RateCase):
    def test_producer_paused_over_the_rate_and_resumed_next_period(self):
        """A 100 msg/s publish rate pauses the producer's connection at the 100th message and
        resumes it at the next second; every message is stored."""
        self.set_policy("publishRate", {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1})
        client = self.harness.client()
        bystander = self.harness.client()
        self.create_producer(client)
        replies = []
        for seq in range(99):
            replies += self.send(client, seq)
        self.assertEqual(client.transport.producerState, "producing")
        replies += self.send(client, 99)
        self.assertEqual(client.transport.producerState, "paused")
        self.assertEqual(bystander.transport.producerState, "producing")
        self.clock.advance(0.5)
        self.assertEqual(client.transport.producerState, "paused")
        self.clock.advance(0.5)
        self.harness.pump()
        self.assertEqual(client.transport.producerState, "producing")
        self.assertEqual(len([c for c in replies if c.type == T.SEND_RECEIPT]), 100)
        # the next period has a fresh budget of 100
        for seq in range(100, 199):
            self.send(client, seq)
        self.assertEqual(client.transport.producerState, "producing")

    @defer.inlineCallbacks
    def test_byte_rate_from_config(self):
        """maxPublishRatePerTopicInBytes (broker default) pauses once a second's bytes are in."""
        self.harness = BrokerHarness(maxPublishRatePerTopicInBytes=500)
        yield self.harness.start()
        client = self.harness.client()
        self.create_producer(client)
        self.send(client, 0, payload=b"x" * 200)
        self.send(client, 1, payload=b"x" * 200)
        self.assertEqual(client.transport.producerState, "producing")
        self.send(client, 2, payload=b"x" * 200)
        self.assertEqual(client.transport.producerState, "paused")
        self.clock.advance(1)
        self.assertEqual(client.transport.producerState, "producing")

    def test_debt_keeps_paused_another_period(self):
        """Messages read after the pause (already buffered) are counted: the connection stays
        paused until the budget is positive again."""
        self.set_policy("publishRate", {"publishThrottlingRateInMsg": 10})
        client = self.harness.client()
        self.create_producer(client)
        for seq in range(25):          # a client's buffered frames are read regardless
            self.send(client, seq)
        self.assertEqual(client.transport.producerState, "paused")
        self.clock.advance(1)          # 10 - 25 + 10 = -5
        self.assertEqual(client.transport.producerState, "paused")
        self.clock.advance(1)
        self.assertEqual(client.transport.producerState, "producing")

    def test_policy_change_applies_to_live_topic(self):
        """Setting a publish rate on a loaded topic limits it at once; removing it resumes
        the paused producers at once."""
        client = self.harness.client()
        self.create_producer(client)
        for seq in range(20):
            self.send(client, seq)
        self.assertEqual(client.transport.producerState, "producing")
        self.set_policy("publishRate", {"publishThrottlingRateInMsg": 5})
        for seq in range(20, 25):
            self.send(client, seq)
        self.assertEqual(client.transport.producerState, "paused")
        self.remove_policy("publishRate")
        self.assertEqual(client.transport.producerState, "producing")
        self.assertIsNone(self.topic_object().publish_limiter)

    def test_non_persistent_topic(self):
        """Non-persistent topics are publish-limited too."""
        self.set_policy("publishRate", {"publishThrottlingRateInMsg": 3})
        client = self.harness.client()
        self.create_producer(client, topic="non-persistent://public/default/np")
        for seq in range(3):
            client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq)),
                        message(seq))
        self.assertEqual(client.transport.producerState, "paused")
        self.clock.advance(1)
        self.assertEqual(client.transport.producerState, "producing")


class DispatchRateTests(RateCase):
    def test_subscription_rate_caps_delivery_per_period(self):
        """A 50 msg/s subscription dispatch rate delivers 50 per second even with 1000 permits."""
        self.set_policy("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 50,
                                                     "dispatchThrottlingRateInByte": -1,
                                                     "ratePeriodInSecond": 1,
                                                     "relativeToPublishRate": False})
        self.produce(200)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=1000)
        self.assertEqual(self.received(consumer), 50)
        self.clock.advance(0.5)
        self.harness.pump()
        self.assertEqual(self.received(consumer), 0)
        for _ in range(3):
            self.clock.advance(0.5)
            self.harness.pump()
            self.clock.advance(0.5)
            self.harness.pump()
            self.assertEqual(self.received(consumer), 50)
        self.clock.advance(1)
        self.harness.pump()
        self.assertEqual(self.received(consumer), 0)   # all 200 delivered

    def test_no_busy_loop_while_throttled(self):
        """While the budget is spent the dispatcher waits for the period: one delayed read, no
        read every turn."""
        self.set_policy("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 10})
        self.produce(50)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=1000)
        self.assertEqual(self.received(consumer), 10)
        dispatcher = self.topic_object().subscriptions["s"].dispatcher
        self.assertIsNotNone(dispatcher._scheduled)
        self.assertAlmostEqual(dispatcher._scheduled.getTime(), self.clock.seconds() + 1.0)
        due_now = [c for c in self.clock.getDelayedCalls() if c.getTime() <= self.clock.seconds()]
        self.assertEqual(due_now, [])

    def test_topic_rate_is_shared_by_subscriptions(self):
        """The topic dispatch rate bounds all subscriptions together."""
        self.set_policy("dispatchRate", {"dispatchThrottlingRateInMsg": 30})
        self.produce(100)
        first, second = self.harness.client(), self.harness.client()
        self.subscribe(first, 1, sub="a", permits=1000)
        self.subscribe(second, 2, sub="b", permits=1000)
        self.assertEqual(self.received(first) + self.received(second), 30)
        self.clock.advance(1)
        self.harness.pump()
        self.assertEqual(self.received(first) + self.received(second), 30)

    @defer.inlineCallbacks
    def test_shared_subscription_from_config(self):
        """dispatchThrottlingRatePerSubscriptionInMsg applies to Shared subscriptions too."""
        self.harness = BrokerHarness(dispatchThrottlingRatePerSubscriptionInMsg=20)
        yield self.harness.start()
        self.produce(100)
        a, b = self.harness.client(), self.harness.client()
        self.subscribe(a, 1, kind=Sub.Shared, permits=1000)
        self.subscribe(b, 2, kind=Sub.Shared, permits=1000)
        self.assertEqual(self.received(a) + self.received(b), 20)
        self.clock.advance(1)
        self.harness.pump()
        self.assertEqual(self.received(a) + self.received(b), 20)

    def test_byte_rate(self):
        """A byte dispatch rate: an entry may overshoot, then dispatch waits for the next period."""
        self.set_policy("subscriptionDispatchRate", {"dispatchThrottlingRateInByte": 1})
        self.produce(5)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=1000)
        self.assertGreaterEqual(self.received(consumer), 1)
        self.clock.advance(1)
        self.harness.pump()
        self.assertEqual(self.received(consumer), 0)   # still paying off the overshoot

    def test_policy_change_applies_to_live_topic(self):
        """Limiting a live subscription takes effect at once; removing the limit delivers the
        rest at once, without waiting for the period."""
        self.produce(10)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=1000)
        self.assertEqual(self.received(consumer), 10)
        self.set_policy("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 5})
        self.produce(30, start=10)
        self.assertEqual(self.received(consumer), 5)
        self.remove_policy("subscriptionDispatchRate")
        self.assertEqual(self.received(consumer), 25)
        self.assertIsNone(self.topic_object().dispatch_limits)

    def test_store_watch_applies_rates(self):
        """A rate written to the metadata store by another broker is applied by the watch."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=1000)
        path = "/admin/policies/public/default"
        data, _ = self.successResultOf(self.harness.store.get(path))
        policies = json.loads(data)
        policies["subscriptionDispatchRate"] = {"standalone": {"dispatchThrottlingRateInMsg": 4}}
        self.successResultOf(self.harness.store.put(path, json.dumps(policies).encode(), None))
        self.harness.pump()
        self.produce(10)
        self.assertEqual(self.received(consumer), 4)
        self.assertIsInstance(self.topic_object().dispatch_limits, ratelimit.DispatchLimits)
