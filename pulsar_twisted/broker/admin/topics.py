"""
Topics of the admin API (Pulsar's ``PersistentTopicsBase``, topic level): listing, creation and
deletion of topics and partitioned topics, unloading, termination, last message id, compaction.
"""

from twisted.internet import defer

from pulsar_twisted.broker import replication
from pulsar_twisted.broker.admin.base import (
    DOMAINS, AdminArea, message_id_json, namespace_key, position_from, update_or_404)
from pulsar_twisted.broker.admin.errors import (
    BadRequest, Conflict, NotAcceptable, NotAllowed, NotFound, PreconditionFailed)
from pulsar_twisted.broker.ownership import NotOwnedError
from pulsar_twisted.broker.service import TopicBusyError
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import PERSISTENT, TopicName
from pulsar_twisted.metadata.interfaces import AlreadyExistsError
from pulsar_twisted.mledger.interfaces import OffloadAlreadyRunningError
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.resources.checks import check_int

_MODES = {"PERSISTENT": api.CommandGetTopicsOfNamespace.PERSISTENT,
          "NON_PERSISTENT": api.CommandGetTopicsOfNamespace.NON_PERSISTENT,
          "ALL": api.CommandGetTopicsOfNamespace.ALL}


class TopicsAdmin(AdminArea):
    """Topics and partitioned topics."""

    async def namespace_topics(self, tenant: str, ns: str, mode: str = "PERSISTENT") -> list:
        """Topics (and partitions) of a namespace: Pulsar's ``getTopics?mode=``."""
        namespace_key(tenant, ns)
        kind = _MODES.get((mode or "PERSISTENT").upper())
        if kind is None:
            raise BadRequest(f"Invalid mode {mode!r}: PERSISTENT, NON_PERSISTENT or ALL")
        try:
            topics, _, _ = await self.broker.topics_of_namespace(f"{tenant}/{ns}", kind, None)
        except errors.TopicNotFound:
            raise NotFound("Namespace does not exist")
        return topics

    async def list_topics(self, domain: str, tenant: str, ns: str) -> list:
        """Non-partitioned topics and partitions of ``domain`` in a namespace."""
        if domain not in DOMAINS:
            raise NotFound(f"Unknown domain {domain}")
        mode = "PERSISTENT" if domain == PERSISTENT else "NON_PERSISTENT"
        return await self.namespace_topics(tenant, ns, mode)

    async def list_partitioned_topics(self, domain: str, tenant: str, ns: str) -> list:
        if domain not in DOMAINS:
            raise NotFound(f"Unknown domain {domain}")
        if not await self.context.namespaces.exists(namespace_key(tenant, ns)):
            raise NotFound("Namespace does not exist")
        children = await self.context.partitioned.list(tenant, ns, domain)
        return [f"{domain}://{tenant}/{ns}/{c}" for c in children]

    async def create_topic(self, name: TopicName) -> None:
        """Create a non-partitioned topic (409 when it, or a partitioned one, exists)."""
        await self.check_namespace(name)
        await self._check_partition_name(name)
        if await self.topic_exists(name) or await self.broker.partitions_of(name) > 0:
            raise Conflict("This topic already exists")
        if name.persistent:
            # Created through metadata alone (a non-owner must not open the managed ledger);
            # loaded here only on its owner, else on first use there.
            await self.broker.create_topic_storage(name)
            try:
                await self.broker.get_topic(str(name), create=False)
            except NotOwnedError:
                pass
        else:
            # Non-persistent topics exist while loaded; create one even without auto-creation.
            await self.broker.create_non_persistent_topic(name)

    async def _check_partition_name(self, name: TopicName) -> None:
        """Pulsar's validateNonPartitionTopicName: ``<t>-partition-<i>`` is created only as a
        partition of the partitioned topic ``<t>`` within its count (412 otherwise)."""
        if name.partition_index < 0:
            return
        parent = name.partitioned_topic_name
        partitions = await self.broker.partitions_of(name)
        if partitions == 0:
            raise PreconditionFailed(f"There is no partitioned topic created for {parent.local_name}")
        if name.partition_index >= partitions:
            raise PreconditionFailed(
                f"Can't create topic {name.local_name} with \"-partition-\" followed by a number not "
                f"smaller than the {partitions} partitions of partitioned topic {parent.local_name}")

    async def delete_topic(self, name: TopicName, force: bool = False) -> None:
        await self.check_namespace(name)
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            raise Conflict(f"{name} is a partitioned topic: delete it through its /partitions")
        try:
            await self.broker.delete_topic(name, force=force)
        except errors.TopicNotFound:
            raise NotFound("Topic not found")
        except TopicBusyError as e:
            raise PreconditionFailed(str(e))
        if name.partition_index < 0:
            # Its policies go with it (Pulsar's too); a partition's are its partitioned topic's.
            await self.broker.policies.topic_policies.delete(name)

    async def unload_topic(self, name: TopicName) -> None:
        """Close the topic (clients reconnect); the next use loads it again."""
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            for i in range(await self.broker.partitions_of(name)):
                await self.unload_topic(name.partition(i))
            return
        await self.load(name)
        await self.broker.unload_topic(name)

    # ---------------------------------------------------------------- partitioned topics
    async def get_partitioned_metadata(self, name: TopicName, auto_create: bool = False) -> dict:
        await self.check_namespace(name)
        try:
            partitions = await self.broker.partitioned_metadata(str(name), auto_create=auto_create)
        except errors.TopicNotFound:
            raise NotFound("Namespace does not exist")
        return {"partitions": partitions}

    async def create_partitioned_topic(self, name: TopicName, partitions,
                                       local_only: bool = False) -> None:
        """Pulsar's createPartitionedTopic; in a namespace replicated to other clusters it is
        created there too unless ``local_only`` (``createLocalTopicOnly``, which is what this
        broker asks of them)."""
        partitions = check_int(partitions, "partitions")
        if partitions <= 0:
            raise NotAcceptable("Number of partitions should be more than 0")
        if name.partition_index >= 0:
            raise PreconditionFailed("Partitioned topic name must not end with -partition-N")
        await self.check_namespace(name)
        if await self.broker.partitions_of(name) > 0 or await self.topic_exists(name):
            raise Conflict("This topic already exists")
        try:
            await self.broker.create_partitioned_topic(name, partitions)
        except AlreadyExistsError:
            raise Conflict("This topic already exists")
        # Pulsar creates the partitions eagerly, so that they exist without auto-creation.
        await self._create_partitions(name, 0, partitions)
        if not local_only:
            policies = await self.broker.policies.policies_of(name.namespace_name)
            remotes = replication.configured_remotes(policies.replication_clusters,
                                                     self.broker.config.clusterName)
            if remotes:
                # In the background, as Pulsar: the answer does not wait for other clusters.
                defer.Deferred.fromCoroutine(self.broker.replication_clients.create_partitioned_topic(
                    sorted(remotes), name, partitions))

    async def _create_partitions(self, name: TopicName, first: int, end: int) -> None:
        if name.persistent:
            for i in range(first, end):
                await self.broker.create_topic_storage(name.partition(i))

    async def update_partitioned_topic(self, name: TopicName, partitions) -> None:
        partitions = check_int(partitions, "partitions")
        await self.check_namespace(name)
        current = await self.broker.partitions_of(name)
        if current == 0:
            raise NotFound("Partitioned topic does not exist")
        if partitions <= current:
            raise Conflict("Number of new partitions must be greater than existing number of partitions")
        await update_or_404(self.context.partitioned.set_partitions(name, partitions),
                            "Partitioned topic does not exist")
        await self._create_partitions(name, current, partitions)

    async def delete_partitioned_topic(self, name: TopicName, force: bool = False) -> None:
        await self.check_namespace(name)
        partitions = await self.broker.partitions_of(name)
        if partitions == 0:
            raise NotFound("Partitioned topic does not exist")
        if not force:
            for i in range(partitions):
                topic = self.broker.topics.get(str(name.partition(i)))
                if topic is not None and (topic.producers or any(
                        s.consumers for s in topic.subscriptions.values())):
                    raise PreconditionFailed("Topic has active producers/subscriptions")
        for i in range(partitions):
            try:
                await self.delete_topic(name.partition(i), force=True)
            except NotFound:
                pass
        await self.context.partitioned.delete(name)
        await self.broker.policies.topic_policies.delete(name)

    # ---------------------------------------------------------------- topic operations
    async def last_message_id(self, name: TopicName) -> dict:
        topic = await self.load(name)
        ledger_id, entry_id, batch_index = await topic.last_message_id()
        return message_id_json(ledger_id, entry_id, name.partition_index, batch_index)

    async def terminate(self, name: TopicName) -> dict:
        topic = await self.load(name)
        if not name.persistent:
            raise NotAllowed("Termination of a non-persistent topic is not allowed")
        last = await topic.ledger.terminate()
        return message_id_json(last.ledger_id, last.entry_id, name.partition_index)

    async def compact(self, name: TopicName) -> None:
        """Start compacting (Pulsar answers at once; ``compaction_status`` follows the run)."""
        topic = await self.load(name)
        if not name.persistent:
            raise NotAllowed("Compaction is only supported on persistent topics")
        compactor = self.broker.compactor
        if compactor.is_running(topic.name):
            raise Conflict("Compaction already in progress")
        compactor.compact(topic).addErrback(lambda f: None)  # the failure is logged and kept as status

    async def compaction_status(self, name: TopicName) -> dict:
        await self.load(name)
        return self.broker.compactor.status(str(name))

    # ---------------------------------------------------------------- tiered storage
    async def trigger_offload(self, name: TopicName, message_id) -> None:
        """Pulsar's triggerOffload: offload, in the background, the ledgers before ``message_id``
        ({ledgerId, entryId}); 409 while a run is in progress."""
        position = position_from(message_id)
        topic = await self._offloadable(name)
        try:
            # Without an offload driver the run fails at once (Pulsar's "NullLedgerOffloader"),
            # which offload-status then reports; the answer itself is a success, as Pulsar's.
            topic.trigger_offload(position.ledger_id, position.entry_id)
        except OffloadAlreadyRunningError:
            raise Conflict("Offload already running")

    async def offload_status(self, name: TopicName) -> dict:
        """Pulsar's OffloadProcessStatus: status, lastError and firstUnoffloadedMessage (with
        the partition index of the topic name; -1:-1 before any run)."""
        topic = await self._offloadable(name)
        status = topic.offload_status()
        first = status["firstUnoffloadedMessage"]
        return {**status, "firstUnoffloadedMessage": message_id_json(
            first["ledgerId"], first["entryId"], name.partition_index)}

    async def _offloadable(self, name: TopicName):
        """The loaded persistent topic ``name`` (on its owner: a non-owner answers 307)."""
        if not name.persistent:
            raise NotAllowed("Offload is not supported on non-persistent topics")
        return await self.load(name)
