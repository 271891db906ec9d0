"""
The BookKeeper client contract, as the managed ledger sees it.

A ledger is an append-only log of entries numbered 0, 1, 2, ... with a single writer. Entry ids
are assigned by the writer in order; an add completes (its Deferred fires) only once it and every
earlier entry are acknowledged by the ack quorum, so completions are in entry order.
"""

from dataclasses import dataclass

from zope.interface import Attribute, Interface


class BKException(Exception):
    """Base of the ledger client's errors. ``code`` names BookKeeper's error."""

    code = "UnexpectedCondition"


class NoSuchLedgerError(BKException):
    code = "NoSuchLedgerExists"


class NoSuchEntryError(BKException):
    code = "NoSuchEntry"


class LedgerFencedError(BKException):
    """The ledger was fenced by a recovering reader: this writer may not add any more."""

    code = "LedgerFenced"


class LedgerClosedError(BKException):
    code = "LedgerClosed"


class NotEnoughBookiesError(BKException):
    code = "NotEnoughBookies"


class DigestMismatchError(BKException):
    code = "DigestMatch"


class BookieUnavailableError(BKException):
    code = "BookieHandleNotAvailable"


class LedgerRecoveryError(BKException):
    code = "LedgerRecovery"


@dataclass(frozen=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    data: bytes


class ILedgerHandle(Interface):
    """An open ledger. Writers get one from create; readers from open."""

    ledger_id = Attribute("int")
    last_add_confirmed = Attribute("int: highest entry id known durable on an ack quorum, -1 if none")
    length = Attribute("int: total bytes of the entries added so far")
    closed = Attribute("bool")

    def add_entry(data: bytes):
        """Append; Deferred firing with the entry id (in order). Fails with LedgerFencedError,
        LedgerClosedError, NotEnoughBookiesError..."""

    def read_entries(first: int, last: int):
        """Deferred firing with a list of LedgerEntry for ids first..last inclusive (all must be
        <= last_add_confirmed)."""

    def close():
        """Stop accepting adds, record the last entry id in the ledger metadata. Deferred."""


class ILedgerClient(Interface):
    """Creates, opens and deletes ledgers (BookKeeper's ``BookKeeper`` object)."""

    def create_ledger(ensemble_size: int, write_quorum: int, ack_quorum: int,
                      password: bytes = b"", custom_metadata: dict = None):
        """Deferred firing with a writable ILedgerHandle with a new unique id."""

    def open_ledger(ledger_id: int, password: bytes = b"", recovery: bool = True):
        """Deferred firing with a read-only ILedgerHandle. With ``recovery`` the ledger is fenced
        and closed first (an open writer's later adds fail); without, it is read as it is (up to
        its LAC)."""

    def delete_ledger(ledger_id: int):
        """Remove the ledger's metadata and its entries from the bookies. Deferred."""


class UnauthorizedAccessError(BKException):
    """The master key (derived from the ledger password) did not match the ledger's."""

    code = "UnauthorizedAccess"


class BookieReadOnlyError(BKException):
    """The bookie is read-only (disks full) and refuses adds."""

    code = "BookieReadOnly"
