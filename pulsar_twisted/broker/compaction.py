"""
Topic compaction (Pulsar's ``TwoPhaseCompactor`` and ``CompactedTopic``).

``Compactor.compact(topic)`` reads the topic as a compacted reader would (the previous compacted
ledger up to the compaction horizon, then the live ledger after it) up to the last entry at the
time it starts, in two passes:

1. for each key (``partition_key``; for a batch, each member's key, decompressing the payload),
   the id ``(position, batch_index)`` of its latest message; a tombstone (empty payload or
   ``null_value``) removes the key; messages without a key are dropped (Pulsar's
   ``topicCompactionRetainNullKey=false``);
2. each entry holding a latest message is written to a NEW ledger (batches keeping only their
   latest members, rebuilt uncompressed when some are dropped).

Then the ``__compaction`` durable cursor is marked deleted up to the horizon with the property
``CompactedTopicLedger`` naming the new ledger, as Pulsar records it: the horizon survives
restarts, and ledgers before it may be trimmed once every subscription is past them. The
previous compacted ledger is deleted only after that is durable.

Compacted-ledger entries are Pulsar's ``RawMessage`` records (``pulsar_twisted.wire.compacted``).

``read_compacted`` subscriptions read through ``CompactedCursor``: compacted-ledger entries at
or after the read position while it is <= the horizon, then the live ledger after the horizon.
"""

import bisect
import enum

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.common import errors
from pulsar_twisted.common.position import Entry, Position
from pulsar_twisted.mledger.interfaces import ManagedLedgerClosedError, ManagedLedgerFencedError
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames
from pulsar_twisted.wire.batch import decode_batch, encode_batch
from pulsar_twisted.wire.compacted import decode_compacted_entry, encode_compacted_entry
from pulsar_twisted.wire.compression import DEFAULT_MAX_UNCOMPRESSED, decompress
from pulsar_twisted.wire.frames import entry_metadata

log = Logger()

COMPACTION_CURSOR = "__compaction"
LEDGER_PROPERTY = "CompactedTopicLedger"
_READ_CHUNK = 100
Sub = api.CommandSubscribe


# ------------------------------------------------------------------------------ entry contents
def max_uncompressed(config) -> int:
    """How large a stored batch may inflate: maxMessageSize plus the frame padding (what a
    client's batch container can hold; larger is a bomb, refused before it is inflated)."""
    return config.maxMessageSize + frames.FRAME_PADDING


def _decompressed_batch(metadata, data: bytes, max_size: int = DEFAULT_MAX_UNCOMPRESSED):
    """The ``(SingleMessageMetadata, payload)`` members of a batch entry."""
    _, payload = frames.split_message(data, verify=False)
    if metadata.compression != api.NONE:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size, max_size)
    return decode_batch(payload, metadata.num_messages_in_batch)


def message_keys(data: bytes, max_size: int = DEFAULT_MAX_UNCOMPRESSED):
    """
    ``[(batch_index, key or None, is_tombstone)]`` of the messages in a stored entry
    (batch_index -1 for a message not in a batch).
    """
    metadata = entry_metadata(data)
    if not metadata.HasField("num_messages_in_batch"):
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        _, payload = frames.split_message(data, verify=False)
        return [(-1, key, metadata.null_value or not payload)]
    out = []
    for i, (single, payload) in enumerate(_decompressed_batch(metadata, data, max_size)):
        key = single.partition_key if single.HasField("partition_key") else None
        out.append((i, key, single.null_value or not payload))
    return out


