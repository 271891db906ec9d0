"""
What the geo-replication test modules share: ``GeoCase``, a ``SynchronousTestCase`` with two
standalones (``east`` and ``west``, ``testing.georeplication.GeoPair``) replicating ``geo/ns``
with deduplication on, and the official client's producers and readers on either.

Each wait is bounded (``WAIT``); every process is killed after each test.
"""

import os
import time
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.georeplication import GeoPair
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

TENANT, NAMESPACE = "geo", "ns"
#: The bound of every wait for a message to cross (the replicator may be backing off).
WAIT = 30.0
#: How long a message that must not cross is given to cross anyway.
QUIET = 5.0


class GeoCase(SynchronousTestCase):
    """Two clusters per test; ``replicated``: whether ``geo/ns`` is replicated from the start."""

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    replicated = True
    #: Settings of both standalones beyond ``GeoPair``'s.
    site_config = {}

    def setUp(self):
        self.pair = GeoPair(("east", "west"), config=self.site_config)
        self.addCleanup(self.pair.cleanup)
        self.pair.start()
        self.pair.register(TENANT, NAMESPACE, replicated=self.replicated)
        self.east, self.west = self.pair.sites["east"], self.pair.sites["west"]
        self.topic = f"persistent://{TENANT}/{NAMESPACE}/t-{uuid.uuid4().hex[:8]}"

    def client(self, site):
        log = official_client_logger(f"geo-replication.{site.name}",
                                     os.path.join(site.directory, "client.log"))
        client = pulsar.Client(site.service_url, operation_timeout_seconds=10,
                               connection_timeout_ms=2000, logger=log)
        self.addCleanup(client.close)
        return client

    def read_all(self, site, until=None, timeout: float = WAIT) -> list:
        """Every message of the topic on ``site`` from the earliest position; with ``until``
        (a payload), keep reading until it has come (failing after ``timeout``)."""
        client = self.client(site)
        reader = client.create_reader(self.topic, pulsar.MessageId.earliest)
        self.addCleanup(reader.close)
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until is None and not reader.has_message_available():
                return out
            try:
                message = reader.read_next(timeout_millis=500)
            except pulsar.Timeout:
                continue
            out.append(message)
            if until is not None and message.data() == until:
                return out
        if until is None:
            return out
        self.fail(f"{until!r} did not reach {site.name} within {timeout}s; it holds "
                  f"{[m.data() for m in out]}\n{site.log_tail(30)}")

    def payloads(self, site) -> list:
        return [m.data() for m in self.read_all(site)]

    def produce(self, site, *payloads, name=None, **options):
        producer = self.client(site).create_producer(self.topic, producer_name=name,
                                                     batching_enabled=False)
        for payload in payloads:
            producer.send(payload, **options)
        return producer
