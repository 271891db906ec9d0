"""The schema registry: Avro compatibility rules, and schemas on PRODUCER / SUBSCRIBE / GET_SCHEMA."""

import json

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker import schema
from pulsar_twisted.broker.cnx import producer_request
from pulsar_twisted.common import errors
from pulsar_twisted.metadata.layout import SCHEMAS_ROOT
from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import FeatureCase, Sub, T

ST = api.Schema


def record(*fields, name="User"):
    return json.dumps({"type": "record", "name": name, "fields": list(fields)}).encode()


A = {"name": "a", "type": "string"}
B_DEFAULT = {"name": "b", "type": "int", "default": 0}
B_NO_DEFAULT = {"name": "b", "type": "int"}
V1 = record(A)


class CompatibilityTests(unittest.TestCase):
    def check(self, strategy, new, *old, type_=ST.Avro):
        versions = [schema.SchemaVersion(i, type_, data) for i, data in enumerate(old)]
        schema.check_compatible(strategy, type_, new, versions)

    def refused(self, strategy, new, *old, type_=ST.Avro):
        self.assertRaises(schema.IncompatibleSchemaError, self.check, strategy, new, *old, type_=type_)

    def test_backward_add_field_with_default(self):
        """BACKWARD: a new field with a default reads old data."""
        self.check("BACKWARD", record(A, B_DEFAULT), V1)

    def test_backward_add_field_without_default(self):
        """BACKWARD: a new field without default cannot read old data."""
        self.refused("BACKWARD", record(A, B_NO_DEFAULT), V1)

    def test_backward_remove_field(self):
        """BACKWARD: removing a field is fine (the reader ignores it)."""
        self.check("BACKWARD", record(A), record(A, B_NO_DEFAULT))

    def test_forward_remove_field_without_default(self):
        """FORWARD: old readers need a default for a removed field."""
        self.refused("FORWARD", record(A), record(A, B_NO_DEFAULT))
        self.check("FORWARD", record(A), record(A, B_DEFAULT))

    def test_full(self):
        self.check("FULL", record(A, B_DEFAULT), V1)
        self.refused("FULL", record(A, B_NO_DEFAULT), V1)

    def test_type_change_and_promotion(self):
        """int -> long is a promotion; string -> int is not."""
        self.check("BACKWARD", record({"name": "a", "type": "long"}), record({"name": "a", "type": "int"}))
        self.refused("BACKWARD", record({"name": "a", "type": "int"}), V1)

    def test_union_with_null(self):
        optional = {"name": "b", "type": ["null", "int"], "default": None}
        self.check("FULL", record(A, optional), V1)

    def test_transitive(self):
        """*_TRANSITIVE checks every version, plain strategies only the latest."""
        v2 = record(A, B_DEFAULT)
        v3 = record(A, {"name": "b", "type": "int"})  # readable from v2, not from v1
        self.check("BACKWARD", v3, V1, v2)
        self.refused("BACKWARD_TRANSITIVE", v3, V1, v2)

    def test_always(self):
        self.check("ALWAYS_COMPATIBLE", record({"name": "z", "type": "int"}), V1)
        self.refused("ALWAYS_INCOMPATIBLE", record(A, B_DEFAULT), V1)

    def test_primitive_types(self):
        """Primitive schemas follow only the same type."""
        self.check("BACKWARD", b"", b"", type_=ST.String)
        versions = [schema.SchemaVersion(0, ST.String, b"")]
        self.assertRaises(schema.IncompatibleSchemaError, schema.check_compatible, "BACKWARD",
                          ST.Int32, b"", versions)

    def test_invalid_definition(self):
        self.assertRaises(schema.IncompatibleSchemaError, schema.validate, ST.Avro, b"{not json")

    def test_version_bytes(self):
        self.assertEqual(schema.encode_version(3), b"\0\0\0\0\0\0\0\x03")
        self.assertEqual(schema.decode_version(schema.encode_version(7)), 7)
        self.assertIsNone(schema.decode_version(b"xx"))

    def test_schema_id_of_partition(self):
        """Partitions share their partitioned topic's schema."""
        self.assertEqual(schema.schema_id("persistent://t/n/x-partition-3"), "t/n/x")


