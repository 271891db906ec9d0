"""
What every admin area shares (Pulsar's ``AdminResource``): the context it works on, name checks,
topic names, reading resource documents with the admin API's failures, loading topics and walking
the partitions of a partitioned topic.
"""

from twisted.internet import defer

from pulsar_twisted.broker.admin.errors import BadRequest, Conflict, NotFound, PreconditionFailed
from pulsar_twisted.common.naming import (
    InvalidTopicNameError, NON_PERSISTENT, PERSISTENT, TopicName, is_valid_entity_name, parse_topic)
from pulsar_twisted.common.position import Position
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, NotFoundError
from pulsar_twisted.resources.base import ConcurrentModificationError
from pulsar_twisted.resources.checks import check_int
from pulsar_twisted.resources.clusters import ClusterResources
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.partitioned import PartitionedTopicResources
from pulsar_twisted.resources.tenants import TenantResources

#: Topics walked per reactor turn by the admin work over every topic (broker-stats, the rate
#: sampler): a broker of 100k topics keeps serving its clients meanwhile.
SLICE_TOPICS = 100


def next_turn(clock) -> defer.Deferred:
    """A Deferred fired on the next turn of ``clock``'s reactor (what a long walk awaits between
    slices)."""
    d = defer.Deferred()
    clock.callLater(0, d.callback, None)
    return d


DOMAINS = (PERSISTENT, NON_PERSISTENT)


class AdminContext:
    """
    ``AdminContext(broker, store, config, clock, web_service_url="")``: the BrokerService, its
    IMetadataStore, the broker config (clusterName, advertisedAddress, webServicePort), an
    IReactorTime, and the resource accessors over the store. ``web_service_url`` is what lookups
    advertise as ``httpUrl`` (default ``http://<advertisedAddress>:<webServicePort>``).
    """

    def __init__(self, broker, store, config, clock, web_service_url: str = ""):
        self.broker = broker
        self.store = store
        self.config = config
        self.clock = clock
        self.cluster = config.clusterName
        self.web_service_url = web_service_url or (
            f"http://{config.advertisedAddress}:{config.webServicePort}")
        self.clusters = ClusterResources(store)
        self.tenants = TenantResources(store)
        self.namespaces = NamespaceResources(store)
        self.partitioned = PartitionedTopicResources(store)


# ------------------------------------------------------------------------------------ names
def check_name(kind: str, name: str) -> str:
    """``name`` if valid for ``kind`` (the shared rule of ``common.naming``); 412 otherwise."""
    if not is_valid_entity_name(name):
        shown = repr(name) if len(repr(name)) <= 100 else repr(name)[:100] + "..."
        raise PreconditionFailed(f"{kind} name is not valid: {shown}")
    return name


def namespace_key(tenant: str, ns: str) -> str:
    """``"tenant/ns"`` once both names are valid."""
    check_name("Tenant", tenant)
    check_name("Namespace", ns)
    return f"{tenant}/{ns}"


def topic_name(domain: str, tenant: str, ns: str, topic: str) -> TopicName:
    if domain not in DOMAINS:
        raise NotFound(f"Unknown domain {domain}")
    check_name("Tenant", tenant)
    check_name("Namespace", ns)
    try:
        return parse_topic(f"{domain}://{tenant}/{ns}/{topic}")
    except InvalidTopicNameError:
        # Pulsar's exact 412 text; the rule is the shared one of common.naming.
        raise PreconditionFailed("Topic name is not valid")


def message_id_json(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> dict:
    """A MessageIdImpl as Pulsar's REST API prints it."""
    out = {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": partition}
    if batch_index >= 0:
        out["batchIndex"] = batch_index
    return out


def position_from(message_id) -> Position:
    if not isinstance(message_id, dict):
        raise BadRequest("MessageId must be a JSON object {ledgerId, entryId}")
    ledger_id = check_int(message_id.get("ledgerId"), "ledgerId")
    entry_id = check_int(message_id.get("entryId"), "entryId")
    return Position(ledger_id, entry_id)


# ------------------------------------------------------------------------------------ documents
async def read_or_404(read, missing: str):
    """The document a resource read (Deferred) finds, else NotFound(``missing``)."""
    document = await read
    if document is None:
        raise NotFound(missing)
    return document


async def create_or_409(create, exists: str) -> None:
    """Wait for a resource creation (Deferred): Conflict(``exists``) when it was there."""
    try:
        await create
    except AlreadyExistsError:
        raise Conflict(exists)


async def update_or_404(update, missing: str):
    """Wait for a resource compare-and-set update (Deferred): NotFound(``missing``) when there is
    no document, Conflict when concurrent writers kept winning. Returns the new document."""
    try:
        return await update
    except NotFoundError:
        raise NotFound(missing)
    except ConcurrentModificationError:
        raise Conflict("Concurrent modification")


# ------------------------------------------------------------------------------------ areas
class AdminArea:
    """One part of the admin API over an AdminContext (shared by every area of one service)."""

    def __init__(self, context: AdminContext):
        self.context = context
        self.broker = context.broker
        self.clock = context.clock
        self.cluster = context.cluster

    async def tenant_info(self, tenant: str) -> dict:
        """The TenantInfo of ``tenant`` with both lists present; NotFound if there is none."""
        check_name("Tenant", tenant)
        info = await read_or_404(self.context.tenants.get(tenant), "Tenant does not exist")
        info.setdefault("adminRoles", [])
        info.setdefault("allowedClusters", [])
        return info

    async def check_namespace(self, name: TopicName) -> None:
        if not await self.context.namespaces.exists(name.namespace_name):
            raise NotFound("Namespace does not exist")

    async def topic_exists(self, name: TopicName) -> bool:
        if str(name) in self.broker.topics:
            return True
        if name.persistent:
            return name.managed_ledger_name in await self.broker.ml_factory.list_names()
        return False

    async def load(self, name: TopicName):
        """The loaded topic ``name`` (persistent ones loaded on demand), else NotFound."""
        await self.check_namespace(name)
        if name.partition_index < 0 and await self.broker.partitions_of(name) > 0:
            raise NotFound(f"Topic {name} is a partitioned topic: use its partitions")
        topic = self.broker.topics.get(str(name))
        if topic is not None:
            return topic
        if not await self.topic_exists(name):
            raise NotFound("Topic not found")
        return await self.broker.get_topic(str(name), create=False)

    async def each_partition(self, name: TopicName, call) -> None:
        """Run ``call(topic_name)`` on every partition of a partitioned topic, else on it."""
        partitions = 0 if name.partition_index >= 0 else await self.broker.partitions_of(name)
        if partitions:
            await self.check_namespace(name)
            for i in range(partitions):
                await call(name.partition(i))
        else:
            await call(name)
