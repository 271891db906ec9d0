"""
``--offload`` of a chaos run: tiered storage under the nemesis. The run starts a throw-away S3
server of its own (moto, ``testing.s3.S3Server``) with one bucket, and every broker offloads to
it every ledger as soon as it is sealed (``managedLedgerOffloadThresholdInBytes`` 0), deleting the
bookies' copy at the next trim (``managedLedgerOffloadDeletionLagMs`` 0): with ledgers of 100
entries, every partition offloads about a ledger a second while brokers and bookies are killed and
paused, and S3 itself is frozen (``pause-s3``). moto is never killed: it keeps its objects in
memory, and an object store that loses acknowledged objects is outside what the system must
survive (S3's durability is part of its contract).

After the heal and before the read-back (``settle``):

1. **Catch up** (``wait_offloaded``, bounded): every partition's sealed ledgers (all but the last
   of its internal stats' ``ledgers``, empty ones aside) are ``offloaded``. The automatic offload
   runs after each ledger switch, and a failed one is tried again at the next, so the switches
   after the heal bring every partition up to date; one still behind after the bound is the
   figure ``pending`` (an offload that never completes).
2. **Bookie copies gone** (``unload`` then ``wait_bookie_copies_gone``, bounded): each partition
   unloaded through the admin API; reopened by its next user, its open trims, and with lag 0 the
   trim deletes every offloaded ledger from the bookies.
3. **Figures** (``offload_figures``), from what is stored, not from what brokers say: the
   managed ledgers' nodes in ZooKeeper (offload contexts: complete, ``bkDeleted``), the bookies'
   ledger metadata under ``/ledgers`` (a ledger deleted from the bookies has none), and the
   bucket's objects (``<uid>-ledger-<id>`` and its ``-index``): ledgers offloaded, ledgers whose
   only copy is in S3 (``tiered_only``: bkDeleted and gone from ``/ledgers``), complete offloads
   missing an object (a broken promise: the checker counts it), objects named by no complete
   offload (leftovers of failed or superseded copies: storage, not correctness).

The read-back then reads the ``tiered_only`` ledgers from S3 alone; the checker counts the entries
it got from them (``checker``: ``offload_unexercised`` when a run with offload offloaded nothing,
or read nothing from S3 only, so a silently broken offload cannot pass).

Blocking, like the rest of ``chaos``.
"""

import time

from pulsar_twisted.cli.admin import AdminClient, CommandError
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.mledger.formats import decode_ledger_info, ledger_path
from pulsar_twisted.mledger.offload.format import data_key, index_key
from pulsar_twisted.testing.georeplication import internal_stats

#: The bucket the brokers offload to.
BUCKET = "chaos-offload"
#: The S3 server's name in the faults and logs.
NAME = "s3"


def make_s3(directory: str):
    """A started S3 server with the bucket, its credentials in ``os.environ`` (where the
    daemons' environment comes from) until its ``stop()``."""
    from pulsar_twisted.testing.s3 import S3Server
    server = S3Server(directory)
    server.name = NAME
    server.start()
    try:
        server.install_env()
        server.create_bucket(BUCKET)
    except BaseException:
        server.stop()
        raise
    return server


def broker_config(s3) -> dict:
    """The brokers' offload keys: every sealed ledger offloaded to ``s3``'s bucket, the bookies'
    copy deleted at the next trim."""
    return {
        "managedLedgerOffloadDriver": "S3",
        "s3ManagedLedgerOffloadBucket": BUCKET,
        "s3ManagedLedgerOffloadRegion": s3.region,
        "s3ManagedLedgerOffloadServiceEndpoint": s3.endpoint,
        "managedLedgerOffloadThresholdInBytes": 0,
        "managedLedgerOffloadDeletionLagMs": 0,
    }


def partition_names(topic: str, partitions: int) -> list:
    return [f"{topic}-partition-{p}" for p in range(partitions)]


