"""
Interop: what the official client and the admin stats see of dispatch rules and stats (issue 13
items 5-7 and 12): counters that keep closed producers' and consumers' counts, rates over the
stats period, activeConsumerName and deduplicationStatus, Key_Shared STICKY routing by Pulsar's
hash, and redelivery counts of 0 on Exclusive and Failover.
"""

import json
import time
import urllib.request

from pulsar_twisted.client import blocking
from pulsar_twisted.client.consumer import Sub
from tests.client.interop_support import private_reactor
from tests.interop.test_core import InteropCase, pulsar

if pulsar is not None:
    CT = pulsar.ConsumerType


class StatsInteropTests(InteropCase):
    standalone_config = {"activeConsumerFailoverDelayTimeMillis": 100,
                         "statsUpdateFrequencyInSecs": 1,
                         "brokerDeduplicationEnabled": "true"}

    def stats(self, name: str) -> dict:
        url = f"{self.standalone.web_service_url}/admin/v2/persistent/public/default/{name}/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def test_counters_keep_closed_producer_and_consumer(self):
        """Right after the close (no stats period needed, the period is 1 s but the counters
        do not wait for it): msgInCounter and msgOutCounter still count what they did."""
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name, batching_enabled=False)
        for i in range(5):
            producer.send(b"m%d" % i)
        self.receive_all(consumer, 5, ack=True)
        before = self.stats(name)
        producer.close()
        consumer.close()
        after = self.stats(name)
        sub = after["subscriptions"]["sub"]
        self.assertEqual((after["publishers"], sub["consumers"]), ([], []))
        self.assertEqual((after["msgInCounter"], after["bytesInCounter"]),
                         (5, before["bytesInCounter"]))
        self.assertEqual((sub["msgOutCounter"], sub["bytesOutCounter"]),
                         (5, before["subscriptions"]["sub"]["bytesOutCounter"]))
        self.assertEqual(after["msgOutCounter"], 5)

    def test_rates_while_traffic_flows(self):
        """With messages flowing, a 1 s stats period shows publisher, subscription and consumer
        rates above zero (polled, bounded: each period's figure replaces the last)."""
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Exclusive,
                                         consumer_name="rated")
        producer = self.client.create_producer(name, batching_enabled=False)
        deadline = time.monotonic() + 15
        seen = None
        while time.monotonic() < deadline:
            for _ in range(10):
                producer.send(b"x" * 100)
            self.receive_all(consumer, 10, ack=True)
            stats = self.stats(name)
            sub = stats["subscriptions"]["sub"]
            if stats["msgRateIn"] > 0 and sub["msgRateOut"] > 0 and sub["consumers"][0]["msgRateOut"] > 0:
                seen = stats
                break
            time.sleep(0.2)
        self.assertIsNotNone(seen, "no rate above zero within 15 s of traffic")
        [publisher] = seen["publishers"]
        self.assertGreater(publisher["msgRateIn"], 0)
        self.assertGreater(publisher["msgThroughputIn"], 0)
        self.assertGreater(publisher["averageMsgSize"], 100)
        self.assertGreater(seen["subscriptions"]["sub"]["msgThroughputOut"], 0)

    def test_active_consumer_name_and_dedup_status(self):
        """activeConsumerName names the consumer Failover chose (the second to subscribe here,
        by the ring), deduplicationStatus says "Enabled" with brokerDeduplicationEnabled."""
        name = self.failover_topic(["first", "second"], "second")
        first = self.client.subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="first")
        self.client.create_producer(name)
        self.assertEqual(self.stats(name)["subscriptions"]["sub"]["activeConsumerName"], "first")
        self.new_client().subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="second")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stats = self.stats(name)
            if stats["subscriptions"]["sub"]["activeConsumerName"] == "second":
                break
            time.sleep(0.1)
        self.assertEqual(stats["subscriptions"]["sub"]["activeConsumerName"], "second")
        self.assertEqual(stats["deduplicationStatus"], "Enabled")
        first.close()

    def test_failover_same_rule_on_both_topic_kinds(self):
        """Persistent and non-persistent topics pick the active consumer by the same rule: the
        ring's choice for the topic name (the second to subscribe), after the failover delay."""
        for domain in ("persistent", "non-persistent"):
            name = f"{domain}://public/default/" + self.failover_topic(["a", "b"], "b", domain)
            a = self.client.subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="a")
            b = self.new_client().subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="b")
            time.sleep(0.3)  # activeConsumerFailoverDelayTimeMillis=100
            producer = self.client.create_producer(name, batching_enabled=False)
            for i in range(5):
                producer.send(b"m%d" % i)
            self.assertEqual(self.datas(self.drain(b, ack=True)), [b"m%d" % i for i in range(5)], domain)
            self.assertNoMessage(a)
            a.close()
            b.close()

    def test_key_shared_sticky_ranges_route_as_pulsar(self):
        """
        STICKY consumers on [0, 32767] and [32768, 65535]: Pulsar's slot of a key is
        Murmur3-32 (31 bits) mod 65536, "hello" -> 64071 and "NONE_KEY" (no key) -> 48803 go
        high, "key-1" -> 5536 low, and an ordering key decides over the partition key.
        """
        name = self.topic()
        policy = pulsar.ConsumerKeySharedPolicy

        def sticky(start, end):
            return self.new_client().subscribe(
                name, "sub", consumer_type=CT.KeyShared,
                key_shared_policy=policy(key_shared_mode=pulsar.KeySharedMode.Sticky,
                                         sticky_ranges=[(start, end)]))
        low, high = sticky(0, 32767), sticky(32768, 65535)
        producer = self.client.create_producer(name, batching_enabled=False)
        producer.send(b"no-key")
        producer.send(b"hello", partition_key="hello")
        producer.send(b"key-1", partition_key="key-1")
        producer.send(b"ordered", partition_key="hello", ordering_key="key-1")
        self.assertEqual(sorted(self.datas(self.drain(high, ack=True))), [b"hello", b"no-key"])
        self.assertEqual(sorted(self.datas(self.drain(low, ack=True))), [b"key-1", b"ordered"])

    def test_redelivery_count_zero_on_exclusive_and_failover(self):
        """Negative acks on Exclusive and Failover redeliver with redelivery_count() 0, as
        Pulsar's single-active dispatchers send (no redelivery tracker); Shared counts."""
        for kind, expected in ((CT.Exclusive, [0, 0, 0]), (CT.Failover, [0, 0, 0]),
                               (CT.Shared, [0, 1, 2])):
            name = self.topic()
            consumer = self.client.subscribe(name, "sub", consumer_type=kind,
                                             negative_ack_redelivery_delay_ms=100)
            self.client.create_producer(name).send(b"again")
            counts = []
            for _ in range(3):
                message = self.receive(consumer)
                counts.append(message.redelivery_count())
                consumer.negative_acknowledge(message)
            self.assertEqual(counts, expected, kind)
            consumer.close()

    def test_consumer_stats_command(self):
        """
        CONSUMER_STATS (the official Python client does not expose it; our client's
        get_broker_stats sends it): the permits left after a FLOW and 4 deliveries, the unacked
        count, and rates above zero once a 1 s stats period has passed with traffic.
        """
        name = self.topic()
        ours = blocking.Client(self.standalone.service_url, operation_timeout_seconds=10,
                               reactor=private_reactor())
        self.addCleanup(ours.close)
        consumer = ours.subscribe(f"persistent://public/default/{name}", "sub",
                                  consumer_type=Sub.Shared, receiver_queue_size=10,
                                  consumer_name="ours")
        producer = self.client.create_producer(name, batching_enabled=False)
        for i in range(4):
            producer.send(b"m%d" % i)
        got = [consumer.receive(5000) for _ in range(4)]
        stats = consumer.get_broker_stats()
        self.assertEqual((stats["consumerName"], stats["availablePermits"],
                          stats["unackedMessages"], stats["type"]), ("ours", 6, 4, "Shared"))
        for message in got:
            consumer.acknowledge(message)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and stats["msgRateOut"] == 0:
            producer.send(b"more")
            consumer.acknowledge(consumer.receive(5000))
            time.sleep(0.1)
            stats = consumer.get_broker_stats()
        self.assertGreater(stats["msgRateOut"], 0)
        self.assertGreater(stats["msgThroughputOut"], 0)
