"""Pulsar IO on the functions worker: Source/SinkConfig checks, the built-in file and
data-generator connectors on a temporary directory, the connectors manager over the in-memory
metadata store with fake instance processes, the v3 routes and the CLI's request bodies."""

import json
import os
import time

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli.admin import build_parser
from pulsar_twisted.cli.admin.functions import multipart_body
from pulsar_twisted.functions.connectors import DataGeneratorSource, FileSink, FileSource, SinkRecord
from pulsar_twisted.functions.errors import FunctionsError
from pulsar_twisted.functions.io_config import SinkConfig, SourceConfig
from tests.functions import test_worker
from tests.functions.test_worker import WorkerTestCase

SOURCE = {"archive": "builtin://file", "topicName": "persistent://public/default/lines",
          "configs": {"inputDirectory": "/tmp/in"}}
SINK = {"archive": "builtin://file", "inputs": ["persistent://public/default/lines"],
        "configs": {"outputFile": "/tmp/out.txt"}}


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def time(self):
        return self.now


class ConfigTests(SynchronousTestCase):

    def check(self, cls, fields, status):
        config = cls.from_json(dict(fields, tenant="public", namespace="default", name="c"))
        try:
            config.validate()
        except FunctionsError as e:
            self.assertEqual(e.status, status, str(e))
            return str(e)
        self.assertIsNone(status, "validated")

    def test_valid_builtin_configs(self):
        """A builtin file source and sink validate; defaults are Pulsar's."""
        self.check(SourceConfig, SOURCE, None)
        self.check(SinkConfig, SINK, None)
        sink = SinkConfig.from_json(dict(SINK, tenant="t", namespace="n", name="s"))
        self.assertEqual((sink.subscription_name(), sink.parallelism, sink.processingGuarantees),
                         ("t/n/s", 1, "ATLEAST_ONCE"))

    def test_refusals(self):
        """Unknown fields and types, missing topics 400; own archives 501."""
        refused = self.assertRaises(FunctionsError, SourceConfig.from_json, dict(SOURCE, topic="x"))
        self.assertIn("Unrecognized field(s) in sourceConfig: topic", str(refused))
        self.assertIn("not available", self.check(SourceConfig, dict(SOURCE, archive="builtin://nope"), 400))
        cdc = dict(SOURCE, archive="builtin://debezium-postgres", topicName=None)
        self.assertIsNone(self.check(SourceConfig, cdc, None))   # per-table topics: no topicName
        self.assertIn("parallelism 1", self.check(SourceConfig, dict(cdc, parallelism=2), 400))
        self.assertIn("Topic name", self.check(SourceConfig, dict(SOURCE, topicName=None), 400))
        self.assertEqual(self.check(SourceConfig, dict(SOURCE, topicName=None), 400),
                         "Topic name cannot be null")
        self.check(SinkConfig, dict(SINK, inputs=None), 400)
        self.check(SinkConfig, dict(SINK, archive="connector.nar"), 501)
        self.check(SourceConfig, dict(SOURCE, parallelism=0), 400)


class FileSourceTests(SynchronousTestCase):

    def setUp(self):
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.clock = FakeClock(time.time() + 10)

    def write(self, name, text):
        with open(os.path.join(self.directory, name), "w") as f:
            f.write(text)

    def drain(self, source):
        records = []
        while True:
            record = source.read(0)
            if record is None:
                return records
            records.append(record)

    def test_lines_become_records_and_acked_files_go(self):
        """Every line of the matching files, in name order, with its properties; a file is
        deleted only once all its lines are acked; hidden and filtered files are left."""
        self.write("a.txt", "one\ntwo\n")
        self.write("b.txt", "three")
        self.write(".hidden", "no")
        self.write("c.log", "filtered")
        source = FileSource({"inputDirectory": self.directory, "fileFilter": r".*\.txt",
                             "pollingInterval": 0}, self.clock)
        records = self.drain(source)
        self.assertEqual([r.value for r in records], [b"one", b"two", b"three"])
        self.assertEqual(records[1].properties["file.name"], "a.txt")
        self.assertEqual(records[1].properties["file.line"], "2")
        self.assertTrue(records[0].event_time)
        source.ack(records[0])
        self.assertTrue(os.path.exists(os.path.join(self.directory, "a.txt")))
        source.ack(records[1])
        self.assertFalse(os.path.exists(os.path.join(self.directory, "a.txt")))
        source.ack(records[2])
        self.assertEqual(sorted(os.listdir(self.directory)), [".hidden", "c.log"])
        self.assertEqual(self.drain(source), [])

    def test_processed_suffix_and_keep_file(self):
        """processedFileSuffix renames a finished file (never read again); keepFile keeps it,
        read once by this source."""
        self.write("a.txt", "x\n")
        source = FileSource({"inputDirectory": self.directory, "processedFileSuffix": ".done",
                             "pollingInterval": 0}, self.clock)
        [record] = self.drain(source)
        source.ack(record)
        self.assertEqual(os.listdir(self.directory), ["a.txt.done"])
        self.assertEqual(self.drain(source), [])
        self.write("b.txt", "y\n")
        kept = FileSource({"inputDirectory": self.directory, "keepFile": "true", "fileFilter": r".*\.txt",
                           "pollingInterval": 0}, self.clock)
        [record] = self.drain(kept)
        kept.ack(record)
        self.assertEqual(self.drain(kept), [])
        self.assertIn("b.txt", os.listdir(self.directory))


