"""Fakes for the proxy's unit tests: a client driving a ProxyConnection over StringTransport, and
brokers answering the proxy's lookup connections from canned answers."""

from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from pulsar_twisted.config import ProxyConfig
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proxy.brokers import StaticBrokers
from pulsar_twisted.proxy.connection import ProxyConnection
from pulsar_twisted.proxy.service import ProxyService
from pulsar_twisted.wire import frames

T = api.BaseCommand


def decode_all(transport, decoder=None):
    """The frames written to ``transport`` since the last call (then cleared)."""
    decoder = decoder or frames.FrameDecoder(1 << 30)
    data = transport.value()
    transport.clear()
    return [c for c, _ in decoder.feed(data)]


class FakeBroker:
    """
    The broker side of one proxy-to-broker connection: a StringTransport whose written frames are
    answered by ``answer(command) -> [commands]`` (CONNECT is answered CONNECTED by default).
    """

    def __init__(self, answer=None, auto=False):
        self.answer = answer or (lambda command: [])
        self.auto = auto
        self.received = []
        self.decoder = frames.FrameDecoder(1 << 30)
        self._pumping = False

    def attach(self, protocol_instance, port=6650):
        self.protocol = protocol_instance
        self.transport = _PumpingTransport(self, peerAddress=IPv4Address("TCP", "10.0.0.1", port))
        protocol_instance.makeConnection(self.transport)
        self.pump()
        return protocol_instance

    def pump(self):
        if self._pumping:
            return
        self._pumping = True
        try:
            self._pump()
        finally:
            self._pumping = False

    def _pump(self):
        while True:
            data = self.transport.value()
            if not data:
                return
            self.transport.clear()
            for command, _ in self.decoder.feed(data):
                self.received.append(command)
                replies = self.answer(command)
                if command.type == T.CONNECT and not replies:
                    replies = [T(type=T.CONNECTED, connected=api.CommandConnected(
                        server_version="broker", protocol_version=21))]
                for reply in replies:
                    self.protocol.dataReceived(frames.encode_command(reply))


class _PumpingTransport(StringTransport):
    """With ``broker.auto``, every write is answered at once (a broker on the other end)."""

    def __init__(self, broker, **kwargs):
        super().__init__(**kwargs)
        self.broker = broker

    def write(self, data):
        super().write(data)
        if self.broker.auto:
            self.broker.pump()


class FakeBrokers:
    """A ``connector`` for the proxy's lookup pools: each dial gets a FakeBroker answering
    LOOKUPs from ``lookups[url host:port][topic]`` (a LookupTopicResponse) and the rest with
    ``other(address, command)``."""

    def __init__(self, lookups=None, other=None):
        self.lookups = lookups or {}
        self.other = other or (lambda address, command: [])
        self.dialled = []
        self.brokers = {}

    def __call__(self, address, tls, factory):
        self.dialled.append((address, tls))
        broker = FakeBroker(lambda command: self._answer(address, command), auto=True)
        self.brokers.setdefault(address, []).append(broker)
        return defer.succeed(broker.attach(factory.buildProtocol(None)))

    def _answer(self, address, command):
        if command.type == T.LOOKUP:
            response = api.CommandLookupTopicResponse()
            response.CopyFrom(self.lookups[address][command.lookupTopic.topic])
            response.request_id = command.lookupTopic.request_id
            return [T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response)]
        return self.other(address, command)


def lookup_answer(url, redirect=False, url_tls="", authoritative=False):
    kind = api.CommandLookupTopicResponse
    return kind(brokerServiceUrl=url, brokerServiceUrlTls=url_tls, authoritative=authoritative,
                response=kind.Redirect if redirect else kind.Connect)


class ProxyHarness:
    """A ProxyService on a Clock with static brokers, fake broker connections and relays."""

    def __init__(self, brokers=None, relay_connector=None, **config):
        config.setdefault("brokerServiceURL", "pulsar://b1:6650")
        self.clock = task.Clock()
        self.config = ProxyConfig(**config)
        self.brokers = brokers or FakeBrokers()
        self.relays = []
        self.service = ProxyService(self.config, self.clock, StaticBrokers(self.config, self.config.tlsEnabledWithBroker),
                                    connector=self.brokers,
                                    relay_connector=relay_connector or self._relay_connector,
                                    resolve=lambda host: defer.succeed("10.0.0.1"))
        self._ports = iter(range(30000, 40000))

    def _relay_connector(self, host, port, relay):
        self.relays.append((host, port, relay))
        return defer.Deferred()     # the test attaches the relay to a FakeBroker itself

    def client(self, host="127.0.0.1"):
        return FakeProxyClient(self, host)


class FakeProxyClient:
    """A client of the proxy: ``send(command)``, ``commands()`` written back to it."""

    def __init__(self, harness, host="127.0.0.1"):
        self.harness = harness
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", host, next(harness._ports)))
        self.protocol = ProxyConnection(harness.service, harness.clock)
        self.protocol.makeConnection(self.transport)
        self.decoder = frames.FrameDecoder(1 << 30)

    def send(self, command):
        self.protocol.dataReceived(frames.encode_command(command))

    def commands(self, kind=None):
        return [c for c in decode_all(self.transport, self.decoder) if kind is None or c.type == kind]

    def connect(self, target=None, method="", data=b"", refresh=True, protocol_version=21):
        command = T(type=T.CONNECT, connect=api.CommandConnect(
            client_version="test", protocol_version=protocol_version, auth_method_name=method,
            auth_data=data))
        command.connect.feature_flags.supports_auth_refresh = refresh
        if target:
            command.connect.proxy_to_broker_url = target
        self.send(command)
