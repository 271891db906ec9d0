"""
The chaos harness (``pulsar_twisted.testing.chaos``, issue 11).

``CheckerTests`` and ``HistoryTests``: the checker on hand-made histories, no processes.
The nemesis's optional kinds on fakes (``PowerLossNemesisTests``, ``ZooKeeperNemesisTests``,
``ProxyNemesisTests``, ``RemoteNemesisTests``), the runner's proxy wiring (``ProxyRunWiringTests``)
and ``--replicate``'s set-up and check (``ReplicateWiringTests``), no processes either.
``ShortChaosRunTests``: a short seeded run on a real cluster (ZooKeeper, 3 bookies, 2 brokers, the
official client), bounded to about two minutes with start-up; skipped without ZooKeeper or the
official client. It fails while the cluster loses, duplicates or reorders acknowledged messages.
``ShortReplicatedChaosRunTests``: the same with ``--replicate`` (about 35 s): it also fails while
the remote copy misses, duplicates or reorders a message acknowledged on the cluster.
"""

import os
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.chaos import checker
from pulsar_twisted.testing.chaos.history import (EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED, Delivery,
                                                  History, Send, Stored, decode_payload,
                                                  encode_payload)


def _history(subscriptions=None, partitions=1, meta=None) -> History:
    return History(subscriptions=dict(subscriptions or {}), partitions=partitions,
                   meta=dict(meta or {}))


def _record_sleeps(nemesis, history, calls, faults):
    """The nemesis's sleeps, not slept: recorded (returned list) and in ``calls``; the run ends
    once ``faults`` faults are in ``history``."""
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        calls.append(("sleep",))
        return len(history.faults) >= faults
    nemesis._sleep = sleep
    return sleeps


def _acked(history, producer, seq, message_id, key=None, sent_at=0.0, answered_at=0.1):
    history.sends[(producer, seq)] = Send(producer, seq, key, sent_at, "acked", message_id,
                                          None, answered_at)


def _store(history, partition, producer, seq, message_id, key=None):
    history.storage.setdefault(partition, []).append(Stored(producer, seq, key, message_id))


def _deliver(history, subscription, consumer, producer, seq, partition=0, key=None):
    history.deliveries.append(Delivery(subscription, consumer, producer, seq, key, partition))


def _clean(n=3, subscriptions=None) -> History:
    """``n`` messages of producer "a" acked, stored in order at entries 0..n-1 of ledger 7."""
    history = _history(subscriptions)
    for seq in range(n):
        _acked(history, "a", seq, (7, seq, 0))
        _store(history, 0, "a", seq, (7, seq, 0))
    return history


class PayloadTests(SynchronousTestCase):

    def test_round_trip(self):
        """A payload carries producer, seq and key, padded to the size asked."""
        data = encode_payload("p1", 42, "k", size=64)
        self.assertEqual(len(data), 64)
        self.assertEqual(decode_payload(data), ("p1", 42, "k"))
        self.assertEqual(decode_payload(encode_payload("p1", 0, None)), ("p1", 0, None))

    def test_foreign_payload(self):
        """Something that is not a chaos payload is refused, not misread."""
        self.assertRaises(ValueError, decode_payload, b"hello")


