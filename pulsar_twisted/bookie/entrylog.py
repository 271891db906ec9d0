"""
Entry logs: the files the write cache is flushed into, and what each one holds.

Entries of all ledgers are interleaved in one current log (``<ledger_dir>/<log_id hex>.log``), rolled past
``size_limit``; new logs go round-robin over the ledger dirs. For garbage collection each log keeps a usage
map ``ledger_id -> bytes``; a closed log's map is saved in a ``.meta`` sidecar so a restart does not scan
it, and a log without a valid sidecar (the one current at a crash) is scanned.

Threads: ``open``, ``append_entries``, ``scan`` and ``remove_log`` run in the storage's single flush thread
(they never run concurrently with each other); ``read`` may be called from any thread. The read descriptors
are guarded by a lock that ``remove_log`` also takes, so a read never preads a closed (or reused) descriptor.
"""

import os
import threading

from twisted.logger import Logger

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.journal import ensure_durable_dir, fsync_dir
from pulsar_twisted.common.threads import GIL_YIELD_EVERY, yield_gil

log = Logger()

_SUFFIX = ".log"
_META_SUFFIX = ".meta"
_WRITE_CHUNK = 4 * 1024 * 1024


class EntryLogMissing(Exception):
    """The log named by an index slot is gone (compacted away after the lookup): look the entry up again."""


