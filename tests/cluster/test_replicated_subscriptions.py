"""
Replicated subscriptions (Pulsar's PIP-33), end to end on two standalones (``GeoCase``: ``east``
and ``west`` replicating ``geo/ns`` both ways) with the official client's
``subscribe(..., replicate_subscription_state_enabled=True)``.

How the tests make the state cross at a known place: messages are produced in *phases*, each
followed by a pause of ``PAUSE`` seconds, ten snapshot periods (``SNAPSHOT_MS``). During a pause
east's broker takes a snapshot whose request marker follows the phase's last message, so a
snapshot (east position <-> west position) sits between two phases. Once east's mark-delete
position passes it, an update marker moves west's subscription of the same name to the west
position of that snapshot: the first message west then delivers is at most one phase behind what
east acknowledged (a snapshot taken during a phase only brings it closer), and never past a
message east did not acknowledge.

Each test starts its own two standalones (about a second); every wait is bounded.
"""

import threading
import time

from tests.cluster.geo_support import WAIT, GeoCase, pulsar

#: The brokers' replicatedSubscriptionsSnapshotFrequencyMillis.
SNAPSHOT_MS = 200
#: The pause after a phase: ten snapshot periods, so that one snapshot completes in it.
PAUSE = 2.0
#: West's subscription has settled when its mark-delete position has not moved for this long.
STABLE = 2.0
#: How long a reader's or consumer's blocking call may take before it is said to hang.
HANG = 15.0
SUB = "rs"


def payload(i: int) -> bytes:
    return b"m%03d" % i


def index(data: bytes) -> int:
    return int(data[1:])


def _position(text):
    """(ledger, entry) of a ``L:E`` position, None for None."""
    if not text:
        return None
    ledger, entry = text.split(":")
    return int(ledger), int(entry)


def _call_within(seconds: float, fn, *args):
    """``(finished, result or exception)`` of ``fn(*args)`` run in a daemon thread, waiting at
    most ``seconds`` (a call that hangs leaves its thread behind, which is the finding)."""
    box = []

    def run():
        try:
            box.append((True, fn(*args)))
        except Exception as e:
            box.append((True, e))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return box[0] if box else (False, None)


def _close_quietly(consumer) -> None:
    """Close a consumer a test may have closed already."""
    try:
        consumer.close()
    except Exception:
        pass


