"""
``TopicLoader``: the load of one topic for ``BrokerService.get_topic`` (which makes concurrent
requests for a topic share one load), in Pulsar's order: the namespace exists; in a cluster this
broker owns the topic's bundle; a partitioned topic's own name is refused and a partition past the
count too; without auto-creation the topic must exist; a persistent topic's managed ledger opens
with its namespace's retention; the namespace policies are applied and the deduplication state is
recovered; the bundle is still ours. Then the topic is registered in ``broker.topics``. A failure
after the topic object exists closes what was opened before the error goes to the waiters.

A chain of callbacks, not a generator: a load runs per topic creation, and in a standalone broker
most steps have already fired (issue 14, item 4). Steps whose answer is known already (the
namespace seen to exist, its policies cached, no deduplication state to recover) run without a
Deferred of their own; the same checks are made, in the same order.
"""

from twisted.internet import defer
from twisted.python.failure import Failure

from pulsar_twisted.broker.policies import ledger_config_of
from pulsar_twisted.broker.topic import NonPersistentTopic, PersistentTopic
from pulsar_twisted.common import errors


class TopicLoader:
    """``TopicLoader(broker)``: ``load(name, create)`` is a Deferred of the loaded topic."""

    def __init__(self, broker):
        self.broker = broker

    def load(self, name, create: bool) -> defer.Deferred:
        """Load (or, with ``create`` and auto-creation on, create) the topic ``name`` (a TopicName)."""
        broker = self.broker
        try:
            if broker.ownership is None and broker.known_namespaces.known(name.namespace_name):
                # The namespace's check would pass at once and there is no bundle to own.
                return self._owned(None, name, create)
            d = broker._check_namespace(name.namespace_name)
            if broker.ownership is not None:
                # Nothing of the topic (managed ledger, cursors, dedup state) is opened on a broker
                # that does not own its bundle; the token tells whether it was lost meanwhile.
                d.addCallback(self._check_owned, name)
            return d.addCallback(self._owned, name, create)
        except Exception:
            return defer.fail()

    def _check_owned(self, _, name):
        return self.broker.ownership.check_owned(name)

    def _owned(self, ownership, name, create: bool):
        broker = self.broker
        if name.partition_index < 0:
            d = broker.partitions_of(name).addCallback(self._refuse_partitioned, name)
        else:
            d = broker.check_partition_bounds(name)
        if not create or not broker.config.allowAutoTopicCreation:
            d.addCallback(self._refuse_missing, name)
        if name.persistent:
            d.addCallback(self._open_ledger, name)
        else:
            d.addCallback(lambda _: NonPersistentTopic(broker, name, broker.clock, broker.config))
        return d.addCallback(self._apply_policies, name, ownership)

    @staticmethod
    def _refuse_partitioned(partitions, name):
        if partitions > 0:
            raise errors.NotAllowedError(
                f"{name} is a partitioned topic: use its partitions ({name}-partition-N)")

    def _refuse_missing(self, _, name):
        def exists(found):
            if not found:
                raise errors.TopicNotFound(f"Topic {name} does not exist")
        return self.broker._topic_exists(name).addCallback(exists)

    def _open_ledger(self, _, name):
        broker = self.broker
        factory = broker.ml_factory
        policies = broker.policies.cached(name.namespace_name)
        if policies is not None:
            policies = broker.policies.effective(name, policies)    # the topic's own over them
            d = factory.open(name.managed_ledger_name,
                             ledger_config_of(policies, factory.default_config, factory.offloaders))
        else:
            d = broker.policies.ledger_config(name, factory.default_config)
            d.addCallback(lambda config: factory.open(name.managed_ledger_name, config))
        return d.addCallback(self._persistent_topic, name)

    def _persistent_topic(self, ledger, name):
        broker = self.broker
        return PersistentTopic(broker, name, ledger, broker.clock, broker.config)

    def _apply_policies(self, topic, name, ownership):
        generation = self.broker.policies.generation
        try:
            d = self._policies_applied(topic, name)
            if d is None:
                self._still_owned(None, name, ownership)
        except Exception:
            return self._failed(Failure(), topic, name)
        if d is None:
            # Applied and ready at once: no Deferred for the steps left (as with addCallbacks
            # below, a failure of _ready itself is not _failed's).
            return self._ready(None, topic, generation)
        d.addCallback(self._still_owned, name, ownership)
        return d.addCallbacks(self._ready, self._failed, callbackArgs=(topic, generation),
                              errbackArgs=(topic, name))

    def _policies_applied(self, topic, name):
        """Namespace policies applied before any client sees the topic and, for a persistent
        one, its deduplication state recovered (or the load fails, retriable: never served with
        deduplication silently off). None when done at once (the policies known, no state to
        recover); else a Deferred."""
        policy_service = self.broker.policies
        if not policy_service.apply_cached(topic):
            d = policy_service.topic_loaded(topic)
            if name.persistent:
                d.addCallback(lambda _: topic.wait_ready())
            return d
        if name.persistent and not topic.ready_now():
            return topic.wait_ready()
        return None

    def _still_owned(self, _, name, ownership):
        ownership_service = self.broker.ownership
        if ownership_service is not None and not ownership_service.still_owns(ownership):
            raise errors.ServiceNotReady(f"{name}: this broker lost its bundle while loading it")

    def _ready(self, _, topic, generation):
        broker = self.broker
        if broker.policies.generation != generation:
            # Policies changed while the topic loaded, when no refresh could reach it yet.
            broker.policies.apply_cached(topic)
        broker.topics[topic.name] = topic  # the topic's own name string as the key: one copy per topic
        broker.load_log.add(topic.name)
        if topic.persistent and broker.config.triggerOffloadOnTopicLoad:
            topic.ledger.maybe_offload()
        return topic

    def _failed(self, failure, topic, name):
        log = self.broker.log
        log.warn("Loading topic {topic} failed; closing what was opened", topic=str(name))
        d = defer.maybeDeferred(topic.close).addErrback(
            lambda f: log.failure("closing {topic} after a failed load", f, topic=str(name)))
        return d.addCallback(lambda _: failure)
