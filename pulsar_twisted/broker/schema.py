"""
The schema registry (Pulsar's ``SchemaRegistryService`` + its compatibility checks).

Schemas are kept per *schema id*: ``tenant/namespace/topic`` without the domain and without a
partition suffix, as Pulsar keys them, so every partition of a partitioned topic shares one
history. Each topic's history is one metadata node ``/schemas/<tenant>/<ns>/<topic>`` holding a
JSON list of versions (version, type, base64 data, properties, timestamp, deleted), written with
compare-and-set so that two brokers (or two producers) adding at once cannot lose a version. A
version is given to clients as Pulsar's ``LongSchemaVersion``: 8 bytes, big-endian.

Rules (Pulsar's ``ServerCnx``/``PersistentTopic.addSchema``):

* a producer (or GET_OR_CREATE_SCHEMA) with a schema identical (type + data) to a stored version
  gets that version; a new schema needs ``isAllowAutoUpdateSchema`` and must pass the
  compatibility strategy against the latest version (``*_TRANSITIVE``: against all);
* a producer without a schema (or BYTES) on a topic with a schema is refused only when schema
  validation is enforced (``schemaValidationEnforced`` / the namespace's
  ``schema_validation_enforced``), as Pulsar does;
* a consumer's schema is checked against the stored versions and never adds one, except on an
  idle topic without any schema (no producers, no consumers, nothing stored), where it is
  registered.

Compatibility for AVRO and JSON (whose schema data is an Avro schema in Pulsar) follows Avro's
schema-resolution rules, implemented below over the parsed JSON (``can_read``); other types are
compatible with the same type only.
"""

import base64
import json
import struct
from dataclasses import dataclass, field

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import InvalidTopicNameError, parse_topic
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError
from pulsar_twisted.metadata.layout import SCHEMAS_ROOT
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.base import CorruptMetadataError
from pulsar_twisted.resources.namespaces import NamespaceResources

log = Logger()

_VERSION = struct.Struct(">q")

ST = api.Schema
#: Pulsar's BYTES is the protocol's ``None`` type: a topic "without schema" for compatibility.
BYTES = ST.Type.Value("None")
AUTO_CONSUME = ST.AutoConsume
_AVRO_LIKE = (ST.Avro, ST.Json)

STRATEGIES = ("ALWAYS_COMPATIBLE", "ALWAYS_INCOMPATIBLE", "BACKWARD", "FORWARD", "FULL",
              "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")

#: Pulsar's REST names of the schema types (``SchemaType``), for the admin API.
TYPE_NAMES = {BYTES: "BYTES", ST.String: "STRING", ST.Json: "JSON", ST.Protobuf: "PROTOBUF",
              ST.Avro: "AVRO", ST.Bool: "BOOLEAN", ST.Int8: "INT8", ST.Int16: "INT16",
              ST.Int32: "INT32", ST.Int64: "INT64", ST.Float: "FLOAT", ST.Double: "DOUBLE",
              ST.Date: "DATE", ST.Time: "TIME", ST.Timestamp: "TIMESTAMP", ST.KeyValue: "KEY_VALUE",
              ST.Instant: "INSTANT", ST.LocalDate: "LOCAL_DATE", ST.LocalTime: "LOCAL_TIME",
              ST.LocalDateTime: "LOCAL_DATE_TIME", ST.ProtobufNative: "PROTOBUF_NATIVE",
              ST.AutoConsume: "AUTO_CONSUME"}
TYPES_BY_NAME = {name: code for code, name in TYPE_NAMES.items()}


def encode_version(version: int) -> bytes:
    """Pulsar's LongSchemaVersion bytes."""
    return _VERSION.pack(version)


def decode_version(data: bytes):
    """The version number in LongSchemaVersion bytes; None when empty (latest) or malformed."""
    if len(data) != 8:
        return None
    return _VERSION.unpack(data)[0]


def schema_id(topic: str) -> str:
    """``tenant/ns/topic`` of a topic name (partition suffix removed), Pulsar's schema id."""
    name = parse_topic(topic).partitioned_topic_name
    return f"{name.tenant}/{name.namespace}/{name.local_name}"


