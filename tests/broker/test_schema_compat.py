"""
Avro schema resolution (broker/schema_compat.py) over a table of schema pairs, each checked
against fastavro as the oracle (write data with the writer schema, read it with the reader schema),
and the eight compatibility strategies derived from the same table.
"""

import io
import json

from twisted.trial import unittest

from pulsar_twisted.broker import schema
from pulsar_twisted.broker.schema_compat import AvroSchema, InvalidAvroSchema, can_read, read_mismatch
from pulsar_twisted.proto import PulsarApi_pb2 as api

try:
    import fastavro
except ImportError:  # pragma: no cover
    fastavro = None

ST = api.Schema


def rec(name, *fields, **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def enum(symbols, **extra):
    return {"type": "enum", "name": "Colour", "symbols": symbols, **extra}


ADDRESS = rec("Address", f("street", "string"))
ADDRESS_V2 = rec("Address", f("street", "string"), f("zip", "string", default=""))
NODE = rec("Node", f("value", "int"), f("next", ["null", "Node"], default=None))
NODE_V2 = rec("Node", f("value", "int"), f("next", ["null", "Node"], default=None),
              f("label", "string", default="-"))

#: (description, old, new, new reads old (BACKWARD), old reads new (FORWARD))
PAIRS = [
    ("field added with a default", rec("U", f("a", "string")),
     rec("U", f("a", "string"), f("b", "int", default=0)), True, True),
    ("field added without default", rec("U", f("a", "string")),
     rec("U", f("a", "string"), f("b", "int")), False, True),
    ("nullable union added with default null", rec("U", f("a", "string")),
     rec("U", f("a", "string"), f("b", ["null", "string"], default=None)), True, True),
    ("nested record gains a field with a default", rec("U", f("home", ADDRESS)),
     rec("U", f("home", ADDRESS_V2)), True, True),
    ("nested record gains a field without default", rec("U", f("home", ADDRESS)),
     rec("U", f("home", rec("Address", f("street", "string"), f("zip", "string")))), False, True),
    ("nested record and nullable union, all with defaults",
     rec("U", f("a", "string"), f("home", ADDRESS)),
     rec("U", f("a", "string"), f("home", ADDRESS_V2),
         f("work", ["null", "Address"], default=None)), True, True),
    ("int -> long", "int", "long", True, False),
    ("int -> float", "int", "float", True, False),
    ("int -> double", "int", "double", True, False),
    ("long -> float", "long", "float", True, False),
    ("long -> double", "long", "double", True, False),
    ("float -> double", "float", "double", True, False),
    ("string <-> bytes", "string", "bytes", True, True),
    ("string -> int", "string", "int", False, False),
    ("boolean -> int", "boolean", "int", False, False),
    ("logical type over its base type", "long", {"type": "long", "logicalType": "timestamp-millis"},
     True, True),
    ("field type widened in a record", rec("U", f("n", "int")), rec("U", f("n", "long")), True, False),
    ("field made nullable", rec("U", f("a", "string")),
     rec("U", f("a", ["null", "string"], default=None)), True, False),
    ("union widened", ["int", "string"], ["null", "long", "string"], True, False),
    ("union reordered", ["null", "string"], ["string", "null"], True, True),
    ("union of records, record gains a defaulted field", ["null", ADDRESS], ["null", ADDRESS_V2],
     True, True),
    ("record renamed", rec("U", f("a", "string")), rec("V", f("a", "string")), False, False),
    ("record renamed, old name as alias", rec("U", f("a", "string")),
     rec("V", f("a", "string"), aliases=["U"]), True, False),
    ("namespaces differ, same name", rec("U", f("a", "string"), namespace="x.y"),
     rec("U", f("a", "string"), namespace="z"), True, True),
    ("field renamed, old name as alias", rec("U", f("a", "string")),
     rec("U", f("c", "string", aliases=["a"])), True, False),
    ("field renamed, no alias", rec("U", f("a", "string")), rec("U", f("c", "string")),
     False, False),
    ("field removed that had a default", rec("U", f("a", "string"), f("b", "int", default=1)),
     rec("U", f("a", "string")), True, True),
    ("field removed that had no default", rec("U", f("a", "string"), f("b", "int")),
     rec("U", f("a", "string")), True, False),
    ("enum symbol added", enum(["RED", "GREEN"]), enum(["RED", "GREEN", "BLUE"]), True, False),
    ("enum symbol added, enum default", enum(["RED", "GREEN"], default="RED"),
     enum(["RED", "GREEN", "BLUE"], default="RED"), True, True),
    ("enum renamed", enum(["RED"]), {**enum(["RED"]), "name": "Hue"}, False, False),
    ("fixed resized", {"type": "fixed", "name": "H", "size": 4},
     {"type": "fixed", "name": "H", "size": 8}, False, False),
    ("fixed renamed", {"type": "fixed", "name": "H", "size": 4},
     {"type": "fixed", "name": "K", "size": 4}, False, False),
    ("array items promoted", {"type": "array", "items": "int"},
     {"type": "array", "items": "long"}, True, False),
    ("map values string -> bytes", {"type": "map", "values": "string"},
     {"type": "map", "values": "bytes"}, True, True),
    ("array read as map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"},
     False, False),
    ("recursive record gains a defaulted field", NODE, NODE_V2, True, True),
    ("named type referenced by name", rec("U", f("a", ADDRESS), f("b", "Address")),
     rec("U", f("a", ADDRESS_V2), f("b", "Address")), True, True),
]


