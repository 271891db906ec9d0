"""
Geo-replication: the persistent topics of a namespace whose ``replication_clusters`` policy names
other clusters copy every message published here to those clusters, asynchronously, as Pulsar's
``GeoPersistentReplicator`` does.

For each remote cluster a topic has one ``Replicator``:

- its position is a durable cursor of the topic's managed ledger, ``pulsar.repl.<remote>``,
  created at the end of the topic (messages stored before the namespace replicated are not
  copied, as in Pulsar) and kept across unloads, restarts and broker failures: what it has not
  acknowledged is sent again by whichever broker owns the topic next;
- it reads entries through that cursor and publishes each to the same topic on the remote
  cluster, with a producer of our own client named ``pulsar.repl.<local>--><remote>``, on the
  remote cluster's ``brokerServiceUrl`` (``brokerServiceUrlTls`` with ``brokerClientTlsEnabled``)
  from the cluster data stored at ``/admin/clusters/<remote>``; credentials are
  ``brokerClientAuthenticationPlugin`` / ``...Parameters``;
- the entry goes out with its metadata unchanged (producer name, sequence id, publish time,
  properties, batch, compression) but for ``replicated_from`` = the local cluster; it is deleted
  from the cursor once the remote cluster has stored it. Entries already replicated from
  elsewhere (``replicated_from`` set), entries whose ``replicate_to`` leaves the remote out, and
  markers other than the replicated-subscription ones (replicated_subscriptions.py) are deleted
  without being sent;
- a message written with a schema carries this cluster's version of it: the replicator
  registers that schema on the remote topic first (GET_OR_CREATE_SCHEMA, as Java's producer
  does for a message with its own schema) and sends the message with the remote's version,
  pausing its reads meanwhile (Pulsar's replicator fetches the schema the same way).

Delivery is at least once: an entry sent and stored remotely but not yet deleted here when the
broker dies is sent again. The receiving broker deduplicates a replicated message by its
original producer name and sequence id (broker/producer.py), so with deduplication enabled on
the remote namespace each message is stored there once, in order.

Flow control: at most ``replicationProducerQueueSize`` entries are in flight; the replicator
reads again as receipts come back, and waits for the topic's new-entries notification once it
has read everything. A failed send (the remote refused it) closes the producer, rewinds the
cursor to its first unacknowledged entry and starts again after a back-off (0.1 s doubling to
60 s, as Pulsar's replicator).

Non-persistent topics store nothing: their ``NonPersistentReplicator`` sends each message as it is
published while its producer is connected and has room, and drops it otherwise (Pulsar's rule).

``ReplicationClients`` keeps one client per remote cluster for the whole broker. The client
library sits beside the server tree (the layering), so the composition root gives it the
factory that makes them (``daemons/replication_client.py``): a ``pulsar_twisted.client.Client``.
"""

import collections
import time
from urllib.parse import quote

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.broker import replicated_subscriptions as rsubs
from pulsar_twisted.broker import schema as schemas
from pulsar_twisted.broker.cnx import peer_text
from pulsar_twisted.broker.entryinfo import num_messages
from pulsar_twisted.broker.rates import RateMeter
from pulsar_twisted.common.backoff import Backoff
from pulsar_twisted.common.lograte import LogRate
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import FrameError, split_message

log = Logger()

#: Pulsar's ``replicatorPrefix``: cursors ``pulsar.repl.<remote>``, producers
#: ``pulsar.repl.<local>--><remote>``.
NAME_PREFIX = "pulsar.repl."
DELIMITER = "-->"
#: Entries read from the cursor at a time (Pulsar's dispatcherMaxReadBatchSize default).
READ_BATCH = 100


def cursor_name(remote: str) -> str:
    return f"{NAME_PREFIX}{remote}"


def producer_name(local: str, remote: str) -> str:
    return f"{NAME_PREFIX}{local}{DELIMITER}{remote}"


def is_replicator_cursor(name: str) -> bool:
    return name.startswith(NAME_PREFIX)