# ------------------------------------------------------------------------------ 1. catch up
def not_offloaded(stats: dict):
    """Ids of the sealed, non-empty ledgers of internal ``stats`` not offloaded (the last ledger
    is the current one, never offloaded); None if ``stats`` has no ledger list."""
    ledgers = stats.get("ledgers")
    if not ledgers:
        return None
    return [lg["ledgerId"] for lg in ledgers[:-1] if lg["entries"] > 0 and not lg["offloaded"]]


def offload_backlog(admins, topics) -> dict:
    """{topic: ``not_offloaded`` of its internal stats}, asking each admin client in turn until
    one knows (any broker answers, redirecting to the owner)."""
    figures = {}
    for topic in topics:
        figures[topic] = None
        for client in admins:
            pending = not_offloaded(internal_stats(client, topic))
            if pending is not None:
                figures[topic] = pending
                break
    return figures


def wait_offloaded(admins, topics, timeout: float, sleep=time.sleep,
                   monotonic=time.monotonic) -> tuple:
    """Wait until no topic has a sealed ledger left to offload, at most ``timeout`` seconds.
    ("caught up" or "timed out", {topic: ids still not offloaded, None if unknown})."""
    deadline = monotonic() + timeout
    while True:
        figures = offload_backlog(admins, topics)
        if all(v == [] for v in figures.values()):
            return "caught up", figures
        if monotonic() >= deadline:
            return "timed out", figures
        sleep(1.0)


# ------------------------------------------------------------------------------ 2. bookie copies
def unload(admins, topics) -> dict:
    """Unload each topic through the first admin client that can ({topic: error} for those none
    could: a figure, not a failure of the run)."""
    errors = {}
    for topic in topics:
        path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/unload"
        for client in admins:
            try:
                client.put(path)
                errors.pop(topic, None)
                break
            except (CommandError, OSError) as e:
                errors[topic] = f"{type(e).__name__}: {e}"
    return errors


def stored_ledgers(cluster, topics) -> dict:
    """{topic: [(ledger id, entries, OffloadContext or None)]} from the managed ledgers' nodes in
    ZooKeeper; a topic whose node cannot be read maps to None."""
    out = {}
    for topic in topics:
        path = cluster.path(ledger_path(parse_topic(topic).managed_ledger_name))
        try:
            raw, _ = cluster.zk.get(path)
            rows, _, _ = decode_ledger_info(raw)
        except Exception:
            out[topic] = None
            continue
        out[topic] = [(row[0], row[1], row[4]) for row in rows]
    return out


def bookie_ledgers(cluster) -> set:
    """Ids of the ledgers the bookies' metadata still knows (``/ledgers``)."""
    try:
        return set(cluster.ledger_metadata())
    except Exception:
        return set()


def still_on_bookies(ledgers: dict, on_bookies: set) -> list:
    """Ids of the offloaded ledgers of ``stored_ledgers`` whose bookie copy is not gone yet
    (not marked bkDeleted, or still in ``/ledgers``)."""
    return sorted(lid for rows in ledgers.values() for lid, _, off in rows or ()
                  if off is not None and off.complete and (not off.bk_deleted or lid in on_bookies))


def wait_bookie_copies_gone(cluster, topics, timeout: float, sleep=time.sleep,
                            monotonic=time.monotonic) -> tuple:
    """Wait until every offloaded ledger of ``topics`` is marked bkDeleted and gone from
    ``/ledgers``, at most ``timeout`` seconds. ("gone" or "timed out", ids still there)."""
    deadline = monotonic() + timeout
    while True:
        left = still_on_bookies(stored_ledgers(cluster, topics), bookie_ledgers(cluster))
        if not left:
            return "gone", left
        if monotonic() >= deadline:
            return "timed out", left
        sleep(1.0)


# ------------------------------------------------------------------------------ 3. figures
def bucket_keys(s3) -> set:
    """Every key in the bucket (paged)."""
    client = s3.client()
    keys = set()
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            keys.update(o["Key"] for o in page.get("Contents", []))
    finally:
        client.close()
    return keys


