"""
``functions trigger``: send a value to a function's input and answer with the output it
produced for that very message (Pulsar's ``triggerFunction``), through this package's own
Deferred-based client: a reader on the output topic opened first (at its end), then the value
published; the output is the message whose ``__pfn_input_msg_id__`` names the one published.
No output within ``timeout`` seconds (a filtered input, a failing function) is Pulsar's 408.
"""

import base64
import binascii

from pulsar_twisted.client import errors as client_errors
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.functions.errors import FunctionsError


def _input_id(message):
    """(ledger, entry, batch) of the input named by an output message, or None."""
    encoded = message.properties().get("__pfn_input_msg_id__")
    if not encoded:
        return None
    try:
        input_id = MessageId.deserialize(base64.b64decode(encoded))
    except (binascii.Error, ValueError):
        return None
    return (input_id.ledger_id, input_id.entry_id)


async def trigger(client, clock, input_topic: str, output_topic, value: bytes,
                  timeout: float = 30.0):
    """The output (bytes) the function produced for ``value``; None without an output topic."""
    reader = None
    if output_topic:
        reader = await client.create_reader(output_topic, MessageId.latest)
    try:
        producer = await client.create_producer(input_topic)
        try:
            sent = await producer.send(value)
        finally:
            await producer.close()
        if reader is None:
            return None
        wanted = (sent.ledger_id, sent.entry_id)
        deadline = clock.seconds() + timeout
        while True:
            remaining = deadline - clock.seconds()
            if remaining <= 0:
                raise FunctionsError("Request Timed Out", 408)
            try:
                message = await reader.read_next(timeout=remaining)
            except client_errors.Timeout:
                raise FunctionsError("Request Timed Out", 408)
            if _input_id(message) == wanted:
                return message.data()
    finally:
        if reader is not None:
            await reader.close()
