"""
Message parts whose metadata does not parse: the broker stores what a producer sent after a valid
checksum, so dispatch and publish must survive any bytes there. As Pulsar's dispatcher does, such
an entry goes out as one message without key (the consumer's client discards it), with a warning;
nothing raises out of a connection and the messages after it still flow.
"""

from twisted.logger import LogLevel, globalLogPublisher

from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import NON_PERSISTENT, FeatureCase, Sub, T, message, messages

#: Parts a verify_message check lets through (no checksum magic, or none to verify).
BAD_PARTS = (b"\x00", b"\x00\x00\x00\xffxx", b"\x00\x00\x00\x03\xff\xff\xff",
             b"\x0e\x02\x00\x00\x00\x09abc")


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

    def check_delivered(self, kind, topic=None):
        if topic is not None:
            self.topic = topic
        client = self.harness.client()
        self.subscribe(client, 7, kind=kind)
        client.commands()
        self.publish_bad_then_good(client)
        got = messages(client.received())
        self.assertEqual([m for _, m in got][-1], message(len(BAD_PARTS), b"good"))
        self.assertEqual([m for _, m in got][:-1], list(BAD_PARTS))
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(self.events.failures(), [])
        self.assertTrue(any("unreadable metadata" in e.get("log_format", "")
                            for e in self.events.warnings()))

    def test_exclusive(self):
        """Exclusive dispatch sends unreadable entries as they are, then the good one."""
        self.check_delivered(Sub.Exclusive)

    def test_shared(self):
        """Shared dispatch (which reads delivery times and chunk ids) does the same."""
        self.check_delivered(Sub.Shared)

    def test_key_shared(self):
        """Key_Shared routes an unreadable entry as keyless."""
        self.check_delivered(Sub.Key_Shared)

    def test_non_persistent_key_shared(self):
        """On a non-persistent topic the publish path itself routes, and must not raise."""
        self.check_delivered(Sub.Key_Shared, topic=NON_PERSISTENT)

    def test_chunk_with_deduplication(self):
        """A chunk whose metadata does not parse is stored and acknowledged like a last chunk
        (deduplication needs its chunk id), not an exception out of dataReceived."""
        client = self.harness.client()
        self.publish_bad_then_good(client, is_chunk=True)
        receipts = [c.send_receipt.sequence_id for c in client.commands(T.SEND_RECEIPT)]
        self.assertEqual(receipts, list(range(len(BAD_PARTS) + 1)))
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(self.events.failures(), [])
