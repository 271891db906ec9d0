"""
The ``aws-s3`` and ``S3`` offload drivers: a ``BlobStore`` on one bucket, through boto3.

Pulsar names its S3 offloader twice: ``aws-s3`` for Amazon S3 and ``S3`` for S3-compatible servers
(MinIO, Ceph RGW...) reached through ``s3ManagedLedgerOffloadServiceEndpoint``. Both are this class;
the name given is kept as ``driver_name`` so that what an offloaded ledger records matches the
broker's configuration word for word.

Credentials come from boto3's default chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``,
``~/.aws/credentials``, an instance role...), as Pulsar's offloader takes them from the AWS SDK's:
no secret is ever part of the configuration we record or of ``metadata``.

boto3 is imported here and only here (``drivers`` imports this module when an S3 driver is asked
for), so the rest of the project runs where boto3 is not installed.
"""

import boto3
import boto3.exceptions
import botocore.exceptions
from botocore.config import Config
from urllib3.exceptions import HTTPError as _URLLib3Error

from .blobstore import BlobNotFoundError, BlobStore, BlobStoreError

DEFAULT_REGION = "us-east-1"

#: A call waits at most this long for a TCP connection, and this long for each read of an answer.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
#: botocore's "standard" retry mode: attempts in all (the first one included), with jittered
#: exponential backoff; with the timeouts above a dead endpoint fails a call in bounded time.
MAX_ATTEMPTS = 3
#: Connections kept per client: the offloader's thread pool shares one client.
MAX_POOL_CONNECTIONS = 32

#: S3's error codes for a key or an upload that does not exist (HEAD answers a bare "404").
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
#: delete_objects takes at most this many keys per request.
_DELETE_BATCH = 1000
_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError,
           boto3.exceptions.Boto3Error, _URLLib3Error, OSError)


def _error_code(error) -> str:
    if isinstance(error, botocore.exceptions.ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


class S3BlobStore(BlobStore):
    """A blob store on ``bucket`` (which must exist: we never create it, as Pulsar does not).

    ``region`` defaults to us-east-1; ``endpoint`` (``http://host:port``) points at an
    S3-compatible server, addressed path-style (``endpoint/bucket/key``), since such servers
    seldom resolve a bucket as a host name. The timeouts bound each attempt of a call (tests
    shorten them to see a hung endpoint fail quickly)."""

    min_part_size = 5 * 1024 * 1024

    def __init__(self, driver_name: str, bucket: str, region: str = "", endpoint: str = "", *,
                 connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                 credentials=None):
        if not bucket:
            raise ValueError("an S3 blob store needs a bucket")
        self.driver_name = driver_name
        self.bucket = bucket
        self.region = region or DEFAULT_REGION
        self.endpoint = endpoint
        self.metadata = {"bucket": bucket, "region": self.region, "endpoint": endpoint}
        options = dict(
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
            max_pool_connections=MAX_POOL_CONNECTIONS)
        if endpoint:
            # Since botocore 1.36 every request carries a CRC32 checksum by default, which several
            # S3-compatible servers refuse; send one only where the operation requires it.
            options.update(s3={"addressing_style": "path"},
                           request_checksum_calculation="when_required",
                           response_checksum_validation="when_required")
        # One client for all threads: botocore clients are thread-safe once created (a Session is
        # not, hence a private one created here, in the constructor's thread).
        keys = {}
        if credentials:
            keys = {"aws_access_key_id": credentials[0], "aws_secret_access_key": credentials[1]}
        self._client = boto3.session.Session().client(
            "s3", region_name=self.region, endpoint_url=endpoint or None, config=Config(**options),
            **keys)

    def __repr__(self):
        return f"<S3BlobStore {self.driver_name} {self._where()}>"

    def _where(self) -> str:
        return f"bucket {self.bucket!r} ({self.endpoint or 'region ' + self.region})"

    def _failure(self, operation: str, key, error) -> BlobStoreError:
        """The BlobStoreError for ``error``, naming the operation, bucket and key."""
        code = _error_code(error)
        what = f"S3 {operation}" + (f" of {key!r}" if key is not None else "") + f" in {self._where()}"
        if code == "NoSuchBucket":
            return BlobStoreError(f"{what} failed: bucket {self.bucket!r} does not exist")
        if code in _NOT_FOUND:
            return BlobNotFoundError(f"{what}: not found ({code})")
        return BlobStoreError(f"{what} failed: {error}")

    # ------------------------------------------------------------------ objects
    def put(self, key, data):
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))
        except _ERRORS as e:
            raise self._failure("put", key, e) from e

    def get_range(self, key, start, length):
        if length <= 0:
            self.size(key)     # still BlobNotFoundError for a missing key
            return b""
        try:
            answer = self._client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
            return answer["Body"].read()
        except _ERRORS as e:
            if _error_code(e) == "InvalidRange":
                return b""     # ``start`` at or past the end of an object that exists
            raise self._failure("get_range", key, e) from e

    def size(self, key):
        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except _ERRORS as e:
            if _error_code(e) in _NOT_FOUND:
                # HEAD answers a bodiless 404 for a missing bucket too: ask which one is missing,
                # so that a wrong bucket reads as a configuration error and not as a lost ledger.
                self._check_bucket("size", key)
            raise self._failure("size", key, e) from e

    def _check_bucket(self, operation, key) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except _ERRORS as e:
            if _error_code(e) in ("404", "NoSuchBucket", "NotFound"):
                raise BlobStoreError(f"S3 {operation} of {key!r} in {self._where()} failed: "
                                     f"bucket {self.bucket!r} does not exist") from e
            raise self._failure(operation, key, e) from e

    def delete(self, keys):
        keys = list(keys)
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = keys[i:i + _DELETE_BATCH]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            except _ERRORS as e:
                if len(batch) == 1:
                    raise self._failure("delete", batch[0], e) from e
                raise self._failure(f"delete of {len(batch)} keys from {batch[0]!r}", None, e) from e
            # A multi-object delete answers 200 even when some keys failed: they are listed here.
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise BlobStoreError(
                    f"S3 delete in {self._where()} failed for {len(errors)} of {len(batch)} keys, "
                    f"first {first.get('Key')!r}: {first.get('Code')} {first.get('Message')}")

    # ------------------------------------------------------------------ multipart uploads
    def create_multipart(self, key):
        try:
            return self._client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        except _ERRORS as e:
            raise self._failure("create_multipart", key, e) from e

    def upload_part(self, key, upload_id, number, data):
        try:
            return self._client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                            PartNumber=number, Body=bytes(data))["ETag"]
        except _ERRORS as e:
            raise self._failure(f"upload_part {number}", key, e) from e

    def complete_multipart(self, key, upload_id, parts):
        try:
            self._client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": n, "ETag": t} for n, t in parts]})
        except _ERRORS as e:
            raise self._failure("complete_multipart", key, e) from e

    def abort_multipart(self, key, upload_id):
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except _ERRORS as e:
            # Aborting an upload that is gone already (a retried abort, or a completed one) leaves
            # nothing behind either way, as MemoryBlobStore's abort does.
            if _error_code(e) == "NoSuchUpload":
                return
            raise self._failure("abort_multipart", key, e) from e

    def close(self):
        try:
            self._client.close()
        except _ERRORS:
            pass  # closing idle connections: nothing to report to a caller who is done
