"""
Routes of /admin/v2/schemas/{tenant}/{namespace}/{topic} (Pulsar's SchemasResource): the latest
schema, one version, every version, a new version (POST), deletion, and a compatibility test of a
candidate schema (POST .../compatibility, Pulsar's IsCompatibilityResponse). The rules live in
``pulsar_twisted.broker.schema``; this module maps its answers to Pulsar's HTTP statuses.
"""

from pulsar_twisted.broker import schema
from pulsar_twisted.broker.admin.errors import BadRequest, Conflict, NotFound
from pulsar_twisted.common import errors
from pulsar_twisted.web.openapi import Operation
from pulsar_twisted.web.routing import int_param, json_body

V2 = "/admin/v2"


def add_schema_routes(router, admin) -> None:
    base = f"{V2}/schemas/{{tenant}}/{{namespace}}/{{topic}}"

    def topic_of(tenant, namespace, topic) -> str:
        return str(admin.topic_name("persistent", tenant, namespace, topic))

    def registry():
        return admin.broker.schema_registry

    async def get_latest(request, tenant, namespace, topic):
        found = await registry().get(topic_of(tenant, namespace, topic))
        if found is None:
            raise NotFound("Schema not found")
        return schema.schema_json(found)

    async def get_version(request, tenant, namespace, topic, version):
        found = await registry().get(topic_of(tenant, namespace, topic), int_param(version, "version"))
        if found is None:
            raise NotFound("Schema not found")
        return schema.schema_json(found)

    async def get_all(request, tenant, namespace, topic):
        versions = await registry().versions(topic_of(tenant, namespace, topic))
        live = [schema.schema_json(v) for v in schema.SchemaRegistry._since_delete(versions)
                if not v.deleted]
        return {"getSchemaResponses": live}

    async def post(request, tenant, namespace, topic):
        body = json_body(request)
        try:
            return await schema.admin_post(admin.broker, topic_of(tenant, namespace, topic), body)
        except ValueError as e:
            raise BadRequest(str(e))
        except errors.IncompatibleSchema as e:
            raise Conflict(str(e))

    async def delete(request, tenant, namespace, topic):
        version = await registry().delete(topic_of(tenant, namespace, topic))
        if version is None:
            raise NotFound("Schema not found")
        return {"version": {"version": version}}

    async def compatibility(request, tenant, namespace, topic):
        """Whether the posted schema could be added under the topic's strategy (nothing stored)."""
        type_, data = _candidate(json_body(request))
        name = topic_of(tenant, namespace, topic)
        strategy = await registry().strategy(name)
        versions = schema.SchemaRegistry._since_delete(await registry().versions(name))
        try:
            schema.validate(type_, data)
            schema.check_compatible(strategy, type_, data, versions)
            compatible = True
        except schema.IncompatibleSchemaError:
            compatible = False
        return {"compatibility": compatible, "schemaCompatibilityStrategy": strategy}

    router.add("POST", f"{base}/compatibility", compatibility, doc=Operation(
        "Test a schema's compatibility", "schemas",
        {200: {"type": "object", "properties": {"compatibility": {"type": "boolean"},
                                                "schemaCompatibilityStrategy": {"type": "string"}}}},
        body={"type": "object", "properties": {"type": {"type": "string"},
                                               "schema": {"type": "string"},
                                               "properties": {"type": "object"}}}))
    router.add("GET", f"{base}/schema", get_latest)
    router.add("GET", f"{base}/schema/{{version}}", get_version)
    router.add("GET", f"{base}/schemas", get_all)
    router.add("GET", f"{base}/versions", get_all)
    router.add("POST", f"{base}/schema", post)
    router.add("DELETE", f"{base}/schema", delete)


def _candidate(body) -> tuple:
    """``(type code, definition bytes)`` of a PostSchemaPayload; BadRequest when malformed."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    type_name = str(body.get("type", "")).upper()
    if type_name not in schema.TYPES_BY_NAME:
        raise BadRequest(f"unknown schema type {body.get('type')!r}")
    data = body.get("schema") or ""
    if not isinstance(data, str):
        raise BadRequest("schema must be a string")
    return schema.TYPES_BY_NAME[type_name], data.encode()
