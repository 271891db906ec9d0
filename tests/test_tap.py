"""The twistd plugins: a bad configuration stops start-up with a message naming the key."""

import os
import subprocess
import sys

from twisted.trial import unittest

from pulsar_twisted.testing.process import _TWISTD

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BadConfigurationTests(unittest.SynchronousTestCase):
    def run_twistd(self, plugin, text):
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        path = os.path.join(directory, "bad.conf")
        with open(path, "w") as f:
            f.write(text)
        env = dict(os.environ, PYTHONPATH=ROOT)
        return subprocess.run([sys.executable, "-c", _TWISTD, "-n", "--pidfile=", plugin, "--config", path],
                              cwd=directory, env=env, capture_output=True, text=True, timeout=60)

    def test_unknown_key(self):
        """An unknown key: exit status 1 and the key, file and line in the message."""
        result = self.run_twistd("pulsar-standalone", "brokerServicePort=6650\nbrokerServicePrt=1\n")
        self.assertEqual(result.returncode, 1)
        self.assertIn("bad.conf:2: unknown configuration key 'brokerServicePrt'", result.stderr + result.stdout)

    def test_malformed_value(self):
        result = self.run_twistd("pulsar-standalone", "maxMessageSize=five\n")
        self.assertEqual(result.returncode, 1)
        self.assertIn("maxMessageSize", result.stderr + result.stdout)

    def test_bookie_unknown_key(self):
        result = self.run_twistd("pulsar-bookie", "bookiePrt=3181\n")
        self.assertEqual(result.returncode, 1)
        self.assertIn("bookiePrt", result.stderr + result.stdout)

    def test_broker_needs_metadata_store(self):
        result = self.run_twistd("pulsar-broker", "clusterName=c\n")
        self.assertEqual(result.returncode, 1)
        self.assertIn("metadataStoreUrl", result.stderr + result.stdout)
