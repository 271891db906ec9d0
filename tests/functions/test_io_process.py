"""
Pulsar IO end to end: a real ``twistd -n pulsar-standalone`` whose functions worker runs the
built-in connectors as child processes, managed with ``pulsar-admin sources|sinks``; the
official client reads what the file source moved and produces what the file sink writes.
"""

import io
import json
import os
import signal
import time
import urllib.request

from pulsar_twisted.cli.admin import main as admin_main
from tests.interop.test_core import InteropCase, pulsar

LINES = 10_000
FILES = 4


class IoProcessTests(InteropCase):
    """The file source and the file sink moving 10,000 records each, nothing lost or doubled;
    the data generator's keyed records; the CLI around them."""

    standalone_config = {"journalSyncData": "false"}
    receive_timeout_ms = 15000

    def admin(self, family, *argv) -> str:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--admin-url", self.standalone.web_service_url, family] + list(argv),
                          out=out, err=err)
        self.assertEqual(code, 0, err.getvalue())
        return out.getvalue()

    def wait_running(self, family, name, timeout=30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            status = json.loads(self.admin(family, "status", "--name", name))
            if status["numInstances"] and status["numRunning"] == status["numInstances"]:
                return status
            if time.monotonic() > deadline:
                self.fail(f"{name} not running within {timeout}s: {status}\n"
                          + self.standalone.log_tail(40))
            time.sleep(0.1)

    def test_file_source_moves_every_line_once(self):
        """10,000 lines in 4 files become 10,000 messages, each once, with the file properties;
        the files are gone once every line is persisted."""
        directory = os.path.join(self.standalone.directory, "file-source-in")
        os.makedirs(directory)
        expected = set()
        for f in range(FILES):
            lines = [f"file{f}-line{i}" for i in range(LINES // FILES)]
            expected.update(lines)
            with open(os.path.join(directory, f"part{f}.txt"), "w") as out:
                out.write("\n".join(lines) + "\n")
        topic = self.topic("lines", "persistent")
        consumer = self.client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        self.assertEqual(self.admin(
            "sources", "create", "--name", "lines", "--source-type", "file",
            "--destination-topic-name", topic,
            "--source-config", json.dumps({"inputDirectory": directory, "pollingInterval": 200})),
            "Created successfully\n")
        self.wait_running("sources", "lines")
        got = [self.receive(consumer) for _ in range(LINES)]
        values = [m.data().decode() for m in got]
        self.assertEqual(len(set(values)), LINES)
        self.assertEqual(set(values), expected)
        self.assertEqual(got[0].properties()["file.name"], "part0.txt")
        self.assertTrue(got[0].event_timestamp())
        with self.assertRaises(pulsar.Timeout):
            consumer.receive(timeout_millis=1000)
        deadline = time.monotonic() + 10
        while os.listdir(directory):
            self.assertLess(time.monotonic(), deadline, f"files left: {os.listdir(directory)}")
            time.sleep(0.1)
        status = json.loads(self.admin("sources", "status", "--name", "lines"))
        self.assertEqual(status["instances"][0]["status"]["numReceivedFromSource"], LINES)
        self.assertIn("lines", self.admin("sources", "list").split())
        self.assertEqual(json.loads(self.admin("sources", "get", "--name", "lines"))["topicName"], topic)
        self.assertEqual(self.admin("sources", "delete", "--name", "lines"), "Deleted successfully\n")
        self.assertNotIn("lines", self.admin("sources", "list").split())

    def test_file_sink_writes_every_message_once(self):
        """10,000 messages from the official client become 10,000 lines, each once; every one
        acked (the subscription's backlog drains to zero)."""
        topic = self.topic("to-file", "persistent")
        path = os.path.join(self.standalone.directory, "sink-out", "out.txt")
        self.assertEqual(self.admin(
            "sinks", "create", "--name", "tofile", "--sink-type", "file", "--inputs", topic,
            "--sink-config", json.dumps({"outputFile": path})), "Created successfully\n")
        self.wait_running("sinks", "tofile")
        producer = self.client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        results = []
        for i in range(LINES):
            producer.send_async(f"message-{i}".encode(), lambda result, msg_id: results.append(result))
        producer.flush()
        self.assertEqual(results.count(pulsar.Result.Ok), LINES)
        deadline = time.monotonic() + 40
        lines = []
        while len(lines) < LINES:
            self.assertLess(time.monotonic(), deadline, f"{len(lines)} lines written\n"
                            + self.standalone.log_tail(30))
            time.sleep(0.2)
            if os.path.exists(path):
                with open(path) as f:
                    lines = f.read().splitlines()
        time.sleep(1.0)
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), LINES)
        self.assertEqual(set(lines), {f"message-{i}" for i in range(LINES)})
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(
                    f"{self.standalone.web_service_url}/admin/v2/persistent/public/default/"
                    f"{topic.rsplit('/', 1)[1]}/stats", timeout=10) as r:
                backlog = json.load(r)["subscriptions"]["public/default/tofile"]["msgBacklog"]
            if backlog == 0:
                break
            self.assertLess(time.monotonic(), deadline, f"backlog stays {backlog}")
            time.sleep(0.2)
        self.assertEqual(self.admin("sinks", "delete", "--name", "tofile"), "Deleted successfully\n")

    def test_data_generator_and_available_connectors(self):
        """The data generator's records are keyed JSON people: 10,000 of them (maxMessages), each
        once and keyed by its id; stop/start; the built-in lists."""
        available = self.admin("sources", "available-sources")
        self.assertIn("data-generator", available.split("\n"))
        self.assertIn("file", available.split("\n"))
        self.assertIn("file", self.admin("sinks", "available-sinks").split("\n"))
        topic = self.topic("people", "persistent")
        consumer = self.client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        self.admin("sources", "create", "--name", "gen", "--source-type", "data-generator",
                   "--destination-topic-name", topic,
                   "--source-config", json.dumps({"sleepBetweenMessages": 0, "maxMessages": LINES}))
        people = self.receive_all(consumer, LINES, ack=True)
        self.assertTrue(all(json.loads(m.data())["id"] == m.partition_key() for m in people))
        self.assertEqual(len({m.partition_key() for m in people}), LINES)
        with self.assertRaises(pulsar.Timeout):                 # maxMessages: no more than that
            consumer.receive(timeout_millis=500)
        self.assertEqual(self.admin("sources", "stop", "--name", "gen"), "Stopped successfully\n")
        status = json.loads(self.admin("sources", "status", "--name", "gen"))
        self.assertEqual(status["numRunning"], 0)
        self.assertEqual(self.admin("sources", "start", "--name", "gen"), "Started successfully\n")
        self.wait_running("sources", "gen")
        self.admin("sources", "delete", "--name", "gen")

    # ------------------------------------------------------------------ across a crash
    def instance_pid(self, kind, name) -> int:
        """The pid of the connector's instance 0 (its command line names its spec)."""
        marker = f"io/{kind}s/public/default/{name}/instance.json"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if marker.encode() in f.read():
                            return int(pid)
                except OSError:
                    continue
            time.sleep(0.1)
        self.fail(f"no instance process for {marker}")

    def test_sink_killed_midway_loses_nothing(self):
        """kill -9 of the sink's instance while it writes: the worker restarts it and every
        message ends in the file (ATLEAST_ONCE: duplicates allowed only from the crash)."""
        topic = self.topic("crash-sink", "persistent")
        path = os.path.join(self.standalone.directory, "sink-crash", "out.txt")
        self.admin("sinks", "create", "--name", "crashsink", "--sink-type", "file", "--inputs", topic,
                   "--sink-config", json.dumps({"outputFile": path}))
        self.wait_running("sinks", "crashsink")
        pid = self.instance_pid("sink", "crashsink")
        producer = self.client.create_producer(topic, block_if_queue_full=True)
        for i in range(LINES):
            producer.send_async(f"m-{i}".encode(), None)
            if i == 3000:
                producer.flush()
                os.kill(pid, signal.SIGKILL)
        producer.flush()
        expected = {f"m-{i}" for i in range(LINES)}
        deadline = time.monotonic() + 40
        while True:
            with open(path) as f:
                lines = f.read().splitlines()
            if set(lines) >= expected:
                break
            self.assertLess(time.monotonic(), deadline, f"{len(set(lines))} distinct lines\n"
                            + self.standalone.log_tail(30))
            time.sleep(0.2)
        self.assertEqual(set(lines), expected)
        status = json.loads(self.admin("sinks", "status", "--name", "crashsink"))
        self.assertGreaterEqual(status["instances"][0]["status"]["numRestarts"], 1)
        self.admin("sinks", "delete", "--name", "crashsink")

    def test_source_killed_midway_loses_nothing(self):
        """kill -9 of the file source's instance after 2,000 lines: restarted, it reads the
        unfinished file again; every line reaches the topic (duplicates only from the crash)."""
        directory = os.path.join(self.standalone.directory, "crash-source-in")
        os.makedirs(directory)
        expected = set()
        for f in range(FILES):
            lines = [f"c{f}-{i}" for i in range(LINES // FILES)]
            expected.update(lines)
            with open(os.path.join(directory, f"part{f}.txt"), "w") as out:
                out.write("\n".join(lines) + "\n")
        topic = self.topic("crash-lines", "persistent")
        consumer = self.client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        self.admin("sources", "create", "--name", "crashsource", "--source-type", "file",
                   "--destination-topic-name", topic,
                   "--source-config", json.dumps({"inputDirectory": directory, "pollingInterval": 200}))
        pid = self.instance_pid("source", "crashsource")
        seen = {self.receive(consumer).data().decode() for _ in range(2000)}
        os.kill(pid, signal.SIGKILL)
        while seen != expected:
            seen.add(self.receive(consumer).data().decode())
        self.assertEqual(seen, expected)
        self.admin("sources", "delete", "--name", "crashsource")
