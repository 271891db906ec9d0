"""
TLS listeners of a cluster broker (``pulsar_twisted.daemons.broker``): ``brokerServicePortTls`` /
``webServicePortTls`` opened, their URLs in the broker's registration and bundle ownership nodes,
and the official client producing and consuming over ``pulsar+ssl://`` through Connect and Redirect
answers. The unit tests need nothing; the process test needs ZooKeeper and the official client.
"""

import json
import logging
import ssl
import tempfile
import urllib.request
import uuid

from twisted.internet import task
from twisted.trial.unittest import SynchronousTestCase, TestCase

from pulsar_twisted.daemons.broker import BrokerClusterService, check_config
from pulsar_twisted.broker.ownership import BundleOwnership, bundle_for
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.config import BrokerConfig, ConfigError
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.resources.policies import even_boundaries
from pulsar_twisted.testing.certs import TestPKI
from pulsar_twisted.testing.cluster import (
    HOST, Cluster, ZooKeeperServer, ZooKeeperUnavailable, free_port, wait_for)

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None


class TlsUrlTests(SynchronousTestCase):
    """The URLs a cluster broker advertises, without starting it."""

    def test_urls_with_tls_ports(self):
        """TLS ports give pulsar+ssl:// and https:// URLs in the registration and ownership data."""
        config = BrokerConfig(metadataStoreUrl="zk:h:1", advertisedAddress="b1", brokerServicePort=6650,
                              webServicePort=8080, brokerServicePortTls=6651, webServicePortTls=8443)
        service = BrokerClusterService(config, reactor=object())
        self.assertEqual(service.urls(), {
            "nativeUrl": "pulsar://b1:6650", "nativeUrlTls": "pulsar+ssl://b1:6651",
            "httpUrl": "http://b1:8080", "httpUrlTls": "https://b1:8443", "advertisedListeners": {}})
        data = json.loads(service.broker_data())
        self.assertEqual((data["pulsarServiceUrlTls"], data["webServiceUrlTls"]),
                         ("pulsar+ssl://b1:6651", "https://b1:8443"))

    def test_urls_without_tls(self):
        """Port 0 (the default): the TLS URLs are empty, as before."""
        service = BrokerClusterService(BrokerConfig(metadataStoreUrl="zk:h:1"), reactor=object())
        self.assertEqual((service.urls()["nativeUrlTls"], service.urls()["httpUrlTls"]), ("", ""))
        data = json.loads(service.broker_data())
        self.assertEqual((data["pulsarServiceUrlTls"], data["webServiceUrlTls"]), ("", ""))

    def test_tls_port_without_certificates_is_refused(self):
        """A TLS port without readable certificates stops start-up, naming the keys."""
        e = self.assertRaises(ConfigError, check_config,
                              BrokerConfig(metadataStoreUrl="zk:h:1", brokerServicePortTls=6651))
        self.assertIn("tlsCertificateFilePath", str(e))
        e = self.assertRaises(ConfigError, check_config, BrokerConfig(
            metadataStoreUrl="zk:h:1", webServicePortTls=8443,
            tlsCertificateFilePath="/nonexistent/c.pem", tlsKeyFilePath="/nonexistent/k.pem"))
        self.assertIn("tlsCertificateFilePath", str(e))


class TlsRedirectTests(TestCase):
    """A Redirect from a non-owner carries the owner's brokerServiceUrlTls."""

    def test_redirect_carries_tls_url(self):
        clock = task.Clock()
        root = EmbeddedMetadataStore(None, clock)
        self.successResultOf(root.start())
        config = BrokerConfig(metadataStoreUrl="zk:h:1", advertisedAddress="a", brokerServicePortTls=6651,
                              webServicePortTls=8443)
        a = BundleOwnership(root.new_session(), clock, BrokerClusterService(config, object()).urls(),
                            check_interval=0)
        b = BundleOwnership(root.new_session(), clock,
                            {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}, check_interval=0)
        topic = parse_topic("persistent://public/default/tls-owned")
        own = self.successResultOf(a.lookup(topic))
        self.assertEqual((tuple(own), own.redirect), (("pulsar://a:6650", "pulsar+ssl://a:6651"), False))
        other = self.successResultOf(b.lookup(topic))
        self.assertEqual((tuple(other), other.redirect), (("pulsar://a:6650", "pulsar+ssl://a:6651"), True))
        bundle = self.successResultOf(a.bundle_of(topic))
        raw, _ = self.successResultOf(root.get(bundle.path))
        self.assertEqual(json.loads(raw)["httpUrlTls"], "https://a:8443")
        self.successResultOf(a.stop())
        self.successResultOf(b.stop())


