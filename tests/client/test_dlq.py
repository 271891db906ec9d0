"""Dead-letter and retry-letter topics on a fake broker: nack, ack timeout, reconsume_later."""

from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import dlq, errors
from pulsar_twisted.client.consumer import Consumer
from pulsar_twisted.client.message_id import MessageId
from tests.client.helpers import FakeClient, T, start_subscribed
from tests.client.test_consumer import batch, single

CONSUMER_ID = 5
TOPIC = "persistent://public/default/t"


class FakeProducer:
    def __init__(self, topic, conf):
        self.topic = topic
        self.conf = conf
        self.sent = []
        self.fail = None
        self.closed = False

    def send(self, payload, **kwargs):
        if self.fail is not None:
            return defer.fail(self.fail)
        self.sent.append((payload, kwargs))
        return defer.succeed(MessageId(9, len(self.sent)))

    def close(self):
        self.closed = True
        return defer.succeed(None)


class LetterClient(FakeClient):
    def __init__(self):
        super().__init__()
        self.producers = {}

    def create_producer(self, topic, **conf):
        producer = self.producers[topic] = FakeProducer(topic, conf)
        return defer.succeed(producer)


class DeadLetterCase(SynchronousTestCase):
    def make(self, policy, enable_retry=False, **conf):
        self.client = LetterClient()
        self.handler = dlq.DeadLetterHandler(self.client, TOPIC, "sub", policy, enable_retry)
        consumer = Consumer(self.client, TOPIC, "sub", CONSUMER_ID, consumer_type_="Shared",
                            dead_letter=self.handler, **conf)
        self.handler.owner = consumer
        return start_subscribed(self, consumer)

    def sent(self, kind):
        self.client.broker.read()
        return [c for c, _ in self.client.broker.received if c.type == kind]

    def acks(self):
        return [[(m.ledgerId, m.entryId) for m in c.ack.message_id] for c in self.sent(T.ACK)]

    def redelivered(self):
        return [[m.entryId for m in c.redeliverUnacknowledgedMessages.message_ids]
                for c in self.sent(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)]


class DeadLetterTests(DeadLetterCase):
    def test_policy_validation_and_names(self):
        """max_redeliver_count must be >= 1; default topics are <topic>-<sub>-DLQ/-RETRY."""
        self.assertRaises(errors.InvalidConfiguration, dlq.DeadLetterPolicy, 0)
        handler = dlq.DeadLetterHandler(None, TOPIC, "s", dlq.DeadLetterPolicy(3))
        self.assertEqual((handler.dlq_topic, handler.retry_topic),
                         (TOPIC + "-s-DLQ", TOPIC + "-s-RETRY"))
        self.assertEqual(dlq.java_id_string(MessageId(1, 2, 3, 4)), "1:2:4:3")

    def test_nack_past_limit_goes_to_dlq(self):
        """A message at max_redeliver_count, nacked again, is published to the DLQ and acked."""
        consumer = self.make(dlq.DeadLetterPolicy(2, initial_subscription_name="init"),
                             negative_ack_redelivery_delay_ms=100)
        broker = self.client.broker
        broker.message(CONSUMER_ID, single(b"x", properties=[api.KeyValue(key="a", value="1")],
                                           partition_key="k"), entry_id=1, redelivery_count=1)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.2)
        self.assertEqual(self.redelivered(), [[1]])
        self.assertNotIn(self.handler.dlq_topic, self.client.producers)
        broker.message(CONSUMER_ID, single(b"x", properties=[api.KeyValue(key="a", value="1")],
                                           partition_key="k"), entry_id=1, redelivery_count=2)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.2)
        self.assertEqual(self.redelivered(), [[1]])
        producer = self.client.producers[TOPIC + "-sub-DLQ"]
        self.assertEqual(producer.conf["initial_subscription_name"], "init")
        self.assertFalse(producer.conf["batching_enabled"])
        ((payload, kwargs),) = producer.sent
        self.assertEqual(payload, b"x")
        self.assertEqual(kwargs["partition_key"], "k")
        self.assertEqual(kwargs["properties"], {"a": "1", dlq.REAL_TOPIC: TOPIC,
                                                dlq.ORIGIN_MESSAGE_ID: "1:1:-1"})
        self.assertEqual(self.acks(), [[(1, 1)]])

    def test_ack_timeout_batch_to_dlq(self):
        """With the ack timeout, every member of an over-delivered batch goes to the DLQ."""
        consumer = self.make(dlq.DeadLetterPolicy(1), ack_timeout_ms=1000,
                             ack_timeout_tick_ms=100)
        self.client.broker.message(CONSUMER_ID, batch([b"a", b"b"]), entry_id=4,
                                   redelivery_count=1)
        self.successResultOf(consumer.receive())
        self.successResultOf(consumer.receive())
        self.client.clock.pump([0.1] * 12)
        producer = self.client.producers[TOPIC + "-sub-DLQ"]
        self.assertEqual([p for p, _ in producer.sent], [b"a", b"b"])
        self.assertEqual(producer.sent[1][1]["properties"][dlq.ORIGIN_MESSAGE_ID], "1:4:-1:1")
        self.assertEqual(self.acks(), [[(1, 4)]])
        self.assertEqual(self.redelivered(), [])

    def test_dlq_failure_redelivers(self):
        """When the DLQ publish fails the message is redelivered, not lost."""
        consumer = self.make(dlq.DeadLetterPolicy(1), negative_ack_redelivery_delay_ms=100)
        self.client.create_producer = lambda topic, **conf: defer.fail(errors.ConnectError("no"))
        self.client.broker.message(CONSUMER_ID, single(b"x"), entry_id=1, redelivery_count=3)
        consumer.negative_acknowledge(self.successResultOf(consumer.receive()))
        self.client.clock.advance(0.2)
        self.assertEqual(self.redelivered(), [[1]])
        self.assertEqual(self.acks(), [])

    def test_acked_message_is_forgotten(self):
        """An acknowledged message is no DLQ candidate any more."""
        consumer = self.make(dlq.DeadLetterPolicy(1))
        self.client.broker.message(CONSUMER_ID, single(b"x"), entry_id=1, redelivery_count=3)
        consumer.acknowledge(self.successResultOf(consumer.receive()))
        self.assertEqual(self.handler._candidates, {})


