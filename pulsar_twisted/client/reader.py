"""
``Reader``: reads a topic from a chosen position on a non-durable subscription (nothing is kept
on the broker once it closes), built on ``Consumer`` as the Java client's ``ReaderImpl`` is.
"""

import uuid

from twisted.internet import defer

from pulsar_twisted.client.consumer import Sub


class Reader:
    """A reader over ``consumer`` (an Exclusive, non-durable ``Consumer``). ``Client`` builds it."""

    def __init__(self, consumer):
        self.consumer = consumer

    @staticmethod
    def subscription_name(prefix: str = None) -> str:
        return f"{prefix or 'reader'}-{uuid.uuid4().hex[:10]}"

    def read_next(self, timeout: float = None) -> defer.Deferred:
        """The next message (``Timeout`` after ``timeout`` seconds when given)."""
        d = self.consumer.receive(timeout)

        def got(message):
            # Cumulative ack moves the non-durable cursor so the broker can trim its backlog.
            self.consumer.acknowledge_cumulative(message)
            return message

        return d.addCallback(got)

    def has_message_available(self) -> defer.Deferred:
        return self.consumer.has_message_available()

    def seek(self, target) -> defer.Deferred:
        return self.consumer.seek(target)

    def topic_name(self) -> str:
        return self.consumer.topic

    def is_connected(self) -> bool:
        return self.consumer.is_connected()

    def close(self) -> defer.Deferred:
        return self.consumer.close()


READER_SUB_TYPE = Sub.Exclusive
