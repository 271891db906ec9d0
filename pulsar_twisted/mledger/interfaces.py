"""
The managed ledger contract (Pulsar's ``ManagedLedger``/``ManagedCursor``), as the broker sees it.

A managed ledger is a named, unbounded log built from a sequence of BookKeeper ledgers, with
named durable cursors whose positions survive restarts. Positions are ``(ledger_id, entry_id)``
and order lexicographically.
"""

from zope.interface import Attribute, Interface


class ManagedLedgerError(Exception):
    """Base of managed-ledger errors."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner took the ledger over; this instance may not write any more."""


class ManagedLedgerClosedError(ManagedLedgerError):
    pass


class CursorNotFoundError(ManagedLedgerError):
    pass


class NoMoreEntriesError(ManagedLedgerError):
    pass


class IManagedLedgerFactory(Interface):
    def open(name: str, config=None):
        """Deferred firing with the IManagedLedger ``name`` (created when new, recovered
        otherwise: the last ledger is opened with recovery and a new one is started)."""

    def delete(name: str):
        """Delete a managed ledger, its cursors and its ledgers. Deferred."""

    def list_names():
        """Deferred firing with the names of the managed ledgers that exist."""

    def shutdown():
        """Close every open managed ledger. Deferred."""


class IManagedLedger(Interface):
    name = Attribute("str")
    cursors = Attribute("dict name -> IManagedCursor (durable ones)")

    def add_entry(data: bytes):
        """Append; Deferred firing with the entry's Position once durable. Completions in order."""

    def open_cursor(name: str, initial_position: str = "latest", properties=None):
        """Deferred firing with the durable cursor ``name``, created at the end ("latest") or the
        beginning ("earliest") of the log when new, else restored where it was."""

    def new_non_durable_cursor(start_position, name=None, inclusive=True):
        """An in-memory cursor reading from ``start_position`` (a Position, or the
        EARLIEST / LATEST markers)."""

    def delete_cursor(name: str):
        """Remove a durable cursor. Deferred."""

    def last_confirmed_entry():
        """Position of the last durable entry (``(ledger, -1)`` when the log is empty)."""

    def first_position():
        """Position of the first entry still stored."""

    def next_position(position):
        """
        The Position of the entry after ``position``, skipping ledgers with no entries (the end
        of the log, one past the last entry, when nothing follows).
        """

    def number_of_entries():
        """Entries currently stored (across all ledgers)."""

    def total_size():
        """Bytes currently stored."""

    def read_entries(start, count: int):
        """Deferred firing with up to ``count`` Entries from Position ``start`` onwards."""

    def add_new_entries_listener(callback):
        """Call ``callback()`` each time entries become durable (used to wake dispatchers)."""

    def add_fenced_listener(callback):
        """Call ``callback(managed_ledger)`` once when this instance is fenced: a versioned
        compare-and-set of its metadata or of one of its cursors' metadata failed (BadVersion or
        NotFound: another broker owns it now), or a bookie answered an add with LedgerFenced.

        Contract, for the owner (the broker's topic): by the time the callback runs the state is
        already ``FENCED``, the instance has left its factory's cache (the next ``factory.open``
        of the name builds a new instance that recovers from the metadata store), no add issued
        from then on reaches a bookie, and every add that was pending or queued has been failed,
        in order, with ManagedLedgerFencedError (their errbacks have run: the owner sees those
        add failures before this call). The owner is expected to unload the topic
        (close its producers and consumers, then ``close()`` this instance, which does not
        write any metadata when fenced). The callback runs synchronously, in the reactor thread,
        at most once per listener; an exception it raises is logged and does not stop the
        others. A listener added after the instance was fenced is called at once."""

    def remove_fenced_listener(callback):
        """Forget a callback given to ``add_fenced_listener`` (no error if unknown)."""

    def close():
        """Flush cursor state, close the current ledger. Deferred."""

    def internal_stats():
        """Pulsar's ManagedLedgerInternalStats (a JSON-ready dict), its cursors' included."""


class IManagedCursor(Interface):
    name = Attribute("str")
    durable = Attribute("bool")
    mark_delete_position = Attribute("Position: everything at or before it is acknowledged")
    read_position = Attribute("Position: the next entry a read returns")

    def read_entries(count: int):
        """Deferred firing with up to ``count`` Entries from the read position (possibly [] when
        nothing is available), moving the read position past them; skips acked entries."""

    def has_more_entries():
        """True if an entry exists at or after the read position."""

    def mark_delete(position, properties=None):
        """Cumulative ack up to and including ``position``. Deferred firing once persisted."""

    def delete(positions):
        """Individual acks of ``positions``. Deferred firing once persisted."""

    def is_acknowledged(position):
        """True when ``position`` is at/before the mark-delete position or individually acked."""

    def individually_deleted_ranges():
        """List of ``(start_exclusive, end_inclusive)`` Position pairs acked above mark-delete."""

    def number_of_entries_in_backlog():
        """Entries after mark-delete not yet acknowledged."""

    def seek(position):
        """Move the read position (not the mark-delete)."""

    def reset_cursor(position):
        """Move both: everything before ``position`` acknowledged, reading resumes at it. Deferred."""

    def replay_entries(positions):
        """Deferred firing with the Entries at ``positions`` that are not acknowledged (for
        redelivery), in position order."""

    def rewind():
        """Read position back to the first unacknowledged entry."""

    def set_batch_deleted_indexes(position, ack_set):
        """For a partly acknowledged batch entry, record the indexes still unacknowledged (int64
        words in Pulsar's bit-set layout, or an int); an empty set acknowledges the entry. Deferred
        firing once persisted (coalesced with other acks)."""

    def batch_deleted_indexes(position):
        """The bit-set words of the indexes of ``position`` still unacknowledged, or None."""

    def internal_stats():
        """Pulsar's CursorStats of this cursor (a JSON-ready dict)."""


class OffloadAlreadyRunningError(ManagedLedgerError):
    """An offload was asked for while one is still running on the same topic (Pulsar answers 409)."""


class OffloadNotConfiguredError(ManagedLedgerError):
    """An offload was asked for and the topic has no offload driver configured."""
