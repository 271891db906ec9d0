"""
Interop: our client (blocking facade, private reactor) with an ``http://`` service URL — lookups,
partitioned metadata and namespace topic lists over the standalone's web service — against a real
``twistd pulsar-standalone``, with the official client on the other side of the messages.

One standalone serves the whole module (started by the first test, stopped after the last).
"""

import re
import urllib.request
import uuid

from pulsar_twisted.client import errors
from pulsar_twisted.client.http_lookup import HttpLookupService
from tests.client.interop_support import StandaloneInteropCase


class HttpLookupInteropTests(StandaloneInteropCase):
    def standalone_config(self):
        return {"journalSyncData": "false"}

    def our_service_url(self):
        """Our client looks up over the web service (``http://``), the subject of this module."""
        return self.standalone.web_service_url

    def topic(self, name=None):
        return (f"persistent://public/default/{name or self._testMethodName}-"
                f"{uuid.uuid4().hex[:8]}")

    def test_produce_consume(self):
        """Our producer and consumer find the broker over HTTP; the official client agrees."""
        self.assertIsInstance(self.ours._inner.lookup, HttpLookupService)
        topic = self.topic()
        consumer = self.ours.subscribe(topic, "s")
        theirs = self.theirs.subscribe(topic, "t")
        producer = self.ours.create_producer(topic)
        for i in range(3):
            producer.send(b"m%d" % i)
        self.assertEqual([consumer.receive(5000).data() for _ in range(3)],
                         [b"m0", b"m1", b"m2"])
        self.assertEqual([theirs.receive(5000).data() for _ in range(3)],
                         [b"m0", b"m1", b"m2"])
        log = self.standalone.log_text()
        self.assertIn("/lookup/v2/topic/persistent/public/default/test_produce_consume-", log)
        self.assertIn("/partitions?checkAllowAutoCreation=true", log)

    def test_partitioned_topic(self):
        """Partition count over HTTP: our producer spreads, our consumer reads every partition."""
        topic = self.topic()
        local = topic.rsplit("/", 1)[1]
        request = urllib.request.Request(
            f"{self.standalone.web_service_url}/admin/v2/persistent/public/default/{local}"
            "/partitions", data=b"3", method="PUT", headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        self.assertEqual(len(self.ours.get_topic_partitions(topic)), 3)
        consumer = self.ours.subscribe(topic, "s", initial_position="Earliest")
        producer = self.ours.create_producer(topic)
        ids = [producer.send(b"p%d" % i) for i in range(6)]
        self.assertEqual(sorted({mid.partition for mid in ids}), [0, 1, 2])
        got = sorted(consumer.receive(5000).data() for _ in range(6))
        self.assertEqual(got, sorted(b"p%d" % i for i in range(6)))

    def test_regex_subscription(self):
        """A pattern subscription lists the namespace's topics over HTTP and reads the matches."""
        prefix = f"rx-{uuid.uuid4().hex[:6]}"
        base = "persistent://public/default/"
        for name in (f"{prefix}-a", f"{prefix}-b", f"x{prefix}"):
            self.theirs.create_producer(base + name).send(name.encode())
        consumer = self.ours.subscribe(re.compile(base + prefix + "-.*"), "s",
                                       initial_position="Earliest")
        got = sorted(consumer.receive(5000).data() for _ in range(2))
        self.assertEqual(got, [f"{prefix}-a".encode(), f"{prefix}-b".encode()])
        self.assertIn("/admin/v2/namespaces/public/default/topics?mode=PERSISTENT",
                      self.standalone.log_text())

    def test_missing_namespace(self):
        """A topic of a namespace that does not exist: TopicNotFound from the HTTP 404."""
        with self.assertRaises(errors.TopicNotFound):
            self.ours.create_producer(f"persistent://public/nope-{uuid.uuid4().hex[:6]}/t")