class ReplicatedSubscriptionCase(GeoCase):
    site_config = {"replicatedSubscriptionsSnapshotFrequencyMillis": SNAPSHOT_MS}

    def setUp(self):
        super().setUp()
        self.producer = None
        self.sent = 0

    # ------------------------------------------------------------------ workload
    def phase(self, count: int, site=None) -> None:
        """``count`` more messages ``m<i>`` (numbered on from the last phase) produced on
        ``site`` (east by default), then ``PAUSE`` seconds for a snapshot to complete."""
        if self.producer is None or site is not None:
            self.producer = self.client(site or self.east).create_producer(
                self.topic, batching_enabled=False)
        for _ in range(count):
            self.producer.send(payload(self.sent))
            self.sent += 1
        time.sleep(PAUSE)

    def subscribe(self, site, name=SUB, replicated=True, **options):
        consumer = self.client(site).subscribe(
            self.topic, name, initial_position=pulsar.InitialPosition.Earliest,
            replicate_subscription_state_enabled=replicated, **options)
        self.addCleanup(_close_quietly, consumer)
        return consumer

    def receive(self, consumer, count: int) -> list:
        """The next ``count`` messages of ``consumer`` (failing after ``WAIT``)."""
        out = []
        deadline = time.monotonic() + WAIT
        while len(out) < count:
            self.assertLess(time.monotonic(), deadline,
                            f"only {[m.data() for m in out]} of {count} messages came")
            try:
                out.append(consumer.receive(timeout_millis=500))
            except pulsar.Timeout:
                continue
        return out

    def receive_until(self, consumer, last: bytes) -> list:
        """Messages of ``consumer`` up to the one whose payload is ``last`` (failing after
        ``WAIT``)."""
        out = []
        deadline = time.monotonic() + WAIT
        while not out or out[-1].data() != last:
            self.assertLess(time.monotonic(), deadline,
                            f"{last!r} did not come: {[m.data() for m in out]}")
            try:
                out.append(consumer.receive(timeout_millis=500))
            except pulsar.Timeout:
                continue
        return out

    def drain(self, consumer, last: bytes, idle: float = 3.0) -> list:
        """Payloads ``consumer`` receives (each acknowledged) until ``last`` has come and then
        nothing more for ``idle`` seconds, or ``WAIT`` passes."""
        out = []
        deadline = time.monotonic() + WAIT
        quiet_since = None
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                if last in out:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since >= idle:
                        break
                continue
            quiet_since = None
            out.append(message.data())
            consumer.acknowledge(message)
        self.assertIn(last, out, f"{last!r} never came; got {out}")
        return out

    # ------------------------------------------------------------------ observation
    def subscription_stats(self, site, name=SUB):
        """The subscription's entry in the topic stats on ``site``, None if it has none."""
        return (self.pair.topic_stats(site.name, self.topic).get("subscriptions") or {}).get(name)

    def cursor(self, site, name=SUB, topic=None):
        internal = self.pair.internal_stats(site.name, topic or self.topic)
        return (internal.get("cursors") or {}).get(name)

    def wait_settled(self, site, name=SUB, after=None, topic=None) -> tuple:
        """The subscription's mark-delete position on ``site`` (on ``topic``, the test's by
        default) once it exists, is past ``after`` (a position) and has not moved for
        ``STABLE`` seconds; fails after ``WAIT``."""
        topic = topic or self.topic
        deadline = time.monotonic() + WAIT
        seen, since = None, None
        while time.monotonic() < deadline:
            cursor = self.cursor(site, name, topic)
            position = _position(cursor and cursor.get("markDeletePosition"))
            if position is not None and (after is None or position > after):
                if position != seen:
                    seen, since = position, time.monotonic()
                elif time.monotonic() - since >= STABLE:
                    return position
            time.sleep(0.2)
        self.fail(f"subscription {name!r} on {site.name} did not settle (past {after}) within "
                  f"{WAIT}s: last position {seen}; cursors "
                  f"{sorted((self.pair.internal_stats(site.name, topic).get('cursors') or {}))}")

    def read_strictly(self, site) -> list:
        """Every payload of the topic on ``site`` from the earliest position, read while
        ``has_message_available()`` says there is more. Fails if that call hangs (``HANG``) or
        says True where ``read_next`` then finds nothing (a marker taken for a message)."""
        reader = self.client(site).create_reader(self.topic, pulsar.MessageId.earliest)
        self.addCleanup(reader.close)
        out = []
        while True:
            finished, more = _call_within(HANG, reader.has_message_available)
            self.assertTrue(finished, f"has_message_available() on {site.name} hangs (over "
                            f"{HANG}s) after {len(out)} messages {out[-3:]}")
            if isinstance(more, Exception):
                raise more
            if not more:
                return out
            try:
                out.append(reader.read_next(timeout_millis=5000).data())
            except pulsar.Timeout:
                internal = self.pair.internal_stats(site.name, self.topic)
                self.fail(f"has_message_available() on {site.name} says True after {len(out)} "
                          f"messages (last {out[-1:]}) but read_next finds nothing in 5 s: the "
                          f"topic's last entries (lastConfirmedEntry "
                          f"{internal.get('lastConfirmedEntry')}, {internal.get('numberOfEntries')}"
                          f" entries) are taken for messages")


