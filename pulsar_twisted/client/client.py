"""
``Client``: the entry point of the Deferred-based Pulsar client.

It owns the connection pool and the lookup service, hands out producer and consumer ids unique
in the client, and builds ``Producer`` / ``Consumer`` / ``Reader`` objects, one per partition for
partitioned topics (``PartitionedProducer`` routes, ``MultiConsumer`` merges). Every method returns
a Deferred. ``reactor`` defaults to the global one; tests pass a clock-driven fake and a
``connector`` (see ``pool.ConnectionPool``) to run without sockets.
"""

import itertools
import re

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common.naming import InvalidTopicNameError, parse_topic, partition_index_of
from pulsar_twisted.client import errors, multitopic
from pulsar_twisted.client.connection import command
from pulsar_twisted.client.consumer import Consumer, Sub
from pulsar_twisted.client.dlq import DeadLetterHandler, from_policy
from pulsar_twisted.client.http_lookup import HttpLookupService
from pulsar_twisted.client.lookup import LookupService
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.client.partitioned import MultiConsumer, PartitionedProducer
from pulsar_twisted.client.pool import ConnectionPool, ServiceUrl, tls_options
from pulsar_twisted.client.producer import Producer
from pulsar_twisted.client.reader import Reader
from pulsar_twisted.client.routing import JAVA_STRING_HASH, ROUND_ROBIN, MessageRouter
from pulsar_twisted.proto import PulsarApi_pb2 as api

T = api.BaseCommand

_PRODUCER_ROUTING = ("message_routing_mode", "hashing_scheme", "message_router")


def normalize_topic(topic: str) -> str:
    """The full ``persistent://tenant/ns/name`` form (``InvalidTopicName`` when not a topic)."""
    try:
        return str(parse_topic(topic))
    except InvalidTopicNameError as e:
        raise errors.InvalidTopicName(str(e)) from None


