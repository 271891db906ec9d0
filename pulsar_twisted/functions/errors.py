"""
The failures of the functions worker, each with the HTTP status Pulsar's worker answers (its
``RestException``): 400 invalid config, 404 unknown function, 409 exists, 413 package too large,
501 a part of Pulsar Functions this implementation does not have yet, 503 worker not ready.
The web layer turns ``http_status`` into the answer; nothing here knows HTTP otherwise.
"""


class FunctionsError(Exception):
    """A worker failure; ``str(e)`` is the ``reason`` of the REST answer."""

    http_status = 500

    def __init__(self, reason: str, http_status: int = None):
        super().__init__(reason)
        if http_status is not None:
            self.http_status = http_status


class InvalidFunctionConfig(FunctionsError):
    http_status = 400


class FunctionNotFound(FunctionsError):
    http_status = 404


class FunctionExists(FunctionsError):
    http_status = 409


class PackageTooLarge(FunctionsError):
    http_status = 413


class NotSupportedYet(FunctionsError):
    """A documented gap of this slice (EFFECTIVELY_ONCE, zip/wheel packages, Java/Go runtimes)."""

    http_status = 501
