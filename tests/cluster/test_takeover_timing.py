"""
Take-over after a broker dies (issue 14, item 5): where the time goes between ``kill -9`` of the
broker serving a topic and the first message the surviving broker stores for the topic's producer.

A watcher thread polls ZooKeeper and the producer's receipts every 10 ms and timestamps each step:
the dead broker's session expiring (its registration vanishes), its bundle node vanishing, the survivor
owning the bundle, the survivor's log showing the topic loaded, the first receipt after the kill. The
test prints that breakdown (figures only: nothing is asserted about time, the machine is shared) and
asserts what must hold whatever the timing: every acknowledged message is consumed, exactly once
among those acknowledged before the kill (the producer does not resend what was stored).
"""

import threading
import time
import uuid

from pulsar_twisted.broker.ownership import bundle_for
from pulsar_twisted.resources.policies import even_boundaries
from pulsar_twisted.testing.cluster import wait_for
from tests.cluster.test_processes import ClusterCase, subscribed_publisher


class Timeline:
    """Timestamps (seconds since ``start``) of the first time each condition was seen true."""

    def __init__(self, conditions: dict, interval: float = 0.01):
        self.conditions = dict(conditions)
        self.seen = {}
        self.interval = interval
        self.start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set() and len(self.seen) < len(self.conditions):
            for name, condition in self.conditions.items():
                if name not in self.seen:
                    try:
                        if condition():
                            self.seen[name] = time.monotonic() - self.start
                    except Exception:
                        pass
            time.sleep(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join(5)

    def render(self) -> str:
        rows, previous = [], 0.0
        for name in sorted(self.seen, key=self.seen.get):
            at = self.seen[name]
            rows.append(f"    {at:6.2f} s  (+{at - previous:5.2f})  {name}")
            previous = at
        missing = [n for n in self.conditions if n not in self.seen]
        return "\n".join(rows + ([f"    never seen: {', '.join(missing)}"] if missing else []))


class TakeoverTimingTests(ClusterCase):

    def test_takeover_breakdown(self):
        cluster = self.make_cluster(bookies=2, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 2, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2})
        broker_a, broker_b = cluster.brokers
        wait_for(lambda: {broker_a.broker_id, broker_b.broker_id} <= set(cluster.registered_brokers()),
                 10, "broker registrations", on_timeout=cluster.logs)
        bounds = even_boundaries(4)
        prefix = uuid.uuid4().hex[:8]
        topic = f"persistent://public/default/takeover-{prefix}"
        bundle = bundle_for("public/default", bounds, topic)
        # The leader places the free bundle; B names its owner (to be killed), A the other broker.
        self.client(broker_b.service_url).create_producer(topic).close()
        owner_url = cluster.bundle_owners().get(bundle.range_name)
        broker_b = next(b for b in cluster.brokers if b.service_url == owner_url)
        broker_a = next(b for b in cluster.brokers if b is not broker_b)
        client = self.client(broker_a.service_url)   # through A, redirected to B
        consumer, producer, publisher = subscribed_publisher(client, topic)
        for i in range(200):
            publisher.send(b"m-%05d" % i)
        producer.flush()
        before = set(publisher.acked)
        self.assertEqual(len(before), 200, publisher.failed)

        registration = cluster.path(broker_b.registration)
        acked_at_kill = len(publisher.acked)
        broker_b.kill9()
        timeline = Timeline({
            "B's session expired (registration gone)": lambda: cluster.zk.exists(registration) is None,
            # A may create its node within one poll of B's vanishing: "gone" is "no longer B's".
            "B's bundle node gone": lambda: cluster.bundle_owners().get(bundle.range_name)
            != broker_b.service_url,
            "A owns the bundle": lambda: cluster.bundle_owners().get(bundle.range_name)
            == broker_a.service_url,
            "A loaded the topic": lambda: f"Loaded topic {topic}" in broker_a.log_text(),
            "first receipt after the kill": lambda: len(publisher.acked) > acked_at_kill,
        })
        for i in range(200, 400):
            publisher.send(b"m-%05d" % i)
            if i % 20 == 0:
                time.sleep(0.05)
        producer.flush()
        wait_for(lambda: len(timeline.seen) == len(timeline.conditions), 30, "every step",
                 on_timeout=lambda: timeline.render() + "\n" + cluster.logs())
        timeline.stop()
        received, duplicates = self.receive_counting(consumer, publisher.acked, timeout=60)
        expired = timeline.seen["B's session expired (registration gone)"]
        served = timeline.seen["first receipt after the kill"]
        print(f"\n  take-over after kill -9 of the owner (session timeout 4 s):\n{timeline.render()}\n"
              f"  served {served - expired:.2f} s after the session expiry ({served:.2f} s after the "
              f"kill); {len(publisher.acked)} acknowledged, {len(publisher.failed)} failed, "
              f"{len(duplicates)} duplicates received")
        self.assert_all_received(publisher.acked, received)
        self.assertEqual(publisher.failed, {})
        # What was stored before the kill is not stored again by the producer's resends.
        self.assertEqual([d for d in duplicates if d in before], [])

    def receive_counting(self, consumer, wanted, timeout):
        """Like receive_all, also returning the payloads received more than once."""
        from tests.cluster.test_processes import pulsar
        received, duplicates = set(), []
        deadline = time.monotonic() + timeout
        while not wanted <= received and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            if message.data() in received:
                duplicates.append(message.data())
            received.add(message.data())
            consumer.acknowledge(message)
        return received, duplicates