class CheckerTests(SynchronousTestCase):

    def test_clean_history(self):
        """Everything acked is stored once, in order, and delivered in order: no violation."""
        history = _clean(3, {"s": FAILOVER})
        for seq in range(3):
            _deliver(history, "s", "c0", "a", seq)
        verdict = checker.check(history)
        self.assertTrue(verdict.ok, verdict.violations)
        self.assertEqual((verdict.sent, verdict.acked, verdict.stored_distinct), (3, 3, 3))
        self.assertIn("VERDICT: ok", checker.format_verdict(verdict))

    def test_lost(self):
        """An acked message absent from storage is lost; a -1:-1 receipt among them is counted."""
        history = _clean(2)
        _acked(history, "a", 2, (7, 2, 0))
        _acked(history, "a", 3, (-1, -1, 0))
        verdict = checker.check(history)
        self.assertEqual(verdict.lost, 2)
        self.assertEqual(verdict.lost_duplicate_receipts, 1)
        self.assertEqual(verdict.duplicate_receipts, 1)
        self.assertEqual(verdict.violations, {"lost": 2})
        self.assertEqual(sorted(e[:2] for e in verdict.examples["lost"]), [("a", 2), ("a", 3)])

    def test_failed_and_unacked_stored_are_not_lost(self):
        """A failed send promised nothing: missing or stored, it is no violation."""
        history = _clean(1)
        history.sends[("a", 1)] = Send("a", 1, None, 0.0, "failed", None, "Timeout", 1.0)
        history.sends[("a", 2)] = Send("a", 2, None, 0.0, "failed", None, "Timeout", 1.0)
        _store(history, 0, "a", 2, (7, 5, 0))
        verdict = checker.check(history)
        self.assertTrue(verdict.ok, verdict.violations)
        self.assertEqual(verdict.failed_by_reason, {"Timeout": 2})
        self.assertEqual(verdict.stored_unacked, 1)

    def test_unreadable_partition(self):
        """Acks on a partition that could not be read are unverifiable, and the partition being
        unreadable is itself a violation."""
        history = _clean(1)
        _acked(history, "a", 1, (9, 0, 1))
        history.unreadable[1] = "TimeoutError"
        verdict = checker.check(history)
        self.assertEqual((verdict.lost, verdict.unverifiable), (0, 1))
        self.assertEqual(verdict.violations, {"unreadable_partitions": 1})

    def test_stored_twice(self):
        """One (producer, seq) at two positions, even in different ledgers, is stored twice."""
        history = _clean(2)
        _store(history, 0, "a", 1, (8, 0, 0))
        _store(history, 0, "a", 1, (8, 1, 0))
        verdict = checker.check(history)
        self.assertEqual((verdict.stored_twice, verdict.extra_copies), (1, 2))
        self.assertEqual(verdict.storage_order_violations, 0, "a copy is not a reordering")
        self.assertEqual(verdict.violations, {"stored_twice": 1})

    def test_storage_order(self):
        """A producer's seq stored for the first time after a higher one of the same producer in
        the same partition is an order violation; other producers and partitions are apart."""
        history = _history(partitions=2)
        for seq, entry in ((0, 0), (2, 1), (1, 2), (3, 3)):
            _acked(history, "a", seq, (7, entry, 0))
            _store(history, 0, "a", seq, (7, entry, 0))
        _acked(history, "b", 0, (7, 4, 0))
        _store(history, 0, "b", 0, (7, 4, 0))          # b's first, after a's 3: fine
        _acked(history, "a", 4, (9, 0, 1))
        _store(history, 1, "a", 4, (9, 0, 1))
        verdict = checker.check(history)
        self.assertEqual(verdict.storage_order_violations, 1)
        self.assertEqual(verdict.examples["storage_order_violations"], [(0, "a", 1, "after", 2)])

    def test_consumer_order_by_subscription_type(self):
        """Out-of-order first deliveries break Exclusive, Failover and Key_Shared (per key), never
        Shared; redeliveries of seen seqs are allowed everywhere."""
        subscriptions = {"x": EXCLUSIVE, "f": FAILOVER, "sh": SHARED, "ks": KEY_SHARED}
        history = _clean(4, subscriptions)
        for subscription in ("x", "f", "sh"):
            for seq in (0, 2, 1, 3):
                _deliver(history, subscription, "c0", "a", seq)
        for seq in (0, 1, 0, 1, 2, 3):                  # a rewind: redeliveries only
            _deliver(history, "x", "c1", "a", seq)
        # Key_Shared: seqs 0, 2 under key k0 and 1, 3 under k1, interleaved: in order per key.
        for seq in (0, 1, 3, 2):
            _deliver(history, "ks", "c0", "a", seq, key=f"k{seq % 2}")
        verdict = checker.check(history)
        self.assertEqual(verdict.consumer_order_violations, {"x": 1, "f": 1, "sh": 0, "ks": 0})
        # Per subscription: everything c1 got, c0 had already had.
        self.assertEqual(verdict.redeliveries, {"x": 6, "f": 0, "sh": 0, "ks": 0})
        history.deliveries.append(Delivery("ks", "c0", "a", 1, "k0", 0))   # k0: 1 after 2
        self.assertEqual(checker.check(history).consumer_order_violations["ks"], 1)

    def test_consumer_order_per_partition_and_consumer(self):
        """Order holds per partition and per consumer: interleaving across them is no violation."""
        history = _clean(4, {"f": FAILOVER})
        _deliver(history, "f", "c0", "a", 3, partition=1)
        _deliver(history, "f", "c0", "a", 0, partition=0)
        _deliver(history, "f", "c1", "a", 1, partition=0)
        _deliver(history, "f", "c1", "a", 2, partition=0)
        self.assertEqual(checker.check(history).consumer_order_violations, {"f": 0})

    def test_undelivered_backlog(self):
        """Stored messages a subscription never received are its undelivered backlog; a Shared
        subscription's consumers count together."""
        history = _clean(3, {"sh": SHARED, "x": EXCLUSIVE})
        _deliver(history, "sh", "c0", "a", 0)
        _deliver(history, "sh", "c1", "a", 1)
        _deliver(history, "sh", "c1", "a", 2)
        _deliver(history, "x", "c0", "a", 0)
        verdict = checker.check(history)
        self.assertEqual(verdict.undelivered, {"sh": 0, "x": 2})
        self.assertEqual(verdict.violations, {"undelivered": 2})

    def test_unanswered(self):
        """A send with no callback by the end is a violation."""
        history = _clean(1)
        history.sends[("a", 1)] = Send("a", 1, None, 0.0)
        verdict = checker.check(history)
        self.assertEqual(verdict.violations, {"unanswered": 1})

    def test_receipt_mismatch(self):
        """An ack naming a position that holds another message is a violation."""
        history = _clean(2)
        history.sends[("a", 1)].message_id = (7, 0, 0)
        verdict = checker.check(history)
        self.assertEqual(verdict.receipt_mismatches, 1)
        self.assertEqual(verdict.lost, 0)

    def test_slow_after_heal(self):
        """After the heal, a send must be acked within LIVENESS seconds; before it, anything goes."""
        history = _history(meta={"healed_at": 100.0})
        _acked(history, "a", 0, (7, 0, 0), sent_at=50.0, answered_at=90.0)    # before the heal
        _acked(history, "a", 1, (7, 1, 0), sent_at=101.0, answered_at=102.0)
        _acked(history, "a", 2, (7, 2, 0), sent_at=101.0, answered_at=101.0 + checker.LIVENESS + 1)
        history.sends[("a", 3)] = Send("a", 3, None, 101.0, "failed", None, "Timeout", 131.0)
        for seq in range(4):
            _store(history, 0, "a", seq, (7, seq, 0))
        verdict = checker.check(history)
        self.assertEqual(verdict.violations, {"slow_after_heal": 2})

    def test_delivered_then_gone(self):
        """A message a consumer received but storage no longer holds is counted as evidence."""
        history = _clean(1, {"s": SHARED})
        _acked(history, "a", 1, (7, 1, 0))
        _deliver(history, "s", "c0", "a", 0)
        _deliver(history, "s", "c0", "a", 1)
        verdict = checker.check(history)
        self.assertEqual((verdict.delivered_then_gone, verdict.lost), (1, 1))


class ReadBackTests(SynchronousTestCase):

    def test_partition_left_without_time_is_unreadable(self):
        """A partition whose turn comes after the read-back's timeout is recorded as unreadable
        (its acks unverifiable), not left out of both the storage and the unreadable ones, which
        made the checker count every message acked on it as lost (chaos seed 78 with
        --max-entries-per-ledger 10: partitions 0 and 1, ~870 ledgers each, took the whole 90 s;
        the 11138 messages of partition 2 were counted LOST and delivered-then-gone)."""
        from pulsar_twisted.testing.chaos import workload

        class FakeTime:
            now = 0.0

            def monotonic(self):
                return self.now

            def sleep(self, seconds):
                self.now += seconds

        fake = FakeTime()

        def read_topic(client, topic, timeout):
            fake.now += 60.0        # each partition takes a minute
            return []

        self.patch(workload, "time", fake)
        self.patch(workload, "read_topic", read_topic)
        history = _history(partitions=3)
        workload.read_back(None, "t", 3, history, timeout=90.0)
        self.assertEqual(sorted(history.storage), [0, 1])
        self.assertEqual(sorted(history.unreadable), [2])


class HistoryTests(SynchronousTestCase):

    def test_outcome_once(self):
        """A send keeps its first answer; an answer for an unknown send is ignored."""
        history = History()
        history.record_send("a", 0, None)
        history.record_outcome("a", 0, True, (1, 2, 0))
        history.record_outcome("a", 0, False, reason="late")
        history.record_outcome("b", 9, True, (1, 3, 0))
        self.assertEqual(history.sends[("a", 0)].outcome, "acked")
        self.assertEqual(list(history.sends), [("a", 0)])

    def test_json_round_trip(self):
        """A history saved as JSON checks the same once loaded again."""
        history = _clean(3, {"f": FAILOVER})
        _store(history, 0, "a", 1, (8, 0, 0))
        _deliver(history, "f", "c0", "a", 2)
        _deliver(history, "f", "c0", "a", 1)
        history.unreadable[1] = "gone"
        path = os.path.join(tempfile.mkdtemp(), "h.json")
        history.dump(path)
        again = History.load(path)
        self.assertEqual(checker.check(again).to_json(), checker.check(history).to_json())
        self.assertEqual(again.sends[("a", 1)].message_id, (7, 1, 0))


