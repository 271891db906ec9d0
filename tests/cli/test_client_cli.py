"""pulsar-client: argument handling and output, on a fake client (end to end: tests.client)."""

import io

from twisted.internet import defer, task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.cli import client as cli
from pulsar_twisted.client import errors
from pulsar_twisted.client.message import Message
from pulsar_twisted.client.message_id import MessageId


class FakeHandle:
    def __init__(self, fail=None):
        self.sent = []
        self.acked = []
        self.fail = fail
        self.queue = []

    def send(self, payload, **kwargs):
        if self.fail:
            return defer.fail(self.fail)
        self.sent.append((payload, kwargs))
        return defer.succeed(MessageId(1, len(self.sent)))

    def receive(self):
        return defer.succeed(self.queue.pop(0))

    def acknowledge(self, message):
        self.acked.append(message)
        return defer.succeed(None)

    def close(self):
        return defer.succeed(None)


class FakeClient:
    def __init__(self, handle):
        self.handle = handle
        self.calls = []

    def __call__(self, url, reactor=None, operation_timeout_seconds=None):
        self.url = url
        return self

    def create_producer(self, topic, **conf):
        self.calls.append(("producer", topic, conf))
        return defer.succeed(self.handle)

    def subscribe(self, topic, sub, **conf):
        self.calls.append(("subscribe", topic, sub, conf))
        return defer.succeed(self.handle)

    def close(self):
        return defer.succeed(None)


def message(data, key=None, properties=()):
    metadata = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0,
                                   properties=[api.KeyValue(key=k, value=v) for k, v in properties])
    if key:
        metadata.partition_key = key
    return Message(data, MessageId(1, 1), metadata, "t")


class ClientCliTests(SynchronousTestCase):
    def run_cli(self, argv, handle):
        out, err = io.StringIO(), io.StringIO()
        fake = FakeClient(handle)
        code = self.successResultOf(cli.run(task.Clock(), argv, out, err, client_factory=fake))
        return code, out.getvalue(), err.getvalue(), fake

    def test_produce_splits_and_repeats(self):
        """-m values split on the separator, each sent -n times with the key."""
        handle = FakeHandle()
        code, out, _, fake = self.run_cli(
            ["produce", "t", "-m", "a;b", "-m", "c", "-s", ";", "-n", "2", "-k", "K",
             "--url", "pulsar://h:1"], handle)
        self.assertEqual(code, 0)
        self.assertEqual(fake.url, "pulsar://h:1")
        self.assertEqual([p for p, _ in handle.sent], [b"a", b"b", b"c"] * 2)
        self.assertEqual({kw["partition_key"] for _, kw in handle.sent}, {"K"})
        self.assertEqual(out, "6 messages successfully produced\n")

    def test_consume_prints_like_pulsar(self):
        """Each message is printed after the boundary line; the count ends the output."""
        handle = FakeHandle()
        handle.queue = [message(b"hello", "k1", [("a", "1")]), message(b"bye")]
        code, out, _, fake = self.run_cli(["consume", "t", "-s", "sub", "-n", "2", "-t", "Shared",
                                           "-p", "Earliest"], handle)
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines(), [
            "----- got message -----", "key:[k1], properties:[a=1], content:hello",
            "----- got message -----", "key:[null], properties:[], content:bye",
            "2 messages successfully consumed"])
        self.assertEqual(fake.calls[0][3], {"consumer_type": "Shared",
                                            "initial_position": "Earliest"})
        self.assertEqual(len(handle.acked), 2)

    def test_errors_exit_1(self):
        """A failing send is reported on stderr with exit code 1."""
        code, out, err, _ = self.run_cli(["produce", "t", "-m", "x"],
                                         FakeHandle(errors.TopicTerminated("terminated")))
        self.assertEqual(code, 1)
        self.assertIn("pulsar-client produce: terminated", err)

    def test_bad_property(self):
        """A property without '=' is refused."""
        self.assertRaises(errors.InvalidConfiguration, cli.parse_properties, ["novalue"])
        self.assertEqual(cli.parse_properties(["a=b=c"]), {"a": "b=c"})