def remote_of_cursor(name: str) -> str:
    return name[len(NAME_PREFIX):]


def source_cluster(name):
    """The cluster a replication producer's messages come from (``pulsar.repl.<source>-->...``;
    all that follows the prefix when there is no delimiter), or None for any other producer name.
    Pulsar splits the name at dots, which cuts a cluster name with a dot in it; here it is kept
    whole."""
    if not name or not name.startswith(NAME_PREFIX):
        return None
    return name[len(NAME_PREFIX):].partition(DELIMITER)[0]


def configured_remotes(clusters, local: str) -> set:
    """The remote clusters a namespace with ``replication_clusters`` = ``clusters`` replicates
    to from ``local``: none unless ``local`` is one of them."""
    clusters = set(clusters or ())
    if local not in clusters:
        return set()
    return clusters - {local}


class RemoteClusterUnknown(Exception):
    """The remote cluster has no cluster data, or no URL a replicator can use."""


class ReplicationClients:
    """
    One client per remote cluster, for every replicator of the broker (Pulsar's
    ``BrokerService.getReplicationClient``), made by ``client_factory(url)`` (set by the
    composition root; None: this broker cannot replicate, and says so). A cluster whose data
    changes (its URL) gets a new client; ``close()`` closes them all.
    """

    def __init__(self, clusters, config, client_factory=None, remote_admin=None):
        self._clusters = clusters
        self._config = config
        self._clients = {}      # cluster -> (url, client)
        self.client_factory = client_factory
        #: ``put_json(url, body) -> (status, body)`` on other clusters' admin API (daemons).
        self.remote_admin = remote_admin

    def url_of(self, data: dict) -> str:
        if self._config.brokerClientTlsEnabled:
            return data.get("brokerServiceUrlTls") or data.get("serviceUrlTls") or ""
        return data.get("brokerServiceUrl") or data.get("serviceUrl") or ""

    @defer.inlineCallbacks
    def client_for(self, cluster: str):
        data = yield self._clusters.get(cluster)
        if data is None:
            raise RemoteClusterUnknown(f"cluster {cluster} has no cluster data")
        url = self.url_of(data)
        if not url:
            raise RemoteClusterUnknown(f"cluster {cluster} has no "
                                       f"{'TLS ' if self._config.brokerClientTlsEnabled else ''}URL")
        known = self._clients.get(cluster)
        if known is not None and known[0] == url:
            return known[1]
        client = self._make(url)
        self._clients[cluster] = (url, client)
        if known is not None:
            log.info("replication: cluster {cluster} moved to {url}", cluster=cluster, url=url)
            known[1].close().addErrback(lambda f: None)
        return client

    def _make(self, url: str):
        if self.client_factory is None:
            raise RemoteClusterUnknown("this broker was started without a replication client")
        return self.client_factory(url)

    async def create_partitioned_topic(self, clusters, name, partitions: int) -> None:
        """Create the partitioned topic ``name`` on each of ``clusters`` too (Pulsar does it for a
        partitioned topic created in a replicated namespace, through each cluster's admin API with
        ``createLocalTopicOnly``), so that what the partitions' replicators send lands in the
        partitions of a partitioned topic there. A failure is logged, not raised: the remote
        cluster may be away, and the topic can be created there by hand."""
        for cluster in clusters:
            try:
                data = await self._clusters.get(cluster) or {}
                base = (data.get("serviceUrlTls") if self._config.brokerClientTlsEnabled
                        else data.get("serviceUrl")) or ""
                if not base or self.remote_admin is None:
                    raise RemoteClusterUnknown(f"no admin URL for cluster {cluster}")
                url = (f"{base.rstrip('/')}/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/"
                       f"{quote(name.local_name, safe='')}/partitions?createLocalTopicOnly=true")
                status, body = await self.remote_admin.put_json(url, partitions)
            except Exception as e:
                log.warn("replication: creating the partitioned topic {topic} on cluster {cluster} "
                         "failed ({error}); create it there with {n} partitions", topic=str(name),
                         cluster=cluster, error=e, n=partitions)
                continue
            if status == 409:
                log.info("replication: partitioned topic {topic} exists on cluster {cluster} already",
                         topic=str(name), cluster=cluster)
            elif status >= 300:
                log.warn("replication: cluster {cluster} refused the partitioned topic {topic}: "
                         "HTTP {status} {body}", cluster=cluster, topic=str(name), status=status,
                         body=body[:200].decode("utf-8", "replace"))
            else:
                log.info("replication: partitioned topic {topic} created on cluster {cluster}",
                         topic=str(name), cluster=cluster)

    def close(self):
        clients, self._clients = self._clients, {}
        ds = [client.close() for _, client in clients.values()]
        return defer.DeferredList([d for d in ds if d is not None], consumeErrors=True)