class RelayTests(SynchronousTestCase):
    """The relays behind partitions, on real local sockets (no namespace needed)."""

    def test_gate_holds_bytes_both_ways_until_opened(self):
        """A closed gate passes no byte either way and keeps the connection up; opened, the held
        bytes arrive."""
        import socket
        from pulsar_twisted.testing.chaos import relay
        gate = relay.Gate()
        self.addCleanup(setattr, gate, "stopped", True)
        a, a_peer = socket.socketpair()
        b, b_peer = socket.socketpair()
        for sock in (a, a_peer, b, b_peer):
            self.addCleanup(sock.close)
        relay.join(a_peer, b_peer, gate)
        a.sendall(b"ping")
        self.assertEqual(b.recv(4), b"ping")
        gate.close()
        a.sendall(b"held")
        b.sendall(b"back")
        for sock in (a, b):
            sock.settimeout(0.3)
            self.assertRaises(socket.timeout, sock.recv, 4)
            sock.settimeout(5)
        gate.open()
        self.assertEqual(b.recv(4), b"held")
        self.assertEqual(a.recv(4), b"back")

    def test_serve_drops_when_target_refuses(self):
        """A relayed connection whose far side cannot be reached is closed at once (what the
        readiness probe of a namespaced daemon relies on)."""
        import os
        import socket
        from pulsar_twisted.testing.chaos import relay
        directory = tempfile.mkdtemp(dir="/tmp")
        path = os.path.join(directory, "x.sock")
        listener = relay.unix_listener(path)
        self.addCleanup(listener.close)

        def refuse():
            raise ConnectionRefusedError()
        relay.serve(listener, refuse)
        probe = relay.connect_unix(path)
        self.addCleanup(probe.close)
        probe.settimeout(5)
        self.assertEqual(probe.recv(1), b"")


_ECHO = ("import socket, sys\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(5)\n"
         "up = socket.create_connection(('127.0.0.1', int(sys.argv[2])))\n"
         "up.sendall(b'hello from the namespace'); up.close()\n"
         "while True:\n"
         "    c, _ = s.accept()\n"
         "    while True:\n"
         "        d = c.recv(100)\n"
         "        if not d: break\n"
         "        c.sendall(d)\n")


class IsolationTests(SynchronousTestCase):
    """A process in a network namespace of its own, reached only through the relays: inbound
    and outbound connections work, a cut stops them, a heal resumes them, cleanup removes the
    namespace. Needs root and ``ip netns``."""

    def test_cut_and_heal(self):
        import socket
        import subprocess
        import sys
        import time
        from pulsar_twisted.testing.chaos import netns
        from pulsar_twisted.testing.process import free_port
        why = netns.available()
        if why:
            raise self.skipTest(why)

        class Daemon:
            name = "echo"
            port = free_port("127.0.0.1")
            ready_port = port
        daemon = Daemon()
        upstream = socket.socket()
        upstream.bind(("127.0.0.1", 0))
        upstream.listen(1)
        self.addCleanup(upstream.close)
        isolation = netns.Isolation(daemon, [upstream.getsockname()[1]])
        self.addCleanup(isolation.cleanup)
        isolation.setup()
        self.assertFalse(isolation.accepting(), "ready before the daemon started")
        child = subprocess.Popen(list(daemon.command_prefix) + [
            sys.executable, "-c", _ECHO, str(daemon.port), str(upstream.getsockname()[1])])
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        upstream.settimeout(10)
        connection, _ = upstream.accept()           # outbound: the namespace reached the host
        self.assertEqual(connection.recv(100), b"hello from the namespace")
        connection.close()
        deadline = time.monotonic() + 10
        while not isolation.accepting() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(isolation.accepting())
        client = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
        self.addCleanup(client.close)
        client.sendall(b"one")
        self.assertEqual(client.recv(3), b"one")
        isolation.cut()
        client.sendall(b"two")
        client.settimeout(0.5)
        self.assertRaises(socket.timeout, client.recv, 3)
        isolation.heal()
        client.settimeout(5)
        self.assertEqual(client.recv(3), b"two")
        name = isolation.name
        child.kill()
        isolation.cleanup()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        self.assertNotIn(name, listed)


class PowerLossNemesisTests(SynchronousTestCase):
    """The optional ``powerloss-bookie`` fault on fakes: the disk dies inside a write (or is cut
    if the bookie writes nothing), the bookie is killed -9, the disk mounted again, the bookie
    started; without a lazyfs disk the kind is dropped. (The disk itself: tests/bookie/test_lazyfs.py;
    a real bookie through it: tests/bookie/test_power_loss.py.)"""

    def make(self, disk):
        from pulsar_twisted.testing.chaos.nemesis import Nemesis
        calls = []

        class Disk:
            process = None

            def arm(self, writes):
                calls.append(("arm", 1 <= writes <= 300))

            def wait_cut(self, timeout):
                calls.append(("wait_cut",))
                return None if disk == "idle" else dict(unsynced_bytes=5, volatile_names=0)

            def cut(self, dead=False):
                calls.append(("cut", dead))
                return dict(unsynced_bytes=0, volatile_names=0)

            def restart(self):
                calls.append(("restart",))

        class Bookie:
            name = "bookie0"
            registration = "/ledgers/available/b0"

            def __init__(self):
                self.disk = Disk() if disk else None

            def kill9(self):
                calls.append(("kill9",))

            def start(self):
                calls.append(("start",))

        class FakeCluster:
            bookies = [Bookie()]
            brokers = []

        nemesis = Nemesis(FakeCluster(), _history(), seed=3, kinds=("powerloss-bookie",), rest=(0, 0),
                          log=lambda _: None)
        nemesis._sleep = lambda seconds: False
        return nemesis, calls

    def test_power_loss_inside_a_write(self):
        nemesis, calls = self.make("busy")
        nemesis.run(0.0001)
        self.assertEqual(calls[:5], [("arm", True), ("wait_cut",), ("kill9",), ("restart",), ("start",)])
        self.assertEqual(nemesis.history.faults[0].kind, "powerloss-bookie")
        self.assertIn("dropped 5 unsynced bytes", nemesis.history.faults[0].note)

    def test_idle_bookie_is_cut_anyway(self):
        nemesis, calls = self.make("idle")
        nemesis.run(0.0001)
        self.assertEqual(calls[:4], [("arm", True), ("wait_cut",), ("cut", True), ("kill9",)])

    def test_kind_dropped_without_a_lazyfs_disk(self):
        nemesis, calls = self.make(None)
        self.assertEqual(nemesis.kinds, ())


