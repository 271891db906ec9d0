"""
JSON values of AVRO messages, for the sinks that want JSON records (``wants_json``: the JDBC
sinks): a message produced with a schema carries its schema version; the AVRO schema of that
version is fetched once from the worker's web service (Pulsar's
``GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}``) and the value decoded
(``fastavro``) and given to the sink as JSON. JSON-schema and schemaless values pass unchanged.
"""

import io
import json
import urllib.parse
import urllib.request

from pulsar_twisted.common.patterns import base_name


class SchemaValues:

    def __init__(self, web_service_url: str, fetch=None, headers: dict = None):
        self.base = (web_service_url or "").rstrip("/")
        #: Sent on each fetch (the instance's ``Authorization``).
        self.headers = dict(headers or {})
        self.fetch = fetch or self._fetch
        self.cache = {}

    def _fetch(self, tenant, namespace, topic, version) -> dict:
        path = "/".join(urllib.parse.quote(p, safe="") for p in (tenant, namespace, topic))
        request = urllib.request.Request(f"{self.base}/admin/v2/schemas/{path}/schema/{version}",
                                         headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.load(r)

    def _schema(self, topic_name: str, version: int):
        key = (topic_name, version)
        if key not in self.cache:
            domain, _, rest = topic_name.partition("://")
            tenant, namespace, local = rest.split("/", 2)
            info = self.fetch(tenant, namespace, base_name(local), version)
            parsed = None
            if str(info.get("type", "")).upper() == "AVRO":
                import fastavro
                parsed = fastavro.parse_schema(json.loads(info["data"]))
            self.cache[key] = parsed
        return self.cache[key]

    def json_value(self, message, value: bytes) -> bytes:
        """``value`` as JSON bytes (ValueError when an AVRO value does not decode)."""
        # The official client's wrapper keeps the native message (with the version as a number).
        native = getattr(message, "_message", message)
        version = native.int_schema_version() if value else -1
        if version is None or version < 0:
            return value
        schema = self._schema(message.topic_name(), version)
        if schema is None:
            return value
        import fastavro
        try:
            record = fastavro.schemaless_reader(io.BytesIO(value), schema)
        except Exception as e:
            raise ValueError(f"value does not decode with the topic's AVRO schema version {version}: {e}")
        return json.dumps(record, default=str).encode()
