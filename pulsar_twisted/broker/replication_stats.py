"""
Pulsar's ``ReplicatorStats`` of a topic, one per remote cluster, as the admin API's ``replication``
map and the ``pulsar_replication_*`` metrics show them.

Each is made of two halves that live in different places:

* outbound, from this cluster to the remote one: the topic's ``Replicator`` for that cluster
  (``topic.replicators[cluster].stats()``: msgRateOut, msgThroughputOut, msgRateExpired,
  replicationBacklog, connected, replicationDelayInSeconds, outboundConnection,
  outboundConnectedSince);
* inbound, from the remote cluster to this one: the remote cluster's replicator publishes here
  through an ordinary producer named ``pulsar.repl.<remote>--><this cluster>``; its rates, address
  and connection time are msgRateIn, msgThroughputIn, inboundConnection, inboundConnectedSince.

As in Pulsar's ``PersistentTopic.getStats``, the map has an entry per replicator of the topic only
(a remote cluster that publishes here but is not replicated to has none), and replication
producers are left out of the topic's ``publishers`` list while their rates still count in the
topic's msgRateIn; the replicators' outbound rates count in its msgRateOut.
"""

from pulsar_twisted.broker.replication import source_cluster


def empty_replicator_stats() -> dict:
    """One ``ReplicatorStatsImpl`` with Pulsar's defaults, its keys in Pulsar's JSON order."""
    return {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
            "msgRateExpired": 0.0, "replicationBacklog": 0, "connected": False,
            "replicationDelayInSeconds": 0, "inboundConnection": None,
            "inboundConnectedSince": None, "outboundConnection": None,
            "outboundConnectedSince": None}


def replicators_of(topic) -> dict:
    """``{remote cluster: Replicator}`` of ``topic`` (empty for topics that do not replicate,
    and for topic objects from before replication had the attribute)."""
    return getattr(topic, "replicators", None) or {}


def split_publishers(publishers) -> tuple:
    """``(local publishers, {source cluster: publisher})`` of a list of PublisherStats dicts."""
    local, remote = [], {}
    for publisher in publishers:
        cluster = source_cluster(publisher.get("producerName"))
        if cluster is None:
            local.append(publisher)
        else:
            remote[cluster] = publisher
    return local, remote


def replication(replicators, remote_publishers) -> dict:
    """
    ``{remote cluster: ReplicatorStats}`` for ``replicators`` (``{cluster: Replicator}``), the
    inbound half taken from ``remote_publishers`` (``{source cluster: PublisherStats}``).
    """
    out = {}
    for cluster, replicator in sorted(replicators.items()):
        stats = empty_replicator_stats()
        stats.update(replicator.stats())
        publisher = remote_publishers.get(cluster)
        if publisher is not None:
            stats["msgRateIn"] = publisher.get("msgRateIn", 0.0)
            stats["msgThroughputIn"] = publisher.get("msgThroughputIn", 0.0)
            stats["inboundConnection"] = publisher.get("address")
            stats["inboundConnectedSince"] = publisher.get("connectedSince")
        out[cluster] = stats
    return out


def topic_replication(topic) -> dict:
    """The ``replication`` map of ``topic`` (empty, and cheap, when it has no replicators)."""
    replicators = replicators_of(topic)
    if not replicators:
        return {}
    remote = {}
    for producer in list(topic.producers.values()):
        cluster = source_cluster(producer.name)
        if cluster is not None and cluster in replicators:
            remote[cluster] = producer.stats()
    return replication(replicators, remote)


def outbound_rates(topic) -> tuple:
    """``(msgRateOut, msgThroughputOut)`` of the topic's replicators together, which Pulsar counts
    in the topic's rates out (its dispatch to subscriptions is the rest)."""
    rate = throughput = 0.0
    for replicator in list(replicators_of(topic).values()):
        stats = replicator.stats()
        rate += stats.get("msgRateOut", 0.0)
        throughput += stats.get("msgThroughputOut", 0.0)
    return rate, throughput


def add_replication(total: dict, stats: dict) -> None:
    """
    Fold one partition's ``replication`` map into the partitioned topic's (Pulsar's
    ``ReplicatorStatsImpl.add``): rates and backlogs summed, connected only if every partition's
    replicator is, the largest delay; the connection fields are per partition and stay unset.
    """
    for cluster, part in stats.items():
        agg = total.get(cluster)
        if agg is None:
            agg = total[cluster] = empty_replicator_stats()
            agg["connected"] = True
        for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut",
                    "msgRateExpired", "replicationBacklog"):
            agg[key] += part.get(key, 0)
        agg["connected"] = agg["connected"] and bool(part.get("connected"))
        agg["replicationDelayInSeconds"] = max(agg["replicationDelayInSeconds"],
                                               part.get("replicationDelayInSeconds", 0))
