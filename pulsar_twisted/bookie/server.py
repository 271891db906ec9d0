"""
``BookieServer``: a ``BookieStorage`` served on the network, as BookKeeper's ``BookieServer`` is.

Start order: storage (which checks its directories' cookies, ``cookie.py``), the metadata store's
cookie for this bookie id (``resources/bookies.check_cookie``: a bookie whose directories were all
replaced must not serve under its old id; waited for while the store is unreachable), the
bookie-protocol listener (an endpoint: ``tcp:3181``, or ``ssl:...`` / an ``SSL4ServerEndpoint`` for
TLS, so TLS is configuration), a first disk check, the registration in the metadata store, then the
HTTP server. Stop runs in reverse: the registration goes first, so
clients stop choosing this bookie before it stops answering.

Registration (BookKeeper's layout, read by ``BookKeeperClient``): an EPHEMERAL node
``/ledgers/available/<bookie_id>`` while writable, ``/ledgers/available/readonly/<bookie_id>``
while read-only. Ephemeral nodes vanish with the metadata session; when the server sees its node
deleted (a session loss on ZooKeeper: the client library reconnects with a new session) it makes it
again, and every disk check also verifies it is there.

Disks: every ``disk_check_interval`` seconds (a LoopingCall on the injected clock) the fraction of
disk in use is read (``disk_usage()``, injectable; by default the fullest filesystem holding the
data dirs). Above ``disk_usage_threshold`` the bookie turns read-only (adds fail with
BookieReadOnlyError, the registration moves under readonly/); below ``disk_usage_lwm_threshold``
it turns writable again. The gap between the two keeps it from flapping.

HTTP (``http_endpoint``): ``/heartbeat`` (200 "OK"), ``/api/v1/bookie/state`` and
``/api/v1/bookie/info`` (JSON), ``/api/v1/bookie/is_ready`` and ``/metrics`` (Prometheus text,
``bookie/metrics.py``: BookKeeper's names for requests, journal and ledger storage, plus ours).
"""

import json
import shutil

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from twisted.application.service import Service
from twisted.internet import defer, endpoints, task
from twisted.logger import Logger
from twisted.web import resource, server as web_server

from pulsar_twisted.bookie.admission import LedgerAdmission
from pulsar_twisted.bookie.metrics import BookieCollector
from pulsar_twisted.bookie.metadata_gc import MetadataGarbageCollector
from pulsar_twisted.bookie.protocol import (
    VERSION, BookieRequestProcessor, BookieServerFactory, disk_space)
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError, NotFoundError
from pulsar_twisted.net.framing import DEFAULT_MAX_FRAME_SIZE
from pulsar_twisted.resources.bookies import check_cookie, register_bookie, registration_path

log = Logger()


def fullest_disk(paths):
    """A ``disk_usage`` function: the highest used fraction among the filesystems of ``paths``."""
    paths = list(paths)

    def usage() -> float:
        worst = 0.0
        for path in paths:
            try:
                figures = shutil.disk_usage(path)
            except OSError:
                continue
            if figures.total:
                worst = max(worst, (figures.total - figures.free) / figures.total)
        return worst
    return usage


