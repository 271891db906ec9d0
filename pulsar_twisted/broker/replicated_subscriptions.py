"""
Replicated subscriptions (Pulsar's PIP-33): the mark-delete position of a subscription made with
``replicateSubscriptionState`` follows it to the other clusters a topic replicates to, so that
its consumers can fail over to another cluster and go on near where they were.

Clusters share no clock and no position space, so positions are translated through *snapshots*,
written into the topics themselves as markers (``MessageMetadata.marker_type``: entries for the
brokers, never delivered to a consumer or reader):

1. Every ``replicatedSubscriptionsSnapshotFrequencyMillis``, a topic with replicated
   subscriptions whose replicators are all connected, and which stored data since the last
   snapshot began, writes a *request* marker. The replicators carry it to every other cluster.
2. Another cluster's broker meets the request when its replicator back to the asking cluster
   reads it (in that order: what it replicates from its topic before the request has gone
   first). It writes a *response* naming its topic's last position at that moment, replicated to
   the asking cluster only.
3. The asking cluster meets each response the same way, at a local position P. Once every
   cluster answered (with three clusters or more, twice: a second round catches what the others
   exchanged meanwhile), it writes the *snapshot*: P and each cluster's position, kept here.
   Everything stored in another cluster up to its position was replicated here before P, and
   nothing stored here after P reached the other cluster before its position: once a
   subscription has acknowledged everything up to P here, the other cluster's copy may
   acknowledge everything up to its position. Nothing unacknowledged here is skipped there.
4. A replicated subscription's dispatcher meets snapshots as it reads and keeps the latest few
   (``SnapshotCache``). When its mark-delete position passes one, an *update* marker names the
   subscription and each cluster's position; the other clusters move their subscription of that
   name there (a cumulative acknowledgment), creating it first if it is missing.

Only the mark-delete position crosses, never individual acknowledgments; the other cluster lags
by up to a snapshot's spacing, so a failover may deliver again what was acknowledged here (at
least once). Markers bypass deduplication on the receiving side (their producer name and
sequence id are always ``pulsar.marker`` / 0), count in backlogs, and are acknowledged by each
subscription's dispatcher as it passes them. The wire formats are Pulsar's
(``PulsarMarkers.proto``), so snapshots cross between this broker and Pulsar's.

One difference from Pulsar: a subscription an update creates starts at the update's position;
Pulsar's starts at the end of its topic, which skips there what the other cluster has not
acknowledged yet.
"""

import uuid

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proto import PulsarMarkers_pb2 as pm
from pulsar_twisted.wire.frames import encode_message, split_message

log = Logger()

#: The cursor property that makes a subscription replicated (Pulsar's
#: ``PersistentSubscription.REPLICATED_SUBSCRIPTION_PROPERTY``; a long 1 there).
REPLICATED_PROPERTY = "pulsar.replicated.subscription"
#: Cursor names of the broker's own: replication.NAME_PREFIX and dedup.DEDUP_CURSOR (not
#: imported: both modules import this one).
REPLICATOR_PREFIX = "pulsar.repl."
DEDUP_CURSOR = "pulsar.dedup"
#: Producer name of every marker (Pulsar's ``Markers``).
MARKER_PRODUCER = "pulsar.marker"

REQUEST = pm.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
RESPONSE = pm.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT = pm.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE = pm.REPLICATED_SUBSCRIPTION_UPDATE
#: Markers a replicator carries to the clusters their ``replicate_to`` names (all when empty);
#: other marker types (a snapshot is tagged for its own cluster anyway) stay where written.
CROSSING_MARKERS = frozenset((REQUEST, RESPONSE, UPDATE))


def encode_marker(marker_type: int, body, now_ms: int, replicate_to=()) -> bytes:
    """A marker entry: metadata (producer ``pulsar.marker``, sequence id 0, ``marker_type``, the
    clusters it goes to) and ``body`` (a PulsarMarkers message) as payload."""
    metadata = api.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0,
                                   publish_time=now_ms, marker_type=marker_type)
    metadata.replicate_to.extend(replicate_to)
    return encode_message(metadata, body.SerializeToString())


