"""Broker-side errors carrying the ServerError code that goes back to the client."""

from pulsar_twisted.proto import PulsarApi_pb2 as api


class PulsarError(Exception):
    """An error with a Pulsar ``ServerError`` code; its message is sent to the client as is."""

    code = api.UnknownError

    def __init__(self, message: str, code: int = None):
        super().__init__(message)
        if code is not None:
            self.code = code


def _make(name: str, code: int):
    return type(name, (PulsarError,), {"code": code, "__doc__": f"ServerError {name}."})


MetadataError = _make("MetadataError", api.MetadataError)
PersistenceError = _make("PersistenceError", api.PersistenceError)
AuthenticationError = _make("AuthenticationError", api.AuthenticationError)
AuthorizationError = _make("AuthorizationError", api.AuthorizationError)
ConsumerBusy = _make("ConsumerBusy", api.ConsumerBusy)
ServiceNotReady = _make("ServiceNotReady", api.ServiceNotReady)
ChecksumError = _make("ChecksumError", api.ChecksumError)
UnsupportedVersionError = _make("UnsupportedVersionError", api.UnsupportedVersionError)
TopicNotFound = _make("TopicNotFound", api.TopicNotFound)
SubscriptionNotFound = _make("SubscriptionNotFound", api.SubscriptionNotFound)
ConsumerNotFound = _make("ConsumerNotFound", api.ConsumerNotFound)
TooManyRequests = _make("TooManyRequests", api.TooManyRequests)
TopicTerminatedError = _make("TopicTerminatedError", api.TopicTerminatedError)
ProducerBusy = _make("ProducerBusy", api.ProducerBusy)
InvalidTopicName = _make("InvalidTopicName", api.InvalidTopicName)
IncompatibleSchema = _make("IncompatibleSchema", api.IncompatibleSchema)
ConsumerAssignError = _make("ConsumerAssignError", api.ConsumerAssignError)
NotAllowedError = _make("NotAllowedError", api.NotAllowedError)
ProducerFenced = _make("ProducerFenced", api.ProducerFenced)