# Replicator states
STARTING, RUNNING, CLOSED = "starting", "running", "closed"


class _ReplicatorBase:
    """
    What the replicators of persistent and non-persistent topics share: the producer on the remote
    cluster (made again after a back-off when it cannot be), which messages go, the schema
    versions, the stats. ``start()`` once; ``sample_rates`` each stats period; ``close()`` on
    unload.
    """

    def __init__(self, topic, remote: str, clients, clock, local: str, queue_size: int):
        self.topic = topic
        self.remote = remote
        self.clients = clients
        self.clock = clock
        self.local = local
        self.queue_size = max(1, queue_size)
        self.name = producer_name(local, remote)
        self.state = STARTING
        self.producer = None
        self.backoff = Backoff(0.1, 60.0)
        self._retry_call = None
        self._epoch = 0             # which producer incarnation a send belongs to
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_skipped = 0
        #: Messages that expired (persistent: the namespace's TTL, ttl.py) or were dropped
        #: (non-persistent: no room or no producer) before they were sent.
        self.msg_expired = 0
        self.rates = RateMeter(3)
        self.connected_since = None
        self._failures = LogRate(clock)
        #: Local schema version (bytes) -> the remote topic's version of the same schema.
        self._schema_versions = {}
        self._client = None

    # ---------------------------------------------------------------- lifecycle
    def _connect(self) -> None:
        self._retry_call = None
        if self.state == CLOSED:
            return
        self.state = STARTING
        d = self.clients.client_for(self.remote)
        d.addCallback(self._create_producer)
        d.addCallbacks(self._producer_ready, self._connect_failed)

    def _create_producer(self, client):
        self._client = client
        return client.create_producer(
            self.topic.name, producer_name=self.name, send_timeout_ms=0,
            max_pending_messages=self.queue_size, batching_enabled=False, initial_sequence_id=-1)

    def _producer_ready(self, producer) -> None:
        if self.state == CLOSED:
            producer.close().addErrback(lambda f: None)
            return
        self.producer = producer
        self.state = RUNNING
        self.backoff.reset()
        self.connected_since = self.topic.service.now_iso()
        log.info("{what}: producer {name} connected", what=self.describe(), name=self.name)
        self._ready()

    def _ready(self) -> None:
        """The producer is there (subclasses start sending)."""

    def _connect_failed(self, failure) -> None:
        if self.state == CLOSED:
            return
        delay = self.backoff.next()
        self._warn("{what}: cannot create the remote producer ({error}); retrying in {delay:.1f} s",
                   what=self.describe(), error=failure.getErrorMessage(), delay=delay)
        self._retry_call = self.clock.callLater(delay, self._connect)

    def _drop_producer(self) -> None:
        producer, self.producer = self.producer, None
        self.connected_since = None
        if producer is not None:
            producer.close().addErrback(lambda f: None)

    def close(self):
        """Stop (unload): the producer is closed without waiting."""
        if self.state == CLOSED:
            return defer.succeed(None)
        self.state = CLOSED
        self._epoch += 1
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None
        self._drop_producer()
        return defer.succeed(None)

    def terminate(self):
        """The cluster left the namespace's list."""
        self.close()
        log.info("{what}: removed", what=self.describe())
        return defer.succeed(None)

    # ---------------------------------------------------------------- what is sent
    def _outgoing(self, data: bytes, position=None):
        """``(metadata, payload)`` to send for the stored or published message ``data``, with
        ``replicated_from`` set; None when it is not for the remote cluster; ValueError when
        its metadata cannot be read. A replicated-subscription marker from the remote cluster,
        stored at ``position`` (persistent topics), goes to the topic: this replicator meets it
        after everything it sends back before it (replicated_subscriptions.py)."""
        try:
            raw_metadata, payload = split_message(data, verify=False)
            metadata = api.MessageMetadata.FromString(raw_metadata)
        except (FrameError, Exception) as e:
            raise ValueError(str(e)) from None
        if metadata.HasField("marker_type"):
            crossing = metadata.marker_type in rsubs.CROSSING_MARKERS
            if crossing and position is not None and metadata.replicated_from == self.remote:
                rsubs.marker_received(self.topic, position, metadata.marker_type, payload)
            if not crossing:
                return None
        if (metadata.HasField("replicated_from")
                or (metadata.replicate_to and self.remote not in metadata.replicate_to)):
            return None
        metadata.replicated_from = self.local
        return metadata, payload

    def _remote_schema(self, metadata, epoch) -> bool:
        """Put the remote topic's version of the message's schema in ``metadata``; False (and
        the remote version asked for, ``_schema_known`` then) when it is not known yet."""
        if not metadata.schema_version:
            return True
        remote_version = self._schema_versions.get(metadata.schema_version)
        if remote_version is None:
            self._fetch_schema(metadata.schema_version, epoch)
            return False
        metadata.schema_version = remote_version
        return True

    def _fetch_schema(self, local_version: bytes, epoch) -> None:
        """This cluster's schema of that version, registered on the remote topic."""
        async def fetch():
            stored = await self.topic.service.schema_registry.get(
                self.topic.name, schemas.decode_version(local_version))
            if stored is None:
                raise LookupError(f"schema version {schemas.decode_version(local_version)} "
                                  f"of {self.topic.name} is not stored here")
            return await self._client.get_or_create_schema(self.topic.name, stored.to_proto())

        d = defer.Deferred.fromCoroutine(fetch())
        d.addCallbacks(self._schema_known, self._schema_failed, callbackArgs=(local_version, epoch),
                       errbackArgs=(epoch,))

    def _schema_known(self, remote_version, local_version, epoch) -> None:
        if epoch == self._epoch:
            self._schema_versions[local_version] = remote_version

    def _schema_failed(self, failure, epoch) -> None:
        if epoch == self._epoch and self.state != CLOSED:
            self._warn("{what}: registering a schema on the remote topic failed ({error})",
                       what=self.describe(), error=failure.getErrorMessage())

    def _warn(self, text: str, **fields) -> None:
        """A warning at most once a second per replicator (a remote cluster away for minutes
        would otherwise log every retry), with how many were held back."""
        count = self._failures.due()
        if count is not None:
            log.warn(text + (" ({held} like it since the last line)" if count > 1 else ""),
                     held=count - 1, **fields)

    # ---------------------------------------------------------------- stats
    def describe(self) -> str:
        return f"replicator {self.topic.name} -> {self.remote}"

    def sample_rates(self, period) -> None:
        self.rates.sample(period, self.msg_out, self.bytes_out, self.msg_expired)

    def backlog(self) -> int:
        return 0

    def delay_seconds(self) -> int:
        return 0

    def connected(self) -> bool:
        producer = self.producer
        return producer is not None and self.state == RUNNING and producer.is_connected()

    def stats(self) -> dict:
        """The outbound half of Pulsar's ReplicatorStats for this remote cluster."""
        rate, throughput, expired = self.rates.rates
        producer = self.producer
        cnx = getattr(producer, "cnx", None) if producer is not None else None
        transport = getattr(cnx, "transport", None)
        address = peer_text(transport.getPeer()) if transport is not None else None
        connected = self.connected()
        return {
            "msgRateOut": rate,
            "msgThroughputOut": throughput,
            "msgRateExpired": expired,
            "replicationBacklog": self.backlog(),
            "connected": connected,
            "replicationDelayInSeconds": self.delay_seconds(),
            "outboundConnection": address if connected else None,
            "outboundConnectedSince": self.connected_since if connected else None,
        }


