"""
The send arguments of the blocking facade and of the partitioned producer: the official client's
names and order, forwarded unchanged to the per-partition ``Producer.send``.
"""

import inspect

from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client import blocking
from pulsar_twisted.client.partitioned import PartitionedProducer

try:
    import pulsar as official
except ImportError:   # pragma: no cover - the test extra installs it
    official = None


class _RecordingProducer:
    """A Deferred producer recording the keyword arguments of each send."""

    send_timeout = 0

    def __init__(self):
        self.sent = []

    def send(self, payload, **kwargs):
        self.sent.append((payload, kwargs))
        return defer.succeed("mid")


class _FakeReactor:
    def callFromThread(self, fn, *args):
        fn(*args)


class _FakeBlockingClient:
    _timeout = 5
    _reactor = _FakeReactor()

    def __init__(self):
        self.callbacks = []

    def _run_callback(self, fn, *args):
        self.callbacks.append(args)
        fn(*args)


class _Router:
    def __init__(self, index):
        self.index = index

    def choose(self, info, partitions):
        return self.index


def _parameters(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


class BlockingSendTests(SynchronousTestCase):
    def setUp(self):
        # Run the blocking call in this thread: the facade's forwarding is what is tested here.
        self.patch(blocking, "call", lambda reactor, timeout, fn, *a, **kw: fn(*a, **kw))
        self.inner = _RecordingProducer()
        self.producer = blocking.Producer(_FakeBlockingClient(), self.inner)

    def test_signatures_match_official_client(self):
        """send and send_async take the official client's parameters in its order, so that
        positional calls written for it mean the same here."""
        if official is None:
            raise self.skipTest("the official pulsar-client is not installed")
        self.assertEqual(_parameters(blocking.Producer.send), _parameters(official.Producer.send))
        self.assertEqual(_parameters(blocking.Producer.send_async),
                         _parameters(official.Producer.send_async))

    def test_send_forwards_replication_arguments(self):
        """replication_clusters and disable_replication reach the Deferred producer."""
        self.assertEqual(self.successResultOf(
            self.producer.send(b"x", None, None, None, None, ["c2"])), "mid")
        self.producer.send(b"y", disable_replication=True)
        (_, first), (_, second) = self.inner.sent
        self.assertEqual((first["replication_clusters"], first["disable_replication"]),
                         (["c2"], False))
        self.assertEqual((second["replication_clusters"], second["disable_replication"]),
                         (None, True))

    def test_send_async_forwards_replication_arguments(self):
        """send_async forwards them too and reports the message id to the callback."""
        results = []
        self.producer.send_async(b"x", lambda error, mid: results.append((error, mid)),
                                 replication_clusters=["c2", "c3"])
        ((_, kwargs),) = self.inner.sent
        self.assertEqual(kwargs["replication_clusters"], ["c2", "c3"])
        self.assertEqual(results, [(None, "mid")])


class PartitionedSendTests(SynchronousTestCase):
    def test_partitioned_producer_forwards_replication_arguments(self):
        """The partition chosen gets the message's replication arguments unchanged."""
        partitions = [_RecordingProducer(), _RecordingProducer()]
        producer = PartitionedProducer("persistent://public/default/t", partitions, _Router(1))
        self.successResultOf(producer.send(b"x", partition_key="k", replication_clusters=["c2"],
                                           disable_replication=False))
        self.assertEqual(partitions[0].sent, [])
        ((payload, kwargs),) = partitions[1].sent
        self.assertEqual((payload, kwargs["replication_clusters"], kwargs["partition_key"]),
                         (b"x", ["c2"], "k"))
