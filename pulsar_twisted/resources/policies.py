"""
The namespace Policies document: its one model (Pulsar's ``Policies``, stored as JSON with Pulsar's
field names at ``/admin/policies/<tenant>/<ns>``).

Three views of the same document live here, so that their rules cannot drift apart:

* **the stored document** (a dict): ``new_policies`` is what a namespace created through the admin
  API stores (every field Pulsar's ``pulsar-admin namespaces policies`` prints, nulls omitted);
  ``bootstrap_policies`` is the short document the broker writes for ``public/default`` (its unset
  fields follow the broker configuration); ``with_defaults`` is what the admin API answers for
  either; ``to_json``/``from_json`` are the bytes in the metadata store.
* **writes** (admin API): ``NAMESPACE_POLICIES`` names each policy sub-resource, its field and its
  check; ``check_new_namespace`` checks a whole document. Refusals are ``checks.InvalidValue``
  (HTTP 400) or ``checks.OutOfRange`` (HTTP 412).
* **effective values** (enforcement): ``NamespacePolicies.from_json`` resolves a stored document
  against the broker configuration; a field that does not pass the same checks is logged and left
  at the broker default, so one bad field does not disable the others.

Pure values, no Twisted beyond the logger.
"""

import json
from dataclasses import dataclass, field

from twisted.logger import Logger

from pulsar_twisted.config import OFFLOAD_DRIVER_NAMES, READ_PRIORITIES, SUPPORTED_OFFLOAD_DRIVERS
from pulsar_twisted.resources.checks import (
    InvalidValue, OutOfRange, ValueCheckError, check_bool, check_choice, check_int, check_object,
    check_str, check_string_list, minimum, optional_int)

log = Logger()

# ------------------------------------------------------------------------------------ vocabulary
DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
QUOTA_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)

PRODUCER_REQUEST_HOLD = "producer_request_hold"
PRODUCER_EXCEPTION = "producer_exception"
CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
RETENTION_POLICIES = (PRODUCER_REQUEST_HOLD, PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION)

DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
INACTIVE_TOPIC_MODES = (DELETE_WHEN_NO_SUBSCRIPTIONS, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP)

#: Actions a role may be granted on a namespace or a topic (Pulsar's AuthAction).
AUTH_ACTIONS = frozenset({"produce", "consume", "functions", "sources", "sinks", "packages"})
SCHEMA_STRATEGIES = frozenset({"UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD",
                               "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
                               "FULL_TRANSITIVE"})
DEFAULT_NUM_BUNDLES = 4
#: The upper bound of the last bundle (bundles split the 32-bit hash range).
FULL_RANGE_UPPER = 0xFFFFFFFF


# ------------------------------------------------------------------------------------ value types
@dataclass(frozen=True)
class BacklogQuota:
    """One quota: ``limit_size`` bytes or ``limit_time`` seconds (-1: none) and its policy."""

    limit_size: int = -1
    limit_time: int = -1
    policy: str = PRODUCER_REQUEST_HOLD


@dataclass(frozen=True)
class RateLimit:
    """``msgs`` messages and ``bytes`` bytes per ``period`` seconds; <= 0: that dimension unlimited."""

    msgs: int = 0
    bytes: int = 0
    period: float = 1.0

    @property
    def enabled(self) -> bool:
        return self.msgs > 0 or self.bytes > 0


UNLIMITED = RateLimit()


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """Pulsar's InactiveTopicPolicies (deleteWhileInactive, maxInactiveDurationSeconds, mode)."""

    delete_while_inactive: bool = False
    max_inactive_seconds: int = 60
    mode: str = DELETE_WHEN_NO_SUBSCRIPTIONS


@dataclass(frozen=True)
class OffloadPolicies:
    """
    The tiered-storage settings in force for a namespace's topics: the broker configuration,
    overridden field by field by the namespace's ``offload_policies`` (Pulsar's OffloadPoliciesImpl)
    and its older ``offload_threshold`` / ``offload_threshold_in_seconds`` /
    ``offload_deletion_lag_ms`` fields (``offload_policies_of``).
    """

    driver: str = ""                  # "" = no offloader
    bucket: str = ""
    region: str = ""
    endpoint: str = ""
    file_system_uri: str = ""
    threshold_bytes: int = -1         # < 0: no automatic offload by size; 0: every sealed ledger
    threshold_seconds: int = -1       # < 0: none
    deletion_lag_ms: int = 4 * 3600 * 1000   # < 0: never delete from the bookies (PIP-350)
    read_priority: str = "tiered-storage-first"
    max_block_size: int = 64 * 1024 * 1024
    read_buffer_size: int = 1024 * 1024
    #: The namespace's own S3 credentials (s3ManagedLedgerOffloadCredentialId / ...Secret); empty:
    #: boto3's default chain (the broker's environment, ~/.aws), as Pulsar's default provider.
    credential_id: str = ""
    credential_secret: str = field(default="", repr=False)


