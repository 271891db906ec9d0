"""
Interop beyond the basics: batches and their acks, compression, ack timeouts, dead-letter
topics, producer access modes, fan-out to several subscriptions, failover over partitions and
regex subscriptions discovering topics created later.
"""

import json
import re
import time
import urllib.request
import uuid

from tests.interop.test_core import CT, Earliest, InteropCase, pulsar


class BatchAndCompressionTests(InteropCase):

    def test_batch_acked_message_by_message_not_redelivered(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name, batching_enabled=True,
                                               batching_max_messages=10,
                                               batching_max_publish_delay_ms=50)
        for i in range(30):
            producer.send_async(f"b-{i}".encode(), None)
        producer.flush()
        got = self.receive_all(consumer, 30)
        self.assertTrue(any(m.message_id().batch_index() > 0 for m in got), "nothing batched")
        for message in got[:20]:
            consumer.acknowledge(message)
        consumer.close()
        again = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        redelivered = self.datas(self.drain(again, ack=True))
        # Batch-index acks are off (Pulsar's default): a batch comes back whole while any of
        # its messages is unacked, and never once all of them are.
        self.assertTrue(set(redelivered) >= {f"b-{i}".encode() for i in range(20, 30)})
        self.assertTrue(set(redelivered).isdisjoint({f"b-{i}".encode() for i in range(10)}),
                        redelivered)

    def test_compressed_messages(self):
        for compression in (pulsar.CompressionType.LZ4, pulsar.CompressionType.ZLib,
                            pulsar.CompressionType.ZSTD, pulsar.CompressionType.SNAPPY):
            name = self.topic()
            consumer = self.client.subscribe(name, "sub")
            producer = self.client.create_producer(name, compression_type=compression,
                                                   batching_enabled=True)
            payloads = [(f"{compression}-{i}-" * 50).encode() for i in range(20)]
            for payload in payloads:
                producer.send_async(payload, None)
            producer.flush()
            self.assertEqual(self.datas(self.receive_all(consumer, 20, ack=True)), payloads)

    def test_batch_receive(self):
        name = self.topic()
        consumer = self.client.subscribe(
            name, "sub", batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(10, -1, 200))
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 25)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 25 and time.monotonic() < deadline:
            batch = consumer.batch_receive()
            got.extend(batch)
        self.assertEqual(self.datas(got), sent)


class RedeliveryFeatureTests(InteropCase):

    def test_ack_timeout_redelivers(self):
        """
        The client's ack timeout (its minimum, 10 s) redelivers what was not acked: on Shared
        with redelivery_count() 1, on Exclusive with 0 (Pulsar's single-active dispatchers keep
        no redelivery tracker). Both subscriptions wait out the same 10 s.
        """
        name = self.topic()
        shared = self.client.subscribe(name, "shared", consumer_type=CT.Shared,
                                       unacked_messages_timeout_ms=10000)
        exclusive = self.client.subscribe(name, "exclusive", consumer_type=CT.Exclusive,
                                          unacked_messages_timeout_ms=10000)
        producer = self.client.create_producer(name)
        producer.send(b"unacked")
        producer.send(b"acked")
        for consumer in (shared, exclusive):
            first, second = self.receive(consumer), self.receive(consumer)
            self.assertEqual(first.data(), b"unacked")
            consumer.acknowledge(second)
        for consumer, expected in ((shared, 1), (exclusive, 0)):
            again = self.receive(consumer, 20000)
            self.assertEqual((again.data(), again.redelivery_count()), (b"unacked", expected))
            consumer.acknowledge(again)

    def test_dead_letter_topic_after_max_redeliveries(self):
        name = self.topic(domain="persistent")
        dlq = name + "-my-dlq"
        dlq_consumer = self.client.subscribe(dlq, "dlq-sub", initial_position=Earliest)
        consumer = self.client.subscribe(
            name, "sub", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=50,
            dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2,
                                                               dead_letter_topic=dlq))
        producer = self.client.create_producer(name)
        producer.send(b"poison")
        producer.send(b"fine")
        counts = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                break
            if message.data() == b"fine":
                consumer.acknowledge(message)
            else:
                counts.append(message.redelivery_count())
                consumer.negative_acknowledge(message)
        self.assertEqual(counts, [0, 1, 2])
        dead = self.receive(dlq_consumer, 10000)
        self.assertEqual(dead.data(), b"poison")
        dlq_consumer.acknowledge(dead)


class ProducerModeAndFanOutTests(InteropCase):

    def test_exclusive_producer_access_mode(self):
        name = self.topic()
        first = self.client.create_producer(name, access_mode=pulsar.ProducerAccessMode.Exclusive)
        # Pulsar's AbstractTopic: a Shared producer meets ProducerBusy, an Exclusive one is fenced.
        with self.assertRaises(pulsar.ProducerBusy):
            self.new_client().create_producer(name)
        with self.assertRaises(pulsar.ProducerFenced):
            self.new_client().create_producer(name,
                                              access_mode=pulsar.ProducerAccessMode.Exclusive)
        first.send(b"x")
        first.close()
        self.new_client().create_producer(name).send(b"y")

    def test_fan_out_to_subscriptions(self):
        name = self.topic()
        consumers = [self.client.subscribe(name, f"sub-{i}", consumer_type=kind)
                     for i, kind in enumerate((CT.Exclusive, CT.Shared, CT.Failover, CT.KeyShared))]
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 20, partition_key="k")
        for consumer in consumers:
            self.assertEqual(self.datas(self.receive_all(consumer, 20, ack=True)), sent)

    def test_unsubscribe_refused_while_others_connected(self):
        name = self.topic()
        a = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        # Pulsar's SubscriptionBusyException reaches the client as ConsumerBusy.
        with self.assertRaises(pulsar.ConsumerBusy):
            a.unsubscribe()
        b.close()
        a.unsubscribe()


