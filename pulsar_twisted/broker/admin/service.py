"""
AdminService: the logic of Pulsar's admin REST API (v2) and HTTP lookup, over a BrokerService and
its metadata store. The web resources (``pulsar_twisted.web``) only parse requests, call one
method here and serialise what it returns; everything Pulsar decides (what exists, what conflicts,
which defaults a namespace has) is decided by the admin areas this service fronts, one per
resource as Pulsar splits them (``ClustersBase``, ``TenantsBase``, ``NamespacesBase``,
``PersistentTopicsBase``, ``BrokersBase``): clusters, tenants, namespaces, topics, topic-level
policies, subscriptions, stats, permissions and brokers.

Every public method is a coroutine (``async def``) or returns a plain value; failures are
``AdminError`` subclasses (``errors.py``) carrying the HTTP status Pulsar answers with. The
metadata layout is ``metadata/layout.py``'s, the documents ``resources/``'s.
"""

from twisted.application import service
from twisted.internet import task
from twisted.logger import Logger

from pulsar_twisted.broker.admin import base
from pulsar_twisted.broker.admin.base import AdminContext
from pulsar_twisted.broker.admin.brokers import BrokersAdmin
from pulsar_twisted.broker.admin.bundles import BundlesAdmin
from pulsar_twisted.broker.admin.clusters import ClustersAdmin
from pulsar_twisted.broker.admin.namespaces import NamespacesAdmin
from pulsar_twisted.broker.admin.permissions import PermissionsAdmin
from pulsar_twisted.broker.admin.stats import StatsAdmin
from pulsar_twisted.broker.admin.subscriptions import SubscriptionsAdmin
from pulsar_twisted.broker.admin.tenants import TenantsAdmin
from pulsar_twisted.broker.admin.topic_policies import TopicPoliciesAdmin
from pulsar_twisted.broker.admin.topics import TopicsAdmin


class _On:
    """A facade method: the same-named method of the area held in attribute ``area``."""

    def __init__(self, area: str):
        self.area = area
        self.name = None

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return getattr(getattr(obj, self.area), self.name)


