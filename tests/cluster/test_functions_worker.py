"""
``twistd pulsar-functions-worker`` beside a real cluster (ZooKeeper, one bookie, one broker): a
function created through the worker's admin API runs, and a restarted worker takes its functions
and their state back from the cluster's metadata store.
"""

import io
import json
import os
import textwrap
import uuid

from pulsar_twisted.cli.admin import main as admin_main
from pulsar_twisted.testing.cluster import wait_for
from tests.cluster.test_processes import ClusterCase, pulsar

COUNTING = textwrap.dedent('''
    import pulsar

    class Count(pulsar.Function):
        def process(self, input, context):
            return "%s:%d" % (input, context.incr_counter(input, 1))
''')


class FunctionsWorkerDaemonTests(ClusterCase):

    def admin(self, worker, *argv) -> str:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main(["--admin-url", worker.web_service_url, "functions"] + list(argv),
                          out=out, err=err)
        self.assertEqual(code, 0, err.getvalue())
        return out.getvalue()

    def running(self, worker, name) -> bool:
        try:
            status = json.loads(self.admin(worker, "status", "--name", name))
        except Exception:
            return False
        return status["numRunning"] == status["numInstances"] > 0

    def test_worker_beside_a_cluster_survives_its_restart(self):
        """Create through the worker, process through the broker; stop and start the worker:
        the function runs again with its counters."""
        cluster = self.make_cluster(bookies=1, brokers=1, broker_config={
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1})
        worker = cluster.add_functions_worker()
        worker.start()
        prefix = uuid.uuid4().hex[:8]
        inp, out = (f"persistent://public/default/{prefix}-{n}" for n in ("in", "out"))
        path = os.path.join(cluster.directory, "count.py")
        with open(path, "w") as f:
            f.write(COUNTING)
        self.assertEqual(self.admin(worker, "create", "--name", "count", "--py", path, "--classname",
                                    "count.Count", "--inputs", inp, "--output", out,
                                    "--subs-position", "Earliest"), "Created successfully\n")
        wait_for(lambda: self.running(worker, "count"), 30, "the function running",
                 on_timeout=cluster.logs)
        client = self.client(cluster.brokers[0].service_url)
        consumer = client.subscribe(out, "test", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(inp)
        producer.send(b"x")
        message = consumer.receive(timeout_millis=15000)
        consumer.acknowledge(message)
        self.assertEqual(message.data(), b"x:1")
        worker.stop()
        worker.start()
        wait_for(lambda: self.running(worker, "count"), 30, "the function running again",
                 on_timeout=cluster.logs)
        producer.send(b"x")
        self.assertEqual(consumer.receive(timeout_millis=15000).data(), b"x:2")
        self.assertEqual(json.loads(self.admin(worker, "querystate", "--name", "count", "--key", "x"))
                         ["numberValue"], 2)
        self.assertEqual(cluster.tracebacks(), {})
