"""
The JDBC sinks, ``jdbc-sqlite`` and ``jdbc-postgres``, with Pulsar's ``JdbcSinkConfig`` keys:

- ``jdbcUrl`` (``jdbc:sqlite:/path/to.db``; ``jdbc:postgresql://host:port/db``), ``userName``
  and ``password`` (PostgreSQL), ``tableName``;
- ``key`` and ``nonKey``: comma-separated column lists (``nonKey`` empty: every other column of
  the table); ``excludeNonDeclaredFields`` (false: a record field the table lacks is refused);
- ``insertMode`` ``INSERT`` (default) | ``UPSERT`` (``ON CONFLICT (key) DO UPDATE``) |
  ``UPDATE``; ``nullValueAction`` ``FAIL`` (default) | ``DELETE``;
- ``batchSize`` (default 200) and ``timeoutMs`` (default 500): how many records one transaction
  takes and how long the instance waits to fill it.

A record's value is a JSON object (the message's JSON, or its AVRO decoded to JSON with the
topic's schema, ``schemas.py``) whose fields are columns; key columns missing from the value are taken from the message key (a JSON object,
or the plain key for a single key column). A tombstone (empty value, or JSON ``null``) with a
key deletes the row when ``nullValueAction=DELETE``. Every batch is one transaction and
``write`` returns after its commit, so the instance acks only committed records. A bad record
(not a JSON object, a missing key column, an unknown column, a statement the database refuses)
is given back with its error, the rest still committed: the batch is first run whole, and on a
database error run again with a savepoint per record to find the culprits.
"""

import json
import logging
import re
import sqlite3
import threading

from pulsar_twisted.functions.connectors.base import BadRecord, _bool

log = logging.getLogger(__name__)

INSERT_MODES = ("INSERT", "UPSERT", "UPDATE")
NULL_ACTIONS = ("FAIL", "DELETE")


