"""The proxy's client connections (ProxyConnection on StringTransport, brokers faked): the
handshake, lookups answered through broker connections, relayed connections, limits and the
refresh of client credentials."""

import base64

from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransportWithDisconnection
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proxy.connection import ProxyProtocolFactory, ProxyState
from pulsar_twisted.security import jwt
from pulsar_twisted.wire import frames
from tests.proxy.helpers import FakeBroker, FakeBrokers, ProxyHarness, lookup_answer

T = api.BaseCommand
SECRET = b"s" * 32
AUTH = dict(authenticationEnabled=True, authenticationProviders=["token"],
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
            authenticationRefreshCheckSeconds=10,
            brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
            brokerClientAuthenticationParameters="token:PROXYTOKEN")


def token(role, exp=None):
    claims = {"sub": role}
    if exp is not None:
        claims["exp"] = exp
    return jwt.encode(claims, SECRET)


def lookup(topic, request_id=1):
    return T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic=topic, request_id=request_id))


class HandshakeTests(unittest.TestCase):
    def test_connect_answered_by_the_proxy(self):
        """CONNECT without a target: the proxy answers CONNECTED itself (protocol version min)."""
        client = ProxyHarness().client()
        client.connect(protocol_version=19)
        [connected] = client.commands(T.CONNECTED)
        self.assertEqual(connected.connected.protocol_version, 19)
        self.assertEqual(client.protocol.state, ProxyState.LOOKUPS)

    def test_command_before_connect_closes(self):
        client = ProxyHarness().client()
        client.send(lookup("persistent://public/default/t"))
        self.assertTrue(client.transport.disconnecting)

    def test_producer_on_a_lookup_connection_refused(self):
        """Producers need a relayed connection: NotAllowedError, the connection stays."""
        client = ProxyHarness().client()
        client.connect()
        client.commands()
        client.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic="t", producer_id=1, request_id=4)))
        [error] = client.commands(T.ERROR)
        self.assertEqual((error.error.request_id, error.error.error), (4, api.NotAllowedError))
        self.assertFalse(client.transport.disconnecting)

    def test_bad_credentials_refused(self):
        client = ProxyHarness(**AUTH).client()
        client.connect(method="token", data=b"junk")
        [error] = client.commands(T.ERROR)
        self.assertEqual(error.error.error, api.AuthenticationError)
        self.assertTrue(client.transport.disconnecting)

    def test_connection_limit(self):
        """maxConcurrentInboundConnections: refused before a byte is read, and counted."""
        harness = ProxyHarness(maxConcurrentInboundConnections=1)
        factory = ProxyProtocolFactory(harness.service, harness.clock)
        harness.client()
        self.assertIsNone(factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1)))
        self.assertEqual(harness.service.metrics.rejected_connections, 1)
        self.assertEqual(harness.service.metrics.active_connections, 1)


