"""
Topic lookup, partitioned-topic metadata and namespace topic lists over the broker's web service,
for ``http://`` and ``https://`` service URLs, as the Java client's ``HttpLookupService`` does them:

- lookup: ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` -> ``{"brokerUrl",
  "brokerUrlTls", "httpUrl", ...}``; we then connect to ``brokerUrlTls`` (``https``, when the
  broker gave one) or ``brokerUrl`` over the binary protocol, through the ordinary pool;
- partitions: ``GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions?checkAllowAutoCreation=``
  -> ``{"partitions": N}``;
- topics of a namespace (regex subscriptions): ``GET /admin/v2/namespaces/{tenant}/{ns}/topics
  ?mode=PERSISTENT|NON_PERSISTENT|ALL`` -> ``[names]`` (the pattern is applied by the caller, as
  Java filters client-side on this path).

Requests go through ``twisted.web.client.Agent`` on the client's reactor (install_requires stays
Twisted only), each bounded by the client's operation timeout; ``https`` uses the same trust and
hostname options as ``pulsar+ssl`` connections. The client's authentication travels as an
``Authorization`` header (token -> ``Bearer``, basic -> ``Basic``); a TLS-certificate plugin
presents its certificate in the handshake instead. Redirects (a broker naming the owner) are
followed up to ``max_redirects``. HTTP statuses become the client's exceptions (``error_for_status``).
"""

import base64
import json
from urllib.parse import quote, urlencode, urljoin

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IPolicyForHTTPS
from zope.interface import implementer

from pulsar_twisted.common.naming import InvalidTopicNameError, NamespaceName, parse_topic
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import errors
from pulsar_twisted.client.lookup import ILookupService
from pulsar_twisted.client.pool import broker_address

_MODES = {api.CommandGetTopicsOfNamespace.PERSISTENT: "PERSISTENT",
          api.CommandGetTopicsOfNamespace.NON_PERSISTENT: "NON_PERSISTENT",
          api.CommandGetTopicsOfNamespace.ALL: "ALL"}
_REDIRECTS = (301, 302, 303, 307, 308)
#: Answers larger than this are refused: a lookup answer is a few hundred bytes, a topic list of
#: a very large namespace a few megabytes.
MAX_BODY = 64 * 1024 * 1024


def error_for_status(status: int, reason: str) -> errors.PulsarException:
    """
    The client exception for an HTTP error ``status`` with the server's ``reason``: 401
    AuthenticationError, 403 AuthorizationError, 404 TopicNotFound, 400/412 InvalidTopicName /
    NotAllowed, 429 TooManyRequests, 5xx ServiceNotReady (retriable), anything else LookupError.
    """
    if status == 401:
        cls = errors.AuthenticationError
    elif status == 403:
        cls = errors.AuthorizationError
    elif status == 404:
        cls = errors.TopicNotFound
    elif status == 400:
        cls = errors.InvalidTopicName
    elif status in (405, 409, 412):
        cls = errors.NotAllowed
    elif status == 429:
        cls = errors.TooManyRequests
    elif 500 <= status < 600:
        cls = errors.ServiceNotReady
    else:
        cls = errors.LookupError_
    return cls(f"HTTP {status}: {reason}")


def authorization_header(authentication):
    """
    The ``Authorization`` value for the client's ``authentication`` plugin, or None: token ->
    ``Bearer <token>``, basic -> ``Basic base64(user:pass)``; other plugins (TLS) send nothing.
    """
    if authentication is None:
        return None
    method = getattr(authentication, "auth_method_name", None)
    if method not in ("token", "basic"):
        return None
    data = authentication.auth_data()
    if data is None:
        return None
    if method == "token":
        return b"Bearer " + bytes(data)
    return b"Basic " + base64.b64encode(bytes(data))


@implementer(IAgent)
class AuthorizingAgent:
    """An ``IAgent`` that sends every request through ``agent`` with the ``Authorization`` of
    ``authentication`` (a client plugin; read again per request, so a refreshed token is used):
    how a daemon that is a client of the brokers (the functions worker) calls their admin API with
    its ``brokerClientAuthentication*`` credentials."""

    def __init__(self, agent, authentication):
        self.agent = agent
        self.authentication = authentication

    def request(self, method, uri, headers=None, bodyProducer=None):
        headers = headers.copy() if headers is not None else Headers()
        authorization = authorization_header(self.authentication)
        if authorization is not None and not headers.hasHeader(b"Authorization"):
            headers.setRawHeaders(b"Authorization", [authorization])
        return self.agent.request(method, uri, headers, bodyProducer)


