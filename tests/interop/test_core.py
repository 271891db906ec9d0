"""
Interop: the official Apache Pulsar Python client (``pulsar-client``, the C++ client underneath)
against a real ``twistd -n pulsar-standalone`` started in a subprocess.

Everything here goes through the official client only, so it checks what a real user sees:
topic naming, producers, the four subscription types, acks, redelivery, flow control, seek,
readers, multi-topic subscriptions and message size limits. The client blocks, which is fine:
the broker runs in another process. Every receive has a timeout; each test class shares one
standalone (started by its first test, stopped after its last, see ``InteropCase``).
"""

import atexit
import logging
import os
import re
import socket
import struct
import threading
import time
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.dispatch.single import choose_active
from pulsar_twisted.testing.process import StandaloneProcess
from tests.logs import official_client_logger

try:
    import pulsar
except ImportError:  # pragma: no cover - the official client is a test dependency
    pulsar = None

class _Named:
    """A consumer as ``choose_active`` sees it."""

    def __init__(self, name, consumer_id, priority_level=0):
        self.name, self.consumer_id, self.priority_level = name, consumer_id, priority_level


#: Standalones still running at interpreter exit (a test run cut short, a single test selected).
_LIVE = set()


@atexit.register
def _stop_leftovers():
    for standalone in list(_LIVE):
        standalone.cleanup()


def _client_logger(path: str) -> logging.Logger:
    """The C++ client's log, at ERROR and above, into ``path`` instead of the test output."""
    return official_client_logger(f"pulsar-interop.{path}", path)


def unique_suffix() -> str:
    """Eight random hex digits, at least one of them a letter (see ``InteropCase.topic``)."""
    while True:
        suffix = uuid.uuid4().hex[:8]
        if not suffix.isdigit():
            return suffix


class InteropCase(SynchronousTestCase):
    """
    Base of the interop tests: one standalone per test class, one official client per test.

    Trial has no ``setUpClass``: the first test of a class starts the standalone and the last one
    (counted among the class's non-skipped tests) stops it; an ``atexit`` hook stops whatever a
    partial run left. After each test the broker's log is searched for tracebacks: an error the
    client never sees is still a failure (set ``allow_broker_tracebacks`` to opt out).
    """

    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    #: Keys of conf/standalone.conf overridden for this class's standalone.
    standalone_config = {"activeConsumerFailoverDelayTimeMillis": 100}
    allow_broker_tracebacks = False
    receive_timeout_ms = 5000

    @classmethod
    def _test_count(cls) -> int:
        names = [n for n in dir(cls) if n.startswith("test")]
        return len([n for n in names
                    if callable(getattr(cls, n)) and not getattr(getattr(cls, n), "skip", None)])

    def setUp(self):
        cls = type(self)
        if cls.__dict__.get("standalone") is None:
            standalone = StandaloneProcess(self.standalone_config)
            _LIVE.add(standalone)
            cls.standalone = standalone
            cls._remaining = cls._test_count()
            standalone.start()
        self.standalone = cls.standalone
        self._log_offset = len(self.standalone.log_text())
        self.addCleanup(self._class_test_done)
        self.addCleanup(self._check_broker_log)
        self.client = self.new_client()

    def new_client(self):
        client = pulsar.Client(
            self.standalone.service_url, operation_timeout_seconds=10,
            logger=_client_logger(os.path.join(self.standalone.directory, "client.log")))
        self.addCleanup(self._close_client, client)
        return client

    @staticmethod
    def _close_client(client):
        try:
            client.close()
        except pulsar.PulsarException:
            pass  # a test closed it already

    def _check_broker_log(self):
        new = self.standalone.log_text()[self._log_offset:]
        if "Traceback" in new and not self.allow_broker_tracebacks:
            self.fail("the broker logged a traceback during this test:\n" + new[-6000:])

    @classmethod
    def _class_test_done(cls):
        cls._remaining -= 1
        if cls._remaining <= 0:
            standalone = cls.standalone
            cls.standalone = None
            _LIVE.discard(standalone)
            standalone.cleanup()

    # ------------------------------------------------------------------ helpers
    def topic(self, prefix: str = "", domain: str = "") -> str:
        """
        A topic name unique to this test (short form unless ``domain`` is given). Its unique
        part never is all digits: after a name ending in "partition", "...-partition-99229587"
        is by Pulsar's naming rule partition 99229587 of "...", a plain topic that is never
        auto-created partitioned (test_reader_on_a_partition failed so, 1 run in about 40).
        """
        name = f"{prefix or self._testMethodName.replace('_', '-')}-{unique_suffix()}"
        return f"{domain}://public/default/{name}" if domain else name

    def failover_topic(self, names, active: str, domain: str = "persistent") -> str:
        """
        A fresh non-partitioned topic name on which Pulsar's rule makes consumer ``active`` (of
        ``names``) the active one: the first point at or after the topic name's hash on a ring of
        100 points per consumer name (``choose_active``, checked on known values in
        tests/broker/test_active_consumer.py).
        """
        consumers = [_Named(n, i) for i, n in enumerate(names)]
        while True:
            name = self.topic()
            if choose_active(consumers, -1, f"{domain}://public/default/{name}").name == active:
                return name

    def receive(self, consumer, timeout_ms: int = None):
        """The next message, or a test failure naming the timeout (with the broker log tail)."""
        try:
            return consumer.receive(timeout_millis=timeout_ms or self.receive_timeout_ms)
        except pulsar.Timeout:
            self.fail(f"no message within {timeout_ms or self.receive_timeout_ms} ms\n"
                      + self.standalone.log_tail(30))

    def receive_all(self, consumer, count: int, timeout_ms: int = None, ack: bool = False):
        out = []
        for _ in range(count):
            message = self.receive(consumer, timeout_ms)
            if ack:
                consumer.acknowledge(message)
            out.append(message)
        return out

    def drain(self, consumer, quiet_ms: int = 500, ack: bool = False, limit: int = 100000):
        """Receive until nothing arrives for ``quiet_ms``."""
        out = []
        while len(out) < limit:
            try:
                message = consumer.receive(timeout_millis=quiet_ms)
            except pulsar.Timeout:
                break
            if ack:
                consumer.acknowledge(message)
            out.append(message)
        return out

    def assertNoMessage(self, consumer, timeout_ms: int = 300):
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return
        self.fail(f"unexpected message {message.data()!r} ({message.message_id()})")

    @staticmethod
    def datas(messages):
        return [m.data() for m in messages]

    @staticmethod
    def mid(message_id):
        return (message_id.ledger_id(), message_id.entry_id())

    def publish(self, producer, count: int, prefix: str = "m", **kwargs):
        payloads = [f"{prefix}-{i}".encode() for i in range(count)]
        for payload in payloads:
            producer.send(payload, **kwargs)
        return payloads


