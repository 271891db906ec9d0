"""The functions worker's records on topics (platform.py) and its worker cluster
(membership.py) over an in-memory fake of our client: tables rebuilt from the log, tombstones,
read-your-writes, chunk-free package lookups by location, round-robin scheduling, leadership and
membership from the brokers' stats, and two workers sharing one cluster."""

import json

from twisted.internet import defer, task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.functions.membership import Coordinator, schedule
from pulsar_twisted.functions.platform import PackageTopic, TopicTable


class FakeMessage:
    def __init__(self, message_id, key, payload):
        self._id, self._key, self._payload = message_id, key, payload

    def data(self):
        return self._payload

    def partition_key(self):
        return self._key

    def message_id(self):
        return self._id


class FakeTopic:
    def __init__(self, ledger):
        self.ledger = ledger
        self.messages = []
        self.readers = []

    def append(self, key, payload):
        message = FakeMessage(MessageId(self.ledger, len(self.messages)), key, payload)
        self.messages.append(message)
        for reader in list(self.readers):
            reader.wake()
        return message.message_id()


class FakeReader:
    def __init__(self, topic, position):
        self.topic = topic
        self.position = position
        self.waiting = None
        topic.readers.append(self)

    def has_message_available(self):
        return defer.succeed(self.position < len(self.topic.messages))

    def read_next(self, timeout=None):
        if self.position < len(self.topic.messages):
            self.position += 1
            return defer.succeed(self.topic.messages[self.position - 1])
        self.waiting = defer.Deferred()
        return self.waiting

    def wake(self):
        if self.waiting is not None and self.position < len(self.topic.messages):
            d, self.waiting = self.waiting, None
            self.position += 1
            d.callback(self.topic.messages[self.position - 1])

    def close(self):
        if self in self.topic.readers:
            self.topic.readers.remove(self)
        return defer.succeed(None)


class FakeProducer:
    def __init__(self, topic, conf):
        self.topic = topic
        self.conf = conf

    def send(self, payload, partition_key=None):
        return defer.succeed(self.topic.append(partition_key, payload))

    def close(self):
        return defer.succeed(None)


class FakeConsumer:
    def __init__(self, name, properties):
        self.consumer_name = name
        self.properties = properties
        self.is_active = None
        self.closed = False

    def close(self):
        self.closed = True
        return defer.succeed(None)


class FakeClient:
    """Topics in memory, shared by every FakeClient made on the same ``topics`` dict (one
    cluster); ``subscriptions`` lists each subscription's FakeConsumers."""

    def __init__(self, topics=None, subscriptions=None, clock=None):
        self.topics = {} if topics is None else topics
        self.subscriptions = {} if subscriptions is None else subscriptions
        self.clock = clock or task.Clock()
        self.producers = []

    def topic(self, name):
        return self.topics.setdefault(name, FakeTopic(len(self.topics) + 1))

    def create_reader(self, topic, start_message_id=MessageId.earliest,
                      start_message_id_inclusive=False, **conf):
        t = self.topic(topic)
        if start_message_id == MessageId.earliest:
            position = 0
        else:
            ids = [m.message_id() for m in t.messages]
            position = ids.index(start_message_id) + (0 if start_message_id_inclusive else 1)
        return defer.succeed(FakeReader(t, position))

    def create_producer(self, topic, **conf):
        producer = FakeProducer(self.topic(topic), conf)
        self.producers.append(producer)
        return defer.succeed(producer)

    def subscribe(self, topic, subscription, consumer_type=None, consumer_name=None,
                  properties=None, **conf):
        consumer = FakeConsumer(consumer_name, properties or {})
        consumers = self.subscriptions.setdefault((topic, subscription), [])
        consumers.append(consumer)
        # The broker's ACTIVE_CONSUMER_CHANGE: the first consumer leads, the others wait.
        consumer.is_active = len(consumers) == 1
        return defer.succeed(consumer)