class ConnectorTests(SynchronousTestCase):

    def test_data_generator(self):
        """JSON people keyed by their id, maxMessages of them."""
        source = DataGeneratorSource({"sleepBetweenMessages": 0, "maxMessages": 2}, FakeClock())
        first, second = source.read(0), source.read(0)
        self.assertEqual(json.loads(first.value)["id"], first.key)
        self.assertEqual(first.event_time, 1000000)
        self.assertNotEqual(first.key, second.key)
        self.assertIsNone(source.read(0))

    def test_file_sink_appends_lines(self):
        path = os.path.join(self.mktemp(), "out.txt")
        sink = FileSink({"outputFile": path})
        self.assertEqual(sink.write([SinkRecord(b"a"), SinkRecord(b"b")]), [])
        sink.write([SinkRecord(b"c")])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"a\nb\nc\n")
        sink.close()


class ManagerTests(WorkerTestCase):

    def test_register_runs_and_survives_a_new_worker(self):
        """A source runs parallelism instances with a SOURCE spec; a new worker on the same
        store runs it again; delete removes it and cleans a sink's subscription."""
        self.result(self.worker.sources.register("public", "default", "s", dict(SOURCE, parallelism=2)))
        self.result(self.worker.sinks.register("public", "default", "k", dict(SINK)))
        self.assertEqual(self.worker.sources.list("public", "default"), ["s"])
        spec_paths = {path for (path, _, _) in self.launchers}
        specs = [json.load(open(p)) for p in spec_paths]
        self.assertEqual(sorted(s["componentType"] for s in specs), ["SINK", "SOURCE"])
        status = self.result(self.worker.sources.status("public", "default", "s"))
        self.assertEqual(status["numInstances"], 2)
        self.assertIn("numReceivedFromSource", status["instances"][0]["status"])
        self.worker.stop()   # a restart: one leader on the topics at a time
        again = self.new_worker()
        self.assertEqual(again.sinks.list("public", "default"), ["k"])
        self.assertEqual(again.sinks.get("public", "default", "k")["inputs"], SINK["inputs"])
        self.result(again.sinks.deregister("public", "default", "k"))
        self.assertEqual(self.cleaned, [(SINK["inputs"], "public/default/k")])
        self.assertRaises(FunctionsError, again.sinks.get, "public", "default", "k")

    def test_stop_stays_stopped_across_a_new_worker(self):
        """stop of one instance kills it and is kept in the record: a new worker leaves it
        stopped; start runs it again; an unknown instance id is 400."""
        self.result(self.worker.sources.register("public", "default", "s", dict(SOURCE, parallelism=2)))
        self.result(self.worker.sources.set_running("public", "default", "s", False, 1))
        self.assertEqual(self.worker.sources.connectors[("public", "default", "s")].record["stopped"], [1])
        self.failure(self.worker.sources.set_running("public", "default", "s", False, 5), 400)
        self.worker.stop()   # a restart: one leader on the topics at a time
        again = self.new_worker()
        supervisors = again.sources.connectors[("public", "default", "s")].supervisors
        states = [supervisors[i].state.value for i in sorted(supervisors)]
        self.assertEqual(states[1], "stopped")
        self.assertNotEqual(states[0], "stopped")
        self.result(again.sources.set_running("public", "default", "s", True))
        supervisors = again.sources.connectors[("public", "default", "s")].supervisors
        states = [supervisors[i].state.value for i in sorted(supervisors)]
        self.assertNotIn("stopped", states)

    def test_duplicates_and_missing_namespace(self):
        self.result(self.worker.sources.register("public", "default", "s", dict(SOURCE)))
        self.failure(self.worker.sources.register("public", "default", "s", dict(SOURCE)), 400)
        self.failure(self.worker.sources.register("public", "nope", "t", dict(SOURCE)), 400)


