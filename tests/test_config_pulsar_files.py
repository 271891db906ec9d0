"""
A Pulsar user's own configuration files start unchanged (issue 13, item 9): Pulsar's
standalone.conf, broker.conf and bookkeeper.conf (tests/fixtures/, taken from Pulsar's repository)
are accepted; the real keys we do not implement are named once in a start-up warning (fatal with
strictConfig=true); a key that is neither Pulsar's nor BookKeeper's is refused with the closest key.
"""

import base64
import configparser
import fnmatch
import os

from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial import unittest

from pulsar_twisted import config as config_module
from pulsar_twisted.config import (
    BookieConfig, BrokerConfig, ConfigError, ProxyConfig, StandaloneConfig, foreign_keys, is_foreign_key)
from pulsar_twisted.daemons.bookie import metadata_service_location
from pulsar_twisted.daemons import startup
from pulsar_twisted.daemons.broker import check_broker, session_timeout_millis
from pulsar_twisted.daemons.standalone import check_standalone
from pulsar_twisted.security.auth import AuthenticationService
from pulsar_twisted.security.endpoints import server_tls_context
from pulsar_twisted.testing.certs import TestPKI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

class NoGcPolicy:
    """Stands for ``GcFreezePolicy`` in tests: trial's collector is left as it is."""

    def __init__(self, clock):
        pass

    def start(self):
        pass

    def stop(self):
        pass