def _columns(text) -> list:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def quote(identifier: str) -> str:
    """A SQL identifier, double-quoted (a schema-qualified ``a.b`` quoted part by part)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in identifier.split("."))


class Statements:
    """The SQL of one table's writes (``mark``: the driver's placeholder, ``?`` or ``%s``)."""

    def __init__(self, table: str, keys: list, non_keys: list, mark: str):
        self.table, self.keys, self.non_keys, self.mark = table, keys, non_keys, mark

    def _marks(self, n) -> str:
        return ", ".join([self.mark] * n)

    def _where(self) -> str:
        return " AND ".join(f"{quote(k)} = {self.mark}" for k in self.keys)

    def insert(self) -> tuple:
        """(SQL, columns in parameter order)."""
        columns = self.keys + self.non_keys
        names = ", ".join(quote(c) for c in columns)
        return f"INSERT INTO {quote(self.table)} ({names}) VALUES ({self._marks(len(columns))})", columns

    def upsert(self) -> tuple:
        sql, columns = self.insert()
        conflict = ", ".join(quote(k) for k in self.keys)
        if self.non_keys:
            sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in self.non_keys)
            return f"{sql} ON CONFLICT ({conflict}) DO UPDATE SET {sets}", columns
        return f"{sql} ON CONFLICT ({conflict}) DO NOTHING", columns

    def update(self) -> tuple:
        sets = ", ".join(f"{quote(c)} = {self.mark}" for c in self.non_keys)
        return f"UPDATE {quote(self.table)} SET {sets} WHERE {self._where()}", self.non_keys + self.keys

    def delete(self) -> tuple:
        return f"DELETE FROM {quote(self.table)} WHERE {self._where()}", list(self.keys)


class JdbcSink:
    """The common part; ``connect()``, ``table_columns()`` and ``mark`` per database."""

    mark = "?"
    #: AVRO values are given as JSON (``schemas.SchemaValues``).
    wants_json = True

    def __init__(self, configs: dict, clock=None):
        self.configs = configs
        self.url = configs.get("jdbcUrl")
        self.table = configs.get("tableName")
        if not self.url or not self.table:
            raise ValueError("jdbcUrl and tableName must be set")
        self.insert_mode = str(configs.get("insertMode", "INSERT")).upper()
        if self.insert_mode not in INSERT_MODES:
            raise ValueError(f"insertMode {self.insert_mode}: one of {', '.join(INSERT_MODES)}")
        self.null_action = str(configs.get("nullValueAction", "FAIL")).upper()
        if self.null_action not in NULL_ACTIONS:
            raise ValueError(f"nullValueAction {self.null_action}: one of {', '.join(NULL_ACTIONS)}")
        self.exclude_undeclared = _bool(configs.get("excludeNonDeclaredFields", False))
        #: The instance fills batches of this size, waiting up to ``batch_time_ms``.
        self.batch_size = int(configs.get("batchSize", 200))
        self.batch_time_ms = int(configs.get("timeoutMs", 500))
        self.lock = threading.Lock()
        self.connection = None
        self.connection = self.connect()
        try:
            self._prepare(configs)
        except Exception:
            self.close()
            raise

    def _prepare(self, configs) -> None:
        """The table's columns, checked against ``key``/``nonKey``, and the statements."""
        columns = self.table_columns()
        if not columns:
            raise ValueError(f"table {self.table} not found (or has no columns)")
        keys = _columns(configs.get("key"))
        non_keys = _columns(configs.get("nonKey")) or [c for c in columns if c not in keys]
        missing = [c for c in keys + non_keys if c not in columns]
        if missing:
            raise ValueError(f"table {self.table} has no column(s) {', '.join(missing)}")
        if not keys and (self.insert_mode != "INSERT" or self.null_action == "DELETE"):
            raise ValueError(f"insertMode {self.insert_mode} / nullValueAction {self.null_action} "
                             "need key columns (config key)")
        self.keys, self.non_keys, self.columns = keys, non_keys, set(columns)
        self.statements = Statements(self.table, keys, non_keys, self.mark)
        self.write_sql = {"INSERT": self.statements.insert, "UPSERT": self.statements.upsert,
                          "UPDATE": self.statements.update}[self.insert_mode]()
        self.delete_sql = self.statements.delete() if keys else None

    # ------------------------------------------------------------ per database
    def connect(self):
        raise NotImplementedError

    def table_columns(self) -> list:
        raise NotImplementedError

    def savepoint(self, cursor, name: str, action: str) -> None:
        cursor.execute({"set": f"SAVEPOINT {name}", "release": f"RELEASE SAVEPOINT {name}",
                        "rollback": f"ROLLBACK TO SAVEPOINT {name}"}[action])

    # ------------------------------------------------------------ the SQL of a record
    def statement(self, record) -> tuple:
        """(SQL, parameters) of one record; BadRecord when it cannot be written."""
        value = record.value
        row = None
        if value not in (b"", None):
            try:
                row = json.loads(value)
            except (ValueError, UnicodeDecodeError) as e:
                raise BadRecord(f"value is not JSON: {e}")
            if row is not None and not isinstance(row, dict):
                raise BadRecord(f"value is not a JSON object: {type(row).__name__}")
        if row is None:
            if self.null_action != "DELETE":
                raise BadRecord("null value with nullValueAction=FAIL")
            key = self._key_from_message(record)
            sql, order = self.delete_sql
            return sql, [self._param(key[c]) for c in order]
        if not self.exclude_undeclared:
            unknown = sorted(set(row) - self.columns)
            if unknown:
                raise BadRecord(f"table {self.table} has no column(s) {', '.join(unknown)}")
        missing = [k for k in self.keys if k not in row]
        if missing:
            row = dict(self._key_from_message(record, missing), **row)
        sql, order = self.write_sql
        return sql, [self._param(row.get(c)) for c in order]

    def _key_from_message(self, record, wanted=None) -> dict:
        wanted = wanted or self.keys
        key = record.key
        if key is None:
            raise BadRecord(f"no key column(s) {', '.join(wanted)} in the value and no message key")
        try:
            decoded = json.loads(key)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            missing = [k for k in wanted if k not in decoded]
            if missing:
                raise BadRecord(f"key column(s) {', '.join(missing)} missing from the message key")
            return decoded
        if len(wanted) == 1:
            return {wanted[0]: key}
        raise BadRecord(f"message key {key!r} is not a JSON object of {', '.join(wanted)}")

    @staticmethod
    def _param(value):
        return json.dumps(value) if isinstance(value, (dict, list)) else value

    # ------------------------------------------------------------ writing
    def write(self, records) -> list:
        """One transaction per ``write``; returns the refused records (with ``error``). Raises
        when the database cannot be reached (the connection is then dropped: the next ``write``
        connects again)."""
        with self.lock:
            if self.connection is None:
                self.connection = self.connect()
            try:
                return self._write(records)
            except Exception:
                self.close()
                raise

    def _write(self, records) -> list:
        bad, good = [], []
        for record in records:
            try:
                good.append((record, self.statement(record)))
            except BadRecord as e:
                record.error = str(e)
                bad.append(record)
        if not good:
            return bad
        try:
            self._run_all(good)
        except self.database_errors() as e:
            if self.lost():
                raise
            log.warning("JDBC batch of %d failed (%s); finding the bad records", len(good), e)
            self._rollback()
            bad += self._run_each(good)
        return bad

    def lost(self) -> bool:
        """Whether the connection itself is gone (not a statement's fault)."""
        return False

    def _run_all(self, statements) -> None:
        cursor = self.connection.cursor()
        for _, (sql, params) in statements:
            cursor.execute(sql, params)
        self.connection.commit()

    def _run_each(self, statements) -> list:
        """Again, a savepoint around each record: the refused ones are rolled back alone."""
        cursor = self.connection.cursor()
        bad = []
        for record, (sql, params) in statements:
            self.savepoint(cursor, "pulsar_record", "set")
            try:
                cursor.execute(sql, params)
            except self.database_errors() as e:
                self.savepoint(cursor, "pulsar_record", "rollback")
                record.error = f"{type(e).__name__}: {e}"
                bad.append(record)
            else:
                self.savepoint(cursor, "pulsar_record", "release")
        self.connection.commit()
        return bad

    def _rollback(self) -> None:
        try:
            self.connection.rollback()
        except Exception:
            self.close()
            self.connection = self.connect()

    def database_errors(self) -> tuple:
        raise NotImplementedError

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            finally:
                self.connection = None


