"""
Copying a sealed ledger to a blob store, reading it back, deleting it there (Pulsar's
``LedgerOffloader``: ``offload``, ``readOffloaded``, ``deleteOffloaded``), and the registry that
hands every managed ledger the offloader of its namespace's settings.

The blob stores block, so each call runs in a thread pool (``managedLedgerOffloadMaxThreads`` threads
copy, ``READ_THREADS`` more read, so that a long upload never keeps a consumer's read waiting). The
reactor thread only reads the ledger from the bookies and packs records.

An offload is made safe by its caller (``mledger/offloads.py``): the objects are written under a new
uid, the ledger list records the uid before the copy and marks it complete after; only then may the
bookies' copy go. This module never decides anything about the ledger list.
"""

import json

from twisted.application import service
from twisted.internet import defer
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from pulsar_twisted.ledger.interfaces import LedgerEntry
from pulsar_twisted.mledger.offload import drivers, format as fmt

log = Logger()

#: Threads reading offloaded ledgers (Pulsar's managedLedgerOffloadReadThreads default).
READ_THREADS = 2
#: Upper bounds of a namespace's block size and read buffer (s3ManagedLedgerOffloadMaxBlockSizeInBytes,
#: ...ReadBufferSizeInBytes): S3 takes parts up to 5 GiB, a broker's memory less.
MAX_BLOCK_SIZE = 256 * 1024 * 1024
MAX_READ_BUFFER = 64 * 1024 * 1024
#: Entries asked of the bookies at a time while copying: the first batch, and the most.
FIRST_READ_BATCH = 16
MAX_READ_BATCH = 1000


def in_pool(reactor, pool):
    """``call(fn, *args) -> Deferred`` running ``fn`` in ``pool``."""
    return lambda fn, *args: deferToThreadPool(reactor, pool, fn, *args)


