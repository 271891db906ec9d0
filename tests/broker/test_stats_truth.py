"""
Topic and subscription stats computed from what happened, as Pulsar computes them: counters keep
what closed producers and consumers contributed, at once; rates are per second over the last
stats period (here 10 s on task.Clock); deduplicationStatus, waitingPublishers, msgDelayed and
activeConsumerName come from the parts that know; CONSUMER_STATS answers the consumer's rates.
"""

from twisted.internet import defer

from pulsar_twisted.broker import ttl
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import FeatureCase, messages

T = api.BaseCommand
Sub = api.CommandSubscribe
PERIOD = 10


class StatsCase(FeatureCase):
    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.clock, stats_interval=PERIOD)
        self.admin.startService()
        self.addCleanup(self.admin.stopService)

    def stats(self, topic=None):
        return self.admin.topic_stats(self.topic_object(topic))

    def publish(self, producer, count, first=0, **fields):
        for seq in range(first, first + count):
            self.send(producer, seq, **fields)
        self.clock.advance(0)
        self.harness.pump()

    def close_producer(self, client, producer_id=1):
        client.send(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(
            producer_id=producer_id, request_id=900 + producer_id)))

    def close_consumer(self, client, consumer_id):
        client.send(T(type=T.CLOSE_CONSUMER, close_consumer=api.CommandCloseConsumer(
            consumer_id=consumer_id, request_id=800 + consumer_id)))
        self.harness.pump()


class CountersSurviveCloseTests(StatsCase):
    def test_producer_counts_kept_after_close(self):
        """msgInCounter/bytesInCounter keep a closed producer's messages, right after the close."""
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 3)
        before = self.stats()
        self.close_producer(producer)
        after = self.stats()
        self.assertEqual(after["publishers"], [])
        self.assertEqual(after["msgInCounter"], 3)
        self.assertEqual(after["bytesInCounter"], before["bytesInCounter"])
        self.assertGreater(after["bytesInCounter"], 0)

    def test_consumer_counts_kept_after_close(self):
        """Subscription and topic msgOutCounter/bytesOutCounter keep a closed consumer's part."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Shared)
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 4)
        self.assertEqual(len(messages(consumer.received())), 4)
        sent_bytes = self.stats()["subscriptions"]["s"]["bytesOutCounter"]
        self.close_consumer(consumer, 1)
        stats = self.stats()
        sub = stats["subscriptions"]["s"]
        self.assertEqual(sub["consumers"], [])
        self.assertEqual((sub["msgOutCounter"], sub["bytesOutCounter"]), (4, sent_bytes))
        self.assertEqual((stats["msgOutCounter"], stats["bytesOutCounter"]), (4, sent_bytes))

    def test_deleted_subscription_counts_kept_by_topic(self):
        """A reader's subscription goes with its consumer; the topic keeps what it dispatched."""
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 2)
        reader = self.harness.client()
        reader.send(T(type=T.SUBSCRIBE, subscribe=Sub(
            topic=self.topic, subscription="reader-1", subType=Sub.Exclusive, consumer_id=5,
            request_id=5, durable=False, start_message_id=api.MessageIdData(
                ledgerId=0xFFFFFFFFFFFFFFFF, entryId=0xFFFFFFFFFFFFFFFF))))
        reader.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=5, messagePermits=10)))
        self.harness.pump()
        self.assertEqual(len(messages(reader.received())), 2)
        self.close_consumer(reader, 5)
        stats = self.stats()
        self.assertNotIn("reader-1", stats["subscriptions"])
        self.assertEqual(stats["msgOutCounter"], 2)


