"""
Ledger metadata (BookKeeper's ``LedgerMetadata``) and its home in the metadata store
(BookKeeper's ``LedgerManager`` + ``LedgerIdGenerator``).

The metadata of ledger ``n`` lives at ``/ledgers/L<n zero-padded to 10>`` as JSON bytes carrying a
``format_version``. It is only ever changed by compare-and-set on the node's version: the writer
(ensemble changes, close) and a recovering reader (IN_RECOVERY, close) race through the store, and
whoever loses re-reads and decides.
"""

import base64
import enum
import hashlib
import json
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Sequence, Tuple

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.bk_errors import BKException, NoSuchLedgerError
from pulsar_twisted.metadata.interfaces import NotFoundError
from pulsar_twisted.metadata.layout import IDGEN_PREFIX, LEDGERS_ROOT

log = Logger()

#: A str as JSON, non-ASCII escaped: what ``json.dumps`` writes for it (the C encoder).
_json_string = json.encoder.encode_basestring_ascii

FORMAT_VERSION = 1
#: ``to_bytes``' fast form takes numbers whose type is exactly int.
_INT_ONLY = frozenset((int,))


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class MetadataFormatError(BKException):
    """Stored ledger metadata could not be parsed (unknown format version, bad JSON)."""

    code = "MetadataSerializationException"


def master_key(password: bytes) -> bytes:
    """The key bookies check on adds and fencing: SHA-1("ledger" + password), exactly as
    BookKeeper's ``MacDigestManager.genDigest("ledger", passwd)``."""
    return hashlib.sha1(b"ledger" + bytes(password)).digest()


def password_digest(key: bytes) -> str:
    """What the metadata stores instead of the password: a digest of the master key, so that
    reading the metadata is not enough to write to the bookies."""
    return hashlib.sha256(key).hexdigest()


def ledger_path(ledger_id: int) -> str:
    return "%s/L%010d" % (LEDGERS_ROOT, ledger_id)


#: Ensembles in use (``LedgerMetadata.ensembles``), each kept once: most ledgers of a broker have one
#: segment on the same few bookies, and an equal tuple of tuples per ledger held by its handle was
#: 152 bytes per loaded topic (issue 14). Bounded: emptied when full, the tuples stay valid.
_SHARED_ENSEMBLES: dict = {}
SHARED_ENSEMBLES_MAX = 4096


def shared_ensembles(ensembles):
    """An equal ``ensembles`` already in use, else ``ensembles`` itself (now shared). Unhashable
    input (lists) is returned as is."""
    try:
        shared = _SHARED_ENSEMBLES.get(ensembles)
    except TypeError:
        return ensembles
    if shared is None:
        if len(_SHARED_ENSEMBLES) >= SHARED_ENSEMBLES_MAX:
            _SHARED_ENSEMBLES.clear()
        shared = _SHARED_ENSEMBLES[ensembles] = ensembles
    return shared