class AdminService(service.Service):
    """
    ``AdminService(broker, store, config, clock, web_service_url="", stats_interval=None)``.

    ``broker`` is the BrokerService, ``store`` its IMetadataStore, ``config`` the broker config
    (clusterName, advertisedAddress, webServicePort), ``clock`` an IReactorTime.
    ``web_service_url`` is what lookups advertise as ``httpUrl`` (default
    ``http://<advertisedAddress>:<webServicePort>``). Start it (``startService``) to sample rates
    every ``stats_interval`` seconds (default: the config's ``statsUpdateFrequencyInSecs``).
    """

    log = Logger()

    def __init__(self, broker, store, config, clock, web_service_url: str = "",
                 stats_interval: float = None):
        self.context = AdminContext(broker, store, config, clock, web_service_url)
        self.broker = broker
        self.store = store
        self.config = config
        self.clock = clock
        self.cluster = self.context.cluster
        self.web_service_url = self.context.web_service_url
        if stats_interval is None:
            stats_interval = getattr(config, "statsUpdateFrequencyInSecs", 60)
        self.stats_interval = stats_interval
        self._sampler = None
        # Built in dependency order: each area gets the ones its operations cascade to.
        self.topics = TopicsAdmin(self.context)
        self.topic_policies = TopicPoliciesAdmin(self.context)
        self.subscriptions = SubscriptionsAdmin(self.context)
        self.stats = StatsAdmin(self.context)
        self.namespaces = NamespacesAdmin(self.context, self.topics)
        self.tenants = TenantsAdmin(self.context, self.namespaces)
        self.clusters = ClustersAdmin(self.context)
        self.permissions = PermissionsAdmin(self.context, self.namespaces)
        self.brokers = BrokersAdmin(self.context)
        self.bundles = BundlesAdmin(self.context, getattr(broker, "decisions", None))

    def startService(self):
        super().startService()
        self._sampler = task.LoopingCall(self.stats.sample_rates)
        self._sampler.clock = self.clock
        self._sampler.start(self.stats_interval, now=True)

    def stopService(self):
        super().stopService()
        if self._sampler is not None and self._sampler.running:
            self._sampler.stop()
        self._sampler = None

    @staticmethod
    def topic_name(domain: str, tenant: str, ns: str, topic: str):
        """The TopicName of a REST path (404 unknown domain, 412 invalid names)."""
        return base.topic_name(domain, tenant, ns, topic)

    # clusters
    list_clusters = _On("clusters")
    get_cluster = _On("clusters")
    create_cluster = _On("clusters")
    update_cluster = _On("clusters")
    delete_cluster = _On("clusters")
    # tenants
    list_tenants = _On("tenants")
    get_tenant = _On("tenants")
    create_tenant = _On("tenants")
    update_tenant = _On("tenants")
    delete_tenant = _On("tenants")
    # namespaces and their policies
    list_namespaces = _On("namespaces")
    create_namespace = _On("namespaces")
    get_policies = _On("namespaces")
    delete_namespace = _On("namespaces")
    get_namespace_policy = _On("namespaces")
    set_namespace_policy = _On("namespaces")
    remove_namespace_policy = _On("namespaces")
    get_backlog_quota_map = _On("namespaces")
    set_backlog_quota = _On("namespaces")
    remove_backlog_quota = _On("namespaces")
    get_offload_setting = _On("namespaces")
    set_offload_setting = _On("namespaces")
    get_offload_policies = _On("namespaces")
    set_offload_policies = _On("namespaces")
    remove_offload_policies = _On("namespaces")
    # bundles: unload, split, a topic's bundle, the load manager's decisions
    unload_namespace = _On("bundles")
    unload_bundle = _On("bundles")
    split_bundle = _On("bundles")
    bundle_range = _On("bundles")
    load_decisions = _On("bundles")
    # permissions
    get_permissions = _On("permissions")
    grant_permission = _On("permissions")
    revoke_permission = _On("permissions")
    topic_permissions = _On("permissions")
    grant_topic_permission = _On("permissions")
    revoke_topic_permission = _On("permissions")
    # topics
    namespace_topics = _On("topics")
    list_topics = _On("topics")
    list_partitioned_topics = _On("topics")
    create_topic = _On("topics")
    delete_topic = _On("topics")
    unload_topic = _On("topics")
    get_partitioned_metadata = _On("topics")
    create_partitioned_topic = _On("topics")
    update_partitioned_topic = _On("topics")
    delete_partitioned_topic = _On("topics")
    last_message_id = _On("topics")
    terminate = _On("topics")
    compact = _On("topics")
    compaction_status = _On("topics")
    trigger_offload = _On("topics")
    offload_status = _On("topics")
    # topic-level policies (PIP-39)
    get_topic_policy = _On("topic_policies")
    set_topic_policy = _On("topic_policies")
    remove_topic_policy = _On("topic_policies")
    get_topic_backlog_quota_map = _On("topic_policies")
    set_topic_backlog_quota = _On("topic_policies")
    remove_topic_backlog_quota = _On("topic_policies")
    # subscriptions
    list_subscriptions = _On("subscriptions")
    create_subscription = _On("subscriptions")
    delete_subscription = _On("subscriptions")
    skip_messages = _On("subscriptions")
    skip_all = _On("subscriptions")
    reset_cursor_to_time = _On("subscriptions")
    reset_cursor_to_id = _On("subscriptions")
    expire_messages = _On("subscriptions")
    peek_message = _On("subscriptions")
    set_replicated_subscription_status = _On("subscriptions")
    replicated_subscription_status = _On("subscriptions")
    # stats
    sample_rates = _On("stats")
    topic_stats = _On("stats")
    get_topic_stats = _On("stats")
    get_partitioned_stats = _On("stats")
    get_internal_stats = _On("stats")
    # lookup, brokers, health and metrics
    lookup = _On("brokers")
    broker_id = _On("brokers")
    list_brokers = _On("brokers")
    leader_broker = _On("brokers")
    health_check = _On("brokers")
    topic_metrics = _On("brokers")