class ReplicatedSubscriptionTests(ReplicatedSubscriptionCase):

    def test_state_crosses(self):
        """Acked on east (cumulatively up to m39, then individually m40-m59 but m45), west's
        subscription (none before the first update, made by it, replicated as east's) delivers
        every message east did not ack and starts past the snapshot between the first two
        phases (m30 at the earliest), not from m0."""
        east = self.subscribe(self.east)
        self.phase(30)                       # m0-m29, snapshot
        self.phase(30)                       # m30-m59, snapshot
        self.assertIsNone(self.subscription_stats(self.west),
                          "west has the subscription before any update")
        messages = self.receive(east, 60)
        self.assertEqual([m.data() for m in messages], [payload(i) for i in range(60)])
        east.acknowledge_cumulative(messages[39])
        for i in range(40, 60):
            if i != 45:
                east.acknowledge(messages[i])
        self.phase(40)                       # m60-m99: production goes on
        self.wait_settled(self.west)
        # The update made west's subscription, replicated as east's is.
        for site in (self.east, self.west):
            stats = self.subscription_stats(site)
            self.assertTrue((stats or {}).get("isReplicated"), f"{site.name}: {stats}")
        got = self.drain(self.subscribe(self.west), last=payload(99))
        unacked = {payload(i) for i in [45] + list(range(60, 100))}
        self.assertEqual(sorted(unacked - set(got)), [], f"west skipped unacked messages: {got}")
        # At least once, bounded: west starts no earlier than the snapshot of the first pause
        # (m30) and no later than east's first unacked message (m45).
        self.assertGreaterEqual(index(got[0]), 30, f"west redelivers too much: {got[:5]}...")
        self.assertLessEqual(index(got[0]), 45, got[:5])
        self.assertEqual(got, sorted(got), "west delivered out of order")

    def test_fails_back(self):
        """After a failover the state crosses back: west's subscription (made by the update)
        is consumed there, more is produced on west in phases, acked on west up to m75, and
        east's subscription then starts between the snapshot after m69 and m76."""
        east = self.subscribe(self.east)
        self.phase(30)                       # m0-m29
        self.phase(30)                       # m30-m59
        east.acknowledge_cumulative(self.receive(east, 60)[39])
        east_before = _position(self.cursor(self.east)["markDeletePosition"])
        self.wait_settled(self.west)
        east.close()
        west = self.subscribe(self.west)
        self.phase(10, site=self.west)       # m60-m69 on west, snapshot
        self.phase(10)                       # m70-m79, snapshot
        messages = self.receive_until(west, payload(79))
        self.assertEqual([m.data() for m in messages],
                         [payload(i) for i in range(index(messages[0].data()), 80)])
        self.assertLessEqual(index(messages[0].data()), 40)      # east's first unacked
        west.acknowledge_cumulative(next(m for m in messages if m.data() == payload(75)))
        self.wait_settled(self.east, after=east_before)
        got = self.drain(self.subscribe(self.east), last=payload(79), idle=2.0)
        self.assertEqual(sorted({payload(i) for i in range(76, 80)} - set(got)), [], got)
        self.assertGreaterEqual(index(got[0]), 70, f"east did not follow west back: {got}")
        self.assertLessEqual(index(got[0]), 76, got)

    def test_plain_subscriptions_stay(self):
        """Beside a replicated subscription that crosses, a plain subscription present on both
        clusters is not moved on west (it still delivers m0), and one present only on east is
        not made on west."""
        replicated = self.subscribe(self.east)
        both = self.subscribe(self.east, "plain-both", replicated=False)
        self.subscribe(self.west, "plain-both", replicated=False).close()
        only_east = self.subscribe(self.east, "plain-east", replicated=False)
        self.phase(10)
        self.phase(10)
        for consumer in (replicated, both, only_east):
            consumer.acknowledge_cumulative(self.receive(consumer, 20)[-1])
        self.wait_settled(self.west)
        self.assertIsNone(self.subscription_stats(self.west, "plain-east"))
        got = self.drain(self.subscribe(self.west, "plain-both", replicated=False),
                         last=payload(19))
        self.assertEqual(got, [payload(i) for i in range(20)])

    def test_markers_never_delivered(self):
        """With snapshot and update markers in the topic (and last in it), a reader from the
        earliest position and a plain consumer get exactly the produced payloads in order on
        both clusters, ``has_message_available()`` then says False, and east's replicated
        subscription and the plain ones, all acked, have no backlog left (markers are
        acknowledged for every subscription)."""
        east = self.subscribe(self.east)
        self.phase(10)
        self.phase(10)
        east.acknowledge_cumulative(self.receive(east, 20)[-1])
        self.wait_settled(self.west)
        time.sleep(PAUSE)                    # the last snapshot's markers land
        expected = [payload(i) for i in range(20)]
        for site in (self.east, self.west):
            internal = self.pair.internal_stats(site.name, self.topic)
            self.assertGreater(internal.get("numberOfEntries", 0), 20,
                               f"no marker in the topic on {site.name}: the test proves nothing")
            self.assertEqual(self.read_strictly(site), expected, site.name)
            plain = self.subscribe(site, f"plain-{site.name}", replicated=False)
            self.assertEqual(self.drain(plain, last=payload(19), idle=2.0), expected, site.name)
        for site, name in ((self.east, SUB), (self.east, "plain-east"), (self.west, "plain-west")):
            deadline = time.monotonic() + WAIT
            while (self.subscription_stats(site, name) or {}).get("msgBacklog") != 0:
                self.assertLess(time.monotonic(), deadline, f"{name} on {site.name} keeps a "
                                f"backlog: {self.subscription_stats(site, name)}")
                time.sleep(0.2)

    def test_readers_on_a_topic_ending_on_markers(self):
        """A topic whose last entries are markers (its messages all before them): after the
        last message, ``has_message_available()`` answers at once, and False; a reader at
        ``MessageId.latest`` with ``start_message_id_inclusive`` has the last message available
        at its first call (as without markers: the official client compares the answer's
        mark-delete position with the last message id); on both clusters."""
        east = self.subscribe(self.east)
        self.phase(5)
        east.acknowledge_cumulative(self.receive(east, 5)[-1])
        time.sleep(PAUSE)
        for site in (self.east, self.west):
            reader = self.client(site).create_reader(self.topic, pulsar.MessageId.earliest)
            self.addCleanup(reader.close)
            last = None
            for _ in range(5):
                last = reader.read_next(timeout_millis=int(WAIT * 1000))
            internal = self.pair.internal_stats(site.name, self.topic)
            last_entry = _position(internal.get("lastConfirmedEntry"))
            self.assertGreater(last_entry, (last.message_id().ledger_id(),
                                            last.message_id().entry_id()),
                               f"{site.name}: no marker after the last message")
            started = time.monotonic()
            finished, more = _call_within(HANG, reader.has_message_available)
            self.assertTrue(finished, f"{site.name}: has_message_available() hangs")
            self.assertIs(more, False, f"{site.name}: has_message_available() -> {more!r} after "
                          f"the last message {last.data()!r} (at {last.message_id()}), the last "
                          f"entry being the marker at {last_entry}")
            self.assertLess(time.monotonic() - started, 5.0)
            latest = self.client(site).create_reader(self.topic, pulsar.MessageId.latest,
                                                     start_message_id_inclusive=True)
            self.addCleanup(latest.close)
            finished, first = _call_within(HANG, latest.has_message_available)
            self.assertTrue(finished, f"{site.name}: has_message_available() hangs")
            self.assertIs(first, True, f"{site.name}: the first has_message_available() of a "
                          f"latest, inclusive reader -> {first!r} (lastConfirmedEntry "
                          f"{last_entry}, a marker)")
            self.assertEqual(latest.read_next(timeout_millis=int(WAIT * 1000)).data(), payload(4))


