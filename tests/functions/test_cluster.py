"""Two FunctionsWorkers sharing one (fake) cluster: the leader is the coordinate subscription's
active consumer, the other forwards writes to it over the v3 routes, status is asked of the
worker running each instance, and the instances of a worker that left are reassigned."""

import io
import json

from twisted.internet import defer, task
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.functions.errors import FunctionsError
from pulsar_twisted.functions.membership import Coordinator
from pulsar_twisted.functions.worker import FunctionsWorker
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import namespace_path, tenant_path
from pulsar_twisted.web.routing import RouterResource
from pulsar_twisted.web.site import make_v3_router
from tests.functions.test_platform import FakeClient, StatsAgent
from tests.functions.test_supervisor import FakeLauncher
from tests.functions.test_worker import CODE, CONFIG

COORDINATE = "persistent://public/functions/coordinate"


class RoutedForwarder:
    """The Forwarder's contract over the other worker's v3 routes, rendered in memory."""

    def __init__(self, workers):
        self.workers = workers
        self.calls = []

    async def call(self, base_url, method, path, body=None, content_type=None):
        self.calls.append((base_url, method, path))
        worker = self.workers[base_url]
        request = DummyRequest(path.lstrip("/").split("/"))
        request.method, request.path = method.encode(), path.encode()
        request.uri = request.path
        request.content = io.BytesIO(body or b"")
        request.requestHeaders.setRawHeaders(b"x-pulsar-forwarded", [b"true"])   # as Forwarder's
        if content_type:
            request.requestHeaders.setRawHeaders(b"content-type", [content_type.encode()])
        RouterResource(make_v3_router(lambda: worker)).render(request)
        assert request.finished
        raw = b"".join(request.written)
        answer = json.loads(raw) if raw else None
        if (request.responseCode or 200) >= 400:
            raise FunctionsError(answer["reason"], request.responseCode)
        return answer


class ClusterTests(SynchronousTestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.wait(self.store.put(tenant_path("public"), b"{}"))
        self.wait(self.store.put(namespace_path("public/default"), b"{}"))
        self.topics, self.subscriptions = {}, {}
        self.by_url = {}
        self.forwarder = RoutedForwarder(self.by_url)
        self.launchers = {}

    def wait(self, d):
        return self.successResultOf(defer.ensureDeferred(d))

    def worker(self, worker_id):
        client = FakeClient(self.topics, self.subscriptions, self.clock)
        url = f"http://{worker_id}:6750"
        coordinator = Coordinator(client, self.clock, COORDINATE, worker_id, url,
                                  "http://broker:8080", check_interval=1, reschedule_timeout=3,
                                  agent=StatsAgent(client))
        launched = self.launchers[worker_id] = []

        def launcher(spec_path, instance_id):
            launched.append(FakeLauncher(auto_exit=True))
            return launched[-1]
        worker = FunctionsWorker(self.store, self.clock, launcher, "pulsar://broker:6650", url,
                                 self.mktemp(), worker_id, client=client, coordinator=coordinator,
                                 forwarder=self.forwarder)
        self.by_url[url] = worker
        self.wait(worker.start())
        return worker

    def test_two_workers_share_and_take_over(self):
        a, b = self.worker("a"), self.worker("b")
        self.clock.advance(1)                  # a's membership check sees b
        self.assertEqual((a.is_leader, b.is_leader), (True, False))
        self.assertEqual(sorted(a.coordinator.members), ["a", "b"])

        # Created through b: forwarded to the leader, which writes the record and assignments.
        self.wait(b.register("public", "default", "f", dict(CONFIG, parallelism=2), CODE))
        self.assertEqual(self.forwarder.calls[0][:2], ("http://a:6750", "POST"))
        self.assertEqual(b.list("public", "default"), ["f"])
        self.assertEqual({k: v["workerId"] for k, v in b.assignments.table.items()},
                         {"public/default/f:0": "a", "public/default/f:1": "b"})
        self.assertEqual((sorted(a.functions[("public", "default", "f")].supervisors),
                          sorted(b.functions[("public", "default", "f")].supervisors)), ([0], [1]))

        # Status through b: instance 0 is asked of a.
        status = self.wait(b.status("public", "default", "f"))
        self.assertEqual([i["status"]["workerId"] for i in status["instances"]], ["a", "b"])
        self.assertIn(("http://a:6750", "GET", "/admin/v3/functions/public/default/f/0/status"),
                      self.forwarder.calls)

        # Stop through b (forwarded): the record keeps it; a stops its instance.
        self.wait(b.set_running("public", "default", "f", False, instance=0))
        self.assertEqual(a.functions[("public", "default", "f")].supervisors[0].state.value, "stopped")
        self.wait(b.set_running("public", "default", "f", True, instance=0))

        # b dies (its consumer goes): after rescheduleTimeout a takes instance 1 over.
        b._started = False
        b.coordinator.consumer.closed = True
        self.clock.advance(1)
        self.assertEqual(a.assigned_worker("public", "default", "f", 1), "b")
        self.clock.advance(3)
        self.assertEqual(a.assigned_worker("public", "default", "f", 1), "a")
        self.assertEqual(sorted(a.functions[("public", "default", "f")].supervisors), [0, 1])
        self.assertEqual(len(self.launchers["a"]), 2)

        # A replacement worker rebuilds everything from the topics and gets work again when the
        # leader reassigns (here: a new function).
        c = self.worker("c")
        self.clock.advance(1)
        self.assertEqual(c.list("public", "default"), ["f"])
        self.wait(c.register("public", "default", "g", CONFIG, CODE))
        self.assertEqual(c.assigned_worker("public", "default", "g", 0), "c")
        self.assertEqual(sorted(c.functions[("public", "default", "g")].supervisors), [0])

    def test_forwarded_write_is_not_forwarded_again(self):
        """A write forwarded to a worker that is not the leader (views disagreeing) answers 503
        instead of travelling on."""
        self.worker("a")
        b = self.worker("b")
        # b believes b itself leads (a stale view): its forward comes back to it, refused.
        b.coordinator.leader_name = "b"
        b.coordinator.members["b"] = "http://b:6750"
        failure = self.failureResultOf(defer.ensureDeferred(
            b.register("public", "default", "f", CONFIG, CODE)), FunctionsError)
        self.assertEqual(failure.value.status, 503)
        self.assertEqual(self.forwarder.calls,
                         [("http://b:6750", "POST", "/admin/v3/functions/public/default/f")])

    def test_leader_gone_the_next_active_consumer_leads(self):
        a, b = self.worker("a"), self.worker("b")
        self.clock.advance(1)
        self.wait(a.register("public", "default", "f", CONFIG, CODE))
        self.assertEqual(a.assigned_worker("public", "default", "f", 0), "a")
        # a dies; the broker makes b's consumer active.
        a._started = False
        consumers = self.subscriptions[(COORDINATE, "participants")]
        consumers[0].closed, consumers[0].is_active, consumers[1].is_active = True, False, True
        self.clock.advance(0.25)
        self.assertTrue(b.is_leader)
        self.clock.advance(4)
        self.assertEqual(b.assigned_worker("public", "default", "f", 0), "b")
        self.assertEqual(sorted(b.functions[("public", "default", "f")].supervisors), [0])
        self.wait(b.deregister("public", "default", "f"))
        self.assertEqual((b.list("public", "default"), b.assignments.table), ([], {}))
