"""
Admin failures and the HTTP status Pulsar answers for each (Pulsar's ``RestException``): 404
unknown, 409 exists or concurrent change, 412 precondition failed, 400/406 bad input, 405 not
allowed. ``http_status_of`` also maps the errors the layers below raise, so that they may reach the
web routing unwrapped.
"""

from pulsar_twisted.common import errors
from pulsar_twisted.common.rest_errors import RestError
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError, BadVersionError, MetadataUnavailableError, NotEmptyError, NotFoundError)
from pulsar_twisted.resources.base import ConcurrentModificationError
from pulsar_twisted.resources.checks import InvalidValue, OutOfRange


class AdminError(RestError):
    """An admin failure with the HTTP status Pulsar answers; ``str(e)`` is the ``reason``."""


class BadRequest(AdminError):
    status = 400


class NotFound(AdminError):
    status = 404


class NotAllowed(AdminError):
    status = 405


class NotAcceptable(AdminError):
    status = 406


class Conflict(AdminError):
    status = 409


class PreconditionFailed(AdminError):
    status = 412


#: Broker errors as the REST API reports them (Pulsar's RestException statuses).
_PULSAR_ERROR_STATUS = {
    errors.TopicNotFound: 404, errors.SubscriptionNotFound: 404, errors.ConsumerNotFound: 404,
    errors.InvalidTopicName: 412, errors.NotAllowedError: 405, errors.ConsumerBusy: 412,
    errors.ProducerBusy: 412, errors.ServiceNotReady: 503, errors.TopicTerminatedError: 412,
    errors.AuthorizationError: 403, errors.AuthenticationError: 401,
}

#: Errors of the resource and metadata layers, in the order they are tested.
_LOWER_ERROR_STATUS = (
    (InvalidValue, 400), (OutOfRange, 412), (NotFoundError, 404),
    (AlreadyExistsError, 409), (BadVersionError, 409), (NotEmptyError, 409),
    (ConcurrentModificationError, 409), (MetadataUnavailableError, 503),
)


def http_status_of(error: Exception) -> int:
    """The HTTP status for any error an admin call may raise (500 for the unexpected)."""
    if isinstance(error, RestError):
        return error.status
    if isinstance(error, errors.PulsarError):
        for cls, status in _PULSAR_ERROR_STATUS.items():
            if isinstance(error, cls):
                return status
        return 500
    for cls, status in _LOWER_ERROR_STATUS:
        if isinstance(error, cls):
            return status
    return 500
