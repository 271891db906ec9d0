"""``batch_receive``: limits, timeout, ordering with receive, flow control, multi-topic, close."""

from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client import errors
from pulsar_twisted.client.batch_receive import BatchReceivePolicy, as_policy
from pulsar_twisted.client.consumer import Consumer
from pulsar_twisted.client.partitioned import MultiConsumer
from tests.client.helpers import T
from tests.client.interop_support import StandaloneInteropCase
from tests.client.test_consumer import CONSUMER_ID, ConsumerCase, batch, single

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None


class PolicyTests(SynchronousTestCase):
    def test_defaults(self):
        """The defaults are the official clients': no count limit, 10 MB, 100 ms."""
        policy = BatchReceivePolicy()
        self.assertEqual((policy.max_num_messages, policy.max_num_bytes, policy.timeout_ms),
                         (-1, 10 * 1024 * 1024, 100))
        self.assertEqual(as_policy(None), policy)

    def test_needs_one_limit(self):
        """No count, no byte limit and no timeout is refused, as are non-numbers."""
        self.assertRaises(errors.InvalidConfiguration, BatchReceivePolicy, 0, 0, 0)
        self.assertRaises(errors.InvalidConfiguration, BatchReceivePolicy, "x", 1, 1)
        self.assertRaises(errors.InvalidConfiguration, as_policy, object())

    def test_capped_at_queue_size(self):
        """max_num_messages is capped at the receiver queue size."""
        self.assertEqual(BatchReceivePolicy(50, 0, 10).capped(20), BatchReceivePolicy(20, 0, 10))
        policy = BatchReceivePolicy(5)
        self.assertIs(policy.capped(20), policy)

    def test_official_policy_object(self):
        """The official client's ConsumerBatchReceivePolicy is accepted."""
        if pulsar is None:
            raise self.skipTest("no official client")
        self.assertEqual(as_policy(pulsar.ConsumerBatchReceivePolicy(5, 1000, 50)),
                         BatchReceivePolicy(5, 1000, 50))