class LedgerOffloader:
    """The offloader of one blob store. ``copy`` / ``read``: ``call(fn, *args) -> Deferred`` running
    a blocking store call off the reactor thread (``in_pool``), for copies and for reads."""

    def __init__(self, store, copy, read, block_size=64 * 1024 * 1024, read_buffer_size=1024 * 1024,
                 limit=None, credentials=None):
        self.store = store
        self._copy = copy
        self._read_call = read
        # Bounded whatever a namespace's policies say: a copy holds up to two blocks in memory.
        self.block_size = min(max(block_size, store.min_part_size), MAX_BLOCK_SIZE)
        self.read_buffer_size = min(max(read_buffer_size, 4096), MAX_READ_BUFFER)
        #: Copies at once, broker-wide (a DeferredSemaphore shared by the registry's offloaders).
        self.limit = limit if limit is not None else defer.DeferredSemaphore(1)
        self.credentials = credentials

    @property
    def driver_name(self) -> str:
        return self.store.driver_name

    @property
    def metadata(self) -> dict:
        return dict(self.store.metadata)

    # -- copying out -------------------------------------------------------------------------

    def offload(self, handle, uid: str, last_entry: int):
        """Copy entries ``0..last_entry`` of the ledger ``handle`` reads (a closed ledger) under
        ``uid``. Deferred firing with the bytes written once both objects are whole; on failure a
        multipart upload in progress is aborted, and objects already written stay (the caller
        deletes them by uid). Copies wait for a turn (``limit``) before they buffer anything."""
        return self.limit.run(lambda: defer.Deferred.fromCoroutine(self._offload(handle, uid, last_entry)))

    async def _offload(self, handle, uid, last_entry):
        lid = handle.ledger_id
        key = fmt.data_key(uid, lid)
        buf = bytearray(fmt.data_header(lid))
        uploaded = 0
        offsets = []
        parts = []
        upload_id = None
        batch = FIRST_READ_BATCH
        try:
            entry = 0
            while entry <= last_entry:
                last = min(last_entry, entry + batch - 1)
                read = await handle.read_entries(entry, last)
                size = 0
                for le in read:
                    if le.entry_id != entry:
                        raise fmt.FormatError(f"ledger {lid}: read entry {le.entry_id}, "
                                              f"expected {entry}")
                    offsets.append(uploaded + len(buf))
                    fmt.append_record(buf, entry, le.data)
                    size += len(le.data)
                    entry += 1
                if not read:
                    raise fmt.FormatError(f"ledger {lid}: no entry at {entry} (last {last_entry})")
                # As many entries as fit the read buffer next time (entries of 5 MB and of 50 bytes
                # both occur).
                batch = max(1, min(MAX_READ_BATCH, self.read_buffer_size * len(read) // max(size, 1)))
                if len(buf) >= self.block_size:
                    if upload_id is None:
                        upload_id = await self._copy(self.store.create_multipart, key)
                    part, buf = bytes(buf), bytearray()
                    token = await self._copy(self.store.upload_part, key, upload_id,
                                             len(parts) + 1, part)
                    parts.append((len(parts) + 1, token))
                    uploaded += len(part)
            total = uploaded + len(buf)
            if upload_id is None:
                await self._copy(self.store.put, key, bytes(buf))
            else:
                if buf:
                    token = await self._copy(self.store.upload_part, key, upload_id,
                                             len(parts) + 1, bytes(buf))
                    parts.append((len(parts) + 1, token))
                await self._copy(self.store.complete_multipart, key, upload_id, parts)
                upload_id = None
            await self._copy(self.store.put, fmt.index_key(uid, lid),
                             fmt.encode_index(lid, offsets, total))
        except Exception:
            if upload_id is not None:
                self._copy(self.store.abort_multipart, key, upload_id).addErrback(
                    lambda f: log.warn("offload of ledger {lid}: aborting its upload: {err}",
                                       lid=lid, err=f.getErrorMessage()))
            raise
        return total

    # -- reading back ------------------------------------------------------------------------

    def open(self, uid: str, ledger_id: int):
        """Deferred firing with an ``OffloadedReadHandle`` of the ledger offloaded under ``uid``."""
        return self._read_call(self._open, uid, ledger_id)

    def _open(self, uid, ledger_id):
        ikey = fmt.index_key(uid, ledger_id)
        index = fmt.decode_index(self.store.get_range(ikey, 0, self.store.size(ikey)), ledger_id)
        fmt.check_header(self.store.get_range(fmt.data_key(uid, ledger_id), 0, fmt.DATA_HEADER_SIZE),
                         ledger_id)
        return OffloadedReadHandle(self, uid, index)

    def _read(self, uid, index, first, last):
        start = index.offsets[first]
        data = self.store.get_range(fmt.data_key(uid, index.ledger_id), start, index.end(last) - start)
        return [LedgerEntry(index.ledger_id, e, payload)
                for e, payload in fmt.decode_records(data, first, last, index.ledger_id)]

    # -- deleting ----------------------------------------------------------------------------

    def delete(self, uid: str, ledger_id: int):
        """Delete both objects of ``uid`` (missing ones are fine). Deferred."""
        return self._copy(self.store.delete, [fmt.data_key(uid, ledger_id), fmt.index_key(uid, ledger_id)])


class OffloadedReadHandle:
    """A closed ledger read from its offloaded copy (the read side of ``ILedgerHandle``)."""

    closed = True

    def __init__(self, offloader, uid, index):
        self.offloader = offloader
        self.uid = uid
        self.index = index
        self.ledger_id = index.ledger_id
        self.last_add_confirmed = index.entries - 1
        self.length = index.data_length - fmt.DATA_HEADER_SIZE - fmt.RECORD_HEADER_SIZE * index.entries

    def read_entries(self, first: int, last: int):
        if not 0 <= first <= last <= self.last_add_confirmed:
            return defer.fail(IndexError(f"entries {first}..{last} of offloaded ledger {self.ledger_id} "
                                         f"(0..{self.last_add_confirmed})"))
        out = []
        d = defer.succeed(None)
        # Runs of at most the read buffer's size, each one ranged GET.
        start = first
        while start <= last:
            end = start
            limit = self.index.offsets[start] + self.offloader.read_buffer_size
            while end < last and self.index.end(end + 1) <= limit:
                end += 1
            d.addCallback(lambda _, s=start, e=end: self.offloader._read_call(
                self.offloader._read, self.uid, self.index, s, e))
            d.addCallback(out.extend)
            start = end + 1
        return d.addCallback(lambda _: out)

    def close(self):
        return defer.succeed(None)


class OffloaderRegistry(service.Service):
    """
    The broker's offloaders, one per blob store location: ``for_policies(OffloadPolicies)`` for
    writing a namespace's ledgers, ``for_context(driver, metadata)`` for reading a ledger where an
    earlier offload recorded it. A Service: its thread pools run between start and stop.
    """

    name = "offloaders"

    def __init__(self, reactor, max_threads: int = 2):
        self.reactor = reactor
        self.copy_pool = ThreadPool(minthreads=0, maxthreads=max(1, max_threads), name="offload-copy")
        #: As many copies at once as copying threads, whatever the number of topics offloading.
        self.copy_limit = defer.DeferredSemaphore(max(1, max_threads))
        self.read_pool = ThreadPool(minthreads=0, maxthreads=READ_THREADS, name="offload-read")
        self._offloaders = {}

    def startService(self):
        super().startService()
        self.copy_pool.start()
        self.read_pool.start()

    def stopService(self):
        super().stopService()
        for pool in (self.copy_pool, self.read_pool):
            if pool.started:
                pool.stop()
        for offloader in {id(o): o for o in self._offloaders.values()}.values():
            try:
                offloader.store.close()
            except Exception:
                log.failure("closing the blob store of {driver}", driver=offloader.driver_name)
        self._offloaders.clear()

    def _get(self, driver, settings, block_size=64 * 1024 * 1024, read_buffer_size=1024 * 1024,
             credentials=None):
        # One offloader per location: the sizes are those of the first to ask (a namespace's
        # policies usually, as topics load before their ledgers are read); credentials given by
        # a namespace's policies replace the default chain's (a reader of a recorded context gives
        # none, and keeps what the location has).
        key = (driver, json.dumps(settings, sort_keys=True))
        offloader = self._offloaders.get(key)
        if offloader is not None and credentials is not None and offloader.credentials != credentials:
            offloader.store = self._open(driver, settings, credentials)
            offloader.credentials = credentials
        if offloader is None:
            store = self._open(driver, settings, credentials)
            # The store's metadata may name the location with defaults filled in (a region): the
            # offloader of a recorded context must be this same one.
            offloader = self._offloaders.get((store.driver_name, json.dumps(store.metadata, sort_keys=True)))
            if offloader is None:
                offloader = self.add(store, block_size, read_buffer_size, credentials)
            else:
                store.close()
            self._offloaders[key] = offloader
        return offloader

    @staticmethod
    def _open(driver, settings, credentials):
        """``drivers.open_blob_store``, any failure a ValueError naming the store (a directory that
        cannot be made, a credentials profile boto3 does not find...)."""
        try:
            return drivers.open_blob_store(driver, settings, credentials)
        except ValueError:
            raise
        except Exception as e:
            raise ValueError(f"the {driver} offload store {settings}: {e}") from e

    def add(self, store, block_size=64 * 1024 * 1024, read_buffer_size=1024 * 1024, credentials=None):
        """The offloader of ``store`` from now on (tests give theirs this way)."""
        offloader = LedgerOffloader(store, self.copy_call(), self.read_call(), block_size,
                                    read_buffer_size, self.copy_limit, credentials)
        self._offloaders[(store.driver_name, json.dumps(store.metadata, sort_keys=True))] = offloader
        return offloader

    def copy_call(self):
        return in_pool(self.reactor, self.copy_pool)

    def read_call(self):
        return in_pool(self.reactor, self.read_pool)

    def for_policies(self, policies):
        """The offloader of ``policies`` (resources.policies.OffloadPolicies); None without a driver.
        ValueError (naming the setting) when the driver or its settings are not usable."""
        if not policies.driver:
            return None
        settings = drivers.settings_from(policies.driver, policies.bucket, policies.region,
                                         policies.endpoint, policies.file_system_uri)
        credentials = None
        if policies.credential_id:
            credentials = (policies.credential_id, policies.credential_secret)
        return self._get(policies.driver, settings, policies.max_block_size, policies.read_buffer_size,
                         credentials)

    def for_context(self, driver: str, metadata: dict):
        return self._get(driver, dict(metadata))
