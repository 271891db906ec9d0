"""
The embedded metadata store's files: their format, and the I/O that loads, appends to and replaces them.

Files in the data directory
---------------------------
``metadata.log``: header ``b"PTML"`` + u16 format version + u16 zero, then records ``u32 length, u32
crc32c(payload), payload``. ``metadata.snapshot``: header ``b"PTMS"`` + u16 version + u16 zero, then one
record in the same framing. A payload is ``u64 txid`` followed by operations: ``b"S"`` (set a node's full
persistent state: path, value, version, ctime, mtime, sequence counter) or ``b"D"`` (delete a path and all
below it). Records hold states, not deltas, so replay needs no knowledge of the operation that made them.
``metadata.lock`` is only ever flock'd. ``metadata.snapshot.tmp`` and ``metadata.log.tmp`` are the
files a snapshot is written to before their renames; a crash may leave them, and nothing reads them.

Recovery (``load``)
-------------------
A missing or empty log, or one whose header was torn while the log was first created, is started afresh.
The log is cut at its first torn or CRC-bad record: a write whose Deferred had fired is always before that
point. A snapshot is renamed into place only once complete, so a snapshot that is short, holds anything but
one whole record, or fails its CRC is lost data and fails the load. A file with another magic or an
unknown version fails the load with ``CorruptStoreError`` and is left as it is.

The codecs are pure functions over bytes; ``load``, ``append``, ``SnapshotWriter``, ``write_snapshot`` and
``write_snapshot_keeping`` do blocking I/O and run in the store's worker thread, never in the reactor thread.
"""

from __future__ import annotations

import os
import struct
from typing import Callable, Iterable

import crc32c
from twisted.logger import Logger

from pulsar_twisted.metadata.interfaces import MetadataStoreError

log = Logger()

# Tests replace this to count the syncs (it is called only in the worker thread). fdatasync also
# flushes the file size, which is all an append needs.
_fsync = getattr(os, "fdatasync", os.fsync)


class CorruptStoreError(MetadataStoreError):
    """A file in the data directory is not ours, has an unknown version, or a damaged snapshot."""


# ---------------------------------------------------------------------------------------------------
# Codecs: pure functions over bytes.

LOG_NAME = "metadata.log"
SNAPSHOT_NAME = "metadata.snapshot"
LOCK_NAME = "metadata.lock"
LOG_MAGIC = b"PTML"
SNAPSHOT_MAGIC = b"PTMS"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">4sHH")
_FRAME = struct.Struct(">II")
_TXID = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SET_FIELDS = struct.Struct(">qqqQ")  # version, ctime ms, mtime ms, sequence counter
_OP_SET = b"S"
_OP_DELETE = b"D"
HEADER_SIZE = _HEADER.size
MAX_RECORD = 1 << 30
#: A path's UTF-8 length is a 16-bit field of a set or delete operation.
MAX_PATH_BYTES = 0xFFFF
#: A value's length is a 32-bit field, and a record is at most MAX_RECORD.
MAX_VALUE_BYTES = MAX_RECORD - 1024


def encode_header(magic: bytes) -> bytes:
    return _HEADER.pack(magic, FORMAT_VERSION, 0)


def check_header(data: bytes, magic: bytes, name: str) -> None:
    """Raise CorruptStoreError unless ``data`` starts with a header of ours that we can read."""
    found, version, _ = _HEADER.unpack_from(data)
    if found != magic:
        raise CorruptStoreError(f"{name}: bad magic {found!r}")
    if version != FORMAT_VERSION:
        raise CorruptStoreError(f"{name}: unknown format version {version}")


def encode_set(path: str, value: bytes, version: int, ctime: int, mtime: int, seq: int) -> bytes:
    p = path.encode("utf-8")
    return b"".join((_OP_SET, _U16.pack(len(p)), p, _U32.pack(len(value)), value,
                     _SET_FIELDS.pack(version, ctime, mtime, seq)))


def encode_delete(path: str) -> bytes:
    p = path.encode("utf-8")
    return _OP_DELETE + _U16.pack(len(p)) + p


def encode_record(txid: int, ops: Iterable[bytes]) -> bytes:
    """Frame one transaction: length, CRC32C of the payload, payload (txid + operations)."""
    payload = _TXID.pack(txid) + b"".join(ops)
    return _FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload


def decode_records(data: bytes, offset: int):
    """
    Yield ``(txid, ops, end_offset)`` for each whole, CRC-good record from ``offset``; stop silently at
    the first torn or bad one (the caller cuts the file at the last ``end_offset``). ``ops`` is a list of
    ``("S", path, value, version, ctime, mtime, seq)`` and ``("D", path)`` tuples.
    """
    while offset + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, offset)
        start = offset + _FRAME.size
        end = start + length
        if length < _TXID.size or length > MAX_RECORD or end > len(data):
            return
        payload = data[start:end]
        if crc32c.crc32c(payload) != crc:
            return
        try:
            ops = _decode_ops(payload, _TXID.size)
        except (struct.error, UnicodeDecodeError, ValueError):
            return
        yield _TXID.unpack_from(payload)[0], ops, end
        offset = end


