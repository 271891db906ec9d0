"""
On-disk record formats of the bookie's local storage: journal, entry logs and ledger index.

Pure codecs (no Twisted, no threads): every function here works on bytes or on a readable binary file,
so the formats can be tested on their own and read by offline tools. All integers are big-endian.

Journal file ``<journal_dir>/<file_id hex>.txn``::

    header  [magic "PTJR"][version u16][header_size u16][file_id u64]                       16 bytes
    record  [payload_len u32][type u8][ledger_id u64][entry_id u64][crc32c u32][payload]   25 + n bytes

    crc32c covers the first 21 header bytes (length, type, ids) and the payload, so a record whose length
    field was torn is caught too. Record types and their fields:

    ADD         ledger_id, entry_id, payload = [lac i64][entry bytes]
    FENCE       ledger_id, payload = master key (creates the ledger if unknown)
    MASTER_KEY  ledger_id, payload = master key (written before a ledger's first ADD)
    DELETE      ledger_id
    CHECKPOINT  ledger_id = journal file id, entry_id = offset: every record before that position is in the
                entry logs + index, so replay may start there; earlier journal files may be deleted.

Entry log file ``<ledger_dir>/<log_id hex>.log``::

    header  [magic "PTEL"][version u16][header_size u16][log_id u64]                        16 bytes
    record  [payload_len u32][ledger_id u64][entry_id u64][crc32c u32][entry bytes]         24 + n bytes

    crc32c covers the first 20 header bytes and the entry bytes.

Ledger index file ``<ledger_dirs[0]>/index/<ledger_id hex>.idx``::

    header  [magic "PTIX"][version u16][flags u16][lac i64][key_len u16][key ...][pad][crc32c u32]
            fixed 128 bytes; crc32c over bytes 0..123; flags bit 0 = fenced
    slots   one per entry id at offset 128 + entry_id * 20:
            [log_id + 1 u64][offset u64][length u32]   (all zero = no entry; hence log_id + 1)

    The file's size tells the highest slot ever written; slots are written with pwrite (sparse files).
    A ledger with a record in the index table keeps only its slots from ``TABLE_INLINE_SLOTS`` on here
    (the file is made when the first of them is flushed); its header here is a copy, the table's wins
    (the fence and LAC, which only grow, count from either copy).

Index table ``<ledger_dirs[0]>/index/table`` (a sparse file, one 256-byte record per ledger id)::

    header  [magic "PTIT"][version u16][record_size u16][inline_slots u16][pad][crc32c u32]   256 bytes
    record  at (ledger_id + 1) * 256, for ledger ids below TABLE_LEDGER_LIMIT:
            [the 128-byte index header above][slots of entry ids 0..5, 20 bytes each][pad]
            an all-zero header is no ledger (a hole, never written, or a deleted ledger's)

    A new ledger's header and first entries go in its record: no file is created per new ledger
    (creating one cost a topic's creation more kernel CPU than all the rest of its storage work).

Entry log usage sidecar ``<log_id hex>.meta``: see ``encode_usage``.

Deleted-ledger list ``<ledger_dirs[0]>/index/deleted``: see ``encode_deleted_header``.
"""

import struct

import crc32c

# ----------------------------------------------------------------------------------------------- journal

JOURNAL_MAGIC = b"PTJR"
JOURNAL_VERSION = 1
JOURNAL_HEADER = struct.Struct(">4sHHQ")
JOURNAL_RECORD = struct.Struct(">IBQQI")
_JOURNAL_CRC_SPAN = 21  # bytes of the record header covered by the CRC (all but the CRC itself)

REC_ADD = 1
REC_FENCE = 2
REC_MASTER_KEY = 3
REC_DELETE = 4
REC_CHECKPOINT = 5
RECORD_TYPES = frozenset((REC_ADD, REC_FENCE, REC_MASTER_KEY, REC_DELETE, REC_CHECKPOINT))

LAC = struct.Struct(">q")

# A length field beyond this is junk, not a record: it stops a torn length from making the scanner try to
# read gigabytes. Entries are bounded far below this by the broker's max message size.
MAX_RECORD_PAYLOAD = 256 * 1024 * 1024


class FormatError(ValueError):
    """A file's header is missing, short, or not ours (bad magic, unknown version)."""


def encode_journal_header(file_id: int) -> bytes:
    return JOURNAL_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION, JOURNAL_HEADER.size, file_id)


