"""
Received messages as the application sees them. The batch payload format they are split from is
``pulsar_twisted.wire.batch``.
"""

from pulsar_twisted.proto import PulsarApi_pb2 as api


class Message:
    """
    One message as the application sees it (the official client's method names).

    ``metadata`` is the entry's ``MessageMetadata``; ``single`` the batch member's
    ``SingleMessageMetadata`` when the message came in a batch (its fields win).
    """

    __slots__ = ("_data", "_message_id", "_metadata", "_single", "_redelivery_count", "_topic",
                 "_properties")

    def __init__(self, data: bytes, message_id, metadata: api.MessageMetadata, topic: str,
                 redelivery_count: int = 0, single: api.SingleMessageMetadata = None):
        self._data = data
        self._message_id = message_id
        self._metadata = metadata
        self._single = single
        self._redelivery_count = redelivery_count
        self._topic = topic
        self._properties = None

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def message_id(self):
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def properties(self) -> dict:
        if self._properties is None:
            source = self._single if self._single is not None else self._metadata
            self._properties = {kv.key: kv.value for kv in source.properties}
        return self._properties

    def partition_key(self) -> str:
        source = self._single if self._single is not None else self._metadata
        return source.partition_key if source.HasField("partition_key") else ""

    def ordering_key(self) -> bytes:
        source = self._single if self._single is not None else self._metadata
        return source.ordering_key if source.HasField("ordering_key") else b""

    def event_timestamp(self) -> int:
        """Event time in ms since the epoch, 0 when the producer gave none."""
        if self._single is not None:
            return self._single.event_time
        return self._metadata.event_time

    def publish_timestamp(self) -> int:
        """Publish time in ms since the epoch (the producer's clock)."""
        return self._metadata.publish_time

    def producer_name(self) -> str:
        return self._metadata.producer_name

    def sequence_id(self) -> int:
        if self._single is not None and self._single.HasField("sequence_id"):
            return self._single.sequence_id
        return self._metadata.sequence_id

    def schema_version(self) -> bytes:
        return self._metadata.schema_version

    def __repr__(self):
        return f"Message(id={self._message_id!r}, {len(self._data)} bytes)"