class _FakeZooKeeper:
    """The ZooKeeperServer methods the nemesis calls, recording them; ``on_resume`` runs at the
    thaw (a test's stand-in for ZooKeeper expiring sessions)."""

    name = "zookeeper"
    tick_time = 2.0

    def __init__(self, calls, owned=True, on_resume=None):
        self.calls = calls
        self.owned = owned
        self.on_resume = on_resume
        self.paused = False
        self.up = True

    def kill9(self):
        self.calls.append(("zk-kill9",))
        self.up = self.paused = False

    def start(self):
        self.calls.append(("zk-start",))
        self.up = True

    def running(self):
        return self.up

    def pause(self):
        self.calls.append(("zk-pause",))
        self.paused = True

    def resume(self):
        if self.paused:
            self.calls.append(("zk-resume",))
            self.paused = False
            if self.on_resume is not None:
                self.on_resume()


class _FakeDaemon:
    isolation = None
    disk = None

    def __init__(self, name, calls):
        self.name = name
        self.registration = f"/registrations/{name}"
        self.calls = calls

    def kill9(self):
        self.calls.append(("kill9", self.name))

    def start(self):
        self.calls.append(("start", self.name))

    def running(self):
        return True

    def pause(self):
        self.calls.append(("pause", self.name))

    def resume(self):
        pass


class _FakeCluster:
    """Two bookies, two brokers and a ZooKeeper; ``sessions`` maps a registration to its session."""

    def __init__(self, zk):
        calls = zk.calls if zk is not None else []
        self.bookies = [_FakeDaemon("bookie0", calls), _FakeDaemon("bookie1", calls)]
        self.brokers = [_FakeDaemon("broker0", calls), _FakeDaemon("broker1", calls)]
        if zk is not None:
            self.zk_server = zk
        self.sessions = {p.registration: 100 + i
                         for i, p in enumerate(self.bookies + self.brokers)}

    def session_of(self, path):
        return self.sessions.get(path)

    def logs(self):
        return ""


class ZooKeeperNemesisTests(SynchronousTestCase):
    """The optional ``kill-zookeeper`` and ``pause-zookeeper`` faults on fakes: kill -9, held
    down 1-6 s, started again; frozen for the session timeout and 0.5-3 s more, thawed, the note
    naming whose sessions moved; only on a ZooKeeper the harness owns; thawed and restarted by
    ``heal()``. (The server methods themselves, on a real ZooKeeper: ZooKeeperServerFaultTests.)"""

    def make(self, seed=5, kinds=("kill-zookeeper", "pause-zookeeper"), owned=True, faults=1,
             expire=True):
        from pulsar_twisted.testing.chaos.nemesis import Nemesis
        calls = []
        cluster = None

        def expire_sessions():
            if expire:
                for path in list(cluster.sessions):
                    cluster.sessions[path] += 1000
        zk = _FakeZooKeeper(calls, owned=owned, on_resume=expire_sessions)
        cluster = _FakeCluster(zk)
        history = _history()
        nemesis = Nemesis(cluster, history, seed=seed, kinds=kinds, session_timeout=4.0,
                          rest=(0, 0), log=lambda _: None)
        sleeps = _record_sleeps(nemesis, history, calls, faults)
        nemesis._settle = lambda seconds: None
        return nemesis, calls, sleeps

    def test_kill_zookeeper(self):
        """kill -9, a hold of 1-6 s, started again on its data; recorded in the History."""
        nemesis, calls, sleeps = self.make(kinds=("kill-zookeeper",))
        nemesis.run(1000)
        self.assertEqual(calls, [("sleep",), ("zk-kill9",), ("sleep",), ("zk-start",), ("sleep",)])
        self.assertTrue(1.0 <= sleeps[1] <= 6.0, sleeps)
        fault = nemesis.history.faults[0]
        self.assertEqual((fault.kind, fault.target), ("kill-zookeeper", "zookeeper"))
        self.assertIn("down", fault.note)
        self.assertIsNotNone(fault.ended)

    def test_pause_zookeeper(self):
        """SIGSTOP for the session timeout, a tick and 0.5-3 s more, then SIGCONT; the note names
        the daemons whose registration came back under a new session."""
        nemesis, calls, sleeps = self.make(kinds=("pause-zookeeper",))
        nemesis.run(1000)
        self.assertEqual(calls, [("sleep",), ("zk-pause",), ("sleep",), ("zk-resume",), ("sleep",)])
        self.assertTrue(4.0 + 2.0 + 0.5 <= sleeps[1] <= 4.0 + 2.0 + 3.0, sleeps)
        fault = nemesis.history.faults[0]
        self.assertEqual((fault.kind, fault.target), ("pause-zookeeper", "zookeeper"))
        self.assertIn("new sessions: bookie0, bookie1, broker0, broker1; old sessions: none; "
                      "unregistered: none",
                      fault.note)

    def test_pause_zookeeper_sessions_kept(self):
        """Registrations still under their old sessions after the thaw, or under none, are named
        as such (after waiting four session timeouts for them to move)."""
        from pulsar_twisted.testing.chaos import nemesis as module
        waited = []
        self.patch(module, "wait_for", lambda predicate, timeout, what, interval=0.1:
                   waited.append(timeout) or (_ for _ in ()).throw(module.ClusterError(what)))
        nemesis, calls, sleeps = self.make(kinds=("pause-zookeeper",), expire=False)
        del nemesis.cluster.sessions["/registrations/broker1"]
        nemesis.run(1000)
        self.assertEqual(waited, [16.0])
        self.assertIn("new sessions: none; old sessions: bookie0, bookie1, broker0; "
                      "unregistered: broker1", nemesis.history.faults[0].note)

    def test_schedule_by_seed(self):
        """Kinds, targets and holds depend only on the seed, ZooKeeper kinds mixed with others."""
        kinds = ("kill-zookeeper", "pause-zookeeper", "kill-bookie", "pause-broker")

        def schedule(seed):
            nemesis, calls, sleeps = self.make(seed=seed, kinds=kinds, faults=8)
            nemesis._wait_expired = lambda target, old: True
            nemesis.run(1000)
            return [(f.kind, f.target) for f in nemesis.history.faults], sleeps
        self.assertEqual(schedule(11), schedule(11))
        self.assertNotEqual(schedule(11), schedule(12))
        drawn = {kind for seed in range(20) for kind, _ in schedule(seed)[0]}
        self.assertEqual(drawn, set(kinds))

    def test_dropped_without_an_owned_zookeeper(self):
        """An external ZooKeeper (PULSAR_TEST_ZK, --zk), or none known, drops both kinds and is
        never touched, not even by heal(); they are not in the default kinds."""
        from pulsar_twisted.testing.chaos.nemesis import KINDS, PARTITION_KINDS, ZK_KINDS, Nemesis
        nemesis, calls, _ = self.make(kinds=("kill-zookeeper", "pause-zookeeper", "kill-bookie"),
                                      owned=False)
        self.assertEqual(nemesis.kinds, ("kill-bookie",))
        self.assertIsNone(nemesis.zookeeper)
        nemesis.cluster.zk_server.paused = True
        nemesis.cluster.zk_server.up = False
        nemesis.heal()
        self.assertEqual([c for c in calls if c[0].startswith("zk-")], [])
        bare = Nemesis(_FakeCluster(None), _history(), seed=1, kinds=ZK_KINDS, log=lambda _: None)
        self.assertEqual(bare.kinds, ())
        self.assertFalse(set(ZK_KINDS) & set(KINDS + PARTITION_KINDS))

    def test_heal_thaws_zookeeper(self):
        """heal() thaws a frozen ZooKeeper before the daemons are looked at."""
        nemesis, calls, _ = self.make()
        nemesis.zookeeper.paused = True
        nemesis.heal()
        self.assertEqual(calls[0], ("zk-resume",))
        self.assertFalse(nemesis.zookeeper.paused)

    def test_heal_waits_out_restored_sessions(self):
        """After a ZooKeeper fault, heal() looks at the registrations only once a session timeout
        and a tick have passed since ZooKeeper came back: until then a restored session whose
        daemon never reconnected still holds its registration."""
        nemesis, calls, _ = self.make(kinds=("kill-zookeeper",))
        nemesis.run(1000)
        settled = []
        nemesis._settle = settled.append
        nemesis.heal()
        self.assertEqual(len(settled), 1)
        self.assertTrue(4.0 + 2.0 < settled[0] <= 4.0 + 2.0 + 0.5, settled)
        quiet, _, _ = self.make()
        quiet._settle = settled.append
        quiet.heal()
        self.assertEqual(len(settled), 1, "no ZooKeeper fault, no wait")

    def test_heal_restarts_zookeeper(self):
        """heal() starts a ZooKeeper that is down again."""
        nemesis, calls, _ = self.make()
        nemesis.zookeeper.up = False
        nemesis.heal()
        self.assertEqual(calls, [("zk-start",)])

    def test_failed_fault_heals_zookeeper(self):
        """A ZooKeeper fault that fails half-way (the restart refused) is recorded as an error
        and leaves the server thawed, its restart tried again."""
        from pulsar_twisted.testing.cluster import ClusterError
        nemesis, calls, _ = self.make(kinds=("kill-zookeeper",))
        zk = nemesis.zookeeper
        attempts = []

        def refuse_once():
            attempts.append(1)
            if len(attempts) == 1:
                raise ClusterError("port in use")
            zk.up = True
        zk.start = refuse_once
        nemesis.run(1000)
        self.assertEqual(len(attempts), 2)
        self.assertTrue(zk.up)
        self.assertIn("error: ClusterError: port in use", nemesis.history.faults[0].note)
        self.assertEqual(len(nemesis.errors), 1)


