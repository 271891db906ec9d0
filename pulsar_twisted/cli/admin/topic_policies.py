"""
``pulsar-admin topics`` verbs of topic-level policies (Pulsar's ``CmdTopics``), with its names and
flags: ``get-X [-ap|--applied]``, ``set-X <flags>``, ``remove-X`` for retention, message TTL,
deduplication, replication clusters, max producers / consumers / consumers per subscription,
inactive topic policies, publish / dispatch / subscription dispatch rates, backlog quotas and
offload policies, plus Pulsar's deprecated spellings (``enable-deduplication``,
``set-maxProducers``...). Every verb takes ``-g``/``--global`` (Pulsar's isGlobal, which the broker
refuses: topic policies are kept in its own cluster).
"""

from pulsar_twisted.cli.admin import CommandError, _csv, parse_bytes, parse_seconds
from pulsar_twisted.cli.admin.offload import OFFLOAD_POLICY_FLAGS, offload_policies_body

_APPLIED = (("-ap", "--applied"), {"action": "store_true", "help": "the policy in force (topic, "
                                                                    "else namespace, else broker)"})
_GLOBAL = (("-g", "--global"), {"action": "store_true", "dest": "is_global",
                                "help": "the global (geo-replicated) policy"})
QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


def _query(a, **extra) -> dict:
    out = {k: v for k, v in extra.items() if v is not None}
    if getattr(a, "applied", False):
        out["applied"] = "true"
    if a.is_global:
        out["isGlobal"] = "true"
    return out or None


def add_topic_verbs(topic) -> None:
    """Register the verbs through ``topic(name, help, run, *args)`` (the topics family's helper)."""
    def triple(what, resource, set_run, *set_flags, applied=True, help_set=None):
        get_flags = (_APPLIED, _GLOBAL) if applied else (_GLOBAL,)
        topic(f"get-{what}", f"Get the {what.replace('-', ' ')} of a topic",
              lambda a, c, p: c.get(f"{p}/{resource}", query=_query(a)), *get_flags)
        topic(f"set-{what}", help_set or f"Set the {what.replace('-', ' ')} of a topic",
              set_run, *set_flags, _GLOBAL)
        topic(f"remove-{what}", f"Remove the {what.replace('-', ' ')} of a topic",
              lambda a, c, p: c.delete(f"{p}/{resource}", query=_query(a)), _GLOBAL)

    triple("retention", "retention", _set_retention,
           (("-t", "--time"), {"required": True, "help": "100m, 3h, 2d, 5w (0: none, -1: infinite)"}),
           (("-s", "--size"), {"required": True, "help": "10M, 16G, 3T (0: none, -1: infinite)"}))
    triple("message-ttl", "messageTTL", lambda a, c, p: c.post(
        f"{p}/messageTTL", query=_query(a, messageTTL=str(_ttl(a.ttl)))),
        (("-t", "--ttl"), {"required": True, "help": "seconds, or 100m, 3h, 2d, 5w"}))
    _deduplication(topic)
    triple("replication-clusters", "replication", lambda a, c, p: c.post(
        f"{p}/replication", _csv(a.clusters), query=_query(a)),
        (("-c", "--clusters"), {"required": True, "help": "comma-separated cluster names"}))
    for what, flag, short in (("max-producers", "--max-producers", "-p"),
                              ("max-consumers", "--max-consumers", "-c")):
        resource = "maxProducers" if what == "max-producers" else "maxConsumers"
        triple(what, resource, lambda a, c, p, r=resource: c.post(f"{p}/{r}", a.value, query=_query(a)),
               ((short, flag), {"required": True, "type": int, "dest": "value"}))
    # Pulsar's deprecated spellings of the max-producers verbs.
    topic("get-maxProducers", "Get the max producers of a topic (deprecated)",
          lambda a, c, p: c.get(f"{p}/maxProducers", query=_query(a)), _APPLIED, _GLOBAL)
    topic("set-maxProducers", "Set the max producers of a topic (deprecated)",
          lambda a, c, p: c.post(f"{p}/maxProducers", a.value, query=_query(a)),
          (("-p", "--max-producers"), {"required": True, "type": int, "dest": "value"}), _GLOBAL)
    topic("remove-maxProducers", "Remove the max producers of a topic (deprecated)",
          lambda a, c, p: c.delete(f"{p}/maxProducers", query=_query(a)), _GLOBAL)
    triple("max-consumers-per-subscription", "maxConsumersPerSubscription",
           lambda a, c, p: c.post(f"{p}/maxConsumersPerSubscription", a.value, query=_query(a)),
           (("-c", "--max-consumers-per-subscription"), {"required": True, "type": int, "dest": "value"}),
           applied=False)
    triple("inactive-topic-policies", "inactiveTopicPolicies", _set_inactive,
           (("-e", "--enable-delete-while-inactive"), {"action": "store_true", "dest": "enable"}),
           (("-d", "--disable-delete-while-inactive"), {"action": "store_true", "dest": "disable"}),
           (("-t", "--max-inactive-duration"), {"required": True, "dest": "duration",
                                                "help": "1s, 10s, 1m, 5h, 3d"}),
           (("-m", "--delete-mode"), {"required": True, "dest": "mode", "help": " or ".join(DELETE_MODES)}))
    triple("publish-rate", "publishRate", lambda a, c, p: c.post(f"{p}/publishRate", {
        "publishThrottlingRateInMsg": a.msg_rate, "publishThrottlingRateInByte": a.byte_rate},
        query=_query(a)),
        (("-m", "--msg-publish-rate"), {"type": int, "default": -1, "dest": "msg_rate"}),
        (("-b", "--byte-publish-rate"), {"type": int, "default": -1, "dest": "byte_rate"}),
        applied=False)
    for what, resource in (("dispatch-rate", "dispatchRate"),
                           ("subscription-dispatch-rate", "subscriptionDispatchRate")):
        triple(what, resource, lambda a, c, p, r=resource: c.post(f"{p}/{r}", _dispatch_rate(a),
                                                                  query=_query(a)), *_DISPATCH_FLAGS)
    topic("get-backlog-quotas", "Get the backlog quotas of a topic",
          lambda a, c, p: c.get(f"{p}/backlogQuotaMap", query=_query(a)), _APPLIED, _GLOBAL)
    topic("set-backlog-quota", "Set a backlog quota of a topic", _set_backlog_quota,
          (("-l", "--limit"), {"default": "-1", "help": "size limit (10M, 16G)"}),
          (("-lt", "--limitTime"), {"default": "-1", "help": "time limit (100m, 3h; -1: none)"}),
          (("-p", "--policy"), {"required": True, "help": ", ".join(QUOTA_POLICIES)}),
          (("-t", "--type"), {"default": "destination_storage",
                              "choices": ["destination_storage", "message_age"]}), _GLOBAL)
    topic("remove-backlog-quota", "Remove a backlog quota of a topic", lambda a, c, p: c.delete(
        f"{p}/backlogQuota", query=_query(a, backlogQuotaType=a.type)),
        (("-t", "--type"), {"default": "destination_storage",
                            "choices": ["destination_storage", "message_age"]}), _GLOBAL)
    triple("offload-policies", "offloadPolicies", lambda a, c, p: c.post(
        f"{p}/offloadPolicies", offload_policies_body(a), query=_query(a)), *OFFLOAD_POLICY_FLAGS)


