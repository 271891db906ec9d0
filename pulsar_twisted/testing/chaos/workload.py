"""
The workload, all through the official client (``import pulsar``): named producers publishing
sequence-numbered payloads by ``send_async``, consumers on each subscription type receiving and
acknowledging, and the read-back of every partition from the earliest position.

Everything here records into a ``History`` and blocks (threads, timeouts): it runs beside the
nemesis thread in ``runner``.
"""

import logging
import threading
import time

import pulsar

from pulsar_twisted.testing.chaos.history import (EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED, Delivery,
                                                  History, Stored, decode_payload, encode_payload)

#: Subscription name -> (type, number of consumers).
DEFAULT_SUBSCRIPTIONS = {
    "sub-exclusive": (EXCLUSIVE, 1), "sub-failover": (FAILOVER, 2),
    "sub-shared": (SHARED, 2), "sub-key-shared": (KEY_SHARED, 2),
}

_CONSUMER_TYPES = {EXCLUSIVE: pulsar.ConsumerType.Exclusive, FAILOVER: pulsar.ConsumerType.Failover,
                   SHARED: pulsar.ConsumerType.Shared, KEY_SHARED: pulsar.ConsumerType.KeyShared}


def message_id_tuple(message_id) -> tuple:
    """(ledger, entry, partition) of an official-client MessageId, and its batch index after them
    for a message of a batch (the messages of one batch share the entry)."""
    place = (message_id.ledger_id(), message_id.entry_id(), message_id.partition())
    batch_index = message_id.batch_index()
    return place + (batch_index,) if batch_index >= 0 else place


