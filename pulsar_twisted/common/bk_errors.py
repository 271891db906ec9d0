"""
The BookKeeper error family, shared by the bookie server (which raises them from storage and maps
them to status codes) and the ledger client (which raises them to the managed ledger).

Each class's ``code`` names BookKeeper's own error code, so logs and stats read like BookKeeper's.
Plain exceptions: no Twisted import, nothing below ``common`` needed.
"""


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


class UnauthorizedAccessError(BKException):
    """The master key (derived from the ledger password) did not match the ledger's."""

    code = "UnauthorizedAccess"


class BookieReadOnlyError(BKException):
    """The bookie is read-only (disks full) and refuses adds."""

    code = "BookieReadOnly"