# ------------------------------------------------------------------------------------ checks
def check_retention(value, what):
    return check_object(value, what, {"retentionTimeInMinutes": minimum(-1),
                                      "retentionSizeInMB": minimum(-1)},
                        required=("retentionTimeInMinutes", "retentionSizeInMB"))


def check_publish_rate(value, what):
    return check_object(value, what, {"publishThrottlingRateInMsg": minimum(-1),
                                      "publishThrottlingRateInByte": minimum(-1)})


def check_dispatch_rate(value, what):
    out = check_object(value, what, {"dispatchThrottlingRateInMsg": minimum(-1),
                                     "dispatchThrottlingRateInByte": minimum(-1),
                                     "relativeToPublishRate": check_bool,
                                     "ratePeriodInSecond": minimum(1)})
    out.setdefault("ratePeriodInSecond", 1)
    out.setdefault("relativeToPublishRate", False)
    return out


def check_schema_strategy(value, what):
    # Pulsar's enum reads case-insensitively here; the stored value is the upper-case name.
    if not isinstance(value, str) or value.upper() not in SCHEMA_STRATEGIES:
        raise InvalidValue(f"{what} must be one of {sorted(SCHEMA_STRATEGIES)}")
    return value.upper()


def check_backlog_quota(value, what):
    out = check_object(value, what, {
        "limitSize": minimum(-1), "limitTime": minimum(-1),
        "policy": lambda v, w: check_choice(v, w, sorted(RETENTION_POLICIES))})
    out.setdefault("limitSize", -1)
    out.setdefault("limitTime", -1)
    out.setdefault("policy", PRODUCER_REQUEST_HOLD)
    return out


def check_inactive_topic_policies(value, what):
    out = check_object(value, what, {
        "inactiveTopicDeleteMode": lambda v, w: check_choice(v, w, INACTIVE_TOPIC_MODES),
        "deleteWhileInactive": check_bool, "maxInactiveDurationSeconds": minimum(0)},
        required=("deleteWhileInactive",))
    out.setdefault("inactiveTopicDeleteMode", INACTIVE_TOPIC_MODES[0])
    out.setdefault("maxInactiveDurationSeconds", 60)
    return out


def check_auth_actions(actions) -> list:
    """The granted actions, sorted and without duplicates (InvalidValue for unknown ones)."""
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InvalidValue("actions must be a JSON list of strings")
    bad = sorted(set(actions) - AUTH_ACTIONS)
    if bad:
        raise InvalidValue(f"Unknown auth actions {bad}: use {sorted(AUTH_ACTIONS)}")
    return sorted(set(actions))


class PolicyField:
    """One namespace policy sub-resource: where it lives in Policies and how its value is checked."""

    def __init__(self, field, check, per_cluster=False, default=None, removable=True):
        self.field = field
        self.check = check
        self.per_cluster = per_cluster   # stored as {cluster: value} (Pulsar's rate maps)
        self.default = default           # what GET answers when unset (None: 204 No Content)
        self.removable = removable


#: Namespace policy sub-resources by their URL name (``/admin/v2/namespaces/t/ns/<name>``).
NAMESPACE_POLICIES = {
    "retention": PolicyField("retention_policies", check_retention),
    "messageTTL": PolicyField("message_ttl_in_seconds", minimum(0)),
    "deduplication": PolicyField("deduplicationEnabled", check_bool),
    "replication": PolicyField("replication_clusters", check_string_list, removable=False),
    "maxProducersPerTopic": PolicyField("max_producers_per_topic", minimum(0)),
    "maxConsumersPerTopic": PolicyField("max_consumers_per_topic", minimum(0)),
    "maxConsumersPerSubscription": PolicyField("max_consumers_per_subscription", minimum(0)),
    "subscriptionExpirationTime": PolicyField("subscription_expiration_time_minutes", minimum(0)),
    "inactiveTopicPolicies": PolicyField("inactive_topic_policies", check_inactive_topic_policies),
    "schemaCompatibilityStrategy": PolicyField("schema_compatibility_strategy", check_schema_strategy,
                                               default="UNDEFINED"),
    "publishRate": PolicyField("publishMaxMessageRate", check_publish_rate, per_cluster=True),
    "dispatchRate": PolicyField("topicDispatchRate", check_dispatch_rate, per_cluster=True),
    "subscriptionDispatchRate": PolicyField("subscriptionDispatchRate", check_dispatch_rate,
                                            per_cluster=True),
}


# ------------------------------------------------------------------------------------ offload policies
#: The Policies fields that hold offload settings: Pulsar's OffloadPoliciesImpl object, and the
#: three fields it replaced (still read, and folded into the object on every offload write).
OFFLOAD_POLICIES = "offload_policies"
OLD_OFFLOAD_THRESHOLD = "offload_threshold"
OLD_OFFLOAD_THRESHOLD_SECONDS = "offload_threshold_in_seconds"
OLD_OFFLOAD_DELETION_LAG = "offload_deletion_lag_ms"

