"""
The JDBC, Redis and PostgreSQL change-data connectors end to end: a real ``twistd -n
pulsar-standalone`` whose functions worker runs them as child processes, created with
``pulsar-admin sinks|sources create``; the official client produces what the sinks write and
reads what the change-data source emits; 10,000 records each, nothing lost. PostgreSQL and Redis
come from ``test_connector_servers`` (the tests skip, saying why, without them).
"""

import json
import os
import signal
import sqlite3
import time
import uuid

from tests.functions import test_connector_servers as servers
from tests.functions import test_io_process
from tests.interop.test_core import InteropCase, pulsar

RECORDS = 10_000


class ConnectorProcessTests(InteropCase):

    standalone_config = {"journalSyncData": "false"}
    receive_timeout_ms = 20000

    admin = test_io_process.IoProcessTests.admin
    wait_running = test_io_process.IoProcessTests.wait_running
    instance_pid = test_io_process.IoProcessTests.instance_pid

    def produce(self, topic, items, batching=True):
        """``items``: (key, value bytes) sent with the official client; all persisted."""
        producer = self.client.create_producer(topic, batching_enabled=batching, block_if_queue_full=True)
        results = []
        for key, value in items:
            kwargs = {"partition_key": key} if key is not None else {}
            producer.send_async(value, lambda result, msg_id: results.append(result), **kwargs)
        producer.flush()
        producer.close()
        self.assertEqual(results.count(pulsar.Result.Ok), len(items))

    def wait_for(self, predicate, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            self.assertLess(time.monotonic(), deadline, f"{what}\n" + self.standalone.log_tail(40))
            time.sleep(0.25)

    def backlog(self, topic, subscription) -> int:
        import urllib.request
        with urllib.request.urlopen(f"{self.standalone.web_service_url}/admin/v2/persistent/public/"
                                    f"default/{topic}/stats", timeout=10) as r:
            return json.load(r)["subscriptions"][subscription]["msgBacklog"]

    # ------------------------------------------------------------------ JDBC
    def jdbc_case(self, sink_type, configs, rows, crash=False):
        """10,000 upserted people (with ``crash``, the instance killed -9 midway: it acks only
        committed records, so the restarted one writes the rest), then 100 tombstones and 3 bad
        records: 9,900 rows; the bad records end on the dead-letter topic after their retries;
        the backlog drains."""
        topic, name = self.topic("people"), f"jdbc-{uuid.uuid4().hex[:6]}"
        dlq = self.topic("people-dlq")
        dead = self.client.subscribe(dlq, "check", initial_position=pulsar.InitialPosition.Earliest)
        self.assertEqual(self.admin(
            "sinks", "create", "--name", name, "--sink-type", sink_type, "--inputs", topic,
            "--max-redeliver-count", "1", "--dead-letter-topic", dlq,
            "--sink-config", json.dumps(dict(configs, tableName="people", key="id", insertMode="UPSERT",
                                             nullValueAction="DELETE", batchSize=500, timeoutMs=50))),
            "Created successfully\n")
        self.wait_running("sinks", name)
        pid = self.instance_pid("sink", name)
        people = [(str(i), json.dumps({"id": i, "name": f"p{i}", "age": i % 90}).encode())
                  for i in range(RECORDS)]
        # With a crash: killed once 2,000 of the first 3,000 are in, the other 7,000 sent after.
        first = 3000 if crash else RECORDS
        self.produce(topic, people[:first])
        if crash:
            self.wait_for(lambda: rows() >= 2000, f"rows before the crash: {rows()}")
            os.kill(pid, signal.SIGKILL)
            self.produce(topic, people[first:])
        self.wait_for(lambda: rows() == RECORDS, f"rows: {rows()}")
        self.produce(topic, [(str(i), b"") for i in range(100)])
        # Unbatched: a batch is redelivered (and dead-lettered) whole, good records with the bad.
        self.produce(topic, [("x", b"{not json"), ("y", b'{"id": 1, "colour": 2}'),
                             (None, b'{"name": "no id"}')], batching=False)
        self.wait_for(lambda: rows() == RECORDS - 100, f"rows: {rows()}")
        bad = {self.receive(dead).data() for _ in range(3)}
        self.assertEqual(bad, {b"{not json", b'{"id": 1, "colour": 2}', b'{"name": "no id"}'})
        self.wait_for(lambda: self.backlog(topic, f"public/default/{name}") == 0, "backlog")
        self.assertEqual(rows(), RECORDS - 100)
        status = json.loads(self.admin("sinks", "status", "--name", name))["instances"][0]["status"]
        self.assertGreaterEqual(status["numSinkExceptions"], 3)
        self.assertTrue(any("not JSON" in e["exceptionString"] for e in status["latestSinkExceptions"]),
                        status["latestSinkExceptions"])
        if not crash:
            self.assertGreaterEqual(status["numWrittenToSink"], RECORDS + 100)
        else:
            self.assertGreaterEqual(status["numRestarts"], 1)
        self.assertEqual(self.admin("sinks", "delete", "--name", name), "Deleted successfully\n")

    def test_jdbc_sqlite_sink(self):
        path = os.path.join(self.standalone.directory, f"{uuid.uuid4().hex[:6]}.db")
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")

        def rows():
            with sqlite3.connect(path, timeout=30) as c:
                return c.execute("SELECT count(*) FROM people").fetchone()[0]
        self.jdbc_case("jdbc-sqlite", {"jdbcUrl": f"jdbc:sqlite:{path}"}, rows)
        with sqlite3.connect(path) as c:
            self.assertEqual(c.execute("SELECT name, age FROM people WHERE id = 4321").fetchone(), ("p4321", 1))

    def test_jdbc_postgres_sink(self):
        db = servers.pg_database(self)
        with servers.pg_connect(db, autocommit=True) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")

        def rows():
            with servers.pg_connect(db) as c:
                return c.execute("SELECT count(*) FROM people").fetchone()[0]
        self.jdbc_case("jdbc-postgres", servers.pg_configs(db), rows, crash=True)

    def test_cli_update_stats_and_localrun(self):
        """``sinks update`` changes the parallelism and the config (instances restarted on
        it); ``stats``/``status --instance-id``; ``sinks localrun`` runs a sink here, no worker."""
        import subprocess
        import sys
        path = os.path.join(self.standalone.directory, f"{uuid.uuid4().hex[:6]}.db")
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        topic, name = self.topic("cli"), f"cli-{uuid.uuid4().hex[:6]}"
        configs = {"jdbcUrl": f"jdbc:sqlite:{path}", "tableName": "people", "key": "id"}
        self.admin("sinks", "create", "--name", name, "--sink-type", "jdbc-sqlite", "--inputs", topic,
                   "--sink-config", json.dumps(configs))
        self.wait_running("sinks", name)
        self.assertEqual(self.admin("sinks", "update", "--name", name, "--parallelism", "2", "--sink-config",
                                    json.dumps(dict(configs, insertMode="UPSERT"))),
                         "Updated successfully\n")
        got = json.loads(self.admin("sinks", "get", "--name", name))
        self.assertEqual((got["parallelism"], got["configs"]["insertMode"], got["inputs"]), (2, "UPSERT", [topic]))
        self.assertEqual(self.wait_running("sinks", name)["numInstances"], 2)
        self.produce(topic, [(None, json.dumps({"id": i % 50, "name": "n", "age": i}).encode())
                             for i in range(200)])
        self.wait_for(lambda: json.loads(self.admin("sinks", "stats", "--name", name))
                      ["processedSuccessfullyTotal"] == 200, "stats")
        one = json.loads(self.admin("sinks", "status", "--name", name, "--instance-id", "1"))
        self.assertIn("numWrittenToSink", one)
        self.admin("sinks", "delete", "--name", name)
        # localrun: the same sink run by the CLI process itself.
        local = self.topic("local")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        child = subprocess.Popen(
            [sys.executable, "-m", "pulsar_twisted.cli.admin", "--admin-url", self.standalone.web_service_url,
             "sinks", "localrun", "--name", "local", "--sink-type", "jdbc-sqlite", "--inputs", local,
             "--subs-position", "Earliest", "--broker-service-url", self.standalone.service_url,
             "--sink-config", json.dumps(dict(configs, insertMode="UPSERT"))],
            env=dict(os.environ, PYTHONPATH=root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.produce(local, [(None, json.dumps({"id": 1000 + i, "name": "l", "age": 0}).encode())
                                 for i in range(100)])

            def local_rows():
                with sqlite3.connect(path, timeout=30) as c:
                    return c.execute("SELECT count(*) FROM people WHERE id >= 1000").fetchone()[0]
            self.wait_for(lambda: local_rows() == 100, "localrun rows")
            self.assertNotIn("local", self.admin("sinks", "list").split())
        finally:
            child.send_signal(signal.SIGINT)
            self.assertEqual(child.wait(timeout=20), 0)

    def test_jdbc_sink_takes_avro_values(self):
        """Records produced with an AVRO schema reach the table as their fields (the sink
        decodes them with the topic's schema version); tombstones (null values) delete."""
        from pulsar.schema import AvroSchema, Integer, Record, String

        class Person(Record):
            id = Integer()
            name = String()
            age = Integer()
        path = os.path.join(self.standalone.directory, f"{uuid.uuid4().hex[:6]}.db")
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        topic, name = self.topic("avro"), f"avro-{uuid.uuid4().hex[:6]}"
        self.admin("sinks", "create", "--name", name, "--sink-type", "jdbc-sqlite", "--inputs", topic,
                   "--sink-config", json.dumps({"jdbcUrl": f"jdbc:sqlite:{path}", "tableName": "people",
                                                "key": "id", "insertMode": "UPSERT", "timeoutMs": 50}))
        self.wait_running("sinks", name)
        producer = self.client.create_producer(topic, schema=AvroSchema(Person))
        for i in range(200):
            producer.send(Person(id=i, name=f"a{i}", age=i % 7), partition_key=str(i))
        producer.close()

        def rows():
            with sqlite3.connect(path, timeout=30) as c:
                return c.execute("SELECT id, name, age FROM people ORDER BY id").fetchall()
        self.wait_for(lambda: len(rows()) == 200, f"rows: {len(rows())}")
        self.assertEqual(rows()[:2], [(0, "a0", 0), (1, "a1", 1)])
        self.admin("sinks", "delete", "--name", name)

    # ------------------------------------------------------------------ Redis
    def test_redis_sink(self):
        import redis
        host, port = servers.redis()
        db = 5
        client = redis.Redis(host=host, port=port, db=db)
        self.addCleanup(client.close)
        prefix = uuid.uuid4().hex[:8]
        topic, name = self.topic("to-redis"), f"redis-{prefix}"
        self.admin("sinks", "create", "--name", name, "--sink-type", "redis", "--inputs", topic,
                   "--sink-config", json.dumps({"redisHosts": f"{host}:{port}", "redisDatabase": db,
                                                "batchSize": 500, "batchTimeMs": 50}))
        self.wait_running("sinks", name)
        self.produce(topic, [(f"{prefix}:{i}", f"value-{i}".encode()) for i in range(RECORDS)])
        keys = lambda: len(list(client.scan_iter(f"{prefix}:*", count=1000)))  # noqa: E731
        self.wait_for(lambda: keys() == RECORDS, "keys")
        self.assertEqual(client.get(f"{prefix}:9999"), b"value-9999")
        self.wait_for(lambda: self.backlog(topic, f"public/default/{name}") == 0, "backlog")
        self.wait_for(lambda: json.loads(self.admin("sinks", "stats", "--name", name))
                      ["processedSuccessfullyTotal"] == RECORDS, "stats")
        self.admin("sinks", "delete", "--name", name)

    # ------------------------------------------------------------------ change data
    def test_debezium_postgres_source_across_a_crash(self):
        """10,000 inserted rows (some updated and deleted) become change events on the table's
        topic; a kill -9 of the instance midway loses none (its slot had not moved past them)."""
        db = servers.pg_database(self)
        sql = servers.pg_connect(db, autocommit=True)
        self.addCleanup(sql.close)
        sql.execute("CREATE TABLE items (id int PRIMARY KEY, label text)")
        sql.execute("ALTER TABLE items REPLICA IDENTITY FULL")
        sql.execute("INSERT INTO items SELECT g, 'before-' || g FROM generate_series(0, 99) g")
        host, port = servers.postgres()
        prefix = f"srv{uuid.uuid4().hex[:6]}"
        topic = f"{prefix}.public.items"
        consumer = self.client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        name = f"cdc-{prefix}"
        self.assertEqual(self.admin(
            "sources", "create", "--name", name, "--source-type", "debezium-postgres", "--source-config",
            json.dumps({"database.hostname": host, "database.port": str(port), "database.user": "postgres",
                        "database.password": servers.PG_PASSWORD, "database.dbname": db,
                        "topic.prefix": prefix, "table.include.list": "public.items",
                        "slot.name": f"slot_{prefix}", "publication.name": f"pub_{prefix}",
                        "poll.interval.ms": "100"})), "Created successfully\n")
        pid = self.instance_pid("source", name)
        events = {}

        def take(count):
            for _ in range(count):
                m = self.receive(consumer)
                value = json.loads(m.data()) if m.data() else None
                events.setdefault((m.partition_key(), value and value["op"]), value)
        take(100)   # the snapshot
        self.assertTrue(all(op == "r" for (_, op) in events))
        for start in range(100, RECORDS, 1000):
            sql.execute("INSERT INTO items SELECT g, 'row-' || g FROM generate_series(%s::int, %s::int) g",
                        (start, min(start + 999, RECORDS - 1)))
        take(3000)
        os.kill(pid, signal.SIGKILL)
        sql.execute("UPDATE items SET label = 'updated' WHERE id < 10")
        sql.execute("DELETE FROM items WHERE id >= 9990")
        want = ({(json.dumps({"id": i}, separators=(",", ":")), "c") for i in range(100, RECORDS)}
                | {(json.dumps({"id": i}, separators=(",", ":")), "u") for i in range(10)}
                | {(json.dumps({"id": i}, separators=(",", ":")), "d") for i in range(9990, RECORDS)})
        while not want <= set(events):
            take(1)
        update = events[('{"id":3}', "u")]
        self.assertEqual((update["before"]["label"], update["after"]["label"]), ("before-3", "updated"))
        delete = events[('{"id":9995}', "d")]
        self.assertEqual((delete["before"]["label"], delete["after"]), ("row-9995", None))
        self.assertEqual(delete["source"]["table"], "items")
        status = json.loads(self.admin("sources", "status", "--name", name))
        self.assertGreaterEqual(status["instances"][0]["status"]["numRestarts"], 1)
        self.admin("sources", "delete", "--name", name)

    def test_zz_debezium_postgres_source_across_a_standalone_restart(self):
        """Rows written while the standalone (broker and worker) is down reach the topic once the
        restarted worker runs the source again: the slot kept them. (Last in the class: it
        restarts the shared standalone.)"""
        db = servers.pg_database(self)
        sql = servers.pg_connect(db, autocommit=True)
        self.addCleanup(sql.close)
        sql.execute("CREATE TABLE items (id int PRIMARY KEY)")
        host, port = servers.postgres()
        prefix = f"srv{uuid.uuid4().hex[:6]}"
        topic = f"persistent://public/default/{prefix}.public.items"
        name = f"cdc-{prefix}"
        self.admin("sources", "create", "--name", name, "--source-type", "debezium-postgres", "--source-config",
                   json.dumps({"database.hostname": host, "database.port": str(port),
                               "database.user": "postgres", "database.password": servers.PG_PASSWORD,
                               "database.dbname": db, "topic.prefix": prefix, "slot.name": f"slot_{prefix}",
                               "publication.name": f"pub_{prefix}", "poll.interval.ms": "100"}))
        consumer = self.client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        sql.execute("INSERT INTO items SELECT generate_series(0, 999)")
        seen = {json.loads(self.receive(consumer).data())["after"]["id"] for _ in range(1000)}
        self.client.close()
        self.standalone.stop()
        sql.execute("INSERT INTO items SELECT generate_series(1000, 1999)")
        self.standalone.start()
        self.client = self.new_client()
        consumer = self.client.subscribe(topic, "check")
        while len(seen) < 2000:
            seen.add(json.loads(self.receive(consumer).data())["after"]["id"])
        self.assertEqual(seen, set(range(2000)))
        self.admin("sources", "delete", "--name", name)


def _skip_without(reason_of, *names):
    for name in names:
        reason = reason_of()
        if reason:
            getattr(ConnectorProcessTests, name).skip = reason


_skip_without(servers.postgres_unavailable, "test_jdbc_postgres_sink",
              "test_debezium_postgres_source_across_a_crash",
              "test_zz_debezium_postgres_source_across_a_standalone_restart")
_skip_without(servers.redis_unavailable, "test_redis_sink")