@dataclass
class SchemaVersion:
    """One stored version of a topic's schema."""

    version: int
    type: int
    data: bytes
    properties: dict = field(default_factory=dict)
    timestamp: int = 0
    name: str = ""
    deleted: bool = False

    def same_as(self, type_: int, data: bytes) -> bool:
        return not self.deleted and self.type == type_ and self.data == data

    def to_json(self) -> dict:
        return {"version": self.version, "type": self.type,
                "data": base64.b64encode(self.data).decode(), "properties": self.properties,
                "timestamp": self.timestamp, "name": self.name, "deleted": self.deleted}

    @classmethod
    def from_json(cls, obj: dict) -> "SchemaVersion":
        return cls(int(obj["version"]), int(obj["type"]), base64.b64decode(obj.get("data", "")),
                   dict(obj.get("properties") or {}), int(obj.get("timestamp", 0)),
                   obj.get("name", ""), bool(obj.get("deleted", False)))

    def to_proto(self) -> api.Schema:
        schema = api.Schema(name=self.name, schema_data=self.data, type=self.type)
        for key, value in sorted(self.properties.items()):
            schema.properties.add(key=key, value=value)
        return schema


# ------------------------------------------------------------------------------ compatibility
class IncompatibleSchemaError(Exception):
    """Why a schema cannot follow another (the message goes to the client)."""


def _parse_avro(data: bytes):
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except (ValueError, UnicodeDecodeError) as e:
        raise IncompatibleSchemaError(f"Invalid Avro schema definition: {e}") from None


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
#: Writer type -> reader types that may read it (Avro's promotions).
_PROMOTIONS = {"int": {"int", "long", "float", "double"}, "long": {"long", "float", "double"},
               "float": {"float", "double"}, "string": {"string", "bytes"},
               "bytes": {"bytes", "string"}}


class _AvroSchema:
    """A parsed Avro schema: the JSON with every named type resolvable by its full name."""

    def __init__(self, obj):
        self.names = {}
        self.root = self._collect(obj, "")

    def _collect(self, node, namespace):
        if isinstance(node, list):
            return [self._collect(n, namespace) for n in node]
        if isinstance(node, str):
            return node
        if not isinstance(node, dict) or "type" not in node:
            raise IncompatibleSchemaError(f"Invalid Avro schema node {node!r}")
        kind = node["type"]
        if kind in ("record", "error", "enum", "fixed"):
            name = node.get("name")
            if not isinstance(name, str):
                raise IncompatibleSchemaError(f"Avro {kind} without a name")
            ns = node.get("namespace", namespace) or ""
            full = name if "." in name or not ns else f"{ns}.{name}"
            self.names[full] = node
            self.names.setdefault(full.rsplit(".", 1)[-1], node)
            if kind in ("record", "error"):
                fields = node.get("fields")
                if not isinstance(fields, list):
                    raise IncompatibleSchemaError(f"Avro record {name} without fields")
                child_ns = full.rsplit(".", 1)[0] if "." in full else ""
                for f in fields:
                    if not isinstance(f, dict) or "name" not in f or "type" not in f:
                        raise IncompatibleSchemaError(f"Invalid field in record {name}")
                    f["type"] = self._collect(f["type"], child_ns)
        elif kind == "array":
            node["items"] = self._collect(node.get("items"), namespace)
        elif kind == "map":
            node["values"] = self._collect(node.get("values"), namespace)
        elif isinstance(kind, (dict, list)):
            return self._collect(kind, namespace)
        return node

    def resolve(self, node):
        """A type node with names and ``{"type": "int"}`` wrappers resolved."""
        while True:
            if isinstance(node, str):
                if node in _PRIMITIVES:
                    return node
                found = self.names.get(node) or self.names.get(node.rsplit(".", 1)[-1])
                if found is None:
                    raise IncompatibleSchemaError(f"Unknown Avro type {node}")
                return found
            if isinstance(node, dict) and isinstance(node.get("type"), str) and \
                    node["type"] in _PRIMITIVES:
                return node["type"]
            return node


def _kind(node) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "union"
    return node["type"]