def _marker_id(position) -> pm.MarkersMessageIdData:
    return pm.MarkersMessageIdData(ledger_id=max(0, position[0]), entry_id=max(0, position[1]))


def parse_snapshot(data: bytes):
    """The ReplicatedSubscriptionsSnapshot of a stored snapshot marker, or None (logged) when
    it does not parse."""
    try:
        _metadata, payload = split_message(data, verify=False)
        return pm.ReplicatedSubscriptionsSnapshot.FromString(payload)
    except Exception as e:
        log.warn("a replicated-subscription snapshot marker does not parse ({error}); ignored",
                 error=e)
        return None


def is_reserved(name: str) -> bool:
    """Whether ``name`` is a cursor of the broker's own (a replicator's, deduplication's), which
    no subscription may take (Pulsar refuses such subscription names)."""
    return name.startswith(REPLICATOR_PREFIX) or name == DEDUP_CURSOR


def is_replicated(properties) -> bool:
    """Whether cursor ``properties`` mark a replicated subscription (the value 1, as Pulsar
    reads it)."""
    value = (properties or {}).get(REPLICATED_PROPERTY)
    return value is not True and value in (1, "1")


class SnapshotStats:
    """The broker's snapshot counters (``pulsar_replicated_subscriptions_*`` on /metrics)."""

    def __init__(self):
        self.pending = 0            # attempts under way (a gauge)
        self.timed_out = 0          # attempts given up after the timeout
        self.completed = 0          # snapshots written
        self.duration_ms_sum = 0.0  # their time from request to snapshot


class SnapshotCache:
    """
    The snapshots a replicated subscription met while reading, oldest first, at most
    ``max_size`` (Pulsar's ReplicatedSubscriptionSnapshotCache). When full, the one whose
    neighbours are closest together goes, never the oldest: the snapshots stay spread over the
    whole backlog, and the one nearest the mark-delete position is kept until it is passed (a
    subscription whose mark-delete moves slowly still finds one; keeping only the newest would
    leave them all ahead of it).
    """

    __slots__ = ("max_size", "_items", "_serial")

    def __init__(self, max_size: int):
        self.max_size = max(3, max_size)
        self._items = []        # (local position, serial, snapshot)
        self._serial = 0

    def __len__(self):
        return len(self._items)

    def add(self, snapshot) -> None:
        """Keep ``snapshot`` (a ReplicatedSubscriptionsSnapshot) unless its local position is not
        after the newest kept (read again after a rewind). One already passed is kept too: the
        subscription's next ``advanced`` hands it on (a consumer that keeps up has acknowledged
        everything up to the answer before the snapshot marker written after it is read)."""
        local = snapshot.local_message_id
        position = Position(local.ledger_id, local.entry_id)
        items = self._items
        if items and position <= items[-1][0]:
            return
        self._serial += 1
        items.append((position, self._serial, snapshot))
        if len(items) > self.max_size:
            if len(items) < 3:
                del items[0]
                return
            # Drop the inner one whose neighbours are closest (by arrival order).
            gaps = [(items[i + 1][1] - items[i - 1][1], i) for i in range(1, len(items) - 1)]
            del items[min(gaps)[1]]

    def advanced(self, mark_delete):
        """The newest snapshot at or before ``mark_delete`` (None if none), dropped with every
        older one."""
        items = self._items
        found = None
        taken = 0
        for position, _serial, snapshot in items:
            if position > mark_delete:
                break
            found = snapshot
            taken += 1
        if taken:
            del items[:taken]
        return found

    def clear(self) -> None:
        del self._items[:]


class _Attempt:
    """One snapshot under way (Pulsar's ReplicatedSubscriptionsSnapshotBuilder)."""

    __slots__ = ("id", "remotes", "missing", "two_rounds", "first_round_done", "writing",
                 "started", "published", "responses", "local")

    def __init__(self, remotes, started: float, published: int):
        self.id = str(uuid.uuid4())
        self.remotes = frozenset(remotes)
        self.missing = set(remotes)
        # With three clusters or more, two rounds: what two other clusters sent each other
        # while the first round ran is in the second's positions.
        self.two_rounds = len(remotes) > 1
        self.first_round_done = False
        self.writing = False
        self.started = started
        self.published = published     # the topic's published count when it began
        self.responses = {}     # cluster -> MarkersMessageIdData (its first answer)
        #: The highest local position of the last round's answers: everything each cluster had
        #: up to its answer is here before it, whatever order the replicators met them in.
        self.local = None