class Client:
    """
    A Pulsar client for ``service_url``: ``pulsar://host:port`` or ``pulsar+ssl://host:port``
    (lookups over the binary protocol), ``http://host:8080`` or ``https://host:8443`` (lookups over
    the broker's web service, ``http_lookup``; brokers are then reached over the binary protocol,
    with TLS for ``https``). ``http_agent``: an ``IAgent`` for those lookups (tests).

    ``authentication``: None or an object with ``auth_method_name`` and ``auth_data()``.
    TLS: ``tls_trust_certs_file_path`` (PEM), ``tls_validate_hostname``,
    ``tls_allow_insecure_connection``, as in the official client.
    """

    log = Logger()

    def __init__(self, service_url: str, reactor=None, operation_timeout_seconds: float = 30,
                 connection_timeout_ms: int = 10000, keep_alive_interval_seconds: float = 30,
                 authentication=None, tls_trust_certs_file_path: str = None,
                 tls_allow_insecure_connection: bool = False, tls_validate_hostname: bool = False,
                 listener_name: str = None, connector=None, http_agent=None):
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self.clock = reactor
        self.service_url = ServiceUrl(service_url)
        self.operation_timeout = operation_timeout_seconds
        tls = None
        # AuthenticationTLS: the certificate is read once, here, so a bad file fails the
        # constructor with InvalidConfiguration instead of every connection attempt.
        client_certificate = None
        if callable(getattr(authentication, "client_certificate", None)):
            if not self.service_url.tls:
                self.log.warn("TLS client authentication on {url}: the certificate is only "
                              "presented on pulsar+ssl:// URLs", url=service_url)
            client_certificate = authentication.client_certificate()
        if self.service_url.tls:
            def tls(hostname):
                return tls_options(hostname, tls_trust_certs_file_path, tls_validate_hostname,
                                   tls_allow_insecure_connection, client_certificate)
        self.pool = ConnectionPool(reactor, connect_timeout=connection_timeout_ms / 1000.0,
                                   tls=tls, connector=connector,
                                   operation_timeout=operation_timeout_seconds,
                                   keep_alive_seconds=keep_alive_interval_seconds,
                                   auth=authentication)
        if self.service_url.http:
            self.lookup = HttpLookupService(
                reactor, self.service_url, operation_timeout=operation_timeout_seconds,
                connect_timeout=connection_timeout_ms / 1000.0, tls=tls,
                authentication=authentication, listener_name=listener_name, agent=http_agent)
        else:
            self.lookup = LookupService(self.pool, self.service_url, listener_name=listener_name)
        self._producer_ids = itertools.count()
        self._consumer_ids = itertools.count()
        self._handles = set()
        self.closed = False

    # ------------------------------------------------------------------ plumbing for handles
    def connection_for(self, topic: str) -> defer.Deferred:
        """A ready connection to the broker owning ``topic`` (lookup, then the pool)."""
        if self.closed:
            return defer.fail(errors.AlreadyClosed("client is closed"))
        d = self.lookup.lookup(topic)
        return d.addCallback(lambda addresses: self.pool.get_connection(*addresses))

    def _forget(self, handle) -> None:
        self._handles.discard(handle)

    def _check_open(self):
        if self.closed:
            raise errors.AlreadyClosed("client is closed")

    # ------------------------------------------------------------------ topics
    def get_partitioned_topic_metadata(self, topic: str) -> defer.Deferred:
        """Fires with the number of partitions (0 for a non-partitioned topic)."""
        return self.lookup.partitioned_metadata(normalize_topic(topic))

    @defer.inlineCallbacks
    def get_or_create_schema(self, topic: str, schema: api.Schema):
        """Fires with the schema version (bytes) the broker owning ``topic`` gives ``schema``,
        registering it if new (GET_OR_CREATE_SCHEMA; Java's ``ProducerImpl`` does it for messages
        with a schema of their own, as the geo-replicator sends); fails with the broker's error
        (an incompatible schema: IncompatibleSchema)."""
        self._check_open()
        topic = normalize_topic(topic)
        cnx = yield self.connection_for(topic)
        request_id = cnx.new_request_id()
        answer = yield cnx.send_request(command(T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema",
                                                request_id=request_id, topic=topic, schema=schema),
                                        request_id)
        return answer.getOrCreateSchemaResponse.schema_version

    @defer.inlineCallbacks
    def get_topic_partitions(self, topic: str):
        """Fires with the partition topic names, or ``[topic]`` when it is not partitioned."""
        self._check_open()
        topic = normalize_topic(topic)
        count = yield self.lookup.partitioned_metadata(topic)
        if count <= 0:
            return [topic]
        return [f"{topic}-partition-{i}" for i in range(count)]

    # ------------------------------------------------------------------ producers
    @defer.inlineCallbacks
    def create_producer(self, topic: str, message_routing_mode: str = ROUND_ROBIN,
                        hashing_scheme: str = JAVA_STRING_HASH, message_router=None, **conf):
        """
        Fires with a ready ``Producer`` (or ``PartitionedProducer``). ``conf`` are ``Producer``'s
        keyword arguments (producer_name, send_timeout_ms, batching_enabled, compression_type, ...).
        Routing over partitions: ``message_routing_mode`` (RoundRobinPartition, SinglePartition),
        ``hashing_scheme`` (JavaStringHash, Murmur3_32Hash) and ``message_router(msg, n)``.
        """
        self._check_open()
        topic = normalize_topic(topic)
        partitions = yield self.lookup.partitioned_metadata(topic)
        if partitions <= 0:
            producer = yield self._start_producer(topic, -1, conf)
            return producer
        name = conf.get("producer_name")
        producers = []
        try:
            for i in range(partitions):
                part_conf = dict(conf)
                if name:
                    part_conf["producer_name"] = f"{name}-{i}" if partitions > 1 else name
                producers.append((yield self._start_producer(f"{topic}-partition-{i}", i,
                                                             part_conf)))
        except Exception:
            for producer in producers:
                yield producer.close()
            raise
        router = MessageRouter(message_routing_mode, hashing_scheme, message_router)
        return PartitionedProducer(topic, producers, router)

    def _start_producer(self, topic, partition, conf):
        producer = Producer(self, topic, next(self._producer_ids), partition=partition, **conf)
        self._handles.add(producer)
        d = producer.start()
        d.addErrback(lambda f: (self._forget(producer), f)[1])
        return d

    # ------------------------------------------------------------------ consumers
    @defer.inlineCallbacks
    def subscribe(self, topic, subscription_name: str, consumer_type=Sub.Exclusive,
                  initial_position=Sub.Latest, message_listener=None, dead_letter_policy=None,
                  enable_retry: bool = False, pattern_auto_discovery_period: float = 60,
                  regex_subscription_mode=None, **conf):
        """
        Fires with a subscribed ``Consumer`` (``MultiConsumer`` for partitioned topics or a list
        of topics; ``multitopic.PatternConsumer`` for a compiled regex, re-discovered every
        ``pattern_auto_discovery_period`` seconds). ``conf`` are ``Consumer``'s keyword
        arguments (receiver_queue_size, consumer_name, ack_timeout_ms,
        negative_ack_redelivery_delay_ms, chunking and batch-index-ack settings, ...).
        ``dead_letter_policy`` (``dlq.DeadLetterPolicy``) and ``enable_retry``: see ``dlq``.
        """
        self._check_open()
        if isinstance(topic, re.Pattern):
            consumer = yield self._subscribe_pattern(
                topic, subscription_name, consumer_type, initial_position, message_listener,
                pattern_auto_discovery_period, regex_subscription_mode, conf)
            return consumer
        topics = [topic] if isinstance(topic, str) else list(topic)
        if not topics:
            raise errors.InvalidConfiguration("subscribe needs at least one topic")
        dead_letter = None
        if dead_letter_policy is not None or enable_retry:
            dead_letter = DeadLetterHandler(self, normalize_topic(topics[0]), subscription_name,
                                            from_policy(dead_letter_policy), enable_retry)
            conf["dead_letter"] = dead_letter
            if enable_retry:
                topics.append(dead_letter.retry_topic)
                topic = topics
        targets = []
        for name in topics:
            for index, partition in enumerate((yield self.get_topic_partitions(name))):
                targets.append((partition, index if partition != normalize_topic(name) else -1))
        if len(targets) == 1 and isinstance(topic, str):
            consumer = yield self._start_consumer(targets[0][0], targets[0][1], subscription_name,
                                                  consumer_type, initial_position,
                                                  message_listener, conf)
            if dead_letter is not None:
                dead_letter.owner = consumer
            return consumer
        consumers = []
        try:
            for name, partition in targets:
                consumers.append((yield self._start_consumer(
                    name, partition, subscription_name, consumer_type, initial_position, None,
                    conf)))
        except Exception:
            for consumer in consumers:
                yield consumer.close()
            raise
        label = topic if isinstance(topic, str) else ",".join(topics)
        return MultiConsumer(normalize_topic(label) if isinstance(topic, str) else label,
                             consumers, self.clock, message_listener, subscription_name,
                             dead_letter)

    def _subscribe_pattern(self, pattern, subscription, consumer_type, position, listener,
                           period, mode, conf):
        namespace, full = multitopic.split_pattern(pattern.pattern)
        if full != pattern.pattern:
            pattern = re.compile(full, pattern.flags)

        def subscribe_topic(name):
            partition = partition_index_of(name)
            return self._start_consumer(name, partition, subscription, consumer_type, position,
                                        None, dict(conf))

        consumer = multitopic.PatternConsumer(
            pattern, namespace, multitopic.regex_mode(mode), self.lookup, subscribe_topic,
            self.clock, period, listener, subscription)
        self._handles.add(consumer)
        return consumer.start()

    def _start_consumer(self, topic, partition, subscription, consumer_type, position, listener,
                        conf):
        consumer = Consumer(self, topic, subscription, next(self._consumer_ids), consumer_type,
                            position, message_listener=listener, partition=partition, **conf)
        self._handles.add(consumer)
        d = consumer.start()
        d.addErrback(lambda f: (self._forget(consumer), f)[1])
        return d

    @defer.inlineCallbacks
    def create_reader(self, topic: str, start_message_id: MessageId = MessageId.earliest,
                      start_message_id_inclusive: bool = False, reader_name: str = None,
                      subscription_role_prefix: str = None, receiver_queue_size: int = 1000,
                      **conf):
        """Fires with a ``Reader`` positioned at ``start_message_id`` (earliest/latest/an id)."""
        self._check_open()
        topic = normalize_topic(topic)
        partitions = yield self.lookup.partitioned_metadata(topic)
        if partitions > 0:
            raise errors.NotAllowed("readers on partitioned topics read one partition: "
                                    f"use {topic}-partition-<i>")
        if start_message_id is None:
            start_message_id = MessageId.earliest
        position = Sub.Earliest if start_message_id == MessageId.earliest else Sub.Latest
        consumer = yield self._start_consumer(
            topic, start_message_id.partition, Reader.subscription_name(subscription_role_prefix),
            Sub.Exclusive, position, None,
            dict(conf, durable=False, start_message_id=start_message_id,
                 start_message_id_inclusive=start_message_id_inclusive,
                 consumer_name=reader_name, receiver_queue_size=receiver_queue_size))
        return Reader(consumer)

    # ------------------------------------------------------------------ closing
    @defer.inlineCallbacks
    def close(self):
        """Close every producer and consumer, then the connections."""
        if self.closed:
            return None
        for handle in list(self._handles):
            try:
                yield handle.close()
            except Exception:
                self.log.failure("error closing {handle}", handle=handle)
        self.closed = True
        yield self.lookup.close()
        yield self.pool.close()
        return None
