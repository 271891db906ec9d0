"""
Pulsar Functions end to end: a real ``twistd -n pulsar-standalone`` (its functions worker on by
default), functions created and inspected with ``pulsar-admin functions``, the official client
producing their input and reading their output, each instance a child process of the standalone.
"""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

from pulsar_twisted.cli.admin import main as admin_main
from tests.interop.test_core import InteropCase, pulsar

EXCLUSION = textwrap.dedent('''
    EXCLUDED = {"spam", "junk"}

    def process(input):
        """A plain function: None drops the message."""
        if any(word in EXCLUDED for word in input.split()):
            return None
        return input
''')

COUNTER = textwrap.dedent('''
    import pulsar

    class WordCount(pulsar.Function):
        """Counts words in the function's state; publishes each word upper-cased to a side topic."""

        def process(self, input, context):
            for word in input.split():
                context.incr_counter(word, 1)
                context.publish(context.get_user_config_value("side"), word.upper(),
                                properties={"from": context.get_function_name()})
            context.put_state("last", input)
            return "%s:%d" % (input, context.get_counter(input.split()[0]))
''')

SLOW_ONCE = textwrap.dedent('''
    import os
    import time
    import pulsar

    class SlowOnce(pulsar.Function):
        """The first instance ever to run marks the file with its pid, then hangs on its message
        (the test kills it there: received, not yet output); later instances pass through."""

        def process(self, input, context):
            marker = context.get_user_config_value("marker")
            if not os.path.exists(marker):
                # Past the client's 100 ms ack grouping: an ATMOST_ONCE ack has reached the broker.
                time.sleep(0.5)
                with open(marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(marker + ".tmp", marker)
                time.sleep(60)
            return input + "!"
''')

SLOW_SECOND = textwrap.dedent('''
    import os
    import time
    import pulsar

    class SlowSecond(pulsar.Function):
        """The first instance hangs on m1 right after sending m0's output (the test kills it
        there, likely before m0's grouped ack left); later instances pass through."""

        def process(self, input, context):
            marker = context.get_user_config_value("marker")
            if input == "m1" and not os.path.exists(marker):
                with open(marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(marker + ".tmp", marker)
                time.sleep(60)
            return input + "!"
''')

RAISER = textwrap.dedent('''
    def process(input):
        if input == "boom":
            raise ValueError("boom is not welcome")
        return input
''')