# ------------------------------------------------------------------------------ the oracle
def samples(node, names, depth=0):
    """Data for the Avro schema ``node``: every union branch and every enum symbol appears."""
    if isinstance(node, list):
        return [v for branch in node
                if not (depth > 2 and _named(branch, names)) for v in samples(branch, names, depth)]
    if isinstance(node, str) and node in _PRIMITIVE_SAMPLES:
        return list(_PRIMITIVE_SAMPLES[node])
    if isinstance(node, str):
        return samples(names[node], names, depth)
    kind = node["type"]
    if kind in _PRIMITIVE_SAMPLES:
        return list(_PRIMITIVE_SAMPLES[kind])
    if kind == "record":
        names[node["name"]] = node
        per_field = [samples(fl["type"], names, depth + 1) for fl in node["fields"]]
        base = {fl["name"]: values[0] for fl, values in zip(node["fields"], per_field)}
        out = [base]
        for fl, values in zip(node["fields"], per_field):
            out.extend({**base, fl["name"]: v} for v in values[1:])
        return out
    if kind == "enum":
        names[node["name"]] = node
        return list(node["symbols"])
    if kind == "fixed":
        names[node["name"]] = node
        return [b"\x01" * node["size"]]
    if kind == "array":
        return [[]] + [[v] for v in samples(node["items"], names, depth + 1)]
    return [{}] + [{"k": v} for v in samples(node["values"], names, depth + 1)]


def _named(branch, names):
    return isinstance(branch, str) and branch in names


_PRIMITIVE_SAMPLES = {"null": [None], "boolean": [True], "int": [7], "long": [2 ** 40],
                      "float": [1.5], "double": [2.25], "bytes": [b"xy"], "string": ["hi"]}


def oracle_reads(reader, writer) -> bool:
    """fastavro: is every sample datum of ``writer`` read back with ``reader``?"""
    writer_parsed = fastavro.parse_schema(json.loads(json.dumps(writer)), _write_hint=False)
    reader_parsed = fastavro.parse_schema(json.loads(json.dumps(reader)), _write_hint=False)
    for datum in samples(json.loads(json.dumps(writer)), {}):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer_parsed, datum)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, writer_parsed, reader_parsed)
        except Exception:  # fastavro's resolution errors vary by kind (SchemaResolutionError...)
            return False
    return True


def parsed(obj) -> AvroSchema:
    return AvroSchema(json.loads(json.dumps(obj)))


class ResolutionTests(unittest.TestCase):
    def test_pairs_as_stated(self):
        """Every pair of the table resolves as Avro's rules state, in both directions."""
        for what, old, new, backward, forward in PAIRS:
            self.assertEqual(can_read(parsed(new), parsed(old)), backward, f"{what}: new reads old")
            self.assertEqual(can_read(parsed(old), parsed(new)), forward, f"{what}: old reads new")

    def test_pairs_agree_with_fastavro(self):
        """fastavro writing with one schema and reading with the other agrees with every row."""
        for what, old, new, backward, forward in PAIRS:
            self.assertEqual(oracle_reads(new, old), backward, f"fastavro: {what}: new reads old")
            self.assertEqual(oracle_reads(old, new), forward, f"fastavro: {what}: old reads new")

    if fastavro is None:  # pragma: no cover
        test_pairs_agree_with_fastavro.skip = "fastavro is not installed"

    def test_mismatch_names_the_field(self):
        """The reason says where the schemas part: the nested field's path."""
        old = rec("U", f("home", ADDRESS))
        new = rec("U", f("home", rec("Address", f("street", "string"), f("zip", "string"))))
        reason = read_mismatch(parsed(new), parsed(old))
        self.assertIn("$.home.zip", reason)
        self.assertIn("no default", reason)

    def test_invalid_schemas_refused(self):
        """Definitions that are not Avro schemas are refused when parsed."""
        for data in (b"{", b'{"type": "record", "name": "U"}', b'{"type": "enum", "name": "E"}',
                     b'{"type": "fixed", "name": "F"}', b'{"name": "x"}', b"\xff"):
            self.assertRaises(InvalidAvroSchema, AvroSchema.parse, data)

    def test_unknown_reference_refused(self):
        """A reference to a named type nobody defines is an invalid schema."""
        for broken in (rec("U", f("a", "Missing")), {"type": "object"},
                       {"type": "array", "items": "Nothing"}):
            self.assertRaises(InvalidAvroSchema, parsed, broken)


