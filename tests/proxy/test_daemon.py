"""twistd pulsar-proxy: its configuration (conf/proxy.conf, Pulsar's keys, refusals naming the
key), its service tree, and broker discovery from the brokers' registrations."""

import json
import os

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.config import ConfigError, ProxyConfig
from pulsar_twisted.daemons.proxy import ProxyDaemon, check_proxy
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import broker_path
from pulsar_twisted.proxy.brokers import NoBrokerAvailable, RegisteredBrokers, StaticBrokers
from pulsar_twisted.client.auth import broker_client_authentication as broker_client_auth

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ConfigTests(unittest.TestCase):
    def test_conf_file_has_pulsar_keys(self):
        """conf/proxy.conf loads into ProxyConfig with Pulsar's proxy.conf names and defaults."""
        config = ProxyConfig.from_file(os.path.join(ROOT, "conf", "proxy.conf"))
        self.assertEqual((config.servicePort, config.webServicePort), (6650, 8080))
        self.assertEqual(config.brokerProxyAllowedTargetPorts, "6650,6651")
        for key in ("metadataStoreUrl", "brokerServiceURL", "brokerServiceURLTLS", "brokerWebServiceURL",
                    "brokerWebServiceURLTLS", "servicePortTls", "webServicePortTls", "authenticationEnabled",
                    "authorizationEnabled", "superUserRoles", "forwardAuthorizationCredentials",
                    "brokerClientAuthenticationPlugin", "brokerClientAuthenticationParameters",
                    "tlsEnabledWithBroker", "maxConcurrentInboundConnections", "maxConcurrentLookupRequests",
                    "brokerProxyAllowedHostNames", "brokerProxyAllowedIPAddresses", "keepAliveIntervalSeconds"):
            self.assertTrue(hasattr(config, key), key)

    def test_refusals_name_the_key(self):
        cases = [
            ({}, "brokerServiceURL"),
            ({"metadataStoreUrl": "nonsense"}, "metadataStoreUrl"),
            ({"brokerServiceURL": "pulsar://b:6650", "brokerProxyAllowedTargetPorts": "x"},
             "brokerProxyAllowedTargetPorts"),
            ({"brokerServiceURL": "pulsar://b:6650", "authorizationEnabled": True}, "configurationMetadataStoreUrl"),
            ({"brokerServiceURL": "pulsar://b:6650", "tlsEnabledWithBroker": True}, "brokerServiceURLTLS"),
            ({"brokerServiceURL": "pulsar://b:6650", "brokerClientAuthenticationPlugin": "kerberos"},
             "brokerClientAuthenticationPlugin"),
            ({"brokerServiceURL": "pulsar://b:6650", "servicePortTls": 6651}, "tlsCertificateFilePath"),
        ]
        for settings, key in cases:
            e = self.assertRaises(ConfigError, check_proxy, ProxyConfig(**settings))
            self.assertIn(key, str(e), settings)

    def test_broker_client_auth_parameters(self):
        token = broker_client_auth(ProxyConfig(brokerClientAuthenticationPlugin="token",
                                               brokerClientAuthenticationParameters="token:abc"))
        self.assertEqual((token.auth_method_name, token.auth_data()), ("token", b"abc"))
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("from-file\n")
        token = broker_client_auth(ProxyConfig(
            brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
            brokerClientAuthenticationParameters="file://" + os.path.abspath(path)))
        self.assertEqual(token.auth_data(), b"from-file")
        basic = broker_client_auth(ProxyConfig(
            brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationBasic",
            brokerClientAuthenticationParameters='{"userId": "proxy", "password": "pw"}'))
        self.assertEqual(basic.auth_data(), b"proxy:pw")
        self.assertIsNone(broker_client_auth(ProxyConfig()))


class TreeTests(unittest.TestCase):
    def test_order(self):
        """Store, proxy, web listeners, TLS binary, then the plain binary port last (readiness)."""
        daemon = ProxyDaemon(ProxyConfig(brokerServiceURL="pulsar://b:6650", webServicePortTls=8443,
                                         servicePortTls=6651), reactor=object())
        self.assertEqual([s.name for s in daemon],
                         ["metadata store", "proxy", "web", "web TLS", "binary TLS", "binary"])


class DiscoveryTests(unittest.TestCase):
    def test_registered_brokers_round_robin_and_followed(self):
        clock = task.Clock()
        store = EmbeddedMetadataStore(None, clock)
        def register(name, tls=""):
            data = {"pulsarServiceUrl": f"pulsar://{name}:6650", "pulsarServiceUrlTls": tls,
                    "webServiceUrl": f"http://{name}:8080", "webServiceUrlTls": ""}
            self.successResultOf(store.put(broker_path(f"{name}:8080"), json.dumps(data).encode()))
        discovery = RegisteredBrokers(store, clock, tls=False, refresh_seconds=5)
        self.failureResultOf(discovery.service_url(), NoBrokerAvailable)
        register("b1")
        register("b2")
        urls = {self.successResultOf(discovery.service_url()) for _ in range(4)}
        self.assertEqual(urls, {"pulsar://b1:6650", "pulsar://b2:6650"})
        discovery.unreachable("pulsar://b1:6650")
        self.successResultOf(store.delete(broker_path("b1:8080")))
        self.assertEqual({self.successResultOf(discovery.service_url()) for _ in range(3)}, {"pulsar://b2:6650"})
        tls = RegisteredBrokers(store, clock, tls=True)
        self.failureResultOf(tls.service_url(), NoBrokerAvailable)       # b2 has no TLS port
        self.assertEqual(self.successResultOf(tls.web_url()), "http://b2:8080")   # admin falls back

    def test_static_brokers(self):
        discovery = StaticBrokers(ProxyConfig(brokerServiceURL="pulsar://a:6650,b:6650"), tls=False)
        self.assertEqual([self.successResultOf(discovery.service_url()) for _ in range(3)],
                         ["pulsar://a:6650", "pulsar://b:6650", "pulsar://a:6650"])
        self.failureResultOf(discovery.web_url(), NoBrokerAvailable)
