"""
Stored formats of the managed ledger: the ledger list node, the cursor node and the cursor
snapshot entries written to cursor ledgers.

All three are compact JSON objects carrying ``"v"`` (format version). Readers accept
versions up to the current one (``VERSION`` for the ledger node, ``CURSOR_VERSION`` for the
cursor formats) and reject anything else with ``FormatError`` rather than guess.
Pure functions over bytes: no Twisted here.

Ledger node (``/managed-ledgers/<quoted name>``)::

    {"v": 1, "ledgers": [[id, entries, size, timestamp_ms], ...], "props": {...},
     "terminated": [ledger, entry] | null}

Version 2 is written once a ledger has been offloaded to tiered storage (``mledger/offloads.py``):
such a ledger's row has a fifth element, its offload context (Pulsar's ``OffloadContext``)::

    {"uid": "<hex uuid>", "complete": bool, "bkDeleted": bool, "ts": offload_time_ms,
     "driver": "aws-s3", "meta": {"bucket": ..., "region": ..., "endpoint": ...}}

``uid`` names the objects of the offload (``mledger/offload/format.py``); ``complete`` says they are
whole and may be read; ``bkDeleted`` that the bookies' copy is gone; ``driver`` and ``meta`` where
the objects are, as they were when written.

Cursor node (``/managed-ledgers/<quoted name>/<quoted cursor>``)::

    {"v": 2, "ledger": cursor_ledger_id | -1, "md": [ledger, entry], "props": {...},
     "ranges": [...same as below...], "active_ms": t, "bi": [...same as below...]}

Cursor snapshot (one entry of the cursor ledger)::

    {"v": 2, "md": [ledger, entry], "ranges": [[ledger_id, first, last, first, last, ...], ...],
     "props": {...}, "bi": [[ledger_id, entry_id, word0, word1, ...], ...]}

where each ranges row holds the inclusive entry id ranges of one ledger, and each ``bi`` row the
batch indexes NOT yet acknowledged of one partly acknowledged batch entry (Pulsar's
``batchDeletedIndexes``, persisted there as ``BatchedEntryDeletionIndexInfo``): signed int64
words of a java.util.BitSet (``mledger.bitset``), the very ``ack_set`` sent with the entry when it
is delivered again. Version 1 (before ``bi``) is still read, as having no partly acked batches.
"""

import heapq
import json
import re
from typing import NamedTuple
from urllib.parse import quote, unquote

from pulsar_twisted.common.position import Position
from pulsar_twisted.metadata.layout import MANAGED_LEDGERS_ROOT as ROOT
from pulsar_twisted.mledger.bitset import int_to_words, is_int64, words_to_int

#: Version of the ledger node (2: offload contexts; written only when a ledger has one).
VERSION = 2
VERSION_PLAIN = 1
#: Version of the cursor node and cursor snapshots (2: batch deleted indexes, ``bi``).
CURSOR_VERSION = 2


class FormatError(ValueError):
    """Stored bytes that are not one of our formats (or of a newer version)."""


#: An offload's uid: a UUID's text (letters, digits, '-').
_UID = re.compile(r"[A-Za-z0-9-]{1,64}")


class OffloadContext:
    """Where and how far a ledger was offloaded (immutable: a change is a new context)."""

    __slots__ = ("uid", "complete", "bk_deleted", "timestamp", "driver", "metadata")

    def __init__(self, uid: str, complete=False, bk_deleted=False, timestamp=0, driver="", metadata=None):
        self.uid = uid
        self.complete = complete
        self.bk_deleted = bk_deleted
        self.timestamp = timestamp
        self.driver = driver
        self.metadata = dict(metadata or {})

    def replace(self, **changes) -> "OffloadContext":
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return OffloadContext(**values)

    def to_json(self) -> dict:
        return {"uid": self.uid, "complete": self.complete, "bkDeleted": self.bk_deleted,
                "ts": self.timestamp, "driver": self.driver, "meta": self.metadata}

    @classmethod
    def from_json(cls, obj) -> "OffloadContext":
        if not isinstance(obj, dict):
            raise FormatError(f"bad offload context {obj!r}")
        uid, driver, meta = obj.get("uid"), obj.get("driver", ""), obj.get("meta", {})
        complete, deleted, ts = obj.get("complete"), obj.get("bkDeleted"), obj.get("ts", 0)
        if (not isinstance(uid, str) or not _UID.fullmatch(uid) or not isinstance(driver, str)
                or not isinstance(meta, dict) or not isinstance(complete, bool)
                or not isinstance(deleted, bool) or not isinstance(ts, int)
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
                or (deleted and not complete)):
            # The uid names objects, the meta a store: neither may be anything; and only a
            # complete offload can have left the bookies.
            raise FormatError(f"bad offload context {obj!r}")
        return cls(uid, complete, deleted, ts, driver, meta)

    def __eq__(self, other):
        return isinstance(other, OffloadContext) and self.to_json() == other.to_json()

    def __repr__(self):
        return f"OffloadContext({self.to_json()!r})"


