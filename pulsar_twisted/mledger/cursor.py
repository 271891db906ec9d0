"""
Cursors of a managed ledger (Pulsar's ``ManagedCursorImpl`` and ``NonDurableCursorImpl``).

A cursor's state is its mark-delete position (everything at or before it is acknowledged),
the individually acknowledged positions above it (a ``PositionRangeSet``), the batch indexes
still unacknowledged of partly acknowledged batch entries (Pulsar's ``batchDeletedIndexes``:
position -> bit set, see ``set_batch_deleted_indexes``), and properties. Reads move a separate
read position and skip acknowledged entries (a partly acknowledged entry is not acknowledged:
it is read again, and the broker sends its bit set with it).

Durable cursors persist their state as snapshot entries in a *cursor ledger* of their own
(one entry per persist); the cursor node in the metadata store names that ledger and keeps
the mark-delete position as a fallback. At most one snapshot is being written at a time:
acks arriving meanwhile only change the in-memory state and wait; the next snapshot holds
them all (so a burst of N acks costs about two writes). Every ``mark_delete``/``delete``
Deferred fires once a snapshot including its change is durable.

Cursor ledger lifecycle (``CursorState``)::

    NO_LEDGER --(first persist)--> SWITCHING --> OPEN --(cursor_max_entries_per_ledger)--> SWITCHING
    a write failure also switches to a new ledger; if that fails, the state goes to the cursor
    node alone (ledger -1, mark-delete + ranges), as Pulsar's persistPositionMetaStore does.

On restart the cursor ledger is opened with recovery (fencing a previous owner) and its last
entry is read; the old ledger is deleted once the first new snapshot is in a new ledger.
"""

import enum
import itertools

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import LedgerFencedError, NoSuchLedgerError
from pulsar_twisted.common.position import EARLIEST, LATEST, Position
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError, NotFoundError
from pulsar_twisted.mledger import formats
from pulsar_twisted.mledger.bitset import int_to_words, words_to_int
from pulsar_twisted.mledger.interfaces import (
    IManagedCursor, ManagedLedgerClosedError, ManagedLedgerError, ManagedLedgerFencedError,
)
from pulsar_twisted.mledger.rangeset import PositionRangeSet
from pulsar_twisted.mledger.stats import position_text, ranges_text

log = Logger()


class CursorState(enum.Enum):
    NO_LEDGER = "no_ledger"
    OPEN = "open"
    SWITCHING = "switching"
    CLOSED = "closed"
    DELETED = "deleted"