class ReplicatedSubscriptionsController:
    """
    A topic's side of replicated subscriptions (module docstring): it starts snapshots on a
    timer, answers other clusters' requests, completes its own snapshots from the answers, sends
    its subscriptions' updates and applies other clusters'. Made by the topic once it has a
    replicated subscription and replicators, or once another cluster's marker reaches it;
    ``close()`` with the topic.
    """

    def __init__(self, topic, local: str, config, clock, stats: SnapshotStats):
        self.topic = topic
        self.local = local
        self.clock = clock
        self.stats = stats
        self.period = max(0.01, config.replicatedSubscriptionsSnapshotFrequencyMillis / 1000.0)
        self.timeout = max(0.0, float(config.replicatedSubscriptionsSnapshotTimeoutSeconds))
        self.pending = {}               # snapshot id -> _Attempt
        self.last_completed_id = None
        #: When the last snapshot written began, and the topic's published count then: a new
        #: attempt starts only after data was published since.
        self._last_started = None
        self._published_at_last = -1
        self._call = None
        self.closed = False

    def start(self) -> None:
        if self._call is None and not self.closed:
            self._call = self.clock.callLater(0, self._tick)

    def close(self) -> None:
        self.closed = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.stats.pending -= len(self.pending)
        self.pending.clear()

    # ---------------------------------------------------------------- starting snapshots
    def _tick(self) -> None:
        self._call = None
        if self.closed:
            return
        try:
            self._expire()
            self._maybe_start()
        except Exception:
            log.failure("{topic}: replicated subscriptions snapshot", topic=self.topic.name)
        if not self.closed:
            self._call = self.clock.callLater(self.period, self._tick)

    def _expire(self) -> None:
        now = self.clock.seconds()
        for snapshot_id, attempt in list(self.pending.items()):
            if now - attempt.started > self.timeout:
                del self.pending[snapshot_id]
                self.stats.pending -= 1
                self.stats.timed_out += 1
                log.info("{topic}: snapshot {id} timed out waiting for {missing}",
                          topic=self.topic.name, id=snapshot_id, missing=sorted(attempt.missing))

    def _maybe_start(self) -> None:
        topic = self.topic
        if not has_replicated_subscriptions(topic):
            return
        replicators = dict(topic.replicators)
        if not replicators:
            return
        published = topic.counters.msg_in
        if published == self._published_at_last:
            return  # nothing published since the last snapshot began: its positions still hold
        if any(not r.connected() for r in replicators.values()):
            return  # a cluster away would not answer (Pulsar waits for all of them too)
        attempt = _Attempt(replicators, self.clock.seconds(), published)
        self.pending[attempt.id] = attempt
        self.stats.pending += 1
        log.debug("{topic}: snapshot {id} started", topic=topic.name, id=attempt.id)
        self._write(REQUEST, pm.ReplicatedSubscriptionsSnapshotRequest(
            snapshot_id=attempt.id, source_cluster=self.local))

    # ---------------------------------------------------------------- markers from elsewhere
    def received_marker(self, position, marker_type: int, body: bytes) -> None:
        """Another cluster's marker, met at ``position`` of this topic by the replicator back to
        that cluster (so after everything that replicator sends before it)."""
        log.debug("{topic}: marker {type} from another cluster at {position}",
                  topic=self.topic.name, type=marker_type, position=position)
        try:
            if marker_type == REQUEST:
                self._requested(pm.ReplicatedSubscriptionsSnapshotRequest.FromString(body))
            elif marker_type == RESPONSE:
                self._answered(position, pm.ReplicatedSubscriptionsSnapshotResponse.FromString(body))
            elif marker_type == UPDATE:
                self._updated(pm.ReplicatedSubscriptionsUpdate.FromString(body))
        except Exception as e:
            # A marker that does not parse is another broker's bug; it must not stop replication.
            log.warn("{topic}: replicated-subscription marker at {position} ignored ({error})",
                     topic=self.topic.name, position=position, error=e)

    def _requested(self, request) -> None:
        # Our last position now: everything up to it was written before the answer, so our
        # replicator to the asking cluster delivers it there before the answer.
        last = self.topic.ledger.last_confirmed_entry()
        response = pm.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=request.snapshot_id)
        response.cluster.cluster = self.local
        response.cluster.message_id.CopyFrom(_marker_id(last))
        self._write(RESPONSE, response, replicate_to=(request.source_cluster,))

    def _answered(self, position, response) -> None:
        attempt = self.pending.get(response.snapshot_id)
        if attempt is None:
            return  # late (timed out), or a copy of an answer already counted
        cluster = response.cluster.cluster
        if cluster not in attempt.remotes or cluster not in attempt.missing:
            return
        remote = response.cluster.message_id
        first = attempt.responses.get(cluster)
        if first is not None and (remote.ledger_id, remote.entry_id) <= (first.ledger_id,
                                                                         first.entry_id):
            # A copy of the first round's answer (its replicator sent it again): the second
            # round's is taken after our second request reached that cluster, so it is later.
            return
        if first is None:
            # The first round's position stays: the lower one, the safe one to move a
            # subscription there to (Pulsar keeps the first answer too).
            attempt.responses[cluster] = remote
        attempt.missing.discard(cluster)
        if attempt.local is None or position > attempt.local:
            attempt.local = position
        if attempt.missing or attempt.writing:
            return
        if attempt.two_rounds and not attempt.first_round_done:
            attempt.first_round_done = True
            attempt.missing = set(attempt.remotes)
            attempt.local = None
            self._write(REQUEST, pm.ReplicatedSubscriptionsSnapshotRequest(
                snapshot_id=attempt.id, source_cluster=self.local))
            return
        attempt.writing = True
        snapshot = pm.ReplicatedSubscriptionsSnapshot(snapshot_id=attempt.id)
        snapshot.local_message_id.CopyFrom(_marker_id(attempt.local))
        for name in sorted(attempt.responses):
            entry = snapshot.clusters.add()
            entry.cluster = name
            entry.message_id.CopyFrom(attempt.responses[name])
        d = self._store(SNAPSHOT, snapshot, replicate_to=(self.local,))
        d.addCallbacks(self._snapshot_written, self._snapshot_failed,
                       callbackArgs=(attempt,), errbackArgs=(attempt,))

    def _snapshot_written(self, _position, attempt) -> None:
        if self.pending.pop(attempt.id, None) is None:
            return  # timed out (or closed) meanwhile
        self.stats.pending -= 1
        self.stats.completed += 1
        self.stats.duration_ms_sum += (self.clock.seconds() - attempt.started) * 1000.0
        self.last_completed_id = attempt.id
        self._published_at_last = attempt.published

    def _snapshot_failed(self, failure, attempt) -> None:
        # Left to time out; the next attempt begins at the next tick.
        self._write_failed(failure)

    def _updated(self, update) -> None:
        mine = None
        for entry in update.clusters:
            if entry.cluster == self.local:
                mine = entry.message_id
        if mine is None:
            return
        position = Position(mine.ledger_id, mine.entry_id)
        d = apply_update(self.topic, update.subscription_name, position)
        d.addErrback(lambda f: log.warn(
            "{topic}: moving subscription {sub} to {position} from another cluster failed "
            "({error})", topic=self.topic.name, sub=update.subscription_name, position=position,
            error=f.getErrorMessage()))

    # ---------------------------------------------------------------- our subscriptions
    def subscription_advanced(self, name: str, snapshot) -> None:
        """Replicated subscription ``name``'s mark-delete passed ``snapshot``: tell the others."""
        if self.closed:
            return
        update = pm.ReplicatedSubscriptionsUpdate(subscription_name=name)
        for entry in snapshot.clusters:
            update.clusters.add().CopyFrom(entry)
        self._write(UPDATE, update)

    # ---------------------------------------------------------------- writing markers
    def _store(self, marker_type: int, body, replicate_to=()):
        """Store a marker in the topic: Deferred firing with its position."""
        data = encode_marker(marker_type, body, int(self.clock.seconds() * 1000), replicate_to)
        return self.topic.publish(data, 0)

    def _write(self, marker_type: int, body, replicate_to=()) -> None:
        """``_store``, a failure logged at info level and dropped: a lost request or answer only
        lets its snapshot time out, a lost update is superseded by the next (the topic fences
        itself on a write failure, and says so)."""
        self._store(marker_type, body, replicate_to).addErrback(self._write_failed)

    def _write_failed(self, failure) -> None:
        log.info("{topic}: writing a replicated-subscription marker failed ({error})",
                 topic=self.topic.name, error=failure.getErrorMessage())


