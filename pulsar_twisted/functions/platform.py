"""
The functions worker's records on the platform itself, as Pulsar keeps them: topics in the
``pulsarFunctionsNamespace`` (``public/functions``), read with the cluster's own client.

``TopicTable`` is a keyed log read as a table: one message per change, keyed (``partition_key``),
the value a JSON record, an empty value a tombstone (what Pulsar's compaction drops). Every worker
reads it from the earliest message at start (``start`` returns once it has caught up, so the
table is the platform's), then keeps tailing it; a ``write`` returns once the writer's own tail
has applied it (read-your-writes, one order for everyone: the topic's).

``PackageTopic`` keeps function packages as messages of the ``packages`` topic, chunked by the
producer when larger than the broker's ``maxMessageSize`` (so any size goes); a record names its
package by message id (``packageLocation``), read back with a Reader started on it.

``ensure_namespace`` creates the namespace with infinite retention (readers hold no cursor: without
retention the brokers could trim the log a restarted worker rebuilds from).
"""

import json

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.client import Agent, FileBodyProducer, readBody
from twisted.web.http_headers import Headers

from pulsar_twisted.client.errors import Timeout
from pulsar_twisted.client.message_id import MessageId

_log = Logger()

#: Seconds a message announced during the catch-up may take to arrive.
CATCH_UP_TIMEOUT = 30.0


def _position(message_id) -> tuple:
    """``(ledger, entry)``: where a message is, whoever reports its id (producer or reader)."""
    return (message_id.ledger_id, message_id.entry_id)


class TopicTable:
    """See the module docstring. ``on_change(key, old, new)`` (records, None when absent) is
    called for every applied change, after the table has it."""

    log = Logger()

    def __init__(self, client, topic: str, on_change=None):
        self.client = client
        self.topic = topic
        self.on_change = on_change
        self.table = {}
        self.reader = self.producer = None
        self.applied = None             # (ledger, entry) of the last message applied
        self._waiters = []              # (MessageId, Deferred) of writes not yet applied
        self._closed = False

    async def start(self) -> None:
        """Read the topic from the earliest message, then tail it (again after ``close``)."""
        self._closed = False
        self.reader = await self.client.create_reader(self.topic, MessageId.earliest)
        while await self.reader.has_message_available():
            try:
                message = await self.reader.read_next(timeout=CATCH_UP_TIMEOUT)
            except Timeout:
                # Announced but not readable (its ledger trimmed under a namespace without
                # retention): say so, and go on with what was read rather than stall.
                self.log.error("{topic}: messages announced after {at} could not be read in {s} s; "
                               "the table may miss records (is the namespace's retention infinite?)",
                               topic=self.topic, at=self.applied, s=CATCH_UP_TIMEOUT)
                break
            self._apply(message)
        self._tail()

    def _tail(self) -> None:
        if self._closed:
            return
        d = self.reader.read_next()
        d.addCallbacks(self._tailed, self._tail_failed)

    def _tailed(self, message) -> None:
        try:
            self._apply(message)
        except Exception:
            self.log.failure("{topic}: applying {id} failed", topic=self.topic,
                             id=message.message_id())
        self._tail()

    def _tail_failed(self, failure) -> None:
        if self._closed:
            return
        self.log.warn("{topic}: reading failed ({error}); retrying", topic=self.topic,
                      error=failure.getErrorMessage())
        from twisted.internet import reactor
        clock = getattr(self.client, "clock", reactor)
        clock.callLater(1.0, self._tail)

    def _apply(self, message) -> None:
        key = message.partition_key()
        payload = message.data()
        old = self.table.get(key)
        if not payload:
            new = None
            self.table.pop(key, None)
        else:
            try:
                new = json.loads(payload)
            except ValueError:
                self.log.warn("{topic}: message {id} of key {key} is not JSON; skipped",
                              topic=self.topic, id=message.message_id(), key=key)
                new = old
            else:
                self.table[key] = new
        self.applied = _position(message.message_id())
        if self.on_change is not None and old != new:
            try:
                self.on_change(key, old, new)
            except Exception:
                self.log.failure("{topic}: change of {key} not handled", topic=self.topic, key=key)
        self._release()

    def _release(self) -> None:
        waiting = []
        for target, d in self._waiters:
            if self.applied is not None and self.applied >= target:
                d.callback(None)
            else:
                waiting.append((target, d))
        self._waiters = waiting

    async def write(self, key: str, record) -> None:
        """``record`` (a JSON-able value) under ``key``, None a tombstone; returns once applied."""
        if self.producer is None:
            self.producer = await self.client.create_producer(self.topic, batching_enabled=False)
        payload = b"" if record is None else json.dumps(record, sort_keys=True).encode()
        sent = _position(await self.producer.send(payload, partition_key=key))
        if self.applied is not None and self.applied >= sent:
            return
        d = defer.Deferred()
        self._waiters.append((sent, d))
        await d

    def get(self, key: str):
        return self.table.get(key)

    async def close(self) -> None:
        self._closed = True
        handles, self.reader, self.producer = (self.reader, self.producer), None, None
        for handle in handles:
            if handle is not None:
                try:
                    await handle.close()
                except Exception:
                    pass


