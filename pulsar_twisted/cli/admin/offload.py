"""
``pulsar-admin`` verbs of tiered storage, with Pulsar's flags and texts: the namespaces' offload
threshold, deletion lag and offload policies, and ``topics offload`` / ``offload-status``.
"""

import time
from urllib.parse import unquote

from pulsar_twisted.cli.admin import CommandError, parse_bytes, parse_seconds

#: Pulsar's driver names (matched case-insensitively) and its two read priorities.
DRIVER_NAMES = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss")
READ_PRIORITIES = ("bookkeeper-first", "tiered-storage-first")
#: How long ``offload-status -w`` waits between two polls (seconds; tests replace it).
POLL_SECONDS = 1.0
_sleep = time.sleep


def _millis(text: str) -> int:
    seconds = parse_seconds(text)
    return -1 if seconds == -1 else seconds * 1000


# ------------------------------------------------------------------------------------ namespaces
def add_namespace_verbs(ns) -> None:
    """Register the verbs through ``ns(name, help, run, *args)`` (the namespaces family's helper)."""
    ns("set-offload-threshold", "Set the offload threshold of a namespace",
       lambda a, c, p: c.put(p + "/offloadThreshold", parse_bytes(a.size)),
       (("-s", "--size"), {"required": True,
                           "help": "bytes kept in the bookies before offload (10M, 16G, 3T, 100); "
                                   "-1: the broker's setting, 0: offload as soon as possible"}))
    ns("get-offload-threshold", "Offload threshold of a namespace",
       lambda a, c, p: c.get(p + "/offloadThreshold"))
    ns("set-offload-deletion-lag", "Set how long offloaded ledgers stay in the bookies",
       lambda a, c, p: c.put(p + "/offloadDeletionLagMs", _millis(a.lag)),
       (("-l", "--lag"), {"required": True, "help": "10m, 3h, 2d, 5w (-1: never deleted)"}))
    ns("get-offload-deletion-lag", "Offload deletion lag of a namespace", _get_deletion_lag)
    ns("clear-offload-deletion-lag", "Clear the offload deletion lag (the broker's applies)",
       lambda a, c, p: c.delete(p + "/offloadDeletionLagMs"))
    ns("set-offload-policies", "Set the offload policies of a namespace", _set_offload_policies,
       *OFFLOAD_POLICY_FLAGS)
    ns("get-offload-policies", "Offload policies of a namespace",
       lambda a, c, p: c.get(p + "/offloadPolicies"))
    ns("remove-offload-policies", "Remove the offload policies of a namespace",
       lambda a, c, p: c.delete(p + "/removeOffloadPolicies"))


def _get_deletion_lag(a, c, path):
    lag = c.get(path + "/offloadDeletionLagMs")
    if lag is None:
        return "Unset for namespace. Defaulting to broker setting."
    return f"{int(lag) // 1000} second(s)"


#: Pulsar's set-offload-policies flags (every spelling it accepts).
OFFLOAD_POLICY_FLAGS = (
    (("-d", "--driver"), {"required": True, "help": "offload driver: " + ", ".join(DRIVER_NAMES)}),
    (("-r", "--region"), {"help": "bucket region"}),
    (("-b", "--bucket"), {"help": "bucket"}),
    (("-e", "--endpoint"), {"help": "service endpoint URL"}),
    (("-i", "--aws-id"), {"dest": "aws_id", "help": "AWS credential id (S3 drivers)"}),
    (("-s", "--aws-secret"), {"dest": "aws_secret", "help": "AWS credential secret (S3 drivers)"}),
    (("--ro", "--s3-role"), {"dest": "s3_role", "help": "S3 role to assume"}),
    (("--s3-role-session-name", "-rsn"), {"dest": "s3_role_session_name"}),
    (("-m", "--maxBlockSizeInBytes", "--maxBlockSize", "-mbs"),
     {"dest": "max_block_size", "default": "64M", "help": "largest block written (32M, 64M)"}),
    (("-rb", "--readBufferSizeInBytes", "--readBufferSize", "-rbs"),
     {"dest": "read_buffer_size", "default": "1M", "help": "read buffer (1M, 5M)"}),
    (("-t", "--offloadThresholdInBytes", "--offloadAfterThreshold", "-oat"),
     {"dest": "threshold", "help": "offload after this many bytes (1M, 5M)"}),
    (("-ts", "--offloadThresholdInSeconds", "--offloadAfterThresholdInSeconds", "-oats"),
     {"dest": "threshold_seconds", "help": "offload after this age (100m, 3h, 2d, 5w)"}),
    (("-dl", "--offloadDeletionLagInMillis", "--offloadAfterElapsed", "-oae"),
     {"dest": "deletion_lag", "help": "delete from the bookies this long after offload (10s, 3h)"}),
    (("--offloadedReadPriority", "-orp"),
     {"dest": "read_priority", "help": "tiered-storage-first or bookkeeper-first"}),
)