# -------------------------------------------------------------------- the topic's side
def has_replicated_subscriptions(topic) -> bool:
    return any(getattr(sub, "replicated", False) for sub in topic.subscriptions.values())


def check_controller(topic, forced: bool = False) -> None:
    """Start ``topic``'s ReplicatedSubscriptionsController once it has a replicated subscription
    and replicators (or at once when ``forced``: another cluster's marker came), if the broker
    enables replicated subscriptions; stop it once the topic has no replicators left."""
    controller = topic.replicated_subscriptions
    if controller is not None:
        if not topic.replicators and not forced:
            controller.close()
            topic.replicated_subscriptions = None
        return
    if topic.closed or not topic.config.enableReplicatedSubscriptions:
        return
    if forced or (topic.replicators and has_replicated_subscriptions(topic)):
        log.info("{topic}: replicated subscriptions controller started", topic=topic.name)
        controller = ReplicatedSubscriptionsController(
            topic, topic.config.clusterName, topic.config, topic.clock,
            topic.service.counters.snapshots)
        topic.replicated_subscriptions = controller
        controller.start()


def marker_received(topic, position, marker_type: int, payload: bytes) -> None:
    """Another cluster's marker met on ``topic`` (``Replicator._outgoing``): to the controller,
    started for it if need be (the other cluster asks for answers before this one has a
    replicated subscription of its own)."""
    if topic.replicated_subscriptions is None:
        check_controller(topic, forced=True)
    controller = topic.replicated_subscriptions
    if controller is not None:
        controller.received_marker(position, marker_type, payload)


