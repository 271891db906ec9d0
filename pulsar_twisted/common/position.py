"""Positions in a managed ledger and the entries read from it."""

from typing import NamedTuple


class Position(NamedTuple):
    """``(ledger_id, entry_id)``; tuples order the way Pulsar orders positions."""

    ledger_id: int
    entry_id: int

    def next(self) -> "Position":
        return Position(self.ledger_id, self.entry_id + 1)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


class Entry(NamedTuple):
    """One stored entry: where it is and its bytes (Pulsar metadata + payload, as received)."""

    position: Position
    data: bytes


EARLIEST = Position(-1, -1)
"""Before every entry."""

LATEST = Position(2**63 - 1, 2**63 - 1)
"""Marker for "after the last entry"; resolved by the managed ledger when a cursor opens."""
