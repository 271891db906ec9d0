"""
A topic moved by ``PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload`` while the
official client, given only ``twistd pulsar-proxy``'s URL, keeps producing and consuming on it
(issue 15, item 1 "follows a topic that moves between brokers", item 4 unload, item 5 nothing
lost). The unload goes through the proxy's admin forwarding; the owner closes the producer and the
consumer (CLOSE_PRODUCER / CLOSE_CONSUMER), the client looks the topic up again through the proxy
and reconnects to the new owner. Every acknowledged send must be consumed; with deduplication off
no stored message may be stored twice (a resend of a stored message would show).

Reuses ``tests.proxy.test_processes.ProxyCase`` (ZooKeeper, a bookie, two brokers, a proxy);
skipped without ZooKeeper or the official client.
"""

import json
import time

from pulsar_twisted.testing.cluster import wait_for
from tests.proxy.test_processes import ProxyCase, pulsar


class UnloadThroughTheProxyTests(ProxyCase):

    # Deduplication off: a producer resending a message already stored would show as a copy.
    broker_config = {"brokerDeduplicationEnabled": "false"}

    def bundle_of(self, topic):
        status, body = self.http("GET", "/admin/v2/" + topic.replace("://", "/") + "/bundle")
        self.assertEqual(status, 200, body)
        text = body.decode().strip()
        return json.loads(text) if text.startswith('"') else text

    def unload(self, bundle):
        status, body = self.http("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload")
        self.assertIn(status, (200, 204), body)

    def test_clients_follow_a_bundle_unloaded_through_the_proxy(self):
        """Async sends at ~100 msg/s and a consumer, both through the proxy; the topic's bundle
        unloaded through the proxy until its owner changes (at most 4 unloads: the next lookup
        places the bundle anew, and with two idle brokers it may land on the same one): every
        acknowledged message consumed, none stored twice, none failed."""
        client = self.new_client(timeout=30)
        topic = self.topic("unloaded")
        consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
        # A subscription that never acknowledges: without retention the ledgers "s" has consumed
        # would be trimmed when the move rolls the topic over, and the read-back would miss them.
        client.subscribe(topic, "hold", receiver_queue_size=1).close()
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30000,
                                          block_if_queue_full=True)
        acked, failed, received = {}, {}, []

        def done(result, message_id, payload):
            if result == pulsar.Result.Ok:
                acked[payload] = (message_id.ledger_id(), message_id.entry_id())
            else:
                failed[payload] = str(result)

        sent = [0]

        def send_some(n):
            for _ in range(n):
                payload = b"m%06d" % sent[0]
                sent[0] += 1
                producer.send_async(payload, lambda r, m, p=payload: done(r, m, p))

        def consume_available():
            while True:
                try:
                    message = consumer.receive(timeout_millis=50)
                except pulsar.Timeout:
                    return
                received.append(message.data())
                consumer.acknowledge(message)

        send_some(20)
        producer.flush()
        first = self.owner_of(topic)
        bundle = self.bundle_of(topic)
        moves, owner = 0, first
        for _ in range(4):
            self.unload(bundle)
            moves += 1
            for _ in range(10):       # ~1 s of traffic while the client follows the topic
                send_some(10)
                consume_available()
                time.sleep(0.05)
            owner = self.owner_of(topic)
            if owner is not first:
                break
        self.assertIsNot(owner, first, f"the bundle never left {first.name} in {moves} unloads")
        send_some(50)
        producer.flush()
        deadline = time.monotonic() + 30
        while not set(acked) <= set(received) and time.monotonic() < deadline:
            consume_available()
        missing = set(acked) - set(received)
        print(f"\n  unload through the proxy: {moves} unload(s), {first.name} -> {owner.name}; sent "
              f"{sent[0]}, acknowledged {len(acked)}, failed {len(failed)}, received {len(received)} "
              f"({len(received) - len(set(received))} redelivered)")
        self.assertEqual(missing, set(), f"{len(missing)} acknowledged messages never consumed")
        self.assertEqual(failed, {})
        positions = list(acked.values())
        self.assertEqual(len(positions), len(set(positions)), "two sends acknowledged at one position")
        self.assertIn(f"Unloading topic {topic}", first.log_text())
        # Read back from the start: every message stored exactly once.
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(reader.read_next(timeout_millis=10000).data())
        reader.close()
        self.assertEqual(sorted(stored), sorted(set(stored)), "a message stored twice")
        self.assertEqual(set(acked) - set(stored), set(), "acknowledged but not stored")
        wait_for(lambda: self.metric("pulsar_proxy_new_connections") >= 2, 5, "proxy connections")
        self.assertEqual(self.cluster.tracebacks(), {})