class LookupTests(unittest.TestCase):
    topic = "persistent://public/default/t"

    def test_lookup_follows_redirects(self):
        """The proxy follows Redirect answers to the owner and tells the client the owner's URL
        with proxy_through_service_url, so the client comes back through the proxy."""
        brokers = FakeBrokers({"b1:6650": {self.topic: lookup_answer("pulsar://b2:6650", redirect=True,
                                                                     authoritative=True)},
                               "b2:6650": {self.topic: lookup_answer("pulsar://b2:6650")}})
        harness = ProxyHarness(brokers=brokers)
        client = harness.client()
        client.connect()
        client.send(lookup(self.topic, request_id=9))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        response = answer.lookupTopicResponse
        self.assertEqual((response.request_id, response.brokerServiceUrl, response.response,
                          response.proxy_through_service_url),
                         (9, "pulsar://b2:6650", api.CommandLookupTopicResponse.Connect, True))
        self.assertEqual([a for a, _ in brokers.dialled], ["b1:6650", "b2:6650"])
        second = [c for c in brokers.brokers["b2:6650"][0].received if c.type == T.LOOKUP]
        self.assertTrue(second[0].lookupTopic.authoritative)
        # pooled: a second lookup dials nothing new
        client.send(lookup(self.topic, request_id=10))
        self.assertEqual(len(client.commands(T.LOOKUP_RESPONSE)), 1)
        self.assertEqual(len(brokers.dialled), 2)
        self.assertEqual(harness.service.metrics.lookup_requests, 2)

    def test_tls_with_broker_answers_the_tls_url(self):
        brokers = FakeBrokers({"b1:6651": {self.topic: lookup_answer("pulsar://b1:6650",
                                                                     url_tls="pulsar+ssl://b1:6651")}})
        harness = ProxyHarness(brokers=brokers, tlsEnabledWithBroker=True,
                               brokerServiceURLTLS="pulsar+ssl://b1:6651",
                               brokerClientTrustCertsFilePath=_ca_file(self))
        client = harness.client()
        client.connect()
        client.send(lookup(self.topic))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.brokerServiceUrl, "pulsar+ssl://b1:6651")
        self.assertEqual(brokers.dialled, [("b1:6651", True)])

    def test_broker_error_passed_on(self):
        """A broker's lookup failure reaches the client with its code and message."""
        fail = api.CommandLookupTopicResponse(response=api.CommandLookupTopicResponse.Failed,
                                              error=api.TopicNotFound, message="no such topic")
        client = ProxyHarness(brokers=FakeBrokers({"b1:6650": {self.topic: fail}})).client()
        client.connect()
        client.send(lookup(self.topic))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual((answer.lookupTopicResponse.error, answer.lookupTopicResponse.message),
                         (api.TopicNotFound, "no such topic"))

    def test_silent_broker_given_up_after_the_operation_timeout(self):
        """A broker that accepts the connection but never answers CONNECT (stopped, hung) holds a
        lookup for operationTimeoutSeconds at most: the connection is dropped and the next broker
        from discovery is asked; a later lookup dials the silent one again. (Without a bound, every
        lookup through it waited for as long as it stayed silent, holding a lookup slot.)"""
        answering = FakeBrokers({"b2:6650": {self.topic: lookup_answer("pulsar://b2:6650")}})
        silent = []

        def connector(address, tls, factory):
            if address != "b1:6650":
                return answering(address, tls, factory)
            cnx = factory.buildProtocol(None)
            transport = StringTransportWithDisconnection()
            transport.protocol = cnx
            cnx.makeConnection(transport)
            silent.append(cnx)
            return defer.succeed(cnx)

        harness = ProxyHarness(brokers=connector, brokerServiceURL="pulsar://b1:6650,b2:6650",
                               operationTimeoutSeconds=5)
        client = harness.client()
        client.connect()
        client.send(lookup(self.topic))
        harness.clock.advance(4.9)
        self.assertEqual(client.commands(T.LOOKUP_RESPONSE), [])
        harness.clock.advance(0.2)
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.brokerServiceUrl, "pulsar://b2:6650")
        self.assertFalse(silent[0].transport.connected)
        self.assertEqual(harness.service.pending_lookups, 0)
        client.send(lookup(self.topic, request_id=2))     # b1's turn again: dialled anew
        self.assertEqual(len(silent), 2)
        harness.clock.advance(5.1)
        self.assertEqual(len(client.commands(T.LOOKUP_RESPONSE)), 1)

    def test_partitioned_metadata_and_schema_relayed_with_client_request_id(self):
        def other(address, command):
            if command.type == T.PARTITIONED_METADATA:
                return [T(type=T.PARTITIONED_METADATA_RESPONSE,
                          partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                              request_id=command.partitionMetadata.request_id, partitions=4))]
            if command.type == T.GET_SCHEMA:
                return [T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=api.CommandGetSchemaResponse(
                    request_id=command.getSchema.request_id, error_code=api.TopicNotFound,
                    error_message="no schema"))]
            if command.type == T.GET_TOPICS_OF_NAMESPACE:
                return [T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                          getTopicsOfNamespaceResponse=api.CommandGetTopicsOfNamespaceResponse(
                              request_id=command.getTopicsOfNamespace.request_id, topics=["a", "b"]))]
            return []
        client = ProxyHarness(brokers=FakeBrokers(other=other)).client()
        client.connect()
        client.send(T(type=T.PARTITIONED_METADATA, partitionMetadata=api.CommandPartitionedTopicMetadata(
            topic=self.topic, request_id=77)))
        client.send(T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(topic=self.topic, request_id=78)))
        client.send(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=api.CommandGetTopicsOfNamespace(
            namespace="public/default", request_id=79)))
        answers = client.commands()
        by_type = {c.type: c for c in answers}
        self.assertEqual(by_type[T.PARTITIONED_METADATA_RESPONSE].partitionMetadataResponse.partitions, 4)
        self.assertEqual(by_type[T.PARTITIONED_METADATA_RESPONSE].partitionMetadataResponse.request_id, 77)
        self.assertEqual(by_type[T.GET_SCHEMA_RESPONSE].getSchemaResponse.error_code, api.TopicNotFound)
        self.assertEqual(by_type[T.GET_SCHEMA_RESPONSE].getSchemaResponse.request_id, 78)
        self.assertEqual(list(by_type[T.GET_TOPICS_OF_NAMESPACE_RESPONSE].getTopicsOfNamespaceResponse.topics),
                         ["a", "b"])

    def test_lookup_limit(self):
        """maxConcurrentLookupRequests: past it, TooManyRequests at once (and counted)."""
        brokers = FakeBrokers(other=lambda a, c: [])
        brokers.lookups = {"b1:6650": {}}
        harness = ProxyHarness(brokers=brokers, maxConcurrentLookupRequests=1)
        harness.service.pending_lookups = 1
        client = harness.client()
        client.connect()
        client.send(lookup(self.topic))
        [answer] = client.commands(T.LOOKUP_RESPONSE)
        self.assertEqual(answer.lookupTopicResponse.error, api.TooManyRequests)
        self.assertEqual(harness.service.metrics.rejected_lookup_requests, 1)

    def test_original_principal_on_the_lookup_connections(self):
        """With authentication, the pool's CONNECT carries the proxy's token and the client's role
        (and, with forwardAuthorizationCredentials, the client's token); pools are per client."""
        brokers = FakeBrokers({"b1:6650": {self.topic: lookup_answer("pulsar://b1:6650")}})
        harness = ProxyHarness(brokers=brokers, forwardAuthorizationCredentials=True, **AUTH)
        for role in ("alice", "bob"):
            client = harness.client()
            client.connect(method="token", data=token(role).encode())
            client.send(lookup(self.topic))
            self.assertEqual(len(client.commands(T.LOOKUP_RESPONSE)), 1)
        connects = [b.received[0].connect for b in brokers.brokers["b1:6650"]]
        self.assertEqual([(c.auth_data, c.original_principal) for c in connects],
                         [(b"PROXYTOKEN", "alice"), (b"PROXYTOKEN", "bob")])
        self.assertEqual(connects[0].original_auth_data, token("alice"))


