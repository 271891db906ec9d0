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
        if not request.finished:
            await request.notifyFinish()
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

    def test_a_worker_named_leader_before_it_is_told_does_not_forward_to_itself(self):
        """The brokers' stats name b the leader while b's consumer has not been told yet (the
        failover delay after a re-subscription, or a stale view): b does not forward the write
        to itself (where it was refused as not the leader) but waits for a leader it can reach,
        here a, once the next look at the stats names it."""
        self.worker("a")
        b = self.worker("b")
        b.coordinator.leader_name = "b"
        b.coordinator.members["b"] = "http://b:6750"
        registering = defer.ensureDeferred(b.register("public", "default", "f", CONFIG, CODE))
        self.assertEqual(self.forwarder.calls, [])
        self.clock.advance(1)
        self.wait(registering)
        self.assertEqual(self.forwarder.calls,
                         [("http://a:6750", "POST", "/admin/v3/functions/public/default/f")])

    def test_a_forwarded_write_waits_for_the_leader_to_be_told(self):
        """b forwards a write to a, whom the brokers' stats name the leader, before a's consumer
        has been told (the failover delay after a's subscription): a waits for the word and takes
        the write, where it refused it as not the leader (503)."""
        a, b = self.worker("a"), self.worker("b")
        self.clock.advance(1)
        consumer = a.coordinator.consumer
        consumer.is_active = False          # active at the broker, not told yet
        self.patch(a.coordinator, "check", lambda: defer.succeed(None))    # the stats still name a
        self.assertEqual((a.coordinator.leader_name, b.coordinator.leader_url), ("a", "http://a:6750"))
        registering = defer.ensureDeferred(b.register("public", "default", "f", CONFIG, CODE))
        self.clock.advance(0.5)
        self.assertNoResult(registering)
        consumer.is_active = True           # the broker's ACTIVE_CONSUMER_CHANGE
        self.clock.advance(0.25)
        self.wait(registering)
        self.assertEqual(self.forwarder.calls,
                         [("http://a:6750", "POST", "/admin/v3/functions/public/default/f")])
        self.assertEqual(a.list("public", "default"), ["f"])

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


