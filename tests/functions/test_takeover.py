"""
Two ``twistd pulsar-functions-worker`` processes beside a small real cluster (ZooKeeper, one
bookie, one broker): a function created through either worker is assigned by the leader; the
worker running its instance is killed -9 and the other takes the instance over (after
``rescheduleTimeoutMs``), with nothing lost under ATLEAST_ONCE, the official client producing
the input and reading the output. And a worker across a broker restart: its records, leadership
and instance carry on, and a function created after it works.
"""

import io
import json
import os
import textwrap
import uuid

from pulsar_twisted.cli.admin import main as admin_main
from pulsar_twisted.testing.cluster import wait_for
from tests.cluster.test_processes import ClusterCase, pulsar

SLOWISH = textwrap.dedent('''
    import time

    def process(input):
        time.sleep(0.01)
        return input + "!"
''')

WORKER_CONFIG = {"failureCheckFreqMs": 300, "rescheduleTimeoutMs": 1500}


class TakeoverTests(ClusterCase):

    def admin(self, worker, *argv, group="functions") -> str:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--admin-url", worker.web_service_url, group] + list(argv),
                          out=out, err=err)
        self.assertEqual(code, 0, err.getvalue())
        return out.getvalue()

    def status(self, worker, name, group="functions"):
        try:
            return json.loads(self.admin(worker, "status", "--name", name, group=group))
        except Exception:
            return None

    def running_on(self, worker, name):
        """The workerId running every instance, when they all run on one; else None."""
        status = self.status(worker, name)
        if not status or status["numRunning"] != status["numInstances"]:
            return None
        owners = {i["status"]["workerId"] for i in status["instances"]}
        return owners.pop() if len(owners) == 1 else None

    def test_kill9_of_the_worker_running_the_instance(self):
        cluster = self.make_cluster(bookies=1, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1})
        workers = {}
        for worker_id in ("A", "B"):
            worker = cluster.add_functions_worker(dict(WORKER_CONFIG, workerId=worker_id))
            worker.start()
            workers[worker_id] = worker
        prefix = uuid.uuid4().hex[:8]
        inp, out = (f"persistent://public/default/{prefix}-{n}" for n in ("in", "out"))
        path = os.path.join(cluster.directory, "slowish.py")
        with open(path, "w") as f:
            f.write(SLOWISH)
        # Through B: forwarded to the leader when B is not it.
        self.assertEqual(self.admin(workers["B"], "create", "--name", "echo", "--py", path,
                                    "--classname", "slowish", "--inputs", inp, "--output", out,
                                    "--processing-guarantees", "ATLEAST_ONCE",
                                    "--subs-position", "Earliest"), "Created successfully\n")
        for worker in workers.values():
            self.assertEqual(json.loads(self.admin(worker, "get", "--name", "echo"))["inputs"], [inp])
        owner = wait_for(lambda: self.running_on(workers["A"], "echo"), 30, "the instance running",
                         on_timeout=cluster.logs)
        survivor = "B" if owner == "A" else "A"

        # A data-generator source with two instances, created through B: one on each worker.
        self.assertIn("successfully", self.admin(
            workers["B"], "create", "--name", "gen", "--source-type", "data-generator",
            "--destination-topic-name", f"persistent://public/default/{prefix}-gen",
            "--parallelism", "2", "--source-config", '{"sleepBetweenMessages": 200}',
            group="sources"))

        def source_owners(worker):
            status = self.status(worker, "gen", group="sources")
            if not status or status["numRunning"] != 2:
                return None
            return sorted(i["status"]["workerId"] for i in status["instances"])
        self.assertEqual(wait_for(lambda: source_owners(workers["A"]), 30, "the source running",
                                  on_timeout=cluster.logs), ["A", "B"])

        client = self.client(cluster.brokers[0].service_url)
        consumer = client.subscribe(out, "test", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(inp)
        sent = [f"m{i}".encode() for i in range(200)]
        for payload in sent[:100]:
            producer.send(payload)
        first = consumer.receive(timeout_millis=15000)   # it is processing
        consumer.acknowledge(first)
        workers[owner].kill9()
        for payload in sent[100:]:
            producer.send(payload)

        taken = wait_for(lambda: self.running_on(workers[survivor], "echo") == survivor, 30,
                         f"worker {survivor} running the instance", on_timeout=cluster.logs)
        self.assertTrue(taken)
        self.assertEqual(wait_for(lambda: source_owners(workers[survivor]) == [survivor] * 2, 30,
                                  f"worker {survivor} running both source instances",
                                  on_timeout=cluster.logs), True)
        wanted = {p + b"!" for p in sent}
        received = {first.data()} | self.receive_all(consumer, wanted - {first.data()}, 30)
        self.assert_all_received(wanted, received)

        # The survivor (leader now) still answers for the function and its record.
        self.assertEqual(json.loads(self.admin(workers[survivor], "get", "--name", "echo"))["output"], out)
        self.assertEqual(self.admin(workers[survivor], "delete", "--name", "echo"),
                         "Deleted successfully\n")
        self.assertNotIn("echo", self.admin(workers[survivor], "list"))

    def test_broker_restart_under_a_worker(self):
        cluster = self.make_cluster(bookies=1, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1})
        worker = cluster.add_functions_worker(dict(WORKER_CONFIG, workerId="A"))
        worker.start()
        prefix = uuid.uuid4().hex[:8]
        topics = {n: f"persistent://public/default/{prefix}-{n}" for n in ("in", "out", "in2", "out2")}
        path = os.path.join(cluster.directory, "slowish.py")
        with open(path, "w") as f:
            f.write(SLOWISH)

        def create(name, inp, out):
            self.assertEqual(self.admin(worker, "create", "--name", name, "--py", path,
                                        "--classname", "slowish", "--inputs", inp, "--output", out,
                                        "--subs-position", "Earliest"), "Created successfully\n")
            wait_for(lambda: self.running_on(worker, name) == "A", 30, f"{name} running",
                     on_timeout=cluster.logs)
        create("before", topics["in"], topics["out"])
        cluster.brokers[0].restart()
        # Created after the restart: the worker's metadata producer, reader and leadership are
        # back (the write goes through the leader, itself).
        create("after", topics["in2"], topics["out2"])
        client = self.client(cluster.brokers[0].service_url)
        for name, inp, out in (("before", topics["in"], topics["out"]),
                               ("after", topics["in2"], topics["out2"])):
            consumer = client.subscribe(out, "test", initial_position=pulsar.InitialPosition.Earliest)
            client.create_producer(inp).send(name.encode())
            self.assertEqual(consumer.receive(timeout_millis=30000).data(), (name + "!").encode())
        # The worker's own log stays clean (a broker stopping under an admin request may log
        # one of its own, which is the broker's business).
        self.assertEqual({n: t for n, t in cluster.tracebacks().items() if "functions" in n}, {})
