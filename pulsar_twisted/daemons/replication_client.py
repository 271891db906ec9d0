"""
The client a broker's geo-replicators publish to other clusters with (``broker/replication.py``):
the broker tree may not import the client library, so its composition roots (the broker and the
standalone daemons) hand it this factory.

Pulsar's keys: ``brokerClientAuthenticationPlugin`` / ``brokerClientAuthenticationParameters``
(token or basic), ``brokerClientTlsEnabled`` with ``brokerClientTrustCertsFilePath`` (the remote
brokers' CA) and ``tlsAllowInsecureConnection``.
"""

from pulsar_twisted.client.auth import from_plugin
from pulsar_twisted.client.client import Client
from pulsar_twisted.config import ConfigError


def replication_client_factory(config, reactor):
    """``url -> Client`` for ``ReplicationClients``; ConfigError for credentials it cannot use
    (at start-up, not at the first replicated message)."""
    try:
        authentication = from_plugin(config.brokerClientAuthenticationPlugin,
                                     config.brokerClientAuthenticationParameters)
    except ValueError as e:
        raise ConfigError(f"brokerClientAuthenticationPlugin/Parameters: {e}")
    trust = config.brokerClientTrustCertsFilePath or None

    def make(url: str) -> Client:
        return Client(url, reactor=reactor, authentication=authentication,
                      tls_trust_certs_file_path=trust,
                      tls_allow_insecure_connection=config.tlsAllowInsecureConnection)

    return make
