"""
Client-side exceptions, named as the official Pulsar client names them.

Every error the broker sends back (``ServerError`` in ``CommandError``, ``CommandSendError``,
lookup and partitioned-metadata failures) becomes an instance of the matching class carrying the
broker's message text; ``from_server_error`` is the one mapping. ``retriable`` marks the errors after
which the Java client keeps reconnecting (the broker or topic is busy moving, not refusing us).
"""

from pulsar_twisted.proto import PulsarApi_pb2 as api


class PulsarException(Exception):
    """Base of every client error; ``str(e)`` is the broker's (or our) message."""

    #: The ``ServerError`` code this class stands for, when it stands for one.
    code = None
    #: Whether a producer/consumer should go on reconnecting after this error.
    retriable = False


def _make(name, code=None, retriable=False, doc=None):
    return type(name, (PulsarException,), {
        "code": code, "retriable": retriable,
        "__doc__": doc or f"Pulsar's {name}.", "__module__": __name__})


UnknownError = _make("UnknownError", api.UnknownError, True)
MetadataError = _make("MetadataError", api.MetadataError, True)
PersistenceError = _make("PersistenceError", api.PersistenceError, True)
AuthenticationError = _make("AuthenticationError", api.AuthenticationError)
AuthorizationError = _make("AuthorizationError", api.AuthorizationError)
ConsumerBusy = _make("ConsumerBusy", api.ConsumerBusy)
ServiceNotReady = _make("ServiceNotReady", api.ServiceNotReady, True)
ProducerBlockedQuotaExceededError = _make(
    "ProducerBlockedQuotaExceededError", api.ProducerBlockedQuotaExceededError)
ProducerBlockedQuotaExceededException = _make(
    "ProducerBlockedQuotaExceededException", api.ProducerBlockedQuotaExceededException)
ChecksumError = _make("ChecksumError", api.ChecksumError, True)
UnsupportedVersionError = _make("UnsupportedVersionError", api.UnsupportedVersionError)
TopicNotFound = _make("TopicNotFound", api.TopicNotFound)
SubscriptionNotFound = _make("SubscriptionNotFound", api.SubscriptionNotFound)
ConsumerNotFound = _make("ConsumerNotFound", api.ConsumerNotFound)
TooManyRequests = _make("TooManyRequests", api.TooManyRequests, True)
TopicTerminated = _make("TopicTerminated", api.TopicTerminatedError)
ProducerBusy = _make("ProducerBusy", api.ProducerBusy)
InvalidTopicName = _make("InvalidTopicName", api.InvalidTopicName)
IncompatibleSchema = _make("IncompatibleSchema", api.IncompatibleSchema)
ConsumerAssignError = _make("ConsumerAssignError", api.ConsumerAssignError)
TransactionCoordinatorNotFound = _make("TransactionCoordinatorNotFound",
                                       api.TransactionCoordinatorNotFound)
InvalidTxnStatus = _make("InvalidTxnStatus", api.InvalidTxnStatus)
NotAllowed = _make("NotAllowed", api.NotAllowedError)
TransactionConflict = _make("TransactionConflict", api.TransactionConflict)
TransactionNotFound = _make("TransactionNotFound", api.TransactionNotFound)
ProducerFenced = _make("ProducerFenced", api.ProducerFenced)

# Client-side conditions (no ServerError code).
Timeout = _make("Timeout", retriable=True, doc="An operation did not complete in its time.")
ConnectError = _make("ConnectError", retriable=True,
                     doc="The broker could not be reached, or the connection dropped.")
AlreadyClosed = _make("AlreadyClosed", doc="The client, producer or consumer is closed.")
ProducerQueueIsFull = _make("ProducerQueueIsFull",
                            doc="max_pending_messages reached and block_if_queue_full is off.")
MessageTooBig = _make("MessageTooBig", doc="A message larger than the broker's max_message_size.")
InvalidConfiguration = _make("InvalidConfiguration", doc="A setting the client cannot honour.")
InvalidMessage = _make("InvalidMessage", doc="A received message that does not decode.")
LookupError_ = _make("LookupError", retriable=True, doc="A topic lookup failed.")
TooManyLookupRedirects = _make("TooManyLookupRedirects", doc="Lookup redirected too many times.")

#: Pulsar's own spelling, for ``except pulsar_twisted.client.errors.LookupError``.
globals()["LookupError"] = LookupError_

_BY_CODE = {cls.code: cls for cls in list(globals().values())
            if isinstance(cls, type) and issubclass(cls, PulsarException) and cls.code is not None}


def from_server_error(code: int, message: str) -> PulsarException:
    """The exception for a broker ``ServerError`` ``code`` with the broker's ``message``."""
    cls = _BY_CODE.get(code, UnknownError)
    return cls(message or cls.__name__)