@defer.inlineCallbacks
def apply_update(topic, name: str, position):
    """Another cluster's replicated subscription ``name`` acknowledged everything up to
    ``position`` of ``topic``: ours moves there, made first (replicated, at that position) if it
    does not exist (module docstring: Pulsar makes it at the end instead)."""
    if is_reserved(name):
        log.warn("{topic}: update of subscription {sub} ignored: a reserved name",
                 topic=topic.name, sub=name)
        return
    last = topic.ledger.last_confirmed_entry()
    if position > last:
        log.warn("{topic}: update of subscription {sub} to {position}, after the last entry "
                 "{last}, ignored", topic=topic.name, sub=name, position=position, last=last)
        return
    subscription = topic.subscriptions.get(name)
    if subscription is None:
        log.info("{topic}: subscription {sub} made at {position} for another cluster's "
                 "replicated subscription", topic=topic.name, sub=name, position=position)
        yield topic.create_subscription(name, topic.ledger.next_position(position),
                                        properties={REPLICATED_PROPERTY: 1})
        return
    yield subscription.move_mark_delete(position)


def refuse_reserved(topic, name: str) -> None:
    """A subscription may not take a cursor of the broker's own (Pulsar's error, its code)."""
    if is_reserved(name):
        log.warn("{topic}: subscription {sub} refused: a reserved name", topic=topic.name, sub=name)
        raise errors.ProducerBusy("Subscription with reserved subscription name attempted")


def check_subscribe(topic, request) -> bool:
    """Refuse a reserved subscription name (``refuse_reserved``); then whether the
    SubscribeRequest ``request`` makes its subscription replicated: asked for on a durable
    subscription, on a broker enabling replicated subscriptions (else logged)."""
    refuse_reserved(topic, request.subscription)
    replicated = request.replicate_subscription_state and request.durable
    if replicated and not topic.config.enableReplicatedSubscriptions:
        log.info("{topic}: subscription {sub} asks for a replicated state, which this broker does "
                 "not enable (enableReplicatedSubscriptions=false)", topic=topic.name,
                 sub=request.subscription)
        return False
    return replicated
