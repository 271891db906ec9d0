"""
The metadata layout: every root path the broker, the bookies and the tools read or write, spelled
once. The paths are Pulsar's and BookKeeper's own (a ZooKeeper tree written by one can be read by
the other's tools), so none of them may change.

Pulsar (configuration and local metadata store):

* ``/admin/clusters/<cluster>``                                  ClusterData JSON
* ``/admin/policies/<tenant>``                                   TenantInfo JSON
* ``/admin/policies/<tenant>/<ns>``                              Policies JSON (``resources.policies``)
* ``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>``   ``{"partitions": N}``
* ``/namespace/<tenant>/<ns>/<bundle range>``                    bundle ownership (ephemeral)
* ``/loadbalance/brokers/<host:webport>``                        live brokers (ephemeral)
* ``/loadbalance/leader``                                        the elected leader (ephemeral)
* ``/loadbalance/bundle-data/<tenant>/<ns>/<bundle range>``      the leader's BundleData JSON
* ``/schemas/<schema id>``                                       schema versions of a topic
* ``/managed-ledgers/<encoded name>``                            managed ledgers and their cursors
* ``/counters/producer-name/broker-<seq>``                       producer-name prefixes
* ``/bookies``                                                   bookie rack placement JSON

Ours (Pulsar keeps topic policies in each namespace's ``__change_events`` system topic):

* ``/admin/topic-policies/<tenant>/<ns>/<domain>/<topic>``       a topic's policies (Policies
  field names), keyed by its partitioned base name

BookKeeper (``bookkeeper shell metaformat``'s tree):

* ``/ledgers/L<id>``, ``/ledgers/idgen/ID-<seq>``, ``/ledgers/INSTANCEID``
* ``/ledgers/available/<bookie>``, ``/ledgers/available/readonly/<bookie>``
* ``/ledgers/underreplication/{auditorelection,ledgers,locks}``
"""

# ---------------------------------------------------------------------------------------- Pulsar
CLUSTERS_ROOT = "/admin/clusters"
POLICIES_ROOT = "/admin/policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"
OWNERSHIP_ROOT = "/namespace"
BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"
BUNDLE_DATA_ROOT = "/loadbalance/bundle-data"
SCHEMAS_ROOT = "/schemas"
MANAGED_LEDGERS_ROOT = "/managed-ledgers"
#: Rack placement of bookies, ``{group: {bookie: {"rack", "hostname"}}}`` (Pulsar's
#: BookieRackAffinityMapping reads the same node).
BOOKIE_RACKS_PATH = "/bookies"
#: A sequential node under it gives each broker start a unique producer-name prefix.
PRODUCER_NAME_COUNTER = "/counters/producer-name/broker-"

# ------------------------------------------------------------------------------------ BookKeeper
LEDGERS_ROOT = "/ledgers"
IDGEN_ROOT = LEDGERS_ROOT + "/idgen"
IDGEN_PREFIX = IDGEN_ROOT + "/ID-"
INSTANCE_ID_PATH = LEDGERS_ROOT + "/INSTANCEID"
AVAILABLE_PATH = LEDGERS_ROOT + "/available"
#: ``<root>/<bookie_id>``: the instance whose directories the bookie serves (its cookie).
COOKIES_ROOT = LEDGERS_ROOT + "/cookies"
READONLY_NAME = "readonly"
READONLY_PATH = AVAILABLE_PATH + "/" + READONLY_NAME
UNDERREPLICATION_ROOT = LEDGERS_ROOT + "/underreplication"
AUDITOR_ELECTION_PATH = UNDERREPLICATION_ROOT + "/auditorelection"
UNDERREPLICATED_PATH = UNDERREPLICATION_ROOT + "/ledgers"
LOCKS_PATH = UNDERREPLICATION_ROOT + "/locks"

#: BookKeeper's layout roots, plus auto-recovery's and the managed ledgers' roots, created by
#: ``pulsar initialize-cluster-metadata`` so that watchers started before the first write see a
#: stable tree.
LOCAL_ROOTS = (LEDGERS_ROOT, AVAILABLE_PATH, READONLY_PATH, IDGEN_ROOT, UNDERREPLICATION_ROOT,
               MANAGED_LEDGERS_ROOT)


# ------------------------------------------------------------------------------------ node paths
def cluster_path(cluster: str) -> str:
    return f"{CLUSTERS_ROOT}/{cluster}"


def tenant_path(tenant: str) -> str:
    return f"{POLICIES_ROOT}/{tenant}"


def namespace_path(namespace) -> str:
    """The Policies node of ``namespace`` (a NamespaceName or ``"tenant/ns"``)."""
    return f"{POLICIES_ROOT}/{namespace}"


def namespace_of_policies_path(path: str):
    """``"tenant/ns"`` when ``path`` is a namespace's Policies node, else None."""
    if not path.startswith(POLICIES_ROOT + "/"):
        return None
    parts = path[len(POLICIES_ROOT) + 1:].split("/")
    return "/".join(parts) if len(parts) == 2 else None


def partitioned_namespace_path(tenant: str, namespace: str, domain: str = "") -> str:
    path = f"{PARTITIONED_ROOT}/{tenant}/{namespace}"
    return f"{path}/{domain}" if domain else path


def partitioned_topic_path(name) -> str:
    """The partitioned-topic metadata node of a TopicName (its partitioned base name)."""
    return f"{PARTITIONED_ROOT}/{name.tenant}/{name.namespace}/{name.domain}/{name.local_name}"


def topic_policies_path(name) -> str:
    """The topic-policies node of a TopicName (of its partitioned base name)."""
    name = name.partitioned_topic_name
    return f"{TOPIC_POLICIES_ROOT}/{name.tenant}/{name.namespace}/{name.domain}/{name.local_name}"


def topic_policies_namespace_path(namespace) -> str:
    return f"{TOPIC_POLICIES_ROOT}/{namespace}"


def topic_of_policies_path(path: str):
    """``("tenant/ns", "domain://tenant/ns/topic")`` when ``path`` is a topic-policies node,
    else None."""
    if not path.startswith(TOPIC_POLICIES_ROOT + "/"):
        return None
    parts = path[len(TOPIC_POLICIES_ROOT) + 1:].split("/")
    if len(parts) != 4:
        return None
    tenant, namespace, domain, topic = parts
    return f"{tenant}/{namespace}", f"{domain}://{tenant}/{namespace}/{topic}"


def ownership_path(namespace: str, range_name: str) -> str:
    return f"{OWNERSHIP_ROOT}/{namespace}/{range_name}"


def broker_path(broker_id: str) -> str:
    return f"{BROKERS_ROOT}/{broker_id}"