class StatsAgent:
    """The brokers' topic stats of a FakeClient's subscriptions, as Agent answers."""

    def __init__(self, client):
        self.client = client

    def request(self, method, uri, headers=None, body=None):
        from twisted.python.failure import Failure
        from twisted.web.client import ResponseDone
        subs = {}
        for (topic, sub), consumers in self.client.subscriptions.items():
            live = [c for c in consumers if not c.closed]
            active = [c for c in live if c.is_active]
            subs[sub] = {"activeConsumerName": active[0].consumer_name if active else None,
                         "consumers": [{"consumerName": c.consumer_name, "metadata": c.properties}
                                       for c in live]}
        payload = json.dumps({"subscriptions": subs}).encode()

        class Response:
            code, phrase, length = 200, b"OK", len(payload)

            def deliverBody(self, protocol):
                protocol.dataReceived(payload)
                protocol.connectionLost(Failure(ResponseDone()))
        return defer.succeed(Response())


class FailingAgent:
    def request(self, method, uri, headers=None, body=None):
        from twisted.internet.error import ConnectionRefusedError
        return defer.fail(ConnectionRefusedError("broker web service down"))


def run(d):
    """The result of a Deferred or coroutine that the fakes complete synchronously."""
    results = []
    defer.ensureDeferred(d).addBoth(results.append)
    assert results, "did not complete"
    if hasattr(results[0], "raiseException"):
        results[0].raiseException()
    return results[0]


class TopicTableTests(SynchronousTestCase):

    def test_rebuilt_from_the_log_with_tombstones(self):
        """A new table reads the topic from the earliest message: the last value of each key
        wins, an empty value deletes it; writes are applied before they return."""
        client = FakeClient()
        changes = []
        table = TopicTable(client, "persistent://public/functions/metadata",
                           lambda key, old, new: changes.append((key, old, new)))
        run(table.start())
        run(table.write("t/ns/a", {"v": 1}))
        self.assertEqual(table.get("t/ns/a"), {"v": 1})
        run(table.write("t/ns/b", {"v": 2}))
        run(table.write("t/ns/a", {"v": 3}))
        run(table.write("t/ns/b", None))
        self.assertEqual(changes, [("t/ns/a", None, {"v": 1}), ("t/ns/b", None, {"v": 2}),
                                   ("t/ns/a", {"v": 1}, {"v": 3}), ("t/ns/b", {"v": 2}, None)])
        self.assertEqual(client.topic("persistent://public/functions/metadata").messages[-1].data(), b"")
        again = TopicTable(FakeClient(client.topics), "persistent://public/functions/metadata")
        run(again.start())
        self.assertEqual(again.table, {"t/ns/a": {"v": 3}})

    def test_another_writer_is_seen_by_the_tail(self):
        """What another worker writes reaches this table through its tail; a bad message is
        skipped with a log line."""
        topics = {}
        reader = TopicTable(FakeClient(topics), "persistent://public/functions/metadata")
        writer = TopicTable(FakeClient(topics), "persistent://public/functions/metadata")
        run(reader.start())
        run(writer.start())
        run(writer.write("k", {"x": 1}))
        self.assertEqual(reader.get("k"), {"x": 1})
        FakeClient(topics).topic("persistent://public/functions/metadata").append("k", b"{not json")
        self.assertEqual(reader.get("k"), {"x": 1})
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_packages_found_by_location(self):
        """A package is a (chunked) message found again by its location; the producer chunks."""
        client = FakeClient()
        packages = PackageTopic(client, "persistent://public/functions/packages")
        first = run(packages.put("t/ns/f", b"one"))
        second = run(packages.put("t/ns/f", b"two" * 1000))
        self.assertEqual(run(packages.get(second)), b"two" * 1000)
        self.assertEqual(run(packages.get(first)), b"one")
        self.assertEqual(client.producers[0].conf, {"batching_enabled": False,
                                                    "chunking_enabled": True})


class ScheduleTests(SynchronousTestCase):

    def test_round_robin_keeps_live_assignments(self):
        """New instances go to the least loaded worker; instances of a worker that left move;
        the others stay."""
        instances = ["f:0", "f:1", "f:2", "g:0"]
        first = schedule(instances, {}, ["b", "a"])
        self.assertEqual(first, {"f:0": "a", "f:1": "b", "f:2": "a", "g:0": "b"})
        moved = schedule(instances, first, ["a", "c"])
        self.assertEqual({i: moved[i] for i in ("f:0", "f:2")}, {"f:0": "a", "f:2": "a"})
        self.assertEqual({moved["f:1"], moved["g:0"]}, {"c"})
        self.assertEqual(schedule(["f:0"], {"f:0": "a", "old:0": "a"}, ["a"]), {"f:0": "a"})
        self.assertEqual(schedule(instances, first, []), {})


