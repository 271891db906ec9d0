"""
The replicated-subscription part of a geo-replication chaos run (``GeoChaosConfig.
replicated_subscription``, ``scripts/chaos_replication.py --replicated-subscription``), through
the official client; the figures are ``subscription_checker``'s.

- ``AckingConsumer``: on the source cluster, before the producers start, an Exclusive consumer of
  a subscription made with ``replicate_subscription_state_enabled=True`` on the run's first topic,
  receiving in a thread through the faults and acknowledging by a seeded rule on the message's
  name, so that a message delivered again gets the same treatment: a share cumulatively, a share
  never (holes, which only a later cumulative ack covers), the rest individually.
- ``wait_settled``: after the heal and the replication drain, until the target's subscription of
  that name exists and its mark-delete position has not moved for a while (bounded).
- ``consume_to_end``: the same subscription consumed on the target up to the last message it
  stores, each delivery acknowledged.

Blocking, like the rest of ``chaos``.
"""

import threading
import time
import zlib

import pulsar

from pulsar_twisted.testing.chaos.history import decode_payload
from pulsar_twisted.testing.chaos.workload import message_id_tuple

#: The subscription's name on both clusters.
SUBSCRIPTION = "chaos-replicated"


class AckingConsumer:
    """See the module docstring. ``cumulative`` and ``skip`` are the shares of messages acked
    cumulatively and never; ``record`` (a ``SubscriptionRecord``) receives the deliveries and
    the acks made (an ack the client refused is not recorded)."""

    def __init__(self, client, topic: str, record, seed: int, cumulative: float = 0.02,
                 skip: float = 0.03):
        self.record = record
        self.seed = seed
        self.cumulative, self.skip = cumulative, skip
        self.consumer = client.subscribe(
            topic, record.name, consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            replicate_subscription_state_enabled=True, receiver_queue_size=500,
            consumer_name=f"{record.name}-{record.source}")
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def decide(self, producer: str, seq: int) -> str:
        """"cumulative", "skip" or "individual", the same each time for one message."""
        draw = zlib.crc32(f"{self.seed}|{producer}|{seq}".encode()) / 2 ** 32
        if draw < self.cumulative:
            return "cumulative"
        if draw < self.cumulative + self.skip:
            return "skip"
        return "individual"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-replicated-sub",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop receiving (the consumer stays subscribed; the client's close ends it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        record = self.record
        while not self._stop.is_set():
            try:
                message = self.consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            except Exception:
                time.sleep(0.2)          # closed or reconnecting: the client retries by itself
                continue
            try:
                producer, seq, _ = decode_payload(message.data())
            except ValueError:
                record.undecodable[record.source] = record.undecodable.get(record.source, 0) + 1
                continue
            message_id = message_id_tuple(message.message_id())
            record.source_deliveries.append((producer, seq, message_id))
            how = self.decide(producer, seq)
            at = time.time()             # before the ack: the checker errs towards passing
            try:
                if how == "cumulative":
                    self.consumer.acknowledge_cumulative(message)
                    record.cumulative_acks.append((message_id, at))
                elif how == "individual":
                    self.consumer.acknowledge(message)
                    record.individual_acks.append((producer, seq, at))
            except Exception:
                pass                     # not acked: it counts as never acked


def cursor_position(pair, cluster: str, topic: str, name: str):
    """The subscription's mark-delete position on ``cluster`` (``L:E``), None if it has none."""
    cursors = pair.internal_stats(cluster, topic).get("cursors") or {}
    return (cursors.get(name) or {}).get("markDeletePosition")


class PositionSampler:
    """Samples the target's mark-delete position of ``record.name`` every ``interval`` seconds
    in a thread, from ``start()`` to ``stop()``, recording ``(time, "L:E")`` in
    ``record.target_positions`` each time it moved (the time taken once the answer came)."""

    def __init__(self, pair, topic: str, record, interval: float = 0.5):
        self.pair, self.topic, self.record, self.interval = pair, topic, record, interval
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-position-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)

    def _run(self) -> None:
        last = None
        while not self._stop.wait(self.interval):
            try:
                position = cursor_position(self.pair, self.record.target, self.topic,
                                           self.record.name)
            except Exception:
                continue                 # the target down or paused: no sample
            if position is not None and position != last:
                self.record.target_positions.append((time.time(), position))
                last = position


def wait_settled(pair, cluster: str, topic: str, name: str, stable: float = 3.0,
                 timeout: float = 30.0) -> str:
    """Wait until ``name`` exists on ``cluster`` and its mark-delete position has not moved for
    ``stable`` seconds, at most ``timeout``; how it ended, in words."""
    started = time.monotonic()
    seen, since = None, None
    while time.monotonic() - started < timeout:
        position = cursor_position(pair, cluster, topic, name)
        if position is not None:
            if position != seen:
                seen, since = position, time.monotonic()
            elif time.monotonic() - since >= stable:
                return f"settled at {position} after {time.monotonic() - started:.1f}s"
        time.sleep(0.5)
    if seen is None:
        return f"NOT on {cluster} after {timeout:.0f}s"
    return f"still moving after {timeout:.0f}s (last at {seen})"


def consume_to_end(client, topic: str, record, last, idle: float = 5.0,
                   timeout: float = 60.0) -> None:
    """Subscribe ``record.name`` on the target (replicated, as on the source) and receive, each
    delivery acknowledged and recorded, until ``last`` (the name of the last message the target
    stores, or None) has come and nothing more for 2 s, or nothing at all for ``idle`` seconds,
    or ``timeout`` passes."""
    consumer = client.subscribe(
        topic, record.name, consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        replicate_subscription_state_enabled=True, receiver_queue_size=500,
        consumer_name=f"{record.name}-{record.target}")
    deadline = time.monotonic() + timeout
    quiet_since, done = time.monotonic(), False
    try:
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                if time.monotonic() - quiet_since >= (2.0 if done else idle):
                    return
                continue
            quiet_since = time.monotonic()
            try:
                producer, seq, _ = decode_payload(message.data())
            except ValueError:
                record.undecodable[record.target] = record.undecodable.get(record.target, 0) + 1
            else:
                record.target_deliveries.append(
                    (producer, seq, message_id_tuple(message.message_id())))
                done = done or (producer, seq) == last
            consumer.acknowledge(message)
    finally:
        try:
            consumer.close()
        except Exception:
            pass
