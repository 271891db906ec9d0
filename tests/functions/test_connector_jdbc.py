"""
The JDBC sinks: the SQL they build, and ``jdbc-sqlite`` / ``jdbc-postgres`` writing into real
databases (a SQLite file; the PostgreSQL of ``test_connector_servers``): inserts, upserts by
key, updates, deletes on tombstones, and bad records refused one by one while the rest commit.
"""

import json
import os
import sqlite3

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.connectors import SinkRecord
from pulsar_twisted.functions.connectors.jdbc import PostgresJdbcSink, SqliteJdbcSink, Statements
from tests.functions import test_connector_servers as servers


def rec(value, key=None):
    if isinstance(value, dict):
        value = json.dumps(value).encode()
    return SinkRecord(value, key)


class StatementTests(SynchronousTestCase):

    def test_sql_per_mode(self):
        s = Statements("people", ["id"], ["name", "age"], "?")
        self.assertEqual(s.insert(), ('INSERT INTO "people" ("id", "name", "age") VALUES (?, ?, ?)',
                                      ["id", "name", "age"]))
        self.assertEqual(s.upsert()[0], 'INSERT INTO "people" ("id", "name", "age") VALUES (?, ?, ?) '
                         'ON CONFLICT ("id") DO UPDATE SET "name" = excluded."name", "age" = excluded."age"')
        self.assertEqual(s.update(), ('UPDATE "people" SET "name" = ?, "age" = ? WHERE "id" = ?',
                                      ["name", "age", "id"]))
        self.assertEqual(s.delete(), ('DELETE FROM "people" WHERE "id" = ?', ["id"]))
        two = Statements("s.t", ["a", "b"], [], "%s")
        self.assertEqual(two.upsert()[0], 'INSERT INTO "s"."t" ("a", "b") VALUES (%s, %s) '
                         'ON CONFLICT ("a", "b") DO NOTHING')
        self.assertEqual(two.delete()[0], 'DELETE FROM "s"."t" WHERE "a" = %s AND "b" = %s')
        self.assertEqual(Statements('we"ird', ["k"], [], "?").delete()[0],
                         'DELETE FROM "we""ird" WHERE "k" = ?')


class JdbcCases:
    """The same cases against each database: ``make(**configs)`` a sink on a fresh
    ``people(id PRIMARY KEY, name, age)`` table, ``rows()`` its content."""

    def test_upsert_by_key_and_delete_on_tombstone(self):
        sink = self.make(key="id", insertMode="UPSERT", nullValueAction="DELETE")
        self.assertEqual(sink.write([rec({"id": 1, "name": "ada", "age": 36}),
                                     rec({"id": 2, "name": "alan", "age": 41})]), [])
        self.assertEqual(sink.write([rec({"id": 1, "name": "ada l.", "age": 37}),
                                     rec(b"", key="2"), rec(b"null", key='{"id": 3}')]), [])
        self.assertEqual(self.rows(), [(1, "ada l.", 37)])

    def test_insert_mode_update_mode_and_key_from_the_message(self):
        sink = self.make(key="id", nonKey="name")
        self.assertEqual(sink.write([rec({"name": "grace"}, key="7")]), [])
        self.assertEqual(self.rows(), [(7, "grace", None)])
        updater = self.make(key="id", nonKey="age", insertMode="UPDATE", fresh=False)
        self.assertEqual(updater.write([rec({"id": 7, "age": 85})]), [])
        self.assertEqual(self.rows(), [(7, "grace", 85)])

    def test_bad_records_refused_alone(self):
        """Not JSON, not an object, an unknown column, no key, a tombstone with FAIL, a
        duplicate key in INSERT mode: each refused with its reason; the rest committed."""
        sink = self.make(key="id")
        good = [rec({"id": i, "name": f"n{i}", "age": i}) for i in range(5)]
        bad = [rec(b"{not json"), rec(b"[1, 2]"), rec({"id": 9, "colour": "red"}),
               rec({"name": "keyless"}), rec(b"", key="3"), rec({"id": 1, "name": "again"})]
        refused = sink.write(good[:2] + bad + good[2:])
        self.assertEqual([r.value for r in refused], [r.value for r in bad])
        reasons = [r.error for r in refused]
        self.assertIn("not JSON", reasons[0])
        self.assertIn("not a JSON object", reasons[1])
        self.assertIn("colour", reasons[2])
        self.assertIn("no key", reasons[3])
        self.assertIn("nullValueAction=FAIL", reasons[4])
        self.assertTrue(reasons[5], reasons)
        self.assertEqual(self.rows(), [(i, f"n{i}", i) for i in range(5)])
        # The sink goes on after the refusals.
        self.assertEqual(sink.write([rec({"id": 10, "name": "x", "age": 1})]), [])
        self.assertEqual(len(self.rows()), 6)

    def test_excluded_fields_and_config_errors(self):
        sink = self.make(key="id", excludeNonDeclaredFields="true")
        self.assertEqual(sink.write([rec({"id": 1, "name": "a", "extra": True})]), [])
        self.assertEqual(self.rows(), [(1, "a", None)])
        for bad, message in (({"key": "nope"}, "no column"), ({"insertMode": "MERGE"}, "insertMode"),
                             ({"insertMode": "UPSERT"}, "key columns"),
                             ({"tableName": "missing_table"}, "not found")):
            with self.assertRaises(ValueError) as e:
                self.make(fresh=False, **bad)
            self.assertIn(message, str(e.exception))


