"""
The object-store contract of tiered storage, and ``MemoryBlobStore`` (tests).

A blob store is BLOCKING and thread-safe: the offloader calls it from its own thread pool, never
from the reactor thread, and several calls may run at once. Keys are plain strings (no leading
'/'). Every method raises ``BlobStoreError`` (``BlobNotFoundError`` for a missing key) with a text
that says what failed; nothing else escapes.

A large object is written as a multipart upload: ``create_multipart``, then ``upload_part`` with
numbers 1, 2, ... in order, every part but the last at least ``min_part_size`` bytes, then
``complete_multipart`` with the tokens ``upload_part`` returned. Until the completion the object
does not exist for readers; ``abort_multipart`` drops what was uploaded.
"""

import threading


class BlobStoreError(Exception):
    """An object-store call failed (unreachable, refused, malformed answer...)."""


class BlobNotFoundError(BlobStoreError):
    """The key (or the multipart upload) does not exist."""


class BlobStore:
    """The contract (see the module text). ``driver_name`` and ``metadata`` are recorded with each
    offloaded ledger so that a reader finds its objects again even after the configuration changed:
    ``drivers.open_blob_store(driver_name, metadata)`` must reopen the same store."""

    driver_name = ""
    #: JSON-able settings naming the location (bucket, region, endpoint / directory); no secrets.
    metadata: dict = {}
    #: The smallest part but the last of a multipart upload (S3: 5 MiB).
    min_part_size = 5 * 1024 * 1024

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; fewer only when the object ends before (never more)."""
        raise NotImplementedError

    def size(self, key: str) -> int:
        """The object's length; BlobNotFoundError when there is none."""
        raise NotImplementedError

    def delete(self, keys) -> None:
        """Delete the keys; a key that does not exist is not an error."""
        raise NotImplementedError

    def create_multipart(self, key: str) -> str:
        """An upload id."""
        raise NotImplementedError

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes):
        """A token for ``complete_multipart`` (S3: the part's ETag)."""
        raise NotImplementedError

    def complete_multipart(self, key: str, upload_id: str, parts: list) -> None:
        """``parts``: ``[(number, token), ...]`` in order."""
        raise NotImplementedError

    def abort_multipart(self, key: str, upload_id: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections; no call follows."""


class MemoryBlobStore(BlobStore):
    """A blob store in a dict, for tests: ``fail`` (a set of method names) makes those calls raise
    BlobStoreError, ``calls`` counts the calls by method name."""

    driver_name = "memory"

    def __init__(self, name="memory", min_part_size=16):
        self.metadata = {"name": name}
        self.min_part_size = min_part_size
        self.objects = {}
        self.uploads = {}
        self.fail = set()
        self.calls = {}
        self._lock = threading.Lock()
        self._next_upload = 0

    def _call(self, method):
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
        if method in self.fail:
            raise BlobStoreError(f"{method}: injected failure")

    def put(self, key, data):
        self._call("put")
        with self._lock:
            self.objects[key] = bytes(data)

    def get_range(self, key, start, length):
        self._call("get_range")
        with self._lock:
            data = self.objects.get(key)
        if data is None:
            raise BlobNotFoundError(f"no object {key}")
        return data[start:start + length]

    def size(self, key):
        self._call("size")
        with self._lock:
            data = self.objects.get(key)
        if data is None:
            raise BlobNotFoundError(f"no object {key}")
        return len(data)

    def delete(self, keys):
        self._call("delete")
        with self._lock:
            for key in keys:
                self.objects.pop(key, None)

    def create_multipart(self, key):
        self._call("create_multipart")
        with self._lock:
            self._next_upload += 1
            upload_id = str(self._next_upload)
            self.uploads[upload_id] = (key, {})
        return upload_id

    def upload_part(self, key, upload_id, number, data):
        self._call("upload_part")
        with self._lock:
            upload = self.uploads.get(upload_id)
            if upload is None or upload[0] != key:
                raise BlobNotFoundError(f"no upload {upload_id} of {key}")
            upload[1][number] = bytes(data)
        return f"etag-{number}"

    def complete_multipart(self, key, upload_id, parts):
        self._call("complete_multipart")
        with self._lock:
            upload = self.uploads.pop(upload_id, None)
            if upload is None or upload[0] != key:
                raise BlobNotFoundError(f"no upload {upload_id} of {key}")
            chunks = upload[1]
            numbers = [n for n, _ in parts]
            if numbers != sorted(chunks) or numbers != list(range(1, len(numbers) + 1)):
                raise BlobStoreError(f"parts {numbers} do not match the upload's {sorted(chunks)}")
            for n in numbers[:-1]:
                if len(chunks[n]) < self.min_part_size:
                    raise BlobStoreError(f"part {n} is smaller than {self.min_part_size} bytes")
            self.objects[key] = b"".join(chunks[n] for n in numbers)

    def abort_multipart(self, key, upload_id):
        self._call("abort_multipart")
        with self._lock:
            self.uploads.pop(upload_id, None)