class SqliteJdbcSink(JdbcSink):
    """``jdbc-sqlite``: ``jdbcUrl`` ``jdbc:sqlite:<path>`` (the sqlite3 module)."""

    mark = "?"

    def connect(self):
        if not self.url.startswith("jdbc:sqlite:"):
            raise ValueError(f"jdbcUrl {self.url} is not jdbc:sqlite:<path>")
        path = self.url[len("jdbc:sqlite:"):]
        # isolation_level=None: transactions are ours (BEGIN ... COMMIT), savepoints included.
        connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        return connection

    def table_columns(self) -> list:
        rows = self.connection.execute(f"PRAGMA table_info({quote(self.table)})").fetchall()
        return [r[1] for r in rows]

    def _run_all(self, statements) -> None:
        self.connection.execute("BEGIN")
        super()._run_all(statements)

    def _run_each(self, statements) -> list:
        self.connection.execute("BEGIN")
        return super()._run_each(statements)

    def _rollback(self) -> None:
        if self.connection.in_transaction:
            self.connection.rollback()

    @staticmethod
    def _param(value):
        if isinstance(value, bool):
            return int(value)
        return JdbcSink._param(value)

    def database_errors(self) -> tuple:
        return (sqlite3.Error,)


_PG_URL = re.compile(r"jdbc:postgresql://(?P<host>[^:/?]+)(?::(?P<port>\d+))?/(?P<db>[^?]+)(?:\?(?P<q>.*))?$")


def postgres_connection(url: str, user=None, password=None, **extra):
    """A psycopg connection from a ``jdbc:postgresql://host[:port]/db[?user=..&password=..]``."""
    import psycopg
    m = _PG_URL.match(url or "")
    if m is None:
        raise ValueError(f"jdbcUrl {url} is not jdbc:postgresql://host[:port]/database")
    query = dict(p.split("=", 1) for p in (m["q"] or "").split("&") if "=" in p)
    return psycopg.connect(host=m["host"], port=int(m["port"] or 5432), dbname=m["db"],
                           user=user or query.get("user"), password=password or query.get("password"),
                           connect_timeout=10, **extra)


class PostgresJdbcSink(JdbcSink):
    """``jdbc-postgres``: ``jdbcUrl`` ``jdbc:postgresql://host:port/db``, ``userName``,
    ``password`` (psycopg 3). ``tableName`` may be ``schema.table``."""

    mark = "%s"

    def connect(self):
        return postgres_connection(self.url, self.configs.get("userName"), self.configs.get("password"))

    def table_columns(self) -> list:
        schema, _, table = self.table.rpartition(".")
        rows = self.connection.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = COALESCE(NULLIF(%s, ''), current_schema()) ORDER BY ordinal_position",
            (table, schema)).fetchall()
        self.connection.commit()
        return [r[0] for r in rows]

    def lost(self) -> bool:
        return self.connection.closed or self.connection.broken

    def _run_all(self, statements) -> None:
        # One pipeline: the statements go out without waiting for each answer.
        with self.connection.pipeline():
            cursor = self.connection.cursor()
            for _, (sql, params) in statements:
                cursor.execute(sql, params)
        self.connection.commit()

    def database_errors(self) -> tuple:
        import psycopg
        return (psycopg.Error,)