class PartitionedFeatureTests(InteropCase):

    standalone_config = {"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 4,
                         "activeConsumerFailoverDelayTimeMillis": 100}

    def test_failover_spreads_partitions(self):
        name = self.topic(domain="persistent")
        a = self.client.subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="a")
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="b")
        self._wait_for_consumers(name, "sub", 2)
        time.sleep(0.3)  # failover delay of this standalone
        producer = self.client.create_producer(name, batching_enabled=False)
        sent = self.publish(producer, 40)
        got_a, got_b = self.drain(a, ack=True), self.drain(b, ack=True)
        self.assertEqual(sorted(self.datas(got_a) + self.datas(got_b)), sorted(sent))
        topics_a = {m.topic_name() for m in got_a}
        topics_b = {m.topic_name() for m in got_b}
        self.assertEqual(len(topics_a), 2, topics_a)
        self.assertEqual(len(topics_b), 2, topics_b)
        self.assertTrue(topics_a.isdisjoint(topics_b))

    def _partition_state(self, partition: str) -> str:
        """The partition's stats and internal stats, for a failure message."""
        base = self.standalone.web_service_url + partition.replace("persistent://", "/admin/v2/persistent/")
        parts = []
        parent = base.rsplit("-partition-", 1)[0]
        for url in (base + "/stats", base + "/internalStats", parent + "/partitioned-stats?perPartition=true",
                    parent + "/stats"):
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    parts.append(response.read().decode()[:4000])
            except Exception as e:  # noqa: BLE001 - diagnostics only
                parts.append(f"{url}: {e!r}")
        return "\n".join(parts)

    def _wait_for_consumers(self, name: str, subscription: str, count: int, timeout: float = 10):
        """Until every partition's ``subscription`` has ``count`` consumers (the client attaches a
        partitioned consumer to its partitions one by one: on a loaded machine ``b`` may not yet be
        on all of them when the first messages are dispatched)."""
        path = name.replace("persistent://", "/admin/v2/persistent/") + "/partitioned-stats?perPartition=true"
        deadline = time.monotonic() + timeout
        while True:
            with urllib.request.urlopen(self.standalone.web_service_url + path, timeout=10) as response:
                stats = json.load(response)
            counts = [len(p.get("subscriptions", {}).get(subscription, {}).get("consumers", []))
                      for p in stats.get("partitions", {}).values()]
            if counts and all(c == count for c in counts):
                return
            self.assertLess(time.monotonic(), deadline, f"consumers per partition: {counts}")
            time.sleep(0.05)

    def test_reader_on_a_partition(self):
        name = self.topic(domain="persistent")
        producer = self.client.create_producer(name, batching_enabled=False)
        sent = self.publish(producer, 8)
        partition = f"{name}-partition-1"
        reader = self.client.create_reader(partition, pulsar.MessageId.earliest)
        got = []
        # Seen once on a loaded machine: the first has_message_available() answered False; poll
        # (bounded) rather than trust one answer, then check that nothing more is available.
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            if reader.has_message_available():
                got.append(reader.read_next(5000))
            else:
                time.sleep(0.1)
        if len(got) != 2:
            # Intermittent (about 1 run in 15 on a loaded machine): say what the broker holds.
            self.fail(f"read {len(got)} of 2 from {partition} (sent {sent}):\n{self._partition_state(partition)}")
        self.assertFalse(reader.has_message_available())
        self.assertTrue(set(self.datas(got)) <= set(sent))

    def test_regex_subscription_discovers_new_topics(self):
        stem = f"disc-{uuid.uuid4().hex[:6]}"
        first = f"persistent://public/default/{stem}-a"
        self.client.create_producer(first).send(b"a")
        # pulsar-client 3.13's Client.subscribe type-checks pattern_auto_discovery_period but
        # never passes it on (the C++ default of 60 s stays): set it on the configuration.
        original = pulsar._pulsar.ConsumerConfiguration

        def configuration():
            conf = original()
            conf.pattern_auto_discovery_period(1)
            return conf

        self.patch(pulsar._pulsar, "ConsumerConfiguration", configuration)
        consumer = self.client.subscribe(re.compile(f"persistent://public/default/{stem}-.*"),
                                         "sub", initial_position=Earliest)
        self.assertEqual(self.receive(consumer).data(), b"a")
        later = f"persistent://public/default/{stem}-b"
        self.client.create_producer(later).send(b"b")
        # Discovery runs every second; the new topic's subscription starts at earliest.
        message = self.receive(consumer, 10000)
        self.assertEqual(message.data(), b"b")