Earliest = pulsar.InitialPosition.Earliest if pulsar is not None else None
CT = pulsar.ConsumerType if pulsar is not None else None


class TopicHelperTests(SynchronousTestCase):
    """The helpers' names (no standalone needed)."""

    def test_unique_suffix_never_all_digits(self):
        """An all-digit draw is drawn again: "...-partition-<digits>" would name a partition."""
        draws = iter([uuid.UUID(int=0x12345678 << 96), uuid.UUID(int=0x1234567a << 96)])
        self.patch(uuid, "uuid4", lambda: next(draws))
        self.assertEqual(unique_suffix(), "1234567a")


class ProduceConsumeTests(InteropCase):
    """Topic names, producers, message contents and ids."""

    def test_short_and_full_names_are_the_same_topic(self):
        name = self.topic()
        consumer = self.client.subscribe(f"persistent://public/default/{name}", "sub")
        producer = self.client.create_producer(name)
        self.assertEqual(producer.topic(), f"persistent://public/default/{name}")
        producer.send(b"via-short")
        other = self.client.create_producer(f"persistent://public/default/{name}")
        other.send(b"via-full")
        got = self.receive_all(consumer, 2, ack=True)
        self.assertEqual(self.datas(got), [b"via-short", b"via-full"])
        self.assertEqual(got[0].topic_name(), f"persistent://public/default/{name}")

    def test_sync_sends_ids_ordered(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name)
        ids = [producer.send(f"m-{i}".encode()) for i in range(50)]
        keys = [self.mid(i) for i in ids]
        self.assertEqual(keys, sorted(keys))
        self.assertEqual(len(set(keys)), 50)
        got = self.receive_all(consumer, 50, ack=True)
        self.assertEqual(self.datas(got), [f"m-{i}".encode() for i in range(50)])
        self.assertEqual([self.mid(m.message_id()) for m in got], keys)

    def test_async_sends_all_acknowledged_in_order(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name, batching_enabled=False)
        results = []
        done = threading.Event()
        total = 500

        def callback(result, message_id, i=None):
            results.append((result, self.mid(message_id)))
            if len(results) == total:
                done.set()

        for i in range(total):
            producer.send_async(f"a-{i}".encode(), callback)
        producer.flush()
        self.assertTrue(done.wait(20), f"only {len(results)} of {total} callbacks")
        self.assertEqual({r for r, _ in results}, {pulsar.Result.Ok})
        ids = [m for _, m in results]
        self.assertEqual(ids, sorted(ids))
        got = self.receive_all(consumer, total, ack=True)
        self.assertEqual(self.datas(got), [f"a-{i}".encode() for i in range(total)])

    def test_batched_async_sends_arrive(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name, batching_enabled=True,
                                               batching_max_publish_delay_ms=5)
        for i in range(200):
            producer.send_async(f"b-{i}".encode(), None)
        producer.flush()
        got = self.receive_all(consumer, 200, ack=True)
        self.assertEqual(self.datas(got), [f"b-{i}".encode() for i in range(200)])
        self.assertTrue(any(m.message_id().batch_index() > 0 for m in got), "nothing was batched")

    def test_properties_key_event_time_intact(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name, producer_name="prop-producer-" + name)
        properties = {"a": "1", "unicode": "h\u00e9llo", "empty": ""}
        before = int(time.time() * 1000)
        producer.send(b"\x00binary\xff", properties=properties, partition_key="the-key",
                      ordering_key="the-ordering-key", event_timestamp=1234567890123)
        message = self.receive(consumer)
        consumer.acknowledge(message)
        self.assertEqual(message.data(), b"\x00binary\xff")
        self.assertEqual(message.properties(), properties)
        self.assertEqual(message.partition_key(), "the-key")
        self.assertEqual(message.ordering_key(), "the-ordering-key")
        self.assertEqual(message.event_timestamp(), 1234567890123)
        self.assertEqual(message.producer_name(), "prop-producer-" + name)
        self.assertGreaterEqual(message.publish_timestamp(), before - 1000)
        self.assertLessEqual(message.publish_timestamp(), int(time.time() * 1000) + 1000)
        self.assertEqual(message.redelivery_count(), 0)

    def test_empty_payload(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        self.client.create_producer(name).send(b"")
        self.assertEqual(self.receive(consumer).data(), b"")

    def test_generated_producer_names_unique(self):
        name = self.topic()
        producers = [self.client.create_producer(name) for _ in range(3)]
        producers.append(self.new_client().create_producer(self.topic()))
        names = [p.producer_name() for p in producers]
        self.assertEqual(len(set(names)), 4, names)
        self.assertTrue(all(names), names)

    def test_producer_name_in_use_refused(self):
        name = self.topic()
        producer = self.client.create_producer(name, producer_name="dup-" + name)
        self.assertEqual(producer.producer_name(), "dup-" + name)
        with self.assertRaises(pulsar.ProducerBusy):
            self.new_client().create_producer(name, producer_name="dup-" + name)
        # The first one is unharmed, and the name is free again once it closes.
        producer.send(b"still-works")
        producer.close()
        again = self.new_client().create_producer(name, producer_name="dup-" + name)
        again.send(b"after-close")

    def test_empty_topic_get_last_message_id(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        last = consumer.get_last_message_id()
        self.assertEqual(last.entry_id(), -1)
        producer = self.client.create_producer(name)
        ids = [producer.send(b"x") for _ in range(3)]
        last = consumer.get_last_message_id()
        self.assertEqual(self.mid(last), self.mid(ids[-1]))

    def test_invalid_topic_name_refused(self):
        # A namespace that does not exist: the lookup answers TopicNotFound (no topic is
        # auto-created there), which the client does not retry.
        with self.assertRaises(pulsar.TopicNotFound):
            self.client.create_producer("persistent://public/no-such-namespace-x/t")

    def test_max_message_size(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", receiver_queue_size=10)
        producer = self.client.create_producer(name, batching_enabled=False)
        big = os.urandom(4 * 1024 * 1024)
        producer.send(big)
        message = self.receive(consumer, 15000)
        self.assertEqual(len(message.data()), len(big))
        self.assertEqual(message.data(), big)
        consumer.acknowledge(message)
        with self.assertRaises(pulsar.MessageTooBig):
            producer.send(b"\x01" * (6 * 1024 * 1024))
        # The producer and the connection survive the refusal.
        producer.send(b"after")
        self.assertEqual(self.receive(consumer).data(), b"after")


class SubscriptionTypeTests(InteropCase):
    """Exclusive, Failover, Shared and Key_Shared as the official client sees them."""

    def test_exclusive_second_consumer_refused(self):
        name = self.topic()
        first = self.client.subscribe(name, "sub", consumer_type=CT.Exclusive)
        with self.assertRaises(pulsar.ConsumerBusy):
            self.new_client().subscribe(name, "sub", consumer_type=CT.Exclusive)
        # A different type on the same subscription is refused too.
        with self.assertRaises(pulsar.ConsumerBusy):
            self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        self.client.create_producer(name).send(b"x")
        self.assertEqual(self.receive(first).data(), b"x")
        first.close()
        # Free again once the first one left.
        second = self.new_client().subscribe(name, "sub", consumer_type=CT.Exclusive)
        second.close()

    def test_failover_only_active_receives_then_hands_over_unacked(self):
        name = self.failover_topic(["a", "b"], "a")
        a = self.client.subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="a")
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Failover, consumer_name="b")
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 10)
        got_a = self.receive_all(a, 10)
        self.assertEqual(self.datas(got_a), sent)
        self.assertNoMessage(b)
        for message in got_a[:4]:
            a.acknowledge(message)
        a.close()
        rest = self.publish(producer, 5, prefix="late")
        got_b = self.drain(b, ack=True)
        self.assertEqual(self.datas(got_b), sent[4:] + rest)

    def test_failover_active_by_topic_hash(self):
        """Non-partitioned topic: the ring's consumer for the topic name is active, whoever came
        first (here the one subscribing second, once the failover delay has passed)."""
        for active, standby in (("aa", "zz"), ("zz", "aa")):
            name = self.failover_topic(["aa", "zz"], active)
            first = self.client.subscribe(name, "sub", consumer_type=CT.Failover,
                                          consumer_name=standby)
            second = self.new_client().subscribe(name, "sub", consumer_type=CT.Failover,
                                                 consumer_name=active)
            time.sleep(0.3)  # activeConsumerFailoverDelayTimeMillis=100 in this standalone
            producer = self.client.create_producer(name)
            sent = self.publish(producer, 5)
            self.assertEqual(self.datas(self.drain(second, ack=True)), sent)
            self.assertNoMessage(first)

    def test_failover_priority_level(self):
        """Lower priority level wins the active role whatever the names."""
    test_failover_priority_level.skip = ("pulsar-client 3.13's Python API has no consumer "
                                         "priority level")

    def test_shared_round_robin(self):
        name = self.topic()
        a = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 40)
        got_a = self.drain(a, ack=True)
        got_b = self.drain(b, ack=True)
        self.assertEqual(sorted(self.datas(got_a) + self.datas(got_b)), sorted(sent))
        self.assertTrue(got_a and got_b, f"a got {len(got_a)}, b got {len(got_b)}")
        self.assertLessEqual(abs(len(got_a) - len(got_b)), 4, (len(got_a), len(got_b)))

    def test_shared_close_with_unacked_redelivers_to_other(self):
        name = self.topic()
        a = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 10)
        got_a = self.receive_all(a, 10)
        a.acknowledge(got_a[0])
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        self.assertNoMessage(b)
        a.close()
        got_b = self.receive_all(b, 9)
        self.assertEqual(sorted(self.datas(got_b)), sorted(sent[1:]))
        for message in got_b:
            self.assertGreaterEqual(message.redelivery_count(), 1, message.data())
            b.acknowledge(message)
        self.assertNoMessage(b)

    def test_shared_cumulative_ack_refused_and_ineffective(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 5)
        got = self.receive_all(consumer, 5)
        # The official client refuses it itself (the broker would answer NotAllowed too).
        with self.assertRaises(pulsar.CumulativeAcknowledgementNotAllowedError):
            consumer.acknowledge_cumulative(got[-1])
        consumer.close()
        again = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        self.assertEqual(sorted(self.datas(self.drain(again, ack=True))), sorted(sent))

    def test_key_shared_key_to_one_consumer_in_order(self):
        name = self.topic()
        consumers = [self.new_client().subscribe(name, "sub", consumer_type=CT.KeyShared,
                                                 consumer_name=f"ks-{i}") for i in range(2)]
        producer = self.client.create_producer(name, batching_enabled=False)
        keys = [f"key-{k}" for k in range(16)]
        for i in range(20):
            for key in keys:
                producer.send_async(f"{key}:{i}".encode(), None, partition_key=key)
        producer.flush()
        owners = {}
        per_key = {}
        received = 0
        for index, consumer in enumerate(consumers):
            for message in self.drain(consumer, ack=True):
                key, seq = message.data().decode().split(":")
                self.assertEqual(message.partition_key(), key)
                owners.setdefault(key, set()).add(index)
                per_key.setdefault(key, []).append(int(seq))
                received += 1
        self.assertEqual(received, 20 * len(keys))
        for key in keys:
            self.assertEqual(len(owners[key]), 1, f"{key} went to consumers {owners[key]}")
            self.assertEqual(per_key[key], list(range(20)), key)
        self.assertEqual({i for o in owners.values() for i in o}, {0, 1},
                         "every key went to one consumer: the ring never split")

    def test_key_shared_consumer_leaves_keys_move_in_order(self):
        name = self.topic()
        a = self.client.subscribe(name, "sub", consumer_type=CT.KeyShared, consumer_name="ks-a")
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.KeyShared, consumer_name="ks-b")
        producer = self.client.create_producer(name, batching_enabled=False)
        keys = [f"k{k}" for k in range(8)]
        for i in range(5):
            for key in keys:
                producer.send(f"{key}:{i}".encode(), partition_key=key)
        # a takes its share without acking, then leaves: b gets all of it, in order per key.
        got_a = self.drain(a)
        self.assertTrue(got_a, "a received nothing: the hash ring gave every key to b")
        a.close()
        for i in range(5, 10):
            for key in keys:
                producer.send(f"{key}:{i}".encode(), partition_key=key)
        per_key = {}
        for message in self.drain(b, ack=True):
            key, seq = message.data().decode().split(":")
            per_key.setdefault(key, []).append(int(seq))
        for key in keys:
            self.assertEqual(per_key.get(key), list(range(10)), key)

    def test_key_shared_newcomer_does_not_overtake_unacked(self):
        name = self.topic()
        a = self.client.subscribe(name, "sub", consumer_type=CT.KeyShared, consumer_name="ks-a")
        producer = self.client.create_producer(name, batching_enabled=False)
        keys = [f"k{k}" for k in range(16)]
        for key in keys:
            producer.send(f"{key}:0".encode(), partition_key=key)
        held = self.receive_all(a, len(keys))
        # c joins while a holds unacked messages of every key: whatever keys move to c, c must
        # not get their newer messages before a's older ones are acknowledged.
        c = self.new_client().subscribe(name, "sub", consumer_type=CT.KeyShared, consumer_name="ks-c")
        for key in keys:
            producer.send(f"{key}:1".encode(), partition_key=key)
        early_c = self.drain(c, quiet_ms=500)
        self.assertEqual(early_c, [], "the newcomer overtook unacked messages")
        for message in held:
            a.acknowledge(message)
        late_a = self.drain(a, ack=True)
        late_c = self.drain(c, ack=True)
        self.assertEqual(sorted(self.datas(late_a) + self.datas(late_c)),
                         sorted(f"{k}:1".encode() for k in keys))
        self.assertTrue(late_c, "no key moved to the newcomer")