class IoRouteTests(WorkerTestCase):

    call = test_worker.RouteTests.call

    def create_connector(self, kind, name, config):
        body, ctype = multipart_body([(f"{kind}Config", None, json.dumps(config).encode(),
                                       "application/json")])
        return self.call("POST", f"/admin/v3/{kind}s/public/default/{name}", body, ctype)

    def test_source_and_sink_routes(self):
        """create, list, get, status, delete; the built-in lists as ConnectorDefinitions."""
        self.assertEqual(self.create_connector("source", "s", SOURCE), (204, None))
        self.assertEqual(self.create_connector("sink", "k", SINK), (204, None))
        self.assertEqual(self.call("GET", "/admin/v3/sources/public/default"), (200, ["s"]))
        code, config = self.call("GET", "/admin/v3/sinks/public/default/k")
        self.assertEqual((code, config["archive"]), (200, "builtin://file"))
        code, status = self.call("GET", "/admin/v3/sources/public/default/s/status")
        self.assertEqual((code, status["numInstances"]), (200, 1))
        self.assertEqual(self.call("DELETE", "/admin/v3/sources/public/default/s")[0], 204)
        self.assertEqual(self.call("GET", "/admin/v3/sources/public/default/s")[0], 404)
        code, sources = self.call("GET", "/admin/v3/sources/builtinsources")
        self.assertEqual(sorted(d["name"] for d in sources), ["data-generator", "debezium-postgres", "file"])
        self.assertIn("sourceClass", sources[0])
        code, sinks = self.call("GET", "/admin/v3/sinks/builtinsinks")
        self.assertEqual(sorted(d["name"] for d in sinks), ["file", "jdbc-postgres", "jdbc-sqlite", "redis"])
        from pulsar_twisted.functions import connectors
        for d in sources:
            self.assertTrue(callable(connectors.source_class(d["name"])), d)
        for d in sinks:
            self.assertTrue(callable(connectors.sink_class(d["name"])), d)
        self.assertEqual(self.create_connector("source", "x", dict(SOURCE, topicName=None))[0], 400)
        self.assertEqual(self.call("POST", "/admin/v3/sinks/public/default/k/0/stop")[0], 204)
        self.assertEqual(self.call("POST", "/admin/v3/sinks/public/default/k/restart")[0], 204)
        self.assertEqual(self.call("POST", "/admin/v3/sinks/public/default/nope/stop")[0], 404)

    def update_connector(self, kind, name, config):
        body, ctype = multipart_body([(f"{kind}Config", None, json.dumps(config).encode(),
                                       "application/json")])
        return self.call("PUT", f"/admin/v3/{kind}s/public/default/{name}", body, ctype)

    def test_update_and_stats_routes(self):
        """PUT changes the given fields (parallelism, configs), bumps the version and restarts
        the instances; Pulsar's immutable fields refuse with 400; stats and per-instance status."""
        self.assertEqual(self.create_connector("sink", "k", SINK), (204, None))
        launched = len(self.launchers)
        self.assertEqual(self.update_connector("sink", "k", {"parallelism": 2,
                                                             "configs": {"outputFile": "/tmp/x"}}),
                         (204, None))
        code, config = self.call("GET", "/admin/v3/sinks/public/default/k")
        self.assertEqual((config["parallelism"], config["configs"], config["inputs"]),
                         (2, {"outputFile": "/tmp/x"}, SINK["inputs"]))
        self.assertEqual(len(self.launchers), launched + 2)
        code, body = self.update_connector("sink", "k", {"processingGuarantees": "ATMOST_ONCE"})
        self.assertEqual(code, 400)
        self.assertIn("Processing Guarantees cannot be altered", json.dumps(body))
        code, body = self.update_connector("source", "nope", {"parallelism": 2})
        self.assertEqual(code, 404)
        self.assertEqual(self.create_connector("source", "s", SOURCE), (204, None))
        code, body = self.update_connector("source", "s", {"topicName": "persistent://public/default/other"})
        self.assertEqual(code, 400)
        code, stats = self.call("GET", "/admin/v3/sinks/public/default/k/stats")
        self.assertEqual((code, [i["instanceId"] for i in stats["instances"]]), (200, [0, 1]))
        self.assertIn("receivedTotal", stats)
        code, one = self.call("GET", "/admin/v3/sinks/public/default/k/1/status")
        self.assertEqual(code, 200)
        self.assertIn("numWrittenToSink", one)
        self.assertEqual(self.call("GET", "/admin/v3/sinks/public/default/k/5/status")[0], 400)
        self.assertEqual(self.call("GET", "/admin/v3/sources/public/default/s/0/stats")[0], 200)