class EntryLogger:
    """The entry log files under ``ledger_dirs``."""

    def __init__(self, ledger_dirs: list[str], size_limit: int):
        self._dirs = list(ledger_dirs)
        self._size_limit = size_limit
        self._paths = {}             # log_id -> path, every log on disk
        self.usage = {}              # log_id -> {ledger_id: bytes}, None if unknown (bad header)
        self._read_lock = threading.Lock()
        self._read_fds = {}          # log_id -> read-only fd
        self.current_id = -1
        self._fd = -1
        self._offset = 0

    # --------------------------------------------------------------------------- flush thread only

    def open(self) -> None:
        """Find the existing logs and their usage, and start a new current log. Blocking."""
        for directory in self._dirs:
            ensure_durable_dir(directory)
            for name in os.listdir(directory):
                if name.endswith(_SUFFIX):
                    try:
                        log_id = int(name[:-len(_SUFFIX)], 16)
                    except ValueError:
                        continue
                    self._paths[log_id] = os.path.join(directory, name)
        for log_id, path in sorted(self._paths.items()):
            self.usage[log_id] = self._load_usage(log_id, path)
        self._start_log(max(self._paths, default=0) + 1)

    def append_entries(self, entries: dict[int, dict[int, bytes]]) -> dict[int, list]:
        """Append every entry and make them durable; return ``ledger_id -> [(entry_id, log_id, offset,
        length)]`` for the index. Rolls to a new log past the size limit. Blocking."""
        placements = {}
        chunk, chunk_start = [], self._offset
        for ledger_id, ledger_entries in entries.items():
            slots = placements.setdefault(ledger_id, [])
            usage = self.usage[self.current_id]
            for entry_id, data in ledger_entries.items():
                size = formats.ENTRY_LOG_RECORD.size + len(data)
                if self._offset + size > self._size_limit and self._offset > formats.ENTRY_LOG_HEADER.size:
                    self._write(chunk, chunk_start)
                    chunk = []
                    self._roll()
                    chunk_start = self._offset
                    usage = self.usage[self.current_id]
                chunk.append(formats.encode_entry_log_record_header(ledger_id, entry_id, data))
                chunk.append(data)
                if len(chunk) % GIL_YIELD_EVERY == 0:
                    yield_gil()
                slots.append((entry_id, self.current_id, self._offset, len(data)))
                usage[ledger_id] = usage.get(ledger_id, 0) + size
                self._offset += size
                if self._offset - chunk_start >= _WRITE_CHUNK:
                    self._write(chunk, chunk_start)
                    chunk, chunk_start = [], self._offset
        self._write(chunk, chunk_start)
        os.fdatasync(self._fd)
        return placements

    def scan(self, log_id: int):
        """Iterate ``(offset, ledger_id, entry_id, data)`` over a log's intact records. Blocking."""
        with open(self._paths[log_id], "rb") as f:
            try:
                formats.decode_entry_log_header(f.read(formats.ENTRY_LOG_HEADER.size))
            except formats.FormatError as e:
                log.warn("entry log {path}: {error}", path=self._paths[log_id], error=str(e))
                return
            scanner = formats.RecordScanner.entry_log(f)
            yield from scanner
            if scanner.problem:
                log.warn("entry log {path}: {problem} at offset {offset}", path=self._paths[log_id],
                         problem=scanner.problem, offset=scanner.valid_end)

    def remove_log(self, log_id: int) -> None:
        """Delete a (non-current) log and its sidecar. Blocking."""
        assert log_id != self.current_id
        path = self._paths.pop(log_id)
        self.usage.pop(log_id, None)
        with self._read_lock:
            fd = self._read_fds.pop(log_id, None)
            if fd is not None:
                os.close(fd)
        # Unlinked outside the lock: freeing a large file's blocks takes the file system tens to
        # hundreds of ms (53 ms for 256 MB here, more with online discard), and the reactor's reads
        # take this lock. Readers already see the log as missing (its path is gone) and retry
        # through the index, which names the log an entry was moved to.
        os.unlink(path)
        try:
            os.unlink(path[:-len(_SUFFIX)] + _META_SUFFIX)
        except FileNotFoundError:
            pass
        fsync_dir(os.path.dirname(path))

    def close(self) -> None:
        """Seal the current log (sidecar written) and close every descriptor. Blocking."""
        if self._fd >= 0:
            self._seal()
            os.close(self._fd)
            self._fd = -1
        with self._read_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()

    def abandon(self) -> None:
        """Close descriptors without sealing (a crash, for tests)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with self._read_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()

    # ------------------------------------------------------------------------------------- any thread

    def read(self, log_id: int, offset: int, length: int, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry at ``offset``, checked against its CRC and ids; None if the stored copy is bad.
        EntryLogMissing if the log is gone."""
        with self._read_lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                path = self._paths.get(log_id)
                if path is None:
                    raise EntryLogMissing(log_id)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    raise EntryLogMissing(log_id) from None
                self._read_fds[log_id] = fd
            record = os.pread(fd, formats.ENTRY_LOG_RECORD.size + length, offset)
        return formats.check_entry_log_record(record, ledger_id, entry_id)

    def log_ids(self) -> list[int]:
        """Flush thread only (the set changes there)."""
        return sorted(self._paths)

    def log_count(self) -> int:
        """Any thread."""
        return len(self._paths)

    # ---------------------------------------------------------------------------------------- private

    def _write(self, chunk: list, offset: int) -> None:
        if not chunk:
            return
        view = memoryview(b"".join(chunk))
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def _roll(self) -> None:
        os.fdatasync(self._fd)
        self._seal()
        os.close(self._fd)
        self._start_log(self.current_id + 1)

    def _seal(self) -> None:
        """Write the current log's usage sidecar (best effort: without it the log is scanned at start)."""
        path = self._paths[self.current_id][:-len(_SUFFIX)] + _META_SUFFIX
        with open(path, "wb") as f:
            f.write(formats.encode_usage(self.usage[self.current_id], self._offset))
            f.flush()
            os.fdatasync(f.fileno())

    def _start_log(self, log_id: int) -> None:
        directory = self._dirs[log_id % len(self._dirs)]
        path = os.path.join(directory, f"{log_id:x}{_SUFFIX}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        header = formats.encode_entry_log_header(log_id)
        os.write(fd, header)
        os.fdatasync(fd)
        fsync_dir(directory)
        self._paths[log_id] = path
        self.usage[log_id] = {}
        self._fd, self.current_id, self._offset = fd, log_id, len(header)

    def _load_usage(self, log_id: int, path: str) -> dict[int, int] | None:
        size = os.stat(path).st_size
        try:
            with open(path[:-len(_SUFFIX)] + _META_SUFFIX, "rb") as f:
                usage, log_end = formats.decode_usage(f.read())
            if log_end == size:
                return usage
        except (OSError, formats.FormatError):
            pass
        if size < formats.ENTRY_LOG_HEADER.size:
            return {}   # created, then a crash before its header: it holds nothing
        with open(path, "rb") as f:
            try:
                formats.decode_entry_log_header(f.read(formats.ENTRY_LOG_HEADER.size))
            except formats.FormatError as e:
                # Unknown contents: the index may still name records in it, so GC must leave it alone.
                log.warn("entry log {path}: {error}; kept, never garbage-collected", path=path, error=str(e))
                return None
        usage = {}
        for _offset, ledger_id, _entry_id, data in self.scan(log_id):
            usage[ledger_id] = usage.get(ledger_id, 0) + formats.ENTRY_LOG_RECORD.size + len(data)
        # Save what the scan learnt (the log is closed for good: we never append to an old log).
        try:
            with open(path[:-len(_SUFFIX)] + _META_SUFFIX, "wb") as f:
                f.write(formats.encode_usage(usage, size))
        except OSError as e:
            log.warn("entry log {path}: usage sidecar not written: {error}", path=path, error=str(e))
        return usage
