"""``twistd pulsar-broker`` configuration checks (no processes, no ZooKeeper)."""

from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.daemons import broker as tap
from pulsar_twisted.daemons.broker import (
    BrokerClusterService, bookie_tls_options, bookkeeper_store_location, check_config,
    metadata_store_location)
from pulsar_twisted.config import BrokerConfig, ConfigError


class ClusterConfigTests(SynchronousTestCase):

    def test_metadata_store_url(self):
        """zk:host:port[/chroot] gives the hosts and root; anything else names the key."""
        config = BrokerConfig(metadataStoreUrl="zk:h1:2181,h2:2181/pulsar")
        self.assertEqual(metadata_store_location(config), ("h1:2181,h2:2181", "/pulsar"))
        e = self.assertRaises(ConfigError, metadata_store_location,
                              BrokerConfig(metadataStoreUrl="etcd:h:2379"))
        self.assertIn("metadataStoreUrl", str(e))

    def test_bookkeeper_metadata_service_uri(self):
        """Empty: the broker's store; zk+null://.../ledgers: its own; junk names the key."""
        self.assertIsNone(bookkeeper_store_location(BrokerConfig(metadataStoreUrl="zk:h:1")))
        config = BrokerConfig(metadataStoreUrl="zk:h:1",
                              bookkeeperMetadataServiceUri="zk+null://b:2181/bk/ledgers")
        self.assertEqual(bookkeeper_store_location(config), ("b:2181", "/bk"))
        config = BrokerConfig(metadataStoreUrl="zk:h:1", bookkeeperMetadataServiceUri="http://x")
        e = self.assertRaises(ConfigError, check_config, config)
        self.assertIn("bookkeeperMetadataServiceUri", str(e))

    def test_tls_keys(self):
        """No CA: plain TCP; client authentication without CA or without cert/key is refused."""
        self.assertIsNone(bookie_tls_options(BrokerConfig()))
        self.assertRaises(ConfigError, bookie_tls_options,
                          BrokerConfig(bookkeeperTLSClientAuthentication=True))
        self.assertRaises(ConfigError, bookie_tls_options, BrokerConfig(
            bookkeeperTLSTrustCertsFilePath="/nonexistent/ca.pem",
            bookkeeperTLSClientAuthentication=True))
        e = self.assertRaises(ConfigError, bookie_tls_options,
                              BrokerConfig(bookkeeperTLSTrustCertsFilePath="/nonexistent/ca.pem"))
        self.assertIn("bookkeeperTLS", str(e))

    def test_make_broker_service(self):
        """The twistd plugin builds the cluster service, or a usage error naming the key."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("metadataStoreUrl=zk:127.0.0.1:2181\n")
        options = tap.BrokerOptions()
        options.parseOptions(["-c", path])
        self.assertIsInstance(tap.make_broker_service(options), BrokerClusterService)
        with open(path, "w") as f:
            f.write("metadataStoreUrl=zk:nohostport\n")
        e = self.assertRaises(usage.UsageError, tap.BrokerOptions().parseOptions, ["-c", path])
        self.assertIn("metadataStoreUrl", str(e))
        with open(path, "w") as f:
            f.write("clusterName=x\n")
        self.assertRaises(usage.UsageError, tap.BrokerOptions().parseOptions, ["-c", path])
