"""A producer attached to a topic, as the broker sees it."""

from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.mledger.interfaces import ManagedLedgerError
from pulsar_twisted.proto import PulsarApi_pb2 as api


class Producer:
    """
    One producer of one connection on one topic. ``publish`` stores a message and answers the
    client: SEND_RECEIPT once the entry is durable, SEND_ERROR otherwise.
    """

    log = Logger()

    def __init__(self, topic, cnx, producer_id: int, name: str, access_mode: int = api.Shared,
                 user_provided_name: bool = False, metadata=None):
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.metadata = dict(metadata or {})
        self.last_sequence_id = -1
        self.msg_in = 0
        self.bytes_in = 0
        self.closed = False

    def publish(self, send, message: bytes):
        """Store ``message``; Deferred fires (always successfully) once the client is answered."""
        self.msg_in += send.num_messages
        self.bytes_in += len(message)
        sequence_id = send.sequence_id
        highest = send.highest_sequence_id if send.highest_sequence_id else sequence_id
        d = self.topic.publish(message, send.num_messages)
        d.addCallbacks(self._stored, self._failed, callbackArgs=(sequence_id, highest),
                       errbackArgs=(sequence_id,))
        return d

    def _stored(self, position, sequence_id, highest):
        if highest > self.last_sequence_id:
            self.last_sequence_id = highest
        if not self.closed:
            self.cnx.sender.send_receipt(self.producer_id, sequence_id, highest,
                                         position[0], position[1])

    def _failed(self, failure, sequence_id):
        if failure.check(errors.PulsarError):
            code, message = failure.value.code, str(failure.value)
        elif failure.check(ManagedLedgerError):
            code, message = api.PersistenceError, f"Failed to persist the message: {failure.value}"
        else:
            self.log.failure("publish on {topic} failed", failure, topic=self.topic.name)
            code, message = api.PersistenceError, "Failed to persist the message"
        if not self.closed:
            self.cnx.sender.send_send_error(self.producer_id, sequence_id, code, message)

    def close_by_broker(self):
        """Detach and tell the client (it reconnects and recreates the producer)."""
        self.closed = True
        self.cnx.producer_closed_by_broker(self)

    def stats(self) -> dict:
        return {"producerId": self.producer_id, "producerName": self.name,
                "address": self.cnx.peer, "clientVersion": self.cnx.client_version,
                "msgInCounter": self.msg_in, "bytesInCounter": self.bytes_in,
                "accessMode": api.ProducerAccessMode.Name(self.access_mode),
                "metadata": self.metadata}
