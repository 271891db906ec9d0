"""
Interop: schemas and topic compaction seen by the official client against a real standalone.
String, JSON and Avro schemas round-trip; an incompatible Avro change is refused; a compacted
reader and a TableView see the latest value per key, tombstones removing keys.
"""

import json
import time
import urllib.error
import urllib.request

from tests.interop.test_core import InteropCase, pulsar

try:
    from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema
except ImportError:  # pragma: no cover
    AvroSchema = None

try:
    import fastavro  # noqa: F401  (the client's AvroSchema needs it)
    _NO_AVRO = None
except ImportError:  # pragma: no cover
    _NO_AVRO = "fastavro (pulsar-client[avro]) is not installed"


if AvroSchema is not None:
    class User(Record):
        name = String()
        age = Integer()

    class UserV2(Record):
        _sorted_fields = True
        name = String()
        age = Integer()
        email = String(required=True)  # no default: not BACKWARD compatible

    # The same record name, so that only the fields differ.
    UserV2.__name__ = "User"


class SchemaCompactionInteropTests(InteropCase):
    standalone_config = {"journalSyncData": "false"}

    def rest(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.standalone.web_service_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def test_string_schema_round_trip(self):
        topic = self.topic()
        consumer = self.client.subscribe(topic, "s", schema=StringSchema())
        producer = self.client.create_producer(topic, schema=StringSchema())
        producer.send("héllo")
        self.assertEqual(self.receive(consumer).value(), "héllo")
        status, body = self.rest("GET", f"/admin/v2/schemas/public/default/{topic}/schema")
        self.assertEqual((status, body["type"], body["version"]), (200, "STRING", 0))

    def test_json_schema_round_trip(self):
        topic = self.topic()
        consumer = self.client.subscribe(topic, "s", schema=JsonSchema(User))
        producer = self.client.create_producer(topic, schema=JsonSchema(User))
        producer.send(User(name="ann", age=3))
        value = self.receive(consumer).value()
        self.assertEqual((value.name, value.age), ("ann", 3))

    def test_avro_round_trip_and_incompatible_change(self):
        topic = self.topic()
        consumer = self.client.subscribe(topic, "s", schema=AvroSchema(User))
        producer = self.client.create_producer(topic, schema=AvroSchema(User))
        producer.send(User(name="bob", age=5))
        value = self.receive(consumer).value()
        self.assertEqual((value.name, value.age), ("bob", 5))
        with self.assertRaises(pulsar.PulsarException) as caught:
            self.client.create_producer(topic, schema=AvroSchema(UserV2))
        self.assertIn("Incompatible", str(caught.exception) + type(caught.exception).__name__)

    test_avro_round_trip_and_incompatible_change.skip = _NO_AVRO

    def compact(self, topic):
        path = f"/admin/v2/persistent/public/default/{topic}/compaction"
        status, _ = self.rest("PUT", path)
        self.assertEqual(status, 204)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, body = self.rest("GET", path)
            if body["status"] != "RUNNING":
                break
            time.sleep(0.05)
        self.assertEqual(body["status"], "SUCCESS")

    def test_compacted_reader_and_table_view(self):
        """After compaction a compacted reader sees the latest value per key, tombstones applied."""
        topic = self.topic()
        producer = self.client.create_producer(topic, batching_enabled=False)
        for key, value in [("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"), ("c", b"")]:
            producer.send(value, partition_key=key)
        self.compact(topic)
        producer.send(b"b2", partition_key="b")
        reader = self.client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        seen = []
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=5000)
            seen.append((msg.partition_key(), msg.data()))
        # The compacted view up to the horizon, then what came after it.
        self.assertEqual(seen, [("b", b"b1"), ("a", b"a2"), ("b", b"b2")])
        table = self.client.create_table_view(topic)
        try:
            items = {}
            table.for_each(lambda key, value: items.__setitem__(key, value))
            self.assertEqual(items, {"a": b"a2", "b": b"b2"})
        finally:
            table.close()

    def test_batched_compaction(self):
        topic = self.topic()
        producer = self.client.create_producer(topic, batching_enabled=True,
                                               batching_max_publish_delay_ms=50,
                                               compression_type=pulsar.CompressionType.LZ4)
        for i in range(20):
            producer.send_async(b"v%d" % i, None, partition_key=f"k{i % 3}")
        producer.flush()
        self.compact(topic)
        reader = self.client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        latest = {}
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=5000)
            latest[msg.partition_key()] = msg.data()
        self.assertEqual(latest, {"k0": b"v18", "k1": b"v19", "k2": b"v17"})