class ProxyNemesisTests(SynchronousTestCase):
    """The optional ``kill-proxy`` fault on fakes: kill -9, held down 1-6 s, started again; only
    when the cluster has a proxy; started again by ``heal()``."""

    def make(self, seed=5, kinds=("kill-proxy",), proxy=True, faults=1):
        from pulsar_twisted.testing.chaos.nemesis import Nemesis
        cluster = _FakeCluster(None)
        calls = cluster.bookies[0].calls
        if proxy:
            cluster.proxies = [_FakeDaemon("proxy0", calls)]
        history = _history()
        nemesis = Nemesis(cluster, history, seed=seed, kinds=kinds, rest=(0, 0), log=lambda _: None)
        sleeps = _record_sleeps(nemesis, history, calls, faults)
        return nemesis, calls, sleeps

    def test_kill_proxy(self):
        """kill -9 the proxy, a hold of 1-6 s, started again; recorded in the History."""
        nemesis, calls, sleeps = self.make()
        nemesis.run(1000)
        self.assertEqual(calls, [("sleep",), ("kill9", "proxy0"), ("sleep",), ("start", "proxy0"),
                                 ("sleep",)])
        self.assertTrue(1.0 <= sleeps[1] <= 6.0, sleeps)
        fault = nemesis.history.faults[0]
        self.assertEqual((fault.kind, fault.target), ("kill-proxy", "proxy0"))
        self.assertIsNotNone(fault.ended)

    def test_dropped_without_a_proxy(self):
        """Without a proxy the kind is dropped (the others kept); it is not a default kind."""
        from pulsar_twisted.testing.chaos.nemesis import KINDS, PARTITION_KINDS, PROXY_KINDS
        nemesis, _, _ = self.make(kinds=("kill-proxy", "kill-broker"), proxy=False)
        self.assertEqual(nemesis.kinds, ("kill-broker",))
        self.assertFalse(set(PROXY_KINDS) & set(KINDS + PARTITION_KINDS))

    def test_schedule_mixes_proxy_and_broker_kills(self):
        """The seed draws the proxy among the other kinds' targets; brokers stay broker targets."""
        nemesis, _, _ = self.make(seed=2, kinds=("kill-proxy", "kill-broker"), faults=12)
        nemesis.run(1000)
        drawn = {(f.kind, f.target[:-1]) for f in nemesis.history.faults}
        self.assertEqual(drawn, {("kill-proxy", "proxy"), ("kill-broker", "broker")})

    def test_heal_starts_the_proxy(self):
        """heal() starts a proxy that is down (a fault cut short by stop())."""
        nemesis, calls, _ = self.make()
        proxy = nemesis.cluster.proxies[0]
        proxy.running = lambda: False
        nemesis.heal()
        self.assertEqual(calls, [("start", "proxy0")])


class ProxyRunWiringTests(SynchronousTestCase):
    """``ChaosConfig.proxy`` in the runner, without processes: the cluster gets one proxy
    discovering the brokers from its metadata store, the clients its service URL, and the run's
    cleanup and kept logs take it with the other daemons."""

    def make(self, proxy):
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, make_cluster
        from pulsar_twisted.testing.cluster import ZooKeeperServer
        cluster = make_cluster(ChaosConfig(proxy=proxy, session_timeout_ms=3000),
                               ZooKeeperServer("127.0.0.1:2181"))
        self.addCleanup(cluster.cleanup)
        return cluster

    def test_clients_through_the_proxy(self):
        from pulsar_twisted.testing.chaos.runner import _daemons, client_service_url
        cluster = self.make(proxy=True)
        [proxy] = cluster.proxies
        self.assertEqual(proxy.settings["metadataStoreUrl"], cluster.metadata_url)
        self.assertEqual(proxy.settings["zooKeeperSessionTimeoutMillis"], 3000)
        self.assertEqual(client_service_url(cluster), proxy.service_url)
        self.assertEqual(_daemons(cluster)[0], proxy)

    def test_clients_to_the_brokers_without(self):
        from pulsar_twisted.testing.chaos.runner import client_service_url
        cluster = self.make(proxy=False)
        self.assertEqual(cluster.proxies, [])
        self.assertEqual(client_service_url(cluster), "pulsar://" + ",".join(
            f"127.0.0.1:{b.port}" for b in cluster.brokers))

    def test_kept_logs_include_the_proxy(self):
        from pulsar_twisted.testing.chaos.runner import _copy_logs
        cluster = self.make(proxy=True)
        with open(cluster.proxies[0].log_path, "w") as f:
            f.write("proxy log\n")
        target = tempfile.mkdtemp()
        _copy_logs(cluster, target)
        self.assertIn("proxy0.log", os.listdir(target))


