"""
The ``pgoutput`` decoder on hand-built messages, and the ``debezium-postgres`` source in this
process against the real PostgreSQL of ``test_connector_servers``: the snapshot, Debezium-style
events with before-images (REPLICA IDENTITY FULL and default), per-table topics, and the slot
moved only past acknowledged transactions (a new source instance gets the unacked again).
"""

import json
import struct
import time

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.connectors import pgoutput
from tests.functions import test_connector_servers as servers


def s(text):
    return text.encode() + b"\0"


def tuple_data(*values):
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is pgoutput.UNCHANGED_TOAST:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


class DecoderTests(SynchronousTestCase):

    def test_transaction_messages(self):
        begin = pgoutput.decode(b"B" + struct.pack(">QqI", 0x16B3748, 789_000_000, 735))
        self.assertEqual(begin, {"type": "begin", "final_lsn": 0x16B3748, "commit_time": 789_000_000,
                                 "xid": 735})
        self.assertEqual(pgoutput.unix_ms(789_000_000), 946_684_800_000 + 789_000)
        commit = pgoutput.decode(b"C" + struct.pack(">bQQq", 0, 0x16B3748, 0x16B3778, 5))
        self.assertEqual((commit["commit_lsn"], commit["end_lsn"]), (0x16B3748, 0x16B3778))
        self.assertEqual(pgoutput.lsn_text(0x1_016B3748), "1/16B3748")
        self.assertEqual(pgoutput.lsn_int("1/16B3748"), 0x1_016B3748)

    def test_relation_and_row_changes(self):
        relation = pgoutput.decode(
            b"R" + struct.pack(">I", 16385) + s("public") + s("people") + b"d" + struct.pack(">h", 2)
            + b"\x01" + s("id") + struct.pack(">Ii", 23, -1) + b"\x00" + s("name") + struct.pack(">Ii", 25, -1))
        self.assertEqual(relation["table"], "people")
        self.assertEqual(relation["replica_identity"], "d")
        self.assertEqual([(c["name"], c["key"], c["type_oid"]) for c in relation["columns"]],
                         [("id", True, 23), ("name", False, 25)])
        insert = pgoutput.decode(b"I" + struct.pack(">I", 16385) + b"N" + tuple_data("1", "ada"))
        self.assertEqual(insert, {"type": "insert", "relid": 16385, "new": ["1", "ada"]})
        update = pgoutput.decode(b"U" + struct.pack(">I", 16385) + b"O" + tuple_data("1", "ada")
                                 + b"N" + tuple_data("1", pgoutput.UNCHANGED_TOAST))
        self.assertEqual((update["old_kind"], update["old"], update["new"]),
                         ("O", ["1", "ada"], ["1", pgoutput.UNCHANGED_TOAST]))
        plain = pgoutput.decode(b"U" + struct.pack(">I", 16385) + b"N" + tuple_data("1", None))
        self.assertEqual((plain["old"], plain["new"]), (None, ["1", None]))
        delete = pgoutput.decode(b"D" + struct.pack(">I", 16385) + b"K" + tuple_data("1", None))
        self.assertEqual((delete["old_kind"], delete["old"]), ("K", ["1", None]))
        truncate = pgoutput.decode(b"T" + struct.pack(">ibII", 2, 0, 1, 2))
        self.assertEqual(truncate["relids"], [1, 2])
        message = pgoutput.decode(b"M\x01" + struct.pack(">Q", 9) + s("p") + struct.pack(">i", 2) + b"hi")
        self.assertEqual((message["transactional"], message["prefix"], message["content"]), (True, "p", b"hi"))

    def test_typed_values(self):
        self.assertEqual(pgoutput.typed("42", 23), 42)
        self.assertEqual(pgoutput.typed("2.5", 701), 2.5)
        self.assertIs(pgoutput.typed("t", 16), True)
        self.assertIs(pgoutput.typed("false", 16), False)
        self.assertEqual(pgoutput.typed("12.30", 1700), "12.30")
        self.assertIsNone(pgoutput.typed(None, 23))
        self.assertEqual(pgoutput.typed(pgoutput.UNCHANGED_TOAST, 25), "__debezium_unavailable_value")

    def test_bad_messages(self):
        for data in (b"Z", b"B\x00", b"R" + struct.pack(">I", 1) + b"public", b"I" + struct.pack(">I", 1) + b"X",
                     b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">h", 1) + b"q"):
            with self.assertRaises(pgoutput.DecodeError):
                pgoutput.decode(data)