class RestartTests(ReplicatedSubscriptionCase):

    def test_restarted_cluster_keeps_replicating(self):
        """East killed -9 and started again on its data: its subscription is still replicated
        (stats, and the state crosses again after a subscribe without the flag: Pulsar's broker
        never turns the flag off on a subscribe) and west's follows the next acks: acked up to
        m35 on east, west starts between the snapshot after m29 and m36, and delivers m36-m39."""
        east = self.subscribe(self.east)
        self.phase(10)
        self.phase(10)
        east.acknowledge_cumulative(self.receive(east, 20)[-1])
        before = self.wait_settled(self.west)
        east.close()
        self.east.kill9()
        self.east.start()
        self.assertTrue((self.subscription_stats(self.east) or {}).get("isReplicated"),
                        f"after the restart: {self.subscription_stats(self.east)}")
        self.producer = None                 # the old one's client reconnects on its own time
        self.phase(10, site=self.east)       # m20-m29, snapshot
        self.phase(10)                       # m30-m39, snapshot
        again = self.subscribe(self.east, replicated=False)
        # From m20 (or before, if the kill -9 took east's last position with it).
        messages = self.receive_until(again, payload(39))
        self.assertLessEqual(index(messages[0].data()), 20)
        # Not the last message: acked up to it, with the markers after it acknowledged for the
        # subscription, east's position could pass the last snapshot and west's reach the end.
        again.acknowledge_cumulative(next(m for m in messages if m.data() == payload(35)))
        self.wait_settled(self.west, after=before)
        got = self.drain(self.subscribe(self.west), last=payload(39), idle=2.0)
        self.assertEqual(sorted({payload(i) for i in range(36, 40)} - set(got)), [], got)
        self.assertGreaterEqual(index(got[0]), 30, f"west did not follow east: {got}")
        self.assertLessEqual(index(got[0]), 36, got)


class PartitionedTopicTests(ReplicatedSubscriptionCase):

    def test_each_partition_crosses(self):
        """On a topic of two partitions (made on east, and by east's broker on west), each
        partition's state crosses on its own: m<even> on partition 0, m<odd> on 1, in two
        phases; east acks all but m10 and m11 (each partition's first of phase 2); west then
        delivers exactly m10-m19."""
        path = "/admin/v2/persistent/" + self.topic.split("://", 1)[1] + "/partitions"
        self.pair.admin("east").put(path, 2)
        deadline = time.monotonic() + WAIT
        while (self.pair.admin("west").get(path) or {}).get("partitions") != 2:
            self.assertLess(time.monotonic(), deadline, "no partitioned topic on west")
            time.sleep(0.2)
        east = self.subscribe(self.east)
        client = self.client(self.east)
        producers = [client.create_producer(f"{self.topic}-partition-{p}", batching_enabled=False)
                     for p in (0, 1)]
        for phase in (range(0, 10), range(10, 20)):
            for i in phase:
                producers[i % 2].send(payload(i))
            time.sleep(PAUSE)
        messages = self.receive(east, 20)
        self.assertEqual(sorted(m.data() for m in messages), [payload(i) for i in range(20)])
        for message in messages:
            if index(message.data()) not in (10, 11):
                east.acknowledge(message)
        for p in (0, 1):
            self.wait_settled(self.west, topic=f"{self.topic}-partition-{p}")
        got = self.drain(self.subscribe(self.west), last=payload(19))
        self.assertEqual(sorted(got), [payload(i) for i in range(10, 20)])
