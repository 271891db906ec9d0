"""The daemons' trees (pulsar_twisted.daemons): what each is made of and in which order, the
settings their parts are built with, and a standalone started and stopped in this process."""

import os
import runpy

from twisted.internet import defer, endpoints, protocol, reactor, task
from twisted.logger import capturedLogs
from twisted.python.reflect import namedAny
from twisted.internet.task import Clock
from twisted.trial import unittest

from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.config import BookieConfig, BrokerConfig, StandaloneConfig
from pulsar_twisted.daemons import startup
from pulsar_twisted.daemons.bookie import BookieService
from pulsar_twisted.daemons.broker import BrokerClusterService
from pulsar_twisted.daemons.standalone import StandaloneService
from pulsar_twisted.daemons.tree import Step
from pulsar_twisted.mledger.config import ManagedLedgerConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

class NoGcPolicy:
    """Stands for ``GcFreezePolicy`` in tests: trial's collector is left as it is."""

    def __init__(self, clock):
        pass

    def start(self):
        pass

    def stop(self):
        pass



class FakeReactor(Clock):
    """What ``startup_failed`` uses of a reactor, and a clock (the stall detector's)."""

    running = True

    def __init__(self):
        super().__init__()
        self.stopped = False

    def stop(self):
        self.stopped = True


class DaemonTests(unittest.SynchronousTestCase):
    """The root every daemon is: ready when all started; a failed start-up exits 1."""

    def setUp(self):
        self.exits = []
        self.patch(startup.atexit, "register", lambda *args: self.exits.append(args))
        self.patch(startup, "GcFreezePolicy", NoGcPolicy)
        self.events = []

    def daemon(self, *steps):
        root = startup.Daemon("test-daemon", FakeReactor())
        self.addCleanup(root.lag_monitor.stop)
        for step in steps:
            step.setServiceParent(root)
        return root

    def step(self, name, start=None):
        return Step(name, start or (lambda: self.events.append(f"start {name}")),
                    lambda: self.events.append(f"stop {name}"))

    def test_stall_detector_starts_once_ready(self):
        """The reactor lag monitor ticks on the daemon's reactor from readiness on, not before."""
        gate = defer.Deferred()
        root = self.daemon(self.step("a", lambda: gate))
        root.startService()
        self.assertEqual(root.reactor.getDelayedCalls(), [])
        gate.callback(None)
        root.reactor.pump([0.01] * 5)
        self.assertEqual(root.lag_monitor.histogram.count, 5)
        root.stopService()
        self.assertEqual(root.reactor.getDelayedCalls(), [])

    def test_ready(self):
        """``ready`` fires with the root once the last child has started."""
        gate = defer.Deferred()
        root = self.daemon(self.step("a"), self.step("b", lambda: gate))
        root.startService()
        self.assertNoResult(root.ready)
        gate.callback(None)
        self.assertIs(self.successResultOf(root.ready), root)
        self.assertEqual((self.exits, root.reactor.stopped), ([], False))

    def test_failed_start_up_exits_1(self):
        """A child that cannot start: the started ones stop, the failure is logged once, the
        reactor stops and the process is to exit with status 1."""
        root = self.daemon(self.step("a"), self.step("b", lambda: defer.fail(ValueError("no"))),
                           self.step("c"))
        root.startService()
        self.assertEqual(self.events, ["start a", "stop a"])
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
        self.assertTrue(root.reactor.stopped)
        self.assertEqual(self.exits, [(os._exit, 1)])
        self.successResultOf(root.ready)      # consumed: observers see no second error

    def test_stop_during_start_up_is_not_a_failure(self):
        """SIGTERM while starting: what started stops, and the process does not exit 1."""
        root = self.daemon(self.step("a"), self.step("b", lambda: defer.Deferred()))
        root.startService()
        self.successResultOf(root.stopService())
        self.assertEqual(self.events, ["start a", "stop a"])
        self.assertEqual((self.exits, root.reactor.stopped), ([], False))
        self.assertIsNone(self.successResultOf(root.ready))


class ShutdownTimeoutTests(unittest.SynchronousTestCase):
    """brokerShutdownTimeoutMs bounds how long stopService waits for the tree."""

    def setUp(self):
        self.patch(startup, "GcFreezePolicy", NoGcPolicy)

    def daemon(self, timeout, stop):
        clock = task.Clock()
        clock.running = True
        root = startup.Daemon("test-daemon", clock, shutdown_timeout=timeout)
        Step("quick", lambda: None, lambda: None).setServiceParent(root)
        Step("stuck", lambda: None, stop).setServiceParent(root)
        root.startService()
        self.successResultOf(root.ready)
        return root, clock

    def test_gives_up_after_the_timeout(self):
        """A part that never stops: stopService fires after the timeout, naming what was left."""
        root, clock = self.daemon(2.0, lambda: defer.Deferred())
        with capturedLogs() as events:
            stopping = root.stopService()
            clock.advance(1.9)
            self.assertNoResult(stopping)
            clock.advance(0.1)
        self.successResultOf(stopping)
        [warning] = [e for e in events if "brokerShutdownTimeoutMs" in e.get("log_format", "")]
        self.assertEqual((warning["ms"], warning["pending"]), (2000, "stuck, quick"))

    def test_clean_stop_is_not_delayed(self):
        """A tree that stops at once is done at once, and leaves no timer behind."""
        root, clock = self.daemon(60.0, lambda: None)
        self.successResultOf(root.stopService())
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_daemons_take_the_config_key(self):
        self.assertEqual(StandaloneService(StandaloneConfig(brokerShutdownTimeoutMs=1500)).shutdown_timeout, 1.5)
        self.assertEqual(BrokerClusterService(BrokerConfig()).shutdown_timeout, 60.0)


