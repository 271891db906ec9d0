"""
Fakes for the client's unit tests: a ``ClientConnection`` on a ``StringTransport`` whose written
frames a ``FakeBroker`` decodes, and which answers with frames built by the wire codec.
"""

from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import FrameDecoder, encode_command, encode_payload_command
from pulsar_twisted.client.connection import ClientConnection

T = api.BaseCommand


class FakeBroker:
    """The broker end of one ``ClientConnection``: reads what it wrote, feeds it answers."""

    def __init__(self, clock, handshake=True, **settings):
        self.clock = clock
        self.transport = StringTransport()
        self.cnx = ClientConnection(clock, **settings)
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.received = []   # (BaseCommand, message part) in order
        self.cnx.makeConnection(self.transport)
        if handshake:
            self.feed(T(type=T.CONNECTED, connected=api.CommandConnected(
                server_version="fake", protocol_version=21, max_message_size=5 * 1024 * 1024)))

    def read(self):
        """New frames the client wrote since the last call."""
        data = self.transport.value()
        self.transport.clear()
        frames = self.decoder.feed(data)
        self.received.extend(frames)
        return frames

    def commands(self, kind=None):
        return [c for c, _ in self.read() if kind is None or c.type == kind]

    def feed(self, cmd, message=None):
        frame = encode_payload_command(cmd, message) if message is not None else encode_command(cmd)
        self.cnx.dataReceived(frame)

    def lose(self):
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure
        self.cnx.connectionLost(Failure(ConnectionLost("gone")))

    # Answers ---------------------------------------------------------------------------
    def success(self, request_id):
        self.feed(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=request_id)))

    def producer_success(self, request_id, name="p-1", last_sequence_id=-1):
        self.feed(T(type=T.PRODUCER_SUCCESS, producer_success=api.CommandProducerSuccess(
            request_id=request_id, producer_name=name, last_sequence_id=last_sequence_id)))

    def receipt(self, producer_id, sequence_id, ledger_id=1, entry_id=0):
        self.feed(T(type=T.SEND_RECEIPT, send_receipt=api.CommandSendReceipt(
            producer_id=producer_id, sequence_id=sequence_id,
            message_id=api.MessageIdData(ledgerId=ledger_id, entryId=entry_id))))

    def message(self, consumer_id, message_part, ledger_id=1, entry_id=0, redelivery_count=0):
        self.feed(T(type=T.MESSAGE, message=api.CommandMessage(
            consumer_id=consumer_id, redelivery_count=redelivery_count,
            message_id=api.MessageIdData(ledgerId=ledger_id, entryId=entry_id))), message_part)


class FakeClient:
    """What producers and consumers need of ``Client``: a clock and connections by topic."""

    operation_timeout = 30.0

    def __init__(self, clock=None):
        self.clock = clock or task.Clock()
        self.brokers = []
        self.refuse = None

    def new_broker(self):
        broker = FakeBroker(self.clock)
        self.brokers.append(broker)
        return broker

    @property
    def broker(self):
        return self.brokers[-1]

    def connection_for(self, topic):
        if self.refuse is not None:
            return defer.fail(self.refuse)
        if not self.brokers or self.brokers[-1].cnx.state == "closed":
            self.new_broker()
        return defer.succeed(self.broker.cnx)

    def _forget(self, handle):
        pass


def start_subscribed(case, consumer):
    """
    Start ``consumer`` on ``case.client``'s broker: answer its SUBSCRIBE with success, check the start
    succeeded, then read what it wrote since, so that tests see only the frames that follow.
    """
    d = consumer.start()
    (sub,) = case.client.broker.commands(T.SUBSCRIBE)
    case.client.broker.success(sub.subscribe.request_id)
    case.successResultOf(d)
    case.client.broker.read()
    return consumer