class LookupConnectionChallengeTests(unittest.TestCase):
    def test_challenge_without_forwarding_answered_with_the_proxy_token(self):
        """Without forwarded credentials the broker can only ask for the proxy's own: the pool
        connection answers with brokerClientAuthenticationParameters' token."""
        topic = "persistent://public/default/t"

        def other(address, command):
            if command.type == T.CONNECT:
                return [T(type=T.CONNECTED, connected=api.CommandConnected(server_version="b",
                                                                           protocol_version=21)),
                        T(type=T.AUTH_CHALLENGE, authChallenge=api.CommandAuthChallenge(
                            challenge=api.AuthData(auth_method_name="token",
                                                   auth_data=b"PulsarAuthRefresh")))]
            return []

        brokers = FakeBrokers({"b1:6650": {topic: lookup_answer("pulsar://b1:6650")}}, other=other)
        client = ProxyHarness(brokers=brokers, **AUTH).client()
        client.connect(method="token", data=token("alice").encode())
        client.send(lookup(topic))
        self.assertEqual(len(client.commands(T.LOOKUP_RESPONSE)), 1)
        [response] = [c for c in brokers.brokers["b1:6650"][0].received if c.type == T.AUTH_RESPONSE]
        self.assertEqual(response.authResponse.response.auth_data, b"PROXYTOKEN")