def can_read(reader: _AvroSchema, writer: _AvroSchema, r=None, w=None, seen=None) -> bool:
    """Avro schema resolution: can data written with ``writer`` be read with ``reader``?"""
    if seen is None:
        seen = set()
    r = reader.resolve(reader.root if r is None else r)
    w = writer.resolve(writer.root if w is None else w)
    rk, wk = _kind(r), _kind(w)
    if wk == "union":
        return all(can_read(reader, writer, r, branch, seen) for branch in w)
    if rk == "union":
        return any(can_read(reader, writer, branch, w, seen) for branch in r)
    if rk in _PRIMITIVES or wk in _PRIMITIVES:
        return rk == wk or rk in _PROMOTIONS.get(wk, ())
    if rk != wk and not ({rk, wk} <= {"record", "error"}):
        return False
    if rk in ("record", "error", "enum", "fixed"):
        if r["name"].rsplit(".", 1)[-1] != w["name"].rsplit(".", 1)[-1]:
            return False
    if rk == "fixed":
        return r.get("size") == w.get("size")
    if rk == "enum":
        return "default" in r or set(w.get("symbols", ())) <= set(r.get("symbols", ()))
    if rk == "array":
        return can_read(reader, writer, r["items"], w["items"], seen)
    if rk == "map":
        return can_read(reader, writer, r["values"], w["values"], seen)
    key = (id(r), id(w))
    if key in seen:  # a recursive type already being compared
        return True
    seen.add(key)
    writer_fields = {}
    for f in w["fields"]:
        writer_fields[f["name"]] = f
    for f in r["fields"]:
        names = [f["name"], *f.get("aliases", ())]
        match = next((writer_fields[n] for n in names if n in writer_fields), None)
        if match is None:
            if "default" not in f:
                return False
        elif not can_read(reader, writer, f["type"], match["type"], seen):
            return False
    return True


def check_compatible(strategy: str, new_type: int, new_data: bytes, existing) -> None:
    """
    Raise ``IncompatibleSchemaError`` unless a schema ``(new_type, new_data)`` may follow the
    live versions ``existing`` (oldest first) under ``strategy``.
    """
    live = [v for v in existing if not v.deleted]
    if not live or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError(
            "Schema is incompatible with the latest schema: compatibility strategy is ALWAYS_INCOMPATIBLE")
    against = live if strategy.endswith("_TRANSITIVE") else live[-1:]
    base = strategy.replace("_TRANSITIVE", "")
    for old in reversed(against):
        if old.type != new_type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {TYPE_NAMES.get(old.type, old.type)}, "
                f"new schema type {TYPE_NAMES.get(new_type, new_type)}")
        if new_type not in _AVRO_LIKE:
            continue
        new = _AvroSchema(_parse_avro(new_data))
        previous = _AvroSchema(_parse_avro(old.data))
        if base in ("BACKWARD", "FULL") and not can_read(new, previous):
            raise IncompatibleSchemaError(
                f"Schema is incompatible with the latest schema (version {old.version}): "
                f"{base} compatibility: the new schema cannot read data written with it")
        if base in ("FORWARD", "FULL") and not can_read(previous, new):
            raise IncompatibleSchemaError(
                f"Schema is incompatible with the latest schema (version {old.version}): "
                f"{base} compatibility: data written with the new schema cannot be read with it")


def validate(type_: int, data: bytes) -> None:
    """Refuse a schema whose definition does not parse (AVRO / JSON definitions)."""
    if type_ in _AVRO_LIKE and data:
        _AvroSchema(_parse_avro(data))


