"""
Auto-recovery: BookKeeper's ``Auditor`` and ``ReplicationWorker``, simplified but real.

When a bookie is gone for good, every entry it held has one replica fewer than the ledger's write
quorum. Auto-recovery puts the missing replicas back on live bookies and rewrites the ledger
metadata to say where they are, so that losing a second bookie later does not lose data.

Layout in the metadata store (BookKeeper's names)::

    /ledgers/underreplication/auditorelection   ephemeral: the elected auditor ({"id": ...})
    /ledgers/underreplication/ledgers/L<id>     an under-replicated ledger ({"missing_bookies": [...]})
    /ledgers/underreplication/locks/L<id>       ephemeral: the worker replicating that ledger

``Auditor`` (one active per cluster, elected with the ephemeral election node; the other candidates
wait for that node to go and then race to create it): follows the bookie registrations under
``/ledgers/available``. A bookie that disappears and stays away ``lost_bookie_recovery_delay`` seconds
is *lost*: the auditor scans all ledger metadata and marks every ledger with a segment naming that
bookie. A bookie back within the delay triggers nothing (a rolling restart must not copy terabytes).

``ReplicationWorker`` (any number of them): takes a marked ledger under an ephemeral lock and, for
every segment naming a lost bookie, picks a writable replacement not in the segment, copies each
entry of the segment whose write set included the lost bookie (read, packed with its digest, from a
surviving replica and verified; written with ``recovery_add``), then replaces the bookie in that
segment of the metadata (compare-and-set, re-applied on a newer version). When no segment needs work
any more it deletes the marker. A worker that dies loses its lock with its session and leaves the
marker, so another one does the ledger again (copies are idempotent: the same packed bytes).

Open ledgers: as in BookKeeper, only the *closed* segments of a ledger that is not closed are
replicated. The last segment belongs to its writer, who replaces a failed bookie itself (ensemble
change) when an add to it fails; copying into it behind the writer's back would race the writer's own
metadata updates. Such a ledger keeps its marker, and the worker looks at it again when its metadata
changes (the writer's ensemble change or close turns the segment into a closed one) or its marker is
updated.

The worker needs the ledger's master key to write to bookies. BookKeeper keeps the password in the
ledger metadata; ours keeps only a digest of the key, so the worker is given the candidate passwords
(``passwords``, Pulsar's managed ledgers use the empty password) and uses the one whose digest
matches. A ledger with none of them keeps its marker and is logged.
"""

