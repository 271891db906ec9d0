"""
Interop: Avro schema evolution seen by the official client. Fields that gained defaults (a nested
record, a nullable union with default null) pass FULL, the broker's default; with the namespace set
to FORWARD a change only FORWARD allows is accepted there and refused under FULL; consumers and
readers decode the messages of every version (the client fetches each writer schema with
GET_SCHEMA by version and resolves it with its own, so wrong bytes would decode wrongly).
"""

import json
import urllib.error
import urllib.request
import uuid

from tests.interop.test_core import InteropCase, pulsar

try:
    import fastavro  # noqa: F401  (the client's AvroSchema needs it)
    from pulsar.schema import AvroSchema, Integer, Record, String
except ImportError:  # pragma: no cover
    AvroSchema = None

if AvroSchema is not None:
    class Address(Record):
        _sorted_fields = True
        street = String()

    class UserV1(Record):
        _sorted_fields = True
        name = String()
        age = Integer()

    class UserV2(Record):
        """V1 plus a nested record and a string, both nullable with default null
        (``required_default``: the client writes ``"default": null`` only then); sorted, the
        new ``address`` comes first, so decoding V2 bytes with V1's layout would go wrong."""
        _sorted_fields = True
        address = Address(required_default=True)
        age = Integer()
        email = String(required_default=True)
        name = String()

    class UserV3(Record):
        """V2 plus a field without default: old readers skip it (FORWARD), but V3 cannot read
        V1/V2 data (not BACKWARD, so not FULL)."""
        _sorted_fields = True
        address = Address(required_default=True)
        age = Integer()
        email = String(required_default=True)
        name = String()
        score = Integer(required=True)

    class UserV2NoDefault(Record):
        """V2 as the client writes it without ``required_default``: nullable, but no default."""
        _sorted_fields = True
        address = Address()
        age = Integer()
        name = String()

    # One record name for every version, so that only the fields differ.
    for _cls in (UserV1, UserV2, UserV3, UserV2NoDefault):
        _cls.__name__ = "User"


class SchemaEvolutionInteropTests(InteropCase):
    standalone_config = {"journalSyncData": "false"}

    if AvroSchema is None:  # pragma: no cover
        skip = "fastavro (pulsar-client[avro]) is not installed"

    def rest(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.standalone.web_service_url + path, data=data,
                                         method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def forward_namespace(self) -> str:
        namespace = f"public/fwd-{uuid.uuid4().hex[:8]}"
        self.assertEqual(self.rest("PUT", f"/admin/v2/namespaces/{namespace}", {})[0], 204)
        path = f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy"
        self.assertEqual(self.rest("PUT", path, "FORWARD")[0], 204)
        self.assertEqual(self.rest("GET", path), (200, "FORWARD"))
        return namespace

    def versions(self, topic_path: str) -> list:
        status, body = self.rest("GET", f"/admin/v2/schemas/{topic_path}/schemas")
        self.assertEqual(status, 200)
        return [s["version"] for s in body["getSchemaResponses"]]

    def test_defaults_added_pass_full_and_both_versions_decode(self):
        """Default namespace (FULL): V2 adds defaulted fields; V1 and V2 consumers read both."""
        topic = self.topic("evo-full-")
        old = self.client.subscribe(topic, "v1", schema=AvroSchema(UserV1))
        new = self.client.subscribe(topic, "v2", schema=AvroSchema(UserV2))
        self.client.create_producer(topic, schema=AvroSchema(UserV1)).send(UserV1(name="ann", age=3))
        self.client.create_producer(topic, schema=AvroSchema(UserV2)).send(
            UserV2(name="bob", age=5, email="b@x", address=Address(street="Main")))
        first, second = self.receive(old).value(), self.receive(old).value()
        self.assertEqual([(first.name, first.age), (second.name, second.age)], [("ann", 3), ("bob", 5)])
        first, second = self.receive(new).value(), self.receive(new).value()
        self.assertEqual((first.name, first.age, first.email, first.address), ("ann", 3, None, None))
        self.assertEqual((second.name, second.email, second.address.street), ("bob", "b@x", "Main"))
        self.assertEqual(self.versions(f"public/default/{topic}"), [0, 1])

    def test_forward_namespace_takes_a_forward_only_change(self):
        """FORWARD namespace: V1, V2, V3 all accepted; a V1 consumer and reader decode all three."""
        namespace = self.forward_namespace()
        topic = f"persistent://{namespace}/{self.topic('evo-fwd-')}"
        consumer = self.client.subscribe(topic, "v1", schema=AvroSchema(UserV1))
        self.client.create_producer(topic, schema=AvroSchema(UserV1)).send(UserV1(name="a", age=1))
        self.client.create_producer(topic, schema=AvroSchema(UserV2)).send(
            UserV2(name="b", age=2, address=Address(street="Elm")))
        self.client.create_producer(topic, schema=AvroSchema(UserV3)).send(
            UserV3(name="c", age=3, score=9))
        got = [self.receive(consumer).value() for _ in range(3)]
        self.assertEqual([(u.name, u.age) for u in got], [("a", 1), ("b", 2), ("c", 3)])
        reader = self.client.create_reader(topic, pulsar.MessageId.earliest, schema=AvroSchema(UserV2))
        got = [reader.read_next(timeout_millis=5000).value() for _ in range(3)]
        self.assertEqual([(u.name, u.address and u.address.street) for u in got],
                         [("a", None), ("b", "Elm"), ("c", None)])
        self.assertEqual(self.versions(topic.split("://", 1)[1]), [0, 1, 2])

    def test_forward_only_change_refused_under_the_default(self):
        """The same V3 after V2 on a topic of the default namespace (FULL) is refused."""
        topic = self.topic("evo-refused-")
        self.client.create_producer(topic, schema=AvroSchema(UserV2))
        with self.assertRaises(pulsar.PulsarException) as caught:
            self.client.create_producer(topic, schema=AvroSchema(UserV3))
        self.assertIn("IncompatibleSchema", type(caught.exception).__name__ + str(caught.exception))

    def test_nullable_field_without_default_refused_under_full(self):
        """A nullable field with no default cannot be read from V1 data: FULL refuses it."""
        topic = self.topic("evo-nodefault-")
        self.client.create_producer(topic, schema=AvroSchema(UserV1))
        with self.assertRaises(pulsar.PulsarException) as caught:
            self.client.create_producer(topic, schema=AvroSchema(UserV2NoDefault))
        self.assertIn("IncompatibleSchema", type(caught.exception).__name__ + str(caught.exception))
