"""
Advertised listeners in a cluster (issue 13 item 2): two ``twistd pulsar-broker`` processes, each
advertising ``internal`` (its plain port) and ``external`` (a ``bindAddresses`` port of its own).
A lookup answered by the broker that does not own the topic gives the owner's ``external`` URL,
read from the owner's ownership data (Pulsar's NamespaceEphemeralData ``advertisedListeners``),
and the official client with ``listener_name="external"`` ends up connected to the owner's
external port. The registrations carry every listener (LocalBrokerData ``advertisedListeners``).
"""

import json
import logging
import urllib.request

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.cluster import HOST, Cluster, ZooKeeperServer, ZooKeeperUnavailable, wait_for
from pulsar_twisted.testing.process import free_port

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None


class ClusterListenerTests(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def setUp(self):
        try:
            zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))
        self.cluster = cluster = Cluster(zk, bookies=1, brokers=2, broker_config={
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1})
        self.addCleanup(cluster.cleanup)
        for broker in cluster.brokers:
            broker.external_port = free_port(HOST)
            broker.settings.update(
                advertisedListeners=(f"internal:pulsar://{HOST}:{broker.port},"
                                     f"external:pulsar://{HOST}:{broker.external_port}"),
                bindAddresses=f"external:pulsar://{HOST}:{broker.external_port}")
            broker.write_config()
        cluster.start()

    def client(self, url, **options):
        logger = logging.getLogger("pulsar-cluster-listeners")
        logger.setLevel(logging.ERROR)
        client = pulsar.Client(url, operation_timeout_seconds=20, logger=logger, **options)
        self.addCleanup(client.close)
        return client

    def owner_of(self, topic: str):
        """(owner, other): the broker whose URL a lookup answers for ``topic``, and the other one
        (the leader places a free bundle: not necessarily on the broker asked)."""
        url = (f"{self.cluster.brokers[0].web_service_url}/lookup/v2/topic/"
               + topic.replace("persistent://", "persistent/"))
        with urllib.request.urlopen(url, timeout=10) as response:
            owner_url = json.loads(response.read())["brokerUrl"]
        owner = next(b for b in self.cluster.brokers if b.service_url == owner_url)
        return owner, next(b for b in self.cluster.brokers if b is not owner)

    def test_non_owner_answers_owner_external_url(self):
        for broker in self.cluster.brokers:
            raw, _ = self.cluster.zk.get(self.cluster.path(f"/loadbalance/brokers/{broker.broker_id}"))
            self.assertEqual(json.loads(raw)["advertisedListeners"]["external"],
                             {"brokerServiceUrl": f"pulsar://{HOST}:{broker.external_port}"})
        topic = "persistent://public/default/listener-owned"
        # The bundle is placed and taken first: the other broker then answers for an owned bundle.
        self.client(self.cluster.brokers[0].service_url).create_producer(topic).send(b"owner")
        owner, other = self.owner_of(topic)
        url = f"{other.web_service_url}/lookup/v2/topic/persistent/public/default/listener-owned"
        with urllib.request.urlopen(url + "?listenerName=external", timeout=10) as response:
            self.assertEqual(json.loads(response.read())["brokerUrl"],
                             f"pulsar://{HOST}:{owner.external_port}")

        external = self.client(other.service_url, listener_name="external")
        producer = external.create_producer(topic)
        producer.send(b"through-external")
        wait_for(lambda: "connected on a port of listener external" in owner.log_text(), 10,
                 "a connection on the owner's external port", on_timeout=self.cluster.logs)
        consumer = self.client(owner.service_url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        received = {consumer.receive(timeout_millis=10000).data() for _ in range(2)}
        self.assertEqual(received, {b"owner", b"through-external"})
