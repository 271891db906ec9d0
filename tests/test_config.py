"""Configuration: Pulsar key names, errors naming the key, conf files equal to the classes."""

import os

from twisted.trial import unittest

from pulsar_twisted.config import BrokerConfig, ConfigError, StandaloneConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ConfigTests(unittest.SynchronousTestCase):
    def test_pulsar_defaults(self):
        """The defaults a Pulsar user expects."""
        config = StandaloneConfig()
        self.assertEqual(config.brokerServicePort, 6650)
        self.assertEqual(config.webServicePort, 8080)
        self.assertEqual(config.maxMessageSize, 5242880)
        self.assertTrue(config.allowAutoTopicCreation)
        self.assertEqual(config.clusterName, "standalone")
        self.assertEqual(BrokerConfig().managedLedgerDefaultEnsembleSize, 2)

    def test_values_parsed(self):
        config = StandaloneConfig()
        config.update_from_text("brokerServicePort=7000\n# comment\n\nallowAutoTopicCreation = false\n"
                                "ledgerDirectories=a, b\n")
        self.assertEqual(config.brokerServicePort, 7000)
        self.assertFalse(config.allowAutoTopicCreation)
        self.assertEqual(config.ledgerDirectories, ["a", "b"])

    def test_unknown_key_named(self):
        e = self.assertRaises(ConfigError, StandaloneConfig().update_from_text, "brokerServicePrt=1\n", "f.conf")
        self.assertIn("brokerServicePrt", str(e))
        self.assertIn("f.conf:1", str(e))

    def test_bad_value_named(self):
        e = self.assertRaises(ConfigError, StandaloneConfig().update_from_text, "x=1\n".replace("x", "maxMessageSize") + "brokerServicePort=abc")
        self.assertIn("brokerServicePort", str(e))

    def test_malformed_line(self):
        e = self.assertRaises(ConfigError, StandaloneConfig().update_from_text, "just words\n")
        self.assertIn("malformed", str(e))

    def test_missing_file(self):
        self.assertRaises(ConfigError, StandaloneConfig.from_file, "/nonexistent/standalone.conf")

    def test_conf_files_match_classes(self):
        """conf/*.conf are what scripts/gen_conf.py writes from the classes (no drift)."""
        import importlib.util
        spec = importlib.util.spec_from_file_location("gen_conf", os.path.join(ROOT, "scripts", "gen_conf.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, text in module.render_all().items():
            with open(os.path.join(ROOT, "conf", name)) as f:
                self.assertEqual(f.read(), text, f"conf/{name} is stale: run scripts/gen_conf.py")

    def test_conf_files_load(self):
        """Each shipped file loads into its class with the class's defaults."""
        config = StandaloneConfig.from_file(os.path.join(ROOT, "conf", "standalone.conf"))
        for key in StandaloneConfig.keys():
            self.assertEqual(getattr(config, key.name), StandaloneConfig().default_of(key), key.name)
        BrokerConfig.from_file(os.path.join(ROOT, "conf", "broker.conf"))


class TieredStorageKeyTests(unittest.SynchronousTestCase):
    def test_defaults_in_both_daemons(self):
        """The offload keys have Pulsar's defaults in the broker and the standalone configuration."""
        for config in (BrokerConfig(), StandaloneConfig()):
            self.assertEqual(config.managedLedgerOffloadDriver, "")
            self.assertEqual(config.managedLedgerOffloadMaxThreads, 2)
            self.assertEqual(config.managedLedgerOffloadThresholdInBytes, -1)
            self.assertEqual(config.managedLedgerOffloadThresholdInSeconds, -1)
            self.assertEqual(config.managedLedgerOffloadDeletionLagMs, 14400000)
            self.assertEqual(config.managedLedgerDataReadPriority, "tiered-storage-first")
            self.assertEqual(config.s3ManagedLedgerOffloadMaxBlockSizeInBytes, 64 * 1024 * 1024)
            self.assertEqual(config.s3ManagedLedgerOffloadReadBufferSizeInBytes, 1024 * 1024)
            self.assertEqual(config.fileSystemURI, "")
            self.assertFalse(config.triggerOffloadOnTopicLoad)

    def test_bad_read_priority_named(self):
        """A read priority Pulsar does not know stops start-up, naming the key."""
        e = self.assertRaises(ConfigError, BrokerConfig().update_from_text,
                              "managedLedgerDataReadPriority=tiered-first\n", "b.conf")
        self.assertIn("managedLedgerDataReadPriority", str(e))
        self.assertIn("b.conf:1", str(e))

    def test_drivers(self):
        """Our drivers in any case; Pulsar's other drivers and unknown names refused at start-up."""
        config = BrokerConfig()
        config.update_from_text("managedLedgerOffloadDriver=AWS-S3\n")
        self.assertEqual(config.managedLedgerOffloadDriver, "AWS-S3")
        for bad in ("google-cloud-storage", "hdfs"):
            e = self.assertRaises(ConfigError, BrokerConfig().update_from_text,
                                  f"managedLedgerOffloadDriver={bad}\n")
            self.assertIn("managedLedgerOffloadDriver", str(e))

    def test_service_configuration_name_of_size_threshold(self):
        """Pulsar's managedLedgerOffloadAutoTriggerSizeThresholdBytes sets the size threshold."""
        config = StandaloneConfig()
        config.update_from_text("managedLedgerOffloadAutoTriggerSizeThresholdBytes=1000\n")
        self.assertEqual(config.managedLedgerOffloadThresholdInBytes, 1000)
        self.assertEqual(config.unimplemented_keys(), [])
