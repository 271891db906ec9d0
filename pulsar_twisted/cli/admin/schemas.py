"""
``pulsar-admin schemas``: get (latest, ``--version``, ``--all-version``), upload, delete and
test-compatibility, with Pulsar's flags (``-f/--filename`` names a PostSchemaPayload JSON file:
``{"type": "AVRO", "schema": "<definition>", "properties": {}}``). ``extract`` (a schema from a Java
class in a jar) has no meaning here and is not offered.
"""

import base64
import json

from pulsar_twisted.cli.admin import V2, CommandError, jackson, topic_path

#: Types whose definition Pulsar's CLI prints as JSON (its SchemaUtils.jsonifySchemaInfo).
_JSON_DEFINITIONS = ("AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE", "KEY_VALUE")


def schema_path(topic: str) -> str:
    """``/admin/v2/schemas/{tenant}/{namespace}/{topic}`` of a topic name (short names allowed)."""
    return f"{V2}/schemas/" + topic_path(topic).split("/", 2)[2]


def _local_name(topic: str) -> str:
    return topic_path(topic).rsplit("/", 1)[1]


def schema_info(topic: str, response: dict) -> dict:
    """A GetSchemaResponse as Pulsar's SchemaInfo JSON (its SchemaUtils.jsonifySchemaInfo: the
    definition parsed when it is JSON, the properties sorted by key)."""
    definition = response.get("data", "")
    if response.get("type") in _JSON_DEFINITIONS:
        try:
            definition = json.loads(definition)
        except ValueError:
            pass
    return {"name": _local_name(topic), "schema": definition, "type": response.get("type"),
            "timestamp": response.get("timestamp", 0),
            "properties": dict(sorted((response.get("properties") or {}).items()))}


def _get(a, c):
    if a.version is not None and a.all_version:
        raise CommandError("Only one or neither of --version and --all-version can be specified.")
    path = schema_path(a.topic)
    if a.all_version:
        # Jackson's view of List<SchemaInfo>: the definition bytes base64-encoded.
        answers = c.get(path + "/schemas").get("getSchemaResponses", [])
        return [dict(schema_info(a.topic, r),
                     schema=base64.b64encode(r.get("data", "").encode()).decode()) for r in answers]
    if a.version is not None:
        if a.version < 0:
            raise CommandError(f"Option --version must be greater than 0, but found {a.version}")
        return json.dumps(schema_info(a.topic, c.get(path + f"/schema/{a.version}")), indent=2)
    latest = c.get(path + "/schema")
    return json.dumps({"version": latest.get("version"), "schemaInfo": schema_info(a.topic, latest)},
                      indent=2)


def _payload(filename: str) -> dict:
    try:
        with open(filename, encoding="utf-8") as f:
            payload = json.load(f)
    except OSError as e:
        raise CommandError(f"Cannot read {filename}: {e.strerror}")
    except ValueError as e:
        raise CommandError(f"{filename} is not a schema definition (JSON): {e}")
    if not isinstance(payload, dict):
        raise CommandError(f"{filename}: expected {{\"type\", \"schema\", \"properties\"}}")
    return payload


def _upload(a, c):
    c.post(schema_path(a.topic) + "/schema", _payload(a.filename))


def _test_compatibility(a, c):
    return jackson(c.post(schema_path(a.topic) + "/compatibility", _payload(a.filename)))


def add(sub) -> None:
    p = sub.add_parser("get", help="Get the schema for a topic")
    p.add_argument("topic")
    p.add_argument("-v", "--version", type=int, help="version")
    p.add_argument("-a", "--all-version", action="store_true", help="all versions")
    p.set_defaults(run=_get)
    p = sub.add_parser("upload", help="Update the schema for a topic")
    p.add_argument("topic")
    p.add_argument("-f", "--filename", required=True, help="PostSchemaPayload JSON file")
    p.set_defaults(run=_upload)
    p = sub.add_parser("delete", help="Delete all versions schema of a topic")
    p.add_argument("topic")
    p.add_argument("-f", "--force", action="store_true",
                   help="delete completely (else a deletion mark: versions stay readable by id)")
    p.set_defaults(run=lambda a, c: c.delete(schema_path(a.topic) + "/schema",
                                             query={"force": "true"} if a.force else None) and None)
    for name in ("test-compatibility", "compatibility"):
        p = sub.add_parser(name, help="Test schema compatibility")
        p.add_argument("topic")
        p.add_argument("-f", "--filename", required=True, help="PostSchemaPayload JSON file")
        p.set_defaults(run=_test_compatibility)