# OffloadPoliciesImpl's JSON field names.
OFFLOAD_DRIVER = "managedLedgerOffloadDriver"
OFFLOAD_THRESHOLD_BYTES = "managedLedgerOffloadThresholdInBytes"
OFFLOAD_THRESHOLD_SECONDS = "managedLedgerOffloadThresholdInSeconds"
OFFLOAD_DELETION_LAG = "managedLedgerOffloadDeletionLagInMillis"
OFFLOAD_READ_PRIORITY = "managedLedgerOffloadedReadPriority"
_MIB = 1024 * 1024

#: What Pulsar's OffloadPoliciesImpl holds for a field the client leaves out (its constructor's
#: values): a namespace's stored object carries them, and they win over the broker's keys.
OFFLOAD_POLICIES_DEFAULTS = {
    "offloadersDirectory": "./offloaders",
    "managedLedgerOffloadMaxThreads": 2,
    "managedLedgerOffloadPrefetchRounds": 1,
    OFFLOAD_READ_PRIORITY: "TIERED_STORAGE_FIRST",
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 64 * _MIB,
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": _MIB,
    "s3ManagedLedgerOffloadRoleSessionName": "pulsar-s3-offload",
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": 64 * _MIB,
    "gcsManagedLedgerOffloadReadBufferSizeInBytes": _MIB,
}
_OFFLOAD_INTS = (OFFLOAD_THRESHOLD_BYTES, OFFLOAD_THRESHOLD_SECONDS, OFFLOAD_DELETION_LAG,
                 "managedLedgerOffloadMaxThreads", "managedLedgerOffloadPrefetchRounds",
                 "s3ManagedLedgerOffloadMaxBlockSizeInBytes", "s3ManagedLedgerOffloadReadBufferSizeInBytes",
                 "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
                 "gcsManagedLedgerOffloadReadBufferSizeInBytes", "managedLedgerOffloadMaxBlockSizeInBytes",
                 "managedLedgerOffloadReadBufferSizeInBytes")
_OFFLOAD_STRINGS = (OFFLOAD_DRIVER, "offloadersDirectory", "s3ManagedLedgerOffloadRegion",
                    "s3ManagedLedgerOffloadBucket", "s3ManagedLedgerOffloadServiceEndpoint",
                    "s3ManagedLedgerOffloadCredentialId", "s3ManagedLedgerOffloadCredentialSecret",
                    "s3ManagedLedgerOffloadRole", "s3ManagedLedgerOffloadRoleSessionName",
                    "gcsManagedLedgerOffloadRegion", "gcsManagedLedgerOffloadBucket",
                    "gcsManagedLedgerOffloadServiceAccountKeyFile", "fileSystemProfilePath",
                    "fileSystemURI", "managedLedgerOffloadBucket", "managedLedgerOffloadRegion",
                    "managedLedgerOffloadServiceEndpoint")
#: OffloadedReadPriority: the JSON enum name (as Jackson writes it) -> the value (as the broker
#: configuration and the CLI spell it). Both spellings are read.
_READ_PRIORITY_NAMES = {"BOOKKEEPER_FIRST": "bookkeeper-first",
                        "TIERED_STORAGE_FIRST": "tiered-storage-first"}


def read_priority_value(value) -> str:
    """``"bookkeeper-first"``/``"tiered-storage-first"`` from either spelling (InvalidValue else)."""
    if isinstance(value, str):
        if value in _READ_PRIORITY_NAMES:
            return _READ_PRIORITY_NAMES[value]
        if value in READ_PRIORITIES:
            return value
    raise InvalidValue(f"{OFFLOAD_READ_PRIORITY} must be one of {list(READ_PRIORITIES)}")


def _is_s3(driver) -> bool:
    return isinstance(driver, str) and driver.lower() in ("s3", "aws-s3")


def check_offload_policies(value) -> dict:
    """
    The OffloadPoliciesImpl document to store for a POST of ``value``: fields type-checked, the
    defaults Pulsar's object carries filled in. Refusals are Pulsar's 412s (OutOfRange): no
    policies, a driver Pulsar does not know (or that has no store here), no bucket where the
    driver needs one (Pulsar's ``bucketValid``).
    """
    if value is None:
        raise OutOfRange("The offloadPolicies must be specified for namespace offload.")
    if not isinstance(value, dict):
        raise InvalidValue("OffloadPolicies must be a JSON object")
    out = dict(OFFLOAD_POLICIES_DEFAULTS)
    for key, item in value.items():
        if item is None:
            continue
        if key in _OFFLOAD_INTS:
            item = check_int(item, key)
        elif key in _OFFLOAD_STRINGS:
            item = check_str(item, key)
        elif key == OFFLOAD_READ_PRIORITY:
            item = {v: k for k, v in _READ_PRIORITY_NAMES.items()}[read_priority_value(item)]
        out[key] = item
    driver = out.get(OFFLOAD_DRIVER) or ""
    if driver.lower() not in (d.lower() for d in OFFLOAD_DRIVER_NAMES) or \
            driver.lower() not in (d.lower() for d in SUPPORTED_OFFLOAD_DRIVERS):
        # Pulsar's message lists its drivers; ours are the ones that have a store here.
        raise OutOfRange("The driver is not supported, support value: "
                         + ",".join(SUPPORTED_OFFLOAD_DRIVERS))
    if not _offload_bucket_valid(out):
        raise OutOfRange("The bucket must be specified for namespace offload.")
    if out.get("s3ManagedLedgerOffloadRole"):
        # Assuming a role (STS) is not built here; taking the policies and then offloading with
        # other credentials would be wrong, so they are refused.
        raise OutOfRange("s3ManagedLedgerOffloadRole is not supported: give "
                         "s3ManagedLedgerOffloadCredentialId/Secret, or credentials in the brokers' "
                         "environment")
    if bool(out.get("s3ManagedLedgerOffloadCredentialId")) != \
            bool(out.get("s3ManagedLedgerOffloadCredentialSecret")):
        raise OutOfRange("s3ManagedLedgerOffloadCredentialId and s3ManagedLedgerOffloadCredentialSecret "
                         "go together")
    return out


