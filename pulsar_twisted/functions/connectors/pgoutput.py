"""
A decoder of PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1, text
tuple format), as ``pg_logical_slot_peek_binary_changes(slot, NULL, n, 'proto_version', '1',
'publication_names', ...)`` returns them: one message per row.

Messages (PostgreSQL's "Logical Replication Message Formats"): Begin ``B`` (final LSN, commit
time, xid), Commit ``C`` (flags, commit LSN, end LSN, commit time), Relation ``R`` (relation id,
schema, table, replica identity, columns with their key flag and type oid), Insert ``I``,
Update ``U`` (optionally the old key ``K`` or old row ``O``, then the new row ``N``), Delete
``D`` (``K`` or ``O``), Truncate ``T``, Origin ``O``, Type ``Y`` and Message ``M``. Times are
microseconds since 2000-01-01 UTC; values come as text (``None`` for SQL NULL,
``UNCHANGED_TOAST`` for a TOASTed value the update did not touch).
"""

import struct

#: Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
PG_EPOCH_US = 946_684_800_000_000


class Unchanged:
    """A TOASTed column value an update did not change (pgoutput sends no value)."""

    def __repr__(self):
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = Unchanged()


class DecodeError(ValueError):
    """A pgoutput message this decoder cannot read."""


class Reader:
    def __init__(self, data: bytes):
        self.data, self.at = bytes(data), 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise DecodeError(f"message truncated at byte {self.at} (wanted {n} more)")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def int8(self) -> int:
        return self.take(1)[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uint64(self) -> int:
        return struct.unpack(">Q", self.take(8))[0]

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError(f"unterminated string at byte {self.at}")
        text = self.data[self.at:end].decode("utf-8")
        self.at = end + 1
        return text


def lsn_text(lsn: int) -> str:
    """PostgreSQL's ``X/Y`` text form of an LSN."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def unix_ms(pg_us: int) -> int:
    return (pg_us + PG_EPOCH_US) // 1000


def _tuple(r: Reader) -> list:
    values = []
    for _ in range(r.int16()):
        kind = chr(r.int8())
        if kind == "n":
            values.append(None)
        elif kind == "u":
            values.append(UNCHANGED_TOAST)
        elif kind in "tb":
            raw = r.take(r.int32())
            values.append(raw.decode("utf-8") if kind == "t" else raw)
        else:
            raise DecodeError(f"unknown tuple value kind {kind!r}")
    return values


def decode(data: bytes) -> dict:
    """One pgoutput message -> a dict with ``type`` (``begin``, ``commit``, ``relation``,
    ``insert``, ``update``, ``delete``, ``truncate``, ``origin``, ``type``, ``message``) and its
    fields. DecodeError for what is not pgoutput."""
    r = Reader(data)
    tag = chr(r.int8())
    if tag == "B":
        return {"type": "begin", "final_lsn": r.uint64(), "commit_time": r.int64(), "xid": r.uint32()}
    if tag == "C":
        return {"type": "commit", "flags": r.int8(), "commit_lsn": r.uint64(), "end_lsn": r.uint64(),
                "commit_time": r.int64()}
    if tag == "R":
        message = {"type": "relation", "relid": r.uint32(), "schema": r.string(), "table": r.string(),
                   "replica_identity": chr(r.int8()), "columns": []}
        for _ in range(r.int16()):
            flags, name, type_oid, typmod = r.int8(), r.string(), r.uint32(), r.int32()
            message["columns"].append({"name": name, "key": bool(flags & 1), "type_oid": type_oid,
                                       "typmod": typmod})
        return message
    if tag == "I":
        relid = r.uint32()
        if chr(r.int8()) != "N":
            raise DecodeError("insert without a new tuple")
        return {"type": "insert", "relid": relid, "new": _tuple(r)}
    if tag == "U":
        message = {"type": "update", "relid": r.uint32(), "old": None, "old_kind": None}
        kind = chr(r.int8())
        if kind in "KO":
            message["old_kind"], message["old"] = kind, _tuple(r)
            kind = chr(r.int8())
        if kind != "N":
            raise DecodeError(f"update without a new tuple ({kind!r})")
        message["new"] = _tuple(r)
        return message
    if tag == "D":
        relid, kind = r.uint32(), chr(r.int8())
        if kind not in "KO":
            raise DecodeError(f"delete without an old tuple ({kind!r})")
        return {"type": "delete", "relid": relid, "old_kind": kind, "old": _tuple(r)}
    if tag == "T":
        count, options = r.int32(), r.int8()
        return {"type": "truncate", "options": options, "relids": [r.uint32() for _ in range(count)]}
    if tag == "O":
        return {"type": "origin", "lsn": r.uint64(), "name": r.string()}
    if tag == "Y":
        return {"type": "type", "oid": r.uint32(), "schema": r.string(), "name": r.string()}
    if tag == "M":
        flags, lsn, prefix = r.int8(), r.uint64(), r.string()
        return {"type": "message", "transactional": bool(flags & 1), "lsn": lsn, "prefix": prefix,
                "content": r.take(r.int32())}
    raise DecodeError(f"unknown pgoutput message type {tag!r}")


#: Type oids whose text form becomes a JSON number or boolean (the rest stay strings, as
#: Debezium's default for numeric/decimal is not a float either).
_INTS = {20, 21, 23, 26}
_FLOATS = {700, 701}
_BOOL = 16


#: What Debezium puts for a TOASTed value an update did not send (its
#: ``unavailable.value.placeholder`` default).
UNAVAILABLE = "__debezium_unavailable_value"


def typed(value, type_oid: int):
    """A column's text value as JSON: integers, floats and booleans typed, the rest text; an
    unchanged TOASTed value as Debezium's placeholder."""
    if value is UNCHANGED_TOAST:
        return UNAVAILABLE
    if value is None or isinstance(value, bytes):
        return value
    if type_oid in _INTS:
        return int(value)
    if type_oid in _FLOATS:
        return float(value)
    if type_oid == _BOOL:
        return value in ("t", "true")
    return value
