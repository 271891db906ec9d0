"""
``TopicLoader``: the load of one topic for ``BrokerService.get_topic`` (which makes concurrent
requests for a topic share one load), in Pulsar's order: the namespace exists; in a cluster this
broker owns the topic's bundle; a partitioned topic's own name is refused and a partition past the
count too; without auto-creation the topic must exist; a persistent topic's managed ledger opens
with its namespace's retention; the namespace policies are applied and the deduplication state is
recovered; the bundle is still ours. Then the topic is registered in ``broker.topics``. A failure
after the topic object exists closes what was opened before the error goes to the waiters.

A chain of callbacks, not a generator: a load runs per topic creation, and in a standalone broker
most steps have already fired (issue 14, item 4).
"""

from twisted.internet import defer

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
        d = broker.policies.ledger_config(name, broker.ml_factory.default_config)
        d.addCallback(lambda config: broker.ml_factory.open(name.managed_ledger_name, config))
        return d.addCallback(lambda ledger: PersistentTopic(broker, name, ledger, broker.clock, broker.config))

    def _apply_policies(self, topic, name, ownership):
        try:
            # Namespace policies before any client sees the topic.
            d = self.broker.policies.topic_loaded(topic)
        except Exception:
            d = defer.fail()
        if name.persistent:
            # Deduplication state recovered, or the load fails (retriable): never served
            # with deduplication silently off.
            d.addCallback(lambda _: topic.wait_ready())
        d.addCallback(self._still_owned, name, ownership)
        return d.addCallbacks(self._ready, self._failed, callbackArgs=(topic,), errbackArgs=(topic, name))

    def _still_owned(self, _, name, ownership):
        ownership_service = self.broker.ownership
        if ownership_service is not None and not ownership_service.still_owns(ownership):
            raise errors.ServiceNotReady(f"{name}: this broker lost its bundle while loading it")

    def _ready(self, _, topic):
        broker = self.broker
        broker.topics[topic.name] = topic  # the topic's own name string as the key: one copy per topic
        broker.load_log.add(topic.name)
        return topic

    def _failed(self, failure, topic, name):
        log = self.broker.log
        log.warn("Loading topic {topic} failed; closing what was opened", topic=str(name))
        d = defer.maybeDeferred(topic.close).addErrback(
            lambda f: log.failure("closing {topic} after a failed load", f, topic=str(name)))
        return d.addCallback(lambda _: failure)
