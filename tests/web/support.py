"""
The HTTP service on a real socket (127.0.0.1:0, real reactor) over the in-memory broker harness
(embedded metadata store in memory, managed ledgers on the fake ledger client), driven by treq.
"""

import json

import treq
from twisted.internet import defer, reactor, task
from twisted.trial import unittest
from twisted.web.client import HTTPConnectionPool

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.web.site import make_site
from pulsar_twisted.wire import frames

T = api.BaseCommand


class RealReactorHarness(BrokerHarness):
    """BrokerHarness on the real reactor: nothing to pump, callLater(0) runs on reactor turns."""

    def __init__(self, **config):
        super().__init__(clock=reactor, **config)

    def pump(self, rounds: int = 50) -> None:
        pass


def message(seq: int, payload: bytes = None, **fields) -> bytes:
    meta = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000 + seq, **fields)
    return frames.encode_message(meta, payload if payload is not None else b"m%d" % seq)


class WebTestCase(unittest.TestCase):
    """A broker + AdminService + site per test; ``self.get/put/post/delete(path, body)``."""

    config = {}

    @defer.inlineCallbacks
    def setUp(self):
        self.harness = RealReactorHarness(**self.config)
        yield self.harness.start()
        self.broker = self.harness.broker
        self.admin = AdminService(self.broker, self.harness.store, self.harness.config, reactor,
                                  web_service_url="http://127.0.0.1:8080")
        self.port = reactor.listenTCP(0, make_site(self.admin, self.broker, self.harness.config),
                                      interface="127.0.0.1")
        self.base = f"http://127.0.0.1:{self.port.getHost().port}"
        self.clients = []
        self.pool = HTTPConnectionPool(reactor, persistent=False)

    @defer.inlineCallbacks
    def tearDown(self):
        for client in self.clients:
            client.close()
        yield self.port.stopListening()
        yield self.broker.stopService()
        yield self.harness.ml_factory.shutdown()
        yield self.pool.closeCachedConnections()
        yield settle()

    # ---------------------------------------------------------------- HTTP
    @defer.inlineCallbacks
    def request(self, method: str, path: str, body=None, raw: bytes = None, headers=None):
        """``(status, parsed JSON or raw bytes, response)``."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {b"Content-Type": [b"application/json"]} if data is not None else {}
        hdrs.update(headers or {})
        response = yield treq.request(method, self.base + path, data=data, headers=hdrs, pool=self.pool)
        content = yield response.content()
        ctype = response.headers.getRawHeaders(b"content-type", [b""])[0]
        if content and ctype.startswith(b"application/json"):
            content = json.loads(content)
        return response.code, content, response

    def get(self, path):
        return self.request("GET", path)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path):
        return self.request("DELETE", path)

    @defer.inlineCallbacks
    def expect(self, method, path, status, body=None, **kw):
        code, content, response = yield self.request(method, path, body, **kw)
        self.assertEqual(code, status, f"{method} {path} -> {code} {content!r}")
        return content

    # ---------------------------------------------------------------- broker clients
    def client(self):
        client = self.harness.client()
        self.clients.append(client)
        return client

    @defer.inlineCallbacks
    def producer(self, topic: str, producer_id: int = 1, name: str = None):
        client = self.client()
        request = api.CommandProducer(topic=topic, producer_id=producer_id, request_id=producer_id)
        if name:
            request.producer_name = name
        client.send(T(type=T.PRODUCER, producer=request))
        yield settle()
        [success] = client.commands(T.PRODUCER_SUCCESS)
        return client

    @defer.inlineCallbacks
    def publish(self, client, n: int, producer_id: int = 1, start: int = 0, **fields):
        for seq in range(start, start + n):
            client.send(T(type=T.SEND, send=api.CommandSend(producer_id=producer_id, sequence_id=seq,
                                                            num_messages=1)), message(seq, **fields))
        yield settle()
        receipts = [c.send_receipt for c in client.commands(T.SEND_RECEIPT)]
        return receipts

    @defer.inlineCallbacks
    def consumer(self, topic: str, sub: str, consumer_id: int = 1, permits: int = 0,
                 kind=api.CommandSubscribe.Exclusive, initial=api.CommandSubscribe.Earliest):
        client = self.client()
        client.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=topic, subscription=sub, subType=kind, consumer_id=consumer_id,
            request_id=100 + consumer_id, initialPosition=initial)))
        if permits:
            client.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))
        yield settle()
        return client


@defer.inlineCallbacks
def settle(turns: int = 5):
    """Let the reactor run what is due now (callLater(0) chains, loopback I/O): no sleeping."""
    for _ in range(turns):
        yield task.deferLater(reactor, 0, lambda: None)
