"""
The ``debezium-postgres`` source: PostgreSQL row changes as Debezium-style change events, from
logical replication with the ``pgoutput`` plugin, with Debezium's config keys:
``database.hostname``, ``database.port`` (5432), ``database.user``, ``database.password``,
``database.dbname``, ``topic.prefix`` (or the older ``database.server.name``),
``table.include.list`` (comma-separated regexes matched against ``schema.table``; all tables when
absent) and ``table.exclude.list``, ``plugin.name`` (``pgoutput``, the only one), ``slot.name`` (``debezium``),
``publication.name`` (``dbz_publication``, created ``FOR ALL TABLES`` when absent, as Debezium's
``all_tables`` auto-create mode does), ``snapshot.mode`` (``initial``, the default: the rows
already in the tables first, as ``op: "r"``; or ``never``), ``tombstones.on.delete`` (true: a
delete is followed by a keyed empty message, for compaction and the JDBC sink's deletes).

Every event goes to ``<topic.prefix>.<schema>.<table>`` (Debezium's topic naming) unless the
source's ``topicName`` is set; its key is the row's primary key as a JSON object, its value
``{"before", "after", "source": {"version", "connector", "name", "ts_ms", "snapshot", "db",
"schema", "table", "txId", "lsn"}, "op": "c"|"u"|"d"|"r", "ts_ms"}``, integer, float and boolean
columns typed, the rest as PostgreSQL's text.

Before-images: with ``REPLICA IDENTITY FULL`` an update's ``before`` is the whole old row and a
delete's too. With the default identity an update has ``before: null`` (unless its key changed:
then the old key columns) and a delete's ``before`` holds only the key columns (the rest null).

At-least-once, how: the slot is read with ``pg_logical_slot_peek_binary_changes`` (which does
not consume) and its confirmed position moved with ``pg_replication_slot_advance`` only past
transactions whose every event the broker has acknowledged, in commit order; a peek skips the
transactions this process already emitted. A restarted instance therefore gets again exactly the
transactions not yet fully acknowledged (duplicates only from those). The SQL functions were
chosen over the streaming replication protocol: they work over an ordinary connection (no
replication connection, no feedback loop to keep alive), and "advance only after acks" is one
statement. The price is that each peek decodes again from the confirmed position, so the source
keeps at most ``max.queue.size`` (8192) unacknowledged events before it peeks again.

The initial snapshot survives a restart the same way: on creating the slot the source writes a
transactional logical message (``pg_logical_emit_message``, prefix ``pulsar-io-snapshot``) into
the WAL; when the stream reaches it the tables are read (REPEATABLE READ) and their rows become
part of that transaction, so the slot moves past the marker only once every snapshot row is
acknowledged, and a restart before that snapshots again.
"""

import collections
import json
import logging
import re
import threading
import time

from pulsar_twisted.functions.connectors import pgoutput
from pulsar_twisted.functions.connectors.base import Record, _bool

log = logging.getLogger(__name__)

SNAPSHOT_PREFIX = "pulsar-io-snapshot"
VERSION = "pulsar-twisted"


def _patterns(text) -> list:
    """Debezium's comma-separated regex lists (matched whole against ``schema.table``)."""
    return [re.compile(p.strip()) for p in str(text or "").split(",") if p.strip()]


class _Txn:
    """One transaction's events, until all are acked."""

    __slots__ = ("end_lsn", "pending", "records", "size")

    def __init__(self, end_lsn: int):
        self.end_lsn = end_lsn
        self.pending = 0
        self.records = []
        #: Its events when emitted (a bound of its rows in the slot, for the next peek's limit).
        self.size = 0


