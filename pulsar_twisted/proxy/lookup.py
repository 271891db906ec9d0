"""
The lookups the proxy answers itself, through its broker connections (``pool.py``).

* ``lookup(pool, topic)``: LOOKUP at a broker from discovery, following Redirect answers (at most
  ``max_redirects``, Pulsar's ``maxLookupRedirects`` default) with their ``authoritative`` flag
  until a broker answers Connect; the result is the owner's URL, TLS or plain as the proxy talks
  to brokers (``tlsEnabledWithBroker``). The client is told that URL for both fields, with
  ``proxy_through_service_url``, so it comes back to the proxy with ``proxy_to_broker_url`` set
  to it: whether the last hop is TLS is the proxy's business, not the client's (as Pulsar's
  LookupProxyHandler answers).
* ``partitioned_metadata``, ``topics_of_namespace``, ``schema``: any broker can answer (the data
  lives in the metadata store), so one request to a broker from discovery.

A topic that moves between brokers (its bundle unloaded, its owner stopped) is followed because
nothing is cached here: the client's next lookup starts at discovery again and is redirected to
the new owner.
"""

from twisted.internet.error import ConnectError as ConnectingFailed

from pulsar_twisted.client.connection import command
from pulsar_twisted.client.errors import ConnectError
from pulsar_twisted.proto import PulsarApi_pb2 as api

T = api.BaseCommand
MAX_REDIRECTS = 20
#: Brokers from discovery tried before a request fails for want of a reachable one.
FIRST_HOP_ATTEMPTS = 3


class TooManyRedirects(Exception):
    """The brokers kept redirecting the lookup."""


class ProxyLookups:
    """Lookups over broker connections; ``discovery`` gives the first broker of each."""

    def __init__(self, discovery, tls: bool, max_redirects: int = MAX_REDIRECTS):
        self.discovery = discovery
        self.tls = tls
        self.max_redirects = max_redirects

    async def _request(self, pool, url: str, kind: int, field: str, **fields):
        cnx = await pool.get(url)
        request_id = cnx.new_request_id()
        return await cnx.send_request(command(kind, field, request_id=request_id, **fields), request_id)

    async def _first_hop(self, pool, kind: int, field: str, **fields):
        """``(url, answer)`` of a request to a broker from discovery; a broker that cannot be
        reached (stopped, its registration not yet gone) is reported and the next one tried."""
        for attempt in range(FIRST_HOP_ATTEMPTS):
            url = await self.discovery.service_url()
            try:
                return url, await self._request(pool, url, kind, field, **fields)
            except (ConnectError, ConnectingFailed):
                self.discovery.unreachable(url)
                if attempt == FIRST_HOP_ATTEMPTS - 1:
                    raise

    async def lookup(self, pool, topic: str, authoritative: bool = False) -> str:
        """The URL of ``topic``'s owner (raises the broker's error as a client exception)."""
        url, answer = await self._first_hop(pool, T.LOOKUP, "lookupTopic", topic=topic,
                                            authoritative=authoritative)
        for hop in range(self.max_redirects + 1):
            if hop:
                answer = await self._request(pool, url, T.LOOKUP, "lookupTopic", topic=topic,
                                             authoritative=authoritative)
            response = answer.lookupTopicResponse
            target = (response.brokerServiceUrlTls if self.tls else response.brokerServiceUrl) \
                or response.brokerServiceUrl
            if response.response != api.CommandLookupTopicResponse.Redirect:
                return target
            url, authoritative = target, response.authoritative
        raise TooManyRedirects(f"lookup of {topic} redirected more than {self.max_redirects} times")

    async def partitioned_metadata(self, pool, topic: str, auto_creation: bool) -> api.BaseCommand:
        _, answer = await self._first_hop(pool, T.PARTITIONED_METADATA, "partitionMetadata", topic=topic,
                                          metadata_auto_creation_enabled=auto_creation)
        return answer

    async def topics_of_namespace(self, pool, request: api.CommandGetTopicsOfNamespace) -> api.BaseCommand:
        fields = {"namespace": request.namespace, "mode": request.mode}
        if request.HasField("topics_pattern"):
            fields["topics_pattern"] = request.topics_pattern
        _, answer = await self._first_hop(pool, T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", **fields)
        return answer

    async def schema(self, pool, request: api.CommandGetSchema) -> api.BaseCommand:
        fields = {"topic": request.topic}
        if request.HasField("schema_version"):
            fields["schema_version"] = request.schema_version
        _, answer = await self._first_hop(pool, T.GET_SCHEMA, "getSchema", **fields)
        return answer
