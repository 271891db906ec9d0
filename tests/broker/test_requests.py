"""The connection turns PRODUCER and SUBSCRIBE into plain requests (cnx.producer_request, ...)."""

from twisted.trial import unittest

from pulsar_twisted.broker.cnx import producer_request, subscribe_request
from pulsar_twisted.broker.requests import KeySharedMeta, SchemaSpec
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api

Sub = api.CommandSubscribe


class ProducerRequestTests(unittest.SynchronousTestCase):
    def test_absent_fields(self):
        """Fields the client did not send are "" / None, not protobuf defaults."""
        request = producer_request(api.CommandProducer(topic="t", producer_id=3, request_id=4))
        self.assertEqual((request.topic, request.producer_id, request.request_id), ("t", 3, 4))
        self.assertEqual((request.producer_name, request.user_provided_name), ("", False))
        self.assertEqual((request.topic_epoch, request.schema, request.initial_subscription),
                         (None, None, ""))
        self.assertEqual((request.access_mode, request.metadata), (api.Shared, {}))

    def test_all_fields(self):
        command = api.CommandProducer(
            topic="t", producer_id=1, request_id=2, producer_name="p", user_provided_producer_name=True,
            producer_access_mode=api.ExclusiveWithFencing, topic_epoch=7, initial_subscription_name="dlq",
            metadata=[api.KeyValue(key="k", value="v")],
            schema=api.Schema(name="s", schema_data=b"{}", type=api.Schema.Json,
                              properties=[api.KeyValue(key="a", value="b")]))
        request = producer_request(command)
        self.assertEqual((request.producer_name, request.user_provided_name), ("p", True))
        self.assertEqual((request.access_mode, request.topic_epoch), (api.ExclusiveWithFencing, 7))
        self.assertEqual((request.metadata, request.initial_subscription), ({"k": "v"}, "dlq"))
        self.assertEqual(request.schema, SchemaSpec(api.Schema.Json, b"{}", {"a": "b"}, "s"))

    def test_generated_name_is_not_user_provided(self):
        """user_provided_producer_name defaults to true on the wire: without a name it is false."""
        self.assertFalse(producer_request(api.CommandProducer(
            topic="t", producer_id=1, request_id=2)).user_provided_name)


class SubscribeRequestTests(unittest.SynchronousTestCase):
    def test_defaults(self):
        request = subscribe_request(Sub(topic="t", subscription="s", subType=Sub.Shared, consumer_id=1,
                                        request_id=2))
        self.assertEqual((request.sub_type, request.durable, request.force_topic_creation),
                         (Sub.Shared, True, True))
        self.assertEqual((request.initial_position, request.start_message_id, request.schema,
                          request.key_shared_meta), (Sub.Latest, None, None, None))

    def test_start_message_id_signed(self):
        """uint64 ids on the wire: earliest (-1, -1) arrives wrapped and is made signed again."""
        request = subscribe_request(Sub(
            topic="t", subscription="s", subType=Sub.Exclusive, consumer_id=1, request_id=2, durable=False,
            start_message_id=api.MessageIdData(ledgerId=(1 << 64) - 1, entryId=(1 << 64) - 1)))
        self.assertEqual(request.start_message_id, Position(-1, -1))
        self.assertFalse(request.durable)

    def test_key_shared_meta(self):
        request = subscribe_request(Sub(
            topic="t", subscription="s", subType=Sub.Key_Shared, consumer_id=1, request_id=2,
            keySharedMeta=api.KeySharedMeta(keySharedMode=api.STICKY, allowOutOfOrderDelivery=True,
                                            hashRanges=[api.IntRange(start=0, end=99)])))
        self.assertEqual(request.key_shared_meta, KeySharedMeta(api.STICKY, ((0, 99),), True))
