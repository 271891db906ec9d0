"""
Interop for chunking, dead letters, retry letters, pattern subscriptions and the CLIs: our client
(blocking facade, private reactor thread) and the official ``pulsar`` client against one real
``twistd pulsar-standalone`` whose maxMessageSize is small enough that 50 KB messages chunk.
"""

import os
import re
import subprocess
import sys
import time
import uuid

from pulsar_twisted.client import dlq, errors
from pulsar_twisted.client.chunking import ChunkMessageId
from pulsar_twisted.testing.process import repo_env
from tests.client.interop_support import StandaloneInteropCase, pulsar

MAX_MESSAGE_SIZE = 16 * 1024
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FeatureInteropTests(StandaloneInteropCase):
    def standalone_config(self):
        return {"maxMessageSize": MAX_MESSAGE_SIZE}

    def topic(self, name=None):
        return (f"persistent://public/default/{name or self._testMethodName}-"
                f"{uuid.uuid4().hex[:8]}")

    # ------------------------------------------------------------------ chunking
    def test_our_chunks_official_consumer(self):
        """The official consumer reassembles our chunked messages (compressed and not)."""
        for codec in ("NONE", "LZ4"):
            topic = self.topic()
            consumer = self.theirs.subscribe(topic, "s")
            producer = self.ours.create_producer(topic, chunking_enabled=True,
                                                 compression_type=codec)
            payloads = [bytes([i]) * 1024 + os.urandom(50 * 1024) for i in range(3)]
            ids = [producer.send(p, properties={"i": str(i)}) for i, p in enumerate(payloads)]
            self.assertTrue(all(isinstance(i, ChunkMessageId) for i in ids))
            for i, payload in enumerate(payloads):
                message = consumer.receive(10000)
                self.assertEqual((message.data(), message.properties()), (payload, {"i": str(i)}),
                                 codec)
                consumer.acknowledge(message)

    def test_official_chunks_our_consumer(self):
        """Our consumer reassembles the official producer's chunks; the ack covers every chunk."""
        topic = self.topic()
        consumer = self.ours.subscribe(topic, "s", consumer_type="Shared")
        producer = self.theirs.create_producer(topic, chunking_enabled=True,
                                               batching_enabled=False)
        payload = uuid.uuid4().bytes * 5000
        producer.send(payload)
        producer.send(b"small")
        message = consumer.receive(10000)
        self.assertEqual(message.data(), payload)
        self.assertIsInstance(message.message_id(), ChunkMessageId)
        self.assertEqual(consumer.receive(10000).data(), b"small")
        consumer.acknowledge(message)
        consumer.close()
        # Every chunk was acked: only the unacked small message comes back.
        consumer = self.ours.subscribe(topic, "s", consumer_type="Shared")
        self.assertEqual(consumer.receive(10000).data(), b"small")
        self.assertRaises(errors.Timeout, consumer.receive, 500)

    # ------------------------------------------------------------------ dead letters
    def test_dead_letter_after_nacks(self):
        """After max_redeliver_count redeliveries a nacked message lands in the DLQ topic."""
        topic = self.topic()
        dlq_topic = topic + "-s-DLQ"
        dead = self.theirs.subscribe(dlq_topic, "dlq-reader")
        consumer = self.ours.subscribe(topic, "s", consumer_type="Shared",
                                       negative_ack_redelivery_delay_ms=100,
                                       dead_letter_policy=dlq.DeadLetterPolicy(2))
        producer = self.theirs.create_producer(topic)
        producer.send(b"poison", properties={"k": "v"})
        counts = []
        for _ in range(3):
            message = consumer.receive(5000)
            counts.append(message.redelivery_count())
            consumer.negative_acknowledge(message)
        self.assertEqual(counts, [0, 1, 2])
        letter = dead.receive(10000)
        self.assertEqual(letter.data(), b"poison")
        properties = letter.properties()
        self.assertEqual((properties["k"], properties[dlq.REAL_TOPIC]), ("v", topic))
        self.assertIn(dlq.ORIGIN_MESSAGE_ID, properties)
        self.assertRaises(errors.Timeout, consumer.receive, 600)

    def test_dead_letter_after_ack_timeout(self):
        """
        The same with the ack timeout. (The PRODUCER carries initial_subscription_name, but our
        broker does not create that subscription yet: the letter is read from Earliest.)
        """
        topic = self.topic()
        consumer = self.ours.subscribe(
            topic, "s", consumer_type="Shared", ack_timeout_ms=1000, ack_timeout_tick_ms=100,
            dead_letter_policy=dlq.DeadLetterPolicy(1, dead_letter_topic=topic + "-dead",
                                                    initial_subscription_name="init"))
        self.theirs.create_producer(topic).send(b"slow")
        self.assertEqual(consumer.receive(5000).redelivery_count(), 0)
        self.assertEqual(consumer.receive(5000).redelivery_count(), 1)
        time.sleep(1.5)
        dead = self.theirs.subscribe(topic + "-dead", "init",
                                     initial_position=pulsar.InitialPosition.Earliest)
        self.assertEqual(dead.receive(10000).data(), b"slow")

    def test_retry_letter(self):
        """reconsume_later sends the message round through the retry topic with its properties."""
        topic = self.topic()
        consumer = self.ours.subscribe(topic, "s", consumer_type="Shared", enable_retry=True,
                                       dead_letter_policy=dlq.DeadLetterPolicy(1))
        self.theirs.create_producer(topic).send(b"again")
        message = consumer.receive(5000)
        consumer.reconsume_later(message, 0)
        retried = consumer.receive(10000)
        self.assertEqual(retried.data(), b"again")
        self.assertEqual(retried.topic_name(), topic + "-s-RETRY")
        self.assertEqual(retried.properties()[dlq.RECONSUMETIMES], "1")
        self.assertEqual(retried.properties()[dlq.REAL_TOPIC], topic)
        dead = self.theirs.subscribe(topic + "-s-DLQ", "d")
        consumer.reconsume_later(retried, 0)
        self.assertEqual(dead.receive(10000).properties()[dlq.RECONSUMETIMES], "2")

    # ------------------------------------------------------------------ patterns
    def test_pattern_subscription_discovers_topics(self):
        """A regex subscription reads every matching topic and picks up new ones."""
        prefix = f"pat-{uuid.uuid4().hex[:6]}"
        base = "persistent://public/default/"
        for name in ("a", "b", "other"):
            self.theirs.create_producer(base + (f"{prefix}-{name}" if name != "other"
                                                else f"x{prefix}")).send(name.encode())
        consumer = self.ours.subscribe(re.compile(base + prefix + "-.*"), "s",
                                       initial_position="Earliest",
                                       pattern_auto_discovery_period=1)
        got = sorted(consumer.receive(5000).data() for _ in range(2))
        self.assertEqual(got, [b"a", b"b"])
        self.assertEqual(consumer.topics(), [f"{base}{prefix}-a", f"{base}{prefix}-b"])
        self.theirs.create_producer(base + prefix + "-c").send(b"c")
        message = consumer.receive(10000)
        self.assertEqual((message.data(), message.topic_name()), (b"c", f"{base}{prefix}-c"))
        consumer.acknowledge(message.message_id())

    def test_multi_topic_list(self):
        """subscribe([t1, t2]) merges both; ids carry their topic."""
        t1, t2 = self.topic("m1"), self.topic("m2")
        consumer = self.ours.subscribe([t1, t2], "s")
        self.theirs.create_producer(t1).send(b"1")
        self.theirs.create_producer(t2).send(b"2")
        messages = sorted((consumer.receive(5000) for _ in range(2)), key=lambda m: m.data())
        self.assertEqual([m.message_id().owner_topic() for m in messages], [t1, t2])

    # ------------------------------------------------------------------ command lines
    def _cli(self, module, *args, timeout=60):
        # Run from this checkout (an installed copy may be older).
        env = repo_env()
        return subprocess.run([sys.executable, "-m", f"pulsar_twisted.cli.{module}", *args],
                              capture_output=True, text=True, timeout=timeout, cwd=_REPO_ROOT,
                              env=env)

    def test_pulsar_client_cli(self):
        """produce then consume with the CLI, printed as Pulsar prints it."""
        topic = self.topic()
        url = self.standalone.service_url
        self.ours.subscribe(topic, "cli").close()
        produced = self._cli("client", "--url", url, "produce", topic, "-m", "a,b", "-n", "2",
                             "-k", "key1")
        self.assertEqual(produced.returncode, 0, produced.stderr)
        self.assertIn("4 messages successfully produced", produced.stdout)
        consumed = self._cli("client", "--url", url, "consume", topic, "-s", "cli", "-n", "4")
        self.assertEqual(consumed.returncode, 0, consumed.stderr)
        self.assertEqual(consumed.stdout.count("----- got message -----"), 4)
        self.assertIn("key:[key1], properties:[], content:a", consumed.stdout)
        self.assertIn("4 messages successfully consumed", consumed.stdout)

    def test_pulsar_perf_both_clients(self):
        """pulsar-perf --client both publishes with each and reports the ratio."""
        result = self._cli("perf", "produce", self.topic(), "--url", self.standalone.service_url,
                           "-s", "100", "-n", "3000", "-bm", "100", "--client", "both",
                           timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("[ours] Aggregated throughput stats --- 3000 records sent", result.stdout)
        self.assertIn("[official] Aggregated throughput stats --- 3000 records sent",
                      result.stdout)
        self.assertRegex(result.stdout, r"ours/official: [\d.]+ / [\d.]+ msg/s = [\d.]+")
