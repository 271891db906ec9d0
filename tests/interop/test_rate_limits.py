"""
Interop: rate limits set through the admin REST API (ratelimit.py), measured with the official
client against a real ``twistd pulsar-standalone``: a subscription dispatch rate bounds how fast a
consumer with a large receiver queue gets a backlog, and a publish rate slows a producer down.
Bounds are tolerant (timers and the first period's full budget), not exact.
"""

import time

from tests.interop.admin_support import AdminInteropCase
from tests.interop.test_core import Earliest, pulsar


class RateLimitInteropTests(AdminInteropCase):
    standalone_config = {"journalSyncData": "false"}
    namespace_prefix = "rates"

    def test_dispatch_rate_bounds_consume_rate(self):
        """A 200 msg/s subscription dispatch rate: about 200 messages a second reach a consumer
        with a 1000-message receiver queue, over ~3 s."""
        ns = self.namespace()
        topic = f"persistent://public/{ns}/dispatch"
        self.assertEqual(self.rest("POST", f"/admin/v2/namespaces/public/{ns}/subscriptionDispatchRate",
                                   {"dispatchThrottlingRateInMsg": 200, "dispatchThrottlingRateInByte": -1,
                                    "ratePeriodInSecond": 1, "relativeToPublishRate": False}), 204)
        producer = self.client.create_producer(topic, batching_enabled=False)
        for i in range(2000):
            producer.send_async(b"m-%d" % i, None)
        producer.flush()
        consumer = self.client.subscribe(topic, "sub", initial_position=Earliest, receiver_queue_size=1000)
        self.receive(consumer)
        started = time.monotonic()
        received = 1
        while time.monotonic() - started < 3.0:
            try:
                consumer.receive(timeout_millis=100)
                received += 1
            except pulsar.Timeout:  # keep measuring until the window ends
                pass
        elapsed = time.monotonic() - started
        self.assertLessEqual(received, 1.5 * 200 * elapsed, f"{received} messages in {elapsed:.2f} s")
        self.assertGreaterEqual(received, 0.5 * 200 * elapsed, f"{received} messages in {elapsed:.2f} s")

    def test_publish_rate_slows_producer(self):
        """A 100 msg/s publish rate: 300 synchronous sends take about two seconds or more."""
        ns = self.namespace()
        topic = f"persistent://public/{ns}/publish"
        self.assertEqual(self.rest("POST", f"/admin/v2/namespaces/public/{ns}/publishRate",
                                   {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}),
                         204)
        producer = self.client.create_producer(topic, batching_enabled=False)
        started = time.monotonic()
        for i in range(300):
            producer.send(b"p-%d" % i)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 1.5, f"300 messages in {elapsed:.2f} s")
        self.assertLess(elapsed, 10)