class PositionAndFlowTests(InteropCase):
    """Initial positions, receiver queues (permits), acks, negative acks, redelivery."""

    def test_initial_position_earliest_and_latest(self):
        name = self.topic()
        producer = self.client.create_producer(name)
        old = self.publish(producer, 3, prefix="old")
        earliest = self.client.subscribe(name, "from-earliest", initial_position=Earliest)
        latest = self.client.subscribe(name, "from-latest")
        self.assertEqual(self.datas(self.receive_all(earliest, 3, ack=True)), old)
        self.assertNoMessage(latest)
        producer.send(b"new")
        self.assertEqual(self.receive(latest).data(), b"new")
        self.assertEqual(self.receive(earliest).data(), b"new")

    def test_receiver_queue_bounds_what_one_consumer_holds(self):
        # Broker-side permits are not visible through this client (no consumer stats API), so
        # check their effect: a Shared consumer that never receives holds at most its queue,
        # and everything else goes to the other consumer.
        name = self.topic()
        idle = self.client.subscribe(name, "sub", consumer_type=CT.Shared, receiver_queue_size=5)
        busy = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name)
        self.publish(producer, 60)
        got_busy = self.drain(busy, ack=True)
        self.assertGreaterEqual(len(got_busy), 55, "the idle consumer got more than its 5 permits")
        got_idle = self.drain(idle, ack=True)
        self.assertEqual(len(got_busy) + len(got_idle), 60)

    def test_individual_acks_survive_reconnect(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 10)
        got = self.receive_all(consumer, 10)
        for message in got[::2]:
            consumer.acknowledge(message)
        consumer.close()
        again = self.new_client().subscribe(name, "sub")
        self.assertEqual(self.datas(self.drain(again, ack=True)), sent[1::2])

    def test_cumulative_ack_survives_reconnect(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Failover)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 10)
        got = self.receive_all(consumer, 10)
        consumer.acknowledge_cumulative(got[5])
        consumer.close()
        again = self.new_client().subscribe(name, "sub", consumer_type=CT.Failover)
        self.assertEqual(self.datas(self.drain(again, ack=True)), sent[6:])

    def test_negative_ack_redelivers(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared,
                                         negative_ack_redelivery_delay_ms=100)
        producer = self.client.create_producer(name)
        producer.send(b"nack-me")
        producer.send(b"keep-me")
        first = self.receive(consumer)
        second = self.receive(consumer)
        self.assertEqual(first.data(), b"nack-me")
        consumer.acknowledge(second)
        consumer.negative_acknowledge(first)
        again = self.receive(consumer, 5000)
        self.assertEqual(again.data(), b"nack-me")
        self.assertEqual(self.mid(again.message_id()), self.mid(first.message_id()))
        self.assertGreaterEqual(again.redelivery_count(), 1)
        consumer.acknowledge(again)
        self.assertNoMessage(consumer)

    def test_negative_ack_exclusive_redelivers(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", negative_ack_redelivery_delay_ms=100)
        producer = self.client.create_producer(name)
        producer.send(b"x")
        first = self.receive(consumer)
        consumer.negative_acknowledge(first)
        again = self.receive(consumer, 5000)
        self.assertEqual(again.data(), b"x")
        consumer.acknowledge(again)
        self.assertNoMessage(consumer)

    def test_redeliver_unacknowledged_messages(self):
        for kind in (CT.Exclusive, CT.Shared):
            name = self.topic()
            consumer = self.client.subscribe(name, "sub", consumer_type=kind)
            producer = self.client.create_producer(name)
            sent = self.publish(producer, 5)
            got = self.receive_all(consumer, 5)
            consumer.acknowledge(got[0])
            consumer.redeliver_unacknowledged_messages()
            again = self.drain(consumer, ack=True)
            self.assertEqual(sorted(self.datas(again)), sorted(sent[1:]), kind)
            if kind == CT.Shared:
                self.assertTrue(all(m.redelivery_count() >= 1 for m in again))

    def test_unsubscribe_then_resubscribe_starts_over(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name)
        self.publish(producer, 3)
        self.receive_all(consumer, 3)
        consumer.unsubscribe()
        fresh = self.client.subscribe(name, "sub")
        self.assertNoMessage(fresh)
        producer.send(b"after")
        self.assertEqual(self.receive(fresh).data(), b"after")


class NonPersistentTests(InteropCase):

    def test_non_persistent_produce_consume(self):
        name = self.topic(domain="non-persistent")
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 20, properties={"k": "v"})
        got = self.receive_all(consumer, 20, ack=True)
        self.assertEqual(self.datas(got), sent)
        self.assertEqual(got[0].properties(), {"k": "v"})

    def test_non_persistent_drops_without_permits(self):
        name = self.topic(domain="non-persistent")
        consumer = self.client.subscribe(name, "sub", receiver_queue_size=5)
        producer = self.client.create_producer(name)
        self.publish(producer, 40)
        got = self.drain(consumer, ack=True)
        # The client's first FLOW gave 5 permits and it sends no more until the application
        # takes messages: exactly the first 5 arrive, the other 35 are dropped by the broker.
        self.assertEqual(self.datas(got), [f"m-{i}".encode() for i in range(5)])
        # The subscription is not stuck: after the queue drained, new messages arrive.
        producer.send(b"later")
        self.assertEqual(self.receive(consumer).data(), b"later")

    def test_non_persistent_shared(self):
        name = self.topic(domain="non-persistent")
        a = self.client.subscribe(name, "sub", consumer_type=CT.Shared)
        b = self.new_client().subscribe(name, "sub", consumer_type=CT.Shared)
        producer = self.client.create_producer(name)
        sent = self.publish(producer, 20)
        got_a, got_b = self.drain(a, ack=True), self.drain(b, ack=True)
        self.assertEqual(sorted(self.datas(got_a) + self.datas(got_b)), sorted(sent))
        self.assertTrue(got_a and got_b)


