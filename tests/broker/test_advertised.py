"""
Advertised listeners (issue 13 item 2): Pulsar's validation of ``advertisedListeners`` /
``internalListenerName`` / ``bindAddresses``, binary and HTTP lookups answering the client's
listener (or failing with "the broker do not have <name> listener"), the connection-specific
listener of a bind address, and a non-owner answering the owner's URLs for that listener.
"""

import json

from twisted.internet import defer
from twisted.internet.testing import MemoryReactor
from twisted.trial import unittest

from pulsar_twisted.broker.advertised import (
    AdvertisedListener, bind_addresses, listeners_from_json, listeners_json, parse_advertised_listeners)
from pulsar_twisted.broker.cnx import BrokerProtocolFactory
from pulsar_twisted.broker.ownership import BundleOwnership
from pulsar_twisted.broker.registration import BrokerAddresses
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.config import BrokerConfig, ConfigError
from pulsar_twisted.daemons.broker import check_config
from pulsar_twisted.daemons.standalone import StandaloneConfig, StandaloneService, check_standalone
from pulsar_twisted.daemons.tree import ListeningService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from tests.web.support import WebTestCase

T = api.BaseCommand
LISTENERS = ("internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,"
             "external:pulsar://broker.example.com:16650")
TOPIC = "persistent://public/default/listeners"


def lookup(listener=None, topic=TOPIC, request_id=5):
    command = api.CommandLookupTopic(topic=topic, request_id=request_id)
    if listener is not None:
        command.advertised_listener_name = listener
    return T(type=T.LOOKUP, lookupTopic=command)


class ParseTests(unittest.TestCase):
    def test_listeners_and_default_internal(self):
        """Entries grouped by name in order; the first is the internal listener by default."""
        listeners, internal = parse_advertised_listeners(LISTENERS)
        self.assertEqual(internal, "internal")
        self.assertEqual(list(listeners), ["internal", "external"])
        self.assertEqual(listeners["internal"], AdvertisedListener(
            "internal", "pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"))
        self.assertEqual(listeners["external"].broker_url_tls, "")
        self.assertEqual(parse_advertised_listeners(LISTENERS, "external")[1], "external")
        self.assertEqual(parse_advertised_listeners(""), ({}, ""))

    def test_refusals(self):
        """What Pulsar's MultipleListenerValidator refuses, each naming the key."""
        cases = {
            "pulsar://h:1": "invalid",  # the name is "pulsar", the value "//h:1"
            ":pulsar://h:1": "no listener name",
            "a:pulsar://h:1,a:pulsar://g:2": "redundant pulsar://",
            "a:pulsar://h:1,a:pulsar+ssl://h:2,a:http://h:3": "at most two",
            "a:pulsar://h:1,b:pulsar://h:1": "different listeners",
            "a:ftp://h:1": "scheme 'ftp'",
            "a:pulsar://h": "invalid",
            "a:pulsar://h:notaport": "invalid",
        }
        for text, reason in cases.items():
            e = self.assertRaises(ConfigError, parse_advertised_listeners, text)
            self.assertIn("advertisedListeners", str(e))
            self.assertIn(reason, str(e))
        e = self.assertRaises(ConfigError, parse_advertised_listeners, LISTENERS, "nope")
        self.assertIn("internalListenerName", str(e))

    def test_same_port_other_host_allowed(self):
        """Pulsar keys the one-listener rule on host:port: localhost and 127.0.0.1 differ."""
        listeners, _ = parse_advertised_listeners("a:pulsar://127.0.0.1:6650,b:pulsar://localhost:6650")
        self.assertEqual(listeners["b"].broker_url, "pulsar://localhost:6650")

    def test_checked_at_start_up(self):
        self.assertRaises(ConfigError, check_standalone, StandaloneConfig(advertisedListeners="x"))
        self.assertRaises(ConfigError, check_config, BrokerConfig(
            metadataStoreUrl="zk:h:1", advertisedListeners="a:pulsar://h:1", internalListenerName="b"))
        e = self.assertRaises(ConfigError, check_standalone, StandaloneConfig(bindAddresses="a:gopher://h:1"))
        self.assertIn("bindAddresses", str(e))

    def test_bind_addresses(self):
        [bind] = bind_addresses(StandaloneConfig(bindAddresses="external:pulsar://0.0.0.0:6660"))
        self.assertEqual((bind.listener, bind.scheme, bind.host, bind.port),
                         ("external", "pulsar", "0.0.0.0", 6660))

    def test_json_round_trip(self):
        listeners, _ = parse_advertised_listeners(LISTENERS)
        data = listeners_json(listeners)
        self.assertEqual(data["internal"], {"brokerServiceUrl": "pulsar://10.0.0.5:6650",
                                            "brokerServiceUrlTls": "pulsar+ssl://10.0.0.5:6651"})
        self.assertEqual(listeners_from_json(json.loads(json.dumps(data))), listeners)
        self.assertEqual(listeners_from_json("junk"), {})