class RegistryTests(FeatureCase):
    def producer(self, client, producer_id, type_=None, data=b"", topic=None):
        request = api.CommandProducer(topic=topic or self.topic, producer_id=producer_id,
                                      request_id=100 + producer_id)
        if type_ is not None:
            request.schema.CopyFrom(api.Schema(name="s", type=type_, schema_data=data))
        client.send(T(type=T.PRODUCER, producer=request))
        return client.commands()

    def test_retried_create_answers_the_same_version(self):
        """A PRODUCER retried on the same connection gets the stored producer's schema version."""
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        self.producer(client, 2, ST.Avro, record(A, B_DEFAULT))
        [again] = self.producer(client, 1, ST.Avro, V1)
        self.assertEqual(again.type, T.PRODUCER_SUCCESS)
        self.assertEqual(again.producer_success.schema_version, schema.encode_version(0))

    def test_producer_gets_versions(self):
        """A new schema gets version 0; the same again 0; a compatible change 1."""
        client = self.harness.client()
        [ok] = self.producer(client, 1, ST.Avro, V1)
        self.assertEqual(ok.producer_success.schema_version, schema.encode_version(0))
        [ok] = self.producer(client, 2, ST.Avro, V1)
        self.assertEqual(ok.producer_success.schema_version, schema.encode_version(0))
        [ok] = self.producer(client, 3, ST.Avro, record(A, B_DEFAULT))
        self.assertEqual(ok.producer_success.schema_version, schema.encode_version(1))

    def test_incompatible_producer_refused(self):
        """An incompatible schema: IncompatibleSchema and nothing stored or created."""
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        [error] = self.producer(client, 2, ST.Avro, record(A, B_NO_DEFAULT))
        self.assertEqual(error.type, T.ERROR)
        self.assertEqual(error.error.error, api.IncompatibleSchema)
        self.assertIn("incompatible with the latest schema", error.error.message)
        self.assertEqual(len(self.topic_object().producers), 1)
        versions = self.successResultOf(self.harness.broker.schema_registry.versions(self.topic))
        self.assertEqual(len(versions), 1)

    def test_namespace_strategy_overrides(self):
        """The namespace policy schema_compatibility_strategy wins over the broker default."""
        store = self.harness.store
        data, _ = self.successResultOf(store.get("/admin/policies/public/default"))
        policies = json.loads(data)
        policies["schema_compatibility_strategy"] = "ALWAYS_COMPATIBLE"
        self.successResultOf(store.put("/admin/policies/public/default", json.dumps(policies).encode()))
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        [ok] = self.producer(client, 2, ST.Avro, record(A, B_NO_DEFAULT))
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)

    def test_get_schema(self):
        """GET_SCHEMA answers the latest or a given version; none -> TopicNotFound."""
        client = self.harness.client()
        client.send(T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(request_id=7, topic=self.topic)))
        [answer] = client.commands()
        self.assertEqual(answer.getSchemaResponse.error_code, api.TopicNotFound)
        self.producer(client, 1, ST.Avro, V1)
        self.producer(client, 2, ST.Avro, record(A, B_DEFAULT))
        client.send(T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(request_id=8, topic=self.topic)))
        [answer] = client.commands()
        self.assertEqual(answer.getSchemaResponse.schema_version, schema.encode_version(1))
        self.assertEqual(answer.getSchemaResponse.schema.type, ST.Avro)
        client.send(T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(
            request_id=9, topic=self.topic, schema_version=schema.encode_version(0))))
        [answer] = client.commands()
        self.assertEqual(answer.getSchemaResponse.schema.schema_data, V1)

    def test_get_or_create_schema(self):
        client = self.harness.client()
        request = api.CommandGetOrCreateSchema(request_id=3, topic=self.topic,
                                               schema=api.Schema(name="s", type=ST.String, schema_data=b""))
        client.send(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request))
        [answer] = client.commands()
        self.assertEqual(answer.getOrCreateSchemaResponse.schema_version, schema.encode_version(0))
        request.schema.type = ST.Int32
        client.send(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request))
        [answer] = client.commands()
        self.assertEqual(answer.getOrCreateSchemaResponse.error_code, api.IncompatibleSchema)

    def test_producer_without_schema(self):
        """Allowed on a topic with a schema unless schema validation is enforced (Pulsar's rule)."""
        client = self.harness.client()
        self.producer(client, 1, ST.String)
        [ok] = self.producer(client, 2)
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)
        self.assertFalse(ok.producer_success.HasField("schema_version"))
        self.harness.config.schemaValidationEnforced = True
        [error] = self.producer(client, 3)
        self.assertEqual(error.error.error, api.IncompatibleSchema)

    def test_producer_schema_version_fires_with_the_read(self):
        """No schema on either side: the answer (b"") is there as soon as the store's read has
        fired, without a generator per step; a name that does not parse and a corrupt schema node
        still fail as before (InvalidTopicName, MetadataError)."""
        broker = self.harness.broker

        def request(topic):
            return producer_request(api.CommandProducer(topic=topic, producer_id=1, request_id=1))
        self.assertEqual(self.successResultOf(schema.producer_schema_version(broker, request(self.topic))), b"")
        self.failureResultOf(schema.producer_schema_version(broker, request("persistent://a/b/c/d/e")),
                             errors.InvalidTopicName)
        self.successResultOf(self.harness.store.put(
            f"{SCHEMAS_ROOT}/public/default/corrupt", b"{not json", expected_version=-1))
        self.failureResultOf(schema.producer_schema_version(
            broker, request("persistent://public/default/corrupt")), errors.MetadataError)
        self.assertIsNone(self.successResultOf(broker.schema_registry.get("persistent://public/default/none")))

    def test_auto_update_disabled(self):
        self.harness.config.isAllowAutoUpdateSchemaEnabled = False
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        [error] = self.producer(client, 2, ST.Avro, record(A, B_DEFAULT))
        self.assertEqual(error.error.error, api.IncompatibleSchema)

    def test_auto_update_disabled_on_a_new_namespace_document(self):
        """A namespace document as the admin API creates it (Pulsar 4.x: no
        is_allow_auto_update_schema) leaves the decision to isAllowAutoUpdateSchemaEnabled."""
        from pulsar_twisted.metadata.layout import namespace_path
        from pulsar_twisted.resources.policies import new_policies, to_json
        document = new_policies("standalone")
        self.assertNotIn("is_allow_auto_update_schema", document)
        path = namespace_path("public/default")
        _, stat = self.successResultOf(self.harness.store.get(path))
        self.successResultOf(self.harness.store.put(path, to_json(document), expected_version=stat.version))
        self.harness.pump()
        self.test_auto_update_disabled()

    def subscribe_with(self, client, consumer_id, type_, data, sub="s"):
        request = api.CommandSubscribe(topic=self.topic, subscription=sub, subType=Sub.Exclusive,
                                       consumer_id=consumer_id, request_id=1000 + consumer_id)
        request.schema.CopyFrom(api.Schema(name="s", type=type_, schema_data=data))
        client.send(T(type=T.SUBSCRIBE, subscribe=request))
        return client.commands()

    def test_consumer_registers_on_idle_topic(self):
        client = self.harness.client()
        [ok] = self.subscribe_with(client, 1, ST.Avro, V1)
        self.assertEqual(ok.type, T.SUCCESS)
        latest = self.successResultOf(self.harness.broker.schema_registry.get(self.topic))
        self.assertEqual(latest.data, V1)

    def test_consumer_checked_not_registered(self):
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        [ok] = self.subscribe_with(client, 1, ST.Avro, record(A, B_DEFAULT), sub="a")
        self.assertEqual(ok.type, T.SUCCESS)
        [error] = self.subscribe_with(client, 2, ST.Avro, record(A, B_NO_DEFAULT), sub="b")
        self.assertEqual(error.error.error, api.IncompatibleSchema)
        versions = self.successResultOf(self.harness.broker.schema_registry.versions(self.topic))
        self.assertEqual(len(versions), 1)

    def test_consumer_reads_the_latest_under_forward(self):
        """FORWARD: a consumer's unstored schema must read the latest version (Pulsar checks it
        BACKWARD against the latest), not be readable by it."""
        store = self.harness.store
        data, _ = self.successResultOf(store.get("/admin/policies/public/default"))
        policies = json.loads(data)
        policies["schema_compatibility_strategy"] = "FORWARD"
        self.successResultOf(store.put("/admin/policies/public/default", json.dumps(policies).encode()))
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        [ok] = self.producer(client, 2, ST.Avro, record(A, B_NO_DEFAULT))  # FORWARD: allowed
        self.assertEqual(ok.type, T.PRODUCER_SUCCESS)
        reader = record(A, {"name": "c", "type": "int", "default": 0})  # reads v1 and v2; v2 cannot read it
        [ok] = self.subscribe_with(client, 1, ST.Avro, reader, sub="a")
        self.assertEqual(ok.type, T.SUCCESS)
        [error] = self.subscribe_with(client, 2, ST.Avro, record(A, {"name": "c", "type": "int"}),
                                      sub="b")
        self.assertEqual(error.error.error, api.IncompatibleSchema)

    @defer.inlineCallbacks
    def test_survives_restart(self):
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        yield self.restart()
        client = self.harness.client()
        [ok] = self.producer(client, 1, ST.Avro, V1)
        self.assertEqual(ok.producer_success.schema_version, schema.encode_version(0))

    def test_delete(self):
        registry = self.harness.broker.schema_registry
        client = self.harness.client()
        self.producer(client, 1, ST.Avro, V1)
        self.assertEqual(self.successResultOf(registry.delete(self.topic)), 1)
        self.assertIsNone(self.successResultOf(registry.get(self.topic)))
        # After a delete any schema may start again; versions keep counting.
        [ok] = self.producer(client, 2, ST.String)
        self.assertEqual(ok.producer_success.schema_version, schema.encode_version(2))
