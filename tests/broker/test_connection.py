"""The broker's connection handling: handshake, keep-alive, bad input, lookups."""

import struct

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker.cnx import ConnectionState
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.testing.patching import patch_method
from pulsar_twisted.wire import frames

T = api.BaseCommand


class ConnectionTests(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness()
        yield self.harness.start()

    def test_states(self):
        """START until CONNECT is accepted, then CONNECTED, CLOSED once lost."""
        from pulsar_twisted.testing.broker import FakeClient
        c = FakeClient(self.harness, 1)
        self.assertIs(c.protocol.state, ConnectionState.START)
        self.assertIsNone(c.protocol.role)      # declared before any authentication
        c.connect()
        self.assertIs(c.protocol.state, ConnectionState.CONNECTED)
        c.protocol.connectionLost(None)
        self.assertIs(c.protocol.state, ConnectionState.CLOSED)

    def test_features_built_with_the_broker(self):
        """The schema registry and the compactor belong to BrokerService from its construction."""
        from pulsar_twisted.broker.compaction import Compactor
        from pulsar_twisted.broker.schema import SchemaRegistry
        broker = self.harness.broker
        self.assertIsInstance(broker.schema_registry, SchemaRegistry)
        self.assertIsInstance(broker.compactor, Compactor)

    def test_ping_answered(self):
        """A client's PING gets a PONG."""
        c = self.harness.client()
        c.send(T(type=T.PING, ping=api.CommandPing()))
        self.assertEqual([x.type for x in c.commands()], [T.PONG])

    def test_protocol_version_negotiated(self):
        """CONNECTED answers min(client's, ours) and advertises maxMessageSize."""
        from pulsar_twisted.testing.broker import FakeClient
        c = FakeClient(self.harness, 1)
        c.send(T(type=T.CONNECT, connect=api.CommandConnect(client_version="old", protocol_version=6)))
        [connected] = c.commands(T.CONNECTED)
        self.assertEqual(connected.connected.protocol_version, 6)
        self.assertEqual(connected.connected.max_message_size, 5 * 1024 * 1024)

    def test_command_before_connect_closes(self):
        from pulsar_twisted.testing.broker import FakeClient
        c = FakeClient(self.harness, 2)
        c.send(T(type=T.PING, ping=api.CommandPing()))
        self.assertTrue(c.transport.disconnecting)

    def test_malformed_frame_closes_only_that_connection(self):
        """Garbage closes the sender's connection with a log line; others keep working."""
        bad, good = self.harness.client(), self.harness.client()
        bad.send_raw(struct.pack(">II", 7, 3) + b"\xff\xff\xff")
        self.assertTrue(bad.transport.disconnecting)
        self.assertEqual(len(self.flushLoggedErrors()), 0)
        good.send(T(type=T.PING, ping=api.CommandPing()))
        self.assertEqual([x.type for x in good.commands()], [T.PONG])

    def test_too_long_frame_closes(self):
        c = self.harness.client()
        c.send_raw(struct.pack(">I", 5 * 1024 * 1024 + frames.FRAME_PADDING + 1))
        self.assertTrue(c.transport.disconnecting)

    def test_unknown_command_gets_error(self):
        """A command we do not implement is answered with ERROR, and the connection stays."""
        c = self.harness.client()
        c.send(T(type=T.NEW_TXN, newTxn=api.CommandNewTxn(request_id=9)))
        [error] = c.commands(T.ERROR)
        self.assertEqual(error.error.request_id, 9)
        self.assertFalse(c.transport.disconnecting)

    def test_keep_alive_ping_and_close(self):
        """Silent clients are pinged after keepAliveIntervalSeconds and dropped if still silent."""
        c = self.harness.client()
        self.harness.clock.advance(30)
        self.assertEqual([x.type for x in c.commands()], [T.PING])
        self.harness.clock.advance(30)
        self.assertTrue(c.transport.disconnecting)

    def test_pong_keeps_connection(self):
        c = self.harness.client()
        self.harness.clock.advance(30)
        c.received()
        c.send(T(type=T.PONG, pong=api.CommandPong()))
        self.harness.clock.advance(30)
        self.assertFalse(c.transport.disconnecting)

    def test_lookup_points_at_itself(self):
        c = self.harness.client()
        c.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="my-topic", request_id=3)))
        [r] = c.commands(T.LOOKUP_RESPONSE)
        r = r.lookupTopicResponse
        self.assertEqual((r.request_id, r.response, r.authoritative, r.brokerServiceUrl),
                         (3, api.CommandLookupTopicResponse.Connect, True, "pulsar://localhost:6650"))

    def test_lookup_unknown_namespace_fails(self):
        c = self.harness.client()
        c.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="nope/ns/t", request_id=4)))
        [r] = c.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(r.lookupTopicResponse.response, api.CommandLookupTopicResponse.Failed)
        self.assertEqual(r.lookupTopicResponse.error, api.TopicNotFound)

    def test_lookup_invalid_name(self):
        c = self.harness.client()
        c.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="ftp://x/y/z", request_id=5)))
        [r] = c.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(r.lookupTopicResponse.error, api.InvalidTopicName)

    def test_lost_metadata_session_answers_service_not_ready(self):
        """A lookup or partitioned-metadata request that meets an expired metadata session fails with
        ServiceNotReady (retried by clients), not UnknownError (which fails them for good)."""
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
        lost = lambda *a, **k: defer.fail(MetadataUnavailableError("zookeeper: SessionExpiredError: "))
        self.patch(self.harness.broker, "lookup", lost)
        self.patch(self.harness.broker, "partitioned_metadata", lost)
        c = self.harness.client()
        c.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="my-topic", request_id=8)))
        [r] = c.commands(T.LOOKUP_RESPONSE)
        self.assertEqual((r.lookupTopicResponse.response, r.lookupTopicResponse.error),
                         (api.CommandLookupTopicResponse.Failed, api.ServiceNotReady))
        c.send(T(type=T.PARTITIONED_METADATA,
                 partitionMetadata=api.CommandPartitionedTopicMetadata(topic="t", request_id=9)))
        [r] = c.commands(T.PARTITIONED_METADATA_RESPONSE)
        self.assertEqual(r.partitionMetadataResponse.error, api.ServiceNotReady)

    def test_partitioned_metadata_of_plain_topic_is_zero(self):
        c = self.harness.client()
        c.send(T(type=T.PARTITIONED_METADATA,
                 partitionMetadata=api.CommandPartitionedTopicMetadata(topic="t", request_id=6)))
        [r] = c.commands(T.PARTITIONED_METADATA_RESPONSE)
        self.assertEqual((r.partitionMetadataResponse.request_id, r.partitionMetadataResponse.partitions), (6, 0))

    @defer.inlineCallbacks
    def test_partition_like_names_and_auto_created_partitions(self):
        """With partitioned auto-creation, "t-partition-12345678" is partition 12345678 of "t"
        (a plain topic: 0, as Pulsar answers a partition's name) but "t-partition-01234567" is
        an ordinary name (Pulsar's rule: no leading zero) and gets defaultNumPartitions."""
        harness = BrokerHarness(allowAutoTopicCreationType="partitioned", defaultNumPartitions=4)
        yield harness.start()
        c = harness.client()
        for request_id, (topic, partitions) in enumerate(
                (("t-partition-12345678", 0), ("t-partition-01234567", 4), ("t", 4)), 20):
            c.send(T(type=T.PARTITIONED_METADATA, partitionMetadata=api.CommandPartitionedTopicMetadata(
                topic=topic, request_id=request_id)))
            [r] = c.commands(T.PARTITIONED_METADATA_RESPONSE)
            self.assertEqual((r.partitionMetadataResponse.request_id, r.partitionMetadataResponse.partitions),
                             (request_id, partitions), topic)

    @defer.inlineCallbacks
    def test_partitioned_metadata_of_partitioned_topic(self):
        from pulsar_twisted.common.naming import parse_topic
        yield self.harness.broker.create_partitioned_topic(parse_topic("pt"), 4)
        c = self.harness.client()
        c.send(T(type=T.PARTITIONED_METADATA,
                 partitionMetadata=api.CommandPartitionedTopicMetadata(topic="pt", request_id=7)))
        [r] = c.commands(T.PARTITIONED_METADATA_RESPONSE)
        self.assertEqual(r.partitionMetadataResponse.partitions, 4)