def _offload_bucket_valid(policies: dict) -> bool:
    """Pulsar's OffloadPoliciesImpl.bucketValid."""
    driver = (policies.get(OFFLOAD_DRIVER) or "").lower()
    if policies.get("managedLedgerOffloadBucket"):
        return True
    if _is_s3(driver):
        return bool(policies.get("s3ManagedLedgerOffloadBucket"))
    if driver == "google-cloud-storage":
        return bool(policies.get("gcsManagedLedgerOffloadBucket"))
    return driver == "filesystem"


def _fold_old_offload_fields(policies: dict) -> None:
    """
    Pulsar's NamespacesBase.mergeOffloadThresholdsForCompatibility: the three pre-2.6 fields fill
    the same settings of ``offload_policies`` where it has none, then are reset, so that once an
    offload policy is written the object alone holds the namespace's values.
    """
    lag = policies.get(OLD_OFFLOAD_DELETION_LAG)
    threshold = policies.get(OLD_OFFLOAD_THRESHOLD, -1)
    seconds = policies.get(OLD_OFFLOAD_THRESHOLD_SECONDS, -1)
    if lag is None and threshold == -1 and seconds == -1:
        return
    offload = policies[OFFLOAD_POLICIES]
    for key, old, unset in ((OFFLOAD_DELETION_LAG, lag, None),
                            (OFFLOAD_THRESHOLD_BYTES, threshold, -1),
                            (OFFLOAD_THRESHOLD_SECONDS, seconds, -1)):
        if offload.get(key) is None and old != unset:
            offload[key] = old
    policies.pop(OLD_OFFLOAD_DELETION_LAG, None)
    policies[OLD_OFFLOAD_THRESHOLD] = -1
    if OLD_OFFLOAD_THRESHOLD_SECONDS in policies:
        policies[OLD_OFFLOAD_THRESHOLD_SECONDS] = -1


def put_offload_policies(policies: dict, offload: dict) -> dict:
    """The Policies document with ``offload`` (checked) as its offload_policies (Pulsar's POST)."""
    policies[OFFLOAD_POLICIES] = offload
    _fold_old_offload_fields(policies)
    return policies


def put_offload_setting(policies: dict, key: str, value) -> dict:
    """The Policies document with one OffloadPoliciesImpl field set (None: cleared), the object
    created with Pulsar's defaults when there was none (the offloadThreshold,
    offloadThresholdInSeconds and offloadDeletionLagMs sub-resources)."""
    offload = dict(policies.get(OFFLOAD_POLICIES) or OFFLOAD_POLICIES_DEFAULTS)
    if value is None:
        offload.pop(key, None)
    else:
        offload[key] = value
    policies[OFFLOAD_POLICIES] = offload
    _fold_old_offload_fields(policies)
    return policies


def remove_offload_policies(policies: dict) -> dict:
    """Pulsar's removeOffloadPolicies: the object and the three old fields, all unset."""
    policies.pop(OFFLOAD_POLICIES, None)
    policies.pop(OLD_OFFLOAD_DELETION_LAG, None)
    policies[OLD_OFFLOAD_THRESHOLD] = -1
    if OLD_OFFLOAD_THRESHOLD_SECONDS in policies:
        policies[OLD_OFFLOAD_THRESHOLD_SECONDS] = -1
    return policies


def offload_setting(policies: dict, key: str, old_field: str, unset):
    """What GET of offloadThreshold / offloadThresholdInSeconds / offloadDeletionLagMs answers:
    the object's field when there is an object, else the old field (``unset`` when neither)."""
    offload = policies.get(OFFLOAD_POLICIES)
    value = offload.get(key) if isinstance(offload, dict) else policies.get(old_field)
    return unset if value is None else value