class RelayTests(unittest.TestCase):
    def open(self, harness, target="10.0.0.1:6650", **connect):
        client = harness.client()
        client.connect(target=target, **connect)
        return client

    def test_relay_handshake_and_bytes_both_ways(self):
        """CONNECT with proxy_to_broker_url: the proxy's CONNECT to the broker, the broker's
        CONNECTED to the client, then bytes (also those sent before CONNECTED) both ways."""
        harness = ProxyHarness(**AUTH)
        client = self.open(harness, method="token", data=token("alice").encode(), protocol_version=20)
        early = frames.encode_command(T(type=T.PING, ping=api.CommandPing()))
        client.protocol.dataReceived(early)
        [(host, port, relay)] = harness.relays
        self.assertEqual((host, port), ("10.0.0.1", 6650))
        self.assertEqual(client.commands(), [])       # nothing before the broker answers
        broker = FakeBroker()
        broker.attach(relay)
        [connect, ping] = broker.received
        self.assertEqual((connect.connect.auth_data, connect.connect.original_principal,
                          connect.connect.protocol_version), (b"PROXYTOKEN", "alice", 20))
        self.assertFalse(connect.connect.HasField("original_auth_data"))
        self.assertEqual(ping.type, T.PING)
        [connected] = client.commands()
        self.assertEqual(connected.type, T.CONNECTED)
        self.assertEqual(client.protocol.state, ProxyState.RELAY)
        client.protocol.dataReceived(b"\x00\x01raw")
        self.assertEqual(broker.transport.value(), b"\x00\x01raw")
        relay.dataReceived(b"from-broker")
        self.assertEqual(client.transport.value(), b"from-broker")
        metrics = harness.service.metrics
        self.assertEqual((metrics.binary_ops, metrics.binary_bytes),
                         (3, len(early) + len(b"\x00\x01raw") + len(b"from-broker")))

    def test_broker_closing_closes_the_client_and_back(self):
        harness = ProxyHarness()
        client = self.open(harness)
        relay = harness.relays[0][2]
        broker = FakeBroker()
        broker.attach(relay)
        relay.connectionLost(None)
        self.assertTrue(client.transport.disconnecting)
        client2 = self.open(harness)
        relay2 = harness.relays[1][2]
        broker2 = FakeBroker()
        broker2.attach(relay2)
        client2.protocol.connectionLost(None)
        self.assertTrue(broker2.transport.disconnecting)

    def test_broker_refusal_passed_to_the_client(self):
        harness = ProxyHarness()
        client = self.open(harness)
        relay = harness.relays[0][2]
        broker = FakeBroker(lambda c: [T(type=T.ERROR, error=api.CommandError(
            request_id=0, error=api.AuthorizationError, message="Invalid roles."))] if c.type == T.CONNECT else [])
        broker.attach(relay)
        [error] = client.commands(T.ERROR)
        self.assertEqual((error.error.error, error.error.message), (api.AuthorizationError, "Invalid roles."))
        self.assertTrue(client.transport.disconnecting)

    def test_target_not_allowed(self):
        """brokerProxyAllowedTargetPorts / HostNames / IPAddresses: refused, nothing dialled."""
        harness = ProxyHarness(brokerProxyAllowedTargetPorts="6650", brokerProxyAllowedHostNames="*.brokers",
                               brokerProxyAllowedIPAddresses="10.0.0.0/8")
        for target in ("10.0.0.1:22", "evil.example.com:6650", "192.168.1.1:6650"):
            client = self.open(harness, target=target)
            [error] = client.commands(T.ERROR)
            self.assertIn("not allowed", error.error.message)
            self.assertTrue(client.transport.disconnecting)
        self.assertEqual(harness.relays, [])
        self.open(harness, target="b1.brokers:6650")
        self.assertEqual(len(harness.relays), 1)

    def test_dial_failure_reported(self):
        harness = ProxyHarness(relay_connector=lambda host, port, relay: defer.fail(
            ConnectionRefusedError("refused")))
        client = self.open(harness)
        [error] = client.commands(T.ERROR)
        self.assertIn("cannot connect to broker 10.0.0.1:6650", error.error.message)

    def test_forwarded_credentials_and_challenge_in_handshake(self):
        """forwardAuthorizationCredentials: the client's token goes as original_auth_data; a
        broker challenge during the handshake is answered with the client's credentials."""
        harness = ProxyHarness(forwardAuthorizationCredentials=True, **AUTH)
        client = self.open(harness, method="token", data=token("alice").encode())
        relay = harness.relays[0][2]
        challenged = []

        def answer(command):
            if command.type == T.CONNECT and not challenged:
                challenged.append(1)
                return [T(type=T.AUTH_CHALLENGE, authChallenge=api.CommandAuthChallenge(
                    challenge=api.AuthData(auth_method_name="token", auth_data=b"PulsarAuthRefresh")))]
            if command.type == T.AUTH_RESPONSE:
                return [T(type=T.CONNECTED, connected=api.CommandConnected(server_version="b",
                                                                           protocol_version=21))]
            return []

        broker = FakeBroker(answer)
        broker.attach(relay)
        connect, response = broker.received
        self.assertEqual(connect.connect.original_auth_data, token("alice"))
        self.assertEqual(response.authResponse.response.auth_data, token("alice").encode())
        self.assertEqual(client.commands()[0].type, T.CONNECTED)


