"""FunctionsWorker over the in-memory metadata store and fake topics (tests/functions/
test_platform.FakeClient) with fake instance processes, and the admin v3 routes over it: records
on the platform's topics, rebuilt by a new worker; Pulsar's answers."""

import io
import json

from twisted.internet import defer, task
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from pulsar_twisted.cli.admin.functions import multipart_body
from pulsar_twisted.functions.errors import FunctionsError
from pulsar_twisted.functions.worker import FunctionsWorker
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import namespace_path, tenant_path
from pulsar_twisted.web.routing import RouterResource
from pulsar_twisted.web.site import make_v3_router
from tests.functions.test_platform import FakeClient
from tests.functions.test_supervisor import FakeLauncher

CODE = b"def process(input):\n    return input\n"
CONFIG = {"className": "echo", "inputs": ["persistent://public/default/in"],
          "output": "persistent://public/default/out"}


class WorkerTestCase(SynchronousTestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.result(self.store.put(tenant_path("public"), b"{}"))
        self.result(self.store.put(namespace_path("public/default"), b"{}"))
        self.launchers = {}
        self.topics = {}
        self.worker = self.new_worker()

    def new_worker(self):
        def launcher(spec_path, instance_id):
            return self.launchers.setdefault((spec_path, instance_id, len(self.launchers)),
                                             FakeLauncher(auto_exit=True))
        self.cleaned = []

        class Cleaner:
            async def delete(cleaner, topics, subscription):
                self.cleaned.append((topics, subscription))
        worker = FunctionsWorker(self.store, self.clock, launcher, "pulsar://127.0.0.1:6650",
                                 "http://127.0.0.1:8080", self.mktemp(), cleaner=Cleaner(),
                                 client=FakeClient(self.topics, clock=self.clock))
        self.result(worker.start())
        return worker

    def result(self, d):
        return self.successResultOf(defer.ensureDeferred(d))

    def failure(self, d, status):
        f = self.failureResultOf(defer.ensureDeferred(d), FunctionsError)
        self.assertEqual(f.value.status, status, str(f.value))
        return str(f.value)

    def register(self, name="f", **fields):
        return self.result(self.worker.register("public", "default", name, dict(CONFIG, **fields), CODE))


class WorkerTests(WorkerTestCase):

    def test_register_runs_parallelism_instances(self):
        """A registered function lists, reads back its config and runs parallelism instances."""
        self.register(parallelism=2)
        self.assertEqual(self.worker.list("public", "default"), ["f"])
        self.assertEqual(self.worker.get("public", "default", "f")["parallelism"], 2)
        status = self.result(self.worker.status("public", "default", "f"))
        self.assertEqual((status["numInstances"], status["numRunning"]), (2, 0))
        self.assertEqual([i["instanceId"] for i in status["instances"]], [0, 1])
        self.assertEqual(sum(len(l.processes) for l in self.launchers.values()), 2)

    def test_zip_package_kept_as_an_archive(self):
        """A .zip package (by its magic) is written under its name for the instance to unpack,
        a wheel under its name for the instance to install, a .py under the module's name."""
        import os
        zipped = b"PK\x03\x04" + b"rest of the archive"
        self.result(self.worker.register("public", "default", "z", dict(CONFIG, py="exclaim.zip",
                                                                        className="exclaim.E"), zipped))
        spec_paths = {path for (path, _, _) in self.launchers}
        spec = [p for p in spec_paths if "/z/" in p][0]
        with open(spec) as f:
            code_path = json.load(f)["codePath"]
        self.assertEqual(os.path.basename(code_path), "exclaim.zip")
        with open(code_path, "rb") as f:
            self.assertEqual(f.read(), zipped)
        wheel = b"PK\x03\x04" + b"a wheel"
        self.result(self.worker.register("public", "default", "w", dict(
            CONFIG, py="/tmp/wexclaim-1.0-py3-none-any.whl", className="wexclaim.E"), wheel))
        spec = [p for p in {path for (path, _, _) in self.launchers} if "/w/" in p][0]
        with open(spec) as f:
            self.assertEqual(os.path.basename(json.load(f)["codePath"]), "wexclaim-1.0-py3-none-any.whl")
        self.register()
        spec = [p for p in {path for (path, _, _) in self.launchers} if "/f/" in p][0]
        with open(spec) as f:
            self.assertEqual(os.path.basename(json.load(f)["codePath"]), "echo.py")

    def test_pulsar_errors(self):
        """Exists (400), unknown (404), no tenant/namespace (400), too large a package (413)."""
        self.register()
        w = self.worker
        self.assertEqual(self.failure(w.register("public", "default", "f", CONFIG, CODE), 400),
                         "Function f already exists")
        self.assertEqual(self.failure(defer.maybeDeferred(w.get, "public", "default", "nope"), 404),
                         "Function nope doesn't exist")
        self.assertEqual(self.failure(w.register("acme", "default", "g", CONFIG, CODE), 400),
                         "Tenant acme does not exist")
        self.assertEqual(self.failure(w.register("public", "other", "g", CONFIG, CODE), 400),
                         "Namespace public/other does not exist")
        self.failure(w.register("public", "default", "g", CONFIG, b""), 400)

    def test_large_package_on_the_packages_topic(self):
        """A package of any size goes to the packages topic (the producer chunks it); the record
        names it and the instance's code file is the package."""
        import os
        big = b"# " + b"x" * (3 * 1024 * 1024) + b"\n" + CODE
        self.result(self.worker.register("public", "default", "big", CONFIG, big))
        record = self.worker.records.get("public/default/big")
        self.assertEqual(record["packageSize"], len(big))
        packages = self.topics["persistent://public/functions/packages"]
        ledger, entry = map(int, record["packageLocation"].split(":"))
        self.assertEqual(packages.messages[entry].data(), big)
        directory = os.path.join(self.worker.download_directory, "public", "default", "big")
        with open(os.path.join(directory, "echo.py"), "rb") as f:
            self.assertEqual(f.read(), big)

    def test_new_worker_rebuilds_from_the_store(self):
        """A worker started on the same store runs the registered functions again, except the
        instances recorded stopped."""
        self.register(parallelism=2)
        self.result(self.worker.set_running("public", "default", "f", False, instance=1))
        self.worker.stop()
        other = self.new_worker()
        self.assertEqual(other.list("public", "default"), ["f"])
        supervisors = other.functions[("public", "default", "f")].supervisors
        self.assertEqual([supervisors[i].state.value for i in (0, 1)], ["starting", "stopped"])

    def test_start_retried_until_the_platform_answers(self):
        """A start that fails (here: the namespace refused) is logged and retried with a
        doubling delay, what it opened closed first; the worker starts once the platform
        answers."""
        from twisted.logger import capturedLogs
        self.worker.stop()
        worker = FunctionsWorker(self.store, self.clock, lambda p, i: FakeLauncher(auto_exit=True),
                                 "pulsar://127.0.0.1:6650", "http://127.0.0.1:8080", self.mktemp(),
                                 client=FakeClient(self.topics, clock=self.clock),
                                 admin_url="http://broker:8080")
        answers = []
        import pulsar_twisted.functions.worker as module

        async def ensure(reactor, url, namespace, agent=None):
            if not answers:
                answers.append("refused")
                raise RuntimeError("creating namespace public/functions: HTTP 403 no")
        self.patch(module, "ensure_namespace", ensure)
        self.patch(module, "ensure_topics", lambda *a: defer.succeed(None))
        with capturedLogs() as events:
            d = defer.ensureDeferred(worker.start_until_started())
            self.assertFalse(d.called)
            self.clock.advance(1)
        self.successResultOf(d)
        self.assertTrue(worker.ready)
        self.assertTrue(any("did not start" in e.get("log_format", "") for e in events))

    def test_functions_of_the_metadata_store_move_onto_the_topics(self):
        """A function an earlier version recorded in the metadata store is moved onto the
        topics by the leader at start (its state kept) and runs."""
        from pulsar_twisted.functions.config import FunctionConfig
        from pulsar_twisted.functions.store import FunctionStore
        old = FunctionStore(self.store)
        config = FunctionConfig.from_json(dict(CONFIG, tenant="public", namespace="default", name="old"))
        self.result(old.put_record("public", "default", "old", {
            "functionConfig": config.to_json(), "version": 3, "createTime": 1, "packageSize": len(CODE),
            "stopped": []}))
        self.result(old.put_package("public", "default", "old", CODE))
        self.result(old.incr_counter("public", "default", "old", "n", 5))
        worker = self.new_worker()
        self.assertEqual(worker.list("public", "default"), ["old"])
        self.assertEqual(worker.records.get("public/default/old")["version"], 3)
        self.assertEqual(sorted(worker.functions[("public", "default", "old")].supervisors), [0])
        self.assertEqual(self.result(old.load_all()), [])
        self.assertEqual(self.result(worker.get_state("public", "default", "old", "n"))["numberValue"], 5)

    def test_update_and_delete(self):
        """An update changes the given fields and re-scales; a delete removes every record and
        the input subscription."""
        self.register()
        self.result(self.worker.update("public", "default", "f", {"parallelism": 3}, None))
        self.assertEqual(self.result(self.worker.status("public", "default", "f"))["numInstances"], 3)
        self.assertEqual(sorted(self.worker.assignments.table),
                         ["public/default/f:0", "public/default/f:1", "public/default/f:2"])
        self.assertEqual(self.worker.get("public", "default", "f")["output"], CONFIG["output"])
        self.result(self.worker.deregister("public", "default", "f"))
        self.assertEqual(self.worker.list("public", "default"), [])
        self.assertEqual(self.cleaned, [(CONFIG["inputs"], "public/default/f")])
        self.assertEqual((self.worker.records.table, self.worker.assignments.table), ({}, {}))
        self.assertEqual(self.new_worker().list("public", "default"), [])

    def test_state_is_shared_and_durable(self):
        """Counters and values live in the store: a new worker reads them; absent keys are 404."""
        self.register()
        w = self.worker
        self.assertEqual(self.result(w.incr_counter("public", "default", "f", "n", 2)), 2)
        self.assertEqual(self.result(w.incr_counter("public", "default", "f", "n", 3)), 5)
        self.result(w.put_state("public", "default", "f", "k", {"key": "k", "stringValue": "v"}))
        other = self.new_worker()
        self.assertEqual(self.result(other.get_state("public", "default", "f", "n"))["numberValue"], 5)
        self.assertEqual(self.result(other.get_state("public", "default", "f", "k"))["stringValue"], "v")
        self.assertEqual(self.failure(other.get_state("public", "default", "f", "x"), 404),
                         "key 'x' doesn't exist.")


class RouteTests(WorkerTestCase):
    """The v3 routes, rendered with DummyRequest (no socket)."""

    def call(self, method, path, body=b"", content_type=None, worker=True):
        path, _, query = path.partition("?")
        request = DummyRequest(path.lstrip("/").split("/"))
        for pair in filter(None, query.split("&")):
            name, _, value = pair.partition("=")
            request.addArg(name.encode(), value.encode())
        request.method = method.encode()
        request.path = path.encode()
        request.uri = request.path
        request.content = io.BytesIO(body)
        if content_type:
            request.requestHeaders.setRawHeaders(b"content-type", [content_type.encode()])
        resource = RouterResource(make_v3_router(lambda: self.worker if worker else None))
        resource.render(request)
        self.assertTrue(request.finished)
        raw = b"".join(request.written)
        return request.responseCode or 200, json.loads(raw) if raw else None

    def create(self, name="f", **fields):
        body, ctype = multipart_body([
            ("functionConfig", None, json.dumps(dict(CONFIG, **fields)).encode(), "application/json"),
            ("data", "echo.py", CODE, "application/octet-stream")])
        return self.call("POST", f"/admin/v3/functions/public/default/{name}", body, ctype)

    def test_create_status_stats(self):
        """Multipart create, then Pulsar's FunctionStatus and stats shapes."""
        self.assertEqual(self.create(), (204, None))
        code, status = self.call("GET", "/admin/v3/functions/public/default/f/status")
        self.assertEqual(code, 200)
        self.assertEqual(set(status), {"numInstances", "numRunning", "instances"})
        self.assertLessEqual({"running", "error", "numRestarts", "numReceived",
                              "numSuccessfullyProcessed", "numUserExceptions"},
                             set(status["instances"][0]["status"]))
        code, stats = self.call("GET", "/admin/v3/functions/public/default/f/stats")
        self.assertEqual((code, stats["receivedTotal"], len(stats["instances"])), (200, 0, 1))
        self.assertEqual(self.call("GET", "/admin/v3/functions/public/default"), (200, ["f"]))
        self.assertEqual(self.call("GET", "/admin/v3/functions/public/default/f/0/status")[0], 200)

    def test_requests_wait_for_a_starting_worker(self):
        """While the worker reads its topics a request waits for it (no half-read 404), and
        answers 503 when it does not get ready in time."""
        self.register()
        self.worker.ready = False
        resource = RouterResource(make_v3_router(lambda: self.worker))

        def get():
            request = DummyRequest(["admin", "v3", "functions", "public", "default", "f"])
            request.method, request.path = b"GET", b"/admin/v3/functions/public/default/f"
            request.uri, request.content = request.path, io.BytesIO(b"")
            resource.render(request)
            return request
        waiting = get()
        self.clock.pump([0.1] * 10)
        self.assertFalse(waiting.finished)
        self.worker.ready = True
        self.clock.advance(0.1)
        self.assertEqual((waiting.finished, waiting.responseCode or 200), (True, 200))
        self.worker.ready = False
        late = get()
        self.clock.pump([0.1] * 310)
        self.assertEqual(late.responseCode, 503)

    def test_errors_as_pulsar_answers(self):
        """Validation 400 with Pulsar's reason, unknown 404, gaps 501, no worker 503."""
        code, body = self.create(parallelism=0)
        self.assertEqual((code, body), (400, {"reason": "Function parallelism must be a positive number"}))
        self.assertEqual(self.create(runtime="JAVA")[0], 501)
        self.assertEqual(self.call("GET", "/admin/v3/functions/public/default/nope")[0], 404)
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f", b"{}",
                                   "application/json")[0], 400)
        # Updating a source needs a multipart body with its sourceConfig (Pulsar IO update exists).
        self.assertEqual(self.call("PUT", "/admin/v3/sources/public/default/s")[0], 400)
        self.assertEqual(self.call("GET", "/admin/v3/functions/public/default", worker=False)[0], 503)

    def test_state_and_control_routes(self):
        """putstate/querystate, the counter route, stop/start of one instance."""
        self.create()
        body, ctype = multipart_body([("state", None, b'{"key": "k", "stringValue": "hello"}',
                                       "application/json")])
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f/state/k", body, ctype)[0], 204)
        code, state = self.call("GET", "/admin/v3/functions/public/default/f/state/k")
        self.assertEqual((code, state["key"], state["stringValue"]), (200, "k", "hello"))
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f/counter/c?amount=4")[1],
                         {"key": "c", "numberValue": 4})
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f/0/stop")[0], 204)
        supervisor = self.worker.functions[("public", "default", "f")].supervisors[0]
        self.assertEqual(supervisor.state.value, "stopped")
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f/start")[0], 204)
        self.assertEqual(supervisor.state.value, "starting")
        self.assertEqual(self.call("POST", "/admin/v3/functions/public/default/f/7/stop")[0], 400)