# ------------------------------------------------------------------------------ registry
class SchemaRegistry:
    """
    Schemas of every topic, in the metadata store. Methods return Deferreds; refusals are
    ``errors.IncompatibleSchema`` (the client's IncompatibleSchema error).
    """

    def __init__(self, store, clock, config):
        self.store = store
        self.namespaces = NamespaceResources(store)
        self.clock = clock
        self.config = config

    def _path(self, sid: str) -> str:
        return f"{SCHEMAS_ROOT}/{sid}"

    @defer.inlineCallbacks
    def _read(self, sid: str):
        """``(versions, node_version)``; ``([], None)`` when the topic never had a schema."""
        node = yield self.store.get(self._path(sid))
        if node is None or not node[0]:
            return [], (node[1].version if node is not None else None)
        try:
            versions = [SchemaVersion.from_json(o) for o in json.loads(node[0])["versions"]]
        except (ValueError, KeyError, TypeError) as e:
            log.error("schema node of {sid} is corrupt: {error}", sid=sid, error=e)
            raise errors.MetadataError(f"Schema storage of {sid} is corrupt")
        return versions, node[1].version

    @defer.inlineCallbacks
    def versions(self, topic: str):
        """Every version of ``topic``'s schema, oldest first (deleted markers included)."""
        versions, _ = yield self._read(schema_id(topic))
        return versions

    @defer.inlineCallbacks
    def get(self, topic: str, version=None):
        """The latest live version (or ``version``); None when there is none."""
        versions = yield self.versions(topic)
        if version is None:
            if versions and not versions[-1].deleted:
                return versions[-1]
            return None
        for v in versions:
            if v.version == version and not v.deleted:
                return v
        return None

    @defer.inlineCallbacks
    def policies(self, topic: str) -> dict:
        """The stored Policies document of ``topic``'s namespace ({} when absent or unreadable:
        the broker configuration then decides)."""
        try:
            policies = yield self.namespaces.get(parse_topic(topic).namespace_name)
        except CorruptMetadataError:
            return {}
        return policies if isinstance(policies, dict) else {}

    @defer.inlineCallbacks
    def strategy(self, topic: str) -> str:
        """The namespace's schemaCompatibilityStrategy, else the broker's."""
        value = (yield self.policies(topic)).get("schema_compatibility_strategy")
        if isinstance(value, str) and value.upper() in STRATEGIES:
            return value.upper()
        configured = self.config.schemaCompatibilityStrategy.upper()
        return configured if configured in STRATEGIES else "FULL"

    @defer.inlineCallbacks
    def add(self, topic: str, type_: int, data: bytes, properties=None, name: str = ""):
        """
        The version of this schema for ``topic``: an identical existing one, else a new version
        checked against the strategy. Deferred firing with the version number.
        """
        sid = schema_id(topic)
        policies = yield self.policies(topic)
        allow_update = policies.get("is_allow_auto_update_schema")
        if allow_update is None:
            allow_update = self.config.isAllowAutoUpdateSchemaEnabled
        strategy = yield self.strategy(topic)
        try:
            validate(type_, data)
        except IncompatibleSchemaError as e:
            raise errors.IncompatibleSchema(str(e))
        while True:
            versions, node_version = yield self._read(sid)
            for v in versions:
                if v.same_as(type_, data):
                    return v.version
            live = [v for v in versions if not v.deleted]
            if live and not allow_update:
                raise errors.IncompatibleSchema(
                    "Schema not found and schema auto updating is disabled.")
            try:
                check_compatible(strategy, type_, data, self._since_delete(versions))
            except IncompatibleSchemaError as e:
                log.info("schema for {sid} refused: {reason}", sid=sid, reason=e)
                raise errors.IncompatibleSchema(str(e))
            new = SchemaVersion(versions[-1].version + 1 if versions else 0, type_, data,
                                dict(properties or {}), int(self.clock.seconds() * 1000), name)
            try:
                yield self._write(sid, versions + [new], node_version)
            except (BadVersionError, AlreadyExistsError):
                continue  # someone added a version meanwhile: decide again over it
            log.info("schema of {sid}: version {version} ({type}) added", sid=sid,
                     version=new.version, type=TYPE_NAMES.get(type_, type_))
            return new.version

    @staticmethod
    def _since_delete(versions):
        """Versions after the last delete: a deleted schema no longer constrains new ones."""
        for i in range(len(versions) - 1, -1, -1):
            if versions[i].deleted:
                return versions[i + 1:]
        return versions

    def _write(self, sid, versions, node_version):
        data = json.dumps({"versions": [v.to_json() for v in versions]}).encode()
        return self.store.put(self._path(sid), data,
                              expected_version=-1 if node_version is None else node_version)

    @defer.inlineCallbacks
    def check_consumer(self, topic: str, type_: int, data: bytes):
        """Raise IncompatibleSchema unless a consumer reading with this schema is allowed."""
        if type_ == AUTO_CONSUME:
            return
        versions = self._since_delete((yield self.versions(topic)))
        live = [v for v in versions if not v.deleted]
        if not live or any(v.same_as(type_, data) for v in live):
            return
        if type_ == BYTES:
            return  # a BYTES consumer reads anything, as Pulsar's do
        strategy = yield self.strategy(topic)
        try:
            validate(type_, data)
            check_compatible(strategy, type_, data, live)
        except IncompatibleSchemaError as e:
            raise errors.IncompatibleSchema(str(e))

    @defer.inlineCallbacks
    def delete(self, topic: str):
        """Mark the schema deleted (a tombstone version); Deferred firing with its version or None."""
        sid = schema_id(topic)
        while True:
            versions, node_version = yield self._read(sid)
            if not versions or versions[-1].deleted:
                return None
            marker = SchemaVersion(versions[-1].version + 1, BYTES, b"", {},
                                   int(self.clock.seconds() * 1000), "", deleted=True)
            try:
                yield self._write(sid, versions + [marker], node_version)
            except (BadVersionError, AlreadyExistsError):
                continue
            return marker.version

    def validation_enforced(self, policies: dict) -> bool:
        value = policies.get("schema_validation_enforced")
        return bool(value) or self.config.schemaValidationEnforced


