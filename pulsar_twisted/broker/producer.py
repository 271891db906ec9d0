"""A producer attached to a topic, as the broker sees it."""

from types import MappingProxyType

from twisted.logger import Logger

from pulsar_twisted.broker import dedup as dedup_states
from pulsar_twisted.broker import replication
from pulsar_twisted.broker.entryinfo import lenient_metadata
from pulsar_twisted.broker.rates import RateMeter
from pulsar_twisted.common import errors
from pulsar_twisted.mledger.interfaces import ManagedLedgerError
from pulsar_twisted.mledger.ledger import ManagedLedgerTerminatedError
from pulsar_twisted.proto import PulsarApi_pb2 as api


_NO_METADATA = MappingProxyType({})


class TopicFencedError(errors.ServiceNotReady):
    """The topic is fenced after a write failure (topic.PersistentTopic.fence): retry later."""


def is_last_chunk(metadata) -> bool:
    return metadata.chunk_id >= metadata.num_chunks_from_msg - 1


class _Answer:
    """What answering one publish needs (its ctx in ``topic.publish_all``)."""

    __slots__ = ("sequence_id", "highest", "counted", "size", "original", "chunk")

    def __init__(self, sequence_id, highest, counted, size, original=None, chunk=None):
        self.sequence_id = sequence_id
        self.highest = highest
        self.counted = counted
        self.size = size
        #: A replicated message's ``(producer name, highest sequence id)`` from its metadata,
        #: which deduplication records instead of the SEND's; None for any other message.
        self.original = original
        #: A chunk other than the last of its message: ``(producer name, sequence id, chunk id)``
        #: as deduplication knows it; else None.
        self.chunk = chunk


