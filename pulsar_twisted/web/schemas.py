"""
Routes of /admin/v2/schemas/{tenant}/{namespace}/{topic} (Pulsar's SchemasResource): the latest
schema, one version, every version, a new version (POST) and deletion. The rules live in
``pulsar_twisted.broker.schema``; this module maps its answers to Pulsar's HTTP statuses.
"""

from pulsar_twisted.broker import schema
from pulsar_twisted.broker.admin.errors import BadRequest, Conflict, NotFound
from pulsar_twisted.common import errors
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

    router.add("GET", f"{base}/schema", get_latest)
    router.add("GET", f"{base}/schema/{{version}}", get_version)
    router.add("GET", f"{base}/schemas", get_all)
    router.add("GET", f"{base}/versions", get_all)
    router.add("POST", f"{base}/schema", post)
    router.add("DELETE", f"{base}/schema", delete)