class RemoteNemesisTests(SynchronousTestCase):
    """The optional ``kill-remote`` and ``pause-remote`` faults of a ``--replicate`` run on fakes:
    the remote standalone killed -9 and started again, or frozen for a session timeout and the
    hold; only when the run has a remote; thawed and started again by ``heal()``."""

    def make(self, kinds=("kill-remote",), remote=True, seed=5, faults=1):
        from pulsar_twisted.testing.chaos.nemesis import Nemesis
        cluster = _FakeCluster(None)
        cluster.proxies = []
        calls = cluster.bookies[0].calls
        history = _history()
        nemesis = Nemesis(cluster, history, seed=seed, kinds=kinds, rest=(0, 0),
                          log=lambda _: None, session_timeout=4.0,
                          remote=_FakeDaemon("remote", calls) if remote else None)
        sleeps = _record_sleeps(nemesis, history, calls, faults)
        return nemesis, calls, sleeps

    def test_kill_remote(self):
        """kill -9 the remote, a hold of 1-6 s, started again; recorded in the History."""
        nemesis, calls, sleeps = self.make()
        nemesis.run(1000)
        self.assertEqual(calls, [("sleep",), ("kill9", "remote"), ("sleep",), ("start", "remote"),
                                 ("sleep",)])
        self.assertTrue(1.0 <= sleeps[1] <= 6.0, sleeps)
        self.assertEqual(nemesis.history.faults[0].kind, "kill-remote")

    def test_pause_remote(self):
        """SIGSTOP for the session timeout and a hold of 0.5-3 s, then SIGCONT."""
        nemesis, calls, sleeps = self.make(kinds=("pause-remote",))
        resumed = []
        nemesis.remotes[0].resume = lambda: resumed.append(True)
        nemesis.run(1000)
        self.assertEqual(calls[:2], [("sleep",), ("pause", "remote")])
        self.assertTrue(4.5 <= sleeps[1] <= 7.0, sleeps)
        self.assertEqual(resumed, [True])
        self.assertIn("stopped", nemesis.history.faults[0].note)

    def test_dropped_without_a_remote(self):
        """Without a remote the kinds are dropped (the others kept); they are not default kinds."""
        from pulsar_twisted.testing.chaos.nemesis import KINDS, PARTITION_KINDS, REMOTE_KINDS
        nemesis, _, _ = self.make(kinds=("kill-remote", "pause-remote", "kill-broker"),
                                  remote=False)
        self.assertEqual(nemesis.kinds, ("kill-broker",))
        self.assertFalse(set(REMOTE_KINDS) & set(KINDS + PARTITION_KINDS))

    def test_heal_starts_the_remote(self):
        """heal() starts a remote that is down (a fault cut short by stop())."""
        nemesis, calls, _ = self.make()
        nemesis.remotes[0].running = lambda: False
        nemesis.heal()
        self.assertEqual(calls, [("start", "remote")])


class _FakeAdmin:
    """``AdminClient``'s put/post/get on one base URL, recording ``(base, method, path, body)``
    in ``calls``; ``answers`` maps (method, path) to a value returned or an exception raised
    (a list: one per call, the last repeated)."""

    def __init__(self, base, calls, answers, timeout=None):
        self.base, self.calls, self.answers = base, calls, answers

    def _call(self, method, path, body=None):
        self.calls.append((self.base, method, path, body))
        answer = self.answers.get((self.base, method, path))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get(self, path, **kw):
        return self._call("GET", path)

    def put(self, path, body=None, **kw):
        return self._call("PUT", path, body)

    def post(self, path, body=None, **kw):
        return self._call("POST", path, body)


class _Site:
    def __init__(self, name, port):
        self.name, self.host, self.port = name, "127.0.0.1", port
        self.web_service_url = f"http://127.0.0.1:{port + 1}"
        self.service_url = f"pulsar://127.0.0.1:{port}"


class _TwoBrokers:
    def __init__(self):
        self.brokers = [_Site("broker0", 7000), _Site("broker1", 7100)]
        for broker in self.brokers:
            broker.settings = {"clusterName": "test"}