def fixture_text(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def fixture_keys(name: str) -> list:
    """The keys a fixture sets (commented-out keys excluded), in file order."""
    return [line.partition("=")[0].strip() for line in fixture_text(name).splitlines()
            if "=" in line and not line.lstrip().startswith("#")]


class PulsarFilesStartTests(unittest.SynchronousTestCase):
    def test_standalone_conf_accepted(self):
        """Pulsar's standalone.conf loads and passes the standalone's start-up checks; the keys
        we implement take the file's values."""
        config = StandaloneConfig.from_file(os.path.join(FIXTURES, "pulsar-standalone.conf"))
        check_standalone(config)
        self.assertEqual(config.schemaCompatibilityStrategy, "FULL")
        self.assertEqual(config.gcWaitTime, 300000)
        self.assertFalse(config.journalSyncData)
        self.assertTrue(config.brokerDeleteInactiveTopicsEnabled)
        self.assertIn("numIOThreads", config.unimplemented_keys())
        self.assertIn("ledgerStorageClass", config.unimplemented_keys())

    def test_tls_and_token_auth_standalone(self):
        """Pulsar's standalone.conf with the settings a TLS + token-auth deployment changes (as
        Pulsar's security docs write them) starts: the TLS context and the token provider build."""
        pki = TestPKI(self.mktemp())
        server = pki.issue("server", hosts=["127.0.0.1", "localhost"])
        secret = base64.b64encode(b"k" * 32).decode()
        text = fixture_text("pulsar-standalone.conf") + "\n".join([
            "brokerServicePortTls=6651", "webServicePortTls=8443",
            f"tlsCertificateFilePath={server.cert}", f"tlsKeyFilePath={server.key}",
            f"tlsTrustCertsFilePath={pki.ca_cert}", "tlsProtocols=TLSv1.3,TLSv1.2",
            "authenticationEnabled=true", "authorizationEnabled=true",
            "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
            f"tokenSecretKey=data:;base64,{secret}", "superUserRoles=admin,proxy",
            "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "brokerClientAuthenticationParameters=token:abc", "brokerClientTlsEnabled=true",
            "brokerClientTrustCertsFilePath=" + pki.ca_cert, "",
        ])
        config = StandaloneConfig()
        config.update_from_text(text, "standalone.conf")
        check_standalone(config)
        self.assertEqual((config.brokerServicePortTls, config.superUserRoles), (6651, ["admin", "proxy"]))
        self.assertIsNotNone(server_tls_context(config))
        AuthenticationService(config, Clock())
        # The geo-replicators' keys (broker/replication.py) are read, not merely tolerated.
        self.assertTrue(config.brokerClientTlsEnabled)
        self.assertEqual(config.brokerClientTrustCertsFilePath, pki.ca_cert)
        self.assertNotIn("brokerClientTlsEnabled", config.unimplemented_keys())

    def test_empty_value_is_the_default(self):
        """``key=`` (how Pulsar's files leave most keys) means the default, as in Pulsar."""
        config = StandaloneConfig.from_file(os.path.join(FIXTURES, "pulsar-standalone.conf"))
        self.assertEqual(config.advertisedAddress, "localhost")
        self.assertEqual(config.tokenAuthClaim, "sub")
        self.assertEqual(config.ledgerDirectories, StandaloneConfig().ledgerDirectories)

    def test_broker_conf_accepted(self):
        """Pulsar's broker.conf, with the two keys a cluster needs filled in, passes the broker's
        start-up checks; the deprecated zooKeeperSessionTimeoutMillis=-1 falls back to
        metadataStoreSessionTimeoutMillis as in Pulsar."""
        text = fixture_text("pulsar-broker.conf")
        text += "\nmetadataStoreUrl=zk:127.0.0.1:2181\nclusterName=c1\n"
        config = BrokerConfig()
        config.update_from_text(text, "broker.conf")
        check_broker(config)
        self.assertEqual(config.clusterName, "c1")
        self.assertEqual(session_timeout_millis(config), 30000)
        self.assertEqual(config.managedLedgerDefaultEnsembleSize, 2)
        self.assertIn("loadManagerClassName", config.unimplemented_keys())
        # The load manager's keys are ours now (issue 15), read from Pulsar's file as they are.
        self.assertNotIn("loadBalancerEnabled", config.unimplemented_keys())
        self.assertEqual(config.loadBalancerBrokerThresholdShedderPercentage, 10)

    def test_bookkeeper_conf_accepted(self):
        """Pulsar's bookkeeper.conf loads into the bookie's configuration."""
        config = BookieConfig.from_file(os.path.join(FIXTURES, "pulsar-bookkeeper.conf"))
        self.assertEqual(config.journalDirectory, "data/bookkeeper/journal")
        self.assertEqual(config.httpServerPort, 8000)
        self.assertIn("journalFormatVersionToWrite", config.unimplemented_keys())

    def test_every_fixture_key_is_known(self):
        """Each key the fixtures set is ours or in the shipped Pulsar/BookKeeper lists."""
        for name, cls in [("pulsar-standalone.conf", StandaloneConfig),
                          ("pulsar-broker.conf", BrokerConfig),
                          ("pulsar-bookkeeper.conf", BookieConfig)]:
            ours = {key.name for key in cls.KEYS} | set(cls.ALIASES)
            for key in fixture_keys(name):
                self.assertTrue(key in ours or is_foreign_key(key), f"{name}: {key}")

    def test_alias_of_pulsar_name(self):
        """Pulsar's isSchemaValidationEnforced sets the key we hold as schemaValidationEnforced."""
        config = BrokerConfig()
        config.update_from_text("isSchemaValidationEnforced=true\n")
        self.assertTrue(config.schemaValidationEnforced)
        self.assertEqual(config.unimplemented_keys(), [])

    def test_pass_through_prefixes(self):
        """bookkeeper_* and brokerClient_* (Pulsar's pass-through prefixes) are real keys."""
        config = StandaloneConfig()
        config.update_from_text("bookkeeper_opportunisticStriping=true\nbrokerClient_foo=1\n")
        self.assertEqual(config.unimplemented_keys(),
                         ["bookkeeper_opportunisticStriping", "brokerClient_foo"])


class DeprecatedFallbackTests(unittest.SynchronousTestCase):
    """Deprecated keys Pulsar's and BookKeeper's own files still rely on stand in for the new key
    when it is empty, as Pulsar and BookKeeper derive it."""

    def test_bookkeeper_conf_zk_servers(self):
        """Pulsar's bookkeeper.conf (metadataServiceUri empty, zkServers=localhost:2181,
        zkLedgersRootPath=/ledgers) gets BookKeeper's derived
        metadataServiceUri=zk+hierarchical://localhost:2181/ledgers; nothing is left unimplemented
        about it, and the bookie's metadata location (with its auto-recovery) follows."""
        config = BookieConfig.from_file(os.path.join(FIXTURES, "pulsar-bookkeeper.conf"))
        self.assertTrue(config.autoRecoveryDaemonEnabled)
        self.assertEqual(config.metadataServiceUri, "zk+hierarchical://localhost:2181/ledgers")
        self.assertEqual(metadata_service_location(config), ("localhost:2181", "/"))
        for name in ("zkServers", "zkLedgersRootPath", "metadataServiceUri"):
            self.assertNotIn(name, config.unimplemented_keys())

    def test_zk_servers_list_and_root(self):
        """Several servers become ';'-separated in the URI; a chrooted ledgers root names the store's
        root."""
        config = BookieConfig()
        config.update_from_text("zkServers=h1:2181,h2:2181\nzkLedgersRootPath=/pulsar/ledgers\n")
        self.assertEqual(config.metadataServiceUri, "zk+hierarchical://h1:2181;h2:2181/pulsar/ledgers")
        self.assertEqual(metadata_service_location(config), ("h1:2181,h2:2181", "/pulsar"))

    def test_metadata_service_uri_wins(self):
        """A file that sets metadataServiceUri keeps it, before or after zkServers."""
        for text in ("metadataServiceUri=zk+null://a:1/ledgers\nzkServers=b:2\n",
                     "zkServers=b:2\nmetadataServiceUri=zk+null://a:1/ledgers\n"):
            config = BookieConfig()
            config.update_from_text(text)
            self.assertEqual(config.metadataServiceUri, "zk+null://a:1/ledgers")
            self.assertEqual(config.derived, {})

    def test_nothing_to_derive(self):
        """Empty deprecated keys (our own conf files) leave the new keys empty."""
        config = BookieConfig.from_file(os.path.join(ROOT, "conf", "bookkeeper.conf"))
        self.assertEqual(config.metadataServiceUri, "")
        config = BrokerConfig.from_file(os.path.join(FIXTURES, "pulsar-broker.conf"))
        self.assertEqual(config.metadataStoreUrl, "")

    def test_broker_zookeeper_servers(self):
        """Pulsar's ServiceConfiguration: an empty metadataStoreUrl falls back to
        zk:<zookeeperServers>; the broker's start-up checks then pass on broker.conf."""
        text = fixture_text("pulsar-broker.conf") + "\nzookeeperServers=zk1:2181,zk2:2181/c\nclusterName=c1\n"
        config = BrokerConfig()
        config.update_from_text(text, "broker.conf")
        self.assertEqual(config.metadataStoreUrl, "zk:zk1:2181,zk2:2181/c")
        check_broker(config)
        self.assertNotIn("zookeeperServers", config.unimplemented_keys())

    def test_standalone_refuses_derived_store(self):
        """The standalone runs on its embedded store: zookeeperServers is refused, naming it."""
        config = StandaloneConfig()
        config.update_from_text("zookeeperServers=zk1:2181\n")
        e = self.assertRaises(ConfigError, check_standalone, config)
        self.assertIn("zookeeperServers", str(e))

    def test_proxy_deprecated_stores(self):
        """The proxy: zookeeperServers -> metadataStoreUrl, configurationStoreServers ->
        configurationMetadataStoreUrl (each only when the new key is empty)."""
        config = ProxyConfig()
        config.update_from_text("zookeeperServers=a:1\nconfigurationStoreServers=b:2\n")
        self.assertEqual((config.metadataStoreUrl, config.configurationMetadataStoreUrl), ("zk:a:1", "zk:b:2"))
        config = ProxyConfig()
        config.update_from_text("zookeeperServers=a:1\nmetadataStoreUrl=zk:c:3\n")
        self.assertEqual((config.metadataStoreUrl, config.configurationMetadataStoreUrl), ("zk:c:3", ""))


class UnimplementedWarningTests(unittest.SynchronousTestCase):
    def test_listed_once(self):
        """The warning comes once, naming each unimplemented key once, even when the file sets a
        key twice and the warning is asked for again."""
        config = StandaloneConfig()
        config.update_from_text(fixture_text("pulsar-standalone.conf") + "\nnumIOThreads=4\n")
        with capturedLogs() as events:
            config.warn_unimplemented(config_module_logger())
            config.warn_unimplemented(config_module_logger())
        warnings = [e for e in events if "not implemented" in e["log_format"]]
        self.assertEqual(len(warnings), 1)
        listed = warnings[0]["keys"].split(", ")
        self.assertEqual(len(listed), len(set(listed)))
        self.assertEqual(listed.count("numIOThreads"), 1)
        self.assertEqual(set(listed), set(config.unimplemented_keys()))
        self.assertEqual(warnings[0]["count"], len(listed))
        self.assertNotIn("brokerServicePort", listed)

    def test_daemon_start_warns(self):
        """A daemon's start-up logs the warning for the configuration it runs."""
        self.patch(startup, "GcFreezePolicy", NoGcPolicy)
        config = StandaloneConfig()
        config.update_from_text("numIOThreads=4\n")
        daemon = startup.Daemon("test-daemon", reactor=Clock())
        daemon.config = config
        with capturedLogs() as events:
            daemon.startService()
        # The start runs the reactor-lag monitor (its watchdog thread included): stop it again.
        self.addCleanup(daemon.stopService)
        warnings = [e for e in events if "not implemented" in e.get("log_format", "")]
        self.assertEqual([e["keys"] for e in warnings], ["numIOThreads"])
        self.assertTrue(daemon.ready.called)

    def test_nothing_to_say(self):
        """Our own generated files give no warning."""
        config = StandaloneConfig.from_file(os.path.join(ROOT, "conf", "standalone.conf"))
        with capturedLogs() as events:
            config.warn_unimplemented(config_module_logger())
        self.assertEqual(list(events), [])

    def test_java_class_only_keys_warn(self):
        """Keys that only Pulsar's ServiceConfiguration class defines (no shipped .conf file shows
        them; 2.10's and 4.x's) are real keys: a broker file setting them starts, naming them in the
        warning."""
        only_in_class = {"kinitCommand": "/usr/bin/kinit", "streamingDispatch": "false",
                         "managedLedgerInfoCompressionType": "NONE",
                         # 4.x: PIP-379's switch back to the classic Key_Shared dispatcher.
                         "subscriptionKeySharedUseClassicPersistentImplementation": "false"}
        config = BrokerConfig()
        config.update_from_text("".join(f"{k}={v}\n" for k, v in only_in_class.items()))
        with capturedLogs() as events:
            config.warn_unimplemented(config_module_logger())
        warnings = [e for e in events if "not implemented" in e["log_format"]]
        self.assertEqual(len(warnings), 1)
        self.assertEqual(set(warnings[0]["keys"].split(", ")), set(only_in_class))
        e = self.assertRaises(ConfigError, BrokerConfig().update_from_text,
                              "strictConfig=true\nkinitCommand=/usr/bin/kinit\n")
        self.assertIn("kinitCommand", str(e))

    def test_proxy_java_class_only_keys_warn(self):
        """Likewise for the proxy: keys of Pulsar's ProxyConfiguration class missing from
        proxy.conf are accepted with the warning."""
        config = ProxyConfig()
        config.update_from_text("checkActiveBrokers=false\nhttpProxyTimeout=300000\n")
        self.assertEqual(set(config.unimplemented_keys()), {"checkActiveBrokers", "httpProxyTimeout"})

    def test_proxy_reverse_proxy_rules_accepted(self):
        """proxy.conf's per-rule reverse-proxy keys (httpReverseProxy.<name>.path / .proxyTo) are
        Pulsar's, under a prefix: accepted with the warning, not refused as typos."""
        config = ProxyConfig()
        config.update_from_text("httpReverseProxy.foo.path=/foo\nhttpReverseProxy.foo.proxyTo=http://x:8080/\n")
        self.assertEqual(set(config.unimplemented_keys()),
                         {"httpReverseProxy.foo.path", "httpReverseProxy.foo.proxyTo"})


def config_module_logger():
    from twisted.logger import Logger
    return Logger(namespace="pulsar_twisted.config")


class TypoTests(unittest.SynchronousTestCase):
    def test_typo_refused_with_suggestion(self):
        """A key that is neither Pulsar's nor BookKeeper's stops start-up, naming the line, the
        key and the closest known key."""
        text = fixture_text("pulsar-standalone.conf") + "brokerServicePrt=6651\n"
        line = len(text.splitlines())
        e = self.assertRaises(ConfigError, StandaloneConfig().update_from_text, text, "s.conf")
        self.assertIn(f"s.conf:{line}", str(e))
        self.assertIn("'brokerServicePrt'", str(e))
        self.assertIn("did you mean 'brokerServicePort'", str(e))

    def test_typo_of_unimplemented_key(self):
        """The suggestion may be a Pulsar key we do not implement."""
        e = self.assertRaises(ConfigError, BrokerConfig().update_from_text,
                              "managedLedgerOffloadDrver=aws-s3\n")
        self.assertIn("did you mean 'managedLedgerOffloadDriver'", str(e))

    def test_bookie_typo(self):
        """The bookie's file is checked the same way."""
        e = self.assertRaises(ConfigError, BookieConfig().update_from_text, "journalDirectry=/j\n")
        self.assertIn("did you mean 'journalDirectory'", str(e))


class StrictConfigTests(unittest.SynchronousTestCase):
    def test_strict_refuses_unimplemented(self):
        """strictConfig=true (wherever it is in the file) makes the unimplemented keys fatal."""
        text = "strictConfig=true\n" + fixture_text("pulsar-standalone.conf")
        e = self.assertRaises(ConfigError, StandaloneConfig().update_from_text, text, "s.conf")
        self.assertIn("strictConfig=true", str(e))
        self.assertIn("numIOThreads (s.conf:", str(e))

    def test_strict_at_the_end(self):
        """The key may come after the keys it refuses."""
        text = fixture_text("pulsar-broker.conf") + "\nstrictConfig=true\n"
        e = self.assertRaises(ConfigError, BrokerConfig().update_from_text, text)
        self.assertIn("loadManagerClassName", str(e))

    def test_strict_accepts_our_keys(self):
        """With only implemented keys, strictConfig=true starts."""
        config = StandaloneConfig()
        config.update_from_text("strictConfig=true\nbrokerServicePort=7000\n")
        self.assertEqual(config.brokerServicePort, 7000)


class KeyListDataTests(unittest.SynchronousTestCase):
    def test_lists_name_their_source(self):
        """The shipped key lists say which Pulsar/BookKeeper files and versions they come from."""
        for name in ("pulsar_keys.txt", "pulsar_proxy_keys.txt", "bookkeeper_keys.txt"):
            with open(os.path.join(ROOT, "pulsar_twisted", "data", name)) as f:
                header = f.read(600)
            self.assertIn("commit", header)
            self.assertIn("conf/", header)
        self.assertIn("advertisedListeners", foreign_keys())
        self.assertIn("journalFormatVersionToWrite", foreign_keys())
        self.assertIn("brokerProxyAllowedTargetPorts", foreign_keys())

    def test_lists_ship_as_package_data(self):
        """setup.cfg's package_data covers the key lists, so an installed package has them."""
        parser = configparser.ConfigParser()
        parser.read(os.path.join(ROOT, "setup.cfg"))
        patterns = parser["options.package_data"]["pulsar_twisted"].split()
        data = os.path.join(ROOT, "pulsar_twisted", "data")
        for name in os.listdir(data):
            self.assertTrue(any(fnmatch.fnmatch(f"data/{name}", p) for p in patterns), name)
        self.assertTrue(os.path.dirname(config_module.__file__).endswith("pulsar_twisted"))
