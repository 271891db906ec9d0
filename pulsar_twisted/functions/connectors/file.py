"""
The ``data-generator`` source, the ``file`` source and the ``file`` sink (the connector
contract: ``connectors/__init__.py``).
"""

import json
import os
import random
import re
import threading
import time
import uuid

from pulsar_twisted.functions.connectors.base import Record, _bool


class DataGeneratorSource:
    """Pulsar's ``data-generator``: a random person (JSON) every ``sleepBetweenMessages`` ms
    (default 50), keyed by a fresh id; ``maxMessages`` (ours) stops after that many."""

    FIRST = ("Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Edsger", "Margaret")
    LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Dijkstra")

    def __init__(self, configs: dict, clock=time):
        self.sleep_ms = int(configs.get("sleepBetweenMessages", 50))
        self.max_messages = configs.get("maxMessages")
        self.clock = clock
        self.count = 0

    def read(self, timeout: float):
        if self.max_messages is not None and self.count >= int(self.max_messages):
            time.sleep(timeout)
            return None
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1000.0)
        self.count += 1
        person = {"firstName": random.choice(self.FIRST), "lastName": random.choice(self.LAST),
                  "age": random.randint(18, 99), "id": str(uuid.uuid4())}
        return Record(json.dumps(person).encode(), key=person["id"],
                      event_time=int(self.clock.time() * 1000))

    def ack(self, record) -> None:
        pass

    def close(self) -> None:
        pass


class FileSource:
    """
    Pulsar's ``file`` source: every line of the files in ``inputDirectory`` (``recurse``,
    ``fileFilter`` regex on the name, default ``[^\\.].*``; ``pathFilter``; ``minimumFileAge``
    ms; ``ignoreHiddenFiles``; ``pollingInterval`` ms) becomes a message keyed by nothing, with
    properties ``file.name``/``file.path``/``file.line`` and the file's modification time as its
    event time. A file is finished once every line is acked: then deleted (``keepFile`` false,
    Pulsar's default), renamed with ``processedFileSuffix``, or remembered (``keepFile`` true:
    not read again by this process). Without a crash nothing is read twice; after one, the
    unfinished file is read again from its start (at-least-once).
    """

    def __init__(self, configs: dict, clock=time):
        self.directory = configs["inputDirectory"]
        self.recurse = _bool(configs.get("recurse", True))
        self.keep = _bool(configs.get("keepFile", False))
        self.suffix = configs.get("processedFileSuffix")
        self.name_filter = re.compile(configs.get("fileFilter", r"[^\.].*"))
        self.path_filter = configs.get("pathFilter")
        self.min_age_ms = int(configs.get("minimumFileAge", 0))
        self.ignore_hidden = _bool(configs.get("ignoreHiddenFiles", True))
        self.polling_s = int(configs.get("pollingInterval", 10000)) / 1000.0
        self.clock = clock
        self.done = set()           # finished (or being finished) paths
        self.pending = {}           # path -> lines read but not yet acked (None: still reading)
        self.lines = iter(())
        self.current = None
        self.next_poll = 0.0
        #: ``ack`` runs on the client's callback thread, ``read`` on the instance's.
        self.lock = threading.Lock()

    def read(self, timeout: float):
        while True:
            for line_no, line, path, mtime in self.lines:
                with self.lock:
                    self.pending[path] = self.pending.get(path, 0) + 1
                return Record(line, properties={"file.name": os.path.basename(path),
                                                "file.path": path, "file.line": str(line_no)},
                              event_time=mtime, token=path)
            if self.current is not None:
                finished, self.current = self.current, None
                with self.lock:
                    self._read_done(finished)
            path = self._next_file()
            if path is None:
                time.sleep(min(timeout, self.polling_s))
                return None
            self.current = path
            self.lines = self._lines(path)

    def ack(self, record) -> None:
        with self.lock:
            self.pending[record.token] -= 1
            self._maybe_finish(record.token)

    def close(self) -> None:
        pass

    # ------------------------------------------------------------ internals
    def _lines(self, path):
        mtime = int(os.path.getmtime(path) * 1000)
        with self.lock:
            self.pending[path] = 0
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                yield n, line.rstrip(b"\r\n"), path, mtime

    def _read_done(self, path) -> None:
        self.done.add(path)
        self._maybe_finish(path)

    def _maybe_finish(self, path) -> None:
        if path not in self.done or self.pending.get(path):
            return
        self.pending.pop(path, None)
        if self.suffix:
            os.replace(path, path + self.suffix)
        elif not self.keep:
            os.unlink(path)

    def _next_file(self):
        if self.clock.time() < self.next_poll:
            return None
        for path in self._listing():
            if path not in self.done and path not in self.pending:
                return path
        self.next_poll = self.clock.time() + self.polling_s
        return None

    def _listing(self) -> list:
        found = []
        now_ms = self.clock.time() * 1000
        for root, dirs, files in os.walk(self.directory):
            if not self.recurse:
                dirs[:] = []
            relative = os.path.relpath(root, self.directory)
            if self.path_filter and relative != "." and not re.match(self.path_filter, relative):
                continue
            for name in sorted(files):
                path = os.path.join(root, name)
                if self.ignore_hidden and name.startswith("."):
                    continue
                if self.suffix and name.endswith(self.suffix):
                    continue
                if not self.name_filter.fullmatch(name):
                    continue
                if now_ms - os.path.getmtime(path) * 1000 < self.min_age_ms:
                    continue
                found.append(path)
        return sorted(found)


class FileSink:
    """Appends each message's value as a line to ``outputFile`` (``topics.path`` would be
    Pulsar's word for HDFS; this sink is ours); a batch is flushed and fsynced before
    ``write`` returns, so an acked message is on disk."""

    def __init__(self, configs: dict, clock=time):
        self.path = configs["outputFile"]
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        self.file = open(self.path, "ab")

    def write(self, records) -> list:
        self.file.write(b"".join(r.value + b"\n" for r in records))
        self.file.flush()
        os.fsync(self.file.fileno())
        return []

    def close(self) -> None:
        self.file.close()