def _decode_ops(payload: bytes, pos: int) -> list:
    ops = []
    while pos < len(payload):
        kind = payload[pos:pos + 1]
        (plen,) = _U16.unpack_from(payload, pos + 1)
        pos += 1 + _U16.size
        path = payload[pos:pos + plen].decode("utf-8")
        pos += plen
        if kind == _OP_DELETE:
            ops.append(("D", path))
        elif kind == _OP_SET:
            (vlen,) = _U32.unpack_from(payload, pos)
            pos += _U32.size
            value = payload[pos:pos + vlen]
            pos += vlen
            version, ctime, mtime, seq = _SET_FIELDS.unpack_from(payload, pos)
            pos += _SET_FIELDS.size
            ops.append(("S", path, value, version, ctime, mtime, seq))
        else:
            raise ValueError(f"unknown operation {kind!r}")
    if pos != len(payload):
        raise ValueError("operation overruns its record")
    return ops


def encode_snapshot(txid: int, ops: Iterable[bytes]) -> bytes:
    """A whole snapshot file: its header and one record holding every persistent node."""
    return encode_header(SNAPSHOT_MAGIC) + encode_record(txid, ops)


# ---------------------------------------------------------------------------------------------------
# File I/O (worker thread only).

def load(data_dir: str, apply: Callable[[list], None]) -> tuple[int, int, int]:
    """
    Read the snapshot and the log, passing each transaction's decoded operations to ``apply`` in order
    (the snapshot's first, then the log's records it does not cover). Returns ``(last_txid, log_fd,
    log_size)`` with the log open for appending and cut after its last good record. Raises
    CorruptStoreError as the module docstring says, and whatever ``apply`` raises.
    """
    last_txid = 0
    snap_path = os.path.join(data_dir, SNAPSHOT_NAME)
    if os.path.exists(snap_path):
        with open(snap_path, "rb") as f:
            data = f.read()
        if len(data) < HEADER_SIZE:
            raise CorruptStoreError(f"{snap_path}: truncated header")
        check_header(data, SNAPSHOT_MAGIC, snap_path)
        records = list(decode_records(data, HEADER_SIZE))
        # A snapshot is renamed into place only once complete and fsync'd: damage is not a torn write
        # to cut away but lost data, so refuse to start rather than come up with part of the tree.
        if len(records) != 1 or records[0][2] != len(data):
            raise CorruptStoreError(f"{snap_path}: damaged snapshot")
        last_txid, ops, _ = records[0]
        apply(ops)

    log_path = os.path.join(data_dir, LOG_NAME)
    data = b""
    if os.path.exists(log_path):
        with open(log_path, "rb") as f:
            data = f.read()
    good_end = HEADER_SIZE
    if len(data) >= HEADER_SIZE:
        check_header(data, LOG_MAGIC, log_path)
        for txid, ops, end in decode_records(data, HEADER_SIZE):
            if txid > last_txid:    # older ones are in the snapshot already
                apply(ops)
                last_txid = txid
            good_end = end
        if good_end < len(data):
            log.warn("{path}: cutting {n} bytes of torn or damaged log tail at offset {offset}",
                     path=log_path, n=len(data) - good_end, offset=good_end)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if len(data) < HEADER_SIZE:
            # Missing, empty, or a header torn while the log was first created.
            os.ftruncate(fd, 0)
            os.write(fd, encode_header(LOG_MAGIC))
            _fsync(fd)
            _fsync_dir(data_dir)
        elif good_end < len(data):
            os.ftruncate(fd, good_end)
            _fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    return last_txid, fd, good_end


def _fsync_dir(data_dir: str) -> None:
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(data_dir: str, log_fd: int, snapshot) -> None:
    """Worker thread: install a snapshot (its bytes, or a ``SnapshotWriter``) durably, then empty
    the log it supersedes."""
    _install_snapshot(data_dir, snapshot)
    try:
        os.ftruncate(log_fd, HEADER_SIZE)
        _fsync(log_fd)
    except OSError as e:
        # The log may be cut already (in the page cache if not on disk): the store's idea of its
        # size is wrong from here, and the next snapshot's keep_from would point past its end.
        raise LogReplacedError(e, log_fd) from e


