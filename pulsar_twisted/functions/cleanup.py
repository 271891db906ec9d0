"""
Deleting a function deletes its input subscriptions (``cleanupSubscription``, true by default,
as Pulsar's worker does), through the brokers' admin API: the worker is a client of the
platform, so it asks over HTTP rather than reaching into a broker.
"""

from urllib.parse import quote

from twisted.logger import Logger
from twisted.web.client import Agent, readBody

from pulsar_twisted.common.naming import parse_topic


class SubscriptionCleaner:
    """``delete(topics, subscription)`` with ``DELETE .../subscription/{sub}?force=true`` on
    ``admin_url``; a failure is logged (the function is gone either way), never raised."""

    log = Logger()

    def __init__(self, reactor, admin_url: str, agent=None):
        self.admin_url = admin_url.rstrip("/")
        self.agent = agent if agent is not None else Agent(reactor)

    def url(self, topic: str, subscription: str) -> str:
        name = parse_topic(topic)
        return (f"{self.admin_url}/admin/v2/{name.domain}/{quote(name.tenant, safe='')}/"
                f"{quote(name.namespace, safe='')}/{quote(name.local_name, safe='')}/subscription/"
                f"{quote(subscription, safe='')}?force=true")

    async def delete(self, topics, subscription: str) -> None:
        for topic in topics:
            url = self.url(topic, subscription)
            try:
                response = await self.agent.request(b"DELETE", url.encode("ascii"))
                body = await readBody(response)
            except Exception as e:
                self.log.warn("deleting subscription {sub} of {topic}: {error}", sub=subscription,
                              topic=topic, error=e)
                continue
            if response.code not in (200, 204, 404):
                self.log.warn("deleting subscription {sub} of {topic}: HTTP {code} {body}",
                              sub=subscription, topic=topic, code=response.code, body=body[:200])
