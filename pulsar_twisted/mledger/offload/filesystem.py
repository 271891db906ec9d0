"""
The ``filesystem`` offload driver: a ``BlobStore`` in a local directory.

Pulsar's filesystem offloader writes through Hadoop to ``fileSystemURI`` (``hdfs://...`` or
``file:///...``); here only ``file://`` is supported: a key is a relative path under that
directory, so ``a/b`` is the file ``<dir>/a/b``.

Durability, since the bookies' copy is deleted once a ledger is offloaded: an object appears under
its name only complete and on disk. ``put`` writes a temporary file beside the target, fsyncs it,
renames it over the name and fsyncs the directory (the rename is what a crash must not lose). A
multipart upload keeps its parts in its own directory under ``.uploads/``; completion concatenates
them into a temporary file the same way, then removes the parts. Parts themselves are not fsynced:
until completion nothing refers to them, and a crash before it loses only an unfinished upload.
"""

import hashlib
import os
import shutil
import threading
import uuid
from urllib.parse import unquote, urlsplit

from .blobstore import BlobNotFoundError, BlobStore, BlobStoreError

#: The directory (under the root) holding unfinished multipart uploads; no key may start with it.
UPLOADS = ".uploads"
_KEY_FILE = "key"
_COPY_CHUNK = 1024 * 1024