class FunctionsProcessTests(InteropCase):
    """Exclusion filter, publish + counters + state, ATLEAST_ONCE across a kill -9, restart."""

    standalone_config = {"journalSyncData": "false"}
    receive_timeout_ms = 15000

    # ------------------------------------------------------------------ helpers
    def admin(self, *argv) -> str:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--admin-url", self.standalone.web_service_url, "functions"] + list(argv),
                          out=out, err=err)
        self.assertEqual(code, 0, err.getvalue())
        return out.getvalue()

    def create(self, name, source, classname, **flags):
        path = os.path.join(self.standalone.directory, f"{classname.split('.')[0]}.py")
        with open(path, "w") as f:
            f.write(source)
        argv = ["create", "--tenant", "public", "--namespace", "default", "--name", name,
                "--py", path, "--classname", classname, "--subs-position", "Earliest"]
        for flag, value in flags.items():
            argv += [f"--{flag.replace('_', '-')}", value]
        self.assertEqual(self.admin(*argv), "Created successfully\n")
        self.wait_running(name)

    def status(self, name) -> dict:
        return json.loads(self.admin("status", "--fqfn", f"public/default/{name}"))

    def wait_running(self, name, timeout=30.0, restarts=0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.status(name)
            except self.failureException as e:
                # A (re)started standalone's worker answers 503 until it has read the platform.
                if "503" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            if status["numRunning"] == status["numInstances"] and all(
                    i["status"]["numRestarts"] >= restarts for i in status["instances"]):
                return status
            if time.monotonic() > deadline:
                self.fail(f"{name} not running within {timeout}s: {status}\n"
                          + self.standalone.log_tail(40))
            time.sleep(0.1)

    def http_json(self, path):
        with urllib.request.urlopen(self.standalone.web_service_url + path, timeout=10) as r:
            return json.load(r)

    def output_consumer(self, topic):
        return self.client.subscribe(topic, "test", initial_position=pulsar.InitialPosition.Earliest)

    # ------------------------------------------------------------------ tests
    def test_exclusion_filter(self):
        """A plain function dropping excluded words; outputs carry Pulsar's __pfn_ properties
        and the input's key; list, get, status and stats through the CLI."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        self.create("exclusion", EXCLUSION, "exclusion", inputs=inp, output=out)
        consumer = self.output_consumer(out)
        producer = self.client.create_producer(inp)
        sent = {}
        for i, text in enumerate(["hello world", "buy spam now", "good day", "junk mail", "bye"]):
            sent[text] = producer.send(text.encode(), partition_key=f"k{i}")
        got = [self.receive(consumer) for _ in range(3)]
        self.assertEqual([m.data() for m in got], [b"hello world", b"good day", b"bye"])
        first = got[0]
        self.assertEqual(first.partition_key(), "k0")
        self.assertEqual(first.properties()["__pfn_input_topic__"], inp)
        import base64
        self.assertEqual(base64.b64decode(first.properties()["__pfn_input_msg_id__"]),
                         sent["hello world"].serialize())
        self.assertIn("exclusion", self.admin("list").split())
        self.assertEqual(json.loads(self.admin("get", "--name", "exclusion"))["inputs"], [inp])
        deadline = time.monotonic() + 10
        while json.loads(self.admin("stats", "--name", "exclusion"))["receivedTotal"] < 5:
            self.assertLess(time.monotonic(), deadline, "stats never counted 5 received")
            time.sleep(0.1)
        stats = json.loads(self.admin("stats", "--name", "exclusion"))
        self.assertEqual((stats["processedSuccessfullyTotal"], stats["userExceptionsTotal"]), (5, 0))
        with urllib.request.urlopen(self.standalone.web_service_url + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
        self.assertTrue(any(line.startswith("pulsar_function_received_total{") and 'name="exclusion"'
                            in line and line.endswith(" 5.0") for line in metrics.splitlines()),
                        metrics[-2000:])
        status = self.status("exclusion")
        self.assertEqual((status["numInstances"], status["numRunning"]), (1, 1))
        self.assertEqual(status["instances"][0]["status"]["numReceived"], 5)
        self.assertEqual(self.admin("trigger", "--name", "exclusion", "--trigger-value", "hi there"),
                         "hi there\n")
        subscriptions = inp.replace("persistent://", "/admin/v2/persistent/") + "/subscriptions"
        self.assertEqual(self.http_json(subscriptions), ["public/default/exclusion"])
        self.assertEqual(self.admin("delete", "--name", "exclusion"), "Deleted successfully\n")
        self.assertNotIn("exclusion", self.admin("list").split())
        self.assertEqual(self.http_json(subscriptions), [])   # cleanupSubscription

    def test_publish_counters_and_state(self):
        """context.publish reaches a second topic; counters and state are shared, durable and
        readable with querystate, also after the standalone (and its worker) restarts."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        side = self.topic("side", "persistent")
        self.create("wordcount", COUNTER, "wordcount.WordCount", inputs=inp, output=out,
                    user_config=json.dumps({"side": side}))
        consumer, side_consumer = self.output_consumer(out), self.output_consumer(side)
        producer = self.client.create_producer(inp)
        for text in ("a b", "a c", "a"):
            producer.send(text.encode())
        self.assertEqual([self.receive(consumer).data() for _ in range(3)], [b"a b:1", b"a c:2", b"a:3"])
        words = [self.receive(side_consumer) for _ in range(5)]
        self.assertEqual([m.data() for m in words], [b"A", b"B", b"A", b"C", b"A"])
        self.assertEqual(words[0].properties(), {"from": "wordcount"})
        state = json.loads(self.admin("querystate", "--name", "wordcount", "--key", "a"))
        self.assertEqual(state["numberValue"], 3)
        self.assertEqual(json.loads(self.admin("querystate", "--name", "wordcount", "--key", "last"))
                         ["stringValue"], "a")
        self.client.close()
        self.standalone.restart()
        self.client = self.new_client()
        self.wait_running("wordcount")
        consumer = self.client.subscribe(out, "after-restart")
        self.client.create_producer(inp).send(b"a")
        self.assertEqual(self.receive(consumer).data(), b"a:4")

    def crash_on_first_message(self, name, guarantee):
        """SLOW_ONCE under ``guarantee`` given m0..m4, its instance killed -9 while it holds m0
        (received, no output yet); the output consumer, once the worker restarted it."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        marker = os.path.join(self.standalone.directory, f"marker-{name}-{time.time()}")
        self.create(name, SLOW_ONCE, f"{name}.SlowOnce", inputs=inp, output=out,
                    processing_guarantees=guarantee, user_config=json.dumps({"marker": marker}))
        consumer = self.output_consumer(out)
        producer = self.client.create_producer(inp)
        for i in range(5):
            producer.send(f"m{i}".encode())
        deadline = time.monotonic() + 15
        while not os.path.exists(marker):
            self.assertLess(time.monotonic(), deadline, "the instance never took the first message")
            time.sleep(0.05)
        with open(marker) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        status = self.wait_running(name, restarts=1)
        self.assertEqual(status["instances"][0]["status"]["numRestarts"], 1)
        return consumer

    def test_atleast_once_across_kill9(self):
        """ATLEAST_ONCE: the instance killed -9 between receipt and output is restarted by the
        worker, and every input's output appears (at least once)."""
        consumer = self.crash_on_first_message("slowalo", "ATLEAST_ONCE")
        outputs = set()
        while not {f"m{i}!" for i in range(5)} <= outputs:
            outputs.add(self.receive(consumer).data().decode())

    def test_effectively_once_across_kill9(self):
        """EFFECTIVELY_ONCE (output namespace deduplicated, as Pulsar requires): whatever the
        killed instance had sent or acked, every input's output appears exactly once."""
        base = self.standalone.web_service_url + "/admin/v2/namespaces/public/eo"
        for method, path, body in (("PUT", "", None), ("POST", "/deduplication", b"true")):
            request = urllib.request.Request(base + path, data=body, method=method,
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10).close()
        inp = self.topic("in", "persistent")
        out = f"persistent://public/eo/out-{time.time()}"
        marker = os.path.join(self.standalone.directory, f"marker-eo-{time.time()}")
        self.create("eo", SLOW_SECOND, "eo.SlowSecond", inputs=inp, output=out,
                    processing_guarantees="EFFECTIVELY_ONCE", user_config=json.dumps({"marker": marker}))
        consumer = self.output_consumer(out)
        producer = self.client.create_producer(inp)
        for i in range(5):
            producer.send(f"m{i}".encode())
        deadline = time.monotonic() + 15
        while not os.path.exists(marker):
            self.assertLess(time.monotonic(), deadline, "the instance never took m1")
            time.sleep(0.01)
        with open(marker) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.wait_running("eo", restarts=1)
        outputs = [self.receive(consumer).data().decode() for _ in range(5)]
        self.assertEqual(outputs, [f"m{i}!" for i in range(5)])
        self.assertEqual(self.drain(consumer, quiet_ms=1500), [])

    def test_atmost_once_across_kill9(self):
        """ATMOST_ONCE acks on receipt: the message the killed instance held is lost, never
        repeated; the ones it had not taken yet are processed once."""
        consumer = self.crash_on_first_message("slowamo", "ATMOST_ONCE")
        outputs = [self.receive(consumer).data().decode() for _ in range(4)]
        self.assertEqual(sorted(outputs), ["m1!", "m2!", "m3!", "m4!"])
        self.assertEqual(self.drain(consumer, quiet_ms=1500), [])

    def test_user_exception_retries_then_dead_letter(self):
        """A user exception negative-acks; past maxMessageRetries the input goes to the
        deadLetterTopic; the exception shows in status and stats."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        dlq = self.topic("dlq", "persistent")
        self.create("raiser", RAISER, "raiser", inputs=inp, output=out, max_message_retries="1",
                    dead_letter_topic=dlq)
        consumer, dead = self.output_consumer(out), self.output_consumer(dlq)
        producer = self.client.create_producer(inp)
        for text in ("ok1", "boom", "ok2"):
            producer.send(text.encode())
        self.assertEqual(sorted(self.receive(consumer).data() for _ in range(2)), [b"ok1", b"ok2"])
        self.assertEqual(self.receive(dead).data(), b"boom")
        status = self.status("raiser")["instances"][0]["status"]
        self.assertGreaterEqual(status["numUserExceptions"], 1)
        self.assertEqual(status["latestUserExceptions"][0]["exceptionString"],
                         "ValueError: boom is not welcome")
        stats = json.loads(self.admin("stats", "--name", "raiser", "--instance-id", "0"))
        self.assertEqual(stats["userExceptionsTotal"], status["numUserExceptions"])

    def test_localrun(self):
        """``functions localrun`` runs the instance here, with no worker, until interrupted."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        path = os.path.join(self.standalone.directory, "localexcl.py")
        with open(path, "w") as f:
            f.write(EXCLUSION)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=root)
        child = subprocess.Popen(
            [sys.executable, "-m", "pulsar_twisted.cli.admin", "--admin-url",
             self.standalone.web_service_url, "functions", "localrun", "--name", "local",
             "--py", path, "--classname", "localexcl", "--inputs", inp, "--output", out,
             "--subs-position", "Earliest", "--broker-service-url", self.standalone.service_url],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            consumer = self.output_consumer(out)
            producer = self.client.create_producer(inp)
            for text in ("one", "spam two", "three"):
                producer.send(text.encode())
            self.assertEqual([self.receive(consumer).data() for _ in range(2)], [b"one", b"three"])
            self.assertNotIn("local", self.admin("list").split())   # no worker involved
        finally:
            child.send_signal(signal.SIGINT)
            self.assertEqual(child.wait(timeout=20), 0)

    def test_zip_package(self):
        """A .zip package in Pulsar's layout (``name/src/module.py``), uploaded by the CLI."""
        import zipfile
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        path = os.path.join(self.standalone.directory, "zipped.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("zipped/src/zipped.py", EXCLUSION)
        self.assertEqual(self.admin("create", "--name", "zipped", "--py", path, "--classname",
                                    "zipped", "--inputs", inp, "--output", out, "--subs-position",
                                    "Earliest"), "Created successfully\n")
        self.wait_running("zipped")
        consumer = self.output_consumer(out)
        producer = self.client.create_producer(inp)
        for text in ("junk", "kept"):
            producer.send(text.encode())
        self.assertEqual(self.receive(consumer).data(), b"kept")

    def test_package_larger_than_a_message(self):
        """A package above the broker's maxMessageSize (5 MB) goes to the packages topic as
        chunks and comes back from it for the instance."""
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        padding = "# " + "x" * (5 * 1024 * 1024 + 200 * 1024) + "\n"
        self.create("large", padding + EXCLUSION, "large", inputs=inp, output=out)
        consumer = self.output_consumer(out)
        self.client.create_producer(inp).send(b"kept")
        self.assertEqual(self.receive(consumer).data(), b"kept")
        # The worker's copy (read back from the packages topic) is the whole package.
        copies = [os.path.join(root, "large.py") for root, _, files in os.walk(self.standalone.directory)
                  if "large.py" in files and root.endswith(os.path.join("public", "default", "large"))]
        self.assertEqual(len(copies), 1)
        with open(copies[0]) as f:
            self.assertEqual(f.read(), padding + EXCLUSION)
