"""
A small harness for the messaging-feature tests (dedup, delayed delivery, access modes, batch
index acks, chunking): a BrokerHarness with config overrides and helpers speaking the wire
protocol through FakeClient.
"""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

T = api.BaseCommand
Sub = api.CommandSubscribe
TOPIC = "persistent://public/default/features"
NON_PERSISTENT = "non-persistent://public/default/features-np"


def message(seq, payload=None, producer="p", **fields):
    """A message part: MessageMetadata (``fields`` added to it) + payload."""
    meta = api.MessageMetadata(producer_name=producer, sequence_id=seq, publish_time=1000 + seq, **fields)
    return frames.encode_message(meta, payload if payload is not None else b"m%d" % seq)


def payloads(frames_list):
    return [frames.split_message(m)[1].decode() for c, m in frames_list if c.type == T.MESSAGE]


def messages(frames_list):
    return [(c, m) for c, m in frames_list if c.type == T.MESSAGE]


@defer.inlineCallbacks
def harness_with_producer(topic):
    """A started BrokerHarness and a client on it that sent PRODUCER for ``topic`` (producer id 1,
    request id 1); fires with ``(harness, client, the PRODUCER_SUCCESS commands it received)``."""
    harness = BrokerHarness()
    yield harness.start()
    client = harness.client()
    client.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=1)))
    return harness, client, client.commands(T.PRODUCER_SUCCESS)


class FeatureCase(unittest.TestCase):
    """``config`` (class attribute) overrides the broker's configuration keys."""

    config = {}
    topic = TOPIC

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(**self.config)
        yield self.harness.start()

    def restart(self):
        """A broker restart (kill -9 like) over the same storage; returns the new harness."""
        self.harness = self.harness.restart()
        return self.harness.start()

    @property
    def clock(self):
        return self.harness.clock

    def create_producer(self, client, producer_id=1, name=None, mode=api.Shared, epoch=None,
                        topic=None, request_id=None):
        request = api.CommandProducer(topic=topic or self.topic, producer_id=producer_id,
                                      request_id=request_id if request_id is not None else 100 + producer_id,
                                      producer_access_mode=mode)
        if name is not None:
            request.producer_name = name
            request.user_provided_producer_name = True
        if epoch is not None:
            request.topic_epoch = epoch
        client.send(T(type=T.PRODUCER, producer=request))
        return client.commands()

    def send(self, client, seq, producer_id=1, highest=None, num_messages=1, payload=None,
             is_chunk=False, **fields):
        """SEND one message part; returns the commands the client got back."""
        send = api.CommandSend(producer_id=producer_id, sequence_id=seq, num_messages=num_messages)
        if highest is not None:
            send.highest_sequence_id = highest
        if is_chunk:
            send.is_chunk = True
        client.send(T(type=T.SEND, send=send), message(seq, payload, **fields))
        return client.commands()

    def subscribe(self, client, consumer_id, kind=Sub.Exclusive, sub="s", permits=100,
                  initial=Sub.Earliest, topic=None, name=None):
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=topic or self.topic, subscription=sub, subType=kind, consumer_id=consumer_id,
            request_id=1000 + consumer_id, consumer_name=name or f"c{consumer_id}",
            initialPosition=initial)))
        if permits:
            client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))

    def ack(self, client, consumer_id, message_ids, cumulative=False):
        client.send(T(type=T.ACK, ack=api.CommandAck(
            consumer_id=consumer_id, message_id=message_ids,
            ack_type=api.CommandAck.Cumulative if cumulative else api.CommandAck.Individual)))

    def redeliver(self, client, consumer_id, message_ids=()):
        client.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                      redeliverUnacknowledgedMessages=api.CommandRedeliverUnacknowledgedMessages(
                          consumer_id=consumer_id, message_ids=list(message_ids))))

    def topic_object(self, name=None):
        return self.harness.broker.topics[name or self.topic]