def quiet_logger(path: str) -> logging.Logger:
    """A logger for the official client writing to ``path`` only (its INFO chatter is huge)."""
    logger = logging.getLogger(f"pulsar-chaos.{path}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.FileHandler(path))
    return logger


def make_client(service_url: str, log_path: str, operation_timeout: int = 15) -> "pulsar.Client":
    return pulsar.Client(service_url, operation_timeout_seconds=operation_timeout,
                         connection_timeout_ms=5000, logger=quiet_logger(log_path))


class Producers:
    """``count`` producers named ``{prefix}-p{i}`` on ``topic``, paced together at ``rate`` msg/s.

    Odd-numbered producers send keyed messages (``{name}-k{seq % keys}``), even ones unkeyed
    (round-robin over the partitions). Each send is recorded before ``send_async``; its callback
    records acked (with the message id) or failed (with the result). ``batching`` turns the
    client's batching on (its default delay and sizes), ``chunking`` its chunking (payloads over
    the broker's maxMessageSize go in several entries)."""

    def __init__(self, client, topic: str, history: History, count: int = 7, rate: float = 280.0,
                 prefix: str = "chaos", keys: int = 3, payload_size: int = 100,
                 send_timeout_millis: int = 30000, batching: bool = False,
                 chunking: bool = False):
        self.history = history
        self.rate = rate
        self.keys = keys
        self.payload_size = payload_size
        self.names = [f"{prefix}-p{i}" for i in range(count)]
        self.producers = [
            client.create_producer(topic, producer_name=name, batching_enabled=batching,
                                   chunking_enabled=chunking,
                                   send_timeout_millis=send_timeout_millis, block_if_queue_full=False,
                                   max_pending_messages=5000,
                                   max_pending_messages_across_partitions=50000)
            for name in self.names]
        self.next_seq = [0] * count
        self._stop = threading.Event()
        self._thread = None
        self.errors = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-producers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sending (sends already made keep waiting for their callbacks)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        started = time.monotonic()
        sent = 0
        turn = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            # After a stall (a blocked client call, a loaded machine) catch up by at most 1 s's worth.
            due = min(due, sent + int(self.rate))
            while sent < due and not self._stop.is_set():
                self._send(turn % len(self.producers))
                turn += 1
                sent += 1
            time.sleep(0.01)

    def _send(self, index: int) -> None:
        name = self.names[index]
        seq = self.next_seq[index]
        self.next_seq[index] += 1
        key = f"{name}-k{seq % self.keys}" if index % 2 else None
        self.history.record_send(name, seq, key)

        def done(result, message_id, name=name, seq=seq):
            if result == pulsar.Result.Ok:
                self.history.record_outcome(name, seq, True, message_id_tuple(message_id))
            else:
                self.history.record_outcome(name, seq, False, reason=str(result))
        try:
            self.producers[index].send_async(
                encode_payload(name, seq, key, self.payload_size), done, partition_key=key,
                sequence_id=seq)
        except Exception as e:       # the client refused it outright: nothing was promised
            self.history.record_outcome(name, seq, False, reason=f"raised {type(e).__name__}")
            self.errors.append(repr(e))

    def unanswered(self) -> int:
        return sum(1 for s in list(self.history.sends.values()) if s.outcome is None)

    def wait_answered(self, timeout: float) -> int:
        """Wait until every send has its callback or ``timeout`` passes; the unanswered count."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.unanswered():
                return 0
            time.sleep(0.2)
        return self.unanswered()


class Consumers:
    """The consumers of every subscription (``DEFAULT_SUBSCRIPTIONS`` by default), each in its own
    receive loop, acknowledging what it receives and recording it."""

    def __init__(self, client, topic: str, history: History, subscriptions: dict = None):
        self.history = history
        self.subscriptions = dict(subscriptions or DEFAULT_SUBSCRIPTIONS)
        self.consumers = []                       # [(subscription, consumer name, consumer)]
        for subscription, (kind, count) in self.subscriptions.items():
            history.subscriptions[subscription] = kind
            for i in range(count):
                name = f"{subscription}-c{i}"
                consumer = client.subscribe(
                    topic, subscription, consumer_type=_CONSUMER_TYPES[kind], consumer_name=name,
                    initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=500)
                self.consumers.append((subscription, name, consumer))
        self._stop = threading.Event()
        self._threads = []
        self.last_received = time.monotonic()

    def start(self) -> None:
        for subscription, name, consumer in self.consumers:
            thread = threading.Thread(target=self._run, args=(subscription, name, consumer),
                                      name=f"chaos-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    def _run(self, subscription, name, consumer) -> None:
        while not self._stop.is_set():
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            except Exception:
                time.sleep(0.2)          # closed or reconnecting: the client retries by itself
                continue
            self.last_received = time.monotonic()
            try:
                producer, seq, key = decode_payload(message.data())
            except ValueError:
                self.history.record_undecodable()
            else:
                self.history.record_delivery(Delivery(
                    subscription, name, producer, seq, key, message.message_id().partition(),
                    message.redelivery_count()))
            try:
                consumer.acknowledge(message)
            except Exception:
                pass                     # an ack lost to a fault: the message comes back

    def received(self, subscription: str) -> set:
        return {(d.producer, d.seq) for d in list(self.history.deliveries)
                if d.subscription == subscription}

    def drain(self, wanted: set, idle: float, timeout: float) -> None:
        """Keep receiving until every subscription has every message of ``wanted``, or nothing
        arrived for ``idle`` seconds, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        self.last_received = time.monotonic()
        while time.monotonic() < deadline:
            if all(wanted <= self.received(s) for s in self.subscriptions):
                return
            if time.monotonic() - self.last_received > idle:
                return
            time.sleep(0.5)


def read_partition(client, topic: str, partition: int, timeout: float) -> list:
    """Every entry of ``{topic}-partition-{partition}`` from the earliest position, in storage
    order, as ``(data, message id tuple)``. Raises if the reader cannot be made or stalls."""
    return read_topic(client, f"{topic}-partition-{partition}", timeout)


def read_topic(client, topic: str, timeout: float) -> list:
    """Every message of ``topic`` (a non-partitioned topic, or one partition by its full name)
    from the earliest position, in storage order, as ``(data, message id tuple)``. Raises if
    the reader cannot be made or stalls."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1000)
    try:
        deadline = time.monotonic() + timeout
        out = []
        while reader.has_message_available():
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} took over {timeout}s "
                                   f"({len(out)} entries read)")
            message = reader.read_next(timeout_millis=10000)
            out.append((message.data(), message_id_tuple(message.message_id())))
        return out
    finally:
        reader.close()


def read_back(client, topic: str, partitions: int, history: History, timeout: float = 90.0,
              attempts: int = 3) -> None:
    """Fill ``history.storage`` (or ``history.unreadable``) for every partition, trying each up
    to ``attempts`` times, all within ``timeout`` seconds (a partition whose turn comes after
    that is unreadable)."""
    read_topics(client, {p: f"{topic}-partition-{p}" for p in range(partitions)}, history,
                timeout, attempts)


def read_topics(client, topics: dict, history: History, timeout: float = 90.0,
                attempts: int = 3) -> None:
    """``read_back`` for ``topics``, {index in ``history.storage``: full topic name}: each read
    with ``read_topic``."""
    deadline = time.monotonic() + timeout
    for partition, name in sorted(topics.items()):
        error = "no time left to read it"
        for _ in range(attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                # Out of time: unreadable, as when every attempt failed (this break skips the
                # for's else), not left out of both the storage and the unreadable partitions
                # (the checker then counted every message acked on it as lost).
                history.unreadable[partition] = error
                break
            try:
                entries = read_topic(client, name, left)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                time.sleep(min(2, max(0, deadline - time.monotonic())))
                continue
            stored = []
            for data, message_id in entries:
                try:
                    producer, seq, key = decode_payload(data)
                except ValueError:
                    history.record_undecodable()
                    continue
                stored.append(Stored(producer, seq, key, message_id))
            history.storage[partition] = stored
            break
        else:
            history.unreadable[partition] = error
