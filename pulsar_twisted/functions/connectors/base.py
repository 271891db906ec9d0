"""What a connector is given and gives: ``Record`` (a source's output), ``SinkRecord`` (a
sink's input) and ``BadRecord`` (a sink's refusal of one record)."""


class Record:
    """What a source gives: the message's value (bytes), key, properties and event time (ms);
    ``topic``, when set, overrides the instance's destination topic for this record (the
    change-data source writes one topic per table)."""

    def __init__(self, value: bytes, key=None, properties=None, event_time=None, token=None,
                 topic=None):
        self.value = value
        self.key = key
        self.properties = properties or {}
        self.event_time = event_time
        self.topic = topic
        #: The source's own bookkeeping for ``ack``.
        self.token = token


class SinkRecord:
    """What a sink is given: one input message's value (bytes; empty for a tombstone), key
    (str or None), properties and topic. ``error`` is set on the records ``write`` refuses."""

    __slots__ = ("value", "key", "properties", "topic", "message", "error")

    def __init__(self, value: bytes, key=None, properties=None, topic=None, message=None):
        self.value = value
        self.key = key
        self.properties = properties or {}
        self.topic = topic
        #: The client's message (the instance acks or nacks it).
        self.message = message
        self.error = None

    @classmethod
    def of(cls, message) -> "SinkRecord":
        """From an official-client ``Message`` (a null value, Pulsar's tombstone, is ``b""``)."""
        key = message.partition_key() or None
        value = b"" if message.has_null_value() else message.data()
        return cls(value, key, message.properties(), message.topic_name(), message)


class BadRecord(Exception):
    """One record a sink cannot write (not JSON, a missing column, ...): the instance
    negative-acks it (so ``maxMessageRetries``/``deadLetterTopic`` apply) and writes the rest."""


def _bool(value) -> bool:
    return value if isinstance(value, bool) else str(value).lower() == "true"