class Replicator(_ReplicatorBase):
    """
    The copy of one persistent topic to one remote cluster through its cursor (module
    docstring). The topic calls ``new_entries()`` when entries were added, and ``terminate()``
    deletes the cursor.
    """

    def __init__(self, topic, remote: str, cursor, clients, clock, local: str, queue_size: int):
        super().__init__(topic, remote, clients, clock, local, queue_size)
        self.cursor = cursor
        self._reading = False
        self._waiting = False       # read everything: the next new_entries reads again
        self._in_flight = 0
        #: Publish times (ms) of the entries in flight, oldest first (replicationDelayInSeconds).
        self._in_flight_times = collections.deque()

    def start(self) -> None:
        log.info("{what}: starting; next entry {position}", what=self.describe(),
                 position=self.cursor.read_position)
        self._connect()

    def _ready(self) -> None:
        self._read_more()

    def _restart(self, reason: str) -> None:
        """Drop the producer and everything in flight; read again from the first entry not yet
        acknowledged, after a back-off."""
        if self.state == CLOSED:
            return
        self._epoch += 1
        self._in_flight = 0
        self._in_flight_times.clear()
        self._reading = False
        self._waiting = False
        self._drop_producer()
        self.cursor.rewind()
        delay = self.backoff.next()
        self._warn("{what}: {reason}; starting again in {delay:.1f} s", what=self.describe(),
                   reason=reason, delay=delay)
        self.state = STARTING
        if self._retry_call is None:
            self._retry_call = self.clock.callLater(delay, self._connect)

    def terminate(self):
        """The cluster left the namespace's list: stop and delete the cursor."""
        super().terminate()
        return self.topic.ledger.delete_cursor(self.cursor.name)

    # ---------------------------------------------------------------- reading
    def new_entries(self) -> None:
        if self._waiting:
            self._waiting = False
            self._read_more()

    def _read_more(self) -> None:
        if self.state != RUNNING or self._reading:
            return
        room = self.queue_size - self._in_flight
        if room <= 0:
            return  # a receipt reads again
        if not self.cursor.has_more_entries():
            self._waiting = True
            return
        self._reading = True
        epoch = self._epoch
        d = self.cursor.read_entries(min(READ_BATCH, room))
        d.addCallbacks(self._entries_read, self._read_failed, callbackArgs=(epoch,),
                       errbackArgs=(epoch,))

    def _entries_read(self, entries, epoch) -> None:
        if epoch != self._epoch:
            return
        for entry in entries:
            if not self._replicate(entry, epoch):
                # Waiting for the remote version of its schema: read again from this entry
                # once it is known (``_schema_known``); still "reading" until then.
                self.cursor.seek(entry.position)
                return
        self._reading = False
        self._read_more()

    def _read_failed(self, failure, epoch) -> None:
        if epoch != self._epoch or self.state == CLOSED:
            return
        self._reading = False
        self._restart(f"reading the topic failed ({failure.getErrorMessage()})")

    def _replicate(self, entry, epoch) -> bool:
        """Send ``entry`` (or skip it); False when it must wait for its schema's remote version."""
        try:
            outgoing = self._outgoing(entry.data, entry.position)
        except ValueError as e:
            # Pulsar deletes an entry it cannot deserialize (it could never be sent).
            self._warn("{what}: entry {position} has unreadable metadata ({error}); skipped",
                       what=self.describe(), position=entry.position, error=e)
            self._skip(entry.position)
            return True
        if outgoing is None:
            self._skip(entry.position)
            return True
        metadata, payload = outgoing
        if not self._remote_schema(metadata, epoch):
            return False
        self._in_flight += 1
        self._in_flight_times.append(metadata.publish_time)
        size = len(payload)
        d = self.producer.send_entry(metadata, payload, num_messages(metadata))
        d.addCallbacks(self._sent, self._send_failed, callbackArgs=(entry.position, size, epoch),
                       errbackArgs=(entry.position, epoch))
        return True

    def _schema_known(self, remote_version, local_version, epoch) -> None:
        if epoch != self._epoch:
            return
        super()._schema_known(remote_version, local_version, epoch)
        self._reading = False
        self._read_more()

    def _schema_failed(self, failure, epoch) -> None:
        if epoch != self._epoch or self.state == CLOSED:
            return
        self._restart(f"registering the schema on the remote topic failed "
                      f"({failure.getErrorMessage()})")

    def _skip(self, position) -> None:
        self.msg_skipped += 1
        self.cursor.delete(position).addErrback(self._delete_failed)

    def _sent(self, _message_id, position, size, epoch) -> None:
        # Stored remotely: acknowledged here even if the producer was replaced meanwhile.
        self.cursor.delete(position).addErrback(self._delete_failed)
        if epoch != self._epoch:
            return
        self._in_flight -= 1
        if self._in_flight_times:
            self._in_flight_times.popleft()
        self.msg_out += 1
        self.bytes_out += size
        self._read_more()

    def _send_failed(self, failure, position, epoch) -> None:
        if epoch != self._epoch or self.state == CLOSED:
            return
        self._restart(f"sending {position} failed ({failure.getErrorMessage()})")

    def _delete_failed(self, failure) -> None:
        if self.state == CLOSED:
            return  # the ledger closed under us: the next owner sends it again
        self._warn("{what}: acknowledging an entry failed ({error})", what=self.describe(),
                   error=failure.getErrorMessage())

    # ---------------------------------------------------------------- stats
    def backlog(self) -> int:
        return self.cursor.number_of_entries_in_backlog()

    def delay_seconds(self) -> int:
        """Age of the oldest entry sent and not yet stored remotely (0 when none)."""
        if not self._in_flight_times:
            return 0
        return max(0, int(time.time() - self._in_flight_times[0] / 1000.0))


