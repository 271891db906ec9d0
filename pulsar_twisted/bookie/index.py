"""
The ledger index: ``(ledger_id, entry_id) -> (log_id, offset, length)`` and each ledger's durable state
(master key, fenced flag, LAC), in the index table and in one file per ledger (see ``formats.py``).

A ledger with an id below ``TABLE_LEDGER_LIMIT`` has its header and first ``TABLE_INLINE_SLOTS`` slots
in its record of the index table (``index_table.py``); only its later entries' slots go in a file of its
own, made when the first of them is flushed. Other ledgers, and those written before the table existed,
have everything in their file; their header moves to the table the next time it is written, and a lookup
that finds no inline slot in the table reads the file. A header in the table wins over its file's copy
(its key; the fence and LAC, which only grow, count from either).

A file starts with the ledger's header and then holds one fixed-size slot per entry id, so a lookup is one
20-byte pread and entries may arrive in any order (sparse files). Writes (``update``, ``delete``, ``sync``)
come from the storage's flush thread; lookups from the reactor thread or the flush thread. A small LRU of
read-only descriptors, guarded by a lock, keeps lookups to one syscall; ``delete`` closes the cached
descriptor under the same lock, so a lookup never reads a recreated file through a stale descriptor.
"""

import os
import threading
from collections import OrderedDict

from twisted.logger import Logger

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.index_table import IndexTable, pwrite_slots
from pulsar_twisted.bookie.journal import ensure_durable_dir, fsync_dir

log = Logger()

_SUFFIX = ".idx"
_DELETED = "deleted"
_TABLE = "table"
_OPEN_FILES = 512
_SCAN_SLOTS = 4096


