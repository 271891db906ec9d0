"""
``twistd -n pulsar-standalone [-c conf/standalone.conf]``: a whole Pulsar in one process.

The very pieces a cluster runs, as one ordered tree (``tree.py``), started in this order and
stopped in reverse:

1. the embedded metadata store under ``dataDirectory/metadata``;
2. one bookie (``BookieStorage.from_config``, as a cluster bookie's) and its registration;
3. the BookKeeper client over that bookie, in process;
4. the managed-ledger factory (``ManagedLedgerConfig.from_config``);
5. the ``BrokerService`` and the ``AdminService``;
6. the listeners: web (``webServicePort``), web TLS and binary TLS when configured, and the plain
   binary port (``brokerServicePort`` or ``brokerServiceEndpoint``) last, so that once it accepts
   connections every listener does;
7. with ``functionsWorkerEnabled`` (the default), the functions worker (``functions/worker.py``),
   which restarts the functions recorded on its ``public/functions`` topics, each instance a child
   process.
"""

import os

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.client import Agent

from pulsar_twisted.bookie.metrics import StorageCollector
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.advertised import check_listener_config
from pulsar_twisted.broker.registration import BrokerAddresses
from pulsar_twisted.broker.service import BrokerService
from pulsar_twisted.config import ConfigError, StandaloneConfig
from pulsar_twisted.daemons.gctune import limit_malloc_arenas
from pulsar_twisted.daemons.listeners import BrokerListeners
from pulsar_twisted.daemons.offloaders import start_offloaders
from pulsar_twisted.daemons.options import config_options
from pulsar_twisted.daemons.replication_client import use_replication_clients
from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import Step
from pulsar_twisted.client.auth import from_plugin
from pulsar_twisted.client.client import Client
from pulsar_twisted.client.http_lookup import AuthorizingAgent
from pulsar_twisted.functions.cleanup import SubscriptionCleaner
from pulsar_twisted.functions.credentials import instance_spec_fields
from pulsar_twisted.functions.membership import Coordinator
from pulsar_twisted.functions.metrics import FunctionsCollector
from pulsar_twisted.functions.runtime import ProcessLauncher
from pulsar_twisted.functions.worker import FunctionsWorker
from pulsar_twisted.ledger.bookies import LocalBookieClient
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.resources.bookies import register_bookie


def check_standalone(config) -> None:
    """What start-up would refuse, refused while twistd parses options (ConfigError naming the key)."""
    if config.metadataStoreUrl:
        origin = " (derived from the deprecated zookeeperServers)" if "metadataStoreUrl" in getattr(
            config, "derived", {}) else ""
        raise ConfigError(f"metadataStoreUrl{origin}: standalone runs on its embedded metadata store; "
                          "leave metadataStoreUrl and zookeeperServers empty (use pulsar-broker for a "
                          "cluster)")
    check_listener_config(config)