_DISPATCH_FLAGS = (
    (("-md", "--msg-dispatch-rate"), {"type": int, "default": -1, "dest": "msg_rate"}),
    (("-bd", "--byte-dispatch-rate"), {"type": int, "default": -1, "dest": "byte_rate"}),
    (("-dt", "--dispatch-rate-period"), {"type": int, "default": 1, "dest": "period",
                                         "help": "seconds"}),
    (("-rp", "--relative-to-publish-rate"), {"action": "store_true", "dest": "relative"}),
)


def _deduplication(topic) -> None:
    topic("get-deduplication", "Get the deduplication policy of a topic",
          lambda a, c, p: c.get(f"{p}/deduplicationEnabled", query=_query(a)), _APPLIED, _GLOBAL)
    topic("get-deduplication-enabled", "Get the deduplication policy of a topic (deprecated)",
          lambda a, c, p: c.get(f"{p}/deduplicationEnabled", query=_query(a)), _APPLIED, _GLOBAL)
    topic("set-deduplication", "Enable or disable deduplication for a topic", _set_deduplication,
          (("-e", "--enable"), {"action": "store_true"}),
          (("-d", "--disable"), {"action": "store_true"}), _GLOBAL)
    topic("remove-deduplication", "Remove the deduplication policy of a topic",
          lambda a, c, p: c.delete(f"{p}/deduplicationEnabled", query=_query(a)), _GLOBAL)
    for verb, value in (("enable-deduplication", True), ("disable-deduplication", False)):
        topic(verb, f"{verb.split('-')[0].capitalize()} deduplication for a topic (deprecated)",
              lambda a, c, p, v=value: c.post(f"{p}/deduplicationEnabled", v, query=_query(a)), _GLOBAL)


def _set_retention(a, c, path):
    seconds = parse_seconds(a.time)
    size = parse_bytes(a.size)
    return c.post(f"{path}/retention", {
        "retentionTimeInMinutes": -1 if seconds == -1 else seconds // 60,
        "retentionSizeInMB": -1 if size == -1 else size // (1024 * 1024)}, query=_query(a))


def _ttl(text) -> int:
    seconds = parse_seconds(text)
    if seconds < 0:
        raise CommandError(f"Invalid message TTL '{text}': use 0 or more seconds")
    return seconds


def _set_deduplication(a, c, path):
    if a.enable == a.disable:
        raise CommandError("Need to specify either --enable or --disable")
    return c.post(f"{path}/deduplicationEnabled", a.enable, query=_query(a))


def _set_inactive(a, c, path):
    if a.enable == a.disable:
        raise CommandError("Need to specify either enable-delete-while-inactive or "
                           "disable-delete-while-inactive")
    if a.mode not in DELETE_MODES:
        raise CommandError("delete mode can only be set to delete_when_no_subscriptions or "
                           "delete_when_subscriptions_caught_up")
    return c.post(f"{path}/inactiveTopicPolicies", {
        "inactiveTopicDeleteMode": a.mode, "maxInactiveDurationSeconds": parse_seconds(a.duration),
        "deleteWhileInactive": a.enable}, query=_query(a))


def _dispatch_rate(a) -> dict:
    return {"dispatchThrottlingRateInMsg": a.msg_rate, "dispatchThrottlingRateInByte": a.byte_rate,
            "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative}


def _set_backlog_quota(a, c, path):
    if a.policy not in QUOTA_POLICIES:
        raise CommandError(f"Invalid retention policy type '{a.policy}'. Valid options are: "
                           f"[{', '.join(QUOTA_POLICIES)}]")
    return c.post(f"{path}/backlogQuota", {
        "limitSize": parse_bytes(a.limit), "limitTime": parse_seconds(a.limitTime),
        "policy": a.policy}, query=_query(a, backlogQuotaType=a.type))