import json
import re
import uuid
from dataclasses import replace
from typing import Iterable, Optional

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import (
    BKException, NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.resources.ledgers import (
    LedgerManager, LedgerMetadata, MetadataFormatError, master_key, password_digest)
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy, write_set
from pulsar_twisted.metadata.embedded.store import StoreClosedError
from pulsar_twisted.metadata.interfaces import (
    AlreadyExistsError, BadVersionError, MetadataStoreError, NotFoundError)
from pulsar_twisted.metadata.layout import (
    AUDITOR_ELECTION_PATH, AVAILABLE_PATH, LEDGERS_ROOT, LOCKS_PATH, UNDERREPLICATED_PATH)
from pulsar_twisted.resources.bookies import registered_bookies
from pulsar_twisted.wire.bookie import unpack_entry

log = Logger()

_LEDGER_NAME = re.compile(r"^L(\d{10,})$")
_LEDGER_PATH = re.compile(r"^" + re.escape(LEDGERS_ROOT) + r"/L(\d{10,})$")


class ReplicationError(BKException):
    """A ledger could not be replicated now (no readable replica, no usable password...)."""

    code = "ReplicationException"


class _Stopped(Exception):
    """The worker was stopped or lost its lock: abandon the ledger, keep its marker."""


# -- paths and helpers ---------------------------------------------------------------------------

def underreplicated_path(ledger_id: int) -> str:
    return "%s/L%010d" % (UNDERREPLICATED_PATH, ledger_id)


def lock_path(ledger_id: int) -> str:
    return "%s/L%010d" % (LOCKS_PATH, ledger_id)


def parse_ledger_name(name: str) -> Optional[int]:
    """``L0000000042`` -> 42; None for any other child name."""
    match = _LEDGER_NAME.match(name)
    return int(match.group(1)) if match else None


async def list_ledger_ids(store) -> list:
    """The ids of every ledger with metadata, ascending."""
    names = await store.get_children(LEDGERS_ROOT)
    return sorted(i for i in map(parse_ledger_name, names) if i is not None)


def missing_bookies_of(raw: bytes) -> set:
    """The bookies named by an under-replication marker's JSON."""
    try:
        return set(json.loads(raw.decode("utf-8")).get("missing_bookies", []))
    except (ValueError, AttributeError):
        return set()


async def mark_underreplicated(store, ledger_id: int, missing: Iterable[str]) -> bool:
    """
    Create or extend (compare-and-set) the marker of ``ledger_id`` so that it names ``missing``.
    True when the store changed, False when the marker already named them all.
    """
    missing = set(missing)
    path = underreplicated_path(ledger_id)
    while True:
        existing = await store.get(path)
        if existing is None:
            value = json.dumps({"missing_bookies": sorted(missing)}).encode()
            try:
                await store.put(path, value, expected_version=-1)
                return True
            except AlreadyExistsError:
                continue
        raw, stat = existing
        known = missing_bookies_of(raw)
        if missing <= known:
            return False
        value = json.dumps({"missing_bookies": sorted(known | missing)}).encode()
        try:
            await store.put(path, value, expected_version=stat.version)
            return True
        except (BadVersionError, NotFoundError):
            continue


async def _read_all_metadata(store, manager):
    """``[(ledger_id, LedgerMetadata)]`` of every ledger whose metadata parses (others logged)."""
    out = []
    for ledger_id in await list_ledger_ids(store):
        try:
            metadata, _ = await manager.read(ledger_id)
        except NoSuchLedgerError:
            continue        # deleted while we listed
        except MetadataFormatError as e:
            log.warn("auditor: skipping ledger {ledger}: {error}", ledger=ledger_id, error=e)
            continue
        out.append((ledger_id, metadata))
    return out


def _store_closed(error) -> bool:
    return isinstance(error, StoreClosedError)


# -- the auditor ---------------------------------------------------------------------------------

class Auditor:
    """
    Finds ledgers that lost replicas and marks them (see the module docstring). ``start()`` enters
    the election; only the elected auditor watches bookies. ``lost_bookie_recovery_delay`` is in
    seconds on ``clock``; 0 audits on the next reactor turn (``callLater(0)``, which also lets a
    bookie that switches from writable to read-only re-register before it is judged lost).
    """

    def __init__(self, store, clock, lost_bookie_recovery_delay: float = 0.0,
                 auditor_id: Optional[str] = None, retry_delay: float = 60.0):
        self._store = store
        self._clock = clock
        self._manager = LedgerManager(store)
        self.lost_bookie_recovery_delay = lost_bookie_recovery_delay
        self.retry_delay = retry_delay
        self.auditor_id = auditor_id or uuid.uuid4().hex
        self.is_auditor = False
        self._running = False
        self._listening = False
        self._electing = False
        self._bookies = None            # frozenset of registered bookies, once known
        self._lost = {}                 # bookie id -> DelayedCall of its audit
        self._refreshing = False
        self._refresh_again = False

    def start(self) -> None:
        """Enter the election (and become the auditor if nobody is)."""
        if self._running:
            return
        self._running = True
        if not self._listening:
            self._listening = True
            self._store.register_listener(self._on_notification)
            self._store.register_session_listener(self._on_session)
        self._try_elect()

    def stop(self):
        """Stop auditing and give up the election node so that another candidate takes over."""
        self._running = False
        for call in self._lost.values():
            if call.active():
                call.cancel()
        self._lost.clear()
        if not self.is_auditor:
            return defer.succeed(None)
        self.is_auditor = False
        d = self._store.delete(AUDITOR_ELECTION_PATH)
        d.addErrback(lambda f: f.trap(NotFoundError, StoreClosedError) and None)
        return d

    # -- election --------------------------------------------------------------------------------

    def _on_notification(self, notification):
        if not self._running:
            return
        path = notification.path
        if path == AUDITOR_ELECTION_PATH and notification.kind == "deleted" and not self.is_auditor:
            self._try_elect()
        elif self.is_auditor and (path == AVAILABLE_PATH or path.startswith(AVAILABLE_PATH + "/")):
            self._refresh_bookies()

    def _on_session(self, state):
        # "lost": the election node went with the session, another candidate may be elected now:
        # stop auditing. "expired-new-session": enter the election again (metadata/zookeeper.py).
        if state == "lost" and self.is_auditor:
            log.warn("auditor {id}: ZooKeeper session lost: no longer the auditor", id=self.auditor_id)
            self.is_auditor = False
            for call in self._lost.values():
                if call.active():
                    call.cancel()
            self._lost.clear()
        elif state == "expired-new-session":
            self._try_elect()

    def _try_elect(self):
        if self._electing or self.is_auditor or not self._running:
            return
        self._electing = True
        value = json.dumps({"id": self.auditor_id}).encode()
        d = self._store.put(AUDITOR_ELECTION_PATH, value, expected_version=-1, ephemeral=True)
        d.addCallbacks(self._elected, self._not_elected)

    def _elected(self, _):
        self._electing = False
        if not self._running:
            # Stopped while the create was in flight: hand the election on at once.
            self._store.delete(AUDITOR_ELECTION_PATH).addErrback(lambda f: None)
            return
        self.is_auditor = True
        log.info("auditor {id} elected", id=self.auditor_id)
        d = defer.Deferred.fromCoroutine(self._take_over())
        d.addErrback(self._log_error, "auditor: taking over failed")

    def _not_elected(self, failure):
        self._electing = False
        if failure.check(AlreadyExistsError):
            log.debug("auditor {id} waits: another auditor is elected", id=self.auditor_id)
            return None
        self._log_error(failure, "auditor: election failed")
        return None

    async def _take_over(self):
        """Learn the bookies, and treat those that ledgers name but that are not registered as
        lost just now: they may have gone while no auditor was running."""
        writable, readonly = await registered_bookies(self._store)
        self._bookies = writable | readonly
        referenced = set()
        for _, metadata in await _read_all_metadata(self._store, self._manager):
            referenced |= metadata.all_bookies()
        for bookie in sorted(referenced - self._bookies):
            self._bookie_lost(bookie)

    # -- bookie watching -------------------------------------------------------------------------

    def _refresh_bookies(self):
        # At most one refresh in flight plus one queued, whatever the burst of notifications.
        if self._refreshing:
            self._refresh_again = True
            return
        self._refreshing = True
        d = defer.Deferred.fromCoroutine(self._load_bookies())
        d.addErrback(self._log_error, "auditor: reading the bookie registrations failed")

        def done(_):
            self._refreshing = False
            if self._refresh_again:
                self._refresh_again = False
                self._refresh_bookies()
        d.addBoth(done)

    async def _load_bookies(self):
        writable, readonly = await registered_bookies(self._store)
        now = writable | readonly
        previous, self._bookies = self._bookies, now
        if previous is None or not self.is_auditor:
            return
        for bookie in sorted(previous - now):
            self._bookie_lost(bookie)
        for bookie in sorted(now & set(self._lost)):
            call = self._lost.pop(bookie)
            if call.active():
                call.cancel()
            log.info("auditor: bookie {bookie} is back before its recovery delay: nothing to do",
                     bookie=bookie)

    def _bookie_lost(self, bookie, delay=None):
        if bookie in self._lost or not self._running:
            return
        delay = self.lost_bookie_recovery_delay if delay is None else delay
        log.info("auditor: bookie {bookie} is gone; auditing its ledgers in {delay} s",
                 bookie=bookie, delay=delay)
        self._lost[bookie] = self._clock.callLater(delay, self._delay_expired, bookie)

    def _delay_expired(self, bookie):
        d = defer.Deferred.fromCoroutine(self._audit({bookie}))

        def done(_):
            self._lost.pop(bookie, None)

        def failed(failure):
            self._lost.pop(bookie, None)
            self._log_error(failure, "auditor: audit failed")
            if self._running and self.is_auditor and not _store_closed(failure.value):
                self._bookie_lost(bookie, delay=self.retry_delay)
        d.addCallbacks(done, failed)

    # -- audits ----------------------------------------------------------------------------------

    def audit_now(self):
        """
        Audit every ledger at once, ignoring the recovery delay (BookKeeper's ``triggeraudit``):
        mark each ledger naming a bookie that is not registered. Works whether or not this
        instance is the elected auditor (markers are merged, so a concurrent audit is harmless).
        Deferred firing with the sorted ids of the ledgers whose marker changed.
        """
        for call in self._lost.values():
            if call.active():
                call.cancel()
        self._lost.clear()
        return defer.Deferred.fromCoroutine(self._audit(None))

    async def _audit(self, lost: Optional[set]):
        """Mark the ledgers naming ``lost`` bookies (None: any bookie not registered now)."""
        writable, readonly = await registered_bookies(self._store)
        registered = writable | readonly
        if lost is not None:
            lost = set(lost) - registered
            if not lost:
                return []
        marked = []
        for ledger_id, metadata in await _read_all_metadata(self._store, self._manager):
            missing = metadata.all_bookies() - registered
            if lost is not None:
                missing &= lost
            if missing and await mark_underreplicated(self._store, ledger_id, missing):
                marked.append(ledger_id)
        if marked:
            log.info("auditor: marked under-replicated ledgers {ledgers}", ledgers=marked)
        return marked

    def _log_error(self, failure, message):
        if _store_closed(failure.value):
            log.info("{message}: metadata session closed", message=message)
        elif failure.check(MetadataStoreError, BKException):
            log.warn("{message}: {error}", message=message, error=failure.getErrorMessage())
        else:
            log.failure(message, failure)
        return None


# -- the replication worker ----------------------------------------------------------------------

_DONE, _DEFERRED, _AGAIN = "done", "deferred", "again"


class ReplicationWorker:
    """
    Replicates marked ledgers, one at a time, each under its lock (see the module docstring).
    ``bookie_client`` is an IBookieClient; ``placement`` an IEnsemblePlacementPolicy choosing
    replacements; ``passwords`` the candidate ledger passwords. A ledger that fails (no bookie to
    copy to, no readable replica...) is tried again ``retry_delay`` seconds later, or sooner when a
    bookie registers. ``copy_window`` entries are copied concurrently.
    """

    def __init__(self, store, bookie_client, clock, placement=None, *,
                 passwords: Iterable[bytes] = (b"",), worker_id: Optional[str] = None,
                 retry_delay: float = 60.0, copy_window: int = 64):
        self._store = store
        self._bookie_client = bookie_client
        self._clock = clock
        self._manager = LedgerManager(store)
        self._placement = placement if placement is not None else RandomPlacementPolicy()
        self._keys = {}
        for password in passwords:
            key = master_key(password)
            self._keys[password_digest(key)] = key
        self.worker_id = worker_id or uuid.uuid4().hex
        self._token = json.dumps({"worker": self.worker_id}).encode()
        self.retry_delay = retry_delay
        self.copy_window = max(1, copy_window)
        self._running = False
        self._listening = False
        self._busy = False
        self._again = False
        self._idle = None               # Deferred fired when the current pass ends (for stop)
        self._deferred = set()          # open ledgers waiting for their writer
        self._backoff = {}              # ledger id -> clock time before which it is not retried
        self._retry_call = None
        self.current = None             # the ledger id being replicated, if any
        self.replicated = 0             # ledgers completed by this worker

    def start(self) -> None:
        """Start taking marked ledgers (also those marked before)."""
        if self._running:
            return
        self._running = True
        if not self._listening:
            self._listening = True
            self._store.register_listener(self._on_notification)
        self.kick()

    def stop(self):
        """Stop taking ledgers. Fires once the ledger in progress, if any, is abandoned (its lock
        released, its marker kept) at the next step of the copy."""
        self._running = False
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None
        if not self._busy:
            return defer.succeed(None)
        if self._idle is None:
            self._idle = defer.Deferred()
        return self._idle

    def kick(self) -> None:
        """Look for work now (notifications call this; tests and admin tools may too)."""
        if not self._running:
            return
        if self._busy:
            self._again = True
            return
        self._busy = True
        self._again = False
        d = defer.Deferred.fromCoroutine(self._work())
        d.addErrback(self._pass_failed)
        d.addBoth(self._pass_done)

    def _pass_failed(self, failure):
        if _store_closed(failure.value):
            log.info("replication worker {id}: metadata session closed; stopping", id=self.worker_id)
            self._running = False
        elif failure.check(MetadataStoreError):
            log.warn("replication worker {id}: {error}; retrying in {delay} s",
                     id=self.worker_id, error=failure.getErrorMessage(), delay=self.retry_delay)
            self._schedule_retry(self.retry_delay)
        else:
            log.failure("replication worker {id} failed", failure, id=self.worker_id)
        return None

    def _pass_done(self, _):
        self._busy = False
        if self._idle is not None and not self._running:
            idle, self._idle = self._idle, None
            idle.callback(None)
            return
        if self._again and self._running:
            self.kick()

    def _schedule_retry(self, delay):
        if self._retry_call is not None and self._retry_call.active():
            if self._retry_call.getTime() <= self._clock.seconds() + delay:
                return
            self._retry_call.cancel()
        self._retry_call = self._clock.callLater(delay, self._retry)

    def _retry(self):
        self._retry_call = None
        self.kick()

    def _on_notification(self, notification):
        if not self._running:
            return
        path, kind = notification.path, notification.kind
        if path.startswith(UNDERREPLICATED_PATH + "/"):
            if kind in ("created", "modified"):
                ledger_id = parse_ledger_name(path.rsplit("/", 1)[1])
                self._deferred.discard(ledger_id)
                self._backoff.pop(ledger_id, None)
                self.kick()
        elif path.startswith(LOCKS_PATH + "/"):
            if kind == "deleted":       # a worker finished, gave up or died
                self.kick()
        elif path.startswith(AVAILABLE_PATH + "/"):
            if kind == "created" and self._backoff:
                self._backoff.clear()   # a new bookie may be the replacement that was missing
                self.kick()
        elif self._deferred and kind in ("modified", "deleted"):
            match = _LEDGER_PATH.match(path)
            if match and int(match.group(1)) in self._deferred:
                self._deferred.discard(int(match.group(1)))
                self.kick()

    # -- one pass --------------------------------------------------------------------------------

    async def _work(self):
        """Replicate marked ledgers until none is left that this worker may take now."""
        while self._running:
            names = await self._store.get_children(UNDERREPLICATED_PATH)
            now = self._clock.seconds()
            candidates = [i for i in map(parse_ledger_name, names)
                          if i is not None and i not in self._deferred
                          and self._backoff.get(i, 0) <= now]
            for ledger_id in candidates:
                if await self._lock(ledger_id):
                    break
            else:
                return
            self.current = ledger_id
            try:
                outcome = await self._replicate_locked(ledger_id)
            finally:
                self.current = None
                await self._unlock(ledger_id)
            if outcome == _DEFERRED:
                self._deferred.add(ledger_id)

    async def _lock(self, ledger_id) -> bool:
        try:
            await self._store.put(lock_path(ledger_id), self._token, expected_version=-1,
                                  ephemeral=True)
            return True
        except AlreadyExistsError:
            return False

    async def _unlock(self, ledger_id):
        try:
            await self._store.delete(lock_path(ledger_id))
        except (NotFoundError, StoreClosedError):
            pass

    async def _check_lock(self, ledger_id):
        """Raise _Stopped unless this worker still runs and holds the ledger's lock (a worker whose
        session expired must not write metadata another worker now owns)."""
        if not self._running:
            raise _Stopped("worker stopped")
        held = await self._store.get(lock_path(ledger_id))
        if held is None or held[0] != self._token:
            raise _Stopped(f"lost the lock of ledger {ledger_id}")

    async def _replicate_locked(self, ledger_id):
        try:
            outcome = await self.replicate_ledger(ledger_id)
        except _Stopped as e:
            log.info("replication of ledger {ledger} abandoned: {why}", ledger=ledger_id, why=e)
            return _AGAIN
        except (BKException, MetadataStoreError) as e:
            if _store_closed(e):
                raise
            log.warn("replication of ledger {ledger} failed, retrying in {delay} s: {error!r}",
                     ledger=ledger_id, delay=self.retry_delay, error=e)
            self._backoff[ledger_id] = self._clock.seconds() + self.retry_delay
            self._schedule_retry(self.retry_delay)
            return _AGAIN
        if outcome == _DONE:
            self.replicated += 1
        return outcome

    async def replicate_ledger(self, ledger_id: int) -> str:
        """
        Replicate one marked ledger (the caller holds its lock). Returns "done" (marker removed),
        "deferred" (an open ledger's last segment still names a lost bookie) or "again" (the
        marker changed meanwhile: look again).
        """
        marker = await self._store.get(underreplicated_path(ledger_id))
        if marker is None:
            return _DONE                # another worker finished it
        raw, marker_stat = marker
        try:
            metadata, _ = await self._manager.read(ledger_id)
        except NoSuchLedgerError:
            log.info("ledger {ledger} was deleted: dropping its under-replication marker",
                     ledger=ledger_id)
            return await self._remove_marker(ledger_id, marker_stat.version)
        writable, readonly = await registered_bookies(self._store)
        lost = missing_bookies_of(raw) - writable - readonly
        key = self._master_key(ledger_id, metadata) if lost & metadata.all_bookies() else None
        waiting = False
        segments = metadata.ensembles
        for index, (first, ensemble) in enumerate(segments):
            lost_indices = [i for i, bookie in enumerate(ensemble) if bookie in lost]
            if not lost_indices:
                continue
            is_last = index == len(segments) - 1
            if is_last and not metadata.closed:
                waiting = True          # the writer's segment: its ensemble change handles it
                continue
            last = metadata.last_entry_id if is_last else segments[index + 1][0] - 1
            writable, _ = await registered_bookies(self._store)
            replacement = list(ensemble)
            for i in lost_indices:
                replacement[i] = self._placement.replace_bookie(replacement, i, writable,
                                                                exclude=lost)
            await self._copy_segment(ledger_id, metadata, key, first, last, ensemble,
                                     replacement, lost_indices)
            await self._check_lock(ledger_id)
            await self._replace_bookies(ledger_id, first, ensemble, replacement, lost_indices)
        if waiting:
            log.info("ledger {ledger} is open and its last segment names lost bookies: waiting "
                     "for its writer", ledger=ledger_id)
            return _DEFERRED
        return await self._remove_marker(ledger_id, marker_stat.version)

    async def _remove_marker(self, ledger_id, version):
        try:
            await self._store.delete(underreplicated_path(ledger_id), expected_version=version)
        except NotFoundError:
            pass
        except BadVersionError:
            return _AGAIN               # the auditor added a bookie meanwhile
        log.info("ledger {ledger} is fully replicated again", ledger=ledger_id)
        return _DONE

    def _master_key(self, ledger_id, metadata):
        key = self._keys.get(metadata.password_digest)
        if key is None:
            raise UnauthorizedAccessError(
                f"ledger {ledger_id}: none of the configured ledger passwords matches")
        return key

    # -- copying ---------------------------------------------------------------------------------

    async def _copy_segment(self, ledger_id, metadata: LedgerMetadata, key, first, last,
                            ensemble, replacement, lost_indices):
        """Copy entries first..last that had a replica at ``lost_indices`` to the replacements."""
        lost_set = set(lost_indices)
        todo = []
        for entry_id in range(first, last + 1):
            ws = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)
            targets = [replacement[i] for i in ws if i in lost_set]
            if targets:
                sources = [ensemble[i] for i in ws if i not in lost_set]
                todo.append((entry_id, sources, targets))
        log.info("ledger {ledger}: copying {n} entries of segment {first}..{last} to {targets}",
                 ledger=ledger_id, n=len(todo), first=first, last=last,
                 targets=[replacement[i] for i in lost_indices])
        for start in range(0, len(todo), self.copy_window):
            if not self._running:
                raise _Stopped("worker stopped")
            batch = todo[start:start + self.copy_window]
            await defer.gatherResults(
                [defer.Deferred.fromCoroutine(self._copy_entry(ledger_id, key, *item))
                 for item in batch], consumeErrors=True).addErrback(_first_error)

    async def _copy_entry(self, ledger_id, key, entry_id, sources, targets):
        packed = await self._read_replica(ledger_id, entry_id, sources)
        for target in targets:
            await self._bookie_client.add_entry(target, ledger_id, entry_id, key, packed,
                                                recovery_add=True)

    async def _read_replica(self, ledger_id, entry_id, sources):
        """The packed entry from the first surviving replica that returns it intact."""
        errors = []
        for bookie in sources:
            try:
                packed = await self._bookie_client.read_entry(bookie, ledger_id, entry_id)
                unpack_entry(packed, ledger_id, entry_id)   # never spread a corrupt copy
                return packed
            except BKException as e:
                errors.append(f"{bookie}: {e!r}")
        if not sources:
            errors.append("no surviving replica in the write set")
        error = ReplicationError(f"entry {ledger_id}:{entry_id} has no readable replica: "
                                 + "; ".join(errors))
        if errors and all("NoSuchEntry" in e for e in errors):
            error = NoSuchEntryError(str(error))
        raise error

    async def _replace_bookies(self, ledger_id, first, ensemble, replacement, lost_indices):
        """Put ``replacement`` in the metadata segment starting at ``first`` (CAS, re-applied on
        whatever version is current: the writer may have added segments meanwhile)."""
        while True:
            metadata, version = await self._manager.read(ledger_id)
            segments = list(metadata.ensembles)
            position = next((k for k, (f, _) in enumerate(segments) if f == first), None)
            if position is None:
                raise ReplicationError(f"ledger {ledger_id}: segment {first} disappeared")
            current = list(segments[position][1])
            changed = False
            for i in lost_indices:
                if current[i] == ensemble[i]:
                    current[i] = replacement[i]
                    changed = True
            if not changed:
                return                  # someone else replaced it already
            segments[position] = (first, tuple(current))
            try:
                await self._manager.write(ledger_id, replace(metadata, ensembles=tuple(segments)),
                                          version)
            except BadVersionError:
                continue
            log.info("ledger {ledger}: segment {first} is now {ensemble}", ledger=ledger_id,
                     first=first, ensemble=current)
            return


