"""
Issue 11's first trace on real processes (ZooKeeper, 3 bookies, 2 brokers, the official client,
deduplication on): ``PUT .../partitions`` on the broker that does not own the bundles, then the
owner is frozen (SIGSTOP) until its ZooKeeper session expires while the other broker takes the
partitions over. The non-owner must not have opened anything at the PUT, so it serves the
partitions from what the owner stored: every acknowledged message consumed exactly once, dedup
recovered (never "deduplication off"), the thawed owner unloads.
"""

import json
import os
import signal
import threading
import time
import urllib.request
import uuid

from pulsar_twisted.testing.cluster import wait_for

from tests.cluster.test_processes import AsyncPublisher, ClusterCase, pulsar


def http(method: str, url: str, body=None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status

def read_back(checker):
    """Everything ``checker`` (a subscription from the earliest position) receives until 3 s of
    quiet: the payloads ("m-%06d", in storage order) and how many came after a higher number of
    the same partition (a producer's messages stored out of order)."""
    stored, order_violations, last = [], 0, {}
    while True:
        try:
            message = checker.receive(timeout_millis=3000)
        except pulsar.Timeout:
            break
        stored.append(message.data())
        number = int(message.data()[2:])
        partition = message.topic_name()
        if number < last.get(partition, -1):
            order_violations += 1
        last[partition] = number
        checker.acknowledge(message)
    return stored, order_violations



class NonOwnerAdminThenTakeoverTests(ClusterCase):

    def test_partitions_put_on_non_owner_then_owner_frozen(self):
        cluster = self.make_cluster(bookies=3, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "brokerDeduplicationEnabled": True,
            "zooKeeperSessionTimeoutMillis": 4000})
        owner, other = cluster.brokers
        wait_for(lambda: {owner.broker_id, other.broker_id} <= set(cluster.registered_brokers()),
                 10, "broker registrations", on_timeout=cluster.logs)
        local = f"parts-{uuid.uuid4().hex[:8]}"
        topic = f"persistent://public/default/{local}"
        partitions = 3
        # The owner takes the partitions' bundles (an HTTP lookup acquires a free bundle).
        for i in range(partitions):
            http("GET", f"{owner.web_service_url}/lookup/v2/topic/persistent/public/default/"
                        f"{local}-partition-{i}")
        # The admin call, on the broker that does not own them.
        self.assertEqual(http("PUT", f"{other.web_service_url}/admin/v2/persistent/public/default/"
                                     f"{local}/partitions", partitions), 204)
        self.assertNotIn(f"managed ledger public/default/persistent/{local}", other.log_text(),
                         "the non-owner opened a managed ledger for PUT .../partitions")

        client = self.client(owner.service_url)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        # Read only at the end, from the start: what is stored, in storage order per partition.
        # (closed at once: a consumer connected across the move would get redeliveries)
        client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name=f"p-{local}", batching_enabled=False,
                                          send_timeout_millis=60000, block_if_queue_full=True)
        publisher = AsyncPublisher(producer)
        for i in range(300):
            publisher.send(b"m-%06d" % publisher.sent)
        producer.flush()

        # Freeze the owner past its session; meanwhile a client of the other broker makes it
        # take the partitions over (it opens their managed ledgers, fencing the owner's).
        registration = cluster.path(f"/loadbalance/brokers/{owner.broker_id}")
        figures = {}

        def freeze():
            try:
                os.kill(owner.process.pid, signal.SIGSTOP)
                frozen = time.monotonic()
                try:
                    wait_for(lambda: cluster.zk.exists(registration) is None, 20,
                             "the owner's session to expire", on_timeout=cluster.logs)
                    other_client = self.client(other.service_url)
                    figures["reader"] = other_client.subscribe(topic, "other-sub")
                finally:
                    os.kill(owner.process.pid, signal.SIGCONT)
                figures["frozen"] = time.monotonic() - frozen
            except Exception as e:
                figures["error"] = e

        freezer = threading.Thread(target=freeze)
        freezer.start()
        while freezer.is_alive():
            for _ in range(5):
                publisher.send(b"m-%06d" % publisher.sent)
            time.sleep(0.02)
        freezer.join()
        if "error" in figures:
            raise figures["error"]
        for i in range(300):
            publisher.send(b"m-%06d" % publisher.sent)
        started = time.monotonic()
        producer.flush()
        flush_seconds = time.monotonic() - started

        received = []
        deadline = time.monotonic() + 60
        while not publisher.acked <= set(received) and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            received.append(message.data())
            consumer.acknowledge(message)
        checker = self.client(other.service_url).subscribe(topic, "check")
        stored, order_violations = read_back(checker)
        duplicates = len(stored) - len(set(stored))
        other_log = other.log_text()
        print(f"\n  non-owner PUT partitions then owner frozen {figures['frozen']:.1f}s: sent "
              f"{publisher.sent}, acknowledged {len(publisher.acked)}, failed "
              f"{len(publisher.failed)}, consumed {len(set(received) & publisher.acked)} of the "
              f"acknowledged; stored {len(stored)}, stored twice {duplicates}, lost "
              f"{len(publisher.acked - set(stored))}, order violations {order_violations}; "
              f"last flush {flush_seconds:.1f}s; "
              f"partitions loaded by the other broker: "
              f"{sum(f'Loaded topic {topic}-partition-{i}' in other_log for i in range(partitions))}")
        self.assert_all_received(publisher.acked, set(received))
        self.assertEqual(publisher.acked - set(stored), set(), "acknowledged messages not stored")
        self.assertEqual(duplicates, 0, "messages stored twice despite deduplication")
        self.assertEqual(order_violations, 0, "a producer's messages stored out of order")
        self.assertNotIn("deduplication off", other_log + owner.log_text())
        self.assertEqual(len(publisher.acked), publisher.sent,
                         f"sends failed: {list(publisher.failed.items())[:5]}")
        self.assertLess(flush_seconds, 10, "sends not answered within 10 s after the heal")


