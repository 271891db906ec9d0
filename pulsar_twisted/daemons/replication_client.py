"""
The client a broker's geo-replicators publish to other clusters with (``broker/replication.py``),
and the other clusters' admin API: the broker tree may not import the client library, so its
composition roots (the broker and the standalone daemons) hand them over
(``use_replication_clients``).

Pulsar's keys: ``brokerClientAuthenticationPlugin`` / ``brokerClientAuthenticationParameters``
(token or basic), ``brokerClientTlsEnabled`` with ``brokerClientTrustCertsFilePath`` (the remote
brokers' CA) and ``tlsAllowInsecureConnection``.
"""

import io
import json

from twisted.internet import ssl
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, FileBodyProducer, readBody
from twisted.web.http_headers import Headers

from pulsar_twisted.client.auth import broker_client_authentication
from pulsar_twisted.client.client import Client
from pulsar_twisted.client.http_lookup import AuthorizingAgent




def use_replication_clients(broker, config, reactor) -> None:
    """Give ``broker``'s ReplicationClients its client factory and remote admin."""
    broker.replication_clients.client_factory = replication_client_factory(config, reactor)
    broker.replication_clients.remote_admin = RemoteAdmin(config, reactor)


def replication_client_factory(config, reactor):
    """``url -> Client`` for ``ReplicationClients``; ConfigError for credentials it cannot use
    (at start-up, not at the first replicated message)."""
    authentication = broker_client_authentication(config)
    trust = config.brokerClientTrustCertsFilePath or None

    def make(url: str) -> Client:
        return Client(url, reactor=reactor, authentication=authentication,
                      tls_trust_certs_file_path=trust,
                      tls_allow_insecure_connection=config.tlsAllowInsecureConnection)

    return make


class RemoteAdmin:
    """The admin REST API of other clusters, with the broker-client credentials: what a broker
    asks of them itself (a partitioned topic created in a replicated namespace is created on the
    other clusters too, as Pulsar does)."""

    def __init__(self, config, reactor):
        policy = None
        if config.brokerClientTrustCertsFilePath:
            with open(config.brokerClientTrustCertsFilePath, "rb") as f:
                trust = ssl.Certificate.loadPEM(f.read())
            policy = BrowserLikePolicyForHTTPS(trustRoot=trust)
        agent = (Agent(reactor, contextFactory=policy, connectTimeout=10) if policy is not None
                 else Agent(reactor, connectTimeout=10))
        self.agent = AuthorizingAgent(agent, broker_client_authentication(config))

    async def put_json(self, url: str, body) -> tuple:
        """PUT ``body`` as JSON to ``url``: ``(status, response body)``."""
        response = await self.agent.request(
            b"PUT", url.encode("ascii"), Headers({b"Content-Type": [b"application/json"]}),
            FileBodyProducer(io.BytesIO(json.dumps(body).encode())))
        return response.code, await readBody(response)
