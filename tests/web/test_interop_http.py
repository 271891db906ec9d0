"""
Interop: the official Pulsar client (``pulsar-client``) with an ``http://`` service URL, so that
lookups, partitioned-topic metadata and regex topic listing go over our HTTP service, against a
real ``twistd pulsar-standalone`` in a subprocess.
"""

import re
import uuid

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from pulsar_twisted.testing.process import StandaloneProcess

try:
    import pulsar
except ImportError:  # pragma: no cover - a test dependency
    pulsar = None


class HttpServiceUrlTests(SynchronousTestCase):
    def setUp(self):
        if pulsar is None:
            raise SkipTest("pulsar-client is not installed")
        self.standalone = StandaloneProcess({"journalSyncData": "false"})
        self.addCleanup(self.standalone.cleanup)
        self.standalone.start()
        self.client = pulsar.Client(self.standalone.web_service_url, operation_timeout_seconds=10,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.addCleanup(self.client.close)

    def test_produce_consume_over_http_lookup(self):
        """Lookup and partition metadata over HTTP; regex subscription lists topics over HTTP."""
        name = f"persistent://public/default/http-{uuid.uuid4().hex[:8]}"
        consumer = self.client.subscribe(name, "s")
        producer = self.client.create_producer(name)
        for i in range(3):
            producer.send(b"m%d" % i)
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
        self.assertEqual(got, [b"m0", b"m1", b"m2"])

        pattern = self.client.subscribe(re.compile(name.rsplit("/", 1)[0] + "/http-.*"), "rx",
                                        initial_position=pulsar.InitialPosition.Earliest)
        self.assertEqual(pattern.receive(timeout_millis=5000).data(), b"m0")
        log = self.standalone.log_text()
        self.assertIn("/lookup/v2/topic/persistent/public/default/http-", log)
        self.assertIn("/partitions", log)
        self.assertIn("/admin/v2/namespaces/public/default/topics", log)