class SendFastPathTests(unittest.TestCase):
    """SEND skips the dispatch table (cnx.dataReceived): the rules of _dispatch still hold."""

    @defer.inlineCallbacks
    def setUp(self):
        from tests.broker.messaging import harness_with_producer
        self.harness, self.client, answers = yield harness_with_producer("persistent://public/default/fast")
        self.assertEqual([a.type for a in answers], [T.PRODUCER_SUCCESS])

    def send_frames(self, n, first=0):
        from tests.broker.messaging import message
        return b"".join(frames.encode_payload_command(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=first + i)), message(first + i))
            for i in range(n))

    def test_many_sends_in_one_chunk_answered_in_order(self):
        """Frames of one read are all dispatched, receipts in sequence order."""
        self.client.send_raw(self.send_frames(20))
        receipts = [c.send_receipt for c in self.client.commands(T.SEND_RECEIPT)]
        self.assertEqual([r.sequence_id for r in receipts], list(range(20)))
        self.assertEqual([r.message_id.entryId for r in receipts], list(range(20)))

    def test_send_before_connect_closes(self):
        """A SEND on a connection that has not CONNECTed closes it, as any other command."""
        from pulsar_twisted.testing.broker import FakeClient
        c = FakeClient(self.harness, 3)
        c.send_raw(self.send_frames(1))
        self.assertTrue(c.transport.disconnecting)
        self.assertEqual(c.commands(), [])

    def test_error_in_send_answered_and_connection_kept(self):
        """An exception while handing a read's SENDs to their producer is logged and answered with
        ERROR; the connection stays, and the SENDs of the next read are handled."""
        cnx = self.client.protocol
        producer = cnx.producers[1]
        real, calls = producer.publish_messages, []

        def once_broken(sends):
            calls.append(sends)
            if len(calls) == 1:
                raise RuntimeError("boom")
            real(sends)

        patch_method(self, producer, "publish_messages", once_broken)
        self.client.send_raw(self.send_frames(2))
        self.client.send_raw(self.send_frames(1, first=2))
        replies = self.client.commands()
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual([len(sends) for sends in calls], [2, 1])
        self.assertEqual([c.type for c in replies], [T.ERROR, T.SEND_RECEIPT])
        self.assertEqual(replies[0].error.error, api.UnknownError)
        self.assertEqual(replies[1].send_receipt.sequence_id, 2)
        self.assertFalse(self.client.transport.disconnecting)

    def test_sends_of_one_read_handed_over_together(self):
        """Consecutive SENDs of one producer in one read reach it in one ``publish_messages``
        call; another command between them splits the run, and commands keep their order."""
        producer = self.client.protocol.producers[1]
        real, calls = producer.publish_messages, []

        def recording(sends):
            calls.append([send[0] for send in sends])
            real(sends)

        patch_method(self, producer, "publish_messages", recording)
        ping = frames.encode_command(T(type=T.PING, ping=api.CommandPing()))
        self.client.send_raw(self.send_frames(3) + ping + self.send_frames(2, first=3))
        self.assertEqual(calls, [[0, 1, 2], [3, 4]])
        # (This harness's storage answers at once: the first run's receipts precede the PONG.)
        replies = self.client.commands()
        self.assertEqual([c.type for c in replies], [T.SEND_RECEIPT] * 3 + [T.PONG] + [T.SEND_RECEIPT] * 2)
        self.assertEqual([c.send_receipt.sequence_id for c in replies if c.type == T.SEND_RECEIPT],
                         list(range(5)))

    def test_receipts_of_publishes_stored_together_in_one_write(self):
        """Publishes the topic reports stored together are answered with one write of their
        receipts, in order, and all settled (the connection's in-flight count drops by all)."""
        cnx = self.client.protocol
        producer = cnx.producers[1]
        handed = []
        patch_method(self, producer.topic, "publish_all",
                     lambda messages, counts, publisher, ctxs: handed.append((publisher, ctxs)))
        self.client.send_raw(self.send_frames(3))
        [(publisher, answers)] = handed
        self.assertIs(publisher, producer)
        self.assertEqual(cnx.sends.pending, 3)
        writes, real = [], cnx.sender._out.write
        patch_method(self, cnx.sender._out, "write", lambda data: writes.append(data) or real(data))
        producer.adds_complete([Position(9, i) for i in range(3)], answers)
        self.assertEqual(len(writes), 1)
        receipts = [c.send_receipt for c in self.client.commands(T.SEND_RECEIPT)]
        self.assertEqual([(r.sequence_id, r.message_id.entryId) for r in receipts], [(i, i) for i in range(3)])
        self.assertEqual((cnx.sends.pending, producer.pending), (0, 0))

    def test_refusal_at_accept_answered_after_earlier_sends_of_the_read(self):
        """A SEND refused as it is read (bad checksum, no message part) is answered after the
        SENDs before it in the same read, as one SEND at a time: here storage answers at once,
        so the receipt of 0 precedes the ChecksumError of 1 and the error of 3 follows 2's receipt."""
        from tests.broker.messaging import message
        bad = bytearray(message(1))
        bad[-1] ^= 0xFF
        self.client.send_raw(
            self.send_frames(1)
            + frames.encode_payload_command(
                T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=1)), bytes(bad))
            + self.send_frames(1, first=2)
            + frames.encode_command(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=3)))
            + self.send_frames(1, first=4))
        replies = self.client.commands()
        self.assertEqual([(c.type, c.send_receipt.sequence_id if c.type == T.SEND_RECEIPT
                           else c.send_error.sequence_id) for c in replies],
                         [(T.SEND_RECEIPT, 0), (T.SEND_ERROR, 1), (T.SEND_RECEIPT, 2),
                          (T.SEND_ERROR, 3), (T.SEND_RECEIPT, 4)])
        self.assertEqual(replies[1].send_error.error, api.ChecksumError)

    def test_checksum_of_a_message_without_the_magic_not_checked(self):
        """A message part without the CRC32C magic (very old clients) is stored unchecked, as
        verify_message does."""
        meta = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1).SerializeToString()
        old = struct.pack(">I", len(meta)) + meta + b"payload"
        self.client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=0)), old)
        [receipt] = self.client.commands(T.SEND_RECEIPT)
        self.assertEqual(receipt.send_receipt.sequence_id, 0)

    def test_fields_given_to_the_producer(self):
        """The producer gets the SEND's ids, count and chunk flag (highest id 0 when unset)."""
        from tests.broker.messaging import message
        got = []
        patch_method(self, self.client.protocol.producers[1], "publish_messages",
                     lambda sends: got.extend(send[:4] for send in sends))
        self.client.send(T(type=T.SEND, send=api.CommandSend(
            producer_id=1, sequence_id=5, highest_sequence_id=9, num_messages=4, is_chunk=True)), message(5))
        self.client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=6)), message(6))
        self.assertEqual(got, [(5, 9, 4, True), (6, 0, 1, False)])