class RefreshTests(unittest.TestCase):
    def test_expired_client_credentials_challenged_in_lookup_phase(self):
        """Like a broker: an expired token gets AUTH_CHALLENGE; a valid answer keeps the
        connection, and is what the proxy forwards from then on."""
        harness = ProxyHarness(forwardAuthorizationCredentials=True, **AUTH)
        harness.clock.advance(1000)
        client = harness.client()
        client.connect(method="token", data=token("alice", exp=1005).encode())
        client.commands()
        harness.clock.advance(10)
        [challenge] = client.commands(T.AUTH_CHALLENGE)
        self.assertEqual(challenge.authChallenge.challenge.auth_data, b"PulsarAuthRefresh")
        fresh = token("alice", exp=2000).encode()
        client.send(T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
            response=api.AuthData(auth_method_name="token", auth_data=fresh))))
        harness.clock.advance(10)
        self.assertFalse(client.transport.disconnecting)
        self.assertEqual(client.protocol.on_behalf.data, fresh)

    def test_unanswered_challenge_closes(self):
        harness = ProxyHarness(**AUTH)
        harness.clock.advance(1000)
        client = harness.client()
        client.connect(method="token", data=token("alice", exp=1005).encode())
        harness.clock.advance(10)
        harness.clock.advance(10)
        self.assertTrue(client.transport.disconnecting)

    def test_broker_challenge_on_lookup_connection_gets_fresh_client_token(self):
        """A broker's challenge on a lookup connection with forwarded credentials: the client is
        challenged first when its token has expired, and its fresh token goes to the broker."""
        harness = ProxyHarness(forwardAuthorizationCredentials=True, **AUTH)
        harness.clock.advance(1000)
        client = harness.client()
        client.connect(method="token", data=token("alice", exp=1005).encode())
        client.commands()
        harness.clock.advance(6)        # expired, before the proxy's own check
        d = client.protocol.valid_client_credentials()
        self.assertNoResult(d)
        self.assertEqual(len(client.commands(T.AUTH_CHALLENGE)), 1)
        fresh = token("alice", exp=2000).encode()
        client.send(T(type=T.AUTH_RESPONSE, authResponse=api.CommandAuthResponse(
            response=api.AuthData(auth_method_name="token", auth_data=fresh))))
        self.assertEqual(self.successResultOf(d), ("token", fresh))


def _ca_file(case):
    from pulsar_twisted.testing.certs import TestPKI
    return TestPKI(case.mktemp()).ca_cert