class SourceTests(SynchronousTestCase):

    def setUp(self):
        reason = servers.postgres_unavailable()
        if reason:
            raise self.skipTest(reason)
        self.db = servers.pg_database(self)
        self.sql = servers.pg_connect(self.db, autocommit=True)
        self.addCleanup(self.sql.close)
        self.sql.execute("CREATE TABLE people (id int PRIMARY KEY, name text, score float8, ok bool)")
        self.sql.execute("CREATE TABLE other (k text PRIMARY KEY)")
        self.sql.execute("INSERT INTO people VALUES (1, 'ada', 1.5, true), (2, 'alan', 2.5, false)")

    def source(self, **extra):
        from pulsar_twisted.functions.connectors.debezium import DebeziumPostgresSource
        host, port = servers.postgres()
        configs = {"database.hostname": host, "database.port": str(port), "database.user": "postgres",
                   "database.password": servers.PG_PASSWORD, "database.dbname": self.db,
                   "topic.prefix": "srv", "table.include.list": r"public\.people", "poll.interval.ms": "50"}
        source = DebeziumPostgresSource(dict(configs, **extra))
        self.addCleanup(source.connection.close)
        return source

    def drain(self, source, want=None, timeout=10.0):
        got, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = source.read(0.05)
            if record is None:
                if want is None or len(got) >= want:
                    break
                continue
            got.append(record)
        return got

    @staticmethod
    def value(record):
        return json.loads(record.value) if record.value else None

    def test_snapshot_then_changes_with_before_images(self):
        source = self.source()
        snapshot = self.drain(source, 2)
        self.assertEqual([(r.key, self.value(r)["op"]) for r in snapshot], [('{"id":1}', "r"), ('{"id":2}', "r")])
        first = self.value(snapshot[0])
        self.assertEqual(first["after"], {"id": 1, "name": "ada", "score": 1.5, "ok": True})
        self.assertEqual((first["source"]["snapshot"], first["source"]["table"], first["source"]["db"]),
                         ("true", "people", self.db))
        self.assertEqual(snapshot[0].topic, "srv.public.people")
        self.sql.execute("INSERT INTO people VALUES (3, 'grace', NULL, NULL)")
        self.sql.execute("INSERT INTO other VALUES ('ignored')")
        self.sql.execute("UPDATE people SET name = 'alan t.' WHERE id = 2")
        self.sql.execute("DELETE FROM people WHERE id = 1")
        self.sql.execute("ALTER TABLE people REPLICA IDENTITY FULL")
        self.sql.execute("UPDATE people SET score = 9 WHERE id = 3")
        self.sql.execute("DELETE FROM people WHERE id = 2")
        events = self.drain(source, 7)
        values = [self.value(r) for r in events]
        self.assertEqual([v and v["op"] for v in values], ["c", "u", "d", None, "u", "d", None])
        self.assertEqual(values[0]["after"], {"id": 3, "name": "grace", "score": None, "ok": None})
        self.assertEqual(values[0]["source"]["snapshot"], "false")
        self.assertIsInstance(values[0]["source"]["txId"], int)
        self.assertIsInstance(values[0]["source"]["lsn"], int)
        # Default replica identity: no before-image for an update; a delete's holds only the key.
        self.assertIsNone(values[1]["before"])
        self.assertEqual(values[2]["before"], {"id": 1, "name": None, "score": None, "ok": None})
        self.assertEqual((events[3].key, events[3].value), ('{"id":1}', b""))   # the tombstone
        # REPLICA IDENTITY FULL: whole before-images.
        self.assertEqual(values[4]["before"], {"id": 3, "name": "grace", "score": None, "ok": None})
        self.assertEqual(values[4]["after"]["score"], 9.0)
        self.assertEqual(values[5]["before"], {"id": 2, "name": "alan t.", "score": 2.5, "ok": False})
        self.assertTrue(all(r.topic == "srv.public.people" for r in events))

    def test_slot_moves_only_past_acked_transactions(self):
        """Unacked events come again to a new instance; acked ones do not."""
        source = self.source(**{"snapshot.mode": "never"})
        for i in range(10, 15):
            self.sql.execute("INSERT INTO people VALUES (%s, 'p', 0, true)", (i,))
        events = self.drain(source, 5)
        self.assertEqual([self.value(r)["after"]["id"] for r in events], [10, 11, 12, 13, 14])
        for record in events[:3]:
            source.ack(record)
        source.close()
        again = self.source(**{"snapshot.mode": "never"})
        events = self.drain(again, 2)
        self.assertEqual([self.value(r)["after"]["id"] for r in events], [13, 14])
        for record in events:
            again.ack(record)
        again.close()
        third = self.source(**{"snapshot.mode": "never"})
        self.assertEqual(self.drain(third, None, timeout=1.0), [])
        # Idle, with activity the publication does not carry: the slot still moves on (no WAL kept).
        self.sql.execute("CREATE TABLE unpublished_activity (x int)")
        wal = pgoutput.lsn_int(str(self.sql.execute("SELECT pg_current_wal_lsn()").fetchone()[0]))

        def confirmed():
            return pgoutput.lsn_int(str(self.sql.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE database = current_database()"
            ).fetchone()[0]))
        deadline = time.monotonic() + 10
        while confirmed() < wal:
            self.assertLess(time.monotonic(), deadline, "the idle slot never moved")
            self.assertIsNone(third.read(0.05))
        third.close()

    def test_unacked_snapshot_is_taken_again(self):
        source = self.source()
        self.assertEqual(len(self.drain(source, 2)), 2)
        source.close()
        again = self.source()
        snapshot = self.drain(again, 2)
        self.assertEqual([self.value(r)["op"] for r in snapshot], ["r", "r"])
        for record in snapshot:
            again.ack(record)
        again.close()
        self.assertEqual(self.drain(self.source(), None, timeout=1.0), [])

    def test_unchanged_toasted_value_is_debeziums_placeholder(self):
        source = self.source(**{"snapshot.mode": "never"})
        self.sql.execute("INSERT INTO people SELECT 5, string_agg(md5(g::text), '') , 0, true "
                         "FROM generate_series(1, 400) g")   # 12.8 kB of incompressible text: TOASTed
        self.sql.execute("UPDATE people SET score = 1 WHERE id = 5")
        insert, update = [self.value(r) for r in self.drain(source, 2)]
        self.assertEqual(len(insert["after"]["name"]), 12800)
        self.assertEqual((update["after"]["name"], update["after"]["score"]),
                         ("__debezium_unavailable_value", 1.0))

    def test_exclude_list(self):
        source = self.source(**{"snapshot.mode": "never", "table.include.list": r"public\..*",
                                "table.exclude.list": r"public\.people"})
        self.sql.execute("INSERT INTO people VALUES (8, 'x', 0, true)")
        self.sql.execute("INSERT INTO other VALUES ('kept')")
        events = self.drain(source, 1)
        self.assertEqual([(r.topic, r.key) for r in events], [("srv.public.other", '{"k":"kept"}')])

    def test_config_errors(self):
        for bad, message in (({"plugin.name": "decoderbufs"}, "pgoutput"),
                             ({"topic.prefix": None}, "topic.prefix"),
                             ({"snapshot.mode": "always"}, "snapshot.mode")):
            with self.assertRaises(ValueError) as e:
                self.source(**bad)
            self.assertIn(message, str(e.exception))
