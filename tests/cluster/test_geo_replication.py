"""
Geo-replication between two clusters, end to end: two standalones (``east`` and ``west``,
``testing.georeplication.GeoPair``), each holding both clusters' data, a tenant allowed on both
and the namespace ``geo/ns`` replicated to both (``namespaces set-clusters``) with deduplication
on. Messages are produced with the official client; what a cluster stores is read back with a
Reader from the earliest position. The replicated copy's sequence id and ``replicated_from``,
which the official Python client does not expose, are read with our own client.

Each wait is bounded (``WAIT``); every process is killed after each test.
"""

import time

from tests.cluster.geo_support import NAMESPACE, QUIET, TENANT, WAIT, GeoCase, pulsar


class GeoReplicationTests(GeoCase):

    def test_message_crosses_with_its_metadata(self):
        """A message produced on east is read on west with the same payload, properties, key,
        event time, producer name and sequence id, marked as replicated from east."""
        self.produce(self.east, b"hello", name="east-producer", properties={"colour": "blue"},
                     partition_key="k1", event_timestamp=1_700_000_000_123, sequence_id=42)
        message = self.read_all(self.west, until=b"hello")[-1]
        self.assertEqual(
            (message.data(), message.properties(), message.partition_key(),
             message.event_timestamp(), message.producer_name()),
            (b"hello", {"colour": "blue"}, "k1", 1_700_000_000_123, "east-producer"))
        original = self.read_all(self.east, until=b"hello")[-1]
        self.assertEqual(message.publish_timestamp(), original.publish_timestamp())

        from pulsar_twisted.client import blocking
        from tests.client.interop_support import private_reactor
        ours = blocking.Client(self.west.service_url, operation_timeout_seconds=10,
                               reactor=private_reactor())
        self.addCleanup(ours.close)
        reader = ours.create_reader(self.topic)
        self.addCleanup(reader.close)
        copy = reader.read_next(timeout_millis=10000)
        self.assertEqual((copy.data(), copy.sequence_id(), copy._metadata.replicated_from),
                         (b"hello", 42, "east"))

    def test_not_replicated_back(self):
        """East's message crosses to west and does not come back: east holds it once (a west
        message that reached east after it proves west's replicator has passed it)."""
        self.produce(self.east, b"from-east")
        self.read_all(self.west, until=b"from-east")
        self.produce(self.west, b"marker-from-west")
        self.read_all(self.east, until=b"marker-from-west")
        self.assertEqual(self.payloads(self.east), [b"from-east", b"marker-from-west"])
        self.assertEqual(self.payloads(self.west), [b"from-east", b"marker-from-west"])

    def test_message_level_clusters(self):
        """``replication_clusters=["east"]`` and ``disable_replication=True`` on send keep a
        message on east; the next plain message crosses alone."""
        producer = self.produce(self.east, b"east-only", replication_clusters=["east"])
        producer.send(b"not-replicated", disable_replication=True)
        producer.send(b"everywhere")
        west = [m.data() for m in self.read_all(self.west, until=b"everywhere")]
        self.assertEqual(west, [b"everywhere"])
        self.assertEqual(self.payloads(self.east), [b"east-only", b"not-replicated", b"everywhere"])

    def test_produced_while_remote_is_down(self):
        """A message produced on east while west is down reaches west once it runs again."""
        self.produce(self.east, b"before")
        self.read_all(self.west, until=b"before")
        self.west.kill9()
        self.produce(self.east, b"while-west-is-down")
        time.sleep(2.0)                  # the replicator finds west gone and backs off
        self.west.start()                # same data and ports
        held = [m.data() for m in self.read_all(self.west, until=b"while-west-is-down")]
        self.assertEqual(held, [b"before", b"while-west-is-down"])

    def test_removing_a_cluster_stops_replication(self):
        """Once east's namespace no longer lists west, east's messages stay on east."""
        self.produce(self.east, b"replicated")
        self.read_all(self.west, until=b"replicated")
        self.pair.admin("east").post(f"/admin/v2/namespaces/{TENANT}/{NAMESPACE}/replication",
                                     ["east"])
        self.produce(self.east, b"kept-on-east")
        time.sleep(QUIET)
        self.assertEqual(self.payloads(self.west), [b"replicated"])
        self.assertEqual(self.payloads(self.east), [b"replicated", b"kept-on-east"])

    def test_schema_crosses(self):
        """A message written with a schema crosses with it: west's topic gets the schema and
        a reader with that schema decodes the value."""
        producer = self.client(self.east).create_producer(
            self.topic, schema=pulsar.schema.StringSchema(), batching_enabled=False)
        producer.send("text")
        reader = self.client(self.west).create_reader(
            self.topic, pulsar.MessageId.earliest, schema=pulsar.schema.StringSchema())
        self.addCleanup(reader.close)
        self.assertEqual(reader.read_next(timeout_millis=int(WAIT * 1000)).value(), "text")
        path = "/admin/v2/schemas/" + self.topic.split("://", 1)[1] + "/schema"
        self.assertEqual(self.pair.admin("west").get(path)["type"], "STRING")

    def test_partitioned_topic_crosses(self):
        """A partitioned topic created on east exists on west with as many partitions, and
        what is produced on its partitions on east is consumed on west."""
        path = "/admin/v2/persistent/" + self.topic.split("://", 1)[1] + "/partitions"
        self.pair.admin("east").put(path, 3)
        deadline = time.monotonic() + WAIT
        while (self.pair.admin("west").get(path) or {}).get("partitions") != 3:
            self.assertLess(time.monotonic(), deadline, "no partitioned topic on west")
            time.sleep(0.2)
        producer = self.client(self.east).create_producer(self.topic, batching_enabled=False)
        sent = {b"m%d" % i for i in range(6)}
        for payload in sorted(sent):
            producer.send(payload, partition_key=payload.decode())
        consumer = self.client(self.west).subscribe(
            self.topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        got = set()
        while got != sent and time.monotonic() < deadline + WAIT:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            got.add(message.data())
            consumer.acknowledge(message)
        self.assertEqual(got, sent)

    def test_non_persistent_topic_crosses(self):
        """A message published on a non-persistent topic on east, once east's replicator is
        connected, reaches a consumer on west (non-persistent: nothing is kept for later, so
        the sends repeat until one arrives)."""
        topic = self.topic.replace("persistent://", "non-persistent://", 1)
        consumer = self.client(self.west).subscribe(topic, "live")
        producer = self.client(self.east).create_producer(topic, batching_enabled=False)
        deadline = time.monotonic() + WAIT
        sent = []
        while time.monotonic() < deadline:
            sent.append(b"np-%d" % len(sent))
            producer.send(sent[-1])
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            self.assertIn(message.data(), sent)
            return
        self.fail(f"none of {len(sent)} non-persistent messages reached west\n"
                  f"{self.east.log_tail(20)}")


class ReplicationStartsAtTheEndTests(GeoCase):
    """The namespace is made replicated only after a message was published."""

    replicated = False

    def test_earlier_messages_stay(self):
        """Messages published before the namespace was replicated are not replicated (the
        replicator's cursor starts at the end of the topic); later ones are."""
        self.produce(self.east, b"before-replication")
        self.pair.set_clusters(TENANT, NAMESPACE, ("east", "west"))
        self.produce(self.east, b"after-replication")
        held = [m.data() for m in self.read_all(self.west, until=b"after-replication")]
        self.assertEqual(held, [b"after-replication"])


class ChunkedReplicationTests(GeoCase):
    """Brokers taking messages of at most 100 kB, so that a 350 kB message goes in 4 chunks."""

    site_config = {"maxMessageSize": 102400}

    def test_chunked_message_crosses(self):
        """A chunked message produced on east is consumed whole on west, before the message
        sent after it (each chunk is an entry with the message's producer name and sequence id:
        the receiving broker must keep every chunk, not drop the second as a duplicate)."""
        consumer = self.client(self.west).subscribe(
            self.topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        producer = self.client(self.east).create_producer(self.topic, chunking_enabled=True,
                                                          batching_enabled=False)
        big = bytes(range(256)) * 1367            # 349,952 bytes
        producer.send(big)
        producer.send(b"after")
        received = []
        deadline = time.monotonic() + WAIT
        while len(received) < 2 and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            received.append(message.data())
            consumer.acknowledge(message)
        self.assertEqual([len(m) for m in received], [len(big), len(b"after")])
        self.assertEqual(received[0], big)