class MetricsTests(WorkerTestCase):

    def test_pulsar_metric_names_per_instance(self):
        """/metrics families carry Pulsar's names and labels, one sample per instance."""
        from prometheus_client import CollectorRegistry, generate_latest
        from pulsar_twisted.functions.metrics import FunctionsCollector
        self.register(parallelism=2)
        supervisor = self.worker.functions[("public", "default", "f")].supervisors[1]
        supervisor.report({"event": "stats", "numReceived": 4, "numSuccessfullyProcessed": 3,
                           "numUserExceptions": 1, "averageLatency": 2.5})
        registry = CollectorRegistry(auto_describe=False)
        registry.register(FunctionsCollector(lambda: self.worker, "standalone"))
        text = generate_latest(registry).decode()
        labels = ('cluster="standalone",fqfn="public/default/f",instance_id="1",name="f",'
                  'namespace="default",tenant="public"')
        for line in (f"pulsar_function_received_total{{{labels}}} 4.0",
                     f"pulsar_function_processed_successfully_total{{{labels}}} 3.0",
                     f"pulsar_function_user_exceptions_total{{{labels}}} 1.0",
                     f"pulsar_function_process_latency_ms_count{{{labels}}} 4.0",
                     f"pulsar_function_process_latency_ms_sum{{{labels}}} 10.0"):
            self.assertIn(line, text.splitlines())
        empty = CollectorRegistry(auto_describe=False)
        empty.register(FunctionsCollector(lambda: None, "standalone"))
        self.assertNotIn("pulsar_function", generate_latest(empty).decode())


