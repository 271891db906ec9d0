"""
The one object through which a broker connection writes commands (house style: one sender per
connection). Services call ``send_receipt(...)``, ``send_message(...)``; nobody else touches the
transport. Each method builds the BaseCommand and writes one frame.
"""

from pulsar_twisted.net.handback import CoalescingWriter
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import encode_command, encode_payload_command, encode_send_receipts

T = api.BaseCommand


def _message_id(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1):
    mid = api.MessageIdData(ledgerId=ledger_id & 0xFFFFFFFFFFFFFFFF, entryId=entry_id & 0xFFFFFFFFFFFFFFFF)
    if partition >= 0:
        mid.partition = partition
    if batch_index >= 0:
        mid.batch_index = batch_index
    return mid


class CommandSender:
    """Writes broker-to-client commands on one transport."""

    __slots__ = ("transport", "_out")

    def __init__(self, transport):
        self.transport = transport
        #: Every frame goes through it, in order: inside a storage hand-back (the journal answering
        #: a group of adds) the receipts are sent together when it ends (``net.handback``).
        self._out = CoalescingWriter(transport)

    def _write(self, command: api.BaseCommand) -> None:
        self._out.write(encode_command(command))

    # --- connection ---
    def send_connected(self, server_version: str, protocol_version: int, max_message_size: int) -> None:
        self._write(T(type=T.CONNECTED, connected=api.CommandConnected(
            server_version=server_version, protocol_version=protocol_version,
            max_message_size=max_message_size,
            feature_flags=api.FeatureFlags(supports_auth_refresh=True))))

    def send_ping(self) -> None:
        self._write(T(type=T.PING, ping=api.CommandPing()))

    def send_pong(self) -> None:
        self._write(T(type=T.PONG, pong=api.CommandPong()))

    def send_auth_challenge(self, method: str, data: bytes, protocol_version: int) -> None:
        """Ask the client for fresh credentials (it answers AUTH_RESPONSE)."""
        self._write(T(type=T.AUTH_CHALLENGE, authChallenge=api.CommandAuthChallenge(
            server_version="pulsar-twisted", protocol_version=protocol_version,
            challenge=api.AuthData(auth_method_name=method, auth_data=data))))

    def send_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.ERROR, error=api.CommandError(
            request_id=request_id, error=error, message=message)))

    def send_success(self, request_id: int) -> None:
        self._write(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=request_id)))

    # --- lookup ---
    def send_lookup_response(self, request_id: int, broker_url: str, broker_url_tls: str = "",
                             authoritative: bool = True, redirect: bool = False) -> None:
        response = api.CommandLookupTopicResponse(
            request_id=request_id, brokerServiceUrl=broker_url, authoritative=authoritative,
            response=(api.CommandLookupTopicResponse.Redirect if redirect
                      else api.CommandLookupTopicResponse.Connect))
        if broker_url_tls:
            response.brokerServiceUrlTls = broker_url_tls
        self._write(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))

    def send_lookup_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=api.CommandLookupTopicResponse(
            request_id=request_id, response=api.CommandLookupTopicResponse.Failed,
            error=error, message=message)))

    def send_partitioned_metadata(self, request_id: int, partitions: int) -> None:
        self._write(T(type=T.PARTITIONED_METADATA_RESPONSE,
                      partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                          request_id=request_id, partitions=partitions,
                          response=api.CommandPartitionedTopicMetadataResponse.Success)))

    def send_partitioned_metadata_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.PARTITIONED_METADATA_RESPONSE,
                      partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                          request_id=request_id, response=api.CommandPartitionedTopicMetadataResponse.Failed,
                          error=error, message=message)))

    def send_topics_of_namespace(self, request_id: int, topics, filtered: bool, topics_hash: str) -> None:
        self._write(T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                      getTopicsOfNamespaceResponse=api.CommandGetTopicsOfNamespaceResponse(
                          request_id=request_id, topics=topics, filtered=filtered,
                          topics_hash=topics_hash, changed=True)))

    # --- producers ---
    def send_producer_success(self, request_id: int, producer_name: str, last_sequence_id: int = -1,
                              schema_version: bytes = b"", topic_epoch: int = None,
                              ready: bool = True) -> None:
        """``ready=False``: a WaitForExclusive producer queued at the broker (a second, ready
        PRODUCER_SUCCESS follows when it gets the topic)."""
        success = api.CommandProducerSuccess(request_id=request_id, producer_name=producer_name,
                                             last_sequence_id=last_sequence_id, producer_ready=ready)
        if schema_version:
            success.schema_version = schema_version
        if topic_epoch is not None:
            success.topic_epoch = topic_epoch
        self._write(T(type=T.PRODUCER_SUCCESS, producer_success=success))

    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int,
                     ledger_id: int, entry_id: int) -> None:
        self.send_receipts(producer_id, ((sequence_id, highest_sequence_id, ledger_id, entry_id),))

    def send_receipts(self, producer_id: int, receipts) -> None:
        """SEND_RECEIPTs of one producer, ``(sequence_id, highest_sequence_id, ledger_id,
        entry_id)`` each, in one write. Hand-encoded (the same bytes as the protobuf objects would
        give): one per message."""
        self._out.write(encode_send_receipts(producer_id, receipts))

    def send_send_error(self, producer_id: int, sequence_id: int, error: int, message: str) -> None:
        self._write(T(type=T.SEND_ERROR, send_error=api.CommandSendError(
            producer_id=producer_id, sequence_id=sequence_id, error=error, message=message)))

    def send_close_producer(self, producer_id: int) -> None:
        self._write(T(type=T.CLOSE_PRODUCER, close_producer=api.CommandCloseProducer(
            producer_id=producer_id, request_id=0)))

    # --- consumers ---
    def send_message(self, consumer_id: int, ledger_id: int, entry_id: int, redelivery_count: int,
                     data: bytes, partition: int = -1, ack_set=None) -> None:
        """
        One MESSAGE frame carrying a stored entry exactly as the producer sent it. ``partition``
        is the index of the consumer's topic partition (-1: not a partition): the C++ client
        builds the message id from this field, and compares it, partition included, with the
        GET_LAST_MESSAGE_ID answer in ``has_message_available``. ``ack_set``: for a batch
        partly acknowledged (batch index acks), the bit set (int64 words) of the indexes still
        to deliver; the client skips the others.
        """
        message_id = api.MessageIdData(ledgerId=ledger_id, entryId=entry_id)
        if partition >= 0:
            message_id.partition = partition
        command = T(type=T.MESSAGE, message=api.CommandMessage(
            consumer_id=consumer_id, message_id=message_id, redelivery_count=redelivery_count))
        if ack_set is not None:
            command.message.ack_set.extend(ack_set)
        self._out.write(encode_payload_command(command, data))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self._write(T(type=T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=api.CommandActiveConsumerChange(
            consumer_id=consumer_id, is_active=is_active)))

    def send_close_consumer(self, consumer_id: int) -> None:
        self._write(T(type=T.CLOSE_CONSUMER, close_consumer=api.CommandCloseConsumer(
            consumer_id=consumer_id, request_id=0)))

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        self._write(T(type=T.REACHED_END_OF_TOPIC,
                      reachedEndOfTopic=api.CommandReachedEndOfTopic(consumer_id=consumer_id)))

    def send_ack_response(self, consumer_id: int, request_id: int, error: int = None, message: str = "") -> None:
        response = api.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
        if error is not None:
            response.error = error
            response.message = message
        self._write(T(type=T.ACK_RESPONSE, ackResponse=response))

    def send_last_message_id(self, request_id: int, ledger_id: int, entry_id: int, partition: int,
                             batch_index: int, mark_delete=None) -> None:
        response = api.CommandGetLastMessageIdResponse(
            request_id=request_id, last_message_id=_message_id(ledger_id, entry_id, partition, batch_index))
        if mark_delete is not None:
            response.consumer_mark_delete_position.CopyFrom(_message_id(mark_delete[0], mark_delete[1]))
        self._write(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=response))

    def send_consumer_stats(self, request_id: int, **fields) -> None:
        self._write(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=api.CommandConsumerStatsResponse(
            request_id=request_id, **fields)))

    def send_consumer_stats_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=api.CommandConsumerStatsResponse(
            request_id=request_id, error_code=error, error_message=message)))

    def send_get_schema_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=api.CommandGetSchemaResponse(
            request_id=request_id, error_code=error, error_message=message)))

    def send_get_schema(self, request_id: int, schema: api.Schema, schema_version: bytes) -> None:
        self._write(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=api.CommandGetSchemaResponse(
            request_id=request_id, schema=schema, schema_version=schema_version)))

    def send_get_or_create_schema(self, request_id: int, schema_version: bytes) -> None:
        self._write(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
                      getOrCreateSchemaResponse=api.CommandGetOrCreateSchemaResponse(
                          request_id=request_id, schema_version=schema_version)))

    def send_get_or_create_schema_error(self, request_id: int, error: int, message: str) -> None:
        self._write(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
                      getOrCreateSchemaResponse=api.CommandGetOrCreateSchemaResponse(
                          request_id=request_id, error_code=error, error_message=message)))