def offload_policies_body(a) -> dict:
    """The OffloadPoliciesImpl JSON Pulsar's CLI sends for the flags ``a`` (its create():
    generic bucket/region/endpoint always, the s3* copies and credentials for S3 drivers)."""
    driver = a.driver
    if driver.lower() not in (d.lower() for d in DRIVER_NAMES):
        raise CommandError(f"The driver {driver} is not supported, (Possible values: "
                           f"{','.join(DRIVER_NAMES)}).")
    s3 = driver.lower() in ("s3", "aws-s3")
    if s3 and not a.region and not a.endpoint:
        raise CommandError("Either s3ManagedLedgerOffloadRegion or "
                           "s3ManagedLedgerOffloadServiceEndpoint must be set if s3 offload enabled")
    priority = a.read_priority or "tiered-storage-first"
    if priority not in READ_PRIORITIES:
        raise CommandError(f"--offloadedReadPriority parameter must be one of "
                           f"{','.join(READ_PRIORITIES)} but got: {priority}")
    max_block = parse_bytes(a.max_block_size)
    read_buffer = parse_bytes(a.read_buffer_size)
    body = {
        "managedLedgerOffloadDriver": driver,
        "managedLedgerOffloadThresholdInBytes":
            parse_bytes(a.threshold) if a.threshold is not None else None,
        "managedLedgerOffloadThresholdInSeconds":
            parse_seconds(a.threshold_seconds) if a.threshold_seconds is not None else None,
        "managedLedgerOffloadDeletionLagInMillis":
            _millis(a.deletion_lag) if a.deletion_lag is not None else None,
        "managedLedgerOffloadBucket": a.bucket, "managedLedgerOffloadRegion": a.region,
        "managedLedgerOffloadServiceEndpoint": a.endpoint,
        "managedLedgerOffloadMaxBlockSizeInBytes": max_block,
        "managedLedgerOffloadReadBufferSizeInBytes": read_buffer,
        "managedLedgerOffloadedReadPriority": priority,
    }
    if s3:
        body.update({
            "s3ManagedLedgerOffloadBucket": a.bucket, "s3ManagedLedgerOffloadRegion": a.region,
            "s3ManagedLedgerOffloadServiceEndpoint": a.endpoint,
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes": max_block,
            "s3ManagedLedgerOffloadReadBufferSizeInBytes": read_buffer,
            "s3ManagedLedgerOffloadCredentialId": a.aws_id,
            "s3ManagedLedgerOffloadCredentialSecret": a.aws_secret,
            "s3ManagedLedgerOffloadRole": a.s3_role,
            "s3ManagedLedgerOffloadRoleSessionName": a.s3_role_session_name,
        })
    return {k: v for k, v in body.items() if v is not None}


def _set_offload_policies(a, c, path):
    return c.post(path + "/offloadPolicies", offload_policies_body(a))


# ------------------------------------------------------------------------------------ topics
def add_topic_verbs(topic) -> None:
    """Register the verbs through ``topic(name, help, run, *args)`` (the topics family's helper)."""
    topic("offload", "Trigger offload of data from a topic to long-term storage", _offload,
          (("-s", "--size-threshold"), {"required": True, "dest": "size_threshold",
                                        "help": "data to keep in the bookies (10M, 5G)"}))
    topic("offload-status", "Status of data offloading from a topic to long-term storage",
          _offload_status, (("-w", "--wait-complete"), {"action": "store_true", "dest": "wait"}))


def first_ledger_within_threshold(ledgers, threshold: int):
    """
    Pulsar's CLI choice of where an offload stops: walking the ledgers newest first, the ledger
    after the one whose addition makes the kept size exceed ``threshold`` (everything before it
    is offloaded); None when the whole topic fits. ``ledgers``: (ledger id, size), oldest first.
    """
    kept = 0
    previous = None
    for ledger_id, size in reversed(list(ledgers)):
        if previous is None:
            previous = ledger_id
        kept += size
        if kept > threshold:
            return {"ledgerId": previous, "entryId": 0, "partitionIndex": -1}
        previous = ledger_id
    return None


def _offload(a, c, path):
    threshold = parse_bytes(a.size_threshold)
    stats = c.get(path + "/internalStats")
    ledgers = [(ledger["ledgerId"], ledger.get("size", 0)) for ledger in stats.get("ledgers") or []]
    if not ledgers:
        raise CommandError("Topic doesn't have any data")
    # The last ledger's size is the current one's (Pulsar's CLI fills it in the same way).
    ledgers[-1] = (ledgers[-1][0], stats.get("currentLedgerSize", ledgers[-1][1]))
    message_id = first_ledger_within_threshold(ledgers, threshold)
    if message_id is None:
        return "Nothing to offload"
    c.put(path + "/offload", message_id)
    return (f"Offload triggered for {_full_name(path)} for messages before "
            f"{message_id['ledgerId']}:{message_id['entryId']}:{message_id['partitionIndex']}")


def _full_name(path: str) -> str:
    """``persistent://t/ns/topic`` of the REST path ``/admin/v2/persistent/t/ns/topic``."""
    domain, rest = path.split("/", 4)[3:]
    return f"{domain}://" + "/".join(unquote(part) for part in rest.split("/"))


def _offload_status(a, c, path):
    status = c.get(path + "/offload")
    while a.wait and status.get("status") == "RUNNING":
        _sleep(POLL_SECONDS)
        status = c.get(path + "/offload")
    state = status.get("status")
    if state == "NOT_RUN":
        return f"Offload has not been run for {_full_name(path)} since broker startup"
    if state == "RUNNING":
        return "Offload is currently running"
    if state == "SUCCESS":
        return "Offload was a success"
    # Pulsar prints the first line on stdout before failing with the second.
    raise CommandError(f"Error in offload\nError offloading: {status.get('lastError', '')}")