class BookieServer(Service):
    """
    Serves ``storage`` (an object with the ``BookieStorage`` methods) on ``endpoint`` (an endpoint
    description string or an ``IStreamServerEndpoint``).

    ``bookie_id`` defaults to ``advertised_address:<listening port>`` (so ``tcp:0`` works in tests).
    ``metadata_store`` None: no registration (standalone testing); with a store, the first add of a
    ledger the storage does not hold is checked against the ledger's metadata
    (``bookie.admission``; ``verify_ledgers=False`` turns that off), and every
    ``metadata_gc_interval`` seconds (0: never) the ledgers whose metadata is gone are deleted
    (``bookie.metadata_gc``). ``own_storage``: start and stop
    the storage with the server. ``http_endpoint`` None: no HTTP server. Times are seconds.
    ``startService``/``start`` and ``stopService``/``stop`` return Deferreds.
    """

    def __init__(self, storage, reactor, *, endpoint="tcp:3181", bookie_id=None,
                 advertised_address="localhost", metadata_store=None, data_dirs=(), disk_usage=None,
                 disk_check_interval=10.0, disk_usage_threshold=0.95,
                 disk_usage_lwm_threshold=0.90, http_endpoint=None, own_storage=True,
                 max_frame_size=DEFAULT_MAX_FRAME_SIZE, verify_ledgers=True,
                 metadata_gc_interval=600.0):
        if not 0 < disk_usage_lwm_threshold <= disk_usage_threshold <= 1:
            raise ValueError("need 0 < diskUsageLwmThreshold <= diskUsageThreshold <= 1")
        self.storage = storage
        self.reactor = reactor
        self.endpoint = endpoint
        self.bookie_id = bookie_id
        self.advertised_address = advertised_address
        self.store = metadata_store
        self.data_dirs = list(data_dirs)
        self._disk_usage = disk_usage or fullest_disk(self.data_dirs)
        self.disk_check_interval = disk_check_interval
        self.disk_usage_threshold = disk_usage_threshold
        self.disk_usage_lwm_threshold = disk_usage_lwm_threshold
        self.http_endpoint = http_endpoint
        self.own_storage = own_storage
        self.disk_usage_ratio = 0.0
        admission = None
        if metadata_store is not None and verify_ledgers:
            admission = LedgerAdmission(metadata_store, lambda: self.bookie_id, reactor)
        self.processor = BookieRequestProcessor(storage, self.info, admission, clock=reactor)
        self.metadata_gc = None
        if metadata_store is not None and verify_ledgers:
            self.metadata_gc = MetadataGarbageCollector(storage, metadata_store)
        self.metadata_gc_interval = metadata_gc_interval
        self._gc_loop = None
        self.factory = BookieServerFactory(self.processor, max_frame_size)
        self.port = None
        self.http_port = None
        self.registered_path = None
        self._registration_lock = defer.DeferredLock()
        self._listening_to_store = False
        self._disk_loop = None
        self._serving = False
        self._abandoned = False
        self._start_ended = None    # fires once the start in progress has ended, if one is
        self._cookie_wait = None    # what the cookie check waits on: the store, or the time to retry
        self.metrics_registry = CollectorRegistry(auto_describe=False)
        self.metrics_registry.register(BookieCollector(self))

    # -- lifecycle ---------------------------------------------------------------------------------

    def startService(self):
        Service.startService(self)
        return self.start()

    def stopService(self):
        Service.stopService(self)
        return self.stop()

    def start(self) -> defer.Deferred:
        self._abandoned = False
        ended = self._start_ended = defer.Deferred()

        def over(result):
            self._start_ended = None
            ended.callback(None)
            return result
        return defer.Deferred.fromCoroutine(self._start()).addBoth(over)

    async def _start(self):
        if self.own_storage:
            await self.storage.start()
        try:
            if self._abandoned:
                raise defer.CancelledError(f"bookie {self.bookie_id} stopped while starting")
            if self.bookie_id is not None:
                await self._check_cookie()      # before any request is answered
            endpoint = self.endpoint
            if isinstance(endpoint, str):
                endpoint = endpoints.serverFromString(self.reactor, endpoint)
            self.port = await endpoint.listen(self.factory)
            if self.bookie_id is None:
                # Named after its port (tests on ephemeral ports): checked once that is known.
                self.bookie_id = f"{self.advertised_address}:{self.port.getHost().port}"
                # A new id at every start by design: its directories are not refused for being
                # recorded under the id of a previous start (resources/bookies.check_cookie).
                await self._check_cookie(port_named=True)
            if self._abandoned:
                # Stopped while the port opened: that stop (not serving yet) only waits for this
                # start, so what it started is closed here, not left to serve and register.
                raise defer.CancelledError(f"bookie {self.bookie_id} stopped while starting")
        except BaseException:
            if self.port is not None:
                await defer.maybeDeferred(self.port.stopListening)
                self.port = None
            if self.own_storage:
                await self.storage.stop()
            raise
        self._serving = True
        self.check_disks()
        if self.store is not None:
            if not self._listening_to_store:
                self._listening_to_store = True
                self.store.register_listener(self._on_notification)
                self.store.register_session_listener(self._on_session)
            await self.sync_registration()
            if self._abandoned:
                return      # stopped meanwhile: the stop, waiting for this start, undoes the rest
        if self.disk_check_interval and self.disk_check_interval > 0:
            self._disk_loop = task.LoopingCall(self._periodic_check)
            self._disk_loop.clock = self.reactor
            self._disk_loop.start(self.disk_check_interval, now=False)
        if self.metadata_gc is not None and self.metadata_gc_interval and self.metadata_gc_interval > 0:
            self._gc_loop = task.LoopingCall(self._periodic_metadata_gc)
            self._gc_loop.clock = self.reactor
            self._gc_loop.start(self.metadata_gc_interval, now=False)
        if self.http_endpoint is not None:
            http = self.http_endpoint
            if isinstance(http, str):
                http = endpoints.serverFromString(self.reactor, http)
            self.http_port = await http.listen(web_server.Site(self.http_root()))
        log.info("bookie {bookie} serving on {address} (read-only: {ro})", bookie=self.bookie_id,
                 address=self.port.getHost(), ro=self.read_only)

    async def _check_cookie(self, port_named=False) -> None:
        """The metadata store's cookie for this bookie id against its directories' (resources/bookies.py
        ``check_cookie``), before the bookie serves or registers. A mismatch fails the start; while the
        store cannot be reached the check is retried (a bookie whose directories may not be its own
        must not serve), until it succeeds or the bookie is stopped: ``stop`` cancels the check or
        the wait in progress (``_cookie_wait``), which fails the start."""
        instance = getattr(self.storage, "instance_id", None)
        if self.store is None or instance is None:
            return
        delay, warned_at = 0.5, None
        while True:
            try:
                self._cookie_wait = defer.Deferred.fromCoroutine(
                    check_cookie(self.store, self.bookie_id, instance,
                                 refuse_other_ids=not port_named))
                if await self._cookie_wait:
                    log.info("bookie {bookie}: cookie recorded in the metadata store (instance {instance})",
                             bookie=self.bookie_id, instance=instance)
                return
            except MetadataUnavailableError as e:
                now = self.reactor.seconds()
                if warned_at is None or now - warned_at >= 30.0:
                    warned_at = now
                    log.warn("bookie {bookie}: waiting for the metadata store to check its cookie: {err}",
                             bookie=self.bookie_id, err=e)
                self._cookie_wait = task.deferLater(self.reactor, delay, lambda: None)
                await self._cookie_wait
                delay = min(delay * 2, 5.0)
            finally:
                self._cookie_wait = None

    def stop(self) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._stop())

    async def _stop(self):
        self._abandoned = True
        if not self._serving:
            # A start still in progress gives up (a stopped bookie must not go on to serve and
            # register once the store answers) and stops what it started before this fires.
            if self._cookie_wait is not None:
                self._cookie_wait.cancel()
            if self._start_ended is not None:
                await self._start_ended
            return
        self._serving = False
        if self._start_ended is not None:
            # Stopped during the start's last steps (registration, the HTTP listener): let it end
            # first, so nothing it starts after this point outlives the stop.
            await self._start_ended
        for loop in (self._disk_loop, self._gc_loop):
            if loop is not None and loop.running:
                loop.stop()
        if self.store is not None:
            await self._registration_lock.run(self._unregister)
        if self.http_port is not None:
            await defer.maybeDeferred(self.http_port.stopListening)
            self.http_port = None
        if self.port is not None:
            await defer.maybeDeferred(self.port.stopListening)
            self.port = None
        self.factory.close_connections()
        if self.own_storage:
            await self.storage.stop()
        log.info("bookie {bookie} stopped", bookie=self.bookie_id)

    # -- state -------------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return bool(self.storage.read_only)

    def set_read_only(self, flag: bool) -> defer.Deferred:
        """Switch modes and move the registration; fires once the registration matches."""
        flag = bool(flag)
        if flag != self.read_only:
            log.info("bookie {bookie} turns {mode}", bookie=self.bookie_id,
                     mode="read-only" if flag else "writable")
            self.storage.set_read_only(flag)
        return self.sync_registration()

    def check_disks(self):
        """Read the disk usage and switch modes across the thresholds. Deferred (the registration
        move), or None when nothing changed."""
        try:
            usage = float(self._disk_usage())
        except Exception:
            log.failure("bookie {bookie}: disk usage check failed", bookie=self.bookie_id)
            return None
        self.disk_usage_ratio = usage
        if not self.read_only and usage > self.disk_usage_threshold:
            log.warn("bookie {bookie}: disk usage {usage:.3f} above {limit}: going read-only",
                     bookie=self.bookie_id, usage=usage, limit=self.disk_usage_threshold)
            return self.set_read_only(True)
        if self.read_only and usage < self.disk_usage_lwm_threshold:
            log.info("bookie {bookie}: disk usage {usage:.3f} below {limit}: writable again",
                     bookie=self.bookie_id, usage=usage, limit=self.disk_usage_lwm_threshold)
            return self.set_read_only(False)
        return None

    def _periodic_metadata_gc(self) -> None:
        self.metadata_gc.run().addErrback(
            lambda f: log.warn("bookie {bookie}: metadata gc failed: {err}", bookie=self.bookie_id,
                               err=f.getErrorMessage()))

    def _periodic_check(self) -> None:
        d = self.check_disks()
        if d is None:
            d = self.sync_registration()   # also catches a registration lost without a notification
        d.addErrback(self._registration_failed, "registration")

    def info(self) -> dict:
        """The ``BookieInfo`` fields."""
        free, total = disk_space(self.data_dirs)
        return dict(free_disk_bytes=free, total_disk_bytes=total, read_only=self.read_only,
                    version=VERSION, bookie_id=self.bookie_id or "")

    # -- registration ------------------------------------------------------------------------------

    def sync_registration(self) -> defer.Deferred:
        """Make the metadata store hold exactly the node for the current mode. Serialized."""
        if self.store is None or not self._serving:
            return defer.succeed(None)
        return self._registration_lock.run(lambda: defer.Deferred.fromCoroutine(self._sync()))

    async def _sync(self):
        if not self._serving:
            return
        store = self.store
        want = registration_path(self.bookie_id, self.read_only)
        old = self.registered_path
        if old != want or await store.exists(want) is None:
            value = json.dumps({"bookieId": self.bookie_id, "readOnly": self.read_only,
                                "version": VERSION}).encode()
            await register_bookie(store, self.bookie_id, self.read_only, value)
            self.registered_path = want
            log.info("bookie {bookie} registered at {path}", bookie=self.bookie_id, path=want)
        if old is not None and old != want:
            await self._delete_quietly(old)

    async def _unregister(self):
        path, self.registered_path = self.registered_path, None
        if path is not None:
            await self._delete_quietly(path)

    async def _delete_quietly(self, path):
        try:
            await self.store.delete(path)
        except NotFoundError:
            pass

    def _registration_failed(self, failure, what: str) -> None:
        """ZooKeeper unreachable or the session lost: expected while partitioned or paused, and
        retried (the next periodic check, the new session), so a warning, not a traceback."""
        if failure.check(MetadataUnavailableError):
            log.warn("bookie {bookie}: {what} deferred, metadata unavailable: {err}",
                     bookie=self.bookie_id, what=what, err=failure.getErrorMessage())
        else:
            log.failure("bookie {bookie}: {what} failed", failure, bookie=self.bookie_id, what=what)

    def _on_notification(self, notification) -> None:
        if (notification.kind == "deleted" and notification.path == self.registered_path
                and self._serving):
            log.warn("bookie {bookie}: registration {path} vanished (session lost?): registering "
                     "again", bookie=self.bookie_id, path=notification.path)
            self.sync_registration().addErrback(self._registration_failed, "re-registration")

    def _on_session(self, state: str) -> None:
        # A new ZooKeeper session (metadata/zookeeper.py): the registration went with the old one.
        # Register at once rather than on the deletion notification, which may come later or not
        # at all (the node may have vanished while the cache was not watching).
        if state == "expired-new-session" and self._serving:
            log.warn("bookie {bookie}: new ZooKeeper session: registering again", bookie=self.bookie_id)
            self.sync_registration().addErrback(self._registration_failed, "re-registration")

    # -- http --------------------------------------------------------------------------------------

    def http_root(self) -> resource.Resource:
        root = resource.Resource()
        root.putChild(b"heartbeat", _Callable(lambda request: (b"OK", b"text/plain")))
        root.putChild(b"metrics", _Callable(
            lambda request: (generate_latest(self.metrics_registry), CONTENT_TYPE_LATEST.encode())))
        bookie = resource.Resource()
        api = resource.Resource()
        v1 = resource.Resource()
        root.putChild(b"api", api)
        api.putChild(b"v1", v1)
        v1.putChild(b"bookie", bookie)
        bookie.putChild(b"state", _Callable(lambda request: _json(self.http_state())))
        bookie.putChild(b"info", _Callable(lambda request: _json(self.http_info())))
        bookie.putChild(b"is_ready", _Callable(self._is_ready))
        return root

    def http_state(self) -> dict:
        """BookKeeper's ``/api/v1/bookie/state`` answer."""
        return {"running": self._serving, "readOnly": self.read_only,
                "shuttingDown": not self._serving, "availableForHighPriorityWrites": self._serving}

    def http_info(self) -> dict:
        free, total = disk_space(self.data_dirs)
        return {"bookieId": self.bookie_id, "freeSpace": free, "totalSpace": total,
                "diskUsage": self.disk_usage_ratio, "readOnly": self.read_only, "version": VERSION}

    def _is_ready(self, request):
        if not self._serving:
            request.setResponseCode(503)
            return b"Bookie is not ready", b"text/plain"
        return b"OK", b"text/plain"


def _json(value):
    return json.dumps(value).encode(), b"application/json"


class _Callable(resource.Resource):
    """A leaf answering GET with ``fn(request) -> (body, content_type)``."""

    isLeaf = True

    def __init__(self, fn):
        super().__init__()
        self._fn = fn

    def render_GET(self, request):
        body, content_type = self._fn(request)
        request.setHeader(b"content-type", content_type)
        return body
