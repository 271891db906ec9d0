"""
Two clusters side by side (issue 13 item 10): two standalones on one machine with their own
``clusterName`` and ports. Each registers, through its admin REST API, its own cluster data, the
other cluster, a tenant ``shop`` allowed on its cluster and the namespace ``shop/orders``. The
official client's ``AutoClusterFailover`` (pulsar-client 3.x: ``pulsar.Client(
pulsar.AutoClusterFailover(primary, [secondary], ...))``) then moves a producer from the first to
the second when the first is stopped with SIGTERM, and back when it runs again.

What moves is the client's service URL: the C++ client probes the primary every
``check_interval_ms``, switches every connection to the secondary after ``failover_threshold``
failed probes and back after ``switch_back_threshold`` good ones. Which cluster stored each
message is read back with a plain client per cluster. Bounded: about 15 s on an idle machine.
"""

import json
import os
import signal
import time
import urllib.error
import urllib.request

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.process import StandaloneProcess
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

TOPIC = "persistent://shop/orders/payments"
#: The whole test's deadline for each wait (failover, switch back, receive).
WAIT = 20.0


def rest(standalone, method, path, body=None) -> int:
    """``method path`` on ``standalone``'s admin API with a JSON body; the HTTP status."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(standalone.web_service_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def register(standalone, cluster, peer, peer_cluster):
    """The cluster's own data, its peer, the tenant and the namespace, through the admin API."""
    statuses = [
        rest(standalone, "POST", f"/admin/v2/clusters/{cluster}",
             {"serviceUrl": standalone.web_service_url, "brokerServiceUrl": standalone.service_url}),
        rest(standalone, "PUT", f"/admin/v2/clusters/{peer_cluster}",
             {"serviceUrl": peer.web_service_url, "brokerServiceUrl": peer.service_url}),
        rest(standalone, "PUT", "/admin/v2/tenants/shop", {"adminRoles": [], "allowedClusters": [cluster]}),
        rest(standalone, "PUT", "/admin/v2/namespaces/shop/orders", {}),
    ]
    return statuses


class TwoClustersTests(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"
    elif not hasattr(pulsar, "AutoClusterFailover"):
        skip = "this pulsar-client has no AutoClusterFailover (3.7+ has it)"

    def setUp(self):
        self.a = StandaloneProcess({"clusterName": "cluster-a"})
        self.b = StandaloneProcess({"clusterName": "cluster-b"})
        for standalone in (self.a, self.b):
            self.addCleanup(standalone.cleanup)
        self.a.spawn()
        self.b.spawn()
        self.a.wait_ready()
        self.b.wait_ready()

    def client(self, service, **options):
        path = os.path.join(self.a.directory, "client.log")
        client = pulsar.Client(service, operation_timeout_seconds=10, connection_timeout_ms=1000,
                               logger=official_client_logger(f"two-clusters.{id(self)}", path), **options)
        self.addCleanup(client.close)
        return client

    def send_until_stored(self, producer, consumer, prefix: str) -> bytes:
        """Send ``prefix-N`` until ``consumer`` (on the expected cluster) receives one; that one."""
        deadline = time.monotonic() + WAIT
        n = 0
        while time.monotonic() < deadline:
            n += 1
            payload = f"{prefix}-{n}".encode()
            try:
                producer.send(payload)
            except pulsar.PulsarException:
                time.sleep(0.2)     # between the stop and the switch: the old cluster is gone
                continue
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(message)
            if message.data().startswith(prefix.encode()):
                return message.data()
        self.fail(f"no {prefix} message reached the expected cluster within {WAIT}s")

    @staticmethod
    def receive_matching(consumer, payload: bytes, timeout: float = 5.0):
        """``payload`` if ``consumer`` receives it within ``timeout`` (others acked and skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(message)
            if message.data() == payload:
                return payload
        return None

    def test_failover_and_back(self):
        """Producer on cluster-a; SIGTERM a: its messages land on cluster-b; a back: on a again."""
        self.assertEqual(register(self.a, "cluster-a", self.b, "cluster-b"), [204, 204, 204, 204])
        self.assertEqual(register(self.b, "cluster-b", self.a, "cluster-a"), [204, 204, 204, 204])
        with urllib.request.urlopen(self.a.web_service_url + "/admin/v2/clusters", timeout=10) as r:
            self.assertEqual(sorted(json.loads(r.read())), ["cluster-a", "cluster-b"])

        # Subscriptions first on each cluster, so that every message stored there is kept.
        on_a = self.client(self.a.service_url).subscribe(TOPIC, "audit")
        on_b = self.client(self.b.service_url).subscribe(TOPIC, "audit")
        failover = pulsar.AutoClusterFailover(
            pulsar.ServiceInfo(self.a.service_url), [pulsar.ServiceInfo(self.b.service_url)],
            check_interval_ms=200, failover_threshold=2, switch_back_threshold=2)
        producer = self.client(failover).create_producer(TOPIC, send_timeout_millis=2000,
                                                         batching_enabled=False)
        producer.send(b"first")
        self.assertEqual(self.receive_matching(on_a, b"first"), b"first")

        # Closed while a is up (the subscription is durable and keeps what a stores meanwhile):
        # left open, the client would reconnect it to the restarted a and hold the Exclusive
        # subscription against the new consumer below (ConsumerBusy).
        on_a.close()
        started = time.monotonic()
        # SIGTERM: a graceful stop (twistd exits through the signal once its services stopped).
        self.assertIn(self.a.stop(), (0, -signal.SIGTERM))
        moved = self.send_until_stored(producer, on_b, "while-a-is-down")
        failover_seconds = time.monotonic() - started

        self.a.start()                           # same data, config and ports
        on_a = self.client(self.a.service_url).subscribe(TOPIC, "audit")
        started = time.monotonic()
        back = self.send_until_stored(producer, on_a, "a-is-back")
        back_seconds = time.monotonic() - started
        # Switched back for good: the next message is stored on cluster-a only.
        producer.send(b"final")
        self.assertEqual(self.receive_matching(on_a, b"final"), b"final")
        self.assertIsNone(self.receive_matching(on_b, b"final", timeout=1.0))
        print(f"\nfailover to cluster-b in {failover_seconds:.2f}s ({moved!r}), back to cluster-a "
              f"in {back_seconds:.2f}s ({back!r})")