def broker_offload_fields(config) -> dict:
    """The broker's offload keys as OffloadPoliciesImpl fields (Pulsar's mergeConfiguration reads
    the broker properties under these names); empty values are left out, as unset."""
    def key(name, default=""):
        return getattr(config, name, default)
    fields = {
        OFFLOAD_DRIVER: key("managedLedgerOffloadDriver"),
        OFFLOAD_THRESHOLD_BYTES: key("managedLedgerOffloadThresholdInBytes", -1),
        OFFLOAD_THRESHOLD_SECONDS: key("managedLedgerOffloadThresholdInSeconds", -1),
        OFFLOAD_DELETION_LAG: key("managedLedgerOffloadDeletionLagMs", 4 * 3600 * 1000),
        OFFLOAD_READ_PRIORITY: key("managedLedgerDataReadPriority", "tiered-storage-first"),
        "fileSystemURI": key("fileSystemURI"),
    }
    for name in ("managedLedgerOffloadBucket", "managedLedgerOffloadRegion",
                 "managedLedgerOffloadServiceEndpoint", "s3ManagedLedgerOffloadBucket",
                 "s3ManagedLedgerOffloadRegion", "s3ManagedLedgerOffloadServiceEndpoint"):
        fields[name] = key(name)
    fields["s3ManagedLedgerOffloadMaxBlockSizeInBytes"] = key(
        "s3ManagedLedgerOffloadMaxBlockSizeInBytes", 64 * _MIB)
    fields["s3ManagedLedgerOffloadReadBufferSizeInBytes"] = key(
        "s3ManagedLedgerOffloadReadBufferSizeInBytes", _MIB)
    return {k: v for k, v in fields.items() if v is not None and v != ""}


def resolve_offload(fields: dict) -> OffloadPolicies:
    """
    The OffloadPolicies of merged OffloadPoliciesImpl ``fields``. For an S3 driver the s3* bucket,
    region, endpoint and block sizes win over the generic managedLedgerOffload* ones (Pulsar's
    TieredStorageConfiguration reads the s3 name first); other drivers read the generic ones.
    """
    driver = fields.get(OFFLOAD_DRIVER) or ""
    s3 = _is_s3(driver)

    def pick(suffix, default):
        value = fields.get(f"s3ManagedLedgerOffload{suffix}") if s3 else None
        if value in (None, ""):
            value = fields.get(f"managedLedgerOffload{suffix}")
        return default if value in (None, "") else value

    def number(key, default):
        value = fields.get(key)
        return default if value is None else check_int(value, key)

    priority = fields.get(OFFLOAD_READ_PRIORITY)
    return OffloadPolicies(
        driver=check_str(driver, OFFLOAD_DRIVER),
        bucket=pick("Bucket", ""), region=pick("Region", ""), endpoint=pick("ServiceEndpoint", ""),
        file_system_uri=fields.get("fileSystemURI") or "",
        threshold_bytes=number(OFFLOAD_THRESHOLD_BYTES, -1),
        threshold_seconds=number(OFFLOAD_THRESHOLD_SECONDS, -1),
        deletion_lag_ms=number(OFFLOAD_DELETION_LAG, 4 * 3600 * 1000),
        read_priority=read_priority_value(priority) if priority is not None else "tiered-storage-first",
        max_block_size=check_int(pick("MaxBlockSizeInBytes", 64 * _MIB), "maxBlockSizeInBytes"),
        read_buffer_size=check_int(pick("ReadBufferSizeInBytes", _MIB), "readBufferSizeInBytes"),
        credential_id=(fields.get("s3ManagedLedgerOffloadCredentialId") or "") if s3 else "",
        credential_secret=(fields.get("s3ManagedLedgerOffloadCredentialSecret") or "") if s3 else "")


# ------------------------------------------------------------------------------------ documents
def even_boundaries(num_bundles: int) -> list:
    """Pulsar's even split of the hash range: ``num_bundles + 1`` bounds, the last 0xffffffff."""
    if num_bundles < 1:
        raise ValueError(f"numBundles must be at least 1, got {num_bundles}")
    step = 0x100000000 // num_bundles
    return [i * step for i in range(num_bundles)] + [FULL_RANGE_UPPER]


def boundaries_of_policies(policies: dict) -> list:
    """The bundle bounds (ints) a stored document describes (its ``boundaries``, else an even
    split in ``numBundles``); ValueError when malformed."""
    bundles = policies.get("bundles") or {}
    raw = bundles.get("boundaries")
    if raw:
        bounds = [int(b, 16) if isinstance(b, str) else int(b) for b in raw]
        if (len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != FULL_RANGE_UPPER
                or any(a >= b for a, b in zip(bounds, bounds[1:]))):
            raise ValueError(f"bad bundle boundaries {raw!r}")
        return bounds
    return even_boundaries(int(bundles.get("numBundles") or DEFAULT_NUM_BUNDLES))


def bundle_boundaries(num_bundles: int) -> list:
    """The even split as the Policies document stores it (hex strings)."""
    return ["0x%08x" % b for b in even_boundaries(num_bundles)]


