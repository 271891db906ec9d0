"""
The failures of the functions worker, each with the HTTP status Pulsar's worker answers (its
``RestException``): 400 invalid config, 404 unknown function, 409 exists, 413 package too large,
501 a part of Pulsar Functions this implementation does not have yet, 503 worker not ready.
The web layer turns ``status`` into the answer; nothing here knows HTTP otherwise.
"""

from pulsar_twisted.common.rest_errors import RestError


class FunctionsError(RestError):
    """A worker failure; ``str(e)`` is the ``reason`` of the REST answer."""


class InvalidFunctionConfig(FunctionsError):
    status = 400


class FunctionNotFound(FunctionsError):
    status = 404


class FunctionExists(FunctionsError):
    status = 409


class PackageTooLarge(FunctionsError):
    status = 413


class NotSupportedYet(FunctionsError):
    """A documented gap of this slice (EFFECTIVELY_ONCE, zip/wheel packages, Java/Go runtimes)."""

    status = 501
