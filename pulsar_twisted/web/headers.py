"""
Response header names sent with their exact case.

Twisted canonicalises every header name it stores (``x-pulsar-PROPERTY-myKey`` is written as
``X-Pulsar-Property-Mykey``). HTTP names are case-insensitive, but Pulsar's peek answer carries the
message properties as ``X-Pulsar-PROPERTY-<key>`` and clients (pulsar-admin, the Java admin client)
take ``<key>`` from the header name as written, so the key's case must survive.

``set_headers(request, headers)`` writes a dict of headers: names that Twisted would keep as given go
through ``setHeader`` as usual; the others are kept, exact, in an :class:`ExactCaseHeaders` that
replaces the request's ``responseHeaders`` (only for such responses: the common case costs nothing).
Values are sanitised exactly as Twisted sanitises them (a value with CR/LF cannot split the header).
"""

from twisted.logger import Logger
from twisted.web.http_headers import Headers, InvalidHeaderName

log = Logger()


class ExactCaseHeaders(Headers):
    """
    ``Headers`` plus headers whose names are written byte for byte (``add_exact``). The exact ones
    are only emitted by ``getAllRawHeaders`` (what ``HTTPChannel.writeHeaders`` reads); lookups by
    name (``getRawHeaders``/``hasHeader``) do not see them, so they must not be headers that Twisted
    itself consults (Content-Length, Transfer-Encoding, ...).
    """

    def __init__(self, rawHeaders=None):
        super().__init__(rawHeaders)
        self._exact = []

    @classmethod
    def replacing(cls, headers: Headers) -> "ExactCaseHeaders":
        """A copy of ``headers`` (keeping what was set so far), ready for exact names."""
        if isinstance(headers, cls):
            return headers
        copy = cls()
        for name, values in headers.getAllRawHeaders():
            copy.setRawHeaders(name, list(values))
        return copy

    def add_exact(self, name: bytes, value: bytes) -> None:
        """Add one header written as ``name`` exactly (InvalidHeaderName when it is not a token)."""
        # A scratch Headers validates the name and sanitises the value the way Twisted does.
        scratch = Headers()
        scratch.setRawHeaders(name, [value])
        [(_, values)] = scratch.getAllRawHeaders()
        self._exact.append((name, list(values)))

    def getAllRawHeaders(self):
        yield from super().getAllRawHeaders()
        yield from iter(self._exact)

    def copy(self):
        other = super().copy()      # self.__class__(raw headers)
        other._exact = list(self._exact)
        return other


def _canonical(name: bytes) -> bytes:
    return b"-".join(word.capitalize() for word in name.split(b"-"))


def set_headers(request, headers: dict) -> None:
    """Set ``headers`` (str or bytes names and values) on ``request``, keeping each name's case.
    A name that is not a valid HTTP token is skipped with a warning (it cannot be sent)."""
    for name, value in headers.items():
        raw_name = name.encode("iso-8859-1") if isinstance(name, str) else name
        raw_value = value if isinstance(value, bytes) else str(value).encode("utf-8")
        try:
            if _canonical(raw_name) == raw_name:
                request.setHeader(raw_name, raw_value)
            else:
                if not isinstance(request.responseHeaders, ExactCaseHeaders):
                    request.responseHeaders = ExactCaseHeaders.replacing(request.responseHeaders)
                request.responseHeaders.add_exact(raw_name, raw_value)
        except (InvalidHeaderName, UnicodeEncodeError) as e:
            log.warn("not sending response header {name!r}: not a valid HTTP header name ({error})",
                     name=name, error=e)