def new_policies(cluster: str, num_bundles: int = DEFAULT_NUM_BUNDLES) -> dict:
    """A new namespace's Policies as ``pulsar-admin namespaces policies`` prints it (nulls omitted);
    ``num_bundles``: the broker's defaultNumberOfNamespaceBundles."""
    return {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        "bundles": {"boundaries": bundle_boundaries(num_bundles), "numBundles": num_bundles},
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        "subscription_auth_mode": "None",
        "offload_threshold": -1,
        # No schema_auto_update_compatibility_strategy: Pulsar 4.x's default for the deprecated
        # field is null (omitted, like every null), where Pulsar 2.x stored "Full". Documents we
        # stored earlier still carry "Full"; broker/schema.py reads it as unset.
        "schema_compatibility_strategy": "UNDEFINED",
        # No is_allow_auto_update_schema either: null in Pulsar 4.x, so that the broker's
        # isAllowAutoUpdateSchemaEnabled decides (a stored true would pin it on).
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
    }


def bootstrap_policies(cluster: str) -> dict:
    """
    What the broker stores for ``public/default`` when it finds none: only the replication cluster
    and the bundle count, so that every other field (schema auto-update, validation, ...) follows
    the broker configuration rather than the values ``new_policies`` would pin.
    """
    return {"replication_clusters": [cluster], "bundles": {"numBundles": DEFAULT_NUM_BUNDLES}}


def with_defaults(stored: dict, cluster: str) -> dict:
    """A stored (possibly short, see ``bootstrap_policies``) document with every default filled in,
    as the admin API answers it."""
    policies = new_policies(cluster)
    for key, value in stored.items():
        if value is not None:
            policies[key] = value
    bundles = policies.get("bundles") or {}
    n = bundles.get("numBundles") or DEFAULT_NUM_BUNDLES
    if not bundles.get("boundaries"):
        policies["bundles"] = {"boundaries": bundle_boundaries(n), "numBundles": n}
    return policies


def check_new_namespace(policies, cluster: str, num_bundles: int = DEFAULT_NUM_BUNDLES) -> dict:
    """The document to store for a namespace created with ``policies`` (None: the defaults, with
    ``num_bundles`` bundles unless ``policies`` say how many)."""
    value = new_policies(cluster, num_bundles)
    if policies is None:
        return value
    if not isinstance(policies, dict):
        raise InvalidValue("Policies must be a JSON object")
    policies = dict(policies)
    for spec in NAMESPACE_POLICIES.values():
        if policies.get(spec.field) is not None and not spec.per_cluster:
            policies[spec.field] = spec.check(policies[spec.field], spec.field)
    value.update({k: v for k, v in policies.items() if v is not None})
    bundles = value.get("bundles")
    n = bundles.get("numBundles", num_bundles) if isinstance(bundles, dict) else None
    if not isinstance(n, int) or n < 1:
        raise OutOfRange("bundles.numBundles must be a positive integer")
    value["bundles"] = {"boundaries": bundles.get("boundaries") or bundle_boundaries(n), "numBundles": n}
    return value


def to_json(document) -> bytes:
    """The stored bytes of a metadata document (Python's default separators, as always written)."""
    return json.dumps(document).encode()


def from_json(raw: bytes):
    """The document stored as ``raw`` (an empty node reads as ``{}``); ValueError if not JSON."""
    return json.loads(raw or b"{}")