class SqliteJdbcTests(JdbcCases, SynchronousTestCase):

    def make(self, fresh=True, **configs):
        if fresh:
            self.path = os.path.join(self.mktemp() + ".db")
            with sqlite3.connect(self.path) as c:
                c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        sink = SqliteJdbcSink(dict({"jdbcUrl": f"jdbc:sqlite:{self.path}", "tableName": "people"}, **configs))
        self.addCleanup(sink.close)
        return sink

    def rows(self):
        with sqlite3.connect(self.path) as c:
            return c.execute("SELECT id, name, age FROM people ORDER BY id").fetchall()


class PostgresJdbcTests(JdbcCases, SynchronousTestCase):

    def setUp(self):
        reason = servers.postgres_unavailable()
        if reason:
            raise self.skipTest(reason)
        self.db = servers.pg_database(self)

    def make(self, fresh=True, **configs):
        if fresh:
            with servers.pg_connect(self.db, autocommit=True) as c:
                c.execute("DROP TABLE IF EXISTS people")
                c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        sink = PostgresJdbcSink(dict(servers.pg_configs(self.db), **dict({"tableName": "people"}, **configs)))
        self.addCleanup(sink.close)
        return sink

    def rows(self):
        with servers.pg_connect(self.db) as c:
            return c.execute("SELECT id, name, age FROM people ORDER BY id").fetchall()

    def test_lost_connection_raises_then_reconnects(self):
        """A write on a connection the server dropped raises (the instance negative-acks the
        batch) without refusing its records one by one; the next write connects again."""
        import psycopg
        sink = self.make(key="id", insertMode="UPSERT")
        self.assertEqual(sink.write([rec({"id": 1, "name": "a", "age": 1})]), [])
        pid = sink.connection.info.backend_pid
        with servers.pg_connect(self.db, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with self.assertRaises(psycopg.Error):
            sink.write([rec({"id": 2, "name": "b", "age": 2})])
        self.assertEqual(sink.write([rec({"id": 2, "name": "b", "age": 2})]), [])
        self.assertEqual(self.rows(), [(1, "a", 1), (2, "b", 2)])

    def test_wrong_password_is_a_clear_error(self):
        import psycopg
        with self.assertRaises(psycopg.OperationalError) as e:
            self.make(password="wrong")
        self.assertIn("password", str(e.exception))


class SchemaValuesTests(SynchronousTestCase):
    """AVRO values become JSON with the topic's schema of their version (fetched once)."""

    class Message:
        def __init__(self, version, topic="persistent://public/default/people-partition-2"):
            self.version, self.topic = version, topic

        def int_schema_version(self):
            return self.version

        def topic_name(self):
            return self.topic

    def test_avro_to_json(self):
        import io as bytes_io

        import fastavro

        from pulsar_twisted.functions.connectors.schemas import SchemaValues
        avro = {"type": "record", "name": "Person", "fields": [{"name": "id", "type": "int"},
                                                                {"name": "name", "type": ["null", "string"]}]}
        fetched = []

        def fetch(tenant, namespace, topic, version):
            fetched.append((tenant, namespace, topic, version))
            return {"type": "AVRO" if version == 0 else "JSON", "data": json.dumps(avro)}
        values = SchemaValues("http://unused", fetch=fetch)
        out = bytes_io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(avro), {"id": 7, "name": "ada"})
        for _ in range(2):
            self.assertEqual(json.loads(values.json_value(self.Message(0), out.getvalue())),
                             {"id": 7, "name": "ada"})
        self.assertEqual(fetched, [("public", "default", "people", 0)])
        self.assertEqual(values.json_value(self.Message(1), b'{"id": 1}'), b'{"id": 1}')   # JSON schema
        self.assertEqual(values.json_value(self.Message(-1), b"raw"), b"raw")              # no schema
        self.assertEqual(values.json_value(self.Message(0), b""), b"")                     # tombstone
        with self.assertRaises(ValueError):
            values.json_value(self.Message(0), b"\xff")

    def test_schema_of_a_partition_is_its_parents(self):
        """A partition's schema is its partitioned topic's; a name that only looks like one
        (``-partition-01``: not a partition by Pulsar's rule) keeps its own."""
        from pulsar_twisted.functions.connectors.schemas import SchemaValues
        fetched = []

        def fetch(tenant, namespace, topic, version):
            fetched.append(topic)
            return {"type": "JSON"}
        values = SchemaValues("http://unused", fetch=fetch)
        for topic in ("persistent://public/default/people-partition-2",
                      "persistent://public/default/people-partition-01"):
            values.json_value(self.Message(3, topic), b"{}")
        self.assertEqual(fetched, ["people", "people-partition-01"])
