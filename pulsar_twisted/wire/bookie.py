"""
The bookie protocol's codecs, shared by the bookie server and the ledger client (pure: no Twisted).

**Status <-> error.** The bookie answers every request with a ``StatusCode`` (``protocol/bookie.proto``).
``status_for`` turns what storage raised into that code; ``error_for`` turns a code back into the
``pulsar_twisted.common.bk_errors`` exception the client raises, so a ``BookKeeperClient`` sees the same
errors from a TCP bookie as from an in-process one.

**Entry digest**, as BookKeeper's ``DigestManager`` does it with the CRC32C digest type. A packed entry
is what travels to the bookies and what they store and return::

    [ledger_id u64][entry_id u64][lac i64][length u64][crc32c u32][payload ...]

``lac`` is the writer's last-add-confirmed when the entry was packed (piggybacked so that
readers and recovery learn it from the bookies); ``length`` is the ledger's total payload length
including this entry. The CRC32C covers the 32-byte header and the payload, so a bookie or
network corrupting either is detected by the reader.
"""

import struct
from typing import NamedTuple, Optional

import crc32c as _crc32c

from pulsar_twisted.common.bk_errors import (
    BKException, BookieReadOnlyError, BookieUnavailableError, DigestMismatchError, LedgerFencedError,
    NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.proto import bookie_pb2 as pb

#: Storage exception -> status code. Checked in order with isinstance.
_STATUS_BY_ERROR = (
    (NoSuchLedgerError, pb.NO_SUCH_LEDGER),
    (NoSuchEntryError, pb.NO_SUCH_ENTRY),
    (LedgerFencedError, pb.FENCED),
    (UnauthorizedAccessError, pb.UNAUTHORIZED),
    (BookieReadOnlyError, pb.READ_ONLY),
    (DigestMismatchError, pb.DIGEST_MISMATCH),
    (BookieUnavailableError, pb.UNAVAILABLE),
    (ValueError, pb.BAD_REQUEST),
)

#: Status code -> the exception the client raises.
ERROR_BY_STATUS = {
    pb.NO_SUCH_LEDGER: NoSuchLedgerError,
    pb.NO_SUCH_ENTRY: NoSuchEntryError,
    pb.FENCED: LedgerFencedError,
    pb.UNAUTHORIZED: UnauthorizedAccessError,
    pb.READ_ONLY: BookieReadOnlyError,
    pb.DIGEST_MISMATCH: DigestMismatchError,
    pb.UNAVAILABLE: BookieUnavailableError,
    pb.BAD_REQUEST: ValueError,
}


def status_for(error: BaseException) -> int:
    """The status code reporting ``error`` (ERROR for anything unexpected)."""
    for error_type, status in _STATUS_BY_ERROR:
        if isinstance(error, error_type):
            return status
    return pb.ERROR


def error_for(status: int) -> type:
    """The exception type a client raises for a non-OK ``status`` (BKException for ERROR or any code
    it does not know)."""
    return ERROR_BY_STATUS.get(status, BKException)


_HEADER = struct.Struct(">QQqQ")
_DIGEST = struct.Struct(">I")
HEADER_SIZE = _HEADER.size  # 32
DIGEST_SIZE = _DIGEST.size  # 4
PREFIX_SIZE = HEADER_SIZE + DIGEST_SIZE  # bytes before the payload
_LAC = struct.Struct(">q")
_LAC_OFFSET = 16
_crc = _crc32c.crc32c


class UnpackedEntry(NamedTuple):
    """A verified entry: its header fields and its payload."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


def pack_entry(ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    """Header + CRC32C(header + payload) + payload."""
    header = _HEADER.pack(ledger_id, entry_id, lac, length)
    digest = _crc(payload, _crc(header))
    return b"".join((header, _DIGEST.pack(digest), payload))


def unpack_entry(packed: bytes, ledger_id: Optional[int] = None,
                 entry_id: Optional[int] = None) -> UnpackedEntry:
    """
    Verify and split a packed entry. Raises DigestMismatchError if it is too short, its CRC does
    not match, or its ids differ from the expected ``ledger_id`` / ``entry_id`` (a bookie
    answering with the wrong entry is as bad as a corrupt one).
    """
    if len(packed) < PREFIX_SIZE:
        raise DigestMismatchError(f"entry too short: {len(packed)} bytes")
    view = memoryview(packed)
    header = view[:HEADER_SIZE]
    (expected_crc,) = _DIGEST.unpack_from(packed, HEADER_SIZE)
    payload = view[PREFIX_SIZE:]
    if _crc(payload, _crc(header)) != expected_crc:
        raise DigestMismatchError("CRC32C mismatch")
    lid, eid, lac, length = _HEADER.unpack_from(packed, 0)
    if ledger_id is not None and lid != ledger_id:
        raise DigestMismatchError(f"entry of ledger {lid}, expected {ledger_id}")
    if entry_id is not None and eid != entry_id:
        raise DigestMismatchError(f"entry {eid}, expected {entry_id}")
    return UnpackedEntry(lid, eid, lac, length, bytes(payload))


def packed_lac(packed: bytes) -> int:
    """The LAC field of a packed entry, unverified (bookies index it without checking the CRC)."""
    return _LAC.unpack_from(packed, _LAC_OFFSET)[0]