#: Names made only of what ``quote(name, safe="")`` keeps as it is, and '/'.
_PLAIN = re.compile(r"[A-Za-z0-9_.~/-]*")


def _segment(name: str) -> str:
    """``quote(name, safe="")``. Topic and cursor names are nearly always letters, digits, '-', '_',
    '.' and '/', for which that is '/' made '%2F': 0.4 us where ``quote`` takes 2.7, and a new topic
    asks twice (issue 14)."""
    if _PLAIN.fullmatch(name):
        return name.replace("/", "%2F")
    return quote(name, safe="")


def ledger_path(name: str) -> str:
    """Metadata path of managed ledger ``name``: names may hold '/' (``tenant/ns/persistent/t``),
    so the name is percent-encoded into ONE path segment; cursors then are its only children."""
    return f"{ROOT}/{_segment(name)}"


def cursor_path(name: str, cursor: str) -> str:
    return f"{ledger_path(name)}/{_segment(cursor)}"


def name_from_segment(segment: str) -> str:
    return unquote(segment)


def _dump(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes, max_version: int = VERSION) -> dict:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise FormatError(f"not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("v"), int):
        raise FormatError("no version")
    if not 1 <= obj["v"] <= max_version:
        raise FormatError(f"unsupported version {obj['v']}")
    return obj


def _position(value) -> Position:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(x, int) for x in value)):
        raise FormatError(f"bad position {value!r}")
    return Position(value[0], value[1])