# slots: a ledger's metadata is held by its handle for as long as its topic is loaded; without an
# instance dictionary it takes 128 bytes instead of 176 (tracemalloc; issue 14: memory per topic).
@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """
    Immutable description of a ledger. ``ensembles`` is a tuple of ``(first_entry_id, bookies)``
    segments sorted by first entry id; the segment with the greatest first entry id <= e holds
    entry e. The ``with_*`` methods return modified copies.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: Tuple[Tuple[int, Tuple[str, ...]], ...]
    password_digest: str
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime_ms: int = 0
    custom_metadata: Dict[str, bytes] = field(default_factory=dict)
    digest_type: str = "CRC32C"
    format_version: int = FORMAT_VERSION

    def __post_init__(self):
        # Equal ensembles are one object (``shared_ensembles``), however the metadata was made.
        object.__setattr__(self, "ensembles", shared_ensembles(self.ensembles))

    @property
    def closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_ensemble(self) -> Tuple[int, Tuple[str, ...]]:
        return self.ensembles[-1]

    def ensemble_for(self, entry_id: int) -> Tuple[str, ...]:
        """The bookies of the segment holding ``entry_id``."""
        firsts = [first for first, _ in self.ensembles]
        index = bisect_right(firsts, entry_id) - 1
        return self.ensembles[max(index, 0)][1]

    def all_bookies(self) -> set:
        return {b for _, ensemble in self.ensembles for b in ensemble}

    def with_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> "LedgerMetadata":
        """Add a segment starting at ``first_entry_id``; replaces the last segment when it starts
        at the same entry (no entry was written with it), as BookKeeper does."""
        segments = [s for s in self.ensembles if s[0] < first_entry_id]
        segments.append((first_entry_id, tuple(bookies)))
        return replace(self, ensembles=tuple(segments))

    def with_state(self, state: LedgerState) -> "LedgerMetadata":
        return replace(self, state=state)

    def with_closed(self, last_entry_id: int, length: int) -> "LedgerMetadata":
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def to_bytes(self) -> bytes:
        """The stored JSON: keys sorted, no spaces, ASCII (``_json_bytes``, byte for byte). Made
        by hand when every number is an int (always, but for a caller passing something else):
        the embedded store encodes the metadata again for every snapshot and read (issue 14), and
        this takes 5 us where ``json.dumps`` took 7.5 (a managed ledger's first ledger)."""
        ints = (self.ack_quorum, self.ctime_ms, self.ensemble_size, self.format_version,
                self.last_entry_id, self.length, self.write_quorum)
        if (set(map(type, ints)) != _INT_ONLY    # one C-level pass, not a generator's seven steps
                or any(type(first) is not int for first, _ in self.ensembles)
                or any(type(k) is not str for k in self.custom_metadata)):
            return self._json_bytes()
        esc = _json_string
        return ('{"ack_quorum":%d,"ctime_ms":%d,"custom_metadata":{%s},"digest_type":%s,'
                '"ensemble_size":%d,"ensembles":[%s],"format_version":%d,"last_entry_id":%d,'
                '"length":%d,"password_digest":%s,"state":%s,"write_quorum":%d}' % (
                    self.ack_quorum, self.ctime_ms,
                    ",".join(["%s:%s" % (esc(k), esc(base64.b64encode(v).decode("ascii")))
                              for k, v in sorted(self.custom_metadata.items())]),
                    esc(self.digest_type), self.ensemble_size,
                    ",".join(["[%d,[%s]]" % (first, ",".join(map(esc, bookies)))
                              for first, bookies in self.ensembles]),
                    self.format_version, self.last_entry_id, self.length,
                    esc(self.password_digest), esc(self.state.value), self.write_quorum,
                )).encode("ascii")

    def _json_bytes(self) -> bytes:
        """``to_bytes`` through ``json.dumps`` (the reference the hand-made form must equal)."""
        doc = {
            "format_version": self.format_version,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
            "password_digest": self.password_digest,
            "digest_type": self.digest_type,
            "ctime_ms": self.ctime_ms,
            "custom_metadata": {k: base64.b64encode(v).decode("ascii")
                                for k, v in sorted(self.custom_metadata.items())},
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")

    # The metadata is written as a record (``IMetadataStore``: its bytes are the value): the
    # embedded store then keeps this object, which the ledger's handle holds anyway, instead of
    # ~450 bytes of JSON per ledger (issue 14); reads still get these bytes.
    __bytes__ = to_bytes

    @classmethod
    def from_bytes(cls, raw: bytes) -> "LedgerMetadata":
        """Parse; MetadataFormatError on junk or a format version this code does not know."""
        try:
            doc = json.loads(raw.decode("utf-8"))
            version = doc["format_version"]
            if version != FORMAT_VERSION:
                raise MetadataFormatError(f"unknown ledger metadata format {version}")
            return cls(
                ensemble_size=int(doc["ensemble_size"]),
                write_quorum=int(doc["write_quorum"]),
                ack_quorum=int(doc["ack_quorum"]),
                ensembles=tuple((int(first), tuple(bookies))
                                for first, bookies in doc["ensembles"]),
                password_digest=doc["password_digest"],
                state=LedgerState(doc["state"]),
                last_entry_id=int(doc["last_entry_id"]),
                length=int(doc["length"]),
                ctime_ms=int(doc.get("ctime_ms", 0)),
                custom_metadata={k: base64.b64decode(v)
                                 for k, v in doc.get("custom_metadata", {}).items()},
                digest_type=doc.get("digest_type", "CRC32C"),
                format_version=version,
            )
        except MetadataFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MetadataFormatError(f"bad ledger metadata: {e!r}") from e


def normalize_custom_metadata(custom: Optional[dict]) -> Dict[str, bytes]:
    """BookKeeper's custom metadata is ``Map<String, byte[]>``; accept str values for convenience."""
    out = {}
    for key, value in (custom or {}).items():
        out[str(key)] = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return out


#: Ledger ids per sequential-node counter value (``LedgerManager.new_ledger_id``).
ID_BLOCK = 64

#: The next block is requested while fewer ids than this are held or on their way. A block's
#: allocation is a durable write queued behind the metadata batch being written, which under a
#: burst of creations takes longer than half a block's worth of them: with 32 (the first
#: threshold), 43% of the creations of a 10,000-topic run waited for an id (issue 14).
PREFETCH_IDS = ID_BLOCK + ID_BLOCK // 2


class LedgerManager:
    """
    Reads and writes ledger metadata in an IMetadataStore and hands out ledger ids. All methods
    return Deferreds; versions are the store's node versions, used for compare-and-set.
    """

    def __init__(self, store):
        self._store = store
        #: The ids this manager holds: ``[_next_id, _end_id)``, then the blocks in ``_ranges``.
        self._next_id = 0
        self._end_id = 0
        self._ranges = deque()
        #: Requests waiting for a block, oldest first; block allocations in flight.
        self._waiters = deque()
        self._allocating = 0

    def new_ledger_id(self, after: int = -1):
        """
        A ledger id unique across every process sharing the store. Ids are handed out from blocks
        of ``ID_BLOCK``: block ``n`` is ids ``[n * ID_BLOCK, (n + 1) * ID_BLOCK)``, and ``n`` is the
        counter of a sequential node (BookKeeper's ``ZkLedgerIdGenerator`` node, deleted right
        away: the store's sequence numbers never go back even when nodes are removed). So one
        durable metadata write serves ``ID_BLOCK`` new ledgers instead of one (issue 14: topic
        creations), and the next block is fetched while ``PREFETCH_IDS`` ids are still held or on
        their way, so a steady stream of creations does not wait for it; a burst of more requests than the
        blocks held waits for as many allocations as it needs, all in flight at once. Ids left in
        a block when the process stops are skipped, never reused: a block is only used once its
        node is durable. A writer on the one-id-per-node scheme could collide with a block's ids:
        the ledger's metadata is created with expected version -1 and the client takes another.

        Blocks held by different processes interleave, so an id is not greater than every id
        handed out before it elsewhere. A managed ledger needs its ledgers in increasing id order
        (positions compare by ledger id, as with BookKeeper's ever-growing ids): ``after`` is its
        last ledger's id, and the id returned is greater. Held ids not above it are skipped (never
        handed out: no harm, ids are 63-bit); a block allocated after this call is above every
        block allocated before, whoever holds it, so the wait ends.
        """
        ledger_id = self.held_ledger_id(after)
        if ledger_id is not None:
            return defer.succeed(ledger_id)
        d = defer.Deferred()
        self._waiters.append((d, after))
        self._allocate_for_waiters()
        return d

    def held_ledger_id(self, after: int = -1):
        """``new_ledger_id`` without a Deferred when an id is held and nobody waits for one
        (the usual case: blocks are fetched ahead); None otherwise (``new_ledger_id`` then)."""
        if self._waiters:
            return None
        ledger_id = self._take(after)
        if ledger_id is not None:
            self._prefetch()
        return ledger_id

    def _take(self, after: int = -1):
        """The next held id above ``after`` (those below it are dropped), or None."""
        while True:
            while self._next_id >= self._end_id:
                if not self._ranges:
                    return None
                self._next_id, self._end_id = self._ranges.popleft()
            if self._next_id > after:
                break
            self._next_id = min(after + 1, self._end_id)
        ledger_id = self._next_id
        self._next_id += 1
        return ledger_id

    def _available(self) -> int:
        return self._end_id - self._next_id + sum(end - first for first, end in self._ranges)

    def _allocate_for_waiters(self):
        # Recomputed each turn: an allocation may complete (or fail) at once, serving (or failing)
        # waiters.
        while self._allocating < -(-len(self._waiters) // ID_BLOCK):
            self._allocate()

    def _prefetch(self):
        # A block may be allocated at once (memory store): each turn recomputes.
        while self._available() + self._allocating * ID_BLOCK < PREFETCH_IDS:
            self._allocate()

    def _allocate(self):
        self._allocating += 1
        self._store.put(IDGEN_PREFIX, b"", sequential=True).addCallbacks(
            self._block_allocated, self._block_failed)

    def _block_allocated(self, stat):
        self._allocating -= 1
        block = int(stat.path[len(IDGEN_PREFIX):])
        # The block is ours once the node exists; its deletion is housekeeping nobody waits for.
        self._store.delete(stat.path).addErrback(self._idgen_delete_failed, stat.path)
        self._ranges.append((block * ID_BLOCK, (block + 1) * ID_BLOCK))
        waiters = self._waiters
        while waiters:
            d, after = waiters[0]
            ledger_id = self._take(after)
            if ledger_id is None:
                break
            waiters.popleft()
            d.callback(ledger_id)
        if waiters:
            self._allocate_for_waiters()
        else:
            self._prefetch()

    def _block_failed(self, failure):
        """Fail the waiting requests that the allocations still in flight cannot serve."""
        self._allocating -= 1
        covered = self._allocating * ID_BLOCK + self._available()
        doomed = []
        while len(self._waiters) > covered:
            doomed.append(self._waiters.pop())
        if not doomed:
            log.warn("could not allocate a block of ledger ids ahead of need: {err}",
                     err=failure.getErrorMessage())
        for d, _ in reversed(doomed):
            d.errback(failure)

    @staticmethod
    def _idgen_delete_failed(failure, path):
        if not failure.check(NotFoundError):
            log.warn("could not delete ledger id node {path}: {err}", path=path,
                     err=failure.getErrorMessage())

    def create(self, ledger_id: int, metadata: LedgerMetadata):
        """Store new metadata (must not exist: AlreadyExistsError). Fires with the version."""
        d = self._store.put(ledger_path(ledger_id), metadata, expected_version=-1)
        d.addCallback(lambda stat: stat.version)
        return d

    def create_with(self, ledger_id: int, metadata: LedgerMetadata, write):
        """``create`` and ``write`` (``(path, value, expected_version)``) in one ``put_all``: fires
        with ``(version, stat of write)``; AlreadyExistsError with ``failed_index`` 0 when the id
        is taken."""
        d = self._store.put_all([(ledger_path(ledger_id), metadata, -1), write])
        d.addCallback(lambda stats: (stats[0].version, stats[1]))
        return d

    def read(self, ledger_id: int):
        """Fires with ``(LedgerMetadata, version)``; fails with NoSuchLedgerError."""
        def parse(result):
            if result is None:
                raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata")
            raw, stat = result
            return LedgerMetadata.from_bytes(raw), stat.version
        return self._store.get(ledger_path(ledger_id)).addCallback(parse)

    def write(self, ledger_id: int, metadata: LedgerMetadata, version: int):
        """Compare-and-set; fires with the new version (BadVersionError when it lost a race)."""
        d = self._store.put(ledger_path(ledger_id), metadata, expected_version=version)
        d.addCallback(lambda stat: stat.version)
        return d

    def delete(self, ledger_id: int):
        """Remove the metadata node; NoSuchLedgerError when absent."""
        def not_found(f):
            f.trap(NotFoundError)
            raise NoSuchLedgerError(f"ledger {ledger_id} has no metadata")
        return self._store.delete(ledger_path(ledger_id)).addErrback(not_found)
