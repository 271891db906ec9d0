"""
BrokerService: the broker's decisions, independent of any connection.

It owns the loaded topics (loading each at most once, however many clients ask at the same
time), answers lookups (standalone: this broker owns every topic; in a cluster ``ownership`` decides
by namespace bundle, see ``ownership.py``), keeps the default tenant ``public`` and namespace ``public/default`` present, and
hands out unique producer names.
"""

import datetime

from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from pulsar_twisted.broker import schema
from pulsar_twisted.broker.advertised import advertised_listeners, select_listener
from pulsar_twisted.broker.broker_counters import BrokerCounters, counted_lookup
from pulsar_twisted.broker.ownership import LookupResult
from pulsar_twisted.broker.compaction import Compactor
from pulsar_twisted.broker.known_namespaces import KnownNamespaces
from pulsar_twisted.broker.load_log import LoadLog
from pulsar_twisted.broker.publish_buffer import PublishBuffer
from pulsar_twisted.broker.policies import PolicyService
from pulsar_twisted.broker.topic import NonPersistentTopic
from pulsar_twisted.broker.topic_loader import TopicLoader
from pulsar_twisted.security.broker import BrokerSecurity
from pulsar_twisted.common import errors, patterns
from pulsar_twisted.metadata.interfaces import AlreadyExistsError
from pulsar_twisted.mledger import formats
from pulsar_twisted.common.position import EARLIEST
from pulsar_twisted.common.naming import (
    InvalidTopicNameError, NamespaceName, parse_topic, subscription_name_problem, PERSISTENT,
    NON_PERSISTENT)
from pulsar_twisted.metadata.layout import PRODUCER_NAME_COUNTER
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.broker.replication import ReplicationClients
from pulsar_twisted.resources.clusters import ClusterResources
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.partitioned import PartitionedTopicResources
from pulsar_twisted.resources.policies import bootstrap_policies
from pulsar_twisted.resources.tenants import TenantResources
from pulsar_twisted.wire.frames import crc32c


class TopicBusyError(errors.PulsarError):
    """A topic with producers or consumers that was to be deleted without force."""


_log = Logger()


def filter_by_pattern(config, topics: list, pattern):
    """
    ``(topics, filtered)`` for GET_TOPICS_OF_NAMESPACE, as Pulsar's TopicListService: the pattern
    is matched here only when broker-side evaluation is on and it is at most
    subscriptionPatternMaxLength long (else the client filters the whole list). RE2 matches in
    linear time; a pattern that needs backtracking is left to the client too (it is valid Java),
    one that is no regex at all is refused with NotAllowedError.
    """
    if not pattern:
        return topics, False
    if (not config.enableBrokerSideSubscriptionPatternEvaluation
            or len(pattern) > config.subscriptionPatternMaxLength):
        return topics, False
    try:
        compiled = patterns.compile_topics_pattern(pattern)
    except patterns.UnsupportedPatternError as e:
        _log.info("topics pattern left to the client: {reason}", reason=str(e))
        return topics, False
    except patterns.InvalidPatternError as e:
        raise errors.NotAllowedError(f"Invalid topics pattern: {e}")
    return patterns.filter_topics(topics, compiled), True


def _for_listener(result, broker, topic, listener_name):
    """A lookup's ``result`` with the URLs of the advertised listener ``listener_name`` (the serving
    broker's listeners when the result names them, else ``broker``'s own)."""
    listeners = getattr(result, "listeners", None)
    try:
        listener = select_listener(broker.listeners if listeners is None else listeners, listener_name)
    except errors.ServiceNotReady as e:
        broker.log.warn("failed to look up {topic}: {reason}", topic=topic, reason=str(e))
        raise
    return LookupResult(listener.broker_url, listener.broker_url_tls,
                        redirect=getattr(result, "redirect", False),
                        http_url=getattr(result, "http_url", ""),
                        http_url_tls=getattr(result, "http_url_tls", ""), listeners=listeners,
                        authoritative=getattr(result, "authoritative", True),
                        placed=getattr(result, "placed", False))