def _props(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FormatError("bad properties")
    return value


def encode_ledger_info(ledgers, properties, terminated=None) -> bytes:
    """``ledgers``: iterable of objects with ledger_id, entries, size, timestamp and offload (an
    OffloadContext or None). Without properties, termination or offloads (a new topic's node, most
    writes) made by hand, byte for byte ``_dump``'s: 1.5 us where ``json.dumps`` took 8 (issue 14)."""
    ledgers = list(ledgers)     # may be a generator: json.dumps below must still find them all
    if not properties and terminated is None and all(li.offload is None for li in ledgers):
        rows = [(li.ledger_id, li.entries, li.size, li.timestamp) for li in ledgers]
        if all(type(n) is int for row in rows for n in row):
            return ('{"v":%d,"ledgers":[%s],"props":{},"terminated":null}'
                    % (VERSION_PLAIN, ",".join(["[%d,%d,%d,%d]" % row for row in rows]))).encode()
    return _json_ledger_info(ledgers, properties, terminated)


def _row(li) -> list:
    row = [li.ledger_id, li.entries, li.size, li.timestamp]
    if li.offload is not None:
        row.append(li.offload.to_json())
    return row


def _json_ledger_info(ledgers, properties, terminated) -> bytes:
    """``encode_ledger_info`` through ``json.dumps`` (the reference the hand-made form must equal).
    Version 1 unless a ledger has an offload context, so that a node without one stays readable by
    a broker that predates tiered storage."""
    return _dump({
        "v": VERSION if any(li.offload is not None for li in ledgers) else VERSION_PLAIN,
        "ledgers": [_row(li) for li in ledgers],
        "props": dict(properties),
        "terminated": list(terminated) if terminated is not None else None,
    })


def decode_ledger_info(data: bytes):
    """Returns ``(ledgers, properties, terminated)``: ledgers as (id, entries, size, ts, offload)
    tuples, offload an OffloadContext or None."""
    obj = _load(data)
    rows = obj.get("ledgers")
    if not isinstance(rows, list):
        raise FormatError("bad ledger list")
    ledgers = []
    for row in rows:
        if (not isinstance(row, list) or len(row) not in (4, 5)
                or not all(isinstance(x, int) for x in row[:4])):
            raise FormatError(f"bad ledger row {row!r}")
        offload = OffloadContext.from_json(row[4]) if len(row) == 5 else None
        ledgers.append((*row[:4], offload))
    term = obj.get("terminated")
    return ledgers, _props(obj.get("props")), (_position(term) if term is not None else None)


def _encode_ranges(rangeset, limit):
    rows = []
    last_lid = None
    for lid, first, last in rangeset.ranges(limit):
        if lid != last_lid:
            rows.append([lid])
            last_lid = lid
        rows[-1].extend((first, last))
    return rows


def _decode_ranges(rows):
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise FormatError("bad ranges")
    out = []
    for row in rows:
        if (not isinstance(row, list) or len(row) % 2 != 1
                or not all(isinstance(x, int) for x in row)):
            raise FormatError(f"bad range row {row!r}")
        lid = row[0]
        for i in range(1, len(row), 2):
            out.append((lid, row[i], row[i + 1]))
    return out


def _encode_batch_indexes(batch_indexes, limit):
    """The ``limit`` lowest positions of ``batch_indexes`` (position -> int bit set), as rows.
    Sorting only happens when there are partly acked batches, which is rare and few."""
    if not batch_indexes or limit <= 0:
        return []
    if len(batch_indexes) > limit:
        positions = heapq.nsmallest(limit, batch_indexes)
    else:
        positions = sorted(batch_indexes)
    return [[p[0], p[1], *int_to_words(batch_indexes[p])] for p in positions]


def _decode_batch_indexes(rows) -> dict:
    if rows is None:
        return {}
    if not isinstance(rows, list):
        raise FormatError("bad batch indexes")
    out = {}
    for row in rows:
        if (not isinstance(row, list) or len(row) < 3 or not all(type(x) is int for x in row[:2])
                or not all(is_int64(w) for w in row[2:])):
            raise FormatError(f"bad batch index row {row!r}")
        bits = words_to_int(row[2:])
        if bits:
            out[Position(row[0], row[1])] = bits
    return out


class CursorSnapshot(NamedTuple):
    """A decoded cursor snapshot. ``batch_indexes``: position -> int bit set of the unacked
    indexes of each partly acknowledged batch (empty for a version 1 snapshot)."""
    mark_delete: Position
    ranges: list
    properties: dict
    batch_indexes: dict


class CursorNode(NamedTuple):
    """A decoded cursor node (fields as ``CursorSnapshot``, plus the cursor ledger id)."""
    ledger_id: int
    mark_delete: Position
    properties: dict
    ranges: list
    batch_indexes: dict


def encode_cursor_snapshot(mark_delete, rangeset, properties, max_ranges, batch_indexes=None) -> bytes:
    """Only the first ``max_ranges`` ranges are kept (Pulsar's maxUnackedRangesToPersist): entries
    of the ranges left out are redelivered after a restart, which is safe (at least once).
    ``batch_indexes`` (position -> int bit set of the unacked indexes) is bounded the same way,
    lowest positions first: a batch left out is redelivered whole (its acked indexes too)."""
    return _dump({
        "v": CURSOR_VERSION,
        "md": list(mark_delete),
        "ranges": _encode_ranges(rangeset, max_ranges),
        "props": properties or {},
        "bi": _encode_batch_indexes(batch_indexes, max_ranges),
    })


def decode_cursor_snapshot_full(data: bytes) -> CursorSnapshot:
    obj = _load(data, CURSOR_VERSION)
    return CursorSnapshot(_position(obj.get("md")), _decode_ranges(obj.get("ranges")),
                          _props(obj.get("props")), _decode_batch_indexes(obj.get("bi")))


def decode_cursor_snapshot(data: bytes):
    """Returns ``(mark_delete, [(ledger_id, first, last), ...], properties)``."""
    return tuple(decode_cursor_snapshot_full(data)[:3])


def encode_cursor_node(cursor_ledger_id, mark_delete, properties, rangeset=None,
                       max_ranges=0, active_ms=0, batch_indexes=None) -> bytes:
    return _dump({
        "v": CURSOR_VERSION,
        "ledger": cursor_ledger_id,
        "md": list(mark_delete),
        "props": properties or {},
        "ranges": _encode_ranges(rangeset, max_ranges) if rangeset is not None else [],
        "active_ms": active_ms,
        "bi": _encode_batch_indexes(batch_indexes, max_ranges),
    })


def decode_cursor_node_full(data: bytes) -> CursorNode:
    obj = _load(data, CURSOR_VERSION)
    lid = obj.get("ledger", -1)
    if not isinstance(lid, int):
        raise FormatError("bad cursor ledger id")
    return CursorNode(lid, _position(obj.get("md")), _props(obj.get("props")),
                      _decode_ranges(obj.get("ranges")), _decode_batch_indexes(obj.get("bi")))


def decode_cursor_node(data: bytes):
    """Returns ``(cursor_ledger_id, mark_delete, properties, ranges)``."""
    return tuple(decode_cursor_node_full(data)[:4])