class ReplicateWiringTests(SynchronousTestCase):
    """``--replicate`` (``chaos.replica``) without processes: the set-up's admin calls on both
    clusters, the partitioned topic checked (and made) on the remote, the wait for the
    replicators' backlogs, the remote copy's check, and the runner's remote standalone."""

    def admin_factory(self, answers=None):
        self.calls = []
        answers = {} if answers is None else answers
        return lambda base, timeout=None: _FakeAdmin(base, self.calls, answers)

    def test_setup(self):
        """Both clusters' data on both (409 -> update), the tenant allowed on both, the namespace
        made on the remote with dedup and retention, replication [local, remote] on both."""
        from pulsar_twisted.cli.admin import HttpError
        from pulsar_twisted.testing.chaos import replica
        cluster, remote = _TwoBrokers(), _Site("remote", 9000)
        local_web, remote_web = cluster.brokers[0].web_service_url, remote.web_service_url
        conflict = HttpError(409, "exists")
        answers = {(local_web, "PUT", "/admin/v2/clusters/test"): conflict,
                   (remote_web, "PUT", "/admin/v2/clusters/remote"): conflict,
                   (local_web, "PUT", "/admin/v2/tenants/public"): conflict,
                   (remote_web, "PUT", "/admin/v2/tenants/public"): conflict,
                   (remote_web, "PUT", "/admin/v2/namespaces/public/default"): conflict}
        replica.setup(cluster, remote, "public/default", admin=self.admin_factory(answers))
        test_data = {"serviceUrl": local_web,
                     "brokerServiceUrl": "pulsar://127.0.0.1:7000,127.0.0.1:7100"}
        remote_data = {"serviceUrl": remote_web, "brokerServiceUrl": remote.service_url}
        tenant = {"adminRoles": [], "allowedClusters": ["test", "remote"]}
        for base in (local_web, remote_web):
            mine = [c[1:] for c in self.calls if c[0] == base]
            self.assertIn(("POST", "/admin/v2/clusters/test", test_data) if base == local_web
                          else ("PUT", "/admin/v2/clusters/test", test_data), mine)
            self.assertIn(("POST", "/admin/v2/clusters/remote", remote_data) if base == remote_web
                          else ("PUT", "/admin/v2/clusters/remote", remote_data), mine)
            self.assertIn(("POST", "/admin/v2/tenants/public", tenant), mine)
            self.assertEqual(mine[-1], ("POST", "/admin/v2/namespaces/public/default/replication",
                                        ["test", "remote"]))
        remote_calls = [c[1:] for c in self.calls if c[0] == remote_web]
        self.assertIn(("POST", "/admin/v2/namespaces/public/default/deduplication", True),
                      remote_calls)
        self.assertIn(("POST", "/admin/v2/namespaces/public/default/retention",
                       {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}), remote_calls)

    def test_partitioned_topic_made_by_the_broker(self):
        """The remote shows the partitions the cluster's broker made there: nothing created."""
        from pulsar_twisted.testing.chaos import replica
        remote = _Site("remote", 9000)
        path = "/admin/v2/persistent/public/default/t/partitions"
        admin = self.admin_factory({(remote.web_service_url, "GET", path):
                                    [{"partitions": 0}, {"partitions": 3}]})
        note = replica.ensure_partitioned(remote, "persistent://public/default/t", 3, admin=admin,
                                          sleep=lambda s: None)
        self.assertEqual([c[1] for c in self.calls], ["GET", "GET"])
        self.assertIn("by the cluster's broker", note)

    def test_partitioned_topic_made_by_the_harness(self):
        """The broker never made it there: the harness makes it, and says so."""
        from pulsar_twisted.testing.chaos import replica
        remote = _Site("remote", 9000)
        path = "/admin/v2/persistent/public/default/t/partitions"
        now = [0.0]

        def sleep(seconds):
            now[0] += seconds
        admin = self.admin_factory({(remote.web_service_url, "GET", path): {"partitions": 0}})
        note = replica.ensure_partitioned(remote, "persistent://public/default/t", 3, timeout=2,
                                          admin=admin, sleep=sleep, monotonic=lambda: now[0])
        self.assertEqual(self.calls[-1], (remote.web_service_url, "PUT", path, 3))
        self.assertIn("NOT created", note)

    def test_wait_replicated(self):
        """Each partition's backlog asked of the brokers in turn until one answers (the other
        has no stats for it); drained once every backlog is 0."""
        from pulsar_twisted.testing.chaos import replica
        stats = "/admin/v2/persistent/public/default/t-partition-0/stats"
        internal = "/admin/v2/persistent/public/default/t-partition-0/internalStats"
        answers = {("a", "GET", stats): {}, ("a", "GET", internal): {},
                   ("b", "GET", stats): [{"replication": {"remote": {"replicationBacklog": 7}}},
                                         {"replication": {"remote": {"replicationBacklog": 0}}}]}
        admins = [_FakeAdmin(base, [], answers) for base in ("a", "b")]
        slept = []
        status, figures = replica.wait_replicated(
            admins, ["persistent://public/default/t-partition-0"], "remote", 60,
            sleep=slept.append, monotonic=lambda: 0.0)
        self.assertEqual((status, figures, len(slept)),
                         ("drained", {"persistent://public/default/t-partition-0": 0}, 1))

    def test_wait_replicated_times_out(self):
        """A backlog that stays: timed out, with the last figures."""
        from pulsar_twisted.testing.chaos import replica
        stats = "/admin/v2/persistent/public/default/t-partition-0/stats"
        answers = {("a", "GET", stats): {"replication": {"remote": {"replicationBacklog": 4}}}}
        now = [0.0]

        def sleep(seconds):
            now[0] += seconds
        status, figures = replica.wait_replicated(
            [_FakeAdmin("a", [], answers)], ["persistent://public/default/t-partition-0"],
            "remote", 5, sleep=sleep, monotonic=lambda: now[0])
        self.assertEqual((status, list(figures.values())), ("timed out", [4]))

    def test_check_copy(self):
        """The remote copy against the cluster's acked sends and storage: a message missing
        there is lost (and unreplicated), one stored twice and one out of order are counted, a
        failed send stored on the cluster and missing remotely is unreplicated only."""
        from pulsar_twisted.testing.chaos import replica
        history = _history(partitions=2)
        for seq in range(5):
            _acked(history, "p0", seq, (1, seq, 0))
            _store(history, 0, "p0", seq, (1, seq, 0))
        history.record_send("p1", 0, None)
        history.record_outcome("p1", 0, False, reason="Timeout")
        _store(history, 1, "p1", 0, (2, 0, 1))
        stored = _history(partitions=2)
        for seq in (0, 2, 1, 2, 3):                 # 4 missing, 2 twice, 1 after 2
            _store(stored, 0, "p0", seq, (9, len(stored.storage.get(0, [])), 0))
        stored.storage.setdefault(1, [])
        verdict = replica.check_copy(history, stored, "test", "remote", ["p0", "p1"])
        v = verdict.replicated["test->remote"]
        self.assertEqual((v.sent, v.lost, v.stored_twice, v.storage_order_violations),
                         (5, 1, 1, 1))
        self.assertEqual(verdict.unreplicated["test->remote"], 2)
        self.assertFalse(verdict.ok)

    def test_check_copy_clean(self):
        """An exact copy is clean."""
        from pulsar_twisted.testing.chaos import replica
        history = _history(partitions=1)
        for seq in range(3):
            _acked(history, "p0", seq, (1, seq, 0))
            _store(history, 0, "p0", seq, (1, seq, 0))
        stored = _history(partitions=1)
        for seq in range(3):
            _store(stored, 0, "p0", seq, (5, seq, 0))
        verdict = replica.check_copy(history, stored, "test", "remote", ["p0"])
        self.assertTrue(verdict.ok, verdict.violations)
        self.assertEqual(verdict.crossed, {"test->remote": 3})

    def test_runner_remote(self):
        """With ``replicate`` the runner has a remote standalone named by cluster, its ledgers as
        small as the cluster's; its log is kept as remote-*.log; none without."""
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, _copy_logs, make_cluster, make_remote
        from pulsar_twisted.testing.cluster import ZooKeeperServer
        self.assertIsNone(make_remote(ChaosConfig()))
        remote = make_remote(ChaosConfig(replicate=True, max_entries_per_ledger=50))
        self.addCleanup(remote.cleanup)
        with open(remote.config_path) as f:
            text = f.read()
        for line in ("clusterName=remote", "managedLedgerMaxEntriesPerLedger=50",
                     "brokerDeduplicationEnabled=true", "defaultRetentionTimeInMinutes=-1"):
            self.assertIn(line, text.splitlines())
        self.assertEqual(remote.name, "remote")
        with open(remote.log_path, "w") as f:
            f.write("remote log\n")
        cluster = make_cluster(ChaosConfig(), ZooKeeperServer("127.0.0.1:2181"))
        self.addCleanup(cluster.cleanup)
        target = tempfile.mkdtemp()
        _copy_logs(cluster, target, remote)
        self.assertIn("remote-standalone.log", os.listdir(target))

    def test_table(self):
        """The script's table lines up the remote copy's figures beside the cluster's."""
        import importlib.util
        import json
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        spec = importlib.util.spec_from_file_location(
            "chaos_script", os.path.join(root, "scripts", "chaos.py"))
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        path = os.path.join(tempfile.mkdtemp(), "v.json")
        verdict = checker.check(_clean()).to_json()
        remote = checker.check(_clean()).to_json()
        remote["lost"] = 2
        with open(path, "w") as f:
            json.dump({"meta": {"seed": 3, "quorum": [3, 3, 2]}, "verdict": verdict, "faults": [],
                       "replication": {"verdict": remote, "unreplicated": 1}}, f)
        line = script.table([path]).splitlines()[1].split()
        self.assertEqual(line[-5:-1], ["2", "0", "0", "1"])


