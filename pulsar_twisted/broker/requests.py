"""
What a client asks for when it creates a producer or subscribes, as plain values.

The connection (cnx.py) turns CommandProducer and CommandSubscribe into these, so the service,
the topics, the access modes and the schema registry never see a protobuf message (Pulsar's
ServerCnx does the same with ``SubscriptionOption`` before calling ``topic.subscribe``). Optional
wire fields that were absent are ``None`` here, not a default the domain could mistake for a
value. Enumerations keep the protocol's numbers (``api.CommandSubscribe.Shared``,
``api.ProducerAccessMode`` values), which is how the dispatchers and access modes name them.
"""

from dataclasses import dataclass, field

from pulsar_twisted.common.position import Position


@dataclass(frozen=True)
class SchemaSpec:
    """A schema a client brings: its type number, definition bytes, properties and name."""

    type: int
    data: bytes = b""
    properties: dict = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class KeySharedMeta:
    """How a Key_Shared consumer takes keys: the mode, its hash ranges (STICKY), out-of-order."""

    mode: int = 0                           # api.KeySharedMode, AUTO_SPLIT by default
    #: ``(start, end)`` pairs, both inclusive, in the 0..65535 hash space.
    hash_ranges: tuple = ()
    allow_out_of_order: bool = False


@dataclass(frozen=True)
class ProducerRequest:
    """A PRODUCER command."""

    topic: str
    producer_id: int
    request_id: int
    #: The name the client asked for ("" for one chosen by the broker).
    producer_name: str = ""
    #: True when the name is the application's own (not one the client library generated).
    user_provided_name: bool = False
    access_mode: int = 0                    # api.ProducerAccessMode, Shared by default
    #: The epoch the producer had on this topic (a reconnecting exclusive producer), or None.
    topic_epoch: int = None
    metadata: dict = field(default_factory=dict)
    schema: SchemaSpec = None
    #: A subscription to create at the earliest position before the producer exists ("" none).
    initial_subscription: str = ""


@dataclass(frozen=True)
class SubscribeRequest:
    """A SUBSCRIBE command (Pulsar's SubscriptionOption)."""

    topic: str
    subscription: str
    consumer_id: int
    request_id: int
    sub_type: int = 0                       # api.CommandSubscribe.SubType, Exclusive by default
    consumer_name: str = ""
    priority_level: int = 0
    durable: bool = True
    initial_position: int = 0               # api.CommandSubscribe.InitialPosition, Latest
    #: Where a non-durable subscription (a reader) starts, as sent (signed), or None.
    start_message_id: Position = None
    metadata: dict = field(default_factory=dict)
    #: How a Key_Shared consumer takes keys, or None (the subscription's default).
    key_shared_meta: KeySharedMeta = None
    read_compacted: bool = False
    force_topic_creation: bool = True
    #: Keep the subscription's position in step across replicated clusters (Pulsar's
    #: replicateSubscriptionState).
    replicate_subscription_state: bool = False
    schema: SchemaSpec = None