@implementer(IPolicyForHTTPS)
class _TlsPolicy:
    """Agent's TLS policy from the client's ``tls(hostname) -> context factory``."""

    def __init__(self, tls):
        self._tls = tls

    def creatorForNetloc(self, hostname, port):
        return self._tls(hostname.decode("ascii") if isinstance(hostname, bytes) else hostname)


def _topic_path(topic: str) -> str:
    try:
        name = parse_topic(topic)
    except InvalidTopicNameError as e:
        raise errors.InvalidTopicName(str(e)) from None
    # The local name may hold characters (":" "%" ...) that must not be read as URL syntax.
    return "/".join((name.domain, name.tenant, name.namespace, quote(name.local_name, safe="")))


@implementer(ILookupService)
class HttpLookupService:
    """
    Lookups over HTTP(S) starting from ``service_url`` (a ``ServiceUrl`` with ``http``).

    ``reactor``: the client's; ``operation_timeout``: seconds for each request (connect, answer
    and body); ``tls``: ``hostname -> client TLS options`` for ``https`` (None for ``http``);
    ``authentication``: the client's plugin; ``agent``: an ``IAgent`` to use instead of building
    one (tests pass an in-memory one).
    """

    log = Logger()

    def __init__(self, reactor, service_url, operation_timeout: float = 30.0,
                 connect_timeout: float = 10.0, tls=None, authentication=None,
                 listener_name: str = None, max_redirects: int = 20, agent=None):
        self.reactor = reactor
        self.service_url = service_url
        self.operation_timeout = operation_timeout
        self.authentication = authentication
        self.listener_name = listener_name
        self.max_redirects = max_redirects
        self._pool = None
        if agent is None:
            self._pool = HTTPConnectionPool(reactor, persistent=True)
            kwargs = {"contextFactory": _TlsPolicy(tls)} if tls is not None else {}
            agent = Agent(reactor, connectTimeout=connect_timeout, pool=self._pool, **kwargs)
        self.agent = agent

    # ------------------------------------------------------------------ ILookupService
    @defer.inlineCallbacks
    def lookup(self, topic: str):
        """Fires with ``(logical, physical)`` broker addresses (the same: no proxying here)."""
        path = f"/lookup/v2/topic/{_topic_path(topic)}"
        query = {"listenerName": self.listener_name} if self.listener_name else None
        answer = yield self.get_json(path, query)
        if not isinstance(answer, dict):
            raise errors.LookupError_(f"lookup of {topic}: unexpected answer {answer!r}")
        url = answer.get("brokerUrl")
        if self.service_url.tls and answer.get("brokerUrlTls"):
            url = answer["brokerUrlTls"]
        if not url or not isinstance(url, str):
            raise errors.LookupError_(f"lookup of {topic} answered without a broker URL")
        try:
            address = broker_address(url)
        except (errors.InvalidConfiguration, ValueError) as e:
            raise errors.LookupError_(f"lookup of {topic}: bad broker URL {url!r}: {e}") from None
        return (address, address)

    @defer.inlineCallbacks
    def partitioned_metadata(self, topic: str, auto_create: bool = True):
        """Fires with the number of partitions of ``topic`` (0: not partitioned)."""
        answer = yield self.get_json(
            f"/admin/v2/{_topic_path(topic)}/partitions",
            {"checkAllowAutoCreation": "true" if auto_create else "false"})
        partitions = answer.get("partitions") if isinstance(answer, dict) else None
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 0:
            raise errors.LookupError_(f"partitioned metadata of {topic}: unexpected answer "
                                      f"{answer!r}")
        return partitions

    @defer.inlineCallbacks
    def topics_of_namespace(self, namespace: str, mode: int = 0, pattern: str = None):
        """
        Fires with the topic names of ``namespace`` in ``mode`` (partitions listed one by one, as
        the binary answer lists them). ``pattern`` is not sent: the caller filters.
        """
        try:
            name = NamespaceName.parse(namespace)
        except InvalidTopicNameError as e:
            raise errors.InvalidConfiguration(str(e)) from None
        if mode not in _MODES:
            raise errors.InvalidConfiguration(f"unknown topics mode {mode!r}")
        answer = yield self.get_json(
            f"/admin/v2/namespaces/{name.tenant}/{name.namespace}/topics", {"mode": _MODES[mode]})
        if not isinstance(answer, list) or not all(isinstance(t, str) for t in answer):
            raise errors.LookupError_(f"topics of {namespace}: unexpected answer {answer!r}")
        return answer

    def close(self) -> defer.Deferred:
        """Drop the cached HTTP connections; fires when they are closed."""
        if self._pool is None:
            return defer.succeed(None)
        return self._pool.closeCachedConnections()

    # ------------------------------------------------------------------ HTTP
    def get_json(self, path: str, query: dict = None) -> defer.Deferred:
        """
        GET ``path`` (with ``query``) from the next service host, following redirects; fires
        with the decoded JSON body, or fails with the client exception for what went wrong
        (``Timeout`` after ``operation_timeout``, ``ConnectError`` when the host cannot be reached).
        """
        url = self.service_url.http_base() + path
        if query:
            url += "?" + urlencode(query)
        d = self._get_json(url)
        timed_out = []

        def expire():
            timed_out.append(True)
            d.cancel()

        timer = self.reactor.callLater(self.operation_timeout, expire)

        def finished(result):
            if timer.active():
                timer.cancel()
            if timed_out and isinstance(result, Failure) \
                    and not isinstance(result.value, errors.PulsarException):
                # The cancelled request fails with whatever the HTTP layer makes of it
                # (ResponseNeverReceived, CancelledError): what happened is a timeout.
                raise errors.Timeout(f"GET {url} timed out after {self.operation_timeout}s")
            return result

        d.addBoth(finished)
        d.addErrback(self._translate, url)
        return d

    @defer.inlineCallbacks
    def _get_json(self, url: str):
        for _ in range(self.max_redirects + 1):
            response = yield self.agent.request(b"GET", url.encode("ascii"), self._headers())
            status = response.code
            if status in _REDIRECTS:
                location = response.headers.getRawHeaders(b"location")
                yield self._discard(response)
                if not location:
                    raise errors.LookupError_(f"HTTP {status} without a Location from {url}")
                url = urljoin(url, location[0].decode("ascii"))
                continue
            body = yield self._read(response)
            if status >= 300:
                reason = _reason(body) or response.phrase.decode("latin-1", "replace")
                self.log.info("HTTP lookup GET {url}: {status} {reason}", url=url,
                              status=status, reason=reason)
                raise error_for_status(status, reason)
            try:
                return json.loads(body)
            except ValueError:
                self.log.warn("HTTP lookup GET {url}: answer is not JSON", url=url)
                raise errors.LookupError_(f"answer from {url} is not JSON") from None
        raise errors.TooManyLookupRedirects(f"{url}: redirected {self.max_redirects} times")

    def _headers(self) -> Headers:
        headers = Headers({b"Accept": [b"application/json"],
                           b"User-Agent": [b"pulsar-twisted-client"]})
        authorization = authorization_header(self.authentication)
        if authorization is not None:
            headers.addRawHeader(b"Authorization", authorization)
        return headers

    @staticmethod
    def _read(response) -> defer.Deferred:
        if response.length is not None and response.length != -1 \
                and isinstance(response.length, int) and response.length > MAX_BODY:
            return defer.fail(errors.LookupError_(
                f"HTTP answer of {response.length} bytes exceeds {MAX_BODY}"))
        return readBody(response)

    @staticmethod
    def _discard(response) -> defer.Deferred:
        # Read (and drop) the redirect's body so the persistent connection can be reused.
        return readBody(response).addErrback(lambda _: None)

    def _translate(self, failure, url):
        error = failure.value
        if isinstance(error, errors.PulsarException):
            return failure
        self.log.info("HTTP lookup GET {url} failed: {error}", url=url,
                      error=failure.getErrorMessage())
        raise errors.ConnectError(f"GET {url}: {_describe(failure)}")


def _reason(body: bytes) -> str:
    """Pulsar's ``{"reason": ...}`` error text, else the start of the body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip()
    if isinstance(data, dict) and isinstance(data.get("reason"), str):
        return data["reason"]
    return str(data)[:200]


def _describe(failure) -> str:
    # ResponseNeverReceived & co. wrap their reasons in a list of Failures.
    reasons = getattr(failure.value, "reasons", None)
    if reasons:
        return "; ".join(r.getErrorMessage() for r in reasons)
    return failure.getErrorMessage() or type(failure.value).__name__