# ------------------------------------------------------------------------------ broker hooks
@defer.inlineCallbacks
def producer_schema_version(service, request):
    """
    Before the producer of a ProducerRequest is created: the schema version it publishes with
    (LongSchemaVersion bytes, ``b""`` for none), or IncompatibleSchema. Costs nothing for a
    producer without a schema on a topic without one beyond one metadata read.
    """
    registry = service.schema_registry
    try:
        parse_topic(request.topic)
    except InvalidTopicNameError as e:
        raise errors.InvalidTopicName(str(e))
    spec = request.schema
    if spec is not None and spec.type != BYTES:
        version = yield registry.add(request.topic, spec.type, spec.data, spec.properties, spec.name)
        return encode_version(version)
    latest = yield registry.get(request.topic)
    if latest is not None and latest.type != BYTES:
        policies = yield registry.policies(request.topic)
        if registry.validation_enforced(policies):
            raise errors.IncompatibleSchema(
                "Producers cannot connect or send message without a schema to topics with a schema")
    return b""


@defer.inlineCallbacks
def check_subscribe_schema(service, request):
    """
    Before the consumer of a SubscribeRequest with a schema subscribes: check the schema, or
    register it on an idle topic.
    """
    spec = request.schema
    if spec is None or spec.type in (BYTES, AUTO_CONSUME):
        return
    registry = service.schema_registry
    latest = yield registry.get(request.topic)
    if latest is None:
        topic = yield service.get_topic(request.topic, create=request.force_topic_creation)
        idle = (not topic.producers and not any(s.consumers for s in topic.subscriptions.values())
                and topic.storage_size() == 0)
        if idle:
            yield registry.add(request.topic, spec.type, spec.data, spec.properties, spec.name)
        return
    yield registry.check_consumer(request.topic, spec.type, spec.data)


@defer.inlineCallbacks
def get_or_create_schema(service, topic: str, spec, cnx=None):
    """GET_OR_CREATE_SCHEMA: the version of the SchemaSpec ``spec`` for ``topic`` (added when new);
    ``cnx``, the asking connection, must be allowed to produce there."""
    registry = service.schema_registry
    yield service.security.authorized(cnx, api.BaseCommand.GET_OR_CREATE_SCHEMA, topic=topic)
    yield service.get_topic(topic)
    version = yield registry.add(topic, spec.type, spec.data, spec.properties, spec.name)
    return encode_version(version)


@defer.inlineCallbacks
def get_schema(service, topic: str, version_bytes: bytes, cnx=None):
    """GET_SCHEMA: ``(SchemaVersion)`` latest or by version; TopicNotFound when there is none.
    ``cnx``, the asking connection, must be allowed to look the topic up."""
    registry = service.schema_registry
    try:
        parse_topic(topic)
    except InvalidTopicNameError as e:
        raise errors.InvalidTopicName(str(e))
    yield service.security.authorized(cnx, api.BaseCommand.GET_SCHEMA, topic=topic)
    version = decode_version(version_bytes) if version_bytes else None
    if version_bytes and version is None:
        raise errors.NotAllowedError("Malformed schema version")
    found = yield registry.get(topic, version)
    if found is None:
        raise errors.TopicNotFound("Topic does not have schema")
    return found


# ------------------------------------------------------------------------------ admin REST
def schema_json(v: SchemaVersion) -> dict:
    """A version as Pulsar's ``GetSchemaResponse`` (schema data as text, as the REST API shows it)."""
    return {"version": v.version, "type": TYPE_NAMES.get(v.type, str(v.type)),
            "timestamp": v.timestamp, "data": v.data.decode("utf-8", "replace"),
            "properties": v.properties}


@defer.inlineCallbacks
def admin_post(service, topic: str, payload: dict):
    """POST .../schema ``{"type", "schema", "properties"}``: the version (IncompatibleSchema...)."""
    if not isinstance(payload, dict):
        raise ValueError("body must be a JSON object")
    type_name = str(payload.get("type", "")).upper()
    if type_name not in TYPES_BY_NAME:
        raise ValueError(f"unknown schema type {payload.get('type')!r}")
    data = payload.get("schema") or ""
    if not isinstance(data, str):
        raise ValueError("schema must be a string")
    properties = payload.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError("properties must be an object")
    version = yield service.schema_registry.add(topic, TYPES_BY_NAME[type_name], data.encode(),
                                             {str(k): str(v) for k, v in properties.items()})
    return {"version": {"version": version}}
