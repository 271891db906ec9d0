"""
Interop (issue 13 item 2): one standalone advertising three listeners, the official client
choosing one with ``Client(..., listener_name=...)``.

* ``internal`` (the first, so the internal one): ``pulsar://127.0.0.1:<port>``;
* ``byname``: the same port under the host name ``localhost`` (Pulsar allows one port under two
  host names);
* ``extra``: ``pulsar://127.0.0.1:<port2>``, a port bound only through ``bindAddresses``: a client
  that chose it can only produce if the lookup sent it there (the broker logs connections on that
  port with the listener's name).

An unknown listener fails the lookup with Pulsar's ServiceNotReady "the broker do not have <name>
listener", which the client retries until its operation timeout (as against Pulsar).

The HTTP lookup's ``listenerName`` is checked with plain HTTP requests: the official Python client
(C++ 4.2.0 underneath) does not send ``listener_name`` in its HTTP lookups (an ``http://`` service
URL), only in binary LOOKUP commands.
"""

import json
import urllib.request

from pulsar_twisted.testing.process import free_port
from tests.interop.test_core import InteropCase, pulsar

_PORT = free_port()
_EXTRA = free_port()


class ListenerTests(InteropCase):
    standalone_config = {
        "brokerServicePort": _PORT,
        "advertisedListeners": f"internal:pulsar://127.0.0.1:{_PORT},byname:pulsar://localhost:{_PORT},"
                               f"extra:pulsar://127.0.0.1:{_EXTRA}",
        "bindAddresses": f"extra:pulsar://127.0.0.1:{_EXTRA}",
    }
    allow_broker_tracebacks = False

    def listener_client(self, name, **options):
        client = pulsar.Client(self.standalone.service_url, listener_name=name,
                               operation_timeout_seconds=options.pop("timeout", 10))
        self.addCleanup(self._close_client, client)
        return client

    def http_lookup(self, topic, listener):
        url = (f"{self.standalone.web_service_url}/lookup/v2/topic/persistent/public/default/"
               f"{topic}?listenerName={listener}")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def round_trip(self, client):
        topic = self.topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"via-listener")
        self.assertEqual(self.receive(consumer).data(), b"via-listener")
        return topic

    def test_extra_listener_port(self):
        """listener_name="extra": the lookup answers the bindAddresses port and the client works
        through it (the broker saw a connection on that listener's port)."""
        self.round_trip(self.listener_client("extra"))
        self.assertIn("connected on a port of listener extra", self.standalone.log_text())
        self.assertEqual(self.http_lookup("x", "extra")["brokerUrl"], f"pulsar://127.0.0.1:{_EXTRA}")

    def test_host_name_listener(self):
        self.round_trip(self.listener_client("byname"))
        self.assertEqual(self.http_lookup("y", "byname")["brokerUrl"], f"pulsar://localhost:{_PORT}")

    def test_default_is_internal(self):
        self.round_trip(self.client)
        self.assertEqual(self.http_lookup("z", "internal")["brokerUrl"], self.standalone.service_url)

    def test_unknown_listener_fails(self):
        client = self.listener_client("nope", timeout=3)
        # The C++ client treats ServiceNotReady as retryable: it looks up again until the
        # operation timeout, as it does against Pulsar.
        with self.assertRaises(pulsar.Timeout):
            client.create_producer(self.topic())
        self.assertIn("the broker do not have nope listener", self.standalone.log_text())
