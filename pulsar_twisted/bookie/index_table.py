"""
The index table (format in ``formats.py``): the header and first ``TABLE_INLINE_SLOTS`` entry slots of
every ledger with an id below ``TABLE_LEDGER_LIMIT``, one fixed record per ledger id in one sparse file.

Why: a ledger with a file of its own cost an inode and an fdatasync of its own. Every new topic makes a
ledger, and creating its index file was the largest single cost of a topic's creation (0.04-0.2 ms of
kernel CPU, most of it ext4 searching its inode bitmap past recently deleted inodes). A record here is
one or two ``pwrite`` calls and a share of the one ``fdatasync`` a checkpoint makes (``sync``).

Writes (``write``, ``clear``, ``sync``) come from the storage's flush thread; lookups from any thread
(``pread`` on the one descriptor). ``open`` opens the table, or makes it (header, fdatasync, directory
sync) before any record is written. A table whose header is damaged (short, junk) and that holds
nothing more (a crash while it was being made) is moved aside to ``table.bad`` (logged) and a new one
begun, unless the index directory's cookie says the table was made (no crash then: refused). One
that holds records beyond a damaged header stops the bookie (FormatError): that is no crash (the
header is durable before any record), and starting without it would lose the index of every ledger
in it and revive older copies of their headers (not fenced) from their own files. A table of
another version stops the bookie (UnknownVersionError): it is never read nor overwritten.
"""

import errno
import os
import threading

from twisted.logger import Logger

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.journal import fsync_dir
from pulsar_twisted.bookie.prealloc import punch_hole
from pulsar_twisted.common.threads import GIL_YIELD_EVERY, yield_gil

log = Logger()

_RECORD = formats.TABLE_RECORD_SIZE
_READ_RECORDS = 4096                    # records per read at load (1 MiB)
_BLOCK = 4096                           # a deleted ledger's record frees its block once all of it is zero
_NO_HEADER = bytes(formats.INDEX_HEADER_SIZE)
_ZERO_RECORD = bytes(_RECORD)
_ZERO_BLOCK = bytes(_BLOCK)


def pwrite_slots(fd: int, slots: list, first_slot_at: int) -> None:
    """Write the index slots ``(entry_id, log_id, offset, length)`` (sorted by entry id) where entry 0's
    slot is at ``first_slot_at``; consecutive entry ids (the common case: a run of new entries) in one
    pwrite."""
    size = formats.INDEX_SLOT.size
    run_start, run = -2, []
    for entry_id, log_id, offset, length in slots:
        if run and entry_id != run_start + len(run):
            os.pwrite(fd, b"".join(run), first_slot_at + run_start * size)
            run = []
        if not run:
            run_start = entry_id
        run.append(formats.encode_slot(log_id, offset, length))
        if len(run) % GIL_YIELD_EVERY == 0:
            yield_gil()
    if run:
        os.pwrite(fd, b"".join(run), first_slot_at + run_start * size)


