"""
The base of every failure answered over REST (Pulsar's ``RestException``): a reason and the HTTP
status Pulsar answers. The admin API (``broker/admin/errors.py``) and the functions worker
(``functions/errors.py``) each derive their families from it, in their own layers; the web
routing turns ``status`` into the answer, nothing below it knows HTTP otherwise.
"""


class RestError(Exception):
    """A failure with the HTTP status Pulsar answers for it; ``str(e)`` is the ``reason``."""

    status = 500

    def __init__(self, reason: str, status: int = None):
        super().__init__(reason)
        if status is not None:
            self.status = status
