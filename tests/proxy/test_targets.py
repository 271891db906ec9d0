"""brokerProxyAllowedTargetPorts / HostNames / IPAddresses (proxy/targets.py)."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proxy.targets import AllowedTargets, TargetNotAllowed, parse_ports, split_target


class TargetTests(unittest.TestCase):
    def check(self, targets, target):
        return self.successResultOf(targets.check(target))

    def refused(self, targets, target):
        return str(self.failureResultOf(targets.check(target), TargetNotAllowed).value)

    def test_pulsar_defaults(self):
        """Ports 6650 and 6651 on any host."""
        targets = AllowedTargets("6650,6651", "*", "*")
        self.assertEqual(self.check(targets, "broker-1.example:6651"), ("broker-1.example", 6651))
        self.assertIn("brokerProxyAllowedTargetPorts", self.refused(targets, "broker-1.example:22"))

    def test_ranges_and_star(self):
        self.assertEqual(parse_ports("6650, 7000-7002"), [(6650, 6650), (7000, 7002)])
        self.assertIsNone(parse_ports("*"))
        targets = AllowedTargets("7000-7002", "*", "*")
        self.check(targets, "h:7001")
        self.refused(targets, "h:7003")

    def test_host_patterns(self):
        targets = AllowedTargets("*", "*.brokers.local,proxy-target", "*")
        self.check(targets, "b1.brokers.local:6650")
        self.check(targets, "PROXY-TARGET:6650")
        self.assertIn("brokerProxyAllowedHostNames", self.refused(targets, "evil.com:6650"))

    def test_addresses_and_resolution(self):
        """IP literals are checked against the CIDR blocks; names are resolved first."""
        resolved = {"inside": "10.1.2.3", "outside": "8.8.8.8"}
        targets = AllowedTargets("*", "*", "10.0.0.0/8,127.0.0.1",
                                 resolve=lambda host: defer.succeed(resolved[host]))
        self.check(targets, "10.9.9.9:6650")
        self.check(targets, "127.0.0.1:6650")
        self.check(targets, "inside:6650")
        self.assertIn("brokerProxyAllowedIPAddresses", self.refused(targets, "outside:6650"))
        self.refused(targets, "192.168.0.1:6650")

    def test_malformed_target(self):
        self.refused(AllowedTargets("*", "*", "*"), "no-port")
        self.assertEqual(split_target("pulsar://h:6650/"), ("h", 6650))
        self.assertEqual(split_target("[::1]:6650"), ("::1", 6650))