class DebeziumPostgresSource:

    def __init__(self, configs: dict, clock=time):
        self.configs = configs
        self.clock = clock
        plugin = configs.get("plugin.name", "pgoutput")
        if plugin != "pgoutput":
            raise ValueError(f"plugin.name {plugin}: only pgoutput is supported")
        self.prefix = configs.get("topic.prefix") or configs.get("database.server.name")
        if not self.prefix:
            raise ValueError("topic.prefix (or database.server.name) must be set")
        self.dbname = configs.get("database.dbname") or "postgres"
        self.slot = configs.get("slot.name", "debezium")
        self.publication = configs.get("publication.name", "dbz_publication")
        self.snapshot_mode = configs.get("snapshot.mode", "initial")
        if self.snapshot_mode not in ("initial", "never"):
            raise ValueError(f"snapshot.mode {self.snapshot_mode}: initial or never")
        self.tombstones = _bool(configs.get("tombstones.on.delete", True))
        self.includes = _patterns(configs.get("table.include.list"))
        self.excludes = _patterns(configs.get("table.exclude.list"))
        self.max_pending = int(configs.get("max.queue.size", 8192))
        self.peek_rows = int(configs.get("max.batch.size", 2048))
        self.poll_s = int(configs.get("poll.interval.ms", 500)) / 1000.0
        self.relations = {}
        self.ready = collections.deque()          # records to hand out
        self.inflight = collections.deque()       # _Txn in commit order, not yet fully acked
        self.lock = threading.Lock()
        self.emitted_end = 0                      # end LSN of the last transaction emitted
        self.emitted_commit = 0                   # and its commit LSN
        self.advanced = 0                         # the slot's confirmed position (as we moved it)
        #: Where an idle slot may move: the WAL end before a peek that found nothing at all.
        self.idle_target = 0
        self.last_advance = 0.0
        self.next_peek = 0.0
        self.connection = self._connect()
        try:
            self._prepare()
        except Exception:
            self.connection.close()
            raise

    # ------------------------------------------------------------ set-up
    def _connect(self):
        import psycopg
        c = self.configs
        return psycopg.connect(host=c.get("database.hostname", "localhost"),
                               port=int(c.get("database.port", 5432)), dbname=self.dbname,
                               user=c.get("database.user"), password=c.get("database.password"),
                               autocommit=True, connect_timeout=10)

    def _prepare(self) -> None:
        """The publication and the slot, created when absent (and the snapshot marker with a
        new slot)."""
        sql = self.connection.execute
        if sql("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)).fetchone() is None:
            from psycopg import sql as q
            self.connection.execute(q.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(
                q.Identifier(self.publication)))
            log.info("created publication %s FOR ALL TABLES", self.publication)
        row = sql("SELECT plugin, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                  (self.slot,)).fetchone()
        if row is None:
            sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
            log.info("created replication slot %s", self.slot)
            if self.snapshot_mode == "initial":
                sql("SELECT pg_logical_emit_message(true, %s, %s)", (SNAPSHOT_PREFIX, self.slot))
        elif row[0] != "pgoutput":
            raise ValueError(f"replication slot {self.slot} uses plugin {row[0]}, not pgoutput")
        else:
            self.advanced = pgoutput.lsn_int(row[1]) if row[1] else 0

    # ------------------------------------------------------------ the source contract
    def read(self, timeout: float):
        self._maybe_advance()
        if not self.ready:
            with self.lock:
                pending = sum(t.pending for t in self.inflight)
                # What a peek decodes again before reaching new transactions: every in-flight
                # transaction's rows (acked ones included), with its begin/commit.
                behind = sum(t.size + 3 for t in self.inflight)
            now = self.clock.time()
            if pending < self.max_pending and now >= self.next_peek:
                if not self._peek(behind):
                    self.next_peek = now + self.poll_s
            if not self.ready:
                time.sleep(min(timeout, self.poll_s))
                self._maybe_advance(force=True)
                return None
        return self.ready.popleft()

    def ack(self, record) -> None:
        with self.lock:
            record.token.pending -= 1

    def close(self) -> None:
        try:
            self._maybe_advance(force=True)
        except Exception as e:
            # Not moved: the next instance gets those transactions again (at-least-once).
            log.warning("could not advance slot %s at close: %s", self.slot, e)
        finally:
            self.connection.close()

    # ------------------------------------------------------------ reading the slot
    def _peek(self, behind: int) -> bool:
        """One peek (``behind``: the rows it gives again first); True when it gave new
        transactions."""
        wal_end = self.connection.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        rows = self.connection.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', "
            "'publication_names', %s, 'messages', 'true')",
            (self.slot, behind + self.peek_rows, self.publication)).fetchall()
        if not rows:
            # Every transaction committed before ``wal_end`` would have come: none is pending, so
            # the slot may move there (it would otherwise hold the WAL of unpublished activity).
            with self.lock:
                if not self.inflight:
                    self.idle_target = pgoutput.lsn_int(wal_end)
        before = self.emitted_end
        txn, meta = None, None
        for (data,) in rows:
            message = pgoutput.decode(data)
            kind = message["type"]
            if kind == "begin":
                txn = _Txn(0)
                meta = {"xid": message["xid"], "ts_ms": pgoutput.unix_ms(message["commit_time"]),
                        "lsn": message["final_lsn"]}
                # An already emitted transaction is recognised by its commit LSN.
                meta["skip"] = message["final_lsn"] <= self.emitted_commit
            elif kind == "relation":
                self._relation(message)
            elif kind == "commit":
                if txn is not None and not meta["skip"]:
                    txn.end_lsn = message["end_lsn"]
                    txn.pending = txn.size = len(txn.records)
                    with self.lock:
                        self.inflight.append(txn)
                    self.ready.extend(txn.records)
                    txn.records = []
                    self.emitted_end = message["end_lsn"]
                    self.emitted_commit = message["commit_lsn"]
                txn = meta = None
            elif txn is None or meta["skip"]:
                continue
            elif kind in ("insert", "update", "delete"):
                self._change(txn, meta, message)
            elif kind == "message" and message["prefix"] == SNAPSHOT_PREFIX:
                if message["content"].decode() == self.slot:
                    self._snapshot(txn, meta)
            elif kind == "truncate":
                log.warning("TRUNCATE of relations %s is not emitted as change events", message["relids"])
        return self.emitted_end != before

    def _relation(self, message) -> None:
        relid = message["relid"]
        primary = [r[0] for r in self.connection.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)", (relid,)).fetchall()]
        if not primary and message["replica_identity"] != "f":
            primary = [c["name"] for c in message["columns"] if c["key"]]
        message["primary"] = primary
        name = f"{message['schema']}.{message['table']}"
        message["included"] = ((not self.includes or any(p.fullmatch(name) for p in self.includes))
                               and not any(p.fullmatch(name) for p in self.excludes))
        self.relations[relid] = message

    def _row(self, relation, values):
        if values is None:
            return None
        return {c["name"]: pgoutput.typed(v, c["type_oid"]) for c, v in zip(relation["columns"], values)}

    def _change(self, txn, meta, message) -> None:
        relation = self.relations.get(message["relid"])
        if relation is None:
            raise pgoutput.DecodeError(f"change of relation {message['relid']} before its Relation message")
        if not relation["included"]:
            return
        after = self._row(relation, message.get("new"))
        before = self._row(relation, message.get("old"))
        if message["type"] == "delete" and message["old_kind"] == "K":
            # Only the key columns came (default replica identity): the rest are unknown.
            before = {c["name"]: (before[c["name"]] if c["key"] else None) for c in relation["columns"]}
        if message["type"] == "update" and before is not None and message["old_kind"] == "K":
            before = {k: v for k, v in before.items()
                      if any(c["key"] and c["name"] == k for c in relation["columns"])}
        op = {"insert": "c", "update": "u", "delete": "d"}[message["type"]]
        self._emit(txn, relation, op, before, after, meta, snapshot=False)

    def _emit(self, txn, relation, op, before, after, meta, snapshot) -> None:
        row = after if after is not None else before
        key = None
        if relation["primary"] and row is not None:
            key = json.dumps({k: row.get(k) for k in relation["primary"]}, separators=(",", ":"))
        value = {"before": before, "after": after,
                 "source": {"version": VERSION, "connector": "postgresql", "name": self.prefix,
                            "ts_ms": meta["ts_ms"], "snapshot": "true" if snapshot else "false",
                            "db": self.dbname, "schema": relation["schema"], "table": relation["table"],
                            "txId": meta["xid"], "lsn": meta["lsn"]},
                 "op": op, "ts_ms": int(self.clock.time() * 1000)}
        topic = f"{self.prefix}.{relation['schema']}.{relation['table']}"
        txn.records.append(Record(json.dumps(value, separators=(",", ":")).encode(), key=key,
                                  event_time=meta["ts_ms"], topic=topic, token=txn))
        if op == "d" and self.tombstones and key is not None:
            txn.records.append(Record(b"", key=key, event_time=meta["ts_ms"], topic=topic, token=txn))

    def _snapshot(self, txn, meta) -> None:
        """The included tables' rows, read in one REPEATABLE READ transaction, as ``op: "r"``."""
        tables = self.connection.execute(
            "SELECT c.oid, n.nspname, c.relname FROM pg_publication_tables p "
            "JOIN pg_namespace n ON n.nspname = p.schemaname "
            "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
            "WHERE p.pubname = %s ORDER BY 2, 3", (self.publication,)).fetchall()
        from psycopg import sql as q
        count = 0
        with self.connection.transaction():
            self.connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for oid, schema, table in tables:
                columns = self.connection.execute(
                    "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                    "AND NOT attisdropped ORDER BY attnum", (oid,)).fetchall()
                relation = {"schema": schema, "table": table, "replica_identity": "d",
                            "columns": [{"name": n, "type_oid": t, "key": False} for n, t in columns]}
                streamed = self.relations.get(oid)
                self._relation(dict(relation, relid=oid))
                relation = self.relations.pop(oid)
                if streamed is not None:
                    self.relations[oid] = streamed
                if not relation["included"]:
                    continue
                select = q.SQL("SELECT {} FROM {}.{}").format(
                    q.SQL(", ").join(q.SQL("{}::text").format(q.Identifier(n)) for n, _ in columns),
                    q.Identifier(schema), q.Identifier(table))
                for values in self.connection.execute(select):
                    self._emit(txn, relation, "r", None, self._row(relation, values), meta, snapshot=True)
                    count += 1
        log.info("snapshot of %d tables: %d rows", len(tables), count)

    # ------------------------------------------------------------ moving the slot
    def _maybe_advance(self, force=False) -> None:
        now = self.clock.time()
        if not force and now - self.last_advance < 0.2:
            return
        self.last_advance = now
        target = None
        with self.lock:
            while self.inflight and self.inflight[0].pending <= 0:
                target = self.inflight.popleft().end_lsn
            if target is None and not self.inflight and self.idle_target > self.advanced:
                target = self.idle_target
        if target is not None and target > self.advanced:
            self.connection.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                                    (self.slot, pgoutput.lsn_text(target)))
            self.advanced = target
