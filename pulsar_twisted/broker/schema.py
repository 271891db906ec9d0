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
schema-resolution rules (``broker/schema_compat.py``): BACKWARD is "the new schema reads data of the
old", FORWARD "the old reads the new", FULL both; plain strategies compare with the latest live
version, ``*_TRANSITIVE`` with every live version since the last delete. Other types are
compatible with the same type only. Without a namespace strategy (``UNDEFINED``) nor the
namespace's deprecated auto-update strategy (null by default, as in Pulsar 4.x) the broker's
``schemaCompatibilityStrategy`` applies (Pulsar's default: FULL); see ``effective_strategy``.
"""

import base64
import json
import struct
from dataclasses import dataclass, field

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.broker.schema_compat import (
    AvroSchema, InvalidAvroSchema, read_mismatch)
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


def _parse_avro(data: bytes) -> AvroSchema:
    try:
        return AvroSchema.parse(data)
    except InvalidAvroSchema as e:
        raise IncompatibleSchemaError(str(e)) from None


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
        label = f"schema version {old.version}" if old is not live[-1] else \
            f"the latest schema (version {old.version})"
        if old.type != new_type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {TYPE_NAMES.get(old.type, old.type)}, "
                f"new schema type {TYPE_NAMES.get(new_type, new_type)}")
        if new_type not in _AVRO_LIKE:
            continue
        if new_type == ST.Json and not (_is_avro(new_data) and _is_avro(old.data)):
            _check_legacy_json(new_data, old.data, label)
            continue
        new, previous = _parse_avro(new_data), _parse_avro(old.data)
        if base in ("BACKWARD", "FULL"):
            _refuse_mismatch(read_mismatch(new, previous), base, label,
                             "the new schema cannot read data written with it")
        if base in ("FORWARD", "FULL"):
            _refuse_mismatch(read_mismatch(previous, new), base, label,
                             "data written with the new schema cannot be read with it")


def _refuse_mismatch(reason, strategy, against, what):
    if reason is not None:
        raise IncompatibleSchemaError(
            f"Schema is incompatible with {against}: {strategy} compatibility: "
            f"{what} ({reason})")


#: Pulsar's ``SchemaCompatibilityStrategy.fromAutoUpdatePolicy``: the deprecated namespace policy
#: ``schema_auto_update_compatibility_strategy`` as a strategy (null: none).
_AUTO_UPDATE_STRATEGIES = {
    "AutoUpdateDisabled": "ALWAYS_INCOMPATIBLE", "Backward": "BACKWARD", "Forward": "FORWARD",
    "Full": "FULL", "AlwaysCompatible": "ALWAYS_COMPATIBLE",
    "BackwardTransitive": "BACKWARD_TRANSITIVE", "ForwardTransitive": "FORWARD_TRANSITIVE",
    "FullTransitive": "FULL_TRANSITIVE"}

#: The value every namespace document we stored before carried as its default (Pulsar 2.x's);
#: read as unset, since nobody chose it: no admin call of ours sets the deprecated field.
_STALE_AUTO_UPDATE_DEFAULT = "Full"


def consumer_strategy(strategy: str) -> str:
    """
    How a consumer's schema that is not stored is checked (Pulsar's
    ``checkConsumerCompatibility``): under BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL it must
    read the latest version (BACKWARD against the latest); under the other strategies it is checked
    against every version with the strategy itself.
    """
    if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
        return "BACKWARD"
    return strategy


def effective_strategy(policies: dict, broker_strategy: str) -> str:
    """
    The strategy applied on a topic of a namespace with ``policies``, in Pulsar 4.x's order: the
    namespace's ``schema_compatibility_strategy`` unless it is ``UNDEFINED`` (its default); then
    the namespace's deprecated ``schema_auto_update_compatibility_strategy`` when set (Pulsar 4.x
    stores null there); then the broker's ``schemaCompatibilityStrategy`` (default FULL); FULL
    when that is ``UNDEFINED`` too.

    A stored "Full" in the deprecated field is read as unset: it is the default our earlier
    documents (like Pulsar 2.x's) carried, and honouring it would hide the broker's setting.
    """
    value = policies.get("schema_compatibility_strategy")
    if isinstance(value, str) and value.upper() in STRATEGIES:
        return value.upper()
    auto = policies.get("schema_auto_update_compatibility_strategy")
    if auto in _AUTO_UPDATE_STRATEGIES and auto != _STALE_AUTO_UPDATE_DEFAULT:
        return _AUTO_UPDATE_STRATEGIES[auto]
    if isinstance(broker_strategy, str) and broker_strategy.upper() in STRATEGIES:
        return broker_strategy.upper()
    return "FULL"


def _is_avro(data: bytes) -> bool:
    try:
        AvroSchema.parse(data)
    except InvalidAvroSchema:
        return False
    return True


def _legacy_json_schema(data: bytes):
    """A JSON schema definition that is not an Avro schema (the JSON-Schema documents of old
    clients): the parsed object, or None when ``data`` is not a JSON object."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _check_legacy_json(new_data: bytes, old_data: bytes, label: str) -> None:
    """Pulsar's ``JsonSchemaCompatibilityCheck`` when one side is not Avro: an Avro definition
    and a JSON-Schema one are incompatible; two JSON-Schema ones are compatible when their ids
    are equal."""
    new, old = _legacy_json_schema(new_data), _legacy_json_schema(old_data)
    if _is_avro(old_data) or _is_avro(new_data) or new is None or old is None:
        raise IncompatibleSchemaError(
            f"Schema is incompatible with {label}: an Avro-based JSON schema and a JSON-Schema "
            "definition do not follow each other")
    if new.get("id") != old.get("id"):
        raise IncompatibleSchemaError(
            f"Schema is incompatible with {label}: JSON-Schema id {new.get('id')!r} is not "
            f"{old.get('id')!r}")


def validate(type_: int, data: bytes) -> None:
    """Refuse a schema whose definition does not parse: AVRO must be an Avro schema; JSON an Avro
    schema too, or (as Pulsar still accepts from old clients) a JSON-Schema object."""
    if type_ in _AVRO_LIKE and data:
        if type_ == ST.Json and not _is_avro(data) and _legacy_json_schema(data) is not None:
            return
        _parse_avro(data)


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
        #: namespace -> [compatible, incompatible] results of compatibility checks, for /metrics
        #: (Pulsar's pulsar_schema_compatible_total / pulsar_schema_incompatible_total).
        self.check_results = {}

    def _path(self, sid: str) -> str:
        return f"{SCHEMAS_ROOT}/{sid}"

    # _read, versions and get are plain callbacks, not generators: every producer asks (issue 14,
    # item 4), and a topic without a schema answers from one metadata read.
    def _read(self, sid: str) -> defer.Deferred:
        """``(versions, node_version)``; ``([], None)`` when the topic never had a schema."""
        return self.store.get(self._path(sid)).addCallback(self._decode, sid)

    @staticmethod
    def _decode(node, sid):
        if node is None or not node[0]:
            return [], (node[1].version if node is not None else None)
        try:
            versions = [SchemaVersion.from_json(o) for o in json.loads(node[0])["versions"]]
        except (ValueError, KeyError, TypeError) as e:
            log.error("schema node of {sid} is corrupt: {error}", sid=sid, error=e)
            raise errors.MetadataError(f"Schema storage of {sid} is corrupt")
        return versions, node[1].version

    @classmethod
    def _pick_stored(cls, node, sid, version):
        """``get``'s answer from the schema node: decoded and picked in one callback."""
        return _pick(cls._decode(node, sid)[0], version)

    def versions(self, topic: str) -> defer.Deferred:
        """Every version of ``topic``'s schema, oldest first (deleted markers included)."""
        try:
            sid = schema_id(topic)
        except Exception:
            return defer.fail()
        return self._read(sid).addCallback(_first)

    def get(self, topic: str, version=None) -> defer.Deferred:
        """The latest live version (or ``version``); None when there is none."""
        try:
            sid = schema_id(topic)
        except Exception:
            return defer.fail()
        return self.store.get(self._path(sid)).addCallback(self._pick_stored, sid, version)

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
        """The strategy applied on ``topic`` (``effective_strategy`` of its namespace's policies)."""
        policies = yield self.policies(topic)
        return effective_strategy(policies, self.config.schemaCompatibilityStrategy)

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
                self._count_check(topic, False)
                raise errors.IncompatibleSchema(str(e))
            self._count_check(topic, True)
            new = SchemaVersion(versions[-1].version + 1 if versions else 0, type_, data,
                                dict(properties or {}), int(self.clock.seconds() * 1000), name)
            try:
                yield self._write(sid, versions + [new], node_version)
            except (BadVersionError, AlreadyExistsError):
                continue  # someone added a version meanwhile: decide again over it
            log.info("schema of {sid}: version {version} ({type}) added", sid=sid,
                     version=new.version, type=TYPE_NAMES.get(type_, type_))
            return new.version

    def _count_check(self, topic: str, compatible: bool) -> None:
        results = self.check_results.setdefault(str(parse_topic(topic).namespace_name), [0, 0])
        results[0 if compatible else 1] += 1

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
        strategy = consumer_strategy((yield self.strategy(topic)))
        try:
            validate(type_, data)
            check_compatible(strategy, type_, data, live)
        except IncompatibleSchemaError as e:
            self._count_check(topic, False)
            raise errors.IncompatibleSchema(str(e))
        self._count_check(topic, True)

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


def _first(pair):
    return pair[0]


def _pick(versions, version):
    if version is None:
        if versions and not versions[-1].deleted:
            return versions[-1]
        return None
    for v in versions:
        if v.version == version and not v.deleted:
            return v
    return None


# ------------------------------------------------------------------------------ broker hooks
def producer_schema_version(service, request) -> defer.Deferred:
    """
    Before the producer of a ProducerRequest is created: the schema version it publishes with
    (LongSchemaVersion bytes, ``b""`` for none), or IncompatibleSchema. Costs nothing for a
    producer without a schema on a topic without one beyond one metadata read (and no generator:
    the Deferred has fired when the read has).
    """
    registry = service.schema_registry
    try:
        parse_topic(request.topic)
    except InvalidTopicNameError as e:
        return defer.fail(errors.InvalidTopicName(str(e)))
    spec = request.schema
    if spec is not None and spec.type != BYTES:
        d = registry.add(request.topic, spec.type, spec.data, spec.properties, spec.name)
        return d.addCallback(encode_version)
    return registry.get(request.topic).addCallback(_without_schema, registry, request.topic)


def _without_schema(latest, registry, topic):
    """A producer without a schema: refused on a topic with one when validation is enforced."""
    if latest is None or latest.type == BYTES:
        return b""
    return registry.policies(topic).addCallback(_refuse_if_enforced, registry)


def _refuse_if_enforced(policies, registry):
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
