"""
The built-in Pulsar IO connectors (``archive: "builtin://<name>"``) and their definitions, as
``GET /admin/v3/sources/builtinsources`` and ``/sinks/builtinsinks`` list them (Pulsar's
``ConnectorDefinition`` JSON). One module per connector family:

- ``file``: the ``data-generator`` source, the ``file`` source and the ``file`` sink;
- ``jdbc``: the ``jdbc-sqlite`` and ``jdbc-postgres`` sinks;
- ``redis``: the ``redis`` sink;
- ``debezium``: the ``debezium-postgres`` change-data source (``pgoutput``: its decoder).

A connector runs inside an instance process (``io_instance.py``); its contract there:

- a source's ``read(timeout)`` gives the next ``Record`` or None when none is ready within
  ``timeout`` seconds; ``ack(record)`` is called once the record's message is persisted on its
  topic (so a source only forgets what is safely in Pulsar), ``close()`` at the end;
- a sink's ``write(records)`` (``SinkRecord``s) returns once the records are durably written,
  giving back the ones it refused (each with ``error`` set; the instance negative-acks those and
  acks the rest); raising means none was written (all negative-acked).

Plain stdlib (plus ``psycopg``/``redis`` in their modules, imported only when such a connector
runs), no Twisted: the instance process runs the official client's blocking API.
"""

import importlib

from pulsar_twisted.functions.connectors.base import BadRecord, Record, SinkRecord
from pulsar_twisted.functions.connectors.file import DataGeneratorSource, FileSink, FileSource

_P = "pulsar_twisted.functions.connectors"


def _source(name, description, path):
    return {"name": name, "description": description, "sourceClass": path, "sourceConfigClass": path}


def _sink(name, description, path):
    return {"name": name, "description": description, "sinkClass": path, "sinkConfigClass": path}


#: Pulsar's ``ConnectorDefinition`` of each built-in.
BUILTIN_SOURCES = {d["name"]: d for d in (
    _source("data-generator", "Test data generator source: random person records",
            f"{_P}.DataGeneratorSource"),
    _source("debezium-postgres", "Debezium-style change events of PostgreSQL tables, from logical "
            "replication (pgoutput)", f"{_P}.debezium.DebeziumPostgresSource"),
    _source("file", "Reads data from files on the local file system, one message per line",
            f"{_P}.FileSource"),
)}
BUILTIN_SINKS = {d["name"]: d for d in (
    _sink("file", "Writes each message as a line to a local file, fsynced before the ack",
          f"{_P}.FileSink"),
    _sink("jdbc-postgres", "Writes JSON records into a PostgreSQL table (insert, upsert, update; "
          "deletes on tombstones)", f"{_P}.jdbc.PostgresJdbcSink"),
    _sink("jdbc-sqlite", "Writes JSON records into a SQLite table (insert, upsert, update; deletes "
          "on tombstones)", f"{_P}.jdbc.SqliteJdbcSink"),
    _sink("redis", "Writes each message as a Redis key (the message key) and value",
          f"{_P}.redis.RedisSink"),
)}


def _load(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def source_class(builtin: str):
    """The class a built-in source's instance runs (its module imported now)."""
    return _load(BUILTIN_SOURCES[builtin]["sourceClass"])


def sink_class(builtin: str):
    """The class a built-in sink's instance runs (its module imported now)."""
    return _load(BUILTIN_SINKS[builtin]["sinkClass"])


__all__ = ["BUILTIN_SINKS", "BUILTIN_SOURCES", "BadRecord", "DataGeneratorSource", "FileSink",
           "FileSource", "Record", "SinkRecord", "sink_class", "source_class"]