class RateTests(StatsCase):
    def test_publish_and_dispatch_rates_over_the_period(self):
        """20 messages in a 10 s period: 2.0 msg/s in and out at every level; 0.0 the period after."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Exclusive, name="only")
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 20)
        self.clock.advance(PERIOD)
        stats = self.stats()
        [publisher] = stats["publishers"]
        sub = stats["subscriptions"]["s"]
        [consumer_stats] = sub["consumers"]
        self.assertEqual((stats["msgRateIn"], publisher["msgRateIn"]), (2.0, 2.0))
        self.assertEqual(publisher["msgThroughputIn"], stats["bytesInCounter"] / PERIOD)
        self.assertEqual(publisher["averageMsgSize"], stats["bytesInCounter"] / 20)
        self.assertEqual((stats["msgRateOut"], sub["msgRateOut"], consumer_stats["msgRateOut"]),
                         (2.0, 2.0, 2.0))
        self.assertEqual(sub["msgThroughputOut"], sub["bytesOutCounter"] / PERIOD)
        self.clock.advance(PERIOD)
        stats = self.stats()
        self.assertEqual((stats["msgRateIn"], stats["subscriptions"]["s"]["msgRateOut"]), (0.0, 0.0))

    def test_redeliver_rate(self):
        """A Shared consumer giving 5 unacked messages back: msgRateRedeliver 0.5 over 10 s."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Shared)
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 5)
        self.assertEqual(len(messages(consumer.received())), 5)
        self.redeliver(consumer, 1)
        self.harness.pump()
        self.clock.advance(PERIOD)
        sub = self.stats()["subscriptions"]["s"]
        self.assertEqual(sub["msgRateRedeliver"], 0.5)
        self.assertEqual(sub["consumers"][0]["msgRateRedeliver"], 0.5)

    def test_expired_rate(self):
        """The TTL acknowledging 4 messages in a period: msgRateExpired 0.4 over 10 s."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Exclusive, permits=0)
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 4)
        topic = self.topic_object()
        moved = self.successResultOf(defer.ensureDeferred(
            ttl.expire_topic(topic, 1, 1000 + 4 + 60_000)))
        self.assertEqual(moved, 1)
        self.clock.advance(PERIOD)
        sub = self.stats()["subscriptions"]["s"]
        self.assertEqual((sub["msgRateExpired"], sub["msgBacklog"]), (0.4, 0))
        self.assertNotIn("msgRateExpired", sub["consumers"][0])
        consumer.send(T(type=T.CONSUMER_STATS, consumerStats=api.CommandConsumerStats(
            request_id=78, consumer_id=1)))
        [answer] = [c.consumerStatsResponse for c in consumer.commands(T.CONSUMER_STATS_RESPONSE)]
        self.assertEqual(answer.msgRateExpired, 0.4)

    def test_consumer_stats_command_answers_rates(self):
        """CONSUMER_STATS answers the consumer's rates of the last period, not constants."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Shared)
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 30)
        self.clock.advance(PERIOD)
        consumer.commands()
        consumer.send(T(type=T.CONSUMER_STATS, consumerStats=api.CommandConsumerStats(
            request_id=77, consumer_id=1)))
        [answer] = [c.consumerStatsResponse for c in consumer.commands(T.CONSUMER_STATS_RESPONSE)]
        self.assertEqual((answer.request_id, answer.msgRateOut), (77, 3.0))
        self.assertGreater(answer.msgThroughputOut, 0)
        self.assertEqual(answer.unackedMessages, 30)