class Producer:
    """
    One producer of one connection on one topic. ``publish`` stores a message and answers the
    client: SEND_RECEIPT once the entry is durable, SEND_ERROR otherwise.
    """

    log = Logger()
    #: Another cluster's replicator (``ReplicationProducer``): its messages keep their own
    #: producer's name and sequence id, and may be markers.
    from_replicator = False

    #: How long a broker-side close waits for the publishes in flight before it sends
    #: CLOSE_PRODUCER anyway. Answering them first spares the client resends, but a close must
    #: not hang on storage (Pulsar disconnects at once): the client resends what is unanswered
    #: and deduplication answers what was stored.
    close_grace_seconds = 5.0

    # Slots (issue 14: memory per loaded topic), without ``__dict__`` (32 bytes more per instance;
    # tests stub a method with ``testing.patching.patch_method``).
    __slots__ = ("topic", "cnx", "producer_id", "name", "access_mode", "user_provided_name", "metadata",
                 "schema_version", "last_sequence_id", "topic_epoch", "msg_in",
                 "bytes_in", "rates", "closed", "pending", "closing", "_close_call",
                 "connected_since", "__weakref__")

    def __init__(self, topic, cnx, producer_id: int, name: str, access_mode: int = api.Shared,
                 user_provided_name: bool = False, metadata=None, schema_version: bytes = b""):
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        # No dict per producer without metadata (most): a shared empty mapping (issue 14).
        self.metadata = dict(metadata) if metadata else _NO_METADATA
        #: The schema version it publishes with (LongSchemaVersion bytes, b"" for none), answered
        #: in PRODUCER_SUCCESS and again to a retried create.
        self.schema_version = schema_version
        self.last_sequence_id = -1
        #: Topic epoch answered in PRODUCER_SUCCESS (exclusive access modes), or None.
        self.topic_epoch = None
        self.msg_in = 0
        self.bytes_in = 0
        #: Rates of (msg_in, bytes_in) over the last stats period.
        self.rates = RateMeter(2)
        self.closed = False
        #: When it was created (ISO 8601, set by the topic): PublisherStats' connectedSince.
        self.connected_since = ""
        #: Publishes stored-or-failed not yet answered; a broker-side close waits for them.
        self.pending = 0
        self.closing = False
        self._close_call = None

    @property
    def refuse_chunks(self) -> bool:
        """Chunks cannot be reassembled from a topic that stores nothing (Pulsar refuses them).
        Asked only of chunks: not a slot (a 176-byte block instead of 192 per producer, issue 14)."""
        return not self.topic.topic_name.persistent

    def publish(self, send, message: bytes) -> None:
        """Store ``message`` (sent with the CommandSend ``send``) and answer the client
        (SEND_RECEIPT or SEND_ERROR); then, or at once when it is not stored,
        ``cnx.publish_answered(len(message))``."""
        self.publish_message(send.sequence_id, send.highest_sequence_id, send.num_messages,
                             send.is_chunk, message)

    def publish_message(self, sequence_id: int, highest_sequence_id: int, num_messages: int,
                        is_chunk: bool, message: bytes) -> None:
        """``publish`` with the CommandSend's fields (the connection reads each once)."""
        self.publish_messages(((sequence_id, highest_sequence_id, num_messages, is_chunk, message),))

    def publish_messages(self, sends) -> None:
        """``publish_message`` of each of ``sends``, ``(sequence_id, highest_sequence_id,
        num_messages, is_chunk, message)`` tuples, in order (the SENDs of one read): the topic
        gets what is to be stored in one call (``topic.publish_all``). Every answer given here at
        once (a duplicate, a refusal) first hands over what was gathered, and a topic that refuses
        publishes gets them one at a time, so answers keep their order and a refusal that closes
        this producer decides the next publish's fate as it would have alone."""
        topic = self.topic
        publish_all = getattr(topic, "publish_all", None)
        messages, counts, answers = [], [], []
        for sequence_id, highest_sequence_id, num_messages, is_chunk, message in sends:
            size = len(message)
            if self.closing or self.closed:
                # The broker is closing this producer (CLOSE_PRODUCER sent or about to be): the
                # client resends every unacknowledged message once it has reconnected. Storing this
                # one could put it after a message that failed; a SEND_ERROR would make the official
                # client drop its whole connection. So: neither stored nor answered.
                self.cnx.publish_answered(size)
                continue
            metadata = lenient_metadata(message) if self.from_replicator else None
            if metadata is not None and metadata.HasField("marker_type"):
                # Another cluster's marker (replicated_subscriptions.py): stored as it is, never
                # deduplicated (every marker is "pulsar.marker" with sequence id 0) and not
                # counted as published data (a snapshot starts only after data).
                self.pending += 1
                messages.append(message)
                counts.append(0)
                answers.append(_Answer(sequence_id, highest_sequence_id or sequence_id, False, size))
                if publish_all is None or topic.closed or topic.fenced:
                    self._hand_over(publish_all, messages, counts, answers)
                continue
            self.msg_in += num_messages
            self.bytes_in += size
            topic.counters.published(num_messages, size, is_chunk)
            highest = highest_sequence_id if highest_sequence_id else sequence_id
            if is_chunk and self.refuse_chunks:
                self._hand_over(publish_all, messages, counts, answers)
                self.log.info("{topic}: chunked message from {producer} refused (non-persistent topic)",
                              topic=topic.name, producer=self.name)
                self.cnx.sender.send_send_error(self.producer_id, sequence_id, api.NotAllowedError,
                                                "Chunked messages are not supported on non-persistent topics")
                self.cnx.publish_answered(size)
                continue
            dedup = topic.dedup
            counted = True
            original = None
            chunk = None
            if dedup is not None:
                name, dedup_id, dedup_highest = self.name, sequence_id, highest
                if metadata is not None:
                    # Another cluster's replicator: the message keeps its producer's name and
                    # sequence id, and those are what deduplicate it (Pulsar does the same), so
                    # that a message the replicator sends again, or one that reached this cluster
                    # by two routes, is stored once. (A batch's highest is its last member's.)
                    name, dedup_id = metadata.producer_name, metadata.sequence_id
                    dedup_highest = max(dedup_id, metadata.highest_sequence_id)
                    original = (name, dedup_highest)
                if is_chunk:
                    if metadata is None:
                        metadata = lenient_metadata(message)
                    counted = is_last_chunk(metadata)
                    if not counted:
                        chunk = (name, dedup_id, metadata.chunk_id)
                status = (dedup.check(name, dedup_id, dedup_highest) if counted
                          else dedup.check_chunk(name, dedup_id, metadata.chunk_id))
                if status != dedup_states.NOT_DUP:
                    self._hand_over(publish_all, messages, counts, answers)
                    self._answer_duplicate(status, sequence_id, highest)
                    self.cnx.publish_answered(size)
                    continue
            self.pending += 1
            messages.append(message)
            counts.append(num_messages)
            answers.append(_Answer(sequence_id, highest, counted, size, original, chunk))
            if publish_all is None or topic.closed or topic.fenced:
                self._hand_over(publish_all, messages, counts, answers)
        self._hand_over(publish_all, messages, counts, answers)

    def _hand_over(self, publish_all, messages, counts, answers) -> None:
        """Publish the gathered ``messages`` (emptying the lists): ``publish_all``, the topic's
        (again for those it did not take, unless the failure of one it took closed this
        producer), or one ``topic.publish`` each for a topic without it."""
        if not messages:
            return
        if publish_all is not None:
            start, total = 0, len(messages)
            while start < total:
                if start and (self.closing or self.closed):
                    # One of them failed at once and that closed this producer: as one at a
                    # time, the ones after it are dropped (``publish_messages``), unanswered.
                    self._settle(sum(answer.size for answer in answers[start:]), total - start)
                    break
                taken = publish_all(messages[start:], counts[start:], self, answers[start:])
                if taken is None:   # (a topic that takes them all says nothing)
                    break
                start += taken
        else:
            for message, count, answer in zip(messages, counts, answers):
                self.topic.publish(message, count).addCallbacks(
                    lambda position, answer=answer: self.adds_complete((position,), (answer,)),
                    self.add_failed, errbackArgs=(answer,))
        del messages[:], counts[:], answers[:]

    # The topic's publisher (``publish_all``), each publish's _Answer its ctx.
    def adds_complete(self, positions, answers) -> None:
        """These publishes are stored, in order: receipts (one write for them), then settling;
        an exception is logged, as a Deferred would have kept it."""
        try:
            try:
                dedup = self.topic.dedup
                receipts = []
                for position, answer in zip(positions, answers):
                    highest = answer.highest
                    if highest > self.last_sequence_id:
                        self.last_sequence_id = highest
                    if dedup is not None and answer.counted:
                        original = answer.original
                        if original is None:
                            dedup.persisted(self.name, highest, position)
                        else:
                            dedup.persisted(original[0], original[1], position)
                    elif dedup is not None and answer.chunk is not None:
                        dedup.chunk_persisted(*answer.chunk)
                    receipts.append((answer.sequence_id, highest, position[0], position[1]))
                if not self.closed:
                    self.cnx.sender.send_receipts(self.producer_id, receipts)
            finally:
                self._settle(sum(answer.size for answer in answers), len(answers))
        except Exception:
            self.log.failure("answering a publish on {topic} failed", topic=self.topic.name)

    def add_failed(self, failure, answer) -> None:
        """This publish failed: the error (or none, ``_failed``), then settling."""
        try:
            try:
                self._failed(failure, answer.sequence_id)
            finally:
                self._settle(answer.size)
        except Exception:
            self.log.failure("answering a publish on {topic} failed", topic=self.topic.name)

    def _settle(self, size, count=1):
        """``count`` publishes of ``size`` bytes in all answered (or failed): a close waiting for
        them may finish; the connection counts them."""
        self.pending -= count
        if self.closing and not self.pending:
            self._finish_close()
        self.cnx.publish_answered(size, count)

    def _answer_duplicate(self, status, sequence_id, highest) -> None:
        """Answer a publish deduplication did not let through (``dedup`` module docstring)."""
        if status == dedup_states.DUP:
            # Pulsar's answer to a known duplicate: a receipt with message id -1:-1, nothing stored.
            self.cnx.sender.send_receipt(self.producer_id, sequence_id, highest, -1, -1)
        else:
            self.cnx.sender.send_send_error(
                self.producer_id, sequence_id, api.PersistenceError,
                "Cannot determine whether the message is a duplicate at this time")

    def _failed(self, failure, sequence_id):
        if failure.check(ManagedLedgerTerminatedError):
            code, message = api.TopicTerminatedError, f"Topic was terminated: {failure.value}"
        elif failure.check(errors.PulsarError) and not failure.check(TopicFencedError):
            code, message = failure.value.code, str(failure.value)
        else:
            # The write failed and the topic fenced itself (PersistentTopic.fence): this producer
            # is being closed and the client resends after reconnecting, in order. No SEND_ERROR
            # (the official client drops its connection on one); no dedup change either: the
            # topic resets the pushed ids once every write in flight is done.
            if not failure.check(ManagedLedgerError, TopicFencedError):
                self.log.failure("publish on {topic} failed", failure, topic=self.topic.name)
            if not (self.closing or self.closed):
                self.topic.evict_producer(self)
            return
        if not self.closed:
            self.cnx.sender.send_send_error(self.producer_id, sequence_id, code, message)

    def close_by_broker(self):
        """
        Detach and tell the client (it reconnects and recreates the producer). As Pulsar's
        producer close, publishes already in flight are answered first: their receipts go out,
        then CLOSE_PRODUCER, so the client does not resend (and duplicate) stored messages.
        """
        if self.closed or self.closing:
            return
        self.closing = True
        if not self.pending:
            self._finish_close()
        else:
            self._close_call = self.topic.clock.callLater(self.close_grace_seconds, self._close_overdue)

    def _close_overdue(self):
        self._close_call = None
        self.log.warn("{topic}: producer {producer} closed with {n} publishes still in flight "
                      "after {s} s", topic=self.topic.name, producer=self.name, n=self.pending,
                      s=self.close_grace_seconds)
        self._finish_close()

    def _finish_close(self):
        if self._close_call is not None and self._close_call.active():
            self._close_call.cancel()
        self._close_call = None
        self.closing = False
        self.closed = True
        self.cnx.producer_closed_by_broker(self)

    def sample_rates(self, period) -> None:
        self.rates.sample(period, self.msg_in, self.bytes_in)

    def stats(self) -> dict:
        rate, throughput, size = self.rates.rate_and_size()
        return {"producerId": self.producer_id, "producerName": self.name,
                "msgRateIn": rate, "msgThroughputIn": throughput, "averageMsgSize": size,
                "address": self.cnx.peer, "connectedSince": self.connected_since,
                "clientVersion": self.cnx.client_version,
                "msgInCounter": self.msg_in, "bytesInCounter": self.bytes_in,
                "accessMode": api.ProducerAccessMode.Name(self.access_mode),
                "metadata": dict(self.metadata)}


class ReplicationProducer(Producer):
    """Another cluster's replicator (``pulsar.repl.<cluster>-->...``): a class of its own so that
    the publish path of every other producer pays nothing for what only these send."""

    __slots__ = ()
    from_replicator = True


def producer_class(name: str):
    """The Producer class for a producer named ``name``."""
    return ReplicationProducer if name.startswith(replication.NAME_PREFIX) else Producer
