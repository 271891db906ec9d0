"""
A cluster broker's presence in the metadata store (Pulsar's ``BrokerRegistry``).

``BrokerAddresses`` are the URLs a broker advertises, from its configuration: under Pulsar's
``NamespaceEphemeralData`` names in the bundle ownership nodes (``urls()``), and under
``LocalBrokerData`` names in its registration (``broker_data()``). The TLS URLs
(``pulsar+ssl://advertisedAddress:brokerServicePortTls``, ``https://advertisedAddress:webServicePortTls``)
are empty when their port is 0.

``BrokerRegistration`` keeps the ephemeral ``/loadbalance/brokers/<advertisedAddress>:<webServicePort>``
node: created at start, re-created by a periodic check if a new ZooKeeper session lost it, and at
once when the store reports a new session. The node goes with the session when the broker stops.
"""

import json

from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.broker.advertised import advertised_listeners, internal_listener, listeners_json
from pulsar_twisted.metadata.layout import broker_path
from pulsar_twisted.security.endpoints import tls_broker_url

log = Logger()


class BrokerAddresses:
    """
    The URLs and registration name of the broker configured by ``config`` (a BrokerConfig). With
    ``advertisedListeners`` (``broker/advertised.py``) the internal listener's URLs are the
    broker's own, and every listener is published under Pulsar's ``advertisedListeners`` field,
    so that any broker answering a lookup can give the owner's URLs for the client's listener.
    """

    def __init__(self, config):
        self.config = config
        self.listeners = advertised_listeners(config)
        self._internal = internal_listener(config)

    def _listener_url(self, field: str, default: str) -> str:
        if self._internal is None:
            return default
        return getattr(self._internal, field) or ""

    @property
    def broker_id(self) -> str:
        return f"{self.config.advertisedAddress}:{self.config.webServicePort}"

    @property
    def broker_url(self) -> str:
        default = f"pulsar://{self.config.advertisedAddress}:{self.config.brokerServicePort}"
        # A broker whose internal listener has only pulsar+ssl:// still needs a plain URL for
        # the lookup answer's required brokerServiceUrl: advertisedAddress's one.
        return self._listener_url("broker_url", default) or default

    @property
    def web_url(self) -> str:
        default = f"http://{self.config.advertisedAddress}:{self.config.webServicePort}"
        return self._listener_url("http_url", default) or default

    @property
    def broker_url_tls(self) -> str:
        """``pulsar+ssl://...:brokerServicePortTls``, or "" without a TLS binary listener."""
        return self._listener_url("broker_url_tls", tls_broker_url(self.config))

    @property
    def web_url_tls(self) -> str:
        """``https://...:webServicePortTls``, or "" without a TLS web listener."""
        default = ""
        if self.config.webServicePortTls:
            default = f"https://{self.config.advertisedAddress}:{self.config.webServicePortTls}"
        if self._internal is not None and self._internal.https_url:
            return self._internal.https_url
        return default

    def urls(self) -> dict:
        """This broker's URLs under Pulsar's ``NamespaceEphemeralData`` names (ownership nodes)."""
        return {"nativeUrl": self.broker_url, "nativeUrlTls": self.broker_url_tls,
                "httpUrl": self.web_url, "httpUrlTls": self.web_url_tls,
                "advertisedListeners": listeners_json(self.listeners)}

    def broker_data(self) -> bytes:
        """The registration's value: Pulsar's LocalBrokerData names for what clients need."""
        return json.dumps({"webServiceUrl": self.web_url, "webServiceUrlTls": self.web_url_tls,
                           "pulsarServiceUrl": self.broker_url,
                           "pulsarServiceUrlTls": self.broker_url_tls,
                           "advertisedListeners": listeners_json(self.listeners),
                           "brokerVersionString": "pulsar-twisted",
                           "cluster": self.config.clusterName}, sort_keys=True).encode()


class BrokerRegistration:
    """
    The ephemeral registration ``metadata.layout.broker_path(broker_id)`` holding ``data`` in ``store`` (an
    IMetadataStore with sessions), checked every ``check_interval`` seconds on ``clock``.
    ``start()`` fires once the node is written; ``stop()`` ends the checks.
    """

    def __init__(self, store, clock, broker_id: str, data: bytes, check_interval: float):
        self.store = store
        self.clock = clock
        self.broker_id = broker_id
        self.data = data
        self.check_interval = check_interval
        self.path = broker_path(broker_id)
        self._loop = None
        self._running = False

    async def start(self) -> None:
        await self._register()
        self._running = True
        self.store.register_session_listener(self._session_changed)
        self._loop = task.LoopingCall(self.check)
        self._loop.clock = self.clock
        self._loop.start(self.check_interval, now=False).addErrback(
            lambda f: log.failure("broker registration check stopped", f))

    def stop(self) -> None:
        self._running = False
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def _register(self):
        return self.store.put(self.path, self.data, ephemeral=True)

    def check(self) -> defer.Deferred:
        """Re-register after a ZooKeeper session expiry took the ephemeral node away."""
        d = self.store.exists(self.path)

        def checked(stat):
            if stat is None:
                log.warn("broker registration {id} was gone (new ZooKeeper session?): registering again",
                         id=self.broker_id)
                return self._register()
        d.addCallback(checked)
        d.addErrback(lambda f: log.warn("broker registration check failed: {error}",
                                        error=f.getErrorMessage()))
        return d

    def _session_changed(self, state):
        """A new ZooKeeper session: register again now (the periodic check is the safety net)."""
        if state == "expired-new-session" and self._running:
            self.check()