def retain_members(data: bytes, keep, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> bytes:
    """A batch entry with only the members whose index is in ``keep`` (uncompressed)."""
    metadata = entry_metadata(data)
    members = _decompressed_batch(metadata, data, max_size)
    kept = [m for i, m in enumerate(members) if i in keep]
    payload = encode_batch(kept)
    metadata.num_messages_in_batch = len(kept)
    metadata.compression = api.NONE
    metadata.uncompressed_size = len(payload)
    return frames.encode_message(metadata, payload)


# ------------------------------------------------------------------------------ state
class CompactedLedger:
    """
    The compacted ledger of one topic as readers need it: the horizon, the ledger id, and the
    sorted original positions of its entries (loaded once, on first read).
    """

    def __init__(self, ledger_client, password, horizon, ledger_id):
        self.ledger_client = ledger_client
        self.password = password
        self.horizon = horizon
        self.ledger_id = ledger_id
        self.positions = None
        self._handle = None
        self._loading = None

    def load(self):
        """Deferred firing once ``positions`` is known (reads the whole ledger the first time)."""
        if self.positions is not None:
            return defer.succeed(self)
        if self._loading is None:
            self._loading = defer.Deferred.fromCoroutine(self._load())
        d = defer.Deferred()

        def done(result):
            d.callback(result)
            return result

        self._loading.addBoth(done)
        return d

    async def _load(self):
        handle = await self._open()
        positions = []
        last = handle.last_add_confirmed
        first = 0
        while first <= last:
            upto = min(last, first + _READ_CHUNK - 1)
            for entry in await handle.read_entries(first, upto):
                positions.append(decode_compacted_entry(entry.data)[0])
            first = upto + 1
        self.positions = positions
        return self

    async def _open(self):
        if self._handle is None:
            self._handle = await self.ledger_client.open_ledger(self.ledger_id, self.password,
                                                                recovery=False)
        return self._handle

    def index_from(self, position) -> int:
        return bisect.bisect_left(self.positions, Position(*position))

    async def read(self, index: int, count: int):
        """Entries ``index..index+count-1`` of the compacted ledger, with original positions."""
        handle = await self._open()
        last = min(index + count, len(self.positions)) - 1
        if last < index:
            return []
        out = []
        for entry in await handle.read_entries(index, last):
            position, data = decode_compacted_entry(entry.data)
            out.append(Entry(position, data))
        return out


class CompactedCursor:
    """
    A subscription's cursor seen through the topic's compacted ledger (Pulsar's
    ``CompactedTopicImpl.asyncReadEntriesOrWait``). Everything but reading is the cursor's own.

    ``start`` is where the subscriber logically begins when that is before what the live ledger
    still stores: its compacted messages may sit in ledgers trimmed long ago, so the cursor's
    (normalized) read position alone would skip them.
    """

    def __init__(self, cursor, compactor, topic, start=None):
        self.cursor = cursor
        self.compactor = compactor
        self.topic = topic
        self.start = start

    def __getattr__(self, name):
        return getattr(self.cursor, name)

    def _position(self):
        read = self.cursor.read_position
        if self.start is not None and self.start < read:
            return self.start
        return read

    def has_more_entries(self) -> bool:
        state = self.compactor.state_of(self.topic)
        if state is not None and self._position() <= state.horizon:
            return True
        return self.cursor.has_more_entries()

    def read_entries(self, count: int):
        state = self.compactor.state_of(self.topic)
        if state is None or self._position() > state.horizon:
            self.start = None
            return self.cursor.read_entries(count)
        return defer.Deferred.fromCoroutine(self._read_compacted(state, count))

    async def _read_compacted(self, state, count):
        await state.load()
        cursor = self.cursor
        position = self._position()
        # Below the mark-delete of a cursor that starts before the stored ledgers, entries are
        # not acknowledged: that mark-delete only says the live ledgers begin later.
        below_md_unacked = position < cursor.read_position
        md = cursor.mark_delete_position
        entries = await state.read(state.index_from(position), count)
        self.start = None
        if not entries:
            cursor.seek(state.horizon.next())
            return await cursor.read_entries(count)
        cursor.seek(entries[-1].position.next())
        return [e for e in entries if (below_md_unacked and e.position <= md)
                or not cursor.is_acknowledged(e.position)]

    def rewind(self):
        md = self.cursor.mark_delete_position
        self.cursor.rewind()
        self.start = md.next()


_FROM_START = Position(-1, -1)


def _start_of(subscription, request):
    """Where a compacted subscriber begins (see ``CompactedCursor``), None for the read position."""
    cursor = subscription.cursor
    if not subscription.durable:
        start = request.start_message_id
        if start is not None:
            if start.ledger_id < 0:
                return _FROM_START
            if start.ledger_id >= (1 << 63) - 1:
                return None
            return start
        return _FROM_START if request.initial_position == Sub.Earliest else None
    md = cursor.mark_delete_position
    if md.entry_id < 0 and md.ledger_id <= subscription.topic.ledger.first_position().ledger_id:
        return _FROM_START  # nothing acknowledged yet: a new subscription from the earliest
    return md.next()


def apply_read_compacted(topic, subscription, request) -> None:
    """
    SUBSCRIBE hook: a ``read_compacted`` consumer's subscription reads through the compacted
    ledger (Exclusive and Failover only, as Pulsar allows); a plain one reads the cursor.
    """
    if request.read_compacted and request.sub_type not in (Sub.Exclusive, Sub.Failover):
        raise errors.NotAllowedError("Read compacted only supported on failover or exclusive subscriptions")
    if subscription.consumers:
        return
    wrapped = isinstance(subscription.cursor, CompactedCursor)
    if request.read_compacted and not wrapped:
        subscription.cursor = CompactedCursor(subscription.cursor, topic.service.compactor, topic,
                                              _start_of(subscription, request))
    elif not request.read_compacted and wrapped:
        subscription.cursor = subscription.cursor.cursor
    else:
        return
    if subscription.dispatcher is not None:
        subscription.dispatcher.cursor = subscription.cursor


@defer.inlineCallbacks
def last_message_id(subscription):
    """
    GET_LAST_MESSAGE_ID for a consumer: a compacted reader whose topic has nothing after the
    horizon gets the last message of the compacted ledger (what it can still receive), so that
    ``has_message_available`` turns false once it has read the compacted view.
    """
    topic = subscription.topic
    cursor = getattr(subscription, "cursor", None)
    if isinstance(cursor, CompactedCursor):
        state = topic.service.compactor.state_of(topic)
        if state is not None and topic.ledger.last_confirmed_entry() <= state.horizon:
            yield state.load()
            if not state.positions:
                return (state.horizon.ledger_id, -1, -1)
            [entry] = yield defer.Deferred.fromCoroutine(state.read(len(state.positions) - 1, 1))
            keys = message_keys(entry.data, max_uncompressed(topic.service.config))
            batch_index = len(keys) - 1 if keys and keys[0][0] >= 0 and len(keys) > 1 else -1
            return (entry.position.ledger_id, entry.position.entry_id, batch_index)
    result = yield topic.last_message_id()
    return result


# ------------------------------------------------------------------------------ compactor
class Status(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class Compactor:
    """
    Compacts persistent topics of one broker, one run per topic at a time, and keeps each
    topic's compacted-ledger state for its compacted readers. ``compact`` returns a Deferred
    firing with the horizon; ``status`` answers the admin API.
    """

    def __init__(self, service):
        self.service = service
        self.clock = service.clock
        self.config = service.config
        self._states = {}
        self._status = {}
        self._running = {}
        self._monitor = None

    @property
    def ledger_client(self):
        # Read when used: the broker is built before its managed-ledger factory in some tools.
        return self.service.ml_factory.ledger_client

    # -- state per topic ----------------------------------------------------------------
    def state_of(self, topic):
        """The topic's CompactedLedger, or None when it was never compacted."""
        ml = topic.ledger
        cached = self._states.get(topic.name)
        if cached is not None and cached[0] is ml:
            return cached[1]
        state = None
        cursor = ml.cursors.get(COMPACTION_CURSOR)
        if cursor is not None:
            ledger_id = cursor.mark_delete_properties.get(LEDGER_PROPERTY)
            if ledger_id is not None:
                state = CompactedLedger(self.ledger_client, ml.config.password,
                                        cursor.mark_delete_position, int(ledger_id))
        self._states[topic.name] = (ml, state)
        return state

    def status(self, topic_name: str) -> dict:
        status, error = self._status.get(topic_name, (Status.NOT_RUN, None))
        out = {"status": status.value}
        if error is not None:
            out["lastError"] = error
        return out

    def is_running(self, topic_name: str) -> bool:
        return topic_name in self._running

    # -- running ------------------------------------------------------------------------
    def compact(self, topic):
        """Compact ``topic`` now; fails with NotAllowedError when a run is in progress."""
        if not topic.persistent:
            return defer.fail(errors.NotAllowedError("Compaction is only for persistent topics"))
        if topic.name in self._running:
            return defer.fail(errors.NotAllowedError("Compaction already in progress"))
        self._status[topic.name] = (Status.RUNNING, None)
        d = defer.Deferred.fromCoroutine(self._compact(topic))
        self._running[topic.name] = d
        d.addBoth(self._finished, topic)
        return d

    def _finished(self, result, topic):
        del self._running[topic.name]
        if isinstance(result, Failure):
            if result.check(ManagedLedgerClosedError, ManagedLedgerFencedError):
                # The topic was unloaded or taken over while compacting: an expected interruption
                # (the partial compacted ledger is already deleted); the next trigger starts over.
                log.warn("compaction of {topic} interrupted: {reason}", topic=topic.name,
                         reason=result.getErrorMessage())
            else:
                log.failure("compaction of {topic} failed", result, topic=topic.name)
            self._status[topic.name] = (Status.ERROR, result.getErrorMessage())
        else:
            self._status[topic.name] = (Status.SUCCESS, None)
        return result

    async def _compact(self, topic):
        ml = topic.ledger
        end = ml.last_confirmed_entry()
        cursor = await ml.open_cursor(COMPACTION_CURSOR, "earliest")
        previous = self.state_of(topic)
        log.info("compacting {topic} up to {end}", topic=topic.name, end=end)
        # Pass 1: the latest message id of each key.
        latest = {}
        async for position, data in self._source(ml, previous, end):
            for batch_index, key, tombstone in _keys_or_skip(topic, position, data):
                if key is None:
                    continue
                if tombstone:
                    latest.pop(key, None)
                else:
                    latest[key] = (position, batch_index)
        keep = {}
        for position, batch_index in latest.values():
            keep.setdefault(position, set()).add(batch_index)
        # Pass 2: the entries holding latest values, into a new ledger.
        mlc = ml.config
        handle = await self.ledger_client.create_ledger(
            mlc.ensemble_size, mlc.write_quorum, mlc.ack_quorum, mlc.password,
            custom_metadata={"application": "pulsar", "component": "compactor",
                             "pulsar/managed-ledger": ml.name})
        positions = []
        try:
            async for position, data in self._source(ml, previous, end):
                wanted = keep.get(position)
                if not wanted:
                    continue
                limit = max_uncompressed(self.config)
                if -1 not in wanted and len(wanted) < len(message_keys(data, limit)):
                    data = retain_members(data, wanted, limit)
                await handle.add_entry(encode_compacted_entry(position, data))
                positions.append(position)
            await handle.close()
            horizon = end if end.entry_id >= 0 else cursor.mark_delete_position
            await cursor.mark_delete(horizon, {LEDGER_PROPERTY: handle.ledger_id})
        except Exception:
            await _quietly(self.ledger_client.delete_ledger(handle.ledger_id))
            raise
        state = CompactedLedger(self.ledger_client, mlc.password, cursor.mark_delete_position,
                                handle.ledger_id)
        state.positions = positions
        self._states[topic.name] = (ml, state)
        if previous is not None and previous.ledger_id != handle.ledger_id:
            await _quietly(self.ledger_client.delete_ledger(previous.ledger_id))
        log.info("compacted {topic}: {kept} entries in ledger {lid}, horizon {horizon}",
                 topic=topic.name, kept=len(positions), lid=handle.ledger_id,
                 horizon=cursor.mark_delete_position)
        return cursor.mark_delete_position

    async def _source(self, ml, previous, end):
        """``(position, data)`` as a compacted reader sees the topic, up to ``end``."""
        start = ml.first_position()
        if previous is not None:
            await previous.load()
            index = 0
            while index < len(previous.positions):
                for entry in await previous.read(index, _READ_CHUNK):
                    yield entry.position, entry.data
                index += _READ_CHUNK
            start = max(start, previous.horizon.next())
        position = start
        while position <= end:
            entries = await ml.read_entries(position, _READ_CHUNK)
            if not entries:
                break
            for entry in entries:
                if entry.position > end:
                    return
                yield entry.position, entry.data
            position = entries[-1].position.next()

    # -- threshold monitor --------------------------------------------------------------
    def topic_loaded(self, topic) -> None:
        """A persistent topic was loaded: make sure the threshold monitor runs (when enabled)."""
        if self.config.brokerServiceCompactionThresholdInBytes <= 0:
            return
        if self._monitor is None or not self._monitor.running:
            self._monitor = task.LoopingCall(self.check_thresholds)
            self._monitor.clock = self.clock
            self._monitor.start(self.config.brokerServiceCompactionMonitorIntervalInSeconds, now=False)

    def check_thresholds(self) -> None:
        """Compact every loaded topic whose backlog since its last compaction is over the threshold."""
        topics = [t for t in list(self.service.topics.values()) if t.persistent]
        if not topics:
            # The broker stopped (or unloaded everything): the next topic load restarts us.
            if self._monitor is not None and self._monitor.running:
                self._monitor.stop()
            return
        threshold = self.config.brokerServiceCompactionThresholdInBytes
        for topic in topics:
            if topic.closed or topic.name in self._running:
                continue
            cursor = topic.ledger.cursors.get(COMPACTION_CURSOR)
            backlog = cursor.estimated_backlog_size() if cursor is not None else topic.ledger.total_size()
            if backlog > threshold:
                log.info("{topic}: backlog {backlog} over the compaction threshold", topic=topic.name,
                         backlog=backlog)
                self.compact(topic).addErrback(lambda f: None)  # logged by _finished


def _keys_or_skip(topic, position, data):
    try:
        return message_keys(data, max_uncompressed(topic.service.config))
    except Exception as e:
        log.warn("compaction of {topic}: entry {position} unreadable, skipped: {error}",
                 topic=topic.name, position=position, error=e)
        return []


async def _quietly(d):
    try:
        await d
    except Exception as e:
        log.warn("compaction: deleting a ledger failed: {error}", error=e)