class NonPersistentReplicator(_ReplicatorBase):
    """
    The copy of one non-persistent topic to one remote cluster, as Pulsar's
    ``NonPersistentReplicator``: nothing is stored, so each published message is sent at once if
    the producer is connected and has room, and dropped otherwise (counted in msgRateExpired, as
    Pulsar counts its msgDrop there); a message whose schema's remote version is not known yet is
    dropped while it is asked for.
    """

    def __init__(self, topic, remote: str, clients, clock, local: str, queue_size: int):
        super().__init__(topic, remote, clients, clock, local, queue_size)
        self._in_flight = 0

    def start(self) -> None:
        log.info("{what}: starting", what=self.describe())
        self._connect()

    def publish(self, message: bytes) -> None:
        try:
            outgoing = self._outgoing(message)
        except ValueError:
            self.msg_skipped += 1
            return
        if outgoing is None:
            self.msg_skipped += 1
            return
        metadata, payload = outgoing
        if (self.state != RUNNING or not self.connected() or self._in_flight >= self.queue_size
                or not self._remote_schema(metadata, self._epoch)):
            self.msg_expired += num_messages(metadata)
            return
        self._in_flight += 1
        size = len(payload)
        d = self.producer.send_entry(metadata, payload, num_messages(metadata))
        d.addCallbacks(self._sent, self._send_failed, callbackArgs=(size, self._epoch),
                       errbackArgs=(self._epoch,))

    def _sent(self, _message_id, size, epoch) -> None:
        if epoch != self._epoch:
            return
        self._in_flight -= 1
        self.msg_out += 1
        self.bytes_out += size

    def _send_failed(self, failure, epoch) -> None:
        if epoch != self._epoch or self.state == CLOSED:
            return
        self._in_flight -= 1
        self.msg_expired += 1