class ConnectorClusterTests(SynchronousTestCase):
    """Sources and sinks scheduled like functions: each instance on exactly one worker, taken
    over when its worker goes, written through the non-leader, status asked of the owner."""

    setUp, wait, worker = ClusterTests.setUp, ClusterTests.wait, ClusterTests.worker

    def running(self, workers, kind, name):
        """``{worker id: sorted instance ids}`` of the connector's live supervisors."""
        return {w.worker_id: sorted(getattr(w, kind + "s").connectors[("public", "default", name)]
                                    .supervisors) for w in workers}

    def test_each_instance_on_one_worker_and_taken_over(self):
        from tests.functions.test_io import SINK, SOURCE
        a, b = self.worker("a"), self.worker("b")
        self.clock.advance(1)
        # Created through the non-leader: forwarded to the leader over /admin/v3/{kind}s.
        self.wait(b.sources.register("public", "default", "s", dict(SOURCE, parallelism=2)))
        self.wait(b.sinks.register("public", "default", "k", dict(SINK, parallelism=2)))
        self.assertEqual([c[:3] for c in self.forwarder.calls[:2]],
                         [("http://a:6750", "POST", "/admin/v3/sources/public/default/s"),
                          ("http://a:6750", "POST", "/admin/v3/sinks/public/default/k")])
        self.assertEqual(b.sources.list("public", "default"), ["s"])
        source, sink = self.running((a, b), "source", "s"), self.running((a, b), "sink", "k")
        for placed in (source, sink):
            self.assertEqual(sorted(placed["a"] + placed["b"]), [0, 1])   # each on exactly one
            self.assertEqual((len(placed["a"]), len(placed["b"])), (1, 1))
        self.assertEqual(len(self.launchers["a"]) + len(self.launchers["b"]), 4)
        specs = {json.load(open(a.sources._spec_path(a.sources.connectors[("public", "default", "s")]
                                                     .config)))["componentType"]}
        self.assertEqual(specs, {"SOURCE"})

        # Status through b: the instance a runs is asked of a.
        status = self.wait(b.sources.status("public", "default", "s"))
        owners = [i["status"]["workerId"] for i in status["instances"]]
        self.assertEqual(sorted(owners), ["a", "b"])
        asked = [c for c in self.forwarder.calls if c[1] == "GET" and "/sources/" in c[2]]
        self.assertEqual(len(asked), 1)
        self.assertEqual(asked[0][0], "http://a:6750")
        self.assertIn("numReceivedFromSource", status["instances"][0]["status"])

        # Stop/start through b: the leader writes the record, the owner stops its instance.
        on_a = source["a"][0]
        self.wait(b.sources.set_running("public", "default", "s", False, instance=on_a))
        self.assertEqual(a.sources.connectors[("public", "default", "s")].supervisors[on_a]
                         .state.value, "stopped")
        self.wait(b.sources.set_running("public", "default", "s", True, instance=on_a))
        self.assertNotEqual(a.sources.connectors[("public", "default", "s")].supervisors[on_a]
                            .state.value, "stopped")

        # Update through b: version 1, the instances restart on the new spec where they run.
        launched = len(self.launchers["a"]) + len(self.launchers["b"])
        self.wait(b.sinks.update("public", "default", "k", {"configs": {"outputFile": "/tmp/y"}}))
        self.assertEqual(a.sinks.get("public", "default", "k")["configs"], {"outputFile": "/tmp/y"})
        self.assertEqual(len(self.launchers["a"]) + len(self.launchers["b"]), launched + 2)
        self.assertEqual(self.running((a, b), "sink", "k"), sink)

        # b dies: after rescheduleTimeout its connector instances move to a.
        b._started = False
        b.coordinator.consumer.closed = True
        self.clock.advance(1)
        self.assertEqual(a.sources.assigned_worker("public", "default", "s", source["b"][0]), "b")
        self.clock.advance(3)
        self.assertEqual(self.running((a,), "source", "s"), {"a": [0, 1]})
        self.assertEqual(self.running((a,), "sink", "k"), {"a": [0, 1]})

    def test_delete_through_the_non_leader(self):
        from tests.functions.test_io import SINK
        a, b = self.worker("a"), self.worker("b")
        self.clock.advance(1)
        self.wait(a.sinks.register("public", "default", "k", dict(SINK, parallelism=2)))
        self.failureResultOf(defer.ensureDeferred(
            b.sinks.register("public", "default", "k", dict(SINK))), FunctionsError)
        supervisors = [s for w in (a, b)
                       for s in w.sinks.connectors[("public", "default", "k")].supervisors.values()]
        self.assertEqual(len(supervisors), 2)
        self.wait(b.sinks.deregister("public", "default", "k"))
        self.assertEqual({s.state.value for s in supervisors}, {"stopped"})
        self.assertEqual(self.forwarder.calls[-1][:3],
                         ("http://a:6750", "DELETE", "/admin/v3/sinks/public/default/k"))
        self.assertEqual((a.sinks.list("public", "default"), b.sinks.list("public", "default")),
                         ([], []))
        self.assertEqual(a.assignments.table, {})
        self.failureResultOf(defer.ensureDeferred(
            b.sinks.status("public", "default", "k")), FunctionsError)

    def test_connectors_of_the_metadata_store_move_onto_the_topic(self):
        """Records an earlier version kept in the metadata store are moved onto the metadata
        topic by the leader, then scheduled like the others."""
        from pulsar_twisted.functions.io_config import CONFIGS
        from pulsar_twisted.functions.store import ROOT, FunctionStore
        from tests.functions.test_io import SOURCE
        config = CONFIGS["source"].from_json(dict(SOURCE, tenant="public", namespace="default",
                                                  name="old"))
        legacy = FunctionStore(self.store, f"{ROOT}/io/sources")
        self.wait(legacy.put_record("public", "default", "old",
                                    {"sourceConfig": config.to_json(), "version": 3}))
        a = self.worker("a")
        self.assertEqual(a.sources.list("public", "default"), ["old"])
        self.assertEqual(a.records.get("source/public/default/old")["version"], 3)
        self.assertEqual(self.running((a,), "source", "old"), {"a": [0]})
        self.assertEqual(self.wait(legacy.load_all()), [])
