"""The ``redis`` sink against the real Redis of ``test_connector_servers``: SET per message in
one pipelined transaction, keyless messages refused, Pulsar's config keys."""

import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.connectors import SinkRecord
from tests.functions import test_connector_servers as servers


class RedisSinkTests(SynchronousTestCase):

    def setUp(self):
        reason = servers.redis_unavailable()
        if reason:
            raise self.skipTest(reason)
        import redis
        host, port = servers.redis()
        self.hosts = f"{host}:{port}"
        self.db = 3
        self.redis = redis.Redis(host=host, port=port, db=self.db)
        self.addCleanup(self.redis.close)
        self.prefix = uuid.uuid4().hex[:8]

    def sink(self, **configs):
        from pulsar_twisted.functions.connectors.redis import RedisSink
        sink = RedisSink(dict({"redisHosts": self.hosts, "redisDatabase": self.db}, **configs))
        self.addCleanup(sink.close)
        return sink

    def test_set_per_message_and_keyless_refused(self):
        sink = self.sink(batchSize="50", batchTimeMs="20", operationTimeout="2000")
        self.assertEqual((sink.batch_size, sink.batch_time_ms), (50, 20))
        p = self.prefix
        records = [SinkRecord(b"v1", f"{p}-a"), SinkRecord(b"no key"), SinkRecord(b"v2", f"{p}-b"),
                   SinkRecord(b"v3", f"{p}-a")]
        refused = sink.write(records)
        self.assertEqual([r.value for r in refused], [b"no key"])
        self.assertIn("no key", refused[0].error)
        self.assertEqual(self.redis.mget([f"{p}-a", f"{p}-b"]), [b"v3", b"v2"])
        self.assertEqual(sink.write([]), [])

    def test_config_errors(self):
        for bad, message in (({"redisHosts": "nohost"}, "host:port"),
                             ({"clientMode": "Cluster"}, "Standalone")):
            with self.assertRaises(ValueError) as e:
                self.sink(**bad)
            self.assertIn(message, str(e.exception))
        import redis
        with self.assertRaises(redis.ConnectionError):
            self.sink(redisHosts="127.0.0.1:1", connectTimeout=500)