class PluginTests(unittest.SynchronousTestCase):

    def test_plugins_name_the_daemon_modules(self):
        """Each twistd plugin file is one ServiceMaker naming a daemons module with Options and
        makeService."""
        expected = {"pulsar_standalone.py": ("pulsar-standalone", "pulsar_twisted.daemons.standalone"),
                    "pulsar_broker.py": ("pulsar-broker", "pulsar_twisted.daemons.broker"),
                    "pulsar_bookie.py": ("pulsar-bookie", "pulsar_twisted.daemons.bookie"),
                    "pulsar_proxy.py": ("pulsar-proxy", "pulsar_twisted.daemons.proxy"),
                    "pulsar_functions_worker.py": ("pulsar-functions-worker",
                                                   "pulsar_twisted.daemons.functions_worker")}
        directory = os.path.join(ROOT, "twisted", "plugins")
        self.assertEqual(sorted(f for f in os.listdir(directory) if f.endswith(".py")), sorted(expected))
        for filename, (tapname, module) in expected.items():
            [maker] = [v for k, v in runpy.run_path(os.path.join(directory, filename)).items()
                       if k.startswith("pulsar_")]
            self.assertEqual((maker.tapname, maker.module), (tapname, module))
            self.assertTrue(callable(namedAny(module).makeService))
            self.assertTrue(callable(namedAny(module).Options))


class TreeShapeTests(unittest.SynchronousTestCase):
    """The children of each root, in start order (the tree stops them in reverse)."""

    def names(self, root):
        return [child.name for child in root]

    def test_standalone(self):
        """The functions worker (functionsWorkerEnabled, on by default) starts after the listeners
        its instances connect to."""
        self.assertEqual(self.names(StandaloneService(StandaloneConfig(), reactor=object())), [
            "metadata store", "bookie", "ledger client", "offloaders", "managed ledgers", "broker", "admin", "web",
            "binary", "functions worker"])

    def test_standalone_without_functions_worker(self):
        """functionsWorkerEnabled=false: no worker in the tree."""
        config = StandaloneConfig(functionsWorkerEnabled=False)
        self.assertEqual(self.names(StandaloneService(config, reactor=object()))[-2:], ["web", "binary"])

    def test_standalone_worker_needs_credentials_under_authentication(self):
        """With authenticationEnabled the embedded worker is a client of its own broker: it takes
        brokerClientAuthentication*; without them it is left out and every functions call says why
        (503); a malformed plugin stops start-up."""
        from twisted.internet import defer

        from pulsar_twisted.client.auth import AuthenticationToken
        from pulsar_twisted.config import ConfigError
        from pulsar_twisted.web.functions import _handler
        auth = dict(authenticationEnabled=True, authenticationProviders=["token"])
        alone = StandaloneService(StandaloneConfig(**auth), reactor=object())
        self.assertNotIn("functions worker", self.names(alone))
        self.assertIn("brokerClientAuthenticationPlugin", alone.functions_disabled)
        handler = _handler(alone.functions_worker_source(), lambda worker, request: None)
        failure = self.failureResultOf(defer.ensureDeferred(handler(None)))
        self.assertEqual((failure.value.status, str(failure.value)), (503, alone.functions_disabled))

        with_token = StandaloneService(StandaloneConfig(
            brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
            brokerClientAuthenticationParameters="token:abc", **auth), reactor=object())
        self.assertEqual(self.names(with_token)[-1], "functions worker")
        self.assertIsInstance(with_token.worker_credentials, AuthenticationToken)
        self.assertEqual(with_token.worker_credentials.auth_data(), b"abc")
        with self.assertRaises(ConfigError):
            StandaloneService(StandaloneConfig(brokerClientAuthenticationPlugin="kerberos", **auth),
                              reactor=object())

    def test_standalone_with_tls(self):
        """The TLS listeners come after the web one and before the plain binary port."""
        config = StandaloneConfig(webServicePortTls=8443, brokerServicePortTls=6651)
        self.assertEqual(self.names(StandaloneService(config, reactor=object()))[-5:-1],
                         ["web", "web TLS", "binary TLS", "binary"])

    def test_functions_worker(self):
        """The store, the web service (503 until the worker runs), then the worker."""
        from pulsar_twisted.config import FunctionsWorkerConfig
        from pulsar_twisted.daemons.functions_worker import FunctionsWorkerDaemon
        root = FunctionsWorkerDaemon(FunctionsWorkerConfig(configurationMetadataStoreUrl="zk:h:1"),
                                     reactor=object())
        self.assertEqual(self.names(root), ["metadata store", "web", "functions worker"])
        self.assertEqual(root.worker_id, "localhost-6750")

    def test_functions_worker_needs_the_cluster_store(self):
        """No configurationMetadataStoreUrl, or one we cannot use: refused naming the key."""
        from pulsar_twisted.config import ConfigError, FunctionsWorkerConfig
        from pulsar_twisted.daemons.functions_worker import check_functions_worker
        for url in ("", "memory:local"):
            e = self.assertRaises(ConfigError, check_functions_worker,
                                  FunctionsWorkerConfig(configurationMetadataStoreUrl=url))
            self.assertIn("configurationMetadataStoreUrl", str(e))

    def test_cluster_broker(self):
        root = BrokerClusterService(BrokerConfig(metadataStoreUrl="zk:h:1"), reactor=object())
        self.assertEqual(self.names(root), [
            "metadata store", "bookie metadata store", "bookie client", "ledger client",
            "offloaders", "managed ledgers", "broker", "bundle ownership", "broker service", "admin",
            "web", "binary",
            "registration", "leader election", "load manager"])

    def test_bookie(self):
        self.assertEqual(self.names(BookieService(BookieConfig(), reactor=object())),
                         ["metadata store", "storage", "server"])
        self.assertEqual(self.names(BookieService(BookieConfig(autoRecoveryDaemonEnabled=True),
                                                  reactor=object()))[-1], "auto-recovery")