class FakeReactor:
    def __init__(self):
        self.spawned = []

    def spawnProcess(self, protocol, executable, args, env, path, childFDs):
        self.spawned.append((executable, args, env, path, childFDs))
        return object()


class LauncherTests(SynchronousTestCase):

    def test_spawns_instance_main_with_status_pipe_and_log(self):
        """One interpreter per instance running instance_main on the spec, our package first on
        PYTHONPATH, output to the instance log, the status pipe on fd 3."""
        import os
        import pulsar_twisted
        from pulsar_twisted.functions.runtime import ProcessLauncher
        reactor = FakeReactor()
        directory = self.mktemp()
        os.makedirs(directory)
        spec = os.path.join(directory, "instance.json")
        ProcessLauncher(reactor, python="/usr/bin/python3", environ={"PYTHONPATH": "/x"})(spec, 2)(None)
        executable, args, env, path, fds = reactor.spawned[0]
        self.assertEqual(args, ["/usr/bin/python3", "-m", "pulsar_twisted.functions.instance_main",
                                spec, "2"])
        root = os.path.dirname(os.path.dirname(os.path.abspath(pulsar_twisted.__file__)))
        self.assertEqual(env["PYTHONPATH"].split(os.pathsep), [root, "/x"])
        self.assertEqual((path, fds[0], fds[3]), (directory, "w", "r"))
        self.assertTrue(os.path.exists(os.path.join(directory, "logs", "instance-2.log")))