@implementer(IManagedCursor)
class ManagedCursorImpl:
    """
    A durable cursor. Made by ``ManagedLedgerImpl.open_cursor`` (or restored at open).
    One ``read_entries`` at a time per cursor (a dispatcher's loop); acks may come any time.
    """

    durable = True

    def __init__(self, ml, name: str, mark_delete: Position, properties=None):
        self.ml = ml
        self.name = name
        self.mark_delete_position = mark_delete
        self._read_position = Position(mark_delete[0], mark_delete[1] + 1)
        #: Bumped whenever the read position is moved by hand (rewind, seek, reset, skip): a
        #: read in flight then must not move it on when it completes.
        self._read_moves = 0
        self._acked = PositionRangeSet()
        #: position -> non-zero int bit set of the batch indexes NOT yet acknowledged, for
        #: entries above the mark-delete that are partly acknowledged (never in ``_acked``).
        self._batch_deleted = {}
        self.properties = dict(properties or {})
        self.mark_delete_properties = {}
        self._state = CursorState.NO_LEDGER
        self._ledger = None
        self._ledger_entries = 0
        self._old_ledger_id = -1
        self._node_version = None
        self._node_writes = 0       # node writes in flight or queued
        self._node_idle = []        # Deferreds waiting for them to settle
        #: One node write at a time: each carries the version the one before it left, so two
        #: writes of ours never race each other's compare-and-set (only another owner's can).
        self._node_lock = defer.DeferredLock()
        #: The cursor ledger our last node write named (-1: none, the state in the node alone).
        self._node_ledger = -1
        self._waiting = []
        self._persisting = False
        self._idle_waiters = []
        self.persist_count = 0

    def __repr__(self):
        return f"<{type(self).__name__} {self.ml.name}/{self.name} md={self.mark_delete_position}>"

    def debug_state(self) -> str:
        """One line on what this cursor is doing, for a log line about something stuck."""
        ledger = self._ledger
        where = ledger.debug_state() if hasattr(ledger, "debug_state") else (
            f"ledger {ledger.ledger_id}" if ledger is not None else "no ledger")
        return (f"cursor {self.name} {self._state.value}: snapshot "
                f"{'in flight' if self._persisting else 'idle'}, {len(self._waiting)} waiting, "
                f"{self._node_writes} node writes in flight; {where}")

    # -- positions ------------------------------------------------------------------------

    @property
    def read_position(self) -> Position:
        return self.ml._normalize(self._read_position)

    def is_acknowledged(self, position) -> bool:
        return position <= self.mark_delete_position or (
            self._acked._cardinality > 0 and self._acked.contains(position))

    def individually_deleted_ranges(self):
        return self._acked.position_ranges()

    def internal_stats(self) -> dict:
        """Pulsar's CursorStats of this cursor (the admin API's ``internalStats``); the counters
        Pulsar keeps and we do not (pending reads, consumed messages) are reported as zero."""
        ranges = self.individually_deleted_ranges()
        return {
            "markDeletePosition": position_text(self.mark_delete_position),
            "readPosition": position_text(self.read_position),
            "waitingReadOp": False, "pendingReadOps": 0,
            "messagesConsumedCounter": 0,
            "cursorLedger": self._ledger.ledger_id if self._ledger is not None else -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": ranges_text(ranges),
            "lastLedgerSwitchTimestamp": "",
            "state": self._state.name,
            "numberOfEntriesSinceFirstNotAckedMessage": self.number_of_entries_in_backlog(),
            "totalNonContiguousDeletedMessagesRange": len(ranges),
            "properties": dict(self.properties or {}),
        }

    def _first_unacked_from(self, pos) -> Position:
        """``pos`` (normalized) moved past acknowledged entries."""
        ml = self.ml
        md = self.mark_delete_position
        while True:
            if pos <= md:
                pos = ml.next_position(md)
            if not self._acked:
                return pos
            r = self._acked.range_containing(pos)
            if r is None:
                return pos
            pos = ml._normalize(Position(pos[0], r[1] + 1))

    def unacked_positions(self, count: int) -> list:
        """The first ``count`` unacknowledged positions after the mark-delete position, in order
        (fewer when the backlog is shorter)."""
        ml = self.ml
        last = ml.last_confirmed_entry()
        positions = []
        pos = ml.next_position(self.mark_delete_position)
        while len(positions) < count:
            pos = self._first_unacked_from(pos)
            if pos > last:
                break
            positions.append(pos)
            pos = ml.next_position(pos)
        return positions

    def nth_unacked_position(self, n: int):
        """The ``n``-th (1-based) unacknowledged position, or None when the backlog is shorter."""
        if n < 1:
            return None
        positions = self.unacked_positions(n)
        return positions[-1] if len(positions) == n else None

    def skip_unacked(self, n: int):
        """
        Acknowledge the next ``n`` unacknowledged entries (Pulsar's skip with individually deleted
        entries included; ``skip_entries`` only moves the read position). Deferred firing once
        persisted with the number skipped.
        """
        positions = self.unacked_positions(n) if n > 0 else []
        if not positions:
            return defer.succeed(0)
        if not self._acked:
            # Nothing acknowledged above the mark-delete: the skipped run is contiguous.
            d = self.mark_delete(positions[-1])
        else:
            d = self.delete(positions)
        return d.addCallback(lambda _: len(positions))

    def has_more_entries(self) -> bool:
        pos = self._first_unacked_from(self.ml._normalize(self._read_position))
        return pos <= self.ml.last_confirmed_entry()

    def number_of_entries_in_backlog(self) -> int:
        return max(0, self.ml._count_entries_after(self.mark_delete_position) - self._acked.cardinality)

    def estimated_backlog_size(self) -> int:
        return self.ml.estimated_backlog_size(self)

    # -- reads ----------------------------------------------------------------------------

    def read_entries(self, count: int):
        error = self._check_ack_open()
        if error is not None:
            return defer.fail(error)
        d = self.ml._read(self._read_position, count, self)
        d.addCallback(self._read_done, self._read_moves)
        return d

    def _read_done(self, result, read_moves=None):
        entries, next_pos = result
        if next_pos > self._read_position and read_moves in (None, self._read_moves):
            self._read_position = next_pos
        self.ml._cursor_read(self)
        return entries

    def replay_entries(self, positions):
        wanted = sorted({Position(*p) for p in positions if not self.is_acknowledged(p)})
        return defer.Deferred.fromCoroutine(self.ml._read_positions(wanted))

    def rewind(self):
        self._read_moves += 1
        self._read_position = self.ml.next_position(self.mark_delete_position)

    def _resolve(self, position) -> Position:
        if position == EARLIEST:
            return self.ml.first_position()
        if position == LATEST:
            return self.ml.next_position(self.ml.last_confirmed_entry())
        return Position(*position)

    def seek(self, position):
        position = self._resolve(position)
        if position <= self.mark_delete_position:
            position = self.ml.next_position(self.mark_delete_position)
        self._read_moves += 1
        self._read_position = position

    def skip_entries(self, count: int) -> None:
        """Move the read position ``count`` unacknowledged entries ahead (without reading)."""
        pos = self.ml._normalize(self._read_position)
        while count > 0:
            pos = self._first_unacked_from(pos)
            if pos > self.ml.last_confirmed_entry():
                break
            pos = self.ml.next_position(pos)
            count -= 1
        self._read_moves += 1
        self._read_position = pos

    # -- acks -----------------------------------------------------------------------------

    def _check_ack_open(self):
        if self._state in (CursorState.CLOSED, CursorState.DELETED):
            if self.ml.is_fenced:
                return ManagedLedgerFencedError(f"cursor {self.name} is fenced")
            return ManagedLedgerClosedError(f"cursor {self.name} is closed")
        return None

    def mark_delete(self, position, properties=None):
        error = self._check_ack_open()
        if error is not None:
            return defer.fail(error)
        position = Position(*position)
        if position > self.ml.last_confirmed_entry():
            return defer.fail(ManagedLedgerError(
                f"mark-delete {position} is after the last entry {self.ml.last_confirmed_entry()}"))
        if properties is not None:
            self.mark_delete_properties = dict(properties)
        if position > self.mark_delete_position:
            self._set_mark_delete(position)
        elif properties is None and not self._persisting and not self._waiting:
            return defer.succeed(None)
        return self._request_persist()

    def delete(self, positions):
        error = self._check_ack_open()
        if error is not None:
            return defer.fail(error)
        if isinstance(positions, Position):
            positions = (positions,)
        md = self.mark_delete_position
        lce = self.ml.last_confirmed_entry()
        acked = self._acked
        changed = False
        for p in positions:
            if md < p <= lce and acked.add(p):
                changed = True
        if self._batch_deleted:
            # Entries acknowledged whole no longer need their batch index bit sets.
            for p in positions:
                self._batch_deleted.pop(p, None)
        if changed:
            self._advance_mark_delete()
        elif not self._persisting and not self._waiting:
            return defer.succeed(None)
        return self._request_persist()

    def _set_mark_delete(self, position):
        self.mark_delete_position = position
        self._acked.remove_up_to(position)
        if self._batch_deleted:
            self._drop_batch_deleted_up_to(position)
        self._advance_mark_delete()

    def _advance_mark_delete(self):
        """Fold acked ranges that continue the mark-delete position into it (also across ledger
        boundaries: the ledger list says which position comes next)."""
        acked = self._acked
        ml = self.ml
        moved = False
        while acked:
            nxt = ml.next_position(self.mark_delete_position)
            r = acked.range_containing(nxt)
            if r is None:
                break
            self.mark_delete_position = Position(nxt[0], r[1])
            acked.remove_up_to(self.mark_delete_position)
            moved = True
        if self._read_position <= self.mark_delete_position:
            self._read_position = Position(self.mark_delete_position[0], self.mark_delete_position[1] + 1)
        if moved and self._batch_deleted:
            # Only when the mark-delete moved: an ack that does not move it costs no scan.
            self._drop_batch_deleted_up_to(self.mark_delete_position)

    def _drop_batch_deleted_up_to(self, position):
        batch_deleted = self._batch_deleted
        for p in [p for p in batch_deleted if p <= position]:
            del batch_deleted[p]

    # -- batch index acks (acknowledgmentAtBatchIndexLevelEnabled) ----------------------------

    def set_batch_deleted_indexes(self, position, ack_set):
        """
        Record that the batch entry at ``position`` is acknowledged in part: ``ack_set`` holds the
        indexes NOT yet acknowledged, as int64 words in Pulsar's layout (``mledger.bitset``; the
        ``ack_set`` of a client's ACK) or as an int bit set. It replaces what was recorded (the
        caller ANDs successive acks). An empty set acknowledges the whole entry (``delete``).
        A position at or below the mark-delete, already acknowledged or past the last entry is
        ignored, as ``delete`` ignores it. Deferred firing once a snapshot holding the change is
        durable (coalesced with the other acks, as ``delete``).
        """
        error = self._check_ack_open()
        if error is not None:
            return defer.fail(error)
        position = Position(*position)
        if isinstance(ack_set, int):
            if ack_set < 0:
                return defer.fail(ValueError(f"negative bit set {ack_set} for {position}"))
            bits = ack_set
        else:
            bits = words_to_int(ack_set)
        if bits == 0:
            return self.delete([position])
        if (position <= self.mark_delete_position or position > self.ml.last_confirmed_entry()
                or (self._acked._cardinality > 0 and self._acked.contains(position))
                or self._batch_deleted.get(position) == bits):
            if not self._persisting and not self._waiting:
                return defer.succeed(None)
        else:
            self._batch_deleted[position] = bits
        return self._request_persist()

    def batch_deleted_indexes(self, position):
        """The indexes NOT yet acknowledged of the partly acknowledged batch entry at
        ``position``, as int64 words (Pulsar's ``getDeletedBatchIndexesAsLongArray``: the
        ``ack_set`` to send with the entry), or None when no index of it was acknowledged."""
        batch_deleted = self._batch_deleted
        if not batch_deleted:
            return None
        bits = batch_deleted.get(position)
        return None if bits is None else int_to_words(bits)

    def batch_deleted_count(self) -> int:
        """How many entries are acknowledged in part."""
        return len(self._batch_deleted)

    def reset_cursor(self, position):
        """Everything before ``position`` acknowledged (individual acks forgotten); the next read
        returns ``position``. Deferred firing once persisted."""
        error = self._check_ack_open()
        if error is not None:
            return defer.fail(error)
        position = self.ml._normalize(self._resolve(position))
        self.mark_delete_position = Position(position[0], position[1] - 1)
        self._acked.clear()
        self._batch_deleted.clear()
        self._read_moves += 1
        self._read_position = position
        return self._request_persist()

    # -- persistence ----------------------------------------------------------------------

    def _snapshot(self) -> bytes:
        return formats.encode_cursor_snapshot(
            self.mark_delete_position, self._acked, self.mark_delete_properties,
            self.ml.config.max_unacked_ranges_to_persist, self._batch_deleted)

    def _request_persist(self):
        d = defer.Deferred()
        self._waiting.append(d)
        self._maybe_persist()
        return d

    def _maybe_persist(self):
        if self._persisting or not self._waiting:
            return
        st = self._state
        if st is CursorState.OPEN:
            waiters, self._waiting = self._waiting, []
            self._persisting = True
            d = self._ledger.add_entry(self._snapshot())
            d.addCallbacks(self._persisted, self._persist_failed,
                           callbackArgs=(waiters,), errbackArgs=(waiters,))
        elif st is CursorState.NO_LEDGER:
            self._switch_ledger()

    def _persisted(self, _, waiters):
        self._persisting = False
        self._ledger_entries += 1
        self.persist_count += 1
        roll = (self._ledger_entries >= self.ml.config.cursor_max_entries_per_ledger
                and self._state is CursorState.OPEN)    # not once closed or fenced meanwhile
        if roll:
            self._state = CursorState.SWITCHING
        for w in waiters:
            w.callback(None)
        self.ml._cursor_persisted(self)
        if roll:
            self._switch_ledger()
        else:
            self._maybe_persist()
        self._check_idle()

    def _persist_failed(self, failure, waiters):
        self._persisting = False
        if failure.check(LedgerFencedError):
            # A new owner recovered our cursor ledger: this instance is stale, stop writing.
            self._become_fenced(waiters)
            return
        log.warn("cursor {ml}/{name}: snapshot write to ledger {lid} failed ({err}), switching ledger",
                 ml=self.ml.name, name=self.name, lid=self._ledger.ledger_id, err=failure.getErrorMessage())
        self._waiting = waiters + self._waiting
        if self._state is CursorState.OPEN:
            self._switch_ledger()
        else:
            self._check_idle()

    def _switch_ledger(self):
        """Start a new cursor ledger holding a fresh snapshot; the waiters join that snapshot."""
        self._state = CursorState.SWITCHING
        d = defer.Deferred.fromCoroutine(self._do_switch())
        d.addErrback(lambda f: log.failure("cursor {name}: ledger switch crashed", f, name=self.name))

    async def _do_switch(self):
        ml = self.ml
        cfg = ml.config
        old = self._ledger
        handle = None
        waiters = []
        try:
            handle = await ml.ledger_client.create_ledger(
                cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum, cfg.password,
                custom_metadata={"application": "pulsar", "component": "managed-ledger",
                                 "pulsar/managed-ledger": ml.name, "pulsar/cursor": self.name})
            waiters, self._waiting = self._waiting, []
            await handle.add_entry(self._snapshot())
            if self._state is not CursorState.SWITCHING:
                raise ManagedLedgerClosedError(f"cursor {self.name} closed")
            await self._write_node(handle.ledger_id)
        except Exception as e:
            if handle is not None:
                self._close_ledger_quietly(handle)
                self._delete_ledger_quietly(handle.ledger_id)
            self._waiting = waiters + self._waiting
            waiters = []
            await self._fallback_to_node(e)
            return
        if self._state is not CursorState.SWITCHING:
            self._close_ledger_quietly(handle)
            self._delete_ledger_quietly(handle.ledger_id)
            self._fail_waiting(waiters, ManagedLedgerClosedError(f"cursor {self.name} closed"))
            self._check_idle()
            return
        self._ledger = handle
        self._ledger_entries = 1
        self.persist_count += 1
        self._state = CursorState.OPEN
        for lid in {old.ledger_id if old is not None else -1, self._old_ledger_id}:
            if lid >= 0 and lid != handle.ledger_id:
                self._delete_ledger_quietly(lid)
        self._old_ledger_id = -1
        if old is not None:
            self._close_ledger_quietly(old)
        for w in waiters:
            w.callback(None)
        ml._cursor_persisted(self)
        self._maybe_persist()
        self._check_idle()

    async def _fallback_to_node(self, error):
        """The cursor ledger could not be written: keep the state in the cursor node alone."""
        waiters, self._waiting = self._waiting, []
        log.warn("cursor {ml}/{name}: no cursor ledger ({err}); state saved in the metadata node",
                 ml=self.ml.name, name=self.name, err=str(error) or type(error).__name__)
        if self._state is not CursorState.SWITCHING:
            self._fail_waiting(waiters, ManagedLedgerClosedError(f"cursor {self.name} closed"))
            self._check_idle()
            return
        old = self._ledger
        try:
            await self._write_node(-1)
        except _NODE_CAS_LOST:
            self._become_fenced(waiters)
            return
        except Exception as e:
            self._state = CursorState.NO_LEDGER
            self._fail_waiting(waiters, ManagedLedgerError(f"cursor {self.name}: persist failed: {e}"))
            self._persist_later_acks()
            return
        self._ledger = None
        if old is not None:
            self._close_ledger_quietly(old)
        self._state = CursorState.NO_LEDGER
        self.persist_count += 1
        for w in waiters:
            w.callback(None)
        self.ml._cursor_persisted(self)
        self._persist_later_acks()

    def _persist_later_acks(self):
        """After a write in the node: the acks made while it was under way (they found the cursor
        switching, so nothing was started for them) are persisted now, as ``_persisted`` does
        after a snapshot. Left for the next ack, they waited for good when none came, and so did
        a close waiting for the cursor to be idle (a topic never loaded again, under the nemesis)."""
        self._maybe_persist()
        self._check_idle()

    def _become_fenced(self, waiters):
        """Our node CAS (or cursor ledger) was taken over: stop, and fence the whole managed ledger
        (one writer for the ledger and all its cursors)."""
        log.warn("cursor {ml}/{name} is owned by another instance now", ml=self.ml.name, name=self.name)
        self._stop_fenced(waiters)
        self.ml._cursor_fenced(self)

    def _stop_fenced(self, waiters=()):
        """No more writes from this cursor: waiting persists fail with ManagedLedgerFencedError."""
        if self._state is not CursorState.DELETED:
            self._state = CursorState.CLOSED
        waiters = list(waiters) + self._waiting
        self._waiting = []
        self._fail_waiting(waiters, ManagedLedgerFencedError(f"cursor {self.name} is fenced"))
        self._check_idle()

    @staticmethod
    def _fail_waiting(waiters, error):
        for w in waiters:
            w.errback(error)

    def _write_node(self, ledger_id):
        """CAS the cursor node (after any node write of ours still in flight, whose version it
        expects); its version is kept so a concurrent owner makes ours fail."""
        self._node_writes += 1
        d = self._node_lock.run(self._put_node, ledger_id)

        def settled(result):
            self._node_writes -= 1
            if not self._node_writes:
                waiters, self._node_idle = self._node_idle, []
                for w in waiters:
                    w.callback(None)
            return result
        return d.addBoth(settled)

    def _put_node(self, ledger_id):
        if ledger_id is None:
            ledger_id = self._node_ledger
        data = formats.encode_cursor_node(
            ledger_id, self.mark_delete_position, self.properties, self._acked,
            self.ml.config.max_unacked_ranges_to_persist, self.ml._now_ms(), self._batch_deleted)
        expected = -1 if self._node_version is None else self._node_version
        d = self.ml.store.put(formats.cursor_path(self.ml.name, self.name), data,
                              expected_version=expected)

        def written(stat):
            self._node_version = stat.version
            self._node_ledger = ledger_id
        return d.addCallback(written)

    def set_properties(self, properties: dict):
        """
        Replace the cursor's properties (Pulsar's cursor properties: a replicated subscription's
        flag) and store them in the cursor node: Deferred firing once they are durable. Fails
        with ManagedLedgerClosedError on a closed or deleted cursor, and with
        ManagedLedgerFencedError when another owner has the node (the cursor is fenced then).
        """
        if self._state in (CursorState.CLOSED, CursorState.DELETED):
            return defer.fail(ManagedLedgerClosedError(f"cursor {self.name} is closed"))
        self.properties = dict(properties)
        # The node keeps naming the ledger it names (None): a switch under way records its new
        # one itself, before or after this write.
        d = self._write_node(None)

        def failed(failure):
            if failure.check(*_NODE_CAS_LOST):
                self._become_fenced([])
                raise ManagedLedgerFencedError(f"cursor {self.name} is fenced")
            return failure
        return d.addErrback(failed)

    def _wait_node_writes(self):
        """Deferred firing once no node write of ours is in flight (so our version is current)."""
        if not self._node_writes:
            return defer.succeed(None)
        d = defer.Deferred()
        self._node_idle.append(d)
        return d

    def _close_ledger_quietly(self, handle):
        """Close a cursor ledger handle with its failure logged, not left in a Deferred nobody waits
        for: a close after a take-over finds the ledger recovered by the new owner (fenced), which
        is expected then, and an unhandled error at garbage collection says nothing useful."""
        def failed(failure):
            log.info("cursor {ml}/{name}: closing ledger {lid}: {err}", ml=self.ml.name,
                     name=self.name, lid=handle.ledger_id, err=failure.getErrorMessage())
        handle.close().addErrback(failed)

    def _delete_ledger_quietly(self, lid):
        self.ml.ledger_client.delete_ledger(lid).addErrback(
            lambda f: log.warn("cursor {name}: could not delete ledger {lid}: {err}",
                               name=self.name, lid=lid, err=f.getErrorMessage()))

    def _is_idle(self):
        return not self._persisting and not self._waiting and self._state is not CursorState.SWITCHING

    def _check_idle(self):
        if self._idle_waiters and self._is_idle():
            waiters, self._idle_waiters = self._idle_waiters, []
            for w in waiters:
                w.callback(None)

    def _wait_idle(self):
        if self._is_idle():
            return defer.succeed(None)
        d = defer.Deferred()
        self._idle_waiters.append(d)
        return d

    # -- lifecycle -------------------------------------------------------------------------

    def _create(self):
        """New cursor: first snapshot into a new cursor ledger, then the node. Deferred."""
        d = self._request_persist()
        return d

    async def _recover(self):
        """Load the state: the node, then the last snapshot of the cursor ledger it names."""
        ml = self.ml
        res = await ml.store.get(formats.cursor_path(ml.name, self.name))
        if res is None:
            raise ManagedLedgerError(f"cursor {self.name} vanished")
        data, stat = res
        self._node_version = stat.version
        ledger_id, md, self.properties, ranges, batch_indexes = formats.decode_cursor_node_full(data)
        self._node_ledger = ledger_id
        md_props = {}
        if ledger_id >= 0:
            self._old_ledger_id = ledger_id
            try:
                handle = await ml.ledger_client.open_ledger(ledger_id, ml.config.password, recovery=True)
            except NoSuchLedgerError:
                log.warn("cursor {ml}/{name}: ledger {lid} is gone, using the node's position",
                         ml=ml.name, name=self.name, lid=ledger_id)
                handle = None
            if handle is not None and handle.last_add_confirmed >= 0:
                lac = handle.last_add_confirmed
                entries = await handle.read_entries(lac, lac)
                md, ranges, md_props, batch_indexes = formats.decode_cursor_snapshot_full(entries[0].data)
        self.mark_delete_position = md
        self.mark_delete_properties = md_props
        self._acked.clear()
        for lid, first, last in ranges:
            if Position(lid, last) > md:
                self._acked.add_range(lid, first, last)
        self._acked.remove_up_to(md)
        self._batch_deleted = {p: bits for p, bits in batch_indexes.items()
                               if p > md and not self._acked.contains(p)}
        self._read_position = Position(md[0], md[1] + 1)
        self._advance_mark_delete()
        # Rewrite the node as is: its version moves on, so a previous owner still holding
        # the cursor fails its next node write instead of overwriting ours.
        await self._write_node(ledger_id)
        self._state = CursorState.NO_LEDGER

    def close(self):
        """Wait for the snapshot in flight, record the position in the node, close the ledger."""
        return defer.Deferred.fromCoroutine(self._close())

    async def _close(self):
        if self._state in (CursorState.CLOSED, CursorState.DELETED):
            return None
        await self._wait_idle()
        ledger = self._ledger
        self._state = CursorState.CLOSED
        if self.ml.is_fenced:
            # Someone else owns the cursor node now: writing it would only fail (or overwrite).
            if ledger is not None:
                self._close_ledger_quietly(ledger)
            return None
        try:
            await self._write_node(ledger.ledger_id if ledger is not None else self._old_ledger_id)
        finally:
            if ledger is not None:
                self._close_ledger_quietly(ledger)
        return None

    async def _delete(self):
        self._state = CursorState.DELETED
        waiters, self._waiting = self._waiting, []
        self._fail_waiting(waiters, ManagedLedgerClosedError(f"cursor {self.name} deleted"))
        await self._wait_node_writes()
        path = formats.cursor_path(self.ml.name, self.name)
        try:
            # Versioned, like every other write of the node: a stale owner must not remove the
            # cursor of the one that took the managed ledger over.
            if self._node_version is None:
                await self.ml.store.delete_recursive(path)     # never written by us
            else:
                await self.ml.store.delete(path, expected_version=self._node_version)
        except NotFoundError:
            pass
        except BadVersionError:
            self.ml._cursor_fenced(self)
            raise ManagedLedgerFencedError(f"cursor {self.name} is owned by someone else") from None
        for lid in {self._ledger.ledger_id if self._ledger is not None else -1, self._old_ledger_id}:
            if lid >= 0:
                self._delete_ledger_quietly(lid)
        if self._ledger is not None:
            self._close_ledger_quietly(self._ledger)
            self._ledger = None