class LedgerIndex:
    """The index files of all ledgers under ``index_dir``."""

    def __init__(self, index_dir: str):
        self._dir = index_dir
        self._lock = threading.Lock()
        self._fds = OrderedDict()   # ledger_id -> read-only fd, least recently used first
        self._table = IndexTable(os.path.join(index_dir, _TABLE))

    def path(self, ledger_id: int) -> str:
        return os.path.join(self._dir, f"{ledger_id:x}{_SUFFIX}")

    @property
    def directory(self) -> str:
        return self._dir

    def load_all(self, table_must_exist: bool = False) -> dict[int, tuple[bytes, bool, int, int]]:
        """``ledger_id -> (master_key, fenced, lac, last_entry_id)`` for every readable index file.

        Blocking. A header that is damaged is logged and skipped (its ledger comes back only if the
        journal still holds it), in the table and in a file; a file's slots count after the table's.
        A ledger whose header is damaged in the table is skipped even if its file has a copy: the
        copy may be older (not fenced yet, a lower LAC). Where both headers are readable the key is
        the table's, the fence and LAC either's (they only grow). ``table_must_exist``: see
        ``IndexTable.open``."""
        ensure_durable_dir(self._dir)
        self._table.open(must_exist=table_must_exist)
        ledgers, damaged = self._table.load()
        for name in os.listdir(self._dir):
            if not name.endswith(_SUFFIX):
                continue
            try:
                ledger_id = int(name[:-len(_SUFFIX)], 16)
            except ValueError:
                continue
            if ledger_id in damaged:
                continue
            path = os.path.join(self._dir, name)
            with open(path, "rb") as f:
                in_table = ledgers.get(ledger_id)
                try:
                    key, fenced, lac = formats.decode_index_header(f.read(formats.INDEX_HEADER_SIZE))
                except formats.FormatError as e:
                    if in_table is None:
                        log.warn("index file {path} skipped: {error}", path=path, error=str(e))
                        continue
                    fenced, lac = False, -1     # the table's header serves
                if in_table is not None:
                    # The table's key; the fence and the LAC only grow, so either copy's count: the
                    # file's may be newer (a crash before the table's fdatasync, its journal lost).
                    key, table_fenced, table_lac, last_inline = in_table
                    ledgers[ledger_id] = (key, fenced or table_fenced, max(lac, table_lac),
                                          max(last_inline, _last_slot(f)))
                    continue
                ledgers[ledger_id] = (key, fenced, lac, _last_slot(f))
        return ledgers

    def lookup(self, ledger_id: int, entry_id: int) -> tuple[int, int, int] | None:
        """``(log_id, offset, length)`` of a flushed entry, None if it has none. Any thread."""
        if entry_id < formats.TABLE_INLINE_SLOTS and formats.in_table(ledger_id):
            slot = self._table.lookup(ledger_id, entry_id)
            if slot is not None:
                return slot
            # Not inline: a ledger from before the table has its first slots in its file.
        with self._lock:
            fd = self._fds.get(ledger_id)
            if fd is None:
                try:
                    fd = os.open(self.path(ledger_id), os.O_RDONLY)
                except FileNotFoundError:
                    return None
                self._fds[ledger_id] = fd
                if len(self._fds) > _OPEN_FILES:
                    os.close(self._fds.popitem(last=False)[1])
            else:
                self._fds.move_to_end(ledger_id)
            return formats.decode_slot(os.pread(fd, formats.INDEX_SLOT.size, formats.slot_offset(entry_id)))

    def update(self, ledger_id: int, header: bytes | None, slots: list[tuple[int, int, int, int]]) -> bool:
        """Write the ledger header (if given) and the slots ``(entry_id, log_id, offset, length)``; a file's
        writes are fdatasynced here, the table's by ``sync``. Return True if a file was created (the caller
        then makes the directory durable with ``sync_dir``). Blocking; flush thread only."""
        slots.sort()
        if formats.in_table(ledger_id):
            inline = 0
            while inline < len(slots) and slots[inline][0] < formats.TABLE_INLINE_SLOTS:
                inline += 1
            if header is not None or inline:
                if header is None and inline and not self._table.has_header(ledger_id):
                    # A GC move of a ledger from before the table: its first slots stay in its file.
                    inline = 0
                else:
                    self._table.write(ledger_id, header, slots[:inline])
            slots = slots[inline:]
            if not slots:
                return False
        return self._update_file(ledger_id, header, slots)

    def _update_file(self, ledger_id: int, header: bytes | None, slots: list) -> bool:
        path = self.path(ledger_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            created = os.fstat(fd).st_size == 0
            if created and header is None:
                header = formats.encode_index_header(b"", False, -1)
            if header is not None:
                os.pwrite(fd, header, 0)
            pwrite_slots(fd, slots, formats.slot_offset(0))
            os.fdatasync(fd)
        finally:
            os.close(fd)
        return created

    def delete(self, ledger_id: int) -> None:
        """Remove the ledger's record in the table (durable at ``sync``) and its index file (no error if
        it has none). Blocking; flush thread only."""
        if formats.in_table(ledger_id):
            self._table.clear(ledger_id)
        with self._lock:
            fd = self._fds.pop(ledger_id, None)
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(self.path(ledger_id))
            except FileNotFoundError:
                pass

    def sync(self) -> None:
        """Make the table's writes since the last ``sync`` durable (files are synced by ``update``).
        Blocking; flush thread only."""
        self._table.sync()

    def sync_dir(self) -> None:
        fsync_dir(self._dir)

    # The deleted-ledger list lives next to the index files because it replaces them: a ledger's
    # id goes into the list (fsynced) before its index file is removed.

    def load_deleted(self) -> set[int]:
        """The ids in the deleted-ledger list (empty if there is none). Blocking. A torn tail is
        cut off so later appends follow the last valid record."""
        path = os.path.join(self._dir, _DELETED)
        os.makedirs(self._dir, exist_ok=True)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return set()
        try:
            ids, valid = formats.decode_deleted(data)
        except formats.FormatError as e:
            log.warn("deleted-ledger list {path} unreadable ({error}): starting a new one",
                     path=path, error=str(e))
            os.replace(path, path + ".bad")
            return set()
        if valid < len(data):
            log.warn("deleted-ledger list {path}: {n} torn bytes at the tail cut off",
                     path=path, n=len(data) - valid)
            with open(path, "r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        return ids

    def append_deleted(self, ledger_ids) -> None:
        """Append ``ledger_ids`` to the deleted-ledger list and fsync it. Blocking; flush thread."""
        if not ledger_ids:
            return
        path = os.path.join(self._dir, _DELETED)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            created = os.fstat(fd).st_size == 0
            data = formats.encode_deleted_records(ledger_ids)
            if created:
                data = formats.encode_deleted_header() + data
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self._dir)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
        self._table.close()


def _last_slot(f) -> int:
    """Highest entry id with a non-empty slot, -1 if none. The file size gives the highest slot written;
    scanning back from it skips slots a crash left zero-filled (their entries are replayed from the
    journal)."""
    size = os.fstat(f.fileno()).st_size
    slot = formats.INDEX_SLOT.size
    count = max(0, (size - formats.INDEX_HEADER_SIZE) // slot)
    while count > 0:
        first = max(0, count - _SCAN_SLOTS)
        f.seek(formats.slot_offset(first))
        chunk = f.read((count - first) * slot)
        for i in range(len(chunk) // slot - 1, -1, -1):
            if formats.decode_slot(chunk[i * slot:(i + 1) * slot]) is not None:
                return first + i
        count = first
    return -1