class CleanerTests(SynchronousTestCase):

    def test_force_deletes_each_input_subscription(self):
        """One DELETE .../subscription/{sub}?force=true per input, names URL-encoded; an HTTP
        error is logged, not raised."""
        from pulsar_twisted.functions.cleanup import SubscriptionCleaner
        requests = []

        class Response:
            code = 500

            def deliverBody(self, protocol):
                from twisted.web.client import ResponseDone
                from twisted.python.failure import Failure
                protocol.dataReceived(b"boom")
                protocol.connectionLost(Failure(ResponseDone()))

        class Agent:
            def request(self, method, uri, headers=None, body=None):
                requests.append((method, uri))
                return defer.succeed(Response())
        cleaner = SubscriptionCleaner(None, "http://127.0.0.1:8080/", agent=Agent())
        self.successResultOf(defer.ensureDeferred(cleaner.delete(
            ["persistent://public/default/in", "non-persistent://t/ns/x y"], "public/default/f")))
        self.assertEqual(requests, [
            (b"DELETE", b"http://127.0.0.1:8080/admin/v2/persistent/public/default/in/subscription/"
                        b"public%2Fdefault%2Ff?force=true"),
            (b"DELETE", b"http://127.0.0.1:8080/admin/v2/non-persistent/t/ns/x%20y/subscription/"
                        b"public%2Fdefault%2Ff?force=true")])


