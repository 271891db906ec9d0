"""
The BookKeeper client contract, as the managed ledger sees it.

A ledger is an append-only log of entries numbered 0, 1, 2, ... with a single writer. Entry ids
are assigned by the writer in order; an add completes (its Deferred fires) only once it and every
earlier entry are acknowledged by the ack quorum, so completions are in entry order.

The errors named below are the BookKeeper family in ``pulsar_twisted.common.bk_errors``.
"""

from dataclasses import dataclass

from zope.interface import Attribute, Interface


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
                      password: bytes = b"", custom_metadata: dict = None, after: int = -1,
                      record=None):
        """Deferred firing with a writable ILedgerHandle with a new unique id greater than
        ``after`` (a managed ledger passes its last ledger's id: its ledgers are in id order).

        ``record``, only for a client that ``shares_store`` with the caller: a callable
        ``record(ledger_id) -> (path, value, expected_version)``, a write made atomically with
        the ledger's metadata (``IMetadataStore.put_all``: one durable commit for both, and a
        crash keeps both or neither). It may be called again with another id if the first one
        was taken. The Deferred then fires with ``(handle, stat)``, ``stat`` that write's new
        Stat; when that write is refused (AlreadyExistsError, BadVersionError, NotFoundError)
        no ledger was created and the Deferred fails with its error."""

    def shares_store(store) -> bool:
        """True when this client keeps ledger metadata in ``store`` (so ``record`` may be used)."""

    def open_ledger(ledger_id: int, password: bytes = b"", recovery: bool = True):
        """Deferred firing with a read-only ILedgerHandle. With ``recovery`` the ledger is fenced
        and closed first (an open writer's later adds fail); without, it is read as it is (up to
        its LAC)."""

    def delete_ledger(ledger_id: int):
        """Remove the ledger's metadata and its entries from the bookies. Deferred."""
