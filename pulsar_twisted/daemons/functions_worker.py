"""
``twistd -n pulsar-functions-worker -c conf/functions_worker.conf``: the Pulsar Functions worker
beside a cluster (``functions/worker.py``), started in this order and stopped in reverse:

1. the cluster's metadata store (``configurationMetadataStoreUrl``, the brokers'
   ``metadataStoreUrl``), where function state lives and tenants/namespaces are checked;
2. the HTTP service on ``workerPort``: ``/admin/v3/functions/...`` (503 until step 3 is done) and
   ``/metrics`` with the functions' metrics;
3. the worker: it creates ``pulsarFunctionsNamespace`` if needed, reads the function records and
   assignments from its topics, joins the worker cluster (Failover subscription on
   ``clusterCoordinationTopicName``; the active consumer leads) and runs the instances assigned to
   it, which consume from and produce to ``pulsarServiceUrl`` and reach their state through step 2.

Any number of workers may share a cluster: the leader assigns instances round-robin over the
live ones and reassigns those of a worker gone for ``rescheduleTimeoutMs``.
"""

import os

from prometheus_client import CollectorRegistry
from twisted.internet import defer, endpoints
from twisted.web import server
from twisted.web.client import Agent

from pulsar_twisted.client.auth import from_plugin
from pulsar_twisted.client.client import Client
from pulsar_twisted.client.http_lookup import AuthorizingAgent
from pulsar_twisted.config import ConfigError, FunctionsWorkerConfig
from pulsar_twisted.daemons.options import config_options
from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import ListeningService, Step
from pulsar_twisted.functions.cleanup import SubscriptionCleaner
from pulsar_twisted.functions.membership import Coordinator
from pulsar_twisted.functions.metrics import FunctionsCollector
from pulsar_twisted.functions.runtime import ProcessLauncher
from pulsar_twisted.functions.worker import FunctionsWorker
from pulsar_twisted.metadata.urls import MetadataUrlError, parse_metadata_store_url
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.web.metrics import add_metrics_routes
from pulsar_twisted.web.routing import RouterResource
from pulsar_twisted.web.site import make_v3_router


def check_functions_worker(config) -> None:
    """What start-up would refuse (ConfigError naming the key)."""
    if not config.configurationMetadataStoreUrl:
        raise ConfigError("configurationMetadataStoreUrl: the worker keeps its functions in the "
                          "cluster's metadata store; set it to the brokers' metadataStoreUrl")
    try:
        parse_metadata_store_url(config.configurationMetadataStoreUrl)
    except MetadataUrlError as e:
        raise ConfigError(f"configurationMetadataStoreUrl: {e}")


class FunctionsWorkerDaemon(Daemon):
    """The worker's tree (module docstring); ``worker`` is the FunctionsWorker once started."""

    def __init__(self, config: FunctionsWorkerConfig, reactor=None):
        super().__init__("pulsar-functions-worker", reactor)
        self.config = config
        self.store = self.worker = None
        for step in (Step("metadata store", self._start_store, lambda: self.store.close()),
                     ListeningService("web", self._web_endpoint, self._site),
                     Step("functions worker", self._start_worker, self._stop_worker)):
            step.setServiceParent(self)

    @property
    def worker_id(self) -> str:
        return self.config.workerId or f"{self.config.workerHostname}-{self.config.workerPort}"

    async def _start_store(self):
        check_functions_worker(self.config)
        hosts, root = parse_metadata_store_url(self.config.configurationMetadataStoreUrl)
        self.store = ZooKeeperMetadataStore(
            hosts, self.reactor, root=root,
            session_timeout=self.config.zooKeeperSessionTimeoutMillis / 1000.0)
        await self.store.start()

    def _start_worker(self):
        config = self.config
        os.makedirs(config.downloadDirectory, exist_ok=True)
        url = f"http://{config.workerHostname}:{config.workerPort}"
        try:
            credentials = from_plugin(config.brokerClientAuthenticationPlugin,
                                      config.brokerClientAuthenticationParameters)
        except ValueError as e:
            raise ConfigError(f"brokerClientAuthenticationPlugin/Parameters: {e}")
        client = Client(config.pulsarServiceUrl, self.reactor, authentication=credentials)
        agent = AuthorizingAgent(Agent(self.reactor), credentials)
        namespace = config.pulsarFunctionsNamespace
        coordinator = Coordinator(
            client, self.reactor, f"persistent://{namespace}/{config.clusterCoordinationTopicName}",
            self.worker_id, url, config.pulsarWebServiceUrl,
            check_interval=config.failureCheckFreqMs / 1000.0,
            reschedule_timeout=config.rescheduleTimeoutMs / 1000.0, agent=agent)
        self.worker = FunctionsWorker(
            self.store, self.reactor, ProcessLauncher(self.reactor), config.pulsarServiceUrl, url,
            os.path.abspath(config.downloadDirectory), self.worker_id,
            cleaner=SubscriptionCleaner(self.reactor, config.pulsarWebServiceUrl, agent=agent),
            client=client, coordinator=coordinator, namespace=namespace,
            topics={"metadata": config.functionMetadataTopicName,
                    "assignments": config.functionAssignmentTopicName,
                    "coordinate": config.clusterCoordinationTopicName},
            admin_url=config.pulsarWebServiceUrl, agent=agent)
        return defer.ensureDeferred(self.worker.start())

    async def _stop_worker(self):
        await self.worker.stop()
        await self.worker.client.close()

    def _site(self):
        router = make_v3_router(lambda: self.worker)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(FunctionsCollector(lambda: self.worker, self.config.pulsarFunctionsCluster))
        add_metrics_routes(router, registry)
        site = server.Site(RouterResource(router))
        site.displayTracebacks = False
        return site

    def _web_endpoint(self):
        return endpoints.serverFromString(
            self.reactor, f"tcp:{self.config.workerPort}:interface={self.config.bindAddress}")

    def announce(self) -> None:
        self.log.info("pulsar-functions-worker {worker} ready: http://{host}:{port}, instances on "
                      "{url}", worker=self.worker_id, host=self.config.workerHostname,
                      port=self.config.workerPort, url=self.config.pulsarServiceUrl)


FunctionsWorkerOptions = config_options(FunctionsWorkerConfig, check_functions_worker)


def make_functions_worker(options) -> FunctionsWorkerDaemon:
    return FunctionsWorkerDaemon(options.config)


#: The names twistd's ServiceMaker looks up in this module.
Options, makeService = FunctionsWorkerOptions, make_functions_worker