def decode_journal_header(data: bytes) -> int:
    """Return the file id of a journal header; FormatError if it is short or not a journal header."""
    return _decode_file_header(data, JOURNAL_MAGIC, JOURNAL_VERSION)


def encode_journal_record(rtype: int, ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    """One journal record as bytes (header + payload)."""
    return encode_journal_record_header(rtype, ledger_id, entry_id, payload) + payload


def encode_journal_record_header(rtype: int, ledger_id: int, entry_id: int, payload: bytes,
                                 payload_prefix: bytes = b"") -> bytes:
    """The 25-byte record header for ``payload_prefix + payload``, and the prefix appended to it.

    Lets the add path queue ``(header, data)`` without first copying a large entry into one buffer.
    """
    n = len(payload_prefix) + len(payload)
    head = JOURNAL_RECORD.pack(n, rtype, ledger_id, entry_id, 0)
    crc = crc32c.crc32c(head[:_JOURNAL_CRC_SPAN])
    if payload_prefix:
        crc = crc32c.crc32c(payload_prefix, crc)
    crc = crc32c.crc32c(payload, crc)
    return head[:_JOURNAL_CRC_SPAN] + crc.to_bytes(4, "big") + payload_prefix


_ADD_COVERED = struct.Struct(">IBQQq")      # what the CRC covers before the entry: header span, lac
_ADD_HEADER = struct.Struct(">IBQQIq")      # JOURNAL_RECORD, then the ADD payload's lac prefix
assert _ADD_COVERED.size == _JOURNAL_CRC_SPAN + LAC.size and _ADD_HEADER.size == _ADD_COVERED.size + 4


def encode_add_record_header(ledger_id: int, entry_id: int, lac: int, data: bytes,
                             _covered=_ADD_COVERED.pack, _header=_ADD_HEADER.pack, _crc=crc32c.crc32c,
                             _n=LAC.size, _t=REC_ADD) -> bytes:
    """Header + lac prefix of an ADD record; the record is this followed by ``data``.
    The bytes of ``encode_journal_record_header(REC_ADD, ledger_id, entry_id, data,
    LAC.pack(lac))``, packed directly: it runs once per stored entry. The CRC runs over the
    covered header fields and the lac packed together, then ``data`` (two calls, not three)."""
    n = _n + len(data)
    crc = _crc(data, _crc(_covered(n, _t, ledger_id, entry_id, lac)))
    return _header(n, _t, ledger_id, entry_id, crc, lac)


def decode_add_payload(payload: bytes) -> tuple[int, bytes]:
    """``(lac, entry bytes)`` of an ADD record's payload."""
    if len(payload) < LAC.size:
        raise FormatError("ADD payload shorter than its lac field")
    return LAC.unpack_from(payload)[0], payload[LAC.size:]


# -------------------------------------------------------------------------------------------- entry logs

ENTRY_LOG_MAGIC = b"PTEL"
ENTRY_LOG_VERSION = 1
ENTRY_LOG_HEADER = struct.Struct(">4sHHQ")
ENTRY_LOG_RECORD = struct.Struct(">IQQI")
_ENTRY_LOG_CRC_SPAN = 20


def encode_entry_log_header(log_id: int) -> bytes:
    return ENTRY_LOG_HEADER.pack(ENTRY_LOG_MAGIC, ENTRY_LOG_VERSION, ENTRY_LOG_HEADER.size, log_id)


def decode_entry_log_header(data: bytes) -> int:
    """Return the log id of an entry log header; FormatError if it is short or not ours."""
    return _decode_file_header(data, ENTRY_LOG_MAGIC, ENTRY_LOG_VERSION)


_ENTRY_LOG_COVERED = struct.Struct(">IQQ")     # what the CRC covers before the entry
assert _ENTRY_LOG_COVERED.size == _ENTRY_LOG_CRC_SPAN


def encode_entry_log_record_header(ledger_id: int, entry_id: int, data: bytes,
                                   _covered=_ENTRY_LOG_COVERED.pack, _header=ENTRY_LOG_RECORD.pack,
                                   _crc=crc32c.crc32c) -> bytes:
    """The 24-byte header preceding ``data`` in an entry log (packed directly, CRC included: it
    runs once per entry a checkpoint writes)."""
    n = len(data)
    return _header(n, ledger_id, entry_id, _crc(data, _crc(_covered(n, ledger_id, entry_id))))


def check_entry_log_record(record: bytes, ledger_id: int, entry_id: int) -> bytes | None:
    """Return the entry bytes of ``record`` (header + data) if it is intact and is (ledger_id, entry_id);
    None otherwise (torn, CRC mismatch, or another entry: all mean the stored copy cannot be trusted)."""
    if len(record) < ENTRY_LOG_RECORD.size:
        return None
    n, lid, eid, crc = ENTRY_LOG_RECORD.unpack_from(record)
    if lid != ledger_id or eid != entry_id or len(record) != ENTRY_LOG_RECORD.size + n:
        return None
    data = record[ENTRY_LOG_RECORD.size:]
    if crc32c.crc32c(data, crc32c.crc32c(record[:_ENTRY_LOG_CRC_SPAN])) != crc:
        return None
    return data


# Entry log usage sidecar ``<log_id hex>.meta``, written when a log is closed (rolled or at stop) so a restart
# need not scan the whole log to learn which ledgers it holds:
#     [magic "PTEM"][version u16][count u32][log_end u64] then count x [ledger_id u64][bytes u64], then [crc32c u32]
# ``log_end`` is the log's size when the sidecar was written; a log of another size is scanned instead.
USAGE_MAGIC = b"PTEM"
USAGE_VERSION = 1
_USAGE_HEAD = struct.Struct(">4sHIQ")
_USAGE_ITEM = struct.Struct(">QQ")


def encode_usage(usage: dict[int, int], log_end: int) -> bytes:
    body = _USAGE_HEAD.pack(USAGE_MAGIC, USAGE_VERSION, len(usage), log_end) + b"".join(
        _USAGE_ITEM.pack(lid, n) for lid, n in sorted(usage.items()))
    return body + crc32c.crc32c(body).to_bytes(4, "big")


def decode_usage(data: bytes) -> tuple[dict[int, int], int]:
    """``(ledger_id -> bytes, log_end)``; FormatError if the sidecar is short, junk or CRC-bad."""
    if len(data) < _USAGE_HEAD.size + 4:
        raise FormatError("usage sidecar truncated")
    magic, version, count, log_end = _USAGE_HEAD.unpack_from(data)
    if magic != USAGE_MAGIC or version != USAGE_VERSION:
        raise FormatError("not a usage sidecar")
    end = _USAGE_HEAD.size + count * _USAGE_ITEM.size
    if len(data) != end + 4 or crc32c.crc32c(data[:end]).to_bytes(4, "big") != data[end:]:
        raise FormatError("usage sidecar CRC mismatch")
    usage = dict(_USAGE_ITEM.unpack_from(data, _USAGE_HEAD.size + i * _USAGE_ITEM.size) for i in range(count))
    return usage, log_end


# ----------------------------------------------------------------------------------------------- index

INDEX_MAGIC = b"PTIX"
INDEX_VERSION = 1
INDEX_HEADER_SIZE = 128
_INDEX_HEADER_FIXED = struct.Struct(">4sHHqH")
INDEX_MAX_KEY = INDEX_HEADER_SIZE - _INDEX_HEADER_FIXED.size - 4
INDEX_SLOT = struct.Struct(">QQI")
INDEX_FLAG_FENCED = 1
EMPTY_SLOT = bytes(INDEX_SLOT.size)


def encode_index_header(master_key: bytes, fenced: bool, lac: int) -> bytes:
    """The fixed 128-byte ledger header of an index file."""
    if len(master_key) > INDEX_MAX_KEY:
        raise ValueError(f"master key longer than {INDEX_MAX_KEY} bytes")
    fixed = _INDEX_HEADER_FIXED.pack(INDEX_MAGIC, INDEX_VERSION, INDEX_FLAG_FENCED if fenced else 0, lac,
                                     len(master_key))
    body = (fixed + master_key).ljust(INDEX_HEADER_SIZE - 4, b"\0")
    return body + crc32c.crc32c(body).to_bytes(4, "big")


def decode_index_header(data: bytes) -> tuple[bytes, bool, int]:
    """``(master_key, fenced, lac)``; FormatError if short, not ours, or its CRC does not match."""
    if len(data) < INDEX_HEADER_SIZE:
        raise FormatError("index header truncated")
    body, crc = data[:INDEX_HEADER_SIZE - 4], data[INDEX_HEADER_SIZE - 4:INDEX_HEADER_SIZE]
    magic, version, flags, lac, key_len = _INDEX_HEADER_FIXED.unpack_from(body)
    if magic != INDEX_MAGIC:
        raise FormatError("not an index file")
    if version != INDEX_VERSION:
        raise FormatError(f"unknown index version {version}")
    if crc32c.crc32c(body).to_bytes(4, "big") != crc or key_len > INDEX_MAX_KEY:
        raise FormatError("index header CRC mismatch")
    start = _INDEX_HEADER_FIXED.size
    return body[start:start + key_len], bool(flags & INDEX_FLAG_FENCED), lac


def slot_offset(entry_id: int) -> int:
    return INDEX_HEADER_SIZE + entry_id * INDEX_SLOT.size


def encode_slot(log_id: int, offset: int, length: int) -> bytes:
    return INDEX_SLOT.pack(log_id + 1, offset, length)


def decode_slot(data: bytes) -> tuple[int, int, int] | None:
    """``(log_id, offset, length)`` or None for an empty (or short, i.e. never written) slot."""
    if len(data) < INDEX_SLOT.size or data == EMPTY_SLOT:
        return None
    log_plus_one, offset, length = INDEX_SLOT.unpack_from(data)
    if log_plus_one == 0:
        return None
    return log_plus_one - 1, offset, length


# ----------------------------------------------------------------------------------------------- index table

TABLE_MAGIC = b"PTIT"
TABLE_VERSION = 1
TABLE_RECORD_SIZE = 256
TABLE_INLINE_SLOTS = (TABLE_RECORD_SIZE - INDEX_HEADER_SIZE) // INDEX_SLOT.size
#: Ledger ids from here on keep everything in their own index file (the table would pass 1 TiB).
TABLE_LEDGER_LIMIT = 1 << 32
_TABLE_HEADER_FIXED = struct.Struct(">4sHHH")


class UnknownVersionError(FormatError):
    """A file of ours written by a newer format version: not to be read, nor replaced."""


def encode_table_header() -> bytes:
    """The index table's first record."""
    fixed = _TABLE_HEADER_FIXED.pack(TABLE_MAGIC, TABLE_VERSION, TABLE_RECORD_SIZE, TABLE_INLINE_SLOTS)
    body = fixed.ljust(TABLE_RECORD_SIZE - 4, b"\0")
    return body + crc32c.crc32c(body).to_bytes(4, "big")


def decode_table_header(data: bytes) -> None:
    """Check an index table's first record: FormatError if short, not ours or damaged,
    UnknownVersionError if another version (or record layout) wrote it."""
    if len(data) < TABLE_RECORD_SIZE:
        raise FormatError("index table header truncated")
    body, crc = data[:TABLE_RECORD_SIZE - 4], data[TABLE_RECORD_SIZE - 4:TABLE_RECORD_SIZE]
    magic, version, record_size, inline = _TABLE_HEADER_FIXED.unpack_from(body)
    if magic != TABLE_MAGIC:
        raise FormatError("not an index table")
    if (version, record_size, inline) != (TABLE_VERSION, TABLE_RECORD_SIZE, TABLE_INLINE_SLOTS):
        raise UnknownVersionError(f"index table version {version} ({record_size}-byte records, "
                                  f"{inline} slots each) is not ours")
    if crc32c.crc32c(body).to_bytes(4, "big") != crc:
        raise FormatError("index table header CRC mismatch")


def in_table(ledger_id: int) -> bool:
    """Whether the ledger has a record in the index table."""
    return 0 <= ledger_id < TABLE_LEDGER_LIMIT


def table_offset(ledger_id: int) -> int:
    """Where the ledger's record (its header) starts in the index table."""
    return (ledger_id + 1) * TABLE_RECORD_SIZE


def table_slot_offset(ledger_id: int, entry_id: int) -> int:
    """Where an inline entry's slot is in the index table (``entry_id < TABLE_INLINE_SLOTS``)."""
    return (ledger_id + 1) * TABLE_RECORD_SIZE + INDEX_HEADER_SIZE + entry_id * INDEX_SLOT.size


# ----------------------------------------------------------------------------------------------- deleted

# Deleted-ledger list ``<ledger_dirs[0]>/index/deleted``: the ids of every ledger this bookie deleted, so
# that an add to one is refused after its index file (and its DELETE journal record) are gone:
#     [magic "PTDL"][version u16][pad u16] then records [ledger_id u64][crc32c of the 8 id bytes u32]
# Append-only; a torn or junk record at the tail (crash mid-append) ends the list: its delete is still
# in the journal, which is only trimmed after the append was fsynced.
DELETED_MAGIC = b"PTDL"
DELETED_VERSION = 1
DELETED_HEADER = struct.Struct(">4sHH")
DELETED_RECORD = struct.Struct(">QI")


def encode_deleted_header() -> bytes:
    return DELETED_HEADER.pack(DELETED_MAGIC, DELETED_VERSION, 0)


def encode_deleted_records(ledger_ids) -> bytes:
    return b"".join(DELETED_RECORD.pack(lid, crc32c.crc32c(lid.to_bytes(8, "big")))
                    for lid in sorted(ledger_ids))


def decode_deleted(data: bytes) -> tuple[set[int], int]:
    """``(ledger ids, length of the valid prefix)``; FormatError if the header is not ours. An empty
    file (crash before the header reached the disk) is an empty list."""
    if not data:
        return set(), 0
    if len(data) < DELETED_HEADER.size:
        raise FormatError("deleted-ledger list header truncated")
    magic, version, _ = DELETED_HEADER.unpack_from(data)
    if magic != DELETED_MAGIC or version != DELETED_VERSION:
        raise FormatError("not a deleted-ledger list")
    ids = set()
    offset = DELETED_HEADER.size
    while offset + DELETED_RECORD.size <= len(data):
        lid, crc = DELETED_RECORD.unpack_from(data, offset)
        if crc32c.crc32c(lid.to_bytes(8, "big")) != crc:
            break
        ids.add(lid)
        offset += DELETED_RECORD.size
    return ids, offset


# ----------------------------------------------------------------------------------------------- scanning

def _decode_file_header(data: bytes, magic: bytes, version: int) -> int:
    if len(data) < 16:
        raise FormatError("file header truncated")
    got_magic, got_version, header_size, file_id = JOURNAL_HEADER.unpack_from(data)
    if got_magic != magic:
        raise FormatError(f"bad magic {got_magic!r}")
    if got_version != version or header_size != 16:
        raise FormatError(f"unknown version {got_version} / header size {header_size}")
    return file_id


class RecordScanner:
    """Iterate the records of a journal or entry log file, stopping at the first bad one.

    After iteration, ``valid_end`` is the offset just past the last intact record (where a torn tail should
    be cut) and ``problem`` says why scanning stopped: None at a clean end of file (or at an all-zero
    record header: preallocated space, which no record starts with), else a short text
    ("truncated record", "CRC mismatch", ...). Reads through a buffered binary file, never the whole file
    into memory, so multi-gigabyte journals replay in bounded memory.
    """

    def __init__(self, f, start: int, record: struct.Struct, crc_span: int):
        self._f = f
        self._record = record
        self._crc_span = crc_span
        self.valid_end = start
        self.problem = None

    @classmethod
    def journal(cls, f, start: int = JOURNAL_HEADER.size) -> "RecordScanner":
        """Scanner yielding ``(offset, rtype, ledger_id, entry_id, payload)``."""
        return cls(f, start, JOURNAL_RECORD, _JOURNAL_CRC_SPAN)

    @classmethod
    def entry_log(cls, f, start: int = ENTRY_LOG_HEADER.size) -> "RecordScanner":
        """Scanner yielding ``(offset, ledger_id, entry_id, payload)``."""
        return cls(f, start, ENTRY_LOG_RECORD, _ENTRY_LOG_CRC_SPAN)

    def __iter__(self):
        f, rec, span = self._f, self._record, self._crc_span
        f.seek(self.valid_end)
        offset = self.valid_end
        while True:
            head = f.read(rec.size)
            if not head:
                return
            if len(head) < rec.size:
                self.problem = "truncated record header"
                return
            if not any(head):
                # Zeros: space preallocated past the last record (bookie/prealloc.py), the end.
                return
            fields = rec.unpack(head)
            n = fields[0]
            if n > MAX_RECORD_PAYLOAD or (len(fields) == 5 and fields[1] not in RECORD_TYPES):
                self.problem = "junk record header"
                return
            payload = f.read(n)
            if len(payload) < n:
                self.problem = "truncated record payload"
                return
            if crc32c.crc32c(payload, crc32c.crc32c(head[:span])) != fields[-1]:
                self.problem = "CRC mismatch"
                return
            yield (offset,) + fields[1:-1] + (payload,)
            offset += rec.size + n
            self.valid_end = offset