def location_of(message_id) -> str:
    """``ledger:entry`` of a (chunked: its first chunk's) message id."""
    first = getattr(message_id, "first_chunk_message_id", None) or message_id
    return f"{first.ledger_id}:{first.entry_id}"


class PackageTopic:
    """Packages as (chunked) messages of one topic, found again by ``location_of`` their id."""

    def __init__(self, client, topic: str):
        self.client = client
        self.topic = topic
        self.producer = None

    async def put(self, key: str, data: bytes) -> str:
        if self.producer is None:
            self.producer = await self.client.create_producer(
                self.topic, batching_enabled=False, chunking_enabled=True)
        return location_of(await self.producer.send(data, partition_key=key))

    async def get(self, location: str) -> bytes:
        ledger, _, entry = location.partition(":")
        reader = await self.client.create_reader(
            self.topic, MessageId(int(ledger), int(entry)), start_message_id_inclusive=True)
        try:
            message = await reader.read_next(timeout=30)
            return message.data()
        finally:
            await reader.close()

    async def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                await producer.close()
            except Exception:
                pass


async def ensure_topics(reactor, admin_url: str, topics, agent=None) -> None:
    """Each topic created non-partitioned (``PUT /admin/v2/persistent/...``; 409: it exists), so
    that a namespace whose auto-creation makes partitioned topics does not give the workers
    partitioned logs. RuntimeError with the broker's answer otherwise."""
    from pulsar_twisted.common.naming import parse_topic
    agent = agent if agent is not None else Agent(reactor)
    for topic in topics:
        name = parse_topic(topic)
        url = (f"{admin_url.rstrip('/')}/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/"
               f"{name.local_name}")
        response = await agent.request(b"PUT", url.encode("ascii"))
        answer = await readBody(response)
        if response.code not in (200, 204, 409):
            raise RuntimeError(f"creating topic {topic}: HTTP {response.code} "
                               f"{answer[:200].decode('utf-8', 'replace')}")


async def ensure_namespace(reactor, admin_url: str, namespace: str, agent=None) -> None:
    """``PUT /admin/v2/namespaces/{namespace}`` with infinite retention; 409 (it exists) is fine.
    Raises RuntimeError with the broker's answer otherwise."""
    agent = agent if agent is not None else Agent(reactor)
    body = json.dumps({"retention_policies": {"retentionTimeInMinutes": -1,
                                              "retentionSizeInMB": -1}}).encode()
    import io
    url = f"{admin_url.rstrip('/')}/admin/v2/namespaces/{namespace}"
    response = await agent.request(b"PUT", url.encode("ascii"),
                                   Headers({b"content-type": [b"application/json"]}),
                                   FileBodyProducer(io.BytesIO(body)))
    answer = await readBody(response)
    if response.code not in (200, 204, 409):
        raise RuntimeError(f"creating namespace {namespace}: HTTP {response.code} "
                           f"{answer[:200].decode('utf-8', 'replace')}")
    if response.code == 409:
        # It exists: its retention is the operator's, but without an infinite one the brokers
        # may trim the logs the workers rebuild from. Say so (not overridden).
        response = await agent.request(b"GET", f"{url}/retention".encode("ascii"))
        answer = await readBody(response)
        try:
            retention = json.loads(answer) if response.code == 200 and answer.strip() else {}
        except ValueError:
            retention = {}
        if (retention or {}).get("retentionTimeInMinutes") != -1 or \
                (retention or {}).get("retentionSizeInMB") != -1:
            _log.warn("namespace {ns} has retention {r}: the functions workers' topics need "
                      "retentionTimeInMinutes=-1 and retentionSizeInMB=-1 (pulsar-admin "
                      "namespaces set-retention {ns} --time -1 --size -1)", ns=namespace,
                      r=retention or "unset")