# ------------------------------------------------------------------------------------ effective
@dataclass(frozen=True)
class NamespacePolicies:
    """
    The policies in force for the topics of one namespace, every field resolved (stored value, else
    the broker configuration). Retention: minutes / MB, -1 unlimited. Limits: 0 none. TTL and
    subscription expiration: 0 never. ``backlog_quotas``: quota type -> BacklogQuota.
    """

    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    message_ttl_seconds: int = 0
    backlog_quotas: dict = field(default_factory=dict)
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    deduplication_enabled: bool = False
    subscription_expiration_minutes: int = 0
    inactive_topic: InactiveTopicPolicies = InactiveTopicPolicies()
    #: Rates (broker/ratelimit.py): this cluster's publishRate, dispatchRate, subscriptionDispatchRate.
    publish_rate: RateLimit = UNLIMITED
    topic_dispatch_rate: RateLimit = UNLIMITED
    subscription_dispatch_rate: RateLimit = UNLIMITED
    cluster: str = ""
    #: The clusters the namespace's persistent topics replicate to (this one among them when it
    #: is set at all; broker/replication.py). Empty: the namespace is local.
    replication_clusters: tuple = ()
    #: Tiered storage (broker/topic.py and mledger/offload/ act on it).
    offload: OffloadPolicies = OffloadPolicies()
    #: The offload settings in force as OffloadPoliciesImpl fields (the broker's keys, with the
    #: namespace's stored fields over them), under which a level below (a namespace's, a topic's)
    #: merges its own (not a policy of its own).
    broker_offload: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def defaults(cls, config) -> "NamespacePolicies":
        """What a namespace without stored policies gets: the broker configuration."""
        quotas = {}
        policy = config.backlogQuotaDefaultRetentionPolicy
        if config.backlogQuotaDefaultLimitBytes >= 0:
            quotas[DESTINATION_STORAGE] = BacklogQuota(limit_size=config.backlogQuotaDefaultLimitBytes,
                                                       policy=policy)
        if config.backlogQuotaDefaultLimitSecond >= 0:
            quotas[MESSAGE_AGE] = BacklogQuota(limit_time=config.backlogQuotaDefaultLimitSecond,
                                               policy=policy)
        return cls(
            retention_time_minutes=config.defaultRetentionTimeInMinutes,
            retention_size_mb=config.defaultRetentionSizeInMB,
            message_ttl_seconds=config.ttlDurationDefaultInSeconds,
            backlog_quotas=quotas,
            max_producers_per_topic=config.maxProducersPerTopic,
            max_consumers_per_topic=config.maxConsumersPerTopic,
            max_consumers_per_subscription=config.maxConsumersPerSubscription,
            deduplication_enabled=config.brokerDeduplicationEnabled,
            subscription_expiration_minutes=config.subscriptionExpirationTimeMinutes,
            inactive_topic=InactiveTopicPolicies(
                config.brokerDeleteInactiveTopicsEnabled,
                (config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
                 or config.brokerDeleteInactiveTopicsFrequencySeconds),
                config.brokerDeleteInactiveTopicsMode),
            cluster=config.clusterName, offload=resolve_offload(broker_offload_fields(config)),
            broker_offload=broker_offload_fields(config), **_config_rates(config))

    @classmethod
    def from_json(cls, data, config, where: str = "", base=None) -> "NamespacePolicies":
        """
        Resolve a stored Policies document (a dict) over ``base`` (None: the broker's defaults;
        a topic's policies resolve over its namespace's). A field whose value cannot be used is
        logged and left at ``base``'s value, so that one bad field does not disable the others.
        """
        if base is None:
            base = cls.defaults(config)
        if not isinstance(data, dict):
            log.warn("policies {where}: not a JSON object; broker defaults apply", where=where)
            return base
        values = {}
        for name, parse in _FIELDS:
            try:
                parsed = parse(data, base)
            except (ValueCheckError, TypeError, AttributeError) as e:
                log.warn("policies {where}: {field}: {error}; broker default applies",
                         where=where, field=name, error=e)
                continue
            values.update(parsed)
        return cls(**{**base.__dict__, **values})


def _config_rates(config) -> dict:
    """The broker's default rates (0: unlimited), as NamespacePolicies attributes."""
    return {"publish_rate": RateLimit(config.maxPublishRatePerTopicInMessages,
                                      config.maxPublishRatePerTopicInBytes),
            "topic_dispatch_rate": RateLimit(config.dispatchThrottlingRatePerTopicInMsg,
                                             config.dispatchThrottlingRatePerTopicInByte),
            "subscription_dispatch_rate": RateLimit(config.dispatchThrottlingRatePerSubscriptionInMsg,
                                                    config.dispatchThrottlingRatePerSubscriptionInByte)}


def _stored_choice(data: dict, key: str, default: str, choices) -> str:
    value = data.get(key)
    return default if value is None else check_choice(value, key, choices)


def _retention(data, base):
    retention = data.get("retention_policies")
    if retention is None:
        return {}
    return {"retention_time_minutes": optional_int(retention, "retentionTimeInMinutes",
                                                   base.retention_time_minutes, -1),
            "retention_size_mb": optional_int(retention, "retentionSizeInMB", base.retention_size_mb, -1)}


def _backlog_quotas(data, base):
    stored = data.get("backlog_quota_map")
    if not stored:
        return {}
    quotas = dict(base.backlog_quotas)
    for kind, value in stored.items():
        if kind not in QUOTA_TYPES:
            raise InvalidValue(f"unknown backlog quota type {kind!r}")
        # "limit" is the deprecated name of limitSize.
        size = optional_int(value, "limitSize", optional_int(value, "limit", -1, -1), -1)
        quotas[kind] = BacklogQuota(
            limit_size=size if kind == DESTINATION_STORAGE else -1,
            limit_time=optional_int(value, "limitTime", -1, -1) if kind == MESSAGE_AGE else -1,
            policy=_stored_choice(value, "policy", PRODUCER_REQUEST_HOLD, RETENTION_POLICIES))
    return {"backlog_quotas": quotas}


def _replication_clusters(data, base):
    stored = data.get("replication_clusters")
    if stored is None:
        return {}
    return {"replication_clusters": tuple(check_string_list(stored, "replication_clusters"))}


def _inactive_topic(data, base):
    stored = data.get("inactive_topic_policies")
    if stored is None:
        return {}
    default = base.inactive_topic
    enabled = check_bool(stored.get("deleteWhileInactive", default.delete_while_inactive),
                         "deleteWhileInactive")
    return {"inactive_topic": InactiveTopicPolicies(
        enabled, optional_int(stored, "maxInactiveDurationSeconds", default.max_inactive_seconds, 0),
        _stored_choice(stored, "inactiveTopicDeleteMode", default.mode, INACTIVE_TOPIC_MODES))}