class CliTests(SynchronousTestCase):

    def test_create_flags_make_pulsars_config(self):
        """--source-type becomes builtin://, --source-config the configs, names from the flags."""
        from pulsar_twisted.cli.admin.io import _connector_config
        a = build_parser().parse_args([
            "sources", "create", "--source-type", "data-generator", "--name", "g",
            "--destination-topic-name", "gen", "--source-config", '{"sleepBetweenMessages": 5}',
            "--parallelism", "2"])
        self.assertEqual(_connector_config(a), {
            "tenant": "public", "namespace": "default", "name": "g", "archive": "builtin://data-generator",
            "topicName": "gen", "parallelism": 2, "configs": {"sleepBetweenMessages": 5}})
        a = build_parser().parse_args([
            "sinks", "create", "--sink-type", "file", "--name", "k", "--tenant", "t",
            "--namespace", "n", "--inputs", "a,b", "--sink-config", '{"outputFile": "/x"}'])
        config = _connector_config(a)
        self.assertEqual((config["inputs"], config["archive"], config["tenant"]),
                         (["a", "b"], "builtin://file", "t"))

    def test_config_file_then_flags(self):
        """--sink-config-file (YAML, Pulsar's field names) is the base; the flags override it."""
        from pulsar_twisted.cli.admin import CommandError
        from pulsar_twisted.cli.admin.io import _connector_config
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("name: fromfile\ninputs: [a]\nparallelism: 2\nconfigs:\n  outputFile: /x\n")
        a = build_parser().parse_args(["sinks", "create", "--sink-type", "file", "--sink-config-file", path,
                                       "--parallelism", "3"])
        self.assertEqual(_connector_config(a), {
            "tenant": "public", "namespace": "default", "name": "fromfile", "inputs": ["a"],
            "parallelism": 3, "configs": {"outputFile": "/x"}, "archive": "builtin://file"})
        with open(path, "w") as f:
            f.write("- a list\n")
        with self.assertRaises(CommandError):
            _connector_config(build_parser().parse_args(["sinks", "create", "--name", "n",
                                                         "--sink-config-file", path]))

    def test_update_stats_and_localrun_flags(self):
        """update sends only the flags given; status/stats take --instance-id; localrun has
        Pulsar's --broker-service-url and --instance-id-offset."""
        from pulsar_twisted.cli.admin.io import _connector_config
        a = build_parser().parse_args(["sinks", "update", "--name", "k", "--parallelism", "3"])
        self.assertEqual(_connector_config(a), {"tenant": "public", "namespace": "default", "name": "k",
                                                "parallelism": 3})
        a = build_parser().parse_args(["sources", "stats", "--name", "s", "--instance-id", "1"])
        self.assertEqual((a.kind, a.instance_id), ("source", 1))
        a = build_parser().parse_args(["sinks", "localrun", "--name", "l", "--sink-type", "redis",
                                       "--inputs", "x", "--broker-service-url", "pulsar://h:6650",
                                       "--instance-id-offset", "2"])
        self.assertEqual((a.broker_service_url, a.instance_id_offset, a.sink_type), ("pulsar://h:6650", 2, "redis"))