class BrokerService(service.Service):
    log = Logger()

    def __init__(self, config, ml_factory, metadata_store, clock, broker_url: str, broker_url_tls: str = ""):
        self.config = config
        self.ml_factory = ml_factory
        self.store = metadata_store
        self.clock = clock
        #: "Loaded topic" lines, one event per burst of loads (load_log.py).
        self.load_log = LoadLog(self.log, clock)
        self.broker_url = broker_url
        self.broker_url_tls = broker_url_tls
        #: This broker's advertised listeners by name (advertised.py; {} when none configured).
        self.listeners = advertised_listeners(config)
        self.topics = {}
        self._loading = {}
        self.connections = set()
        #: Connection and lookup counters for /metrics (broker_counters.py).
        self.counters = BrokerCounters(clock)
        self.producer_name_prefix = None
        self._producer_counter = 0
        #: Bytes received from producers and not yet stored, across every connection.
        self.publish_buffer = PublishBuffer(config.maxMessagePublishBufferSizeInMB * 1024 * 1024,
                                            lambda: self.connections)
        #: Authentication, authorization and connection limits (pulsar_twisted.security).
        self.security = BrokerSecurity(config, clock, metadata_store)
        #: An ``ownership.IOwnership`` (cluster mode); None: this broker serves every topic.
        self.ownership = None
        #: The metadata documents (pulsar_twisted.resources).
        self.clusters = ClusterResources(metadata_store)
        self.tenants = TenantResources(metadata_store)
        self.namespaces = NamespaceResources(metadata_store)
        self.partitioned = PartitionedTopicResources(metadata_store)
        #: Namespaces seen to exist (known_namespaces.py).
        self.known_namespaces = KnownNamespaces(self.namespaces)
        #: Namespace policies of the topics and their periodic checks (policies.py).
        self.policies = PolicyService(self, metadata_store, config, clock)
        #: Schemas of the topics (schema.py), kept in the metadata store.
        self.schema_registry = schema.SchemaRegistry(metadata_store, clock, config)
        #: Topic compaction and the compacted-ledger state of its readers (compaction.py).
        self.compactor = Compactor(self)
        #: Loads one topic for get_topic (topic_loader.py).
        self.loader = TopicLoader(self)
        #: The clients of the remote clusters the topics' replicators publish to (replication.py).
        #: Its client factory comes from the composition root (daemons/replication_client.py).
        self.replication_clients = ReplicationClients(self.clusters, config)

    # ---------------------------------------------------------------- lifecycle
    @defer.inlineCallbacks
    def start(self):
        """Create the default tenant and namespace, and reserve a producer-name prefix."""
        cluster = self.config.clusterName
        yield self.clusters.ensure(cluster, {"serviceUrl": "", "brokerServiceUrl": self.broker_url})
        yield self.tenants.ensure("public", {"adminRoles": [], "allowedClusters": [cluster]})
        yield self.namespaces.ensure("public/default", bootstrap_policies(cluster))
        stat = yield self.store.put(PRODUCER_NAME_COUNTER, b"", sequential=True)
        # The sequence number makes names unique across brokers and restarts (deduplication
        # keys its state on producer names).
        self.producer_name_prefix = f"{cluster}-{int(stat.path.rsplit('-', 1)[1])}"
        self.policies.start()

    #: Seconds between retention checks of the loaded topics (Pulsar's retentionCheckIntervalInSeconds).
    retention_check_interval = 120

    def startService(self):
        super().startService()
        self._retention_loop = task.LoopingCall(self._check_retention)
        self._retention_loop.clock = self.clock
        self._retention_loop.start(self.retention_check_interval, now=False)
        self.policies.startService()

    def _check_retention(self):
        """Time-based retention: consumed ledgers age past the limit without any new ack; offloaded
        ledgers past their deletion lag leave the bookies (in the trim), and an automatic offload
        that failed (or a threshold by age) is tried again."""
        for topic in list(self.topics.values()):
            if topic.persistent:
                topic.ledger.maybe_offload()
                d = defer.maybeDeferred(topic.ledger.trim_consumed_ledgers)
                d.addErrback(lambda f, name=topic.name: self.log.failure(
                    "retention check of {topic} failed", f, topic=name))

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        self.load_log.flush()
        loop = getattr(self, "_retention_loop", None)
        if loop is not None and loop.running:
            loop.stop()
        if self.policies.running:
            self.policies.stopService()
        topics = list(self.topics.values())
        self.topics.clear()
        for topic in topics:
            try:
                yield topic.close()
            except Exception:
                self.log.failure("closing {topic}", topic=topic.name)
        yield self.replication_clients.close()

    def connection_opened(self, cnx) -> None:
        self.connections.add(cnx)
        self.counters.connection_opened()
        self.security.connection_opened(cnx)

    def connection_closed(self, cnx) -> None:
        if cnx in self.connections:
            self.counters.connection_closed()
            self.security.connection_closed(cnx)
        self.connections.discard(cnx)
        self.publish_buffer.forget(cnx)

    def authenticate(self, cnx, connect):
        """The role of a connecting client (None with authentication off); AuthenticationError."""
        return self.security.authenticate(cnx, connect)

    def auth_response(self, cnx, response) -> None:
        """Fresh credentials answering an AUTH_CHALLENGE (the connection closes if they fail)."""
        self.security.auth_response(cnx, response)

    def now_iso(self) -> str:
        return datetime.datetime.fromtimestamp(self.clock.seconds(), datetime.timezone.utc).isoformat()

    # ---------------------------------------------------------------- names and namespaces
    def _parse(self, text):
        try:
            return parse_topic(text)
        except InvalidTopicNameError as e:
            raise errors.InvalidTopicName(str(e))

    def _check_namespace(self, namespace: NamespaceName) -> defer.Deferred:
        return self.known_namespaces.check(namespace)  # TopicNotFound unless it exists

    def partitions_of(self, topic_name) -> defer.Deferred:
        """Deferred partition count of ``topic_name``'s partitioned topic (0: not partitioned)."""
        return self.partitioned.partitions(topic_name)

    def check_partition_bounds(self, name) -> defer.Deferred:
        """
        Refuse ``<topic>-partition-<i>`` when ``<topic>`` is partitioned with at most ``i``
        partitions, as Pulsar's ``BrokerService.getTopic``: NotAllowed "Illegal topic partition
        name ..." for persistent topics, TopicNotFound for non-persistent ones (Pulsar finds no
        topic there). A ``-partition-<i>`` name whose parent is not partitioned is a plain topic.
        A name that is no partition costs no generator (every lookup asks).
        """
        if name.partition_index < 0:
            return defer.succeed(None)
        return self._check_partition_bounds(name)

    @defer.inlineCallbacks
    def _check_partition_bounds(self, name):
        partitions = yield self.partitions_of(name)
        if 0 < partitions <= name.partition_index:
            self.log.warn("refused {topic}: past the {n} partitions of its partitioned topic",
                          topic=str(name), n=partitions)
            if not name.persistent:
                raise errors.TopicNotFound(f"Topic {name} does not exist")
            raise errors.NotAllowedError(
                f"Illegal topic partition name {name} with max allowed {partitions} partitions")

    def create_partitioned_topic(self, topic_name, partitions: int) -> defer.Deferred:
        return self.partitioned.create(topic_name, partitions)

    @defer.inlineCallbacks
    def create_topic_storage(self, topic_name):
        """
        Make a persistent topic exist through metadata alone: its managed ledger's node with an
        empty ledger list (Pulsar creates partitions the same way). Nothing is opened, so any
        broker may do it; the owner opens the managed ledger on first use. No-op if it exists.
        """
        try:
            yield self.store.put(formats.ledger_path(topic_name.managed_ledger_name),
                                 formats.encode_ledger_info([], {}), expected_version=-1)
        except AlreadyExistsError:
            pass

    # ---------------------------------------------------------------- binary-protocol queries
    # Lookup, partitioned metadata and producer creation are chains of callbacks, not generators:
    # every topic creation runs all three, and in the usual case (authorization off, namespace
    # known, standalone) each step has already fired, so the answer is ready before the call
    # returns (issue 14, item 4: a generator and a coroutine per step cost more than the step).
    @counted_lookup  # answers, redirects, failures and latency for /metrics
    def lookup(self, topic: str, cnx=None, listener_name: str = "", authoritative: bool = False):
        """
        ``(broker_url, broker_url_tls)`` of the broker serving ``topic`` (a ``LookupResult`` in a
        cluster). ``cnx``: the asking connection, whose role must be allowed to look the topic
        up. ``listener_name``: answer the serving broker's URLs of that advertised listener
        (ServiceNotReady "the broker do not have <name> listener" when it has none).
        ``authoritative``: the client was redirected here by another broker's placement.
        """
        d = self._lookup(topic, cnx, authoritative)
        if not isinstance(d, defer.Deferred):
            # Answered at once (``counted_lookup`` makes it a Deferred).
            return _for_listener(d, self, topic, listener_name) if listener_name else d
        if listener_name:
            d.addCallback(_for_listener, self, topic, listener_name)
        return d

    def _lookup(self, topic: str, cnx, authoritative=False):
        try:
            name = self._parse(topic)
            self.security.lookup_started()  # TooManyRequests past maxConcurrentLookupRequest
        except Exception:
            return defer.fail()
        if (self.ownership is None and name.partition_index < 0
                and (cnx is None or self.security.allows_unchecked(api.BaseCommand.LOOKUP))
                and self.known_namespaces.known(name.namespace_name)):
            # Every check would pass at once (authorization off, the namespace known, no partition
            # to bound) and the answer is ours: given now, not through a Deferred per check.
            self.security.lookup_finished()
            return (self.broker_url, self.broker_url_tls)
        if cnx is not None:
            d = self.security.check_topic(cnx, topic, "lookup")
            d.addCallback(self._namespace_checked, name)
        else:
            d = self._check_namespace(name.namespace_name)
        # A partition past the count: refused here already, with the error the producer or
        # consumer would get (the official client reports the lookup's error code).
        d.addCallback(self._partition_bounds_checked, name)
        d.addCallback(self._owner_of, name, authoritative)
        return d.addBoth(self.security.lookup_finished)

    def _namespace_checked(self, _, name):
        return self._check_namespace(name.namespace_name)

    def _partition_bounds_checked(self, _, name):
        return self.check_partition_bounds(name)

    def _owner_of(self, _, name, authoritative):
        if self.ownership is not None:
            return self.ownership.lookup(name, authoritative=authoritative)
        return (self.broker_url, self.broker_url_tls)

    def partitioned_metadata(self, topic: str, auto_create: bool = True, cnx=None):
        """``cnx``: the asking connection, whose role must be allowed to look the topic up."""
        try:
            name = self._parse(topic)
        except Exception:
            return defer.fail()
        if ((cnx is None or self.security.allows_unchecked(api.BaseCommand.PARTITIONED_METADATA))
                and self.known_namespaces.known(name.namespace_name)):
            # Authorization and the namespace would pass at once: not a Deferred for each.
            if name.partition_index >= 0:
                return defer.succeed(0)
            d = self.partitions_of(name)
        else:
            d = self.security.authorized(cnx, api.BaseCommand.PARTITIONED_METADATA, topic=topic)
            d.addCallback(self._namespace_checked, name)
            if name.partition_index >= 0:
                # A partition is itself a plain topic: clients ask before using one (readers on a
                # partition, pattern consumers subscribing to the partitions they discovered), and
                # answering the parent's count would make them open "X-partition-1-partition-0".
                return d.addCallback(lambda _: 0)
            d.addCallback(self._partitions_of, name)
        return d.addCallback(self._partitions_or_created, name, auto_create)

    def _partitions_of(self, _, name):
        return self.partitions_of(name)

    def _partitions_or_created(self, partitions, name, auto_create):
        if (partitions == 0 and auto_create and self.config.allowAutoTopicCreation
                and self.config.allowAutoTopicCreationType == "partitioned"):
            return self._auto_create_partitioned(name, partitions)
        return partitions

    @defer.inlineCallbacks
    def _auto_create_partitioned(self, name, partitions):
        """A new topic where auto-created topics are partitioned: its partitioned topic now."""
        if (yield self._topic_exists(name)):
            return partitions
        partitions = self.config.defaultNumPartitions
        try:
            yield self.create_partitioned_topic(name, partitions)
        except Exception:
            partitions = yield self.partitions_of(name)
        return partitions

    @defer.inlineCallbacks
    def _topic_exists(self, name) -> bool:
        if str(name) in self.topics:
            return True
        if name.persistent:
            # Its managed ledger's node, not the list of every managed ledger (100k topics).
            stat = yield self.store.exists(formats.ledger_path(name.managed_ledger_name))
            return stat is not None
        return False

    @defer.inlineCallbacks
    def topics_of_namespace(self, namespace: str, mode: int, pattern, cnx=None):
        """``cnx``: the asking connection, whose role must be allowed to list the namespace."""
        try:
            ns = NamespaceName.parse(namespace)
        except InvalidTopicNameError as e:
            raise errors.InvalidTopicName(str(e))
        yield self.security.authorized(cnx, api.BaseCommand.GET_TOPICS_OF_NAMESPACE, namespace=namespace)
        yield self._check_namespace(ns)
        found = set()
        if mode in (api.CommandGetTopicsOfNamespace.PERSISTENT, api.CommandGetTopicsOfNamespace.ALL):
            prefix = f"{ns.tenant}/{ns.namespace}/{PERSISTENT}/"
            for ml_name in (yield self.ml_factory.list_names()):
                if ml_name.startswith(prefix):
                    found.add(f"{PERSISTENT}://{ns.tenant}/{ns.namespace}/{ml_name[len(prefix):]}")
        for name in self.topics:
            topic_name = parse_topic(name)
            if topic_name.namespace_name != ns:
                continue
            if topic_name.persistent and mode == api.CommandGetTopicsOfNamespace.NON_PERSISTENT:
                continue
            if not topic_name.persistent and mode == api.CommandGetTopicsOfNamespace.PERSISTENT:
                continue
            found.add(name)
        topics, filtered = filter_by_pattern(self.config, sorted(found), pattern)
        digest = "%08x" % crc32c(",".join(topics).encode())
        return topics, filtered, digest

    # ---------------------------------------------------------------- topics
    def get_topic(self, topic: str, create: bool = True):
        """Deferred firing with the loaded topic (loading or creating it once)."""
        try:
            name = self._parse(topic)
        except errors.PulsarError as e:
            return defer.fail(e)
        key = str(name)
        loaded = self.topics.get(key)
        if loaded is not None:
            return defer.succeed(loaded)
        waiters = self._loading.get(key)
        d = defer.Deferred()
        if waiters is not None:
            waiters.append(d)
            return d
        self._loading[key] = [d]
        self.loader.load(name, create).addBoth(self._loaded, key)
        return d

    def _loaded(self, result, key):
        waiters = self._loading.pop(key, [])
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)

    def _is_busy(self, topic) -> bool:
        return bool(topic.producers) or any(s.consumers for s in list(topic.subscriptions.values()))

    @defer.inlineCallbacks
    def delete_topic(self, topic_name, force: bool = False):
        """
        Delete a topic and its stored data. Without ``force`` a topic with producers or consumers
        is refused (TopicBusyError); with it they are disconnected. TopicNotFound if it does not
        exist (a partitioned topic's parent is not a topic: delete its partitions).
        """
        name = self._parse(str(topic_name))
        key = str(name)
        topic = self.topics.get(key)
        if topic is None and not (yield self._topic_exists(name)):
            raise errors.TopicNotFound(f"Topic {name} does not exist")
        if topic is not None:
            if self._is_busy(topic) and not force:
                raise TopicBusyError("Topic has active producers/subscriptions")
            if self.topics.get(key) is topic:
                del self.topics[key]
            self.policies.topic_removed(topic)
            yield topic.close()
        if name.persistent:
            yield self.ml_factory.delete(name.managed_ledger_name)
        self.log.info("Deleted topic {topic}", topic=key)

    @defer.inlineCallbacks
    def create_non_persistent_topic(self, topic_name):
        """Load a non-persistent topic even without auto-creation (they exist while loaded)."""
        name = self._parse(str(topic_name))
        topic = self.topics.get(str(name))
        if topic is None:
            topic = NonPersistentTopic(self, name, self.clock, self.config)
            yield self.policies.topic_loaded(topic)
            topic = self.topics.setdefault(str(name), topic)
        return topic

    @defer.inlineCallbacks
    def unload_topic(self, topic_name):
        """Close a loaded topic (clients reconnect; the next use loads it again). No-op if not loaded."""
        key = str(self._parse(str(topic_name)))
        topic = self.topics.pop(key, None)
        if topic is not None:
            self.policies.topic_removed(topic)
            self.log.info("Unloading topic {topic}", topic=key)
            yield topic.close()

    @defer.inlineCallbacks
    def create_subscription(self, topic_name, subscription: str, position=None):
        """A durable subscription without consumers at ``position`` (None: the end) on an existing
        persistent topic; the existing one if it is there already."""
        if not subscription:
            raise errors.NotAllowedError("Empty subscription name")
        name = self._parse(str(topic_name))
        if not name.persistent:
            raise errors.NotAllowedError("Subscriptions of non-persistent topics exist only with consumers")
        topic = yield self.get_topic(str(name), create=False)
        existing = topic.subscriptions.get(subscription)
        if existing is not None:
            return existing
        result = yield topic.create_subscription(subscription, position)
        return result

    @defer.inlineCallbacks
    def delete_subscription(self, topic, subscription: str, force: bool = False):
        """Delete a subscription of a loaded topic; its consumers are disconnected with ``force``,
        else a subscription with consumers is refused (ConsumerBusy)."""
        sub = topic.subscriptions.get(subscription)
        if sub is None:
            raise errors.SubscriptionNotFound("Subscription not found")
        if sub.consumers and not force:
            raise errors.ConsumerBusy("Subscription has active connected consumers")
        for consumer in list(sub.consumers):
            consumer.close_by_broker()
            sub.remove_consumer(consumer)
        dispatcher = getattr(sub, "dispatcher", None)
        if dispatcher is not None:
            dispatcher.close()
        if topic.subscriptions.get(subscription) is sub:
            yield topic.delete_subscription(sub)

    def unload_topics(self, predicate):
        """Close (unload) every loaded topic whose TopicName satisfies ``predicate``: its clients
        reconnect and look it up again (used when this broker loses a namespace bundle)."""
        for key in [k for k in self.topics if predicate(parse_topic(k))]:
            topic = self.topics.pop(key)
            self.log.info("Unloading topic {topic}", topic=key)
            defer.maybeDeferred(topic.close).addErrback(
                lambda f, key=key: self.log.failure("unloading {topic}", f, topic=key))

    def topic_failed(self, topic, reason: str) -> None:
        """
        ``topic`` cannot go on serving here (its managed ledger was fenced by a new owner, its
        deduplication state could not be recovered): it is closed at once (clients reconnect
        and look it up again) and forgotten, so that the next use loads it afresh.
        """
        key = topic.name
        if self.topics.get(key) is topic:
            del self.topics[key]
            self.policies.topic_removed(topic)
        if topic.closed:
            return
        self.log.warn("Unloading topic {topic}: {reason}", topic=key, reason=reason)
        defer.maybeDeferred(topic.close).addErrback(
            lambda f: self.log.failure("unloading {topic}", f, topic=key))

    def next_producer_name(self) -> str:
        self._producer_counter += 1
        return f"{self.producer_name_prefix}-{self._producer_counter}"

    def create_producer(self, cnx, request):
        """
        Deferred Producer of a ProducerRequest: schema, authorization, topic load, quotas, access
        mode. The schema is decided before the topic loads (Pulsar's order), so an incompatible
        one creates nothing. A chain of callbacks (see ``lookup``): it runs once per producer.
        """
        # Authorization first (Pulsar's ServerCnx order): a refused producer adds no schema.
        if self.security.allows_unchecked(api.BaseCommand.PRODUCER):
            try:
                d = self._producer_schema(None, request)    # the check would pass at once
            except Exception:
                return defer.fail()
        else:
            d = self.security.check_topic(cnx, request.topic, "produce")
            d.addCallback(self._producer_schema, request)
        return d.addCallback(self._producer_topic, cnx, request)

    def _producer_schema(self, _, request):
        return schema.producer_schema_version(self, request)

    def _producer_topic(self, schema_version, cnx, request):
        return self.get_topic(request.topic).addCallback(self._add_producer, cnx, request, schema_version)

    def _add_producer(self, topic, cnx, request, schema_version):
        name = request.producer_name or self.next_producer_name()
        self.policies.check_new_producer(topic)
        initial = request.initial_subscription
        if initial and subscription_name_problem(initial):
            raise errors.NotAllowedError(f"initial_subscription_name: {subscription_name_problem(initial)}")
        if initial and topic.persistent and initial not in topic.subscriptions:
            # Pulsar creates it at the earliest position before the producer exists, so nothing the
            # producer sends can be trimmed before that subscription reads it (used for DLQ topics).
            d = topic.create_subscription(initial, EARLIEST)
            return d.addCallback(lambda _: topic.add_producer(cnx, request, name, schema_version))
        # A Producer, or a Deferred of one (exclusive access modes, deduplication recovery).
        return topic.add_producer(cnx, request, name, schema_version)

    @defer.inlineCallbacks
    def subscribe(self, cnx, request):
        """The Consumer of a SubscribeRequest (authorization, topic load, then the topic's rules)."""
        problem = subscription_name_problem(request.subscription)
        if problem:
            raise errors.NotAllowedError(problem)
        yield self.security.check_topic(cnx, request.topic, "consume")
        topic = yield self.get_topic(request.topic, create=request.force_topic_creation)
        consumer = yield topic.subscribe(cnx, request)
        return consumer