def directory_of(uri: str) -> str:
    """The local directory a ``fileSystemURI`` names; ValueError unless it is ``file://``."""
    parts = urlsplit(uri or "")
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        raise ValueError(f"fileSystemURI {uri!r} is not supported: only file:// URIs "
                         f"(file:///some/dir) are supported here")
    return os.path.abspath(unquote(parts.path))


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _part_token(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class FileSystemBlobStore(BlobStore):
    """Objects as files under the directory of a ``file://`` URI (created if missing)."""

    driver_name = "filesystem"
    min_part_size = 1

    def __init__(self, uri: str):
        self.uri = uri
        self.root = directory_of(uri)
        self.metadata = {"uri": uri}
        # Serialises only the creation of directories (two puts under one new directory).
        self._mkdir_lock = threading.Lock()
        try:
            self._make_directories(self.root)
        except OSError as e:
            raise BlobStoreError(f"cannot create the offload directory {self.root}: {e}") from e

    def __repr__(self):
        return f"<FileSystemBlobStore {self.root}>"

    # ------------------------------------------------------------------ paths
    def _path(self, operation: str, key: str) -> str:
        """The file of ``key``; BlobStoreError for a key that would leave the root or touch the
        uploads directory."""
        parts = key.split("/") if isinstance(key, str) else None
        if (not parts or key.startswith("/") or os.path.isabs(key) or "\\" in key or "\0" in key
                or ".." in parts or "" in parts or "." in parts or parts[0] == UPLOADS):
            raise BlobStoreError(f"filesystem {operation}: key {key!r} refused (keys are relative "
                                 f"paths without '.', '..' or empty parts, not under {UPLOADS}/)")
        return os.path.join(self.root, *parts)

    def _upload_directory(self, upload_id: str) -> str:
        if not upload_id or not all(c in "0123456789abcdef" for c in upload_id):
            raise BlobNotFoundError(f"filesystem: no upload {upload_id!r}")
        return os.path.join(self.root, UPLOADS, upload_id)

    def _make_directories(self, path: str) -> None:
        """``os.makedirs``, fsyncing the parent of every directory it creates so that the new
        entries survive a crash as well as the file later renamed into them."""
        with self._mkdir_lock:
            missing = []
            while not os.path.isdir(path):
                missing.append(path)
                parent = os.path.dirname(path)
                if parent == path:
                    break
                path = parent
            for directory in reversed(missing):
                try:
                    os.mkdir(directory)
                except FileExistsError:
                    continue    # another store on the same directory (or process) made it
                _fsync_directory(os.path.dirname(directory))

    def _failure(self, operation: str, key, error: OSError) -> BlobStoreError:
        text = f"filesystem {operation} of {key!r} under {self.root}"
        if isinstance(error, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
            return BlobNotFoundError(f"{text}: not found")
        return BlobStoreError(f"{text} failed: {error}")

    def _write_durably(self, path: str, chunks) -> None:
        """Write ``chunks`` (bytes-likes) as ``path``: a temporary file in the same directory,
        fsynced, renamed over ``path``, then the directory fsynced."""
        directory = os.path.dirname(path)
        self._make_directories(directory)
        temporary = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(temporary, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        _fsync_directory(directory)

    # ------------------------------------------------------------------ objects
    def put(self, key, data):
        path = self._path("put", key)
        try:
            self._write_durably(path, [data])
        except OSError as e:
            raise BlobStoreError(f"filesystem put of {key!r} under {self.root} failed: {e}") from e

    def get_range(self, key, start, length):
        path = self._path("get_range", key)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(max(length, 0))
        except OSError as e:
            raise self._failure("get_range", key, e) from e

    def size(self, key):
        path = self._path("size", key)
        try:
            with open(path, "rb") as f:     # open, not stat: a directory is no object
                return os.fstat(f.fileno()).st_size
        except OSError as e:
            raise self._failure("size", key, e) from e

    def delete(self, keys):
        directories = set()
        for key in keys:
            path = self._path("delete", key)
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise self._failure("delete", key, e) from e
            directories.add(os.path.dirname(path))
        # Empty directories are left: removing one could race with a put creating a file in it.
        for directory in directories:
            try:
                _fsync_directory(directory)
            except OSError as e:
                raise BlobStoreError(f"filesystem delete: fsync of {directory} failed: {e}") from e

    # ------------------------------------------------------------------ multipart uploads
    def create_multipart(self, key):
        self._path("create_multipart", key)
        upload_id = uuid.uuid4().hex
        directory = self._upload_directory(upload_id)
        try:
            self._make_directories(os.path.join(self.root, UPLOADS))
            os.mkdir(directory)
            with open(os.path.join(directory, _KEY_FILE), "w", encoding="utf-8") as f:
                f.write(key)
        except OSError as e:
            raise BlobStoreError(f"filesystem create_multipart of {key!r} under {self.root} "
                                 f"failed: {e}") from e
        return upload_id

    def _upload(self, operation: str, key: str, upload_id: str) -> str:
        """The directory of upload ``upload_id`` of ``key``; BlobNotFoundError if there is none."""
        self._path(operation, key)
        directory = self._upload_directory(upload_id)
        try:
            with open(os.path.join(directory, _KEY_FILE), encoding="utf-8") as f:
                owner = f.read()
        except OSError:
            owner = None
        if owner != key:
            raise BlobNotFoundError(f"filesystem {operation}: no upload {upload_id} of {key!r} "
                                    f"under {self.root}")
        return directory

    def upload_part(self, key, upload_id, number, data):
        directory = self._upload(f"upload_part {number}", key, upload_id)
        if not isinstance(number, int) or number < 1:
            raise BlobStoreError(f"filesystem upload_part of {key!r}: bad part number {number!r}")
        part = os.path.join(directory, f"part-{number:05d}")
        temporary = f"{part}.{uuid.uuid4().hex}.tmp"
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, part)     # a re-sent part replaces the earlier one whole
        except OSError as e:
            raise BlobStoreError(f"filesystem upload_part {number} of {key!r} under {self.root} "
                                 f"failed: {e}") from e
        return _part_token(data)

    def complete_multipart(self, key, upload_id, parts):
        directory = self._upload("complete_multipart", key, upload_id)
        numbers = [n for n, _ in parts]
        if numbers != list(range(1, len(numbers) + 1)):
            raise BlobStoreError(f"filesystem complete_multipart of {key!r}: parts {numbers} "
                                 f"are not 1..n in order")
        files = [os.path.join(directory, f"part-{n:05d}") for n in numbers]
        try:
            self._write_durably(self._path("complete_multipart", key),
                                self._checked_parts(key, files, parts))
        except OSError as e:
            raise self._failure("complete_multipart", key, e) from e
        shutil.rmtree(directory, ignore_errors=True)

    def _checked_parts(self, key, files, parts):
        """The parts' bytes in order, checked against their tokens and ``min_part_size`` as they
        are copied: a BlobStoreError raised here stops ``_write_durably`` before its rename."""
        for path, (number, token) in zip(files, parts):
            digest, size = hashlib.blake2b(digest_size=16), 0
            with open(path, "rb") as f:
                while chunk := f.read(_COPY_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    yield chunk
            if digest.hexdigest() != token:
                raise BlobStoreError(f"filesystem complete_multipart of {key!r}: part {number} "
                                     f"does not match its token")
            if path != files[-1] and size < self.min_part_size:
                raise BlobStoreError(f"filesystem complete_multipart of {key!r}: part {number} "
                                     f"is smaller than {self.min_part_size} bytes")

    def abort_multipart(self, key, upload_id):
        try:
            directory = self._upload("abort_multipart", key, upload_id)
        except BlobNotFoundError:
            return      # gone already (aborted or completed): nothing is left either way
        shutil.rmtree(directory, ignore_errors=True)