def _dedup(data, base):
    value = data.get("deduplicationEnabled")
    if value is None:
        return {}
    return {"deduplication_enabled": check_bool(value, "deduplicationEnabled")}


def _simple(json_key, attribute, at_least=0):
    def parse(data, base):
        return {attribute: optional_int(data, json_key, getattr(base, attribute), at_least)}
    return parse


def publish_rate_from_json(value) -> RateLimit:
    """Pulsar's PublishRate ``{"publishThrottlingRateInMsg": N, "publishThrottlingRateInByte": B}``."""
    if not isinstance(value, dict):
        raise InvalidValue(f"must be a JSON object, not {value!r}")
    return RateLimit(optional_int(value, "publishThrottlingRateInMsg", -1),
                     optional_int(value, "publishThrottlingRateInByte", -1))


def dispatch_rate_from_json(value) -> RateLimit:
    """Pulsar's DispatchRate (``dispatchThrottlingRateInMsg``, ``...InByte``, ``ratePeriodInSecond``)."""
    if not isinstance(value, dict):
        raise InvalidValue(f"must be a JSON object, not {value!r}")
    period = optional_int(value, "ratePeriodInSecond", 1, 1)
    if value.get("relativeToPublishRate"):
        log.warn("dispatch rate policy: relativeToPublishRate is not supported; the absolute rate "
                 "applies")
    return RateLimit(optional_int(value, "dispatchThrottlingRateInMsg", -1),
                     optional_int(value, "dispatchThrottlingRateInByte", -1), float(period))


def _rate(json_key, attribute, parse):
    def parse_field(data, base):
        # Pulsar keeps these policies per cluster: only this cluster's entry applies here.
        per_cluster = data.get(json_key)
        if per_cluster is None:
            return {}
        if not isinstance(per_cluster, dict):
            raise InvalidValue("must be a JSON object of cluster -> rate")
        value = per_cluster.get(base.cluster)
        if value is None:
            return {}
        try:
            return {attribute: parse(value)}
        except ValueCheckError as e:
            raise type(e)(f"{base.cluster}: {e}") from None
    return parse_field


def _offload(data, base):
    """Pulsar's OffloadPoliciesImpl.oldPoliciesCompatible then mergeConfiguration: each field of
    the stored object, else of the old Policies fields (threshold -1 and lag null being unset),
    else the broker's."""
    stored = data.get(OFFLOAD_POLICIES)
    threshold = data.get(OLD_OFFLOAD_THRESHOLD, -1)
    seconds = data.get(OLD_OFFLOAD_THRESHOLD_SECONDS, -1)
    lag = data.get(OLD_OFFLOAD_DELETION_LAG)
    if stored is None and threshold in (None, -1) and seconds in (None, -1) and lag is None:
        return {}
    if stored is not None and not isinstance(stored, dict):
        raise InvalidValue("must be a JSON object")
    namespace = {k: v for k, v in (stored or {}).items() if v is not None}
    for key, old, unset in ((OFFLOAD_THRESHOLD_BYTES, threshold, -1),
                            (OFFLOAD_THRESHOLD_SECONDS, seconds, -1),
                            (OFFLOAD_DELETION_LAG, lag, None)):
        if key not in namespace and old is not None and old != unset:
            namespace[key] = check_int(old, key)
    merged = {**base.broker_offload, **namespace}
    # The merged fields are what a level below (a topic's policies) merges its own over.
    return {"offload": resolve_offload(merged), "broker_offload": merged}


_FIELDS = [
    ("retention_policies", _retention),
    ("message_ttl_in_seconds", _simple("message_ttl_in_seconds", "message_ttl_seconds")),
    ("backlog_quota_map", _backlog_quotas),
    ("max_producers_per_topic", _simple("max_producers_per_topic", "max_producers_per_topic")),
    ("max_consumers_per_topic", _simple("max_consumers_per_topic", "max_consumers_per_topic")),
    ("max_consumers_per_subscription", _simple("max_consumers_per_subscription",
                                               "max_consumers_per_subscription")),
    ("deduplicationEnabled", _dedup),
    ("subscription_expiration_time_minutes", _simple("subscription_expiration_time_minutes",
                                                     "subscription_expiration_minutes")),
    ("inactive_topic_policies", _inactive_topic),
    ("publishMaxMessageRate", _rate("publishMaxMessageRate", "publish_rate", publish_rate_from_json)),
    ("topicDispatchRate", _rate("topicDispatchRate", "topic_dispatch_rate", dispatch_rate_from_json)),
    ("subscriptionDispatchRate", _rate("subscriptionDispatchRate", "subscription_dispatch_rate",
                                       dispatch_rate_from_json)),
    ("replication_clusters", _replication_clusters),
    ("offload_policies", _offload),
]
