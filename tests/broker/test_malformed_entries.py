"""
Message parts whose metadata does not parse: the broker stores what a producer sent after a valid
checksum without parsing it (as Pulsar's publish path does), so dispatch and publish must survive
any bytes there. On a persistent topic, as Pulsar's AbstractBaseDispatcher.filterEntriesForConsumer
does ("message metadata was corrupted"), such an entry is never sent: it is acknowledged on behalf
of the subscription, counted and logged once per topic, so no backlog is left behind (issue 12).
A non-persistent topic stores nothing: there the entry goes out as one keyless message. Nothing
raises out of a connection and the messages after it still flow.
"""

import struct

from twisted.logger import LogLevel, globalLogPublisher

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import MAGIC_CRC32C, crc32c
from tests.broker.messaging import NON_PERSISTENT, FeatureCase, Sub, T, message, messages


def checksummed(metadata: bytes, payload: bytes = b"payload") -> bytes:
    """A message part with the right sizes and a correct CRC32C around bytes that are no protobuf."""
    rest = struct.pack(">I", len(metadata)) + metadata + payload
    return struct.pack(">HI", MAGIC_CRC32C, crc32c(rest)) + rest


#: Parts a verify_message check lets through (no checksum magic, or none to verify, or a right one).
BAD_PARTS = (b"\x00", b"\x00\x00\x00\xffxx", b"\x00\x00\x00\x03\xff\xff\xff",
             b"\x0e\x02\x00\x00\x00\x09abc", checksummed(b"\xff\xff\xff\xff\x0f"))


class _Events:
    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append(event)

    def failures(self):
        return [e for e in self.events if e.get("log_failure") is not None or e.get("isError")]

    def warnings(self):
        return [e for e in self.events if e.get("log_level") == LogLevel.warn]


class MalformedEntryTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    def setUp(self):
        d = super().setUp()
        self.events = _Events()
        globalLogPublisher.addObserver(self.events)
        self.addCleanup(globalLogPublisher.removeObserver, self.events)
        return d

    def publish_bad_then_good(self, client, is_chunk=False):
        self.create_producer(client)
        for seq, bad in enumerate(BAD_PARTS):
            client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=seq,
                                                            num_messages=1, is_chunk=is_chunk)), bad)
        client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=len(BAD_PARTS))),
                    message(len(BAD_PARTS), b"good"))

    def check_skipped(self, kind):
        """Only the good message arrives; once it is acked the backlog is 0; counted, logged once."""
        client = self.harness.client()
        self.subscribe(client, 7, kind=kind)
        self.clock.advance(1.0)     # Failover delivers after activeConsumerFailoverDelayTimeMillis
        client.commands()
        self.publish_bad_then_good(client)
        got = messages(client.received())
        self.assertEqual([m for _, m in got], [message(len(BAD_PARTS), b"good")])
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(self.events.failures(), [])
        subscription = self.topic_object().subscriptions["s"]
        self.assertEqual(subscription.unreadable_skipped, len(BAD_PARTS))
        self.assertEqual(subscription.stats()["unreadableEntriesSkipped"], len(BAD_PARTS))
        self.assertEqual(subscription.backlog(), 1)
        self.ack(client, 7, [got[0][0].message.message_id])
        self.clock.advance(0)
        self.assertEqual(subscription.backlog(), 0)
        logged = [e for e in self.events.warnings() if "unreadable metadata" in e.get("log_format", "")
                  and "skipped and acknowledged" in e["log_format"]]
        self.assertEqual(len(logged), 1)
        self.assertEqual(self.topic_object().unreadable_entries, len(BAD_PARTS))

    def test_exclusive(self):
        """Exclusive dispatch skips and acknowledges unreadable entries, then sends the good one."""
        self.check_skipped(Sub.Exclusive)

    def test_shared(self):
        """Shared dispatch (which reads delivery times and chunk ids) does the same: no backlog of 1."""
        self.check_skipped(Sub.Shared)

    def test_key_shared(self):
        """Key_Shared skips them before routing."""
        self.check_skipped(Sub.Key_Shared)

    def test_failover(self):
        """Failover, the other single-active-consumer type, too."""
        self.check_skipped(Sub.Failover)

    def test_already_stored_skipped_on_restart(self):
        """Entries stored before (a subscription created later, after a restart) are skipped too."""
        client = self.harness.client()
        self.publish_bad_then_good(client)
        self.successResultOf(self.restart())
        client = self.harness.client()
        self.subscribe(client, 9, kind=Sub.Shared, initial=Sub.Earliest)
        got = messages(client.received())
        self.assertEqual([m for _, m in got], [message(len(BAD_PARTS), b"good")])

    def test_non_persistent_key_shared(self):
        """On a non-persistent topic the publish path itself routes, and must not raise; nothing is
        stored, so the entry goes out as one keyless message."""
        self.topic = NON_PERSISTENT
        client = self.harness.client()
        self.subscribe(client, 7, kind=Sub.Key_Shared)
        client.commands()
        self.publish_bad_then_good(client)
        got = messages(client.received())
        self.assertEqual([m for _, m in got][-1], message(len(BAD_PARTS), b"good"))
        self.assertEqual([m for _, m in got][:-1], list(BAD_PARTS))
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(self.events.failures(), [])

    def test_chunk_with_deduplication(self):
        """A chunk whose metadata does not parse is stored and acknowledged like a last chunk
        (deduplication needs its chunk id), not an exception out of dataReceived."""
        client = self.harness.client()
        self.publish_bad_then_good(client, is_chunk=True)
        receipts = [c.send_receipt.sequence_id for c in client.commands(T.SEND_RECEIPT)]
        self.assertEqual(receipts, list(range(len(BAD_PARTS) + 1)))
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(self.events.failures(), [])