# A cursor node write that fails so is another owner's doing: a newer version (BadVersion), the node
# removed (NotFound), or created by someone else first (AlreadyExists, for a new cursor).
_NODE_CAS_LOST = (BadVersionError, NotFoundError, AlreadyExistsError)

_ids = itertools.count(1)


class NonDurableCursor(ManagedCursorImpl):
    """
    A cursor kept in memory only (readers, Pulsar's NonDurableCursorImpl): acks change its
    state and fire at once; it never holds back trimming, and when ledgers are trimmed under
    it it moves to the first one left.
    """

    durable = False

    def __init__(self, ml, name, mark_delete):
        super().__init__(ml, name or f"non-durable-{next(_ids)}", mark_delete)
        self._state = CursorState.OPEN

    def _request_persist(self):
        return defer.succeed(None)

    def _ledgers_trimmed(self, first_ledger_id):
        floor = Position(first_ledger_id, -1)
        if self.mark_delete_position < floor:
            self.mark_delete_position = floor
            self._acked.remove_up_to(floor)
            if self._batch_deleted:
                self._drop_batch_deleted_up_to(floor)
            if self._read_position <= floor:
                self._read_position = Position(first_ledger_id, 0)

    def close(self):
        self._state = CursorState.CLOSED
        if self.ml._non_durable:
            self.ml._non_durable.discard(self)
        return defer.succeed(None)

    async def _delete(self):
        self.close()
