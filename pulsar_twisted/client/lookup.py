"""
Binary-protocol topic lookup and partitioned-topic metadata, as the Java client's
``BinaryProtoLookupService`` does them.

``lookup(topic)`` asks the service URL's broker; a ``Redirect`` answer names another broker to ask
(carrying the ``authoritative`` flag on), a ``Connect`` answer names the owner. With
``proxy_through_service_url`` the physical address stays the service URL's (a proxy). Redirects are
bounded (``max_redirects``) so two brokers disagreeing cannot loop us forever.
"""

from twisted.internet import defer
from zope.interface import Interface, implementer

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import errors
from pulsar_twisted.client.connection import T, command
from pulsar_twisted.client.pool import broker_address

Lookup = api.CommandLookupTopicResponse


class ILookupService(Interface):
    """
    Where topics live: the binary ``LookupService`` (``pulsar://``, ``pulsar+ssl://``) and
    ``http_lookup.HttpLookupService`` (``http://``, ``https://``). Every method returns a Deferred
    failing with a ``PulsarException``.
    """

    def lookup(topic):
        """Fires with ``(logical, physical)`` ``host:port`` of the broker owning ``topic``."""

    def partitioned_metadata(topic, auto_create=True):
        """Fires with the number of partitions of ``topic`` (0: not partitioned)."""

    def topics_of_namespace(namespace, mode=0, pattern=None):
        """Fires with the topic names of ``namespace`` (``pattern`` may or may not be applied)."""

    def close():
        """Release what the service holds of its own; fires when done."""


@implementer(ILookupService)
class LookupService:
    """Lookups through ``pool`` starting from ``service_url`` (a ``ServiceUrl``)."""

    def __init__(self, pool, service_url, max_redirects: int = 20, listener_name: str = None):
        self.pool = pool
        self.service_url = service_url
        self.max_redirects = max_redirects
        self.listener_name = listener_name

    def _service_connection(self):
        return self.pool.get_connection(self.service_url.address())

    @defer.inlineCallbacks
    def lookup(self, topic: str):
        """Fires with ``(logical, physical)`` broker addresses (``host:port``) owning ``topic``."""
        cnx = yield self._service_connection()
        service_physical = None
        authoritative = False
        for _ in range(self.max_redirects):
            request_id = cnx.new_request_id()
            cmd = command(T.LOOKUP, "lookupTopic", topic=topic, request_id=request_id,
                          authoritative=authoritative,
                          advertised_listener_name=self.listener_name)
            answer = (yield cnx.send_request(cmd, request_id)).lookupTopicResponse
            url = (answer.brokerServiceUrlTls if self.service_url.tls and answer.brokerServiceUrlTls
                   else answer.brokerServiceUrl)
            if not url:
                raise errors.LookupError_(f"lookup of {topic} answered without a broker URL")
            logical = broker_address(url)
            physical = logical
            if answer.proxy_through_service_url:
                service_physical = service_physical or self.service_url.addresses[0]
                physical = service_physical
            if answer.response == Lookup.Connect:
                return (logical, physical)
            authoritative = answer.authoritative
            cnx = yield self.pool.get_connection(logical, physical)
        raise errors.TooManyLookupRedirects(f"lookup of {topic} redirected "
                                            f"{self.max_redirects} times")

    @defer.inlineCallbacks
    def partitioned_metadata(self, topic: str, auto_create: bool = True):
        """Fires with the number of partitions of ``topic`` (0: not partitioned)."""
        cnx = yield self._service_connection()
        request_id = cnx.new_request_id()
        cmd = command(T.PARTITIONED_METADATA, "partitionMetadata", topic=topic,
                      request_id=request_id, metadata_auto_creation_enabled=auto_create)
        answer = yield cnx.send_request(cmd, request_id)
        return answer.partitionMetadataResponse.partitions

    @defer.inlineCallbacks
    def topics_of_namespace(self, namespace: str, mode: int = 0, pattern: str = None):
        """Fires with the list of topic names of ``namespace``."""
        cnx = yield self._service_connection()
        request_id = cnx.new_request_id()
        cmd = command(T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", namespace=namespace,
                      request_id=request_id, mode=mode, topics_pattern=pattern)
        answer = yield cnx.send_request(cmd, request_id)
        return list(answer.getTopicsOfNamespaceResponse.topics)

    def close(self) -> defer.Deferred:
        """Nothing of its own to release: its connections belong to the pool."""
        return defer.succeed(None)
