"""
Driver name + settings -> a blob store.

The settings are the keys of the stores' ``metadata``: ``bucket``, ``region``, ``endpoint`` for the
S3 drivers and ``uri`` for ``filesystem``. An offloaded ledger records its store's
``(driver_name, metadata)``, and ``open_blob_store(driver_name, metadata)`` reopens that store
even after the broker's offload configuration changed (Pulsar keeps the driver and bucket in
each ledger's offload context for the same reason).

The S3 module (and so boto3) is imported only when an S3 driver is asked for.
"""

from .blobstore import BlobStore

S3_DRIVERS = ("aws-s3", "S3")
FILESYSTEM = "filesystem"
#: Pulsar's ``managedLedgerOffloadDriver`` values we serve.
SUPPORTED = S3_DRIVERS + (FILESYSTEM,)


def _unsupported(driver) -> ValueError:
    return ValueError(f"managedLedgerOffloadDriver {driver!r} is not supported: "
                      f"use aws-s3, S3 or filesystem")


def open_blob_store(driver: str, settings: dict, credentials=None) -> BlobStore:
    """A new store for ``driver``; ValueError naming the configuration key that is missing.
    ``credentials``: ``(access key id, secret)`` of an S3 driver, else boto3's default chain; never
    part of the settings, which are recorded with every offloaded ledger."""
    if driver in S3_DRIVERS:
        bucket = settings.get("bucket") or ""
        if not bucket:
            raise ValueError(f"managedLedgerOffloadDriver {driver} needs a bucket: "
                             f"set s3ManagedLedgerOffloadBucket")
        from .s3 import S3BlobStore
        return S3BlobStore(driver, bucket, region=settings.get("region") or "",
                           endpoint=settings.get("endpoint") or "", credentials=credentials)
    if driver == FILESYSTEM:
        uri = settings.get("uri") or ""
        if not uri:
            raise ValueError("managedLedgerOffloadDriver filesystem needs a directory: "
                             "set fileSystemURI (file:///some/dir)")
        from .filesystem import FileSystemBlobStore
        return FileSystemBlobStore(uri)
    raise _unsupported(driver)


def settings_from(driver: str, bucket: str = "", region: str = "", endpoint: str = "",
                  file_system_uri: str = "") -> dict:
    """The settings of ``open_blob_store`` from configuration values (``s3ManagedLedgerOffload
    Bucket``, ``...Region``, ``...ServiceEndpoint``, ``fileSystemURI``): only the keys
    ``driver`` uses, empty values dropped."""
    if driver in S3_DRIVERS:
        values = {"bucket": bucket, "region": region, "endpoint": endpoint}
    elif driver == FILESYSTEM:
        values = {"uri": file_system_uri}
    else:
        raise _unsupported(driver)
    return {k: v for k, v in values.items() if v}