class StandaloneService(BrokerListeners, Daemon):
    """Metadata store + bookie + ledger client + managed ledgers + broker in one reactor (see the
    module docstring). The parts are attributes once their step has started."""

    log = Logger()

    def __init__(self, config: StandaloneConfig, reactor=None):
        super().__init__("pulsar-standalone", reactor, config.brokerShutdownTimeoutMs / 1000.0)
        self.config = config
        self.store = self.bookie = self.ledger_client = self.offloaders = self.ml_factory = None
        self.broker = self.admin = self.functions_worker = None
        self.bookie_id = f"{config.advertisedAddress}:3181"
        self.addresses = BrokerAddresses(config)
        self.broker_url = self.addresses.broker_url
        steps = [
            Step("metadata store", self._start_store, lambda: self.store.close()),
            Step("bookie", self._start_bookie, lambda: self.bookie.stop()),
            Step("ledger client", self._start_ledger_client),
            Step("offloaders", self._start_offloaders, lambda: self.offloaders.stopService()),
            Step("managed ledgers", self._start_managed_ledgers, lambda: self.ml_factory.shutdown()),
            Step("broker", self._start_broker, lambda: self.broker.stopService()),
            Step("admin", self._start_admin, lambda: self.admin.stopService()),
        ]
        steps += self.listening_services()
        #: Why the functions worker does not run although functionsWorkerEnabled (None: it runs).
        self.functions_disabled = None
        self.worker_credentials = None
        if config.functionsWorkerEnabled:
            self.functions_disabled = self._check_worker_credentials()
        if config.functionsWorkerEnabled and self.functions_disabled is None:
            # After the listeners: its instances connect to them at once.
            steps.append(Step("functions worker", self._start_functions, self._stop_functions))
        for step in steps:
            step.setServiceParent(self)

    def metrics_collectors(self) -> list:
        """The in-process bookie's storage and journal metrics on the broker's /metrics, as
        Pulsar's standalone shows its bookie's there, and the functions' (functions/metrics.py)."""
        return [StorageCollector(self.bookie),
                FunctionsCollector(lambda: self.functions_worker, self.config.clusterName)]

    # ---------------------------------------------------------------- steps
    def _start_store(self):
        check_standalone(self.config)
        data = self.config.dataDirectory
        os.makedirs(data, exist_ok=True)
        self.store = EmbeddedMetadataStore(os.path.join(data, "metadata"), self.reactor)
        return self.store.start()

    async def _start_bookie(self):
        self.bookie = BookieStorage.from_config(self.config, self.reactor)
        await self.bookie.start()
        await register_bookie(self.store, self.bookie_id)

    def _start_ledger_client(self):
        self.ledger_client = BookKeeperClient(
            self.store, LocalBookieClient({self.bookie_id: self.bookie}), self.reactor)
        return self.ledger_client.start()

    def _start_offloaders(self):
        self.offloaders = start_offloaders(self.config, self.reactor)

    def _start_managed_ledgers(self):
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.store, self.reactor,
                                               ManagedLedgerConfig.from_config(self.config),
                                               offloaders=self.offloaders)

    async def _start_broker(self):
        self.broker = BrokerService(self.config, self.ml_factory, self.store, self.reactor,
                                    self.broker_url, self.addresses.broker_url_tls)
        use_replication_clients(self.broker, self.config, self.reactor)
        await self.broker.start()
        self.broker.startService()

    def _start_admin(self):
        self.admin = AdminService(self.broker, self.store, self.config, self.reactor)
        self.admin.startService()

    def _bound_url(self, listener: str, scheme: str, configured: str) -> str:
        """``configured``, or with an ephemeral port (0, or a brokerServiceEndpoint) the one the
        listener got."""
        for child in self:
            port = getattr(child, "port", None)
            ephemeral = configured.endswith(":0") or (listener == "binary"
                                                      and self.config.brokerServiceEndpoint)
            if child.name == listener and port is not None and ephemeral:
                return f"{scheme}://{self.config.advertisedAddress}:{port.getHost().port}"
        return configured

    def _check_worker_credentials(self):
        """The embedded worker is a client of this broker and takes the broker's own client
        credentials (``brokerClientAuthentication*``), as Pulsar's embedded worker does. With
        authentication on and none configured it cannot work: it is left out, the reason logged
        here and answered (503) by every functions call. A malformed plugin stops start-up."""
        try:
            self.worker_credentials = from_plugin(self.config.brokerClientAuthenticationPlugin,
                                                  self.config.brokerClientAuthenticationParameters)
        except ValueError as e:
            raise ConfigError(f"brokerClientAuthenticationPlugin/Parameters: {e}")
        if self.config.authenticationEnabled and self.worker_credentials is None:
            reason = ("Function worker service is not running: authenticationEnabled=true needs "
                      "brokerClientAuthenticationPlugin/Parameters for the worker's own connections")
            self.log.warn("{reason}", reason=reason)
            return reason
        return None

    def _start_functions(self):
        broker_url = self._bound_url("binary", "pulsar", self.broker_url)
        credentials = self.worker_credentials
        client = Client(broker_url, self.reactor, authentication=credentials)
        agent = AuthorizingAgent(Agent(self.reactor), credentials)
        web = self._bound_url("web", "http", self.addresses.web_url)
        # Pulsar's defaults (failureCheckFreqMs=30000, rescheduleTimeoutMs=60000): workers
        # started beside this standalone join its worker cluster.
        coordinator = Coordinator(client, self.reactor, "persistent://public/functions/coordinate",
                                  "standalone", web, web, agent=agent)
        self.functions_worker = FunctionsWorker(
            self.store, self.reactor, ProcessLauncher(self.reactor), broker_url, web,
            os.path.join(self.config.dataDirectory, "functions"),
            cleaner=SubscriptionCleaner(self.reactor, web, agent=agent), client=client,
            coordinator=coordinator, admin_url=web, agent=agent,
            # Pulsar's embedded worker gives its instances the broker's client credentials.
            instance_credentials=instance_spec_fields(
                self.config.brokerClientAuthenticationPlugin,
                self.config.brokerClientAuthenticationParameters))
        self._functions_starting = defer.ensureDeferred(self._start_functions_worker())
        return self._functions_starting

    async def _start_functions_worker(self):
        """The first attempt is awaited (a started standalone's worker is normally ready); when it
        fails the standalone runs on, the worker retrying in the background (its API 503s)."""
        try:
            await self.functions_worker.start()
        except Exception as e:
            self.log.error("functions worker did not start: {error}; the standalone runs without "
                           "it while it retries", error=e)
            self._functions_retry = defer.ensureDeferred(
                self.functions_worker.start_until_started(failed_once=True))

    async def _stop_functions(self):
        await self.functions_worker.stop()
        await self.functions_worker.client.close()

    def functions_worker_source(self):
        def source():
            return self.functions_worker
        source.disabled = (not self.config.functionsWorkerEnabled) or self.functions_disabled
        return source

    def announce(self) -> None:
        config = self.config
        self.log.info("pulsar-standalone ready: {url}, http://{host}:{web} (data in {data})",
                      url=self.broker_url, host=config.advertisedAddress, web=config.webServicePort,
                      data=os.path.abspath(config.dataDirectory))


StandaloneOptions = config_options(StandaloneConfig, check_standalone)


def make_standalone_service(options) -> StandaloneService:
    limit_malloc_arenas()
    return StandaloneService(options.config)


#: The names twistd's ServiceMaker looks up in this module.
Options, makeService = StandaloneOptions, make_standalone_service
