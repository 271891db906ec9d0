"""
pulsar-twisted's own Pulsar client: ``Client`` (Deferred-based, ``client.py``) and a blocking
facade for plain scripts (``blocking.py``).
"""

from pulsar_twisted.client.chunking import ChunkMessageId
from pulsar_twisted.client.client import Client
from pulsar_twisted.client.dlq import DeadLetterPolicy
from pulsar_twisted.client.errors import PulsarException
from pulsar_twisted.client.message import Message
from pulsar_twisted.client.message_id import MessageId

__all__ = ["ChunkMessageId", "Client", "DeadLetterPolicy", "Message", "MessageId",
           "PulsarException"]