class CoordinatorTests(SynchronousTestCase):

    def test_leader_and_membership_from_the_subscription(self):
        """The active consumer leads; members come from the subscription's consumers with their
        URL; a worker gone for rescheduleTimeout leaves the membership."""
        clock = task.Clock()
        client = FakeClient(clock=clock)
        changes = []
        a = Coordinator(client, clock, "persistent://public/functions/coordinate", "a",
                        "http://a:6750", "http://broker:8080", check_interval=1,
                        reschedule_timeout=3, agent=StatsAgent(client),
                        on_change=lambda: changes.append("a"))
        b = Coordinator(client, clock, "persistent://public/functions/coordinate", "b",
                        "http://b:6750", "http://broker:8080", check_interval=1,
                        reschedule_timeout=3, agent=StatsAgent(client))
        run(a.start())
        run(b.start())
        self.assertTrue(a.is_leader)
        self.assertFalse(b.is_leader)
        self.assertEqual(b.leader_url, "http://a:6750")
        clock.advance(1)
        self.assertEqual(a.members, {"a": "http://a:6750", "b": "http://b:6750"})
        self.assertEqual(changes, ["a", "a"])
        # The stats unreadable for longer than rescheduleTimeout: nobody is taken for gone.
        healthy = a.agent
        a.agent = FailingAgent()
        clock.pump([1] * 5)
        self.assertEqual(sorted(a.members), ["a", "b"])
        a.agent = healthy
        run(b.close())
        clock.advance(1)
        self.assertIn("b", a.members)
        clock.advance(3)
        self.assertEqual(a.members, {"a": "http://a:6750"})
        # The broker makes b's successor active: the leader flag follows the consumer's.
        client.subscriptions[("persistent://public/functions/coordinate", "participants")][0].is_active = False
        self.assertFalse(a.is_leader)
        # The stats name a as the leader before its consumer is told (the broker's failover
        # delay): no leader is known yet, rather than a forwarding its writes to itself.
        self.assertEqual(a.leader_name, "a")
        self.assertIsNone(a.leader_url)
        run(a.close())


class EnsureNamespaceTests(SynchronousTestCase):

    def agent(self, answers):
        from twisted.python.failure import Failure
        from twisted.web.client import ResponseDone
        requests = []

        class Agent:
            def request(agent, method, uri, headers=None, body=None):
                requests.append((method, uri))
                code, payload = answers.pop(0)

                class Response:
                    phrase, length = b"", len(payload)

                    def deliverBody(self, protocol):
                        protocol.dataReceived(payload)
                        protocol.connectionLost(Failure(ResponseDone()))
                Response.code = code
                return defer.succeed(Response())
        return Agent(), requests

    def test_created_or_existing(self):
        """Created with infinite retention; an existing namespace without it is reported (not
        overridden); any other answer is an error naming it."""
        from pulsar_twisted.functions.platform import ensure_namespace
        agent, requests = self.agent([(204, b"")])
        run(ensure_namespace(None, "http://b:8080/", "public/functions", agent=agent))
        self.assertEqual(requests, [(b"PUT", b"http://b:8080/admin/v2/namespaces/public/functions")])
        agent, requests = self.agent([(409, b'{"reason": "exists"}'),
                                      (200, b'{"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}')])
        from twisted.logger import capturedLogs
        with capturedLogs() as events:
            run(ensure_namespace(None, "http://b:8080", "public/functions", agent=agent))
        self.assertEqual(requests[1], (b"GET", b"http://b:8080/admin/v2/namespaces/public/functions/retention"))
        self.assertTrue(any("set-retention" in e.get("log_format", "") for e in events))
        agent, _ = self.agent([(403, b'{"reason": "no"}')])
        with self.assertRaises(RuntimeError) as e:
            run(ensure_namespace(None, "http://b:8080", "public/functions", agent=agent))
        self.assertIn("HTTP 403", str(e.exception))
