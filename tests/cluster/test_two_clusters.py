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

The failover client lives in a child process (``FailoverProducer``): the C++ library's failover
once aborted the whole test run (``terminate called after throwing an instance of
'std::length_error'``, while its probe was switching the service URL), which no broker answer can
cause (no length in the protocol reaches a string that size) and which took every later test's
result with it. A child that dies is replaced (at most ``CHILD_RESTARTS`` times), so the test still
decides; the new client starts on the primary and moves by itself, as a restarted application's
would.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.process import _REPO_ROOT, StandaloneProcess, repo_env
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

TOPIC = "persistent://shop/orders/payments"
#: The whole test's deadline for each wait (failover, switch back, receive).
WAIT = 20.0

#: Failover children replaced after they died, at most (see the module docstring).
CHILD_RESTARTS = 2


class ChildDied(Exception):
    """The failover producer's process ended (its stderr's tail is the message)."""


def _child_main(primary: str, secondary: str, log_path: str) -> None:
    """The child: a producer on an AutoClusterFailover client; for each stdin line ``send <hex>``,
    one ``producer.send`` and a line ``ok`` or ``err <exception>`` on stdout."""
    client = pulsar.Client(
        pulsar.AutoClusterFailover(pulsar.ServiceInfo(primary), [pulsar.ServiceInfo(secondary)],
                                   check_interval_ms=200, failover_threshold=2,
                                   switch_back_threshold=2),
        operation_timeout_seconds=10, connection_timeout_ms=1000,
        logger=official_client_logger("two-clusters.child", log_path))
    producer = client.create_producer(TOPIC, send_timeout_millis=2000, batching_enabled=False)
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            producer.send(bytes.fromhex(line.split()[1]))
            print("ok", flush=True)
        except Exception as e:
            print(f"err {type(e).__name__}", flush=True)
    client.close()


class FailoverProducer:
    """The parent's end: ``send(payload)`` is True (stored) or False (refused), or raises
    ChildDied."""

    def __init__(self, primary: str, secondary: str, directory: str):
        self.args = [primary, secondary, os.path.join(directory, "client-child.log")]
        self.stderr_path = os.path.join(directory, "client-child.stderr")
        self.process = None
        self.restarts = 0

    def start(self) -> None:
        env = repo_env()
        code = "import sys, tests.cluster.test_two_clusters as t; t._child_main(*sys.argv[1:])"
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen([sys.executable, "-c", code, *self.args], cwd=_REPO_ROOT,
                                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=stderr)
        if self._line(WAIT) != "ready":
            raise ChildDied(self._why())

    def send(self, payload: bytes) -> bool:
        try:
            self.process.stdin.write(f"send {payload.hex()}\n".encode())
            self.process.stdin.flush()
        except OSError:
            raise ChildDied(self._why())
        answer = self._line(WAIT)
        if answer is None:
            raise ChildDied(self._why())
        return answer == "ok"

    def restart(self) -> None:
        """A new child after one died (``ChildDied``); at most CHILD_RESTARTS times."""
        if self.restarts >= CHILD_RESTARTS:
            raise ChildDied(f"the failover child died {self.restarts + 1} times: {self._why()}")
        self.restarts += 1
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()

    def _line(self, timeout: float):
        """The child's next line, or None if it ended or said nothing within ``timeout``."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""
        return line.decode().strip() or None

    def _why(self) -> str:
        with open(self.stderr_path, "rb") as f:
            return f.read()[-500:].decode(errors="replace") or f"exit status {self.process.poll()}"


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

    def failover_producer(self) -> FailoverProducer:
        producer = FailoverProducer(self.a.service_url, self.b.service_url, self.a.directory)
        self.addCleanup(producer.stop)
        producer.start()
        return producer

    @staticmethod
    def send(producer, payload: bytes) -> bool:
        """``producer.send(payload)``; a child that died is replaced (False then)."""
        try:
            return producer.send(payload)
        except ChildDied as e:
            print(f"\nthe failover child died ({str(e)[-300:]}); starting another")
            producer.restart()
            return False

    def send_until_stored(self, producer, consumer, prefix: str) -> bytes:
        """Send ``prefix-N`` until ``consumer`` (on the expected cluster) receives one; that one."""
        deadline = time.monotonic() + WAIT
        n = 0
        while time.monotonic() < deadline:
            n += 1
            payload = f"{prefix}-{n}".encode()
            if not self.send(producer, payload):
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
        producer = self.failover_producer()
        self.assertTrue(producer.send(b"first"))
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
        self.assertTrue(self.send(producer, b"final") or producer.send(b"final"))
        self.assertEqual(self.receive_matching(on_a, b"final"), b"final")
        self.assertIsNone(self.receive_matching(on_b, b"final", timeout=1.0))
        print(f"\nfailover to cluster-b in {failover_seconds:.2f}s ({moved!r}), back to cluster-a "
              f"in {back_seconds:.2f}s ({back!r})")