def offload_figures(ledgers: dict, on_bookies: set, keys: set) -> dict:
    """The figures of the module docstring's step 3, from ``stored_ledgers``, ``bookie_ledgers``
    and ``bucket_keys``; JSON-able."""
    offloaded, tiered_only, missing, named = [], [], [], set()
    sealed = 0
    for rows in ledgers.values():
        for i, (lid, entries, off) in enumerate(rows or ()):
            if i < len(rows) - 1 and entries > 0:
                sealed += 1
            if off is None or not off.complete:
                continue
            offloaded.append(lid)
            wanted = {data_key(off.uid, lid), index_key(off.uid, lid)}
            named |= wanted
            if wanted - keys:
                missing.append(lid)
            if off.bk_deleted and lid not in on_bookies:
                tiered_only.append(lid)
    return {"sealed": sealed, "offloaded": len(offloaded), "tiered_only": sorted(tiered_only),
            "complete_missing_objects": sorted(missing), "objects": len(keys),
            "leftover_objects": len(keys - named),
            "unreadable_nodes": sorted(t for t, rows in ledgers.items() if rows is None)}


def settle(cluster, s3, topic: str, partitions: int, catch_up_timeout: float = 60.0,
           gone_timeout: float = 30.0, log=print, admin=AdminClient) -> dict:
    """Steps 1-3 of the module docstring for every partition of ``topic``; the figures, with how
    each wait ended and how long it took (``history.meta["offload"]``, which the checker reads)."""
    topics = partition_names(topic, partitions)
    admins = [admin(b.web_service_url, timeout=10) for b in cluster.brokers]
    started = time.monotonic()
    catch_up, pending = wait_offloaded(admins, topics, catch_up_timeout)
    catch_up_seconds = round(time.monotonic() - started, 1)
    log(f"offload: {catch_up} after {catch_up_seconds}s (not offloaded: "
        f"{ {t.rsplit('-', 1)[1]: v for t, v in pending.items()} }); unloading the partitions")
    unload_errors = unload(admins, topics)
    # Reopened by a user: the internal stats ask the owner, which loads the topic.
    offload_backlog(admins, topics)
    started = time.monotonic()
    gone, left = wait_bookie_copies_gone(cluster, topics, gone_timeout)
    figures = offload_figures(stored_ledgers(cluster, topics), bookie_ledgers(cluster),
                              bucket_keys(s3))
    figures.update(catch_up=catch_up, catch_up_seconds=catch_up_seconds,
                   pending={t: v for t, v in pending.items() if v != []},
                   unload_errors=unload_errors, bookie_copies=gone,
                   bookie_copies_seconds=round(time.monotonic() - started, 1),
                   still_on_bookies=left)
    log(format_offload(figures).splitlines()[0])
    return figures


def format_offload(figures: dict) -> str:
    """The figures of ``settle`` as a few lines for a terminal."""
    if "error" in figures:
        return f"offload: the figures could not be made: {figures['error']}"
    lines = [
        f"offload: {figures['offloaded']} of {figures['sealed']} sealed ledgers offloaded (the "
        f"reopening seals one more per partition) "
        f"({figures['catch_up']} after {figures['catch_up_seconds']}s), "
        f"{len(figures['tiered_only'])} in S3 only (bookie copies {figures['bookie_copies']}); "
        f"objects {figures['objects']} (leftovers of failed copies {figures['leftover_objects']}); "
        f"complete offloads missing an object {len(figures['complete_missing_objects'])}",
    ]
    if figures.get("pending"):
        lines.append(f"  not offloaded after the wait: {figures['pending']}")
    if figures.get("still_on_bookies"):
        lines.append(f"  offloaded, still on the bookies: {figures['still_on_bookies'][:20]}")
    if figures.get("complete_missing_objects"):
        lines.append(f"  complete, objects missing: {figures['complete_missing_objects'][:20]}")
    if figures.get("unload_errors") or figures.get("unreadable_nodes"):
        lines.append(f"  unload errors {figures.get('unload_errors')}; managed ledger nodes not "
                     f"read {figures.get('unreadable_nodes')}")
    return "\n".join(lines)
