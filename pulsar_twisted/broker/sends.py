"""
The SEND side of one client connection (``cnx.ServerConnection``): each SEND checked and counted
in flight, and the SENDs of one read handed to their producers together.
"""

import struct

from twisted.logger import Logger

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import MAGIC_CRC32C, crc32c

_u32 = struct.Struct(">I").unpack_from
assert MAGIC_CRC32C == 0x0E01   # accept compares its two bytes


class ConnectionSends:
    """
    ``accept`` checks a SEND (its producer, its message, the message's checksum), answers the
    ones refused, and counts the others in flight: past ``max_pending`` the connection stops
    being read (``cnx.throttle``) until half of them are answered (``answered``), as Pulsar's
    maxPendingPublishRequestsPerConnection; their bytes count in the broker-wide publish buffer
    (publish_buffer.py). Consecutive accepted SENDs of one producer are gathered and handed to
    it in one ``Producer.publish_messages`` call (one call per layer of the publish path for
    them, not one per message) at the next ``flush``, which the connection makes before any
    other command and at the end of each read, so commands keep their order.
    """

    log = Logger()

    __slots__ = ("cnx", "max_pending", "pending", "_throttled", "_producer", "_run")

    def __init__(self, cnx, max_pending: int):
        self.cnx = cnx
        self.max_pending = max_pending
        #: SENDs accepted and not yet answered
        self.pending = 0
        self._throttled = False
        self._producer = None
        self._run = []

    def accept(self, send, message) -> None:
        """Check the SEND ``send`` (a CommandSend) carrying ``message``: refused (answered here,
        or dropped), or gathered for its producer. A refusal first hands over what was gathered
        and checks the SEND again: one at a time, the SENDs before it were answered first, and
        their fate may have closed its producer (a write failing at once), which drops it."""
        cnx = self.cnx
        producer_id = send.producer_id
        producer = cnx.producers.get(producer_id)
        if producer is None and producer_id in cnx.closed_producer_ids:
            # Sent before the client saw our CLOSE_PRODUCER: it resends them once it has
            # recreated the producer (a SEND_ERROR would make it drop the connection).
            return
        if producer is None:
            refusal = (api.NotAllowedError, "Producer not found")
        elif message is None:
            refusal = (api.NotAllowedError, "SEND without a message")
        # verify_message inline (the per-message checksum check): a CRC32C magic, then the CRC
        # of everything after the checksum field (over a copy: cheaper than a memoryview).
        elif (len(message) >= 6 and message[0] == 0x0E and message[1] == 0x01
                and crc32c(message[6:]) != _u32(message, 2)[0]):
            refusal = (api.ChecksumError, "Checksum failed on the broker")
        else:
            refusal = None
        if refusal is not None:
            if self._run:
                self.flush()
                self.accept(send, message)
                return
            if refusal[0] == api.ChecksumError:
                self.log.warn("{peer}: checksum mismatch on {topic} seq {seq}; message refused",
                              peer=cnx.peer, topic=producer.topic.name, seq=send.sequence_id)
            cnx.sender.send_send_error(producer_id, send.sequence_id, *refusal)
            return
        self.pending += 1
        if self.pending >= self.max_pending and not self._throttled:
            self._throttled = True
            cnx.throttle()
        # The broker-wide publish buffer (it may pause every connection's reads).
        cnx.service.publish_buffer.started(len(message))
        if producer is not self._producer:
            self.flush()
            self._producer = producer
        # The fields read once here: each read of a protobuf field builds a value.
        self._run.append((send.sequence_id, send.highest_sequence_id, send.num_messages,
                          send.is_chunk, message))

    def flush(self) -> None:
        """Hand the gathered SENDs to their producer."""
        producer, run = self._producer, self._run
        if not run:
            return
        self._producer, self._run = None, []
        try:
            producer.publish_messages(run)
        except Exception:
            cnx = self.cnx
            self.log.failure("{peer}: error handling {type}", peer=cnx.peer, type="SEND")
            cnx.sender.send_error(0, api.UnknownError, "Internal error handling the command")

    def answered(self, size: int, count: int = 1) -> None:
        """``count`` SENDs of ``size`` message bytes in all are settled (answered, or dropped by
        a closing producer)."""
        self.cnx.service.publish_buffer.finished(size)
        self.pending -= count
        if self._throttled and self.pending <= self.max_pending // 2:
            self._throttled = False
            self.cnx.unthrottle()