class FromConfigTests(unittest.SynchronousTestCase):

    def test_bookie_storage_same_for_both_daemons(self):
        """A cluster bookie and the standalone's bookie get the same storage settings from the
        same keys: a 16 MB write cache and a GC every 900 s by default."""
        bookie = BookieStorage.from_config(BookieConfig(ledgerDirectories=[self.mktemp()]), object())
        standalone = BookieStorage.from_config(StandaloneConfig(ledgerDirectories=[self.mktemp()]), object())
        for storage in (bookie, standalone):
            self.assertEqual((storage._cache_max, storage._gc_interval), (16 * 1024 * 1024, 900.0))
        configured = BookieStorage.from_config(
            BookieConfig(ledgerDirectories=[self.mktemp()], dbStorage_writeCacheMaxSizeMb=4,
                         gcWaitTime=0), object())
        self.assertEqual((configured._cache_max, configured._gc_interval), (4 * 1024 * 1024, 0.0))

    def test_managed_ledger_config(self):
        """The broker's managedLedger* keys, minutes as milliseconds, -1 retention as forever."""
        config = ManagedLedgerConfig.from_config(BrokerConfig(
            managedLedgerMaxLedgerRolloverTimeMinutes=2, defaultRetentionTimeInMinutes=-5,
            defaultRetentionSizeInMB=7, managedLedgerCacheSizeMB=3))
        self.assertEqual((config.ensemble_size, config.write_quorum, config.ack_quorum), (2, 2, 2))
        self.assertEqual((config.max_rollover_time_ms, config.retention_time_ms, config.retention_size_mb,
                          config.cache_size_bytes), (120_000, -1, 7, 3 * 1024 * 1024))


class StandaloneInProcessTests(unittest.TestCase):
    """A standalone tree on the real reactor and ephemeral ports: ready once the binary port
    accepts connections, and every part stopped again."""

    timeout = 60

    @defer.inlineCallbacks
    def test_start_and_stop(self):
        self.patch(startup, "GcFreezePolicy", NoGcPolicy)  # keep trial's GC as it is
        data = os.path.abspath(self.mktemp())
        config = StandaloneConfig(
            dataDirectory=data, journalDirectory=os.path.join(data, "journal"),
            ledgerDirectories=[os.path.join(data, "ledgers")], journalSyncData=False,
            bindAddress="127.0.0.1", webServicePort=0,
            brokerServiceEndpoint="tcp:0:interface=127.0.0.1",
            # Lookups answer brokerServicePort (6650), not the endpoint's ephemeral port: no
            # client (the functions worker is one) could use this broker.
            functionsWorkerEnabled=False)
        root = StandaloneService(config, reactor)
        root.startService()
        self.assertIs((yield root.ready), root)
        listeners = {child.name: child for child in root}
        port = listeners["binary"].port.getHost().port
        self.assertTrue(listeners["web"].port.getHost().port)
        connected = yield endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", port).connect(
            protocol.Factory.forProtocol(protocol.Protocol))
        connected.transport.loseConnection()
        yield root.stopService()
        self.assertFalse(any(child.running for child in root))
        self.assertIsNone(listeners["binary"].port)
        self.assertFalse(root.broker.running)