def _first_error(failure):
    # gatherResults wraps the first failure in FirstError; hand on the original error.
    return failure.value.subFailure if failure.check(defer.FirstError) else failure


# -- the service ---------------------------------------------------------------------------------

class AutoRecoveryService(service.Service):
    """
    BookKeeper's auto-recovery daemon: an ``Auditor`` candidate and a ``ReplicationWorker`` over one
    metadata store session. ``ledger_client`` (a BookKeeperClient, or None) lends its placement
    policy to choose replacement bookies; ``bookie_client`` is the IBookieClient copies go through;
    ``clock`` an IReactorTime. ``lost_bookie_recovery_delay`` (seconds, BookKeeper's
    ``lostBookieRecoveryDelay``) is how long a bookie must stay away before its ledgers are
    replicated. ``auditor`` / ``worker`` False leave that part out (a broker may run only workers).
    """

    def __init__(self, metadata_store, ledger_client, bookie_client, clock,
                 lost_bookie_recovery_delay: float = 0.0, *, passwords: Iterable[bytes] = (b"",),
                 auditor: bool = True, worker: bool = True, retry_delay: float = 60.0,
                 placement=None):
        if placement is None:
            env = getattr(ledger_client, "env", None)
            placement = getattr(env, "placement", None)
        self.auditor = Auditor(metadata_store, clock, lost_bookie_recovery_delay,
                               retry_delay=retry_delay) if auditor else None
        self.worker = ReplicationWorker(metadata_store, bookie_client, clock, placement,
                                        passwords=passwords,
                                        retry_delay=retry_delay) if worker else None

    def startService(self):
        super().startService()
        if self.auditor is not None:
            self.auditor.start()
        if self.worker is not None:
            self.worker.start()

    def stopService(self):
        super().stopService()
        waits = [part.stop() for part in (self.auditor, self.worker) if part is not None]
        return defer.gatherResults(waits, consumeErrors=True).addCallback(lambda _: None)

    def trigger_audit(self):
        """Audit all ledgers now, ignoring the recovery delay (see ``Auditor.audit_now``).
        Deferred firing with the ids of the ledgers newly marked."""
        if self.auditor is None:
            return defer.fail(RuntimeError("this AutoRecoveryService runs no auditor"))
        return self.auditor.audit_now()