class IndexTable:
    """``IndexTable(path)``: the index table file at ``path`` (opened by ``open``)."""

    def __init__(self, path: str):
        self.path = path
        self._fd = -1
        self._lock = threading.Lock()
        self._dirty = False
        self._punch = True      # off once the file system cannot punch holes

    def open(self, must_exist: bool = False) -> None:
        """Open the table, making it if it is missing or empty, unless ``must_exist`` (the index
        directory's cookie says the table was made: ``cookie.py``), when that refuses the load
        (FormatError), as a damaged header does however short the table (no crash cut it).
        Blocking; no-op when open."""
        with self._lock:
            if self._fd < 0:
                self._fd = self._open(must_exist)

    def _open(self, must_exist: bool) -> int:
        if must_exist and (not os.path.exists(self.path) or os.path.getsize(self.path) == 0):
            raise formats.FormatError(
                f"index table {self.path} is missing while the bookie's cookies say it was made: its "
                f"ledgers would be served as missing; not started. Restore it, or move all of the "
                f"bookie's directories aside to start it as a new bookie")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            head = os.pread(fd, _RECORD, 0)
            if head:
                try:
                    formats.decode_table_header(head)
                    return fd
                except formats.UnknownVersionError:
                    raise
                except formats.FormatError as e:
                    if must_exist or os.fstat(fd).st_size > _RECORD:
                        # The header is durable before any record is written, and before the
                        # cookies: this is no crash but a damaged disk (or not our file). Its
                        # ledgers are indexed nowhere else.
                        raise formats.FormatError(
                            f"index table {self.path}: its header is damaged ({e}) while it holds "
                            f"records or the bookie's cookies say it was made: not started, as every "
                            f"ledger indexed in it would be lost (and older copies of headers, not "
                            f"fenced, read from the ledgers' own files); restore it, or retire this "
                            f"bookie as the README's cluster section says (its directories moved "
                            f"aside, its cookie node deleted) once its ledgers are re-replicated") from None
                    log.warn("index table {path} unreadable ({error}): moved to .bad, starting a new one",
                             path=self.path, error=str(e))
                    os.close(fd)
                    fd = -1
                    os.replace(self.path, self.path + ".bad")
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            # The header is durable before any record is written: a table without one holds none.
            os.pwrite(fd, formats.encode_table_header(), 0)
            os.fdatasync(fd)
            fsync_dir(os.path.dirname(self.path))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd

    def load(self) -> tuple[dict[int, tuple[bytes, bool, int, int]], set[int]]:
        """``(ledgers, damaged)``: ``ledger_id -> (master_key, fenced, lac, last inline entry id or -1)``
        for every record with a header, and the ids whose header is damaged (logged; their ledgers
        are skipped). Blocking; after ``open``."""
        ledgers, damaged = {}, set()
        for start, data in self._chunks():
            for at in range(0, len(data), _RECORD):
                header = data[at:at + formats.INDEX_HEADER_SIZE]
                ledger_id = (start + at) // _RECORD - 1
                if ledger_id < 0 or header == _NO_HEADER[:len(header)]:
                    continue
                try:
                    key, fenced, lac = formats.decode_index_header(header)
                except formats.FormatError as e:
                    log.warn("index table {path}: ledger {ledger} skipped: {error}", path=self.path,
                             ledger=ledger_id, error=str(e))
                    damaged.add(ledger_id)
                    continue
                ledgers[ledger_id] = (key, fenced, lac, _last_inline(data, at))
        return ledgers, damaged

    def _chunks(self):
        """``(offset, bytes)`` of the table's data, record-aligned, holes skipped where the file system
        tells them (SEEK_DATA)."""
        fd = self._fd
        offset = 0
        while True:
            try:
                offset = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    return          # nothing but holes past offset
                # No SEEK_DATA here: read on, holes read as zeros.
            offset -= offset % _RECORD
            data = os.pread(fd, _READ_RECORDS * _RECORD, offset)
            if not data:
                return
            yield offset, data
            offset += len(data)

    def lookup(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        """The inline slot ``(log_id, offset, length)`` of an entry below ``TABLE_INLINE_SLOTS``, None
        if empty. Any thread."""
        with self._lock:
            if self._fd < 0:
                return None
            data = os.pread(self._fd, formats.INDEX_SLOT.size, formats.table_slot_offset(ledger_id, entry_id))
        return formats.decode_slot(data)

    def has_header(self, ledger_id: int) -> bool:
        """Whether the ledger's record has a header (it was written here, not only in its own file)."""
        self.open()
        data = os.pread(self._fd, formats.INDEX_HEADER_SIZE, formats.table_offset(ledger_id))
        return data != _NO_HEADER[:len(data)]      # past the end of the file: none

    def write(self, ledger_id: int, header: bytes | None, slots: list) -> None:
        """Write the ledger's header (if given) and inline slots (sorted); durable at the next ``sync``.
        Flush thread."""
        self.open()
        at = formats.table_offset(ledger_id)
        if header is not None:
            os.pwrite(self._fd, header, at)
        pwrite_slots(self._fd, slots, at + formats.INDEX_HEADER_SIZE)
        self._dirty = True

    def clear(self, ledger_id: int) -> None:
        """Zero a deleted ledger's record, and free its block once every record in it is zero.
        Flush thread."""
        self.open()
        fd, at = self._fd, formats.table_offset(ledger_id)
        os.pwrite(fd, _ZERO_RECORD, at)
        self._dirty = True
        block = at - at % _BLOCK
        if self._punch and os.pread(fd, _BLOCK, block) == _ZERO_BLOCK:
            try:
                punch_hole(fd, block, _BLOCK)
            except OSError as e:
                self._punch = False
                log.info("index table {path}: cannot free the blocks of deleted ledgers ({error}); "
                         "their records stay zero-filled", path=self.path, error=str(e))

    def sync(self) -> None:
        """Make the writes since the last sync durable (one fdatasync). Flush thread."""
        if self._dirty:
            os.fdatasync(self._fd)
            self._dirty = False

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _last_inline(data: bytes, at: int) -> int:
    """The highest inline entry id with a slot in the record at ``data[at:]``, -1 if none."""
    size = formats.INDEX_SLOT.size
    first = at + formats.INDEX_HEADER_SIZE
    for entry_id in range(formats.TABLE_INLINE_SLOTS - 1, -1, -1):
        if formats.decode_slot(data[first + entry_id * size:first + (entry_id + 1) * size]) is not None:
            return entry_id
    return -1