# ------------------------------------------------------------------------------ strategies
def expected(strategy, backward, forward) -> bool:
    base = strategy.replace("_TRANSITIVE", "")
    return {"ALWAYS_COMPATIBLE": True, "ALWAYS_INCOMPATIBLE": False, "BACKWARD": backward,
            "FORWARD": forward, "FULL": backward and forward}[base]


class StrategyTests(unittest.TestCase):
    def accepted(self, strategy, new, *old, type_=ST.Avro) -> bool:
        versions = [schema.SchemaVersion(i, type_, json.dumps(o).encode()) for i, o in enumerate(old)]
        try:
            schema.check_compatible(strategy, type_, json.dumps(new).encode(), versions)
        except schema.IncompatibleSchemaError:
            return False
        return True

    def test_every_strategy_over_the_table(self):
        """Each strategy accepts exactly what Avro resolution allows it to (AVRO and JSON alike)."""
        for type_ in (ST.Avro, ST.Json):
            for what, old, new, backward, forward in PAIRS:
                for strategy in schema.STRATEGIES:
                    self.assertEqual(self.accepted(strategy, new, old, type_=type_),
                                     expected(strategy, backward, forward), f"{strategy}: {what}")

    def test_transitive_forms_check_every_version(self):
        """v3 follows v2 but not v1: plain strategies accept it, *_TRANSITIVE refuse it."""
        v1 = rec("U", f("a", "string"))
        v2 = rec("U", f("a", "string"), f("b", "int", default=0))
        v3 = rec("U", f("a", "string"), f("b", "int"))  # cannot read v1 (no b, no default)
        self.assertTrue(self.accepted("BACKWARD", v3, v1, v2))
        self.assertFalse(self.accepted("BACKWARD_TRANSITIVE", v3, v1, v2))
        self.assertFalse(self.accepted("FULL_TRANSITIVE", v3, v1, v2))
        # FORWARD: v1 readers need a default for what v3 dropped.
        w1 = rec("U", f("a", "string"), f("b", "int"))
        w2 = rec("U", f("a", "string"), f("b", "int", default=0))
        w3 = rec("U", f("a", "string"))
        self.assertTrue(self.accepted("FORWARD", w3, w1, w2))
        self.assertFalse(self.accepted("FORWARD_TRANSITIVE", w3, w1, w2))

    def test_refusal_names_strategy_and_version(self):
        """The client's IncompatibleSchema message names the strategy, version and field."""
        old = rec("U", f("a", "string"))
        new = rec("U", f("a", "string"), f("b", "int"))
        versions = [schema.SchemaVersion(4, ST.Avro, json.dumps(old).encode())]
        e = self.assertRaises(schema.IncompatibleSchemaError, schema.check_compatible, "FULL",
                              ST.Avro, json.dumps(new).encode(), versions)
        self.assertIn("FULL", str(e))
        self.assertIn("the latest schema (version 4)", str(e))
        self.assertIn("$.b", str(e))