def write_snapshot_keeping(data_dir: str, log_fd: int, snapshot, keep_from: int) -> int:
    """
    Worker thread: install a snapshot that covers the log up to offset ``keep_from``, then drop
    that part of the log, keeping the records after it (written while the snapshot was made).
    Returns the log's descriptor from now on (a new one when records were kept: the old is closed).

    Crash safety: until the snapshot's rename the old snapshot and the whole log are intact; after
    it, the log's records up to ``keep_from`` are covered by the snapshot's txid and skipped on
    load; the kept records are written to ``metadata.log.tmp``, fsync'd and renamed over the log,
    so a crash leaves either the old log or the new one, both complete.
    """
    log_path = os.path.join(data_dir, LOG_NAME)
    if os.path.getsize(log_path) <= keep_from:
        write_snapshot(data_dir, log_fd, snapshot)
        return log_fd
    _install_snapshot(data_dir, snapshot)
    with open(log_path, "rb") as f:
        f.seek(keep_from)
        kept = f.read()
    tmp = log_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, encode_header(LOG_MAGIC) + kept)
        _fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, log_path)
    try:
        new_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        raise LogReplacedError(e, log_fd) from e
    try:
        os.close(log_fd)
    except OSError:
        pass    # the descriptor is released anyway (Linux): never close its number again
    try:
        _fsync_dir(data_dir)
    except OSError as e:
        raise LogReplacedError(e, new_fd) from e
    return new_fd


class LogReplacedError(OSError):
    """
    The log was renamed over but what followed failed: appends must go to ``log_fd`` from now on
    (the old descriptor names an unlinked file, or the rename may not be durable), and the store
    cannot promise durability any more, so it stops taking writes.
    """

    def __init__(self, cause: OSError, log_fd: int):
        super().__init__(cause.errno, f"log replaced, then: {cause}")
        self.log_fd = log_fd


class SnapshotWriter:
    """
    Worker thread: a snapshot file written as the tree is walked, a slice of operations at a time,
    so that the whole snapshot is never in memory (at 100,000 topics it is tens of megabytes, and
    it was built as one bytes object, and copied twice more, while the broker ran):
    ``SnapshotWriter(data_dir, txid)``, ``append(ops)`` per slice (its operations' encodings
    joined), then ``write_snapshot(data_dir, log_fd, writer)`` (or ``write_snapshot_keeping``)
    installs it, or ``abandon()``. The file is ``metadata.snapshot.tmp`` until installed; the
    record's length and CRC are written in its frame last, so a crash leaves a file nothing reads.
    """

    def __init__(self, data_dir: str, txid: int):
        self.tmp = os.path.join(data_dir, SNAPSHOT_NAME + ".tmp")
        self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        head = _TXID.pack(txid)
        self._length = len(head)
        self._crc = crc32c.crc32c(head)
        try:
            _write_all(self._fd, encode_header(SNAPSHOT_MAGIC) + _FRAME.pack(0, 0) + head)
        except BaseException:
            self.abandon()
            raise

    @property
    def size(self) -> int:
        """The file's size in bytes so far."""
        return HEADER_SIZE + _FRAME.size + self._length

    def append(self, ops: bytes) -> None:
        if self._length + len(ops) > MAX_RECORD:
            raise ValueError(f"metadata snapshot over {MAX_RECORD} bytes: not written")
        _write_all(self._fd, ops)
        self._length += len(ops)
        self._crc = crc32c.crc32c(ops, self._crc)

    def finish(self) -> None:
        """Complete the file and fsync it (``_install_snapshot`` renames it into place)."""
        os.pwrite(self._fd, _FRAME.pack(self._length, self._crc), HEADER_SIZE)
        _fsync(self._fd)
        fd, self._fd = self._fd, None
        os.close(fd)    # released even when it fails: ``abandon`` must not close the number again

    def abandon(self, unlink: bool = True) -> None:
        """Close (and, with ``unlink``, remove) the unfinished file, quietly: nothing reads it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        if unlink:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def _install_snapshot(data_dir: str, snapshot) -> None:
    """Make ``snapshot`` (the whole file's bytes, or a ``SnapshotWriter`` holding all of it) the
    data directory's snapshot, durably."""
    if isinstance(snapshot, SnapshotWriter):
        try:
            snapshot.finish()
        except BaseException:
            snapshot.abandon()
            raise
        tmp = snapshot.tmp
    else:
        tmp = os.path.join(data_dir, SNAPSHOT_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, snapshot)
            _fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, os.path.join(data_dir, SNAPSHOT_NAME))
    # The rename must be durable before the log is emptied, or a crash could leave neither.
    _fsync_dir(data_dir)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append(fd: int, data: bytes, sync: bool) -> None:
    """Worker thread: append records to the log, fsync'd when ``sync``."""
    _write_all(fd, data)
    if sync:
        _fsync(fd)