class ClusterTlsTests(SynchronousTestCase):
    """Two real brokers with TLS listeners, the official client over pulsar+ssl://."""

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def setUp(self):
        try:
            zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        directory = tempfile.mkdtemp(prefix="pulsar-tls-certs-")
        self.pki = TestPKI(directory)
        server = self.pki.issue("broker", hosts=[HOST, "localhost"])
        self.cluster = cluster = Cluster(zk, bookies=1, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1,
            "tlsCertificateFilePath": server.cert, "tlsKeyFilePath": server.key})
        self.addCleanup(cluster.cleanup)
        for broker in cluster.brokers:
            broker.tls_port, broker.web_tls_port = free_port(HOST), free_port(HOST)
            broker.settings.update(brokerServicePortTls=broker.tls_port,
                                   webServicePortTls=broker.web_tls_port)
            broker.write_config()
        cluster.start()
        for broker in cluster.brokers:
            # The plain port opens last, so both TLS ports are open already; checked anyway.
            wait_for(lambda b=broker: b.running() and _port_open(b.tls_port), 10,
                     f"{broker.name} TLS port", on_timeout=cluster.logs)

    def client(self, url):
        logger = logging.getLogger("pulsar-cluster-tls")
        logger.setLevel(logging.ERROR)   # the client's INFO chatter would flood trial's output
        client = pulsar.Client(url, operation_timeout_seconds=30, connection_timeout_ms=5000,
                               tls_trust_certs_file_path=self.pki.ca_cert, tls_validate_hostname=True,
                               logger=logger)
        self.addCleanup(client.close)
        return client

    def test_registration_and_https(self):
        """/loadbalance/brokers holds the TLS URLs; the web service answers over https."""
        for broker in self.cluster.brokers:
            raw, _ = self.cluster.zk.get(self.cluster.path(f"/loadbalance/brokers/{broker.broker_id}"))
            data = json.loads(raw)
            self.assertEqual(data["pulsarServiceUrlTls"], f"pulsar+ssl://{HOST}:{broker.tls_port}")
            self.assertEqual(data["webServiceUrlTls"], f"https://{HOST}:{broker.web_tls_port}")
            context = ssl.create_default_context(cafile=self.pki.ca_cert)
            url = f"https://{HOST}:{broker.web_tls_port}/admin/v2/clusters"
            with urllib.request.urlopen(url, context=context, timeout=10) as response:
                self.assertEqual(response.status, 200)

    def test_produce_consume_over_tls_with_redirects(self):
        """Through broker0's TLS port, topics in every bundle (some owned by broker1, reached by a
        Redirect to its brokerServiceUrlTls): each message produced is consumed."""
        cluster = self.cluster
        first = cluster.brokers[0]
        client = self.client(f"pulsar+ssl://{HOST}:{first.tls_port}")
        # One topic per bundle of the default 4, so that the lookups spread over both brokers.
        bounds, topics, seen = even_boundaries(4), [], set()
        prefix = uuid.uuid4().hex[:8]
        for i in range(200):
            name = f"persistent://public/default/tls-{prefix}-{i}"
            bundle = bundle_for("public/default", bounds, name)
            if bundle.range_name not in seen:
                seen.add(bundle.range_name)
                topics.append(name)
            if len(topics) == 4:
                break
        # broker1 takes two bundles first (a plain lookup there), so broker0 must redirect.
        other = self.client(f"pulsar+ssl://{HOST}:{cluster.brokers[1].tls_port}")
        for name in topics[:2]:
            other.create_producer(name).close()
        for name in topics:
            consumer = client.subscribe(name, "sub")
            producer = client.create_producer(name, batching_enabled=False)
            payloads = [f"{name}-{n}".encode() for n in range(10)]
            for payload in payloads:
                producer.send(payload)
            received = []
            for _ in payloads:
                message = consumer.receive(timeout_millis=10000)
                received.append(message.data())
                consumer.acknowledge(message)
            self.assertEqual(received, payloads)
        owners = cluster.bundle_owners()
        self.assertEqual(set(owners.values()), {b.service_url for b in cluster.brokers},
                         f"bundles not spread over both brokers: {owners}")
        for range_name in owners:
            raw, _ = cluster.zk.get(cluster.path(f"/namespace/public/default/{range_name}"))
            data = json.loads(raw)
            broker = next(b for b in cluster.brokers if b.service_url == data["nativeUrl"])
            self.assertEqual(data["nativeUrlTls"], f"pulsar+ssl://{HOST}:{broker.tls_port}")


def _port_open(port):
    from pulsar_twisted.testing.process import port_open
    return port_open(HOST, port)