class ConsumerBatchTests(ConsumerCase):
    def feed(self, count, start=0, payload=b"p"):
        for entry in range(start, start + count):
            self.broker.message(CONSUMER_ID, single(payload), entry_id=entry)

    def entries(self, messages):
        return [m.message_id().entry_id for m in messages]

    def test_queued_messages_complete_at_once(self):
        """Enough queued messages: the batch completes at once, the rest stays queued."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(3, -1, 100))
        self.feed(5)
        self.assertEqual(self.entries(self.successResultOf(consumer.batch_receive())), [0, 1, 2])
        self.assertEqual(consumer.available_messages(), 2)

    def test_waits_for_count(self):
        """Without a timeout the batch waits until max_num_messages arrived."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(3, -1, 0))
        self.feed(1)
        d = consumer.batch_receive()
        self.assertNoResult(d)
        self.feed(1, start=1)
        self.assertNoResult(d)
        self.client.clock.advance(3600)
        self.assertNoResult(d)
        self.feed(2, start=2)
        self.assertEqual(self.entries(self.successResultOf(d)), [0, 1, 2])
        self.assertEqual(consumer.available_messages(), 1)

    def test_timeout_returns_what_came(self):
        """After timeout_ms the batch completes with what arrived, possibly nothing."""
        consumer = self.make()
        d = consumer.batch_receive()
        self.feed(2)
        self.assertNoResult(d)
        self.client.clock.advance(0.1)
        self.assertEqual(self.entries(self.successResultOf(d)), [0, 1])
        d = consumer.batch_receive()
        self.client.clock.advance(0.1)
        self.assertEqual(self.successResultOf(d), [])
        self.assertEqual([c for c in self.client.clock.getDelayedCalls()
                          if "PendingBatches" in repr(c)], [])

    def test_byte_limit(self):
        """A message that would pass max_num_bytes ends the batch and starts the next one."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(-1, 10, 0))
        d = consumer.batch_receive()
        self.feed(2, payload=b"1234")
        self.assertNoResult(d)
        self.feed(1, start=2, payload=b"12345")   # 13 bytes: does not fit
        self.assertEqual(self.entries(self.successResultOf(d)), [0, 1])
        self.assertEqual(consumer.available_messages(), 1)
        # The first message of a batch is taken even if alone it is too big.
        self.feed(1, start=3, payload=b"x" * 50)
        self.assertEqual(self.entries(self.successResultOf(consumer.batch_receive())), [2])
        self.assertEqual(self.entries(self.successResultOf(consumer.batch_receive())), [3])

    def test_explicit_policy_and_batches(self):
        """A policy given to the call wins; members of a batch entry count one each."""
        consumer = self.make()
        self.broker.message(CONSUMER_ID, batch([b"a", b"b", b"c"]), entry_id=0)
        messages = self.successResultOf(consumer.batch_receive(BatchReceivePolicy(2, -1, 0)))
        self.assertEqual([m.data() for m in messages], [b"a", b"b"])

    def test_flow_counts_batch_messages(self):
        """Messages handed out in a batch give their permits back; collected ones do not yet."""
        consumer = self.make(receiver_queue_size=4,
                             batch_receive_policy=BatchReceivePolicy(4, -1, 0))
        self.assertEqual(self.flows(), [4])
        d = consumer.batch_receive()
        self.feed(3)
        self.assertEqual(self.flows(), [])
        self.feed(1, start=3)
        self.assertEqual(len(self.successResultOf(d)), 4)
        self.assertEqual(self.flows(), [2, 2])

    def test_receive_waiters_first(self):
        """A waiting receive() gets an arrival before a waiting batch receive."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(2, -1, 0))
        batch_d = consumer.batch_receive()
        single_d = consumer.receive()
        self.feed(3)
        self.assertEqual(self.successResultOf(single_d).message_id().entry_id, 0)
        self.assertEqual(self.entries(self.successResultOf(batch_d)), [1, 2])

    def test_several_pending_in_order(self):
        """Waiting batch receives are served oldest first."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(2, -1, 0))
        first, second = consumer.batch_receive(), consumer.batch_receive()
        self.feed(3)
        self.assertEqual(self.entries(self.successResultOf(first)), [0, 1])
        self.assertNoResult(second)
        self.feed(1, start=3)
        self.assertEqual(self.entries(self.successResultOf(second)), [2, 3])

    def test_cancel_returns_messages(self):
        """Cancelling a batch receive puts what it collected back in the queue, in order."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(5, -1, 0))
        d = consumer.batch_receive()
        self.feed(2)
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        self.assertEqual(consumer.available_messages(), 2)
        self.assertEqual(self.successResultOf(consumer.receive()).message_id().entry_id, 0)

    def test_reconnect_drops_collected(self):
        """After a reconnect the broker redelivers: what a waiting batch collected is dropped."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(3, -1, 0))
        d = consumer.batch_receive()
        self.feed(2)
        self.broker.lose()
        self.client.clock.advance(1)
        (sub,) = self.broker.commands(T.SUBSCRIBE)
        self.broker.success(sub.subscribe.request_id)
        self.feed(3, start=10)
        self.assertEqual(self.entries(self.successResultOf(d)), [10, 11, 12])

    def test_close_fails_pending(self):
        """Closing fails a waiting batch receive with AlreadyClosed; later calls fail at once."""
        consumer = self.make(batch_receive_policy=BatchReceivePolicy(3, -1, 0))
        d = consumer.batch_receive()
        closing = consumer.close()
        (close,) = self.broker.commands(T.CLOSE_CONSUMER)
        self.broker.success(close.close_consumer.request_id)
        self.successResultOf(closing)
        self.failureResultOf(d, errors.AlreadyClosed)
        self.failureResultOf(consumer.batch_receive(), errors.AlreadyClosed)

    def test_not_with_listener(self):
        """A consumer with a message listener refuses batch_receive."""
        consumer = self.make(message_listener=lambda c, m: None)
        self.failureResultOf(consumer.batch_receive(), errors.InvalidConfiguration)

    def test_bad_policy(self):
        """A bad policy at the call is a failed Deferred, not an exception."""
        consumer = self.make()
        self.failureResultOf(consumer.batch_receive(object()), errors.InvalidConfiguration)


class MultiConsumerBatchTests(ConsumerCase):
    def make_multi(self, policy=None, count=2):
        self.make()   # sets up the fake client and its broker
        consumers = []
        for i in range(count):
            consumer = Consumer(self.client, f"persistent://public/default/t-partition-{i}",
                                "sub", 100 + i, partition=i, batch_receive_policy=policy)
            d = consumer.start()
            (sub,) = self.broker.commands(T.SUBSCRIBE)
            self.broker.success(sub.subscribe.request_id)
            consumers.append(self.successResultOf(d))
        return MultiConsumer("persistent://public/default/t", consumers, self.client.clock)

    def test_merges_partitions(self):
        """A batch gathers messages of every partition, each with its topic."""
        multi = self.make_multi(BatchReceivePolicy(3, -1, 0))
        d = multi.batch_receive()
        self.broker.message(100, single(b"a"), entry_id=1)
        self.broker.message(101, single(b"b"), entry_id=2)
        self.assertNoResult(d)
        self.broker.message(100, single(b"c"), entry_id=3)
        messages = self.successResultOf(d)
        self.assertEqual([m.data() for m in messages], [b"a", b"b", b"c"])
        self.assertEqual([m.topic_name()[-11:] for m in messages],
                         ["partition-0", "partition-1", "partition-0"])

    def test_timeout_and_queue(self):
        """Queued messages are taken first; the default timeout completes the rest."""
        multi = self.make_multi()
        self.broker.message(101, single(b"x"), entry_id=1)
        d = multi.batch_receive()
        self.assertNoResult(d)
        self.client.clock.advance(0.1)
        self.assertEqual([m.data() for m in self.successResultOf(d)], [b"x"])

    def test_close_fails_pending(self):
        """Closing the multi-topic consumer fails its waiting batch receives."""
        multi = self.make_multi()
        d = multi.batch_receive()
        multi._closed()
        self.failureResultOf(d, errors.AlreadyClosed)


class BatchReceiveInteropTests(StandaloneInteropCase):
    """Our blocking consumer's batch_receive, the official producer, a real standalone."""

    def test_batches_from_official_producer(self):
        """Batched sends of the official producer come back as count-limited lists, then []."""
        import os
        topic = f"batch-receive-{os.urandom(4).hex()}"
        consumer = self.ours.subscribe(topic, "s", batch_receive_policy=BatchReceivePolicy(
            4, -1, 2000))
        producer = self.theirs.create_producer(topic, batching_enabled=True,
                                               batching_max_publish_delay_ms=5)
        for i in range(10):
            producer.send_async(b"m%d" % i, None)
        producer.flush()
        got = []
        sizes = []
        while len(got) < 10:
            messages = consumer.batch_receive()
            self.assertTrue(messages, "a batch receive timed out empty with messages due")
            sizes.append(len(messages))
            got.extend(messages)
        self.assertEqual([m.data() for m in got], [b"m%d" % i for i in range(10)])
        self.assertTrue(all(size <= 4 for size in sizes), sizes)
        for message in got:
            consumer.acknowledge(message)
        # Nothing more: the timeout completes with an empty list, as the official clients do.
        self.assertEqual(consumer.batch_receive(BatchReceivePolicy(10, -1, 200)), [])

    def test_partitioned_topic(self):
        """On a partitioned topic the batch gathers every partition's messages."""
        import os
        import urllib.request
        topic = f"persistent://public/default/batch-part-{os.urandom(4).hex()}"
        request = urllib.request.Request(
            f"{self.standalone.web_service_url}/admin/v2/{topic.replace('://', '/')}/partitions",
            data=b"3", method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass
        consumer = self.ours.subscribe(topic, "s", batch_receive_policy=BatchReceivePolicy(
            6, -1, 3000))
        producer = self.theirs.create_producer(topic, batching_enabled=False)
        for i in range(6):
            producer.send(b"p%d" % i, partition_key=str(i))
        got = []
        while len(got) < 6:
            messages = consumer.batch_receive()
            self.assertTrue(messages)
            got.extend(messages)
        self.assertEqual(sorted(m.data() for m in got), [b"p%d" % i for i in range(6)])
        self.assertGreater(len({m.topic_name() for m in got}), 1)