class TriggerTests(WorkerTestCase):
    """worker.trigger over a fake of our client: reader first, then the send; the output whose
    __pfn_input_msg_id__ names the sent message is the answer; none in time is 408."""

    def fake_client(self, outputs):
        import base64
        from pulsar_twisted.client.message_id import MessageId
        log = []

        class Message:
            def __init__(self, data, input_id):
                self._data = data
                self._props = {"__pfn_input_msg_id__": base64.b64encode(input_id.serialize()).decode()}

            def data(self):
                return self._data

            def properties(self):
                return self._props

        class Reader:
            def __init__(reader):
                reader.queue = [Message(d, MessageId(*i)) for d, i in outputs]

            def read_next(reader, timeout=None):
                from pulsar_twisted.client import errors
                if not reader.queue:
                    self.clock.advance(timeout)
                    return defer.fail(errors.Timeout("nothing"))
                return defer.succeed(reader.queue.pop(0))

            def close(reader):
                log.append("reader closed")
                return defer.succeed(None)

        class Producer:
            def send(producer, value):
                log.append(("send", value))
                return defer.succeed(MessageId(3, 9))

            def close(producer):
                return defer.succeed(None)

        class Client:
            def create_reader(client, topic, start):
                log.append(("reader", topic, start == MessageId.latest))
                return defer.succeed(Reader())

            def create_producer(client, topic):
                log.append(("producer", topic))
                return defer.succeed(Producer())
        return Client(), log

    def test_output_for_the_sent_message(self):
        self.worker.client, log = self.fake_client([(b"other", (3, 8)), (b"mine", (3, 9))])
        self.register()
        self.assertEqual(self.result(self.worker.trigger("public", "default", "f", b"v")), b"mine")
        self.assertEqual(log, [("reader", CONFIG["output"], True), ("producer", CONFIG["inputs"][0]),
                               ("send", b"v"), "reader closed"])

    def test_no_output_in_time_is_408(self):
        self.worker.client, log = self.fake_client([])
        self.register()
        self.assertEqual(self.failure(self.worker.trigger("public", "default", "f", b"v"), 408),
                         "Request Timed Out")
        self.assertEqual(self.failure(self.worker.trigger("public", "default", "f", b"v",
                                                          topic="persistent://public/default/x"), 400),
                         "Function does not consume from topic persistent://public/default/x")
