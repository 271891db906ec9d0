"""
An in-process broker for tests (house style: Tahoe's no-network grid): the real BrokerService over
the embedded metadata store in memory and a managed-ledger factory, all on one ``task.Clock``,
with clients driving real ``ServerConnection`` protocols through ``StringTransport``.
"""

import json

from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from pulsar_twisted.broker.cnx import ServerConnection
from pulsar_twisted.broker.service import BrokerService
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.testing.fake_ledger import FakeLedgerClient
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames

T = api.BaseCommand


class FakeClient:
    """One client connection: ``send(command)`` in, ``received()`` out (decoded frames)."""

    def __init__(self, harness, peer_port: int):
        self.harness = harness
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", peer_port))
        self.protocol = ServerConnection(harness.broker, harness.clock)
        self.protocol.makeConnection(self.transport)
        self.decoder = frames.FrameDecoder(1 << 30)
        self._frames = []

    def send(self, command, message: bytes = None) -> None:
        data = (frames.encode_command(command) if message is None
                else frames.encode_payload_command(command, message))
        self.protocol.dataReceived(data)
        self.harness.pump()

    def send_raw(self, data: bytes) -> None:
        self.protocol.dataReceived(data)
        self.harness.pump()

    def received(self):
        """Every frame written to this client since the last call, as (command, message) pairs."""
        self.harness.pump()
        data = self.transport.value()
        self.transport.clear()
        self._frames.extend(self.decoder.feed(data))
        out, self._frames = self._frames, []
        return out

    def commands(self, kind=None):
        return [c for c, _ in self.received() if kind is None or c.type == kind]

    def connect(self):
        self.send(T(type=T.CONNECT, connect=api.CommandConnect(client_version="test", protocol_version=21)))
        [connected] = self.commands(T.CONNECTED)
        return connected.connected

    def close(self):
        self.protocol.connectionLost(None)
        self.harness.pump()


class BrokerHarness:
    """A broker plus clients in memory. ``yield harness.start()`` first."""

    def __init__(self, clock=None, store=None, ledger_client=None, **config):
        self.clock = clock if clock is not None else task.Clock()
        self.config = StandaloneConfig(**config)
        self.store = store if store is not None else EmbeddedMetadataStore(None, self.clock)
        self.ledger_client = ledger_client if ledger_client is not None else FakeLedgerClient(self.clock)
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.store, self.clock,
                                               ManagedLedgerConfig.from_config(self.config))
        self.broker = BrokerService(self.config, self.ml_factory, self.store, self.clock,
                                    "pulsar://localhost:6650")
        self._ports = iter(range(40000, 60000))

    @defer.inlineCallbacks
    def start(self):
        yield self.store.start()
        yield self.broker.start()

    def restart(self) -> "BrokerHarness":
        """
        A new broker over the same metadata store and ledger client (a broker restart; the old
        one is abandoned without a clean shutdown, as after kill -9).
        """
        for client in list(self.broker.connections):
            client.transport.loseConnection()
        return BrokerHarness(clock=self.clock, store=self.store, ledger_client=self.ledger_client,
                             **{k.name: getattr(self.config, k.name) for k in self.config.keys()})

    def client(self) -> FakeClient:
        client = FakeClient(self, next(self._ports))
        client.connect()
        return client

    def write_policies(self, namespace: str = "public/default", **fields) -> None:
        """Change the stored Policies of ``namespace`` behind the admin API's back (as another
        broker's write would), then run what the change sets off."""
        path = f"/admin/policies/{namespace}"
        result = []
        self.store.get(path).addBoth(result.append)
        data, stat = result[0]
        policies = json.loads(data)
        policies.update(fields)
        self.store.put(path, json.dumps(policies).encode(), expected_version=stat.version)
        self.pump()

    def pump(self, rounds: int = 50) -> None:
        """Run everything due now (callLater(0) chains), without moving time forward."""
        for _ in range(rounds):
            if not any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls()):
                return
            self.clock.advance(0)
