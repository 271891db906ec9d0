"""
Interop: messaging features seen through the official client (pulsar-client, C++ underneath):
deduplication, delayed delivery, producer access modes, chunking through the size limit, and
batch index acknowledgements.
"""

import threading
import time
from datetime import timedelta

from tests.interop.test_core import CT, Earliest, InteropCase, pulsar


class MessagingFeatureTests(InteropCase):
    standalone_config = {"activeConsumerFailoverDelayTimeMillis": 100,
                         "brokerDeduplicationEnabled": "true",
                         "acknowledgmentAtBatchIndexLevelEnabled": "true",
                         "delayedDeliveryTickTimeMillis": 100}

    # ------------------------------------------------------------------ deduplication
    def test_dedup_by_producer_name_and_sequence_id(self):
        """Explicit sequence ids: a repeated id is answered (id -1:-1) and not stored."""
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        producer = self.client.create_producer(name, producer_name="dedup-p")
        for seq in (0, 1, 2, 1, 0, 3):
            producer.send(f"m-{seq}".encode(), sequence_id=seq)
        got = self.drain(consumer, ack=True)
        self.assertEqual(self.datas(got), [b"m-0", b"m-1", b"m-2", b"m-3"])
        producer.close()
        # A reconnecting producer of the same name continues after the last stored id.
        again = self.client.create_producer(name, producer_name="dedup-p")
        self.assertEqual(again.last_sequence_id(), 3)
        again.send(b"m-4")
        self.assertEqual(self.datas(self.drain(consumer, ack=True)), [b"m-4"])

    # ------------------------------------------------------------------ delayed delivery
    def test_deliver_after_shared_late_exclusive_at_once(self):
        name = self.topic()
        shared = self.client.subscribe(name, "shared", consumer_type=CT.Shared)
        exclusive = self.client.subscribe(name, "excl", consumer_type=CT.Exclusive)
        producer = self.client.create_producer(name)
        sent_at = time.monotonic()
        producer.send(b"later", deliver_after=timedelta(seconds=3))
        producer.send(b"now")
        self.assertEqual(self.datas(self.receive_all(exclusive, 2, ack=True)), [b"later", b"now"])
        self.assertEqual(self.receive(shared).data(), b"now")
        late = self.receive(shared, timeout_ms=8000)
        self.assertEqual(late.data(), b"later")
        self.assertGreaterEqual(time.monotonic() - sent_at, 2.5)

    # ------------------------------------------------------------------ access modes
    def test_exclusive_producer_fences_others(self):
        name = self.topic()
        AM = pulsar.ProducerAccessMode
        first = self.client.create_producer(name, access_mode=AM.Exclusive)
        # As Pulsar's AbstractTopic: a second exclusive producer is fenced, a shared one busy.
        with self.assertRaises(pulsar.ProducerFenced):
            self.client.create_producer(name, access_mode=AM.Exclusive)
        with self.assertRaises(pulsar.ProducerBusy):
            self.client.create_producer(name)
        first.send(b"x")

    def test_wait_for_exclusive_gets_topic_when_free(self):
        name = self.topic()
        AM = pulsar.ProducerAccessMode
        first = self.client.create_producer(name, access_mode=AM.Exclusive)
        result = {}

        def wait():
            try:
                result["producer"] = self.new_client().create_producer(name, access_mode=AM.WaitForExclusive)
            except Exception as e:  # reported below
                result["error"] = e

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.0)
        self.assertNotIn("producer", result)
        first.close()
        waiter.join(15)
        self.assertIn("producer", result, result.get("error"))
        result["producer"].send(b"mine now")

    def test_exclusive_with_fencing_takes_over(self):
        name = self.topic()
        AM = pulsar.ProducerAccessMode
        old = self.client.create_producer(name, send_timeout_millis=3000)
        new = self.new_client().create_producer(name, access_mode=AM.ExclusiveWithFencing)
        new.send(b"fenced the others")
        # The old (Shared) producer was closed by the broker; its reconnect is refused with
        # ProducerBusy ("Topic has an existing exclusive producer", Pulsar's answer to a Shared
        # producer), which the C++ client retries until its send timeout: so a Timeout, and
        # nothing of it stored.
        with self.assertRaises(pulsar.Timeout):
            old.send(b"too late")
        check = self.client.subscribe(name, "check", initial_position=Earliest)
        self.assertEqual(self.datas(self.drain(check)), [b"fenced the others"])

    # ------------------------------------------------------------------ chunking
    def test_chunked_12mb_message_through_5mb_limit(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Exclusive)
        producer = self.client.create_producer(name, chunking_enabled=True, batching_enabled=False)
        big = bytes(range(256)) * (12 * 1024 * 1024 // 256)
        producer.send(big)
        got = self.receive(consumer, timeout_ms=30000)
        self.assertEqual(len(got.data()), len(big))
        self.assertEqual(got.data(), big)
        consumer.acknowledge(got)

    def test_chunked_message_on_shared_subscription(self):
        name = self.topic()
        consumers = [self.client.subscribe(name, "sub", consumer_type=CT.Shared) for _ in range(2)]
        producer = self.client.create_producer(name, chunking_enabled=True, batching_enabled=False)
        big = b"y" * (6 * 1024 * 1024)
        producer.send(big)
        producer.send(b"small")
        got = []
        for consumer in consumers:
            got.extend(self.drain(consumer, quiet_ms=1500, ack=True))
        self.assertEqual(sorted(len(m.data()) for m in got), [5, len(big)])

    # ------------------------------------------------------------------ batch index acks
    def test_batch_index_ack_redelivers_only_unacked(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared,
                                         batch_index_ack_enabled=True,
                                         negative_ack_redelivery_delay_ms=100)
        producer = self.client.create_producer(name, batching_enabled=True, batching_max_messages=4,
                                               batching_max_publish_delay_ms=50)
        for i in range(4):
            producer.send_async(f"b-{i}".encode(), None)
        producer.flush()
        got = self.receive_all(consumer, 4)
        self.assertEqual(len({self.mid(m.message_id()) for m in got}), 1, "one batch")
        consumer.acknowledge(got[0])
        consumer.acknowledge(got[2])
        time.sleep(0.5)     # the client groups acks (100 ms)
        consumer.close()
        again = self.client.subscribe(name, "sub", consumer_type=CT.Shared, batch_index_ack_enabled=True)
        redelivered = self.drain(again, quiet_ms=1500)
        self.assertEqual(sorted(self.datas(redelivered)), [b"b-1", b"b-3"])
