"""OrderedMultiService, Step and ListeningService (pulsar_twisted.daemons.tree), on Deferreds and a
MemoryReactor: no sockets, no processes."""

from twisted.internet import defer
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.daemons.tree import ListeningService, OrderedMultiService, Step


class Recorder:
    """Steps whose starts and stops are recorded, and fire only when the test says so."""

    def __init__(self):
        self.events = []
        self.pending = {}

    def step(self, name, fail_start=False):
        def start():
            self.events.append(f"start {name}")
            d = self.pending[name] = defer.Deferred()
            if fail_start:
                d.errback(RuntimeError(f"{name} cannot start"))
            return d

        def stop():
            self.events.append(f"stop {name}")
        return Step(name, start, stop)

    def finish(self, name):
        self.pending.pop(name).callback(None)


class OrderedMultiServiceTests(SynchronousTestCase):

    def tree(self, recorder, *names, failing=()):
        root = OrderedMultiService()
        for name in names:
            recorder.step(name, fail_start=name in failing).setServiceParent(root)
        return root

    def test_children_start_one_after_another(self):
        """A child starts only once the one before it has started; the tree once the last has."""
        recorder = Recorder()
        root = self.tree(recorder, "a", "b", "c")
        started = root.startService()
        self.assertEqual(recorder.events, ["start a"])
        recorder.finish("a")
        self.assertEqual(recorder.events, ["start a", "start b"])
        self.assertNoResult(started)
        recorder.finish("b")
        recorder.finish("c")
        self.successResultOf(started)
        self.assertEqual(recorder.events, ["start a", "start b", "start c"])

    def test_children_stop_in_reverse(self):
        """stopService stops the children last first, each once the one after it has stopped."""
        events = []
        gate = defer.Deferred()
        root = OrderedMultiService()
        Step("a", stop=lambda: events.append("stop a")).setServiceParent(root)
        Step("b", stop=lambda: (events.append("stop b"), gate)[1]).setServiceParent(root)
        Step("c", stop=lambda: events.append("stop c")).setServiceParent(root)
        self.successResultOf(root.startService())
        stopped = root.stopService()
        self.assertEqual(events, ["stop c", "stop b"])
        self.assertNoResult(stopped)
        gate.callback(None)
        self.successResultOf(stopped)
        self.assertEqual(events, ["stop c", "stop b", "stop a"])

    def test_start_failure_stops_what_started(self):
        """A child that fails to start: the ones before it stop (in reverse), the later ones never
        start, and the tree's start fails with that child's error."""
        recorder = Recorder()
        root = self.tree(recorder, "a", "b", "c", "d", failing=("c",))
        started = root.startService()
        recorder.finish("a")
        recorder.finish("b")
        failure = self.failureResultOf(started, RuntimeError)
        self.assertEqual(str(failure.value), "c cannot start")
        self.assertEqual(recorder.events, ["start a", "start b", "start c", "stop b", "stop a"])
        # twistd then stops the tree: nothing is stopped twice.
        self.successResultOf(root.stopService())
        self.assertEqual(recorder.events[-1], "stop a")

    def test_stop_during_start_up(self):
        """stopService while a child starts: that start is cancelled, the children started so far
        stop, the later ones never start, and the start-up ends in CancelledError."""
        recorder = Recorder()
        root = self.tree(recorder, "a", "b", "c")
        started = root.startService()
        recorder.finish("a")
        stopped = root.stopService()
        self.successResultOf(stopped)
        self.failureResultOf(started, defer.CancelledError)
        self.assertEqual(recorder.events, ["start a", "start b", "stop a"])

    def test_stop_failure_does_not_stop_the_rest(self):
        """A child whose stop fails is logged; the children before it still stop."""
        events = []
        root = OrderedMultiService()
        Step("a", stop=lambda: events.append("stop a")).setServiceParent(root)
        Step("b", stop=lambda: defer.fail(RuntimeError("b will not stop"))).setServiceParent(root)
        self.successResultOf(root.startService())
        self.successResultOf(root.stopService())
        self.assertEqual(events, ["stop a"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_coroutine_steps(self):
        """A Step's start and stop may be coroutine functions."""
        events = []

        async def start():
            events.append("started")

        async def stop():
            events.append("stopped")
        root = OrderedMultiService()
        Step("a", start, stop).setServiceParent(root)
        self.successResultOf(root.startService())
        self.successResultOf(root.stopService())
        self.assertEqual(events, ["started", "stopped"])


class ListeningServiceTests(SynchronousTestCase):

    def test_listens_while_running(self):
        """The endpoint and factory are made at start; the port is closed at stop."""
        reactor = MemoryReactor()
        factory = Factory()
        made = []
        service = ListeningService("web", lambda: TCP4ServerEndpoint(reactor, 8080),
                                   lambda: made.append(factory) or factory)
        self.assertEqual((made, reactor.tcpServers), ([], []))
        self.successResultOf(service.startService())
        [(port, listening_factory, _, _)] = reactor.tcpServers
        self.assertEqual((port, listening_factory), (8080, factory))
        self.assertIsNotNone(service.port)
        self.successResultOf(service.stopService())
        self.assertIsNone(service.port)

    def test_listen_failure_fails_the_start(self):
        """An endpoint that cannot listen fails startService (and so the tree's start-up)."""
        class Refusing:
            def listen(self, factory):
                return defer.fail(OSError("address in use"))
        service = ListeningService("binary", Refusing, Factory)
        self.failureResultOf(service.startService(), OSError)
        self.successResultOf(service.stopService())
