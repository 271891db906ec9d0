"""
Errors of the ``wire`` codecs. Every decoder here raises ``CodecError`` or a subclass for bytes it
cannot decode, never whatever its library raised, so a caller needs one ``except`` and a broker
connection is never lost to an exception out of a codec.

The classes subclass ``ValueError`` (as the standard library's codec errors do): code that called a
decoder with ``except ValueError`` before it moved here keeps working. Each layer maps them to its
own types at its edge: the client to its Pulsar-named ``InvalidMessage`` / ``InvalidConfiguration``,
the admin API to an HTTP error.
"""


class CodecError(ValueError):
    """Bytes that do not decode, or a value that cannot be encoded."""


class InvalidMessage(CodecError):
    """Stored or received message bytes that do not decode: corrupt compressed data, a size that does
    not match the announced one, a compression type this side does not know, a batch member running
    past its payload, a malformed compacted-ledger record."""


class UnknownCompression(CodecError):
    """A compression type asked for (by name or number) that Pulsar does not define."""