class AddressesTests(unittest.TestCase):
    def test_internal_listener_is_the_broker_url(self):
        """With listeners, lookups without a name answer the internal listener's URLs, and the
        registration and ownership data carry every listener (Pulsar's advertisedListeners)."""
        addresses = BrokerAddresses(BrokerConfig(metadataStoreUrl="zk:h:1", advertisedListeners=LISTENERS,
                                                 advertisedAddress="b1"))
        self.assertEqual((addresses.broker_url, addresses.broker_url_tls),
                         ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"))
        self.assertEqual(addresses.broker_id, "b1:8080")
        data = json.loads(addresses.broker_data())
        self.assertEqual(data["advertisedListeners"]["external"],
                         {"brokerServiceUrl": "pulsar://broker.example.com:16650"})
        self.assertEqual(addresses.urls()["advertisedListeners"], data["advertisedListeners"])

    def test_without_listeners_unchanged(self):
        addresses = BrokerAddresses(BrokerConfig(metadataStoreUrl="zk:h:1", advertisedAddress="b1"))
        self.assertEqual((addresses.broker_url, addresses.broker_url_tls), ("pulsar://b1:6650", ""))
        self.assertEqual(addresses.urls()["advertisedListeners"], {})


class BinaryLookupTests(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness(advertisedListeners=LISTENERS)
        yield self.harness.start()
        self.client = self.harness.client()

    def answer(self, command):
        self.client.send(command)
        [response] = self.client.commands(T.LOOKUP_RESPONSE)
        return response.lookupTopicResponse

    def test_listener_urls(self):
        external = self.answer(lookup("external"))
        self.assertEqual(external.response, api.CommandLookupTopicResponse.Connect)
        self.assertEqual(external.brokerServiceUrl, "pulsar://broker.example.com:16650")
        self.assertFalse(external.HasField("brokerServiceUrlTls"))
        internal = self.answer(lookup("internal"))
        self.assertEqual((internal.brokerServiceUrl, internal.brokerServiceUrlTls),
                         ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"))

    def test_unknown_listener(self):
        """Pulsar's error: ServiceNotReady, "the broker do not have <name> listener"."""
        failed = self.answer(lookup("nope"))
        self.assertEqual(failed.response, api.CommandLookupTopicResponse.Failed)
        self.assertEqual(failed.error, api.ServiceNotReady)
        self.assertEqual(failed.message, "the broker do not have nope listener")

    def test_no_name_answers_broker_url(self):
        self.assertEqual(self.answer(lookup()).brokerServiceUrl, self.harness.broker.broker_url)

    def test_bind_address_listener_is_the_default(self):
        """A connection accepted on a bindAddresses port looks up under its listener when the
        client names none; a name sent by the client wins."""
        self.client.protocol.factory = BrokerProtocolFactory(self.harness.broker, self.harness.clock,
                                                             listener_name="external")
        self.assertEqual(self.answer(lookup()).brokerServiceUrl, "pulsar://broker.example.com:16650")
        self.assertEqual(self.answer(lookup("internal")).brokerServiceUrl, "pulsar://10.0.0.5:6650")


class OwnerListenerTests(unittest.TestCase):
    @defer.inlineCallbacks
    def test_non_owner_answers_owner_listener(self):
        """A lookup answered by a broker that does not own the bundle redirects to the owner's
        URL for the client's listener, read from the owner's ownership data."""
        harness = BrokerHarness(advertisedListeners="internal:pulsar://b:6650,external:pulsar://b.example:16650")
        yield harness.start()
        owner_urls = BrokerAddresses(BrokerConfig(
            metadataStoreUrl="zk:h:1", advertisedAddress="a",
            advertisedListeners="internal:pulsar://a:6650,external:pulsar://a.example:16650")).urls()
        owner = BundleOwnership(harness.store.new_session(), harness.clock, owner_urls, check_interval=0)
        yield owner.lookup(parse_topic(TOPIC))        # a takes the bundle
        harness.broker.ownership = BundleOwnership(harness.store.new_session(), harness.clock,
                                                   {"nativeUrl": "pulsar://b:6650"}, check_interval=0)
        client = harness.client()
        client.send(lookup("external"))
        client.send(lookup("missing", request_id=6))
        external, missing = [c.lookupTopicResponse for c in client.commands(T.LOOKUP_RESPONSE)]
        self.assertEqual((external.response, external.brokerServiceUrl),
                         (api.CommandLookupTopicResponse.Redirect, "pulsar://a.example:16650"))
        self.assertEqual((missing.error, missing.message),
                         (api.ServiceNotReady, "the broker do not have missing listener"))
        yield owner.stop()
        yield harness.broker.ownership.stop()


class HttpLookupTests(WebTestCase):
    config = dict(advertisedListeners=LISTENERS)

    @defer.inlineCallbacks
    def test_http_listener(self):
        """?listenerName= and X-Pulsar-ListenerName pick the listener; unknown: 503."""
        path = "/lookup/v2/topic/persistent/public/default/http-listeners"
        status, body, _ = yield self.request("GET", path + "?listenerName=external")
        self.assertEqual((status, body["brokerUrl"]), (200, "pulsar://broker.example.com:16650"))
        status, body, _ = yield self.request("GET", path, headers={b"X-Pulsar-ListenerName": [b"internal"]})
        self.assertEqual((body["brokerUrl"], body["brokerUrlTls"]),
                         ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"))
        status, body, _ = yield self.request("GET", path + "?listenerName=nope")
        self.assertEqual(status, 503)
        self.assertIn("the broker do not have nope listener", json.dumps(body))


class BindAddressListenerTests(unittest.TestCase):
    def test_bind_addresses_listen_before_the_plain_port(self):
        """Each bindAddresses entry is one more listener, before the plain binary port (the
        readiness signal); its binary factory carries the listener name."""
        config = StandaloneConfig(advertisedListeners=LISTENERS + ",web:http://127.0.0.1:18081",
                                  bindAddresses="external:pulsar://127.0.0.1:16650,web:http://127.0.0.1:18081")
        reactor = MemoryReactor()
        root = StandaloneService(config, reactor=reactor)
        listening = [child for child in root if isinstance(child, ListeningService)]
        self.assertEqual([s.name for s in listening], [
            "web", "external pulsar://127.0.0.1:16650", "web http://127.0.0.1:18081", "binary"])
        root.broker = object()
        binary = listening[1]
        self.successResultOf(defer.maybeDeferred(binary.startService))
        port, factory, _, interface = reactor.tcpServers[0]
        self.assertEqual((port, interface, factory.listener_name), (16650, "127.0.0.1", "external"))
