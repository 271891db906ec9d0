"""
Lookup, brokers, health and metrics of the admin API (Pulsar's ``TopicLookupBase`` and
``BrokersBase``, and the topic rows /metrics exports).
"""

from pulsar_twisted.broker.admin.base import AdminArea, check_name
from pulsar_twisted.broker.admin.errors import NotFound
from pulsar_twisted.broker.leader import read_leader
from pulsar_twisted.broker.replication_stats import outbound_rates
from pulsar_twisted.common import errors
from pulsar_twisted.common.naming import TopicName
from pulsar_twisted.metadata.layout import BROKERS_ROOT, CLUSTERS_ROOT


class LookupRedirect(Exception):
    """A free bundle's lookup belongs to another broker (the leader, to place it, or the broker
    it chose): Pulsar's HTTP lookup answers 307 to that broker's same lookup, with the
    placement's ``authoritative`` flag in the query (web/topics.py builds the Location)."""

    def __init__(self, http_url: str, http_url_tls: str, authoritative: bool):
        super().__init__(f"lookup redirected to {http_url or http_url_tls}")
        self.http_url = http_url
        self.http_url_tls = http_url_tls
        self.authoritative = authoritative


class BrokersAdmin(AdminArea):
    """This broker and its peers as the admin API shows them."""

    async def lookup(self, name: TopicName, listener_name: str = "", authoritative: bool = False) -> dict:
        """Pulsar's LookupData of the broker serving ``name``. In a cluster that is the bundle's
        owner, possibly another broker: like Pulsar's TopicLookupBase, an owned bundle is answered
        200 with the owner's URLs; a free bundle whose placement (``loadbalance``) names another
        broker raises ``LookupRedirect`` (307 there). ``authoritative``: the client was sent here
        by the leader's placement, so a free bundle is taken here. ``listener_name``: the
        owner's URLs of that advertised listener (503 when it has none, as ServiceNotReady)."""
        await self.check_namespace(name)
        try:
            result = await self.broker.lookup(str(name), listener_name=listener_name,
                                              authoritative=authoritative)
        except errors.NotAllowedError as e:
            # A partition past the partitioned topic's count does not exist (Pulsar's HTTP
            # lookup answers 404 for a topic that does not exist).
            raise NotFound(f"Topic not found: {e}")
        if getattr(result, "placed", False):
            raise LookupRedirect(result.http_url, result.http_url_tls, result.authoritative)
        broker_url, broker_url_tls = result
        # Ownership results (broker/ownership.py) carry the serving broker's web URLs; a plain
        # (url, url_tls) pair, or an empty http_url (standalone), means this broker.
        http_url = getattr(result, "http_url", "") or self.context.web_service_url
        http_url_tls = getattr(result, "http_url_tls", "") if getattr(result, "http_url", "") else ""
        return {"brokerUrl": broker_url, "brokerUrlTls": broker_url_tls or "",
                "httpUrl": http_url, "httpUrlTls": http_url_tls, "nativeUrl": broker_url}

    def broker_id(self) -> str:
        config = self.context.config
        return f"{config.advertisedAddress}:{config.webServicePort}"

    async def list_brokers(self, cluster: str) -> list:
        """The ``host:webport`` of every broker registered under /loadbalance/brokers (cluster
        brokers, broker/cluster.py); a standalone broker registers nothing and lists itself."""
        check_name("Cluster", cluster)
        if not await self.context.clusters.exists(cluster):
            raise NotFound("Cluster does not exist")
        if cluster != self.cluster:
            return []
        return await self.context.store.get_children(BROKERS_ROOT) or [self.broker_id()]

    async def leader_broker(self) -> dict:
        """The elected leader (the /loadbalance/leader node, broker/leader.py); without one
        (standalone, or between a leader's end and the next election) this broker."""
        return await read_leader(self.context.store) or {"brokerId": self.broker_id(),
                                                         "serviceUrl": self.context.web_service_url}

    async def health_check(self) -> str:
        """"ok" when the metadata store answers (Pulsar also round-trips a message; not yet)."""
        await self.context.store.exists(CLUSTERS_ROOT)
        return "ok"

    def topic_metrics(self) -> list:
        """One dict per loaded topic with what /metrics exports (read at scrape time)."""
        return [topic_row(topic) for topic in list(self.broker.topics.values())]


def topic_row(topic) -> dict:
    """What /metrics and ``/broker-stats`` show of one loaded topic (its ``topic_metrics`` row)."""
    msg_in, bytes_in, msg_out, bytes_out = topic.counters.totals()
    rate_in, tput_in, rate_out, tput_out = topic.counters.rates
    repl_rate, repl_tput = outbound_rates(topic)   # Pulsar's rates out include replication
    rate_out += repl_rate
    tput_out += repl_tput
    subscriptions = list(topic.subscriptions.values())
    return {
        "namespace": str(topic.topic_name.namespace_name), "topic": topic.name,
        "rate_in": rate_in, "rate_out": rate_out, "throughput_in": tput_in,
        "throughput_out": tput_out, "in_messages_total": msg_in, "in_bytes_total": bytes_in,
        "out_messages_total": msg_out, "out_bytes_total": bytes_out,
        "msg_backlog": sum(s.backlog() for s in subscriptions),
        "storage_size": topic.storage_size(),
        "producers_count": len(topic.producers),
        "subscriptions_count": len(subscriptions),
        "consumers_count": sum(len(s.consumers) for s in subscriptions),
        "unreadable_entries": getattr(topic, "unreadable_entries", 0),
    }
