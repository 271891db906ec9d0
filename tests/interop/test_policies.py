"""
Interop: namespace policies set through the admin REST API, seen by the official client against a
real ``twistd pulsar-standalone``: message TTL expiring a backlog, and a producer_exception backlog
quota refusing producers with the client's ProducerBlockedQuotaExceededException.
"""

import time

from tests.interop.admin_support import AdminInteropCase
from tests.interop.test_core import pulsar


class PolicyInteropTests(AdminInteropCase):
    standalone_config = {"backlogQuotaCheckIntervalInSeconds": 1, "journalSyncData": "false"}
    namespace_prefix = "policies"

    def test_message_ttl_expires_the_backlog(self):
        """Messages older than a TTL set over REST are expired at once and never delivered."""
        ns = self.namespace()
        topic = f"persistent://public/{ns}/ttl"
        self.client.subscribe(topic, "sub").close()      # a durable subscription, no consumer
        producer = self.client.create_producer(topic)
        for i in range(5):
            producer.send(b"old-%d" % i)
        time.sleep(2.2)
        self.assertEqual(self.rest("POST", f"/admin/v2/namespaces/public/{ns}/messageTTL", 1), 204)
        producer.send(b"fresh")
        consumer = self.client.subscribe(topic, "sub")
        self.assertEqual(self.receive(consumer).data(), b"fresh")
        self.assertEqual(self.drain(consumer), [])

    def test_producer_exception_quota(self):
        """Over a producer_exception quota new producers are refused and existing ones fail."""
        ns = self.namespace()
        topic = f"persistent://public/{ns}/quota"
        self.client.subscribe(topic, "slow").close()
        producer = self.client.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
        for _ in range(20):
            producer.send(b"x" * 200)
        self.rest("POST", f"/admin/v2/namespaces/public/{ns}/backlogQuota",
                  {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"})
        with self.assertRaises(pulsar.ProducerBlockedQuotaExceededException):
            self.client.create_producer(topic)
        # enforcing the quota disconnected the first producer: it cannot come back, its sends fail
        deadline = time.monotonic() + 10
        failed = None
        while failed is None and time.monotonic() < deadline:
            try:
                producer.send(b"more")
                time.sleep(0.2)
            except pulsar.PulsarException as e:
                failed = e
        self.assertIsInstance(failed, pulsar.ProducerBlockedQuotaExceededException)
        # the backlog goes away: producers are accepted again
        self.rest("DELETE", f"/admin/v2/namespaces/public/{ns}/backlogQuota")
        self.client.create_producer(topic).send(b"after")
