"""
Where the proxy finds brokers for lookups and admin requests.

``StaticBrokers``: the ``brokerServiceURL`` / ``brokerWebServiceURL`` keys (several hosts in one
URL are taken in turn). ``RegisteredBrokers``: the brokers registered under
``/loadbalance/brokers`` in the metadata store (``broker/registration.py`` writes them, with
Pulsar's LocalBrokerData names ``pulsarServiceUrl``, ``pulsarServiceUrlTls``, ``webServiceUrl``,
``webServiceUrlTls``), re-read at most every ``refresh_seconds`` so that brokers joining and
leaving are followed without a watch. Either way the proxy only needs *a* broker for the first
hop: lookups are then redirected to the owner by the brokers themselves.

Both answer ``service_url()`` and ``web_url()`` as Deferreds (TLS URLs with ``tls``), round-robin.
"""

import itertools
import json
from urllib.parse import urlparse

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.metadata.interfaces import NotFoundError
from pulsar_twisted.metadata.layout import BROKERS_ROOT


class NoBrokerAvailable(Exception):
    """No broker is configured or registered."""


def split_hosts(url: str) -> list:
    """``pulsar://h1:6650,h2:6650`` -> [``pulsar://h1:6650``, ``pulsar://h2:6650``]."""
    if not url:
        return []
    parsed = urlparse(url)
    return [f"{parsed.scheme}://{host.strip()}" for host in parsed.netloc.split(",") if host.strip()]


class StaticBrokers:
    """The brokers named in the proxy's configuration."""

    def __init__(self, config, tls: bool):
        self.tls = tls
        service = config.brokerServiceURLTLS if tls else config.brokerServiceURL
        web = config.brokerWebServiceURLTLS if tls else config.brokerWebServiceURL
        self._service = itertools.cycle(split_hosts(service) or [None])
        self._web = itertools.cycle(split_hosts(web) or [None])

    def unreachable(self, url: str) -> None:
        """A broker could not be reached (nothing to re-read: the next call takes the next host)."""

    def service_url(self) -> defer.Deferred:
        url = next(self._service)
        if url is None:
            return defer.fail(NoBrokerAvailable(
                "no broker: set brokerServiceURL" + ("TLS" if self.tls else "") + " or metadataStoreUrl"))
        return defer.succeed(url)

    def web_url(self) -> defer.Deferred:
        url = next(self._web)
        if url is None:
            return defer.fail(NoBrokerAvailable(
                "no broker: set brokerWebServiceURL" + ("TLS" if self.tls else "") + " or metadataStoreUrl"))
        return defer.succeed(url)


class RegisteredBrokers:
    """The brokers registered in ``store`` (see the module docstring)."""

    log = Logger()

    def __init__(self, store, clock, tls: bool, refresh_seconds: float = 5.0):
        self.store = store
        self.clock = clock
        self.tls = tls
        self.refresh_seconds = refresh_seconds
        self._brokers = []
        self._read_at = None
        self._turn = 0

    async def brokers(self) -> list:
        """The registrations (LocalBrokerData dicts), sorted by name, re-read when stale."""
        now = self.clock.seconds()
        if self._read_at is None or now - self._read_at >= self.refresh_seconds or not self._brokers:
            try:
                names = sorted(await self.store.get_children(BROKERS_ROOT))
            except NotFoundError:
                names = []
            found = []
            for name in names:
                try:
                    got = await self.store.get(BROKERS_ROOT + "/" + name)
                    if got is not None:     # None: gone since the listing
                        found.append(json.loads(got[0]))
                except (NotFoundError, ValueError):
                    continue
            self._brokers, self._read_at = found, now
        return self._brokers

    def unreachable(self, url: str) -> None:
        """A broker could not be reached: re-read the registrations on the next call, and skip
        that URL until then (a broker that stopped keeps its registration for a moment)."""
        self._read_at = None
        self._brokers = [b for b in self._brokers if url not in b.values()]

    async def _pick(self, plain: str, secure: str, fallback: bool = False) -> str:
        """The next broker's URL under ``secure`` (with ``tls``) or ``plain``; with ``fallback``
        a broker without the secure URL is reached at its plain one."""
        urls = []
        for broker in await self.brokers():
            url = broker.get(secure) if self.tls else broker.get(plain)
            if not url and self.tls and fallback:
                url = broker.get(plain)
            if url:
                urls.append(url)
        if not urls:
            raise NoBrokerAvailable("no broker is registered under " + BROKERS_ROOT)
        self._turn += 1
        return urls[self._turn % len(urls)]

    def service_url(self) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._pick("pulsarServiceUrl", "pulsarServiceUrlTls"))

    def web_url(self) -> defer.Deferred:
        # A broker without an HTTPS listener still serves the admin API on its HTTP one.
        return defer.Deferred.fromCoroutine(self._pick("webServiceUrl", "webServiceUrlTls", fallback=True))