class WriteFailureFencingProcessTests(ClusterCase):
    """Issue 11's second trace: adds fail (a bookie of a full-width ensemble dies, no spare).
    The topic fences, producers reconnect and resend; once the bookie is back every acknowledged
    message is stored once, in order, and the sends are answered within 10 s."""

    def test_bookie_killed_without_spare_then_restarted(self):
        cluster = self.make_cluster(bookies=3, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 3, "managedLedgerDefaultWriteQuorum": 3,
            "managedLedgerDefaultAckQuorum": 3, "brokerDeduplicationEnabled": True,
            "bookkeeperClientTimeoutInSeconds": 3})
        broker = cluster.brokers[0]
        topic = f"persistent://public/default/fence-{uuid.uuid4().hex[:8]}"
        client = self.client(broker.service_url)
        client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name=f"p-{topic[-8:]}",
                                          batching_enabled=False, send_timeout_millis=120000,
                                          block_if_queue_full=True)
        publisher = AsyncPublisher(producer)
        for i in range(300):
            publisher.send(b"m-%06d" % publisher.sent)
        producer.flush()
        # Sends go on in a thread (a full client queue blocks them while writes fail).
        stop = threading.Event()

        def publish():
            while not stop.is_set():
                for _ in range(5):
                    publisher.send(b"m-%06d" % publisher.sent)
                time.sleep(0.02)

        sender = threading.Thread(target=publish)
        sender.start()
        try:
            victim = cluster.bookies[1]
            victim.kill9()
            time.sleep(5)
            victim.start()
            healed = time.monotonic()
            wait_for(lambda: victim.bookie_id in cluster.available_bookies(), 20,
                     "the bookie to register again", on_timeout=cluster.logs)
            time.sleep(1)
        finally:
            stop.set()
            sender.join(60)
        producer.flush()
        answered = time.monotonic() - healed
        checker = client.subscribe(topic, "check")
        stored, order_violations = read_back(checker)
        duplicates = len(stored) - len(set(stored))
        log = broker.log_text()
        print(f"\n  bookie kill -9 without spare, restarted after 5 s: sent {publisher.sent}, "
              f"acknowledged {len(publisher.acked)}, failed {len(publisher.failed)}; stored "
              f"{len(stored)}, stored twice {duplicates}, lost {len(publisher.acked - set(stored))}, "
              f"order violations {order_violations}; topic fenced {log.count('fencing the topic')} "
              f"times; all sends answered {answered:.1f}s after the restart")
        self.assertEqual(publisher.acked - set(stored), set(), "acknowledged messages not stored")
        self.assertEqual(duplicates, 0, "messages stored twice despite deduplication")
        self.assertEqual(order_violations, 0, "a producer's messages stored out of order")
        self.assertEqual(len(publisher.acked), publisher.sent,
                         f"sends failed: {list(publisher.failed.items())[:5]}")