class ZooKeeperServerFaultTests(SynchronousTestCase):
    """ZooKeeperServer's kill -9, start again, pause and resume on a real private server: a
    session outlives a short kill (restored from the log), not a freeze past its timeout; an
    external server refuses them. About 15 s; skipped without ZooKeeper."""

    def setUp(self):
        from pulsar_twisted.testing.cluster import ZooKeeperServer, ZooKeeperUnavailable
        try:
            import kazoo  # noqa: F401
            self.server = ZooKeeperServer.launch()
        except (ImportError, ZooKeeperUnavailable) as e:
            raise self.skipTest(str(e))
        self.addCleanup(self.server.stop)

    def client(self):
        import logging
        from kazoo.client import KazooClient
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        client = KazooClient(hosts=self.server.hosts, timeout=4.0)
        client.start(timeout=15)
        self.addCleanup(client.close)
        self.addCleanup(client.stop)
        return client

    def test_kill_start_pause_resume(self):
        """A session outlives kill -9 and start again; a freeze past its timeout expires it."""
        import time
        from kazoo.exceptions import NoNodeError
        from pulsar_twisted.testing.cluster import wait_for
        client = self.client()
        client.create("/e", b"x", ephemeral=True)
        session = client.client_id[0]
        self.server.kill9()
        self.assertFalse(self.server.running())
        self.server.start()
        self.assertTrue(self.server.running())
        # The same session, reconnected: the ephemeral node is still its own.
        wait_for(lambda: client.connected, 15, "the client to reconnect")
        self.assertEqual(client.exists("/e").ephemeralOwner, session)
        self.server.pause()
        self.assertTrue(self.server.paused)
        time.sleep(4.0 + self.server.tick_time + 1.0)   # expiry comes up to a tick late
        self.server.resume()
        self.assertFalse(self.server.paused)
        other = self.client()

        def gone():
            try:
                other.get("/e")
            except NoNodeError:
                return True
            return False
        wait_for(gone, 15, "the frozen-out session's node to vanish")

    def test_external_server_refuses(self):
        """A ZooKeeper the harness did not start is never killed or paused."""
        from pulsar_twisted.testing.cluster import ClusterError, ZooKeeperServer
        external = ZooKeeperServer(self.server.hosts)
        self.assertFalse(external.owned)
        self.assertRaises(ClusterError, external.kill9)
        self.assertRaises(ClusterError, external.pause)
        self.assertRaises(ClusterError, external.start)
        self.assertTrue(self.server.running())


class _RealClusterRun(SynchronousTestCase):
    """Skipped without the official client or a ZooKeeper (``self.zk``, the shared one)."""

    def setUp(self):
        from tests.cluster.test_processes import pulsar
        if pulsar is None:
            raise self.skipTest("the official pulsar-client package is not installed")
        from pulsar_twisted.testing.cluster import ZooKeeperServer, ZooKeeperUnavailable
        try:
            self.zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))


class ShortChaosRunTests(_RealClusterRun):
    """A short seeded chaos run on real processes: every acknowledged message is stored once, in
    order, and delivered; every send is answered (issue 11)."""

    def test_short_run(self):
        """Seed 49, E/Qw/Qa 3/3/2, 35 s of faults (as root: SIGSTOP of a broker, kill -9 of a
        bookie and of a broker, a bookie partitioned; without network namespaces the seed draws
        from kill -9 and SIGSTOP only), then heal and drain: the verdict is clean. About 60-100 s
        with start-up."""
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, run
        lines = []
        config = ChaosConfig(seed=49, duration=35.0, quorum=(3, 3, 2), warmup=2.0, after_heal=4.0,
                             send_timeout_ms=15000, settle=20.0, drain_idle=8.0, drain_timeout=30.0,
                             zk_hosts=self.zk.hosts, log=lines.append)
        history, verdict = run(config)
        print("\n  " + "\n  ".join(lines + checker.format_verdict(verdict).splitlines()))
        # The instrument did its job before the verdict is looked at.
        self.assertGreaterEqual(len(history.faults), 3, "the nemesis injected too few faults")
        self.assertGreater(verdict.acked, 1000)
        self.assertEqual(history.meta["nemesis_errors"], [])
        self.assertTrue(verdict.ok, f"violations: {verdict.violations}")


class ShortReplicatedChaosRunTests(_RealClusterRun):
    """A short seeded run with ``--replicate``: the cluster's namespace geo-replicated to a
    standalone while brokers are killed and paused past their session; every message acknowledged
    on the cluster is on the remote, once, in order per producer."""

    def test_short_replicated_run(self):
        """Seed 1, 15 s of kill -9 and SIGSTOP of brokers, then heal, drain, and the remote copy
        read back: both verdicts clean. About 35 s with start-up."""
        from pulsar_twisted.testing.chaos.replica import format_replication
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, run
        lines = []
        config = ChaosConfig(seed=1, duration=15.0, kinds=("kill-broker", "pause-broker"),
                             warmup=2.0, after_heal=4.0, send_timeout_ms=15000, settle=20.0,
                             drain_idle=8.0, drain_timeout=30.0, replicate=True,
                             replication_timeout=30.0, zk_hosts=self.zk.hosts, log=lines.append)
        history, verdict = run(config)
        replication = history.meta["replication"]
        print("\n  " + "\n  ".join(lines + checker.format_verdict(verdict).splitlines()
                                   + format_replication(replication).splitlines()))
        self.assertGreaterEqual(len(history.faults), 2, "the nemesis injected too few faults")
        self.assertGreater(verdict.acked, 1000)
        self.assertTrue(verdict.ok, f"violations: {verdict.violations}")
        self.assertEqual(replication["verdict"]["stored_distinct"], verdict.acked)
        self.assertTrue(replication["ok"], f"remote violations: {replication['violations']}")
