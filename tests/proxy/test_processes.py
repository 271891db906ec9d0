"""
``twistd pulsar-proxy`` in front of a real cluster (ZooKeeper, a bookie, two ``pulsar-broker``
processes), driven by the official client given only the proxy's URL:

* plain: produce and consume, a partitioned topic created and looked up through the proxy's admin
  REST forwarding, a topic followed when its owner broker stops (its bundle moves to the other
  broker), the admin API and ``/metrics`` through the proxy's web port;
* TLS client -> proxy and proxy -> brokers, token authentication on the proxy and the brokers
  (``proxyRoles``, forwarded credentials checked by the brokers), tokens that expire every few
  seconds refreshed through the proxy in both of its phases; a client with a bad token refused.

Each test starts its own cluster (about 5 s on a quiet machine); they need ZooKeeper
(``PULSAR_TEST_ZK``) and the official ``pulsar-client`` package, and skip without them.
"""

import base64
import json
import logging
import os
import tempfile
import time
import urllib.request
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.security import jwt
from pulsar_twisted.testing.certs import TestPKI
from pulsar_twisted.testing.cluster import (
    HOST, Cluster, ZooKeeperServer, ZooKeeperUnavailable, free_port, wait_for)

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

ONE_COPY = {"managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1}
SECRET = os.urandom(32)
SECRET_SPEC = "data:;base64," + base64.b64encode(SECRET).decode()
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


def token(role, exp_in=None, key=SECRET):
    claims = {"sub": role}
    if exp_in is not None:
        claims["exp"] = int(time.time() + exp_in)
    return jwt.encode(claims, key, "HS256")


class ProxyCase(SynchronousTestCase):
    """One cluster with two brokers and a proxy per test."""

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    broker_config = {}
    proxy_config = {}

    def setUp(self):
        logging.getLogger("pulsar").setLevel(logging.ERROR)
        try:
            zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        self.cluster = Cluster(zk, bookies=1, brokers=2, broker_config=dict(ONE_COPY, **self.broker_config))
        self.addCleanup(self.cluster.cleanup)
        self.prepare_brokers()
        self.cluster.start()
        self.proxy = self.cluster.add_proxy(self.proxy_config_for())
        self.proxy.start()
        self.clients = []

    def tearDown(self):
        for client in self.clients:
            client.close()

    def prepare_brokers(self):
        """Per-broker settings before the cluster starts (TLS ports)."""

    def proxy_config_for(self) -> dict:
        return dict(self.proxy_config)

    def new_client(self, url=None, timeout=20, **options):
        client = pulsar.Client(url or self.proxy.service_url, operation_timeout_seconds=timeout, **options)
        self.clients.append(client)
        return client

    def topic(self, prefix="t"):
        return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"

    def http(self, method, path, body=None, headers=None, context=None, base=None):
        request = urllib.request.Request((base or self.proxy.web_service_url) + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        try:
            with urllib.request.urlopen(request, timeout=20, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metric(self, name):
        status, text = self.http("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        self.fail(f"{name} not in /metrics")

    def owner_of(self, topic):
        """The broker process whose binary URL the cluster's ownership data names for ``topic``."""
        status, body = self.http("GET", "/lookup/v2/topic/" + topic.replace("://", "/"))
        self.assertEqual(status, 200, body)
        url = json.loads(body)["brokerUrl"]
        return next(b for b in self.cluster.brokers if b.service_url == url)

    def exchange(self, producer, consumer, messages):
        for m in messages:
            producer.send(m)
        received = []
        for _ in messages:
            message = consumer.receive(20000)
            consumer.acknowledge(message)
            received.append(message.data())
        return received


class PlainProxyTests(ProxyCase):
    """No TLS, no authentication; brokers discovered from the metadata store."""

    def test_produce_consume_partitions_and_a_topic_that_moves(self):
        """The official client with only the proxy's URL: messages both ways, a partitioned topic,
        a topic whose owner stops (its bundle moves) followed through the proxy, admin and
        metrics on the proxy's web port."""
        client = self.new_client()
        partitioned = self.topic("p")
        status, body = self.http("PUT", "/admin/v2/" + partitioned.replace("://", "/") + "/partitions", 3)
        self.assertIn(status, (200, 204), body)
        self.assertEqual(len(client.get_topic_partitions(partitioned)), 3)
        producer = client.create_producer(partitioned)
        consumer = client.subscribe(partitioned, "s")
        sent = [b"p%d" % i for i in range(12)]
        self.assertEqual(sorted(self.exchange(producer, consumer, sent)), sorted(sent))

        topic = self.topic("moving")
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        self.assertEqual(self.exchange(producer, consumer, [b"before"]), [b"before"])
        owner = self.owner_of(topic)
        owner.stop()   # graceful: the owner gives its bundles back; the other broker takes them
        for m in (b"after-1", b"after-2"):
            producer.send(m)
        received = []
        while len([m for m in received if m != b"before"]) < 2:
            message = consumer.receive(20000)
            consumer.acknowledge(message)
            received.append(message.data())
        # "before" may come again: its ack was in the client's ack group when the owner stopped.
        self.assertEqual([m for m in received if m != b"before"], [b"after-1", b"after-2"])
        other = self.owner_of(topic)
        self.assertIsNot(other, owner)

        status, body = self.http("GET", "/admin/v2/" + topic.replace("://", "/") + "/stats")
        self.assertEqual(status, 200, body)
        self.assertIn("s", json.loads(body)["subscriptions"])
        self.assertGreater(self.metric("pulsar_proxy_binary_ops"), 0)
        self.assertGreater(self.metric("pulsar_proxy_binary_bytes"), 0)
        self.assertGreaterEqual(self.metric("pulsar_proxy_new_connections"), 2)
        self.assertGreater(self.metric("pulsar_proxy_lookup_requests"), 0)
        self.assertEqual(self.cluster.tracebacks(), {})


class SecureProxyTests(ProxyCase):
    """TLS on both legs, tokens on the proxy and the brokers, forwarded client credentials."""

    auth = {"authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
            "tokenSecretKey": SECRET_SPEC, "authenticationRefreshCheckSeconds": 1}

    def prepare_brokers(self):
        directory = tempfile.mkdtemp(prefix="proxy-pki-")
        self.addCleanup(__import__("shutil").rmtree, directory, True)
        self.pki = TestPKI(directory)
        self.server = self.pki.issue("server", hosts=[HOST, "localhost"])
        for broker in self.cluster.brokers:
            broker.settings.update(self.auth, brokerServicePortTls=free_port(HOST),
                                   tlsCertificateFilePath=self.server.cert, tlsKeyFilePath=self.server.key,
                                   proxyRoles="proxy", superUserRoles="admin",
                                   authorizationEnabled="true",
                                   authenticateOriginalAuthData="true",
                                   brokerClientAuthenticationPlugin="", brokerClientAuthenticationParameters="")
            broker.write_config()

    def proxy_config_for(self):
        self.tls_port = free_port(HOST)
        return dict(self.auth, servicePortTls=self.tls_port, tlsCertificateFilePath=self.server.cert,
                    tlsKeyFilePath=self.server.key, tlsEnabledWithBroker="true",
                    brokerClientTrustCertsFilePath=self.pki.ca_cert,
                    brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
                    brokerClientAuthenticationParameters="token:" + token("proxy"),
                    forwardAuthorizationCredentials="true")

    def tls_client(self, auth, timeout=20):
        return self.new_client(f"pulsar+ssl://{HOST}:{self.tls_port}", timeout, authentication=auth,
                               tls_trust_certs_file_path=self.pki.ca_cert)

    def test_tls_tokens_and_refresh_through_the_proxy(self):
        """Tokens valid 3 s, checked every second by the proxy and the brokers: the client answers
        every AUTH_CHALLENGE (the proxy's on its lookup connection, the broker's through the relay)
        with a fresh token and keeps producing and consuming; a forged token is refused."""
        calls = []

        def supplier():
            calls.append(1)
            return token("client", exp_in=3)

        admin = {"Authorization": "Bearer " + token("admin")}
        self.assertEqual(self.http("GET", "/admin/v2/tenants")[0], 401)    # the proxy refuses it
        for role in ("client", "proxy"):      # both roles are authorized (Pulsar >= 3.0)
            status, body = self.http("POST", f"/admin/v2/namespaces/public/default/permissions/{role}",
                                     ["produce", "consume"], admin)
            self.assertIn(status, (200, 204), body)
        client = self.tls_client(pulsar.AuthenticationToken(supplier))
        topic = self.topic("secure")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        self.assertEqual(self.exchange(producer, consumer, [b"before"]), [b"before"])
        time.sleep(7)
        self.assertEqual(self.exchange(producer, consumer, [b"after"]), [b"after"])
        self.assertGreater(len(calls), 2)
        brokers_log = "".join(b.log_text() for b in self.cluster.brokers)
        self.assertIn("proxy proxy connects on behalf of client", brokers_log)
        self.assertIn("credentials of client refreshed", brokers_log)
        wait_for(lambda: "credentials of client refreshed" in self.proxy.log_text(), 10,
                 "the proxy's own refresh of the client's token", on_timeout=self.proxy.log_tail)

        forged = self.tls_client(pulsar.AuthenticationToken(token("client", key=b"x" * 32)), timeout=3)
        with self.assertRaises(Exception):
            forged.create_producer(self.topic("forged"))
        stranger = self.tls_client(pulsar.AuthenticationToken(token("stranger")), timeout=3)
        with self.assertRaises(Exception):
            stranger.create_producer(self.topic("strange"))
        self.assertIn("role stranger refused", "".join(b.log_text() for b in self.cluster.brokers))
        self.assertEqual(self.cluster.tracebacks(), {})