class RetryTests(DeadLetterCase):
    def test_reconsume_later(self):
        """reconsume_later publishes to the retry topic with Pulsar's properties and acks."""
        consumer = self.make(dlq.DeadLetterPolicy(2), enable_retry=True)
        self.client.broker.message(CONSUMER_ID, single(b"r"), entry_id=3)
        message = self.successResultOf(consumer.receive())
        self.successResultOf(consumer.reconsume_later(message, 1.5))
        producer = self.client.producers[TOPIC + "-sub-RETRY"]
        ((payload, kwargs),) = producer.sent
        self.assertEqual(kwargs["deliver_after"], 1500)
        self.assertEqual(kwargs["properties"], {
            dlq.RECONSUMETIMES: "1", dlq.DELAY_TIME: "1500", dlq.REAL_TOPIC: TOPIC,
            dlq.RETRY_TOPIC: TOPIC + "-sub-RETRY", dlq.ORIGIN_MESSAGE_ID: "1:3:-1"})
        self.assertEqual(self.acks(), [[(1, 3)]])

    def test_reconsume_past_limit_goes_to_dlq(self):
        """Once RECONSUMETIMES would pass max_redeliver_count the message goes to the DLQ."""
        consumer = self.make(dlq.DeadLetterPolicy(2), enable_retry=True)
        props = [api.KeyValue(key=dlq.RECONSUMETIMES, value="2"),
                 api.KeyValue(key=dlq.REAL_TOPIC, value="persistent://public/default/orig")]
        self.client.broker.message(CONSUMER_ID, single(b"r", properties=props), entry_id=3)
        message = self.successResultOf(consumer.receive())
        self.successResultOf(consumer.reconsume_later(message, 0))
        ((_, kwargs),) = self.client.producers[TOPIC + "-sub-DLQ"].sent
        self.assertEqual(kwargs["properties"][dlq.RECONSUMETIMES], "3")
        self.assertEqual(kwargs["properties"][dlq.REAL_TOPIC], "persistent://public/default/orig")
        self.assertNotIn(TOPIC + "-sub-RETRY", self.client.producers)
        d = consumer.close()
        (close,) = [c for c, _ in self.client.broker.read() if c.type == T.CLOSE_CONSUMER]
        self.client.broker.success(close.close_consumer.request_id)
        self.successResultOf(d)
        self.assertTrue(self.client.producers[TOPIC + "-sub-DLQ"].closed)

    def test_reconsume_needs_retry(self):
        """reconsume_later without enable_retry fails clearly."""
        consumer = self.make(dlq.DeadLetterPolicy(2))
        self.client.broker.message(CONSUMER_ID, single(b"r"), entry_id=3)
        message = self.successResultOf(consumer.receive())
        self.failureResultOf(consumer.reconsume_later(message, 1), errors.InvalidConfiguration)