class FieldsFromTheirSourceTests(StatsCase):
    def test_msg_chunk_published(self):
        """msgChunkPublished turns true once a chunk of a large message was published."""
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 1)
        self.assertFalse(self.stats()["msgChunkPublished"])
        self.send(producer, 1, is_chunk=True, uuid="u", chunk_id=0, num_chunks_from_msg=2,
                  total_chunk_msg_size=10)
        self.assertTrue(self.stats()["msgChunkPublished"])

    def test_deduplication_status_disabled(self):
        self.create_producer(self.harness.client())
        self.assertEqual(self.stats()["deduplicationStatus"], "Disabled")

    def test_waiting_publishers(self):
        """A WaitForExclusive producer queued behind an exclusive one counts as waiting."""
        self.create_producer(self.harness.client(), mode=api.Exclusive)
        waiting = self.harness.client()
        self.create_producer(waiting, producer_id=2, mode=api.WaitForExclusive)
        self.assertEqual(self.stats()["waitingPublishers"], 1)

    def test_waiting_publisher_gone_with_its_connection(self):
        """A queued WaitForExclusive producer whose connection closes leaves the queue: no longer
        counted, and it keeps nobody out once the exclusive producer leaves."""
        holder = self.harness.client()
        self.create_producer(holder, mode=api.Exclusive)
        waiting = self.harness.client()
        self.create_producer(waiting, producer_id=2, mode=api.WaitForExclusive)
        waiting.close()
        self.assertEqual(self.stats()["waitingPublishers"], 0)
        self.close_producer(holder)
        self.harness.pump()
        late = self.harness.client()
        answers = self.create_producer(late, producer_id=3)
        self.assertEqual([c.type for c in answers], [T.PRODUCER_SUCCESS])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_msg_delayed(self):
        """Messages held by the delayed-delivery tracker are msgDelayed, not msgBacklogNoDelayed."""
        self.subscribe(self.harness.client(), 1, Sub.Shared)
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 2, deliver_at_time=int(self.clock.seconds() * 1000) + 3_600_000)
        self.publish(producer, 1, first=2)
        sub = self.stats()["subscriptions"]["s"]
        self.assertEqual((sub["msgDelayed"], sub["msgBacklog"], sub["msgBacklogNoDelayed"]), (2, 3, 1))

    def test_active_consumer_name_is_the_chosen_one(self):
        """activeConsumerName names the consumer Failover made active, not the first to come."""
        self.topic = "persistent://public/default/t"    # the ring gives b of a and b (ChooseActive)
        first, second = self.harness.client(), self.harness.client()
        self.subscribe(first, 1, Sub.Failover, name="a")
        self.harness.pump()
        self.assertEqual(self.stats()["subscriptions"]["s"]["activeConsumerName"], "a")
        self.subscribe(second, 2, Sub.Failover, name="b")
        self.harness.pump()
        self.clock.advance(1.0)       # activeConsumerFailoverDelayTimeMillis
        self.assertEqual(self.stats()["subscriptions"]["s"]["activeConsumerName"], "b")

    def test_active_consumer_name_only_single_active(self):
        self.subscribe(self.harness.client(), 1, Sub.Shared)
        self.assertIsNone(self.stats()["subscriptions"]["s"]["activeConsumerName"])


class BlockedSubscriptionTests(StatsCase):
    config = {"maxUnackedMessagesPerSubscription": 3}

    def test_blocked_on_unacked(self):
        """blockedSubscriptionOnUnackedMsgs while the subscription holds its unacked limit."""
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Shared)
        self.assertFalse(self.stats()["subscriptions"]["s"]["blockedSubscriptionOnUnackedMsgs"])
        producer = self.harness.client()
        self.create_producer(producer)
        self.publish(producer, 5)
        got = messages(consumer.received())
        self.assertEqual(len(got), 3)
        self.assertTrue(self.stats()["subscriptions"]["s"]["blockedSubscriptionOnUnackedMsgs"])
        self.ack(consumer, 1, [cmd.message.message_id for cmd, _ in got])
        self.clock.advance(0)
        self.harness.pump()
        self.assertEqual(len(messages(consumer.received())), 2)   # the rest, 2 < 3 unacked
        self.assertFalse(self.stats()["subscriptions"]["s"]["blockedSubscriptionOnUnackedMsgs"])


class DeduplicationStatusTests(StatsCase):
    config = {"brokerDeduplicationEnabled": True}

    def test_enabled(self):
        self.create_producer(self.harness.client())
        self.harness.pump()
        self.assertEqual(self.stats()["deduplicationStatus"], "Enabled")


class NonPersistentDropRateTests(StatsCase):
    topic = "persistent://public/default/unused"

    def test_drop_rate(self):
        """A non-persistent consumer with 2 permits and 7 messages: 5 dropped, msgDropRate 0.5."""
        name = "non-persistent://public/default/drops"
        consumer = self.harness.client()
        self.subscribe(consumer, 1, Sub.Exclusive, permits=2, topic=name)
        producer = self.harness.client()
        self.create_producer(producer, topic=name)
        self.publish(producer, 7)
        self.assertEqual(len(messages(consumer.received())), 2)
        self.clock.advance(PERIOD)
        sub = self.stats(name)["subscriptions"]["s"]
        self.assertEqual((sub["msgDropRate"], sub["msgOutCounter"]), (0.5, 2))