class DefaultStrategyTests(unittest.TestCase):
    def test_broker_default_is_full(self):
        """Pulsar 4.x's broker default schemaCompatibilityStrategy is FULL."""
        from pulsar_twisted.config import BrokerConfig
        self.assertEqual(BrokerConfig().schemaCompatibilityStrategy, "FULL")

    def test_namespace_undefined_falls_back_to_broker(self):
        """A namespace's UNDEFINED (its default) takes the broker's strategy; a set one wins."""
        self.assertEqual(schema.effective_strategy({"schema_compatibility_strategy": "UNDEFINED"},
                                                   "FULL"), "FULL")
        self.assertEqual(schema.effective_strategy({}, "BACKWARD"), "BACKWARD")
        self.assertEqual(schema.effective_strategy({"schema_compatibility_strategy": "FORWARD"},
                                                   "FULL"), "FORWARD")

    def test_both_undefined_use_auto_update_policy(self):
        """Broker and namespace UNDEFINED: the old auto-update policy decides (default Full)."""
        self.assertEqual(schema.effective_strategy({}, "UNDEFINED"), "FULL")
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": "Backward"}, "UNDEFINED"), "BACKWARD")
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": "AutoUpdateDisabled"}, "UNDEFINED"),
            "ALWAYS_INCOMPATIBLE")


class DeprecatedAutoUpdatePolicyTests(unittest.TestCase):
    """Pulsar 4.x's order: namespace strategy, then the deprecated auto-update policy when set
    (null by default), then the broker's strategy; a stored "Full" (the stale default of our
    earlier documents) counts as unset."""

    def test_new_documents_follow_the_broker(self):
        """A new namespace's Policies (no auto-update field) take the broker's strategy."""
        from pulsar_twisted.resources.policies import new_policies
        document = new_policies("c1")
        self.assertNotIn("schema_auto_update_compatibility_strategy", document)
        self.assertEqual(schema.effective_strategy(document, "BACKWARD"), "BACKWARD")
        self.assertEqual(schema.effective_strategy(document, "FULL"), "FULL")
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": None}, "FORWARD"), "FORWARD")

    def test_old_full_is_read_as_unset(self):
        """An old document carrying "Full" keeps the broker's strategy."""
        old = {"schema_auto_update_compatibility_strategy": "Full",
               "schema_compatibility_strategy": "UNDEFINED"}
        self.assertEqual(schema.effective_strategy(old, "BACKWARD"), "BACKWARD")
        self.assertEqual(schema.effective_strategy(old, "UNDEFINED"), "FULL")

    def test_set_auto_update_policy_before_broker(self):
        """A deprecated policy set to anything else wins over the broker's strategy, as in
        Pulsar 4.x; the namespace's own strategy wins over both."""
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": "Forward"}, "FULL"), "FORWARD")
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": "AutoUpdateDisabled"}, "FULL"),
            "ALWAYS_INCOMPATIBLE")
        self.assertEqual(schema.effective_strategy(
            {"schema_auto_update_compatibility_strategy": "Forward",
             "schema_compatibility_strategy": "BACKWARD_TRANSITIVE"}, "FULL"), "BACKWARD_TRANSITIVE")


class ConsumerStrategyTests(unittest.TestCase):
    def test_consumer_rule(self):
        """A consumer's new schema must read the latest version under the plain strategies and
        FORWARD_TRANSITIVE; BACKWARD_TRANSITIVE / FULL_TRANSITIVE / ALWAYS_* keep their own rule."""
        for strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
            self.assertEqual(schema.consumer_strategy(strategy), "BACKWARD")
        for strategy in ("BACKWARD_TRANSITIVE", "FULL_TRANSITIVE", "ALWAYS_COMPATIBLE",
                         "ALWAYS_INCOMPATIBLE"):
            self.assertEqual(schema.consumer_strategy(strategy), strategy)


class LegacyJsonSchemaTests(unittest.TestCase):
    LEGACY = {"type": "object", "id": "urn:jsonschema:User", "properties": {"a": {"type": "string"}}}

    def accepted(self, new, old) -> bool:
        versions = [schema.SchemaVersion(0, ST.Json, json.dumps(old).encode())]
        try:
            schema.check_compatible("FULL", ST.Json, json.dumps(new).encode(), versions)
        except schema.IncompatibleSchemaError:
            return False
        return True

    def test_json_schema_documents(self):
        """JSON-Schema definitions (not Avro) validate; they follow each other by equal id only,
        and never follow or precede an Avro-based JSON schema."""
        schema.validate(ST.Json, json.dumps(self.LEGACY).encode())
        self.assertRaises(schema.IncompatibleSchemaError, schema.validate, ST.Avro,
                          json.dumps(self.LEGACY).encode())
        self.assertTrue(self.accepted(dict(self.LEGACY, properties={}), self.LEGACY))
        self.assertFalse(self.accepted(dict(self.LEGACY, id="urn:other"), self.LEGACY))
        avro = rec("User", f("a", "string"))
        self.assertFalse(self.accepted(avro, self.LEGACY))
        self.assertFalse(self.accepted(self.LEGACY, avro))