class SeekAndReaderTests(InteropCase):

    def _topic_with(self, count):
        name = self.topic()
        producer = self.client.create_producer(name, batching_enabled=False)
        ids = [producer.send(f"m-{i}".encode()) for i in range(count)]
        return name, producer, ids

    def test_seek_by_message_id(self):
        name, producer, ids = self._topic_with(10)
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        self.receive_all(consumer, 10, ack=True)
        consumer.seek(ids[3])
        # The broker redelivers from the seek position; the C++ client then drops the message
        # at it unless start_message_id_inclusive.
        self.assertEqual(self.datas(self.drain(consumer, ack=True)),
                         [f"m-{i}".encode() for i in range(4, 10)])
        inclusive = self.client.subscribe(name, "inclusive", initial_position=Earliest,
                                          start_message_id_inclusive=True)
        self.receive_all(inclusive, 10, ack=True)
        inclusive.seek(ids[3])
        self.assertEqual(self.datas(self.drain(inclusive, ack=True)),
                         [f"m-{i}".encode() for i in range(3, 10)])

    def test_seek_to_earliest_and_latest(self):
        name, producer, ids = self._topic_with(5)
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        self.receive_all(consumer, 5, ack=True)
        consumer.seek(pulsar.MessageId.earliest)
        self.assertEqual(len(self.drain(consumer, ack=True)), 5)
        consumer.seek(pulsar.MessageId.latest)
        self.assertNoMessage(consumer)
        producer.send(b"after")
        self.assertEqual(self.receive(consumer).data(), b"after")

    def test_seek_by_time(self):
        name = self.topic()
        producer = self.client.create_producer(name, batching_enabled=False)
        self.publish(producer, 5, prefix="before")
        time.sleep(0.05)
        boundary = int(time.time() * 1000)
        time.sleep(0.05)
        after = self.publish(producer, 5, prefix="after")
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        self.assertEqual(len(self.receive_all(consumer, 10, ack=True)), 10)
        consumer.seek(boundary)
        self.assertEqual(self.datas(self.drain(consumer, ack=True)), after)
        consumer.seek(0)
        self.assertEqual(len(self.drain(consumer, ack=True)), 10)

    def test_reader_from_earliest(self):
        name, producer, ids = self._topic_with(5)
        reader = self.client.create_reader(name, pulsar.MessageId.earliest)
        got = [reader.read_next(5000) for _ in range(5)]
        self.assertEqual(self.datas(got), [f"m-{i}".encode() for i in range(5)])
        self.assertFalse(reader.has_message_available())
        producer.send(b"more")
        deadline = time.monotonic() + 5
        while not reader.has_message_available() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(reader.has_message_available())
        self.assertEqual(reader.read_next(5000).data(), b"more")

    def test_reader_from_message_id(self):
        name, producer, ids = self._topic_with(6)
        reader = self.client.create_reader(name, ids[2])
        self.assertEqual(reader.read_next(5000).data(), b"m-3")
        inclusive = self.client.create_reader(name, ids[2], start_message_id_inclusive=True)
        self.assertEqual(inclusive.read_next(5000).data(), b"m-2")
        from_serialized = self.client.create_reader(
            name, pulsar.MessageId.deserialize(ids[4].serialize()))
        self.assertEqual(from_serialized.read_next(5000).data(), b"m-5")

    def test_reader_from_latest(self):
        name, producer, ids = self._topic_with(3)
        reader = self.client.create_reader(name, pulsar.MessageId.latest)
        self.assertFalse(reader.has_message_available())
        producer.send(b"new")
        self.assertEqual(reader.read_next(5000).data(), b"new")

    def test_reader_on_empty_topic(self):
        name = self.topic()
        reader = self.client.create_reader(name, pulsar.MessageId.earliest)
        self.assertFalse(reader.has_message_available())
        with self.assertRaises(pulsar.Timeout):
            reader.read_next(300)

    def test_reader_seek(self):
        name, producer, ids = self._topic_with(5)
        reader = self.client.create_reader(name, pulsar.MessageId.earliest)
        self.assertEqual(len([reader.read_next(5000) for _ in range(5)]), 5)
        reader.seek(pulsar.MessageId.earliest)
        self.assertEqual(reader.read_next(5000).data(), b"m-0")

    def test_get_last_message_id(self):
        name, producer, ids = self._topic_with(4)
        consumer = self.client.subscribe(name, "sub")
        self.assertEqual(self.mid(consumer.get_last_message_id()), self.mid(ids[-1]))


