"""
Asking another functions worker over its admin API v3, as Pulsar's workers do: a non-leader
forwards create/update/delete/start/stop to the leader, and any worker asks the worker running an
instance for its status, stats or restart. The answer's error becomes the same
``FunctionsError`` (its status and reason), so the client sees what the other worker said.
"""

import io
import json
import uuid
from urllib.parse import quote

from twisted.web.client import Agent, FileBodyProducer, readBody
from twisted.web.http_headers import Headers

from pulsar_twisted.functions.errors import FunctionsError


def multipart(parts) -> tuple:
    """``(body, content type)`` of ``multipart/form-data`` from ``[(name, bytes, content type)]``."""
    boundary = uuid.uuid4().hex
    chunks = []
    for name, data, ctype in parts:
        filename = '; filename="package"' if name == "data" else ""
        chunks.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{filename}\r\n'
                      f"Content-Type: {ctype}\r\n\r\n".encode() + data + b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return b"".join(chunks), f"multipart/form-data; boundary={boundary}"


def function_path(tenant, namespace, name, rest: str = "") -> str:
    return ("/admin/v3/functions/" + "/".join(quote(x, safe="") for x in (tenant, namespace, name))
            + rest)


class Forwarder:
    """``call(base_url, method, path, body, content_type)``: the decoded JSON answer (None for
    an empty one), or FunctionsError with the other worker's status and reason."""

    def __init__(self, reactor, agent=None):
        self.agent = agent if agent is not None else Agent(reactor)

    async def call(self, base_url: str, method: str, path: str, body: bytes = None,
                   content_type: str = None):
        headers = Headers({b"x-pulsar-forwarded": [b"true"]})
        if content_type:
            headers.setRawHeaders(b"content-type", [content_type.encode("latin-1")])
        producer = FileBodyProducer(io.BytesIO(body)) if body is not None else None
        url = base_url.rstrip("/") + path
        try:
            response = await self.agent.request(method.encode("ascii"), url.encode("ascii"),
                                                headers, producer)
            answer = await readBody(response)
        except Exception as e:
            raise FunctionsError(f"Worker at {base_url} could not be reached: {e}", 503)
        if response.code >= 400:
            try:
                reason = json.loads(answer).get("reason") or answer.decode("utf-8", "replace")
            except (ValueError, AttributeError):
                reason = answer.decode("utf-8", "replace")
            raise FunctionsError(reason, response.code)
        if not answer.strip():
            return None
        try:
            return json.loads(answer)
        except ValueError:
            return answer.decode("utf-8", "replace")
