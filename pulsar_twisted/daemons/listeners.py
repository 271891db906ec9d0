"""
The broker's listeners, shared by the standalone and the cluster broker daemons: the admin/lookup
web site, the binary protocol factory and the endpoints they listen on (plain from
``webServicePort`` / ``brokerServicePort`` or ``brokerServiceEndpoint``; TLS from the ``*Tls``
ports with one context for both TLS listeners, as Pulsar has one TLS configuration per broker;
and one more port per ``bindAddresses`` entry, see ``broker/advertised.py``).

A mixin for a ``Daemon`` that has ``config``, ``reactor``, ``broker`` and ``admin`` once their
steps have started; its ``ListeningService`` children call these when they start.
"""

from twisted.internet import endpoints

from pulsar_twisted.broker.advertised import bind_addresses
from pulsar_twisted.broker.cnx import BrokerProtocolFactory
from pulsar_twisted.daemons.tree import ListeningService
from pulsar_twisted.security.endpoints import server_tls_context, tls_server_endpoint
from pulsar_twisted.web.metrics import ReactorLagCollector
from pulsar_twisted.web.site import make_site


class BrokerListeners:
    """Factories and endpoints of a broker's web and binary listeners."""

    _tls_context = None

    def listening_services(self) -> list:
        """The listeners in start order: web, web TLS and binary TLS when configured, then the
        plain binary port last (its opening is the readiness signal: a broker accepting plain
        connections also accepts TLS ones)."""
        config = self.config
        services = [ListeningService("web", self._web_endpoint, self._site)]
        if config.webServicePortTls:
            services.append(ListeningService(
                "web TLS", lambda: self._tls_endpoint(config.webServicePortTls), self._site))
        if config.brokerServicePortTls:
            services.append(ListeningService(
                "binary TLS", lambda: self._tls_endpoint(config.brokerServicePortTls),
                self._binary_factory))
        services += [self._bind_address_service(bind) for bind in bind_addresses(config)]
        services.append(ListeningService("binary", self._binary_endpoint, self._binary_factory))
        return services

    def metrics_collectors(self) -> list:
        """More collectors for the web site's /metrics (the standalone adds its bookie's)."""
        return []

    def _bind_address_service(self, bind):
        """A ``bindAddresses`` entry: binary ports serve lookups under its listener by default
        (Pulsar's connection-specific listener name); web ports serve the usual site."""
        tls = bind.scheme in ("pulsar+ssl", "https")
        if tls:
            def endpoint():
                if self._tls_context is None:
                    self._tls_context = server_tls_context(self.config)
                return endpoints.SSL4ServerEndpoint(self.reactor, bind.port, self._tls_context,
                                                    interface=bind.host)
        else:
            def endpoint():
                return endpoints.TCP4ServerEndpoint(self.reactor, bind.port, interface=bind.host)
        if bind.scheme in ("pulsar", "pulsar+ssl"):
            def factory():
                return BrokerProtocolFactory(self.broker, self.reactor, listener_name=bind.listener)
        else:
            factory = self._site
        return ListeningService(f"{bind.listener} {bind.scheme}://{bind.host}:{bind.port}",
                                endpoint, factory)

    def functions_worker_source(self):
        """The callable the /admin/v3/functions routes ask for the functions worker; None when
        this daemon runs none (the routes answer 503)."""
        return None

    def _site(self):
        collectors = list(self.metrics_collectors())
        monitor = getattr(self, "lag_monitor", None)
        if monitor is not None:   # the daemon's stall detector (daemons/startup.py)
            collectors.append(ReactorLagCollector(monitor, self.config.clusterName))
        source = self.functions_worker_source()
        extra = {} if source is None else {"functions_worker": source}
        return make_site(self.admin, self.broker, self.config, collectors, **extra)

    def _binary_factory(self):
        return BrokerProtocolFactory(self.broker, self.reactor)

    def _web_endpoint(self):
        return endpoints.serverFromString(
            self.reactor, f"tcp:{self.config.webServicePort}:interface={self.config.bindAddress}")

    def _tls_endpoint(self, port: int):
        if self._tls_context is None:
            self._tls_context = server_tls_context(self.config)
        return tls_server_endpoint(self.reactor, port, self.config, self._tls_context)

    def _binary_endpoint(self):
        config = self.config
        return endpoints.serverFromString(self.reactor, config.brokerServiceEndpoint or (
            f"tcp:{config.brokerServicePort}:interface={config.bindAddress}"))