class NamespaceTests(InteropCase):
    """Partition metadata and multi-topic subscriptions."""

    standalone_config = {"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3}

    def test_get_topic_partitions_of_auto_created_partitioned_topic(self):
        name = self.topic(domain="persistent")
        partitions = self.client.get_topic_partitions(name)
        self.assertEqual(partitions, [f"{name}-partition-{i}" for i in range(3)])
        producer = self.client.create_producer(name)
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        sent = self.publish(producer, 30)
        got = self.receive_all(consumer, 30, ack=True)
        self.assertEqual(sorted(self.datas(got)), sorted(sent))
        self.assertEqual({m.topic_name() for m in got}, set(partitions))

    def test_names_that_look_like_partitions(self):
        """Pulsar's naming rule, seen through the official client: "<x>-partition-12345678" is
        a partition (of an <x> that is not partitioned: a plain topic, never auto-created
        partitioned); "<x>-partition-01234567" (leading zero) is an ordinary name."""
        base = self.topic(domain="persistent")
        partition = f"{base}-partition-12345678"
        self.assertEqual(self.client.get_topic_partitions(partition), [partition])
        ordinary = f"{base}-partition-01234567"
        self.assertEqual(self.client.get_topic_partitions(ordinary),
                         [f"{ordinary}-partition-{i}" for i in range(3)])
        self.client.create_producer(partition).send(b"plain")
        reader = self.client.create_reader(partition, pulsar.MessageId.earliest)
        self.assertEqual(reader.read_next(5000).data(), b"plain")

    def test_partitioned_key_routing_keeps_key_order(self):
        name = self.topic(domain="persistent")
        producer = self.client.create_producer(name, batching_enabled=False)
        consumer = self.client.subscribe(name, "sub", initial_position=Earliest)
        for i in range(10):
            for key in ("x", "y", "z"):
                producer.send(f"{key}:{i}".encode(), partition_key=key)
        per_key = {}
        for message in self.receive_all(consumer, 30, ack=True):
            key, seq = message.data().decode().split(":")
            per_key.setdefault(key, []).append((int(seq), message.topic_name()))
        for key, seqs in per_key.items():
            self.assertEqual([s for s, _ in seqs], list(range(10)))
            self.assertEqual(len({t for _, t in seqs}), 1, f"{key} spread over partitions")

    def test_subscribe_to_list_of_topics(self):
        names = [self.topic(prefix=f"multi-{i}", domain="persistent") for i in range(3)]
        consumer = self.client.subscribe(names, "sub", initial_position=Earliest)
        for name in names:
            self.client.create_producer(name).send(name.encode())
        got = self.receive_all(consumer, 3, ack=True)
        self.assertEqual(sorted(self.datas(got)), sorted(n.encode() for n in names))

    def test_regex_subscription_finds_existing_topics(self):
        stem = f"regex-{uuid.uuid4().hex[:6]}"
        names = [f"persistent://public/default/{stem}-{i}" for i in range(3)]
        for name in names:
            self.client.create_producer(name).send(b"first " + name.encode())
        other = self.client.create_producer(f"persistent://public/default/not{stem}")
        other.send(b"not mine")
        consumer = self.client.subscribe(re.compile(f"persistent://public/default/{stem}-.*"),
                                         "sub", initial_position=Earliest)
        got = self.drain(consumer, ack=True)
        self.assertEqual(sorted(self.datas(got)), sorted(b"first " + n.encode() for n in names))


class MalformedInputTests(InteropCase):
    """Garbage on one connection never disturbs an official client on another."""

    allow_broker_tracebacks = False

    def _raw(self):
        sock = socket.create_connection((self.standalone.host, self.standalone.port), timeout=5)
        self.addCleanup(sock.close)
        return sock

    def _closed_by_broker(self, sock, timeout=5.0) -> bool:
        sock.settimeout(timeout)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def test_garbage_frames_do_not_disturb_official_client(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name)
        producer.send(b"before")
        self.assertEqual(self.receive(consumer).data(), b"before")
        bad_inputs = [
            # (bytes, whether the broker must close the connection)
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True),                 # not Pulsar at all
            (struct.pack(">II", 12, 8) + b"\xff" * 8, True),               # undecodable command
            (struct.pack(">II", 3, 8) + b"\x00" * 8, True),                # command longer than frame
            (struct.pack(">I", 0x7FFFFFF0) + b"\x00" * 16, True),          # absurd frame size
            (struct.pack(">II", 6, 2) + b"\x08\x02", False),               # CONNECT without its fields
            (struct.pack(">II", 6, 2) + b"\x08\x06", True),                # SEND before CONNECT
        ]
        for bad, must_close in bad_inputs:
            sock = self._raw()
            sock.sendall(bad)
            closed = self._closed_by_broker(sock, 5.0 if must_close else 0.3)
            if must_close:
                self.assertTrue(closed, f"broker kept the connection after {bad!r}")
            # The official client's session is unaffected, both ways.
            producer.send(b"during")
            self.assertEqual(self.receive(consumer).data(), b"during")
        producer.send(b"after")
        self.assertEqual(self.receive(consumer).data(), b"after")

    def test_garbage_while_sending_async(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub")
        producer = self.client.create_producer(name)
        results = []
        for i in range(200):
            producer.send_async(f"x-{i}".encode(), lambda r, m: results.append(r))
            if i % 50 == 0:
                sock = self._raw()
                sock.sendall(os.urandom(64))
        producer.flush()
        self.assertEqual(results, [pulsar.Result.Ok] * 200)
        self.assertEqual(self.datas(self.receive_all(consumer, 200, ack=True)),
                         [f"x-{i}".encode() for i in range(200)])
