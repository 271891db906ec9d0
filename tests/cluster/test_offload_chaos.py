"""
``--offload`` of the chaos harness (``pulsar_twisted.testing.chaos.tiered``): tiered storage under
the nemesis.

Without processes: ``OffloadNemesisTests`` (``pause-s3`` on fakes), ``OffloadFiguresTests`` (the
waits and figures of ``tiered`` on fake admin clients, a fake ZooKeeper and key sets),
``OffloadCheckerTests`` (the checker's offload figures on hand-made histories),
``OffloadWiringTests`` (the brokers' keys, the script's option and fault kind).
``ShortOffloadChaosRunTests``: a short seeded run on a real cluster offloading to moto (about
40 s with start-up), skipped without ZooKeeper, the official client or moto. It fails while the
cluster loses, duplicates or reorders acknowledged messages with ledgers read from S3 alone, and
when nothing was offloaded or read from S3 alone.
"""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.mledger.formats import OffloadContext, encode_ledger_info
from pulsar_twisted.mledger.offload.format import data_key, index_key
from pulsar_twisted.testing.chaos import checker, tiered
from tests.cluster.test_chaos import (_FakeAdmin, _FakeCluster, _acked, _history,
                                      _record_sleeps, _store)

TOPIC = "persistent://public/default/chaos-t"


class _FakeS3:
    """The S3Server methods the nemesis calls, recording them."""

    name = "s3"

    def __init__(self, calls):
        self.calls = calls
        self.paused = False

    def pause(self):
        self.calls.append(("s3-pause",))
        self.paused = True

    def resume(self):
        self.calls.append(("s3-resume",))
        self.paused = False

    def start(self):                      # never called: a restarted moto is empty
        self.calls.append(("s3-start",))

    def kill9(self):
        self.calls.append(("s3-kill9",))


class OffloadNemesisTests(SynchronousTestCase):
    """``pause-s3``: SIGSTOP for a session timeout and 0.5-3 s, then SIGCONT; only with an S3
    server; ``heal()`` thaws it and never starts it again (its objects live in its memory)."""

    def make(self, kinds=("pause-s3",), s3=True, seed=5, faults=1):
        from pulsar_twisted.testing.chaos.nemesis import Nemesis
        cluster = _FakeCluster(None)
        cluster.proxies = []
        calls = cluster.bookies[0].calls
        history = _history()
        nemesis = Nemesis(cluster, history, seed=seed, kinds=kinds, rest=(0, 0),
                          log=lambda _: None, session_timeout=4.0,
                          s3=_FakeS3(calls) if s3 else None)
        sleeps = _record_sleeps(nemesis, history, calls, faults)
        return nemesis, calls, sleeps

    def test_pause_s3(self):
        """Frozen for the session timeout and a hold of 0.5-3 s, thawed; in the History."""
        nemesis, calls, sleeps = self.make()
        nemesis.run(1000)
        self.assertEqual(calls, [("sleep",), ("s3-pause",), ("sleep",), ("s3-resume",),
                                 ("sleep",)])
        self.assertTrue(4.5 <= sleeps[1] <= 7.0, sleeps)
        fault = nemesis.history.faults[0]
        self.assertEqual((fault.kind, fault.target), ("pause-s3", "s3"))
        self.assertIn("stopped", fault.note)

    def test_kill_broker_offloading(self):
        """S3 frozen first, the broker killed 1-2 s later and started again after the hold, and
        only then S3 thawed: the broker dies with its copies hanging half-way."""
        nemesis, calls, sleeps = self.make(kinds=("kill-broker-offloading",))
        nemesis.run(1000)
        kinds = [c[0] for c in calls]
        self.assertEqual(kinds[:2], ["sleep", "s3-pause"])
        self.assertLess(kinds.index("s3-pause"), [i for i, k in enumerate(kinds) if "kill" in k][0])
        self.assertGreater(kinds.index("s3-resume"), [i for i, k in enumerate(kinds) if "start" in k][0])
        self.assertTrue(1.0 <= sleeps[1] <= 2.0, sleeps)
        fault = nemesis.history.faults[0]
        self.assertEqual(fault.kind, "kill-broker-offloading")
        self.assertTrue(fault.target.startswith("broker"))
        self.assertIn("before the kill", fault.note)
        self.assertEqual(self.make(kinds=("kill-broker-offloading", "kill-broker"), s3=False)[0].kinds,
                         ("kill-broker",))

    def test_dropped_without_s3(self):
        """Without an S3 server the kind is dropped (the others kept); not a default kind."""
        from pulsar_twisted.testing.chaos.nemesis import KINDS, OFFLOAD_KINDS, PARTITION_KINDS
        nemesis, _, _ = self.make(kinds=("pause-s3", "kill-broker"), s3=False)
        self.assertEqual(nemesis.kinds, ("kill-broker",))
        self.assertFalse(set(OFFLOAD_KINDS) & set(KINDS + PARTITION_KINDS))

    def test_mixed_with_the_other_kinds(self):
        """The seed draws pause-s3 among broker and bookie faults, each on its own targets."""
        nemesis, _, _ = self.make(seed=3, kinds=("pause-s3", "kill-broker", "kill-bookie"),
                                  faults=15)
        nemesis.run(1000)
        drawn = {(f.kind, f.target if f.target == "s3" else f.target[:-1])
                 for f in nemesis.history.faults}
        self.assertEqual(drawn, {("pause-s3", "s3"), ("kill-broker", "broker"),
                                 ("kill-bookie", "bookie")})

    def test_heal_thaws_never_starts(self):
        """heal() sends SIGCONT to the S3 server and nothing else."""
        nemesis, calls, _ = self.make()
        nemesis.s3s[0].pause()
        del calls[:]
        nemesis.heal()
        self.assertEqual(calls, [("s3-resume",)])

    def test_failed_pause_thaws(self):
        """A pause that raised (after the SIGSTOP) leaves the server thawed, not restarted."""
        nemesis, calls, _ = self.make()

        def broken(target, hold):
            target.pause()
            raise OSError("boom")
        nemesis._pause_remote = broken
        nemesis.run(1000)
        self.assertIn(("s3-resume",), calls)
        self.assertNotIn(("s3-start",), calls)
        self.assertEqual(len(nemesis.errors), 1)


def _stats(*ledgers):
    """Internal stats with ``(ledger id, entries, offloaded)`` rows."""
    return {"ledgers": [{"ledgerId": lid, "entries": n, "size": 10 * n, "offloaded": off,
                         "underReplicated": False} for lid, n, off in ledgers]}


def _stats_path(topic):
    return "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/internalStats"


class _Info:
    def __init__(self, ledger_id, entries, offload=None):
        self.ledger_id, self.entries, self.size, self.timestamp = ledger_id, entries, 10, 1
        self.offload = offload


class _FakeZk:
    def __init__(self, nodes):
        self.nodes = nodes

    def get(self, path):
        if path not in self.nodes:
            raise KeyError(path)
        return self.nodes[path], None


class _StoredCluster:
    """What ``tiered`` reads of a cluster: managed ledger nodes and ``/ledgers``."""

    def __init__(self, nodes, on_bookies):
        self.zk = _FakeZk(nodes)
        self.on_bookies = on_bookies

    def path(self, path):
        return "/chroot" + path

    def ledger_metadata(self):
        return {lid: object() for lid in self.on_bookies}


def _node(*infos):
    return encode_ledger_info(list(infos), {})


def _ml_path(topic):
    from pulsar_twisted.common.naming import parse_topic
    from pulsar_twisted.mledger.formats import ledger_path
    return "/chroot" + ledger_path(parse_topic(topic).managed_ledger_name)


def _done(uid, deleted=True):
    return OffloadContext(uid, complete=True, bk_deleted=deleted, timestamp=5, driver="S3")


class OffloadFiguresTests(SynchronousTestCase):
    """``tiered``'s waits and figures, on fakes."""

    def clock(self):
        now = [0.0]

        def sleep(seconds):
            now[0] += seconds
        return sleep, (lambda: now[0])

    def test_not_offloaded(self):
        """Sealed non-empty ledgers not offloaded; the last (current) one and empty ones aside."""
        self.assertEqual(tiered.not_offloaded(_stats((1, 5, True), (2, 0, False), (3, 5, False),
                                                     (4, 5, False))), [3])
        self.assertEqual(tiered.not_offloaded(_stats((4, 5, False))), [])
        self.assertIsNone(tiered.not_offloaded({}))

    def test_wait_offloaded_catches_up(self):
        """Asked of each broker in turn until one knows; caught up once nothing is left."""
        calls = []
        path = _stats_path(TOPIC)
        answers = {("a", "GET", path): [{}, _stats((1, 5, False), (2, 5, False)),
                                        _stats((1, 5, True), (2, 5, False))],
                   ("b", "GET", path): _stats((1, 5, False), (2, 5, False))}
        admins = [_FakeAdmin("a", calls, answers), _FakeAdmin("b", calls, answers)]
        sleep, monotonic = self.clock()
        state, figures = tiered.wait_offloaded(admins, [TOPIC], 30, sleep, monotonic)
        self.assertEqual((state, figures), ("caught up", {TOPIC: []}))
        self.assertEqual([c[0] for c in calls], ["a", "b", "a", "a"])

    def test_wait_offloaded_times_out(self):
        """Bounded: what is still not offloaded, None for a topic nobody knows."""
        other = TOPIC + "-2"
        answers = {("a", "GET", _stats_path(TOPIC)): _stats((1, 5, False), (2, 5, False))}
        admins = [_FakeAdmin("a", [], answers)]
        sleep, monotonic = self.clock()
        state, figures = tiered.wait_offloaded(admins, [TOPIC, other], 5, sleep, monotonic)
        self.assertEqual((state, figures), ("timed out", {TOPIC: [1], other: None}))
        self.assertEqual(monotonic(), 5.0)

    def test_unload(self):
        """Each topic unloaded through the first broker that answers; errors kept per topic."""
        from pulsar_twisted.cli.admin import CommandError
        calls = []
        other = TOPIC + "-2"
        path = "/admin/v2/persistent/public/default/chaos-t/unload"
        other_path = "/admin/v2/persistent/public/default/chaos-t-2/unload"
        answers = {("a", "PUT", path): CommandError("down"), ("b", "PUT", path): None,
                   ("a", "PUT", other_path): CommandError("down"),
                   ("b", "PUT", other_path): CommandError("down too")}
        admins = [_FakeAdmin("a", calls, answers), _FakeAdmin("b", calls, answers)]
        errors = tiered.unload(admins, [TOPIC, other])
        self.assertEqual(errors, {other: "CommandError: down too"})
        self.assertEqual([(c[0], c[2]) for c in calls], [("a", path), ("b", path),
                                                         ("a", other_path), ("b", other_path)])

    def test_figures(self):
        """Offloaded, S3 only (bkDeleted and gone from /ledgers), complete offloads missing an
        object, leftover objects, unreadable nodes."""
        other = TOPIC + "-2"
        cluster = _StoredCluster({_ml_path(TOPIC): _node(
            _Info(1, 5, _done("u1")),                 # S3 only
            _Info(2, 5, _done("u2")),                 # marked, still in /ledgers
            _Info(3, 5, _done("u3", deleted=False)),  # not marked yet
            _Info(4, 5, OffloadContext("u4")),        # an attempt, incomplete
            _Info(5, 0))}, on_bookies={2, 3, 4, 5})
        keys = {data_key("u1", 1), index_key("u1", 1), data_key("u2", 2), index_key("u2", 2),
                data_key("u3", 3), data_key("u4", 4), data_key("old", 1)}
        ledgers = tiered.stored_ledgers(cluster, [TOPIC, other])
        self.assertIsNone(ledgers[other])
        figures = tiered.offload_figures(ledgers, tiered.bookie_ledgers(cluster), keys)
        self.assertEqual(figures, {
            "sealed": 4, "offloaded": 3, "tiered_only": [1], "complete_missing_objects": [3],
            "objects": 7, "leftover_objects": 2, "unreadable_nodes": [other]})
        self.assertEqual(tiered.still_on_bookies(ledgers, {2, 3, 4, 5}), [2, 3])
        self.assertIn("3 of 4 sealed ledgers offloaded",
                      tiered.format_offload(dict(figures, catch_up="caught up",
                                                 catch_up_seconds=0.0, bookie_copies="gone")))

    def test_wait_bookie_copies_gone(self):
        """Bounded; what is still on the bookies when it gives up."""
        cluster = _StoredCluster({_ml_path(TOPIC): _node(_Info(1, 5, _done("u1")), _Info(2, 5))},
                                 on_bookies={1, 2})
        sleep, monotonic = self.clock()
        self.assertEqual(tiered.wait_bookie_copies_gone(cluster, [TOPIC], 3, sleep, monotonic),
                         ("timed out", [1]))
        cluster.on_bookies = {2}
        self.assertEqual(tiered.wait_bookie_copies_gone(cluster, [TOPIC], 3, sleep, monotonic),
                         ("gone", []))


def _offloaded_history(figures):
    """Two messages acked and stored, in ledgers 7 and 8."""
    history = _history(meta={"offload": figures})
    _acked(history, "a", 0, (7, 0, 0))
    _acked(history, "a", 1, (8, 0, 0))
    _store(history, 0, "a", 0, (7, 0, 0))
    _store(history, 0, "a", 1, (8, 0, 0))
    return history


class OffloadCheckerTests(SynchronousTestCase):
    """The checker's offload figures (``meta["offload"]``)."""

    def test_read_from_tiered_only(self):
        """Entries read back from ledgers whose only copy is in S3 are counted; clean verdict."""
        verdict = checker.check(_offloaded_history(
            {"offloaded": 2, "tiered_only": [7], "pending": {}, "complete_missing_objects": []}))
        self.assertEqual((verdict.offloaded_ledgers, verdict.tiered_only_ledgers,
                          verdict.read_from_tiered_only), (2, 1, 1))
        self.assertTrue(verdict.ok, verdict.violations)
        self.assertIn("OFFLOAD ledgers offloaded 2", checker.format_verdict(verdict))

    def test_nothing_offloaded_fails(self):
        """A run with offload that offloaded nothing fails."""
        verdict = checker.check(_offloaded_history({"offloaded": 0, "tiered_only": []}))
        self.assertEqual(verdict.violations, {"offload_unexercised": 1})

    def test_nothing_read_from_s3_alone_fails(self):
        """Offloaded, but no entry of the read-back came from a ledger in S3 alone: fails."""
        verdict = checker.check(_offloaded_history({"offloaded": 2, "tiered_only": [9]}))
        self.assertEqual(verdict.violations, {"offload_unexercised": 1})

    def test_no_figures_fails(self):
        """Figures that could not be made (``{"error": ...}``) fail the run."""
        verdict = checker.check(_offloaded_history({"error": "OSError: boom"}))
        self.assertEqual(verdict.violations, {"offload_unexercised": 1})

    def test_pending_and_missing_objects(self):
        """Sealed ledgers never offloaded, and complete offloads without their objects."""
        verdict = checker.check(_offloaded_history(
            {"offloaded": 2, "tiered_only": [7, 8], "pending": {"t-0": [3, 4], "t-1": None},
             "complete_missing_objects": [8]}))
        self.assertEqual(verdict.violations, {"offload_pending": 3, "offload_missing_objects": 1})
        self.assertEqual(verdict.examples["offload_pending"], [("t-0", [3, 4]), ("t-1", None)])

    def test_without_offload(self):
        """A run without offload has no offload figures, and no line for them."""
        for flag in (None, False):      # no key at all, or a run's flag (an older history)
            history = _offloaded_history(None)
            del history.meta["offload"]
            if flag is not None:
                history.meta["offload"] = flag
            verdict = checker.check(history)
            self.assertTrue(verdict.ok)
            self.assertNotIn("OFFLOAD", checker.format_verdict(verdict))


class OffloadWiringTests(SynchronousTestCase):
    """The brokers' offload keys, and the script's option and fault kind."""

    def test_broker_keys(self):
        """Threshold 0 and deletion lag 0 on top of the run's other keys (infinite retention,
        small ledgers)."""
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, make_cluster
        from pulsar_twisted.testing.cluster import ZooKeeperServer

        class S3:
            region, endpoint = "us-east-1", "http://127.0.0.1:9"
        cluster = make_cluster(ChaosConfig(offload=True, max_entries_per_ledger=50),
                               ZooKeeperServer("127.0.0.1:2181"), S3())
        self.addCleanup(cluster.cleanup)
        settings = cluster.brokers[1].settings
        for key, value in {"managedLedgerOffloadDriver": "S3",
                           "s3ManagedLedgerOffloadBucket": tiered.BUCKET,
                           "s3ManagedLedgerOffloadServiceEndpoint": "http://127.0.0.1:9",
                           "managedLedgerOffloadThresholdInBytes": 0,
                           "managedLedgerOffloadDeletionLagMs": 0,
                           "managedLedgerMaxEntriesPerLedger": 50,
                           "defaultRetentionTimeInMinutes": -1,
                           "defaultRetentionSizeInMB": -1}.items():
            self.assertEqual(settings[key], value, key)

    def script(self):
        import importlib.util
        import os
        path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "chaos.py")
        spec = importlib.util.spec_from_file_location("chaos_script", path)
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        return script

    def test_script_option(self):
        """``--offload`` and ``pause-s3`` parse; ``pause-s3`` is not a default kind."""
        script = self.script()
        args = script.parse(["--offload", "--faults", "pause-s3,kill-broker"])
        self.assertTrue(args.offload)
        self.assertEqual(args.faults, ("pause-s3", "kill-broker"))
        self.assertNotIn("pause-s3", script.parse([]).faults)
        self.assertFalse(script.parse([]).offload)

    def test_table(self):
        """``--table`` shows ledgers offloaded, in S3 only and entries read from those; '-' for
        a run without offload."""
        import json
        history = _offloaded_history({"offloaded": 2, "tiered_only": [7]})
        verdict = checker.check(history)
        paths = []
        for name, meta in (("offload.json", history.meta), ("plain.json", {})):
            path = self.mktemp()
            with open(path, "w") as f:
                json.dump({"meta": dict(meta, seed=1, quorum=[3, 3, 2]),
                           "verdict": verdict.to_json(), "faults": []}, f)
            paths.append(path)
        head, offloaded, plain = [line.split() for line in self.script().table(paths).splitlines()]
        at = head.index("offl")
        self.assertEqual(head[at:at + 3], ["offl", "s3only", "s3read"])
        self.assertEqual(offloaded[at:at + 3], ["2", "1", "1"])
        self.assertEqual(plain[at:at + 3], ["-", "-", "-"])


class ShortOffloadChaosRunTests(SynchronousTestCase):
    """A short seeded run with ``--offload``: every sealed ledger offloaded to moto while a broker
    and a bookie are killed and S3 frozen; the read-back reads old ledgers from S3 alone."""

    def setUp(self):
        from pulsar_twisted.testing import s3
        from tests.cluster.test_processes import pulsar
        if pulsar is None:
            raise self.skipTest("the official pulsar-client package is not installed")
        if s3.skip_reason():
            raise self.skipTest(s3.skip_reason())
        from pulsar_twisted.testing.cluster import ZooKeeperServer, ZooKeeperUnavailable
        try:
            self.zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise self.skipTest(str(e))

    def test_short_offload_run(self):
        """Seed 21, 15 s of faults drawn from kill -9 of brokers and bookies and SIGSTOP of S3
        (the seed draws a pause of S3, then a broker kill), then heal, offloads caught up, bookie
        copies deleted, read back: the verdict is clean, ledgers were offloaded and entries read
        from S3 alone. About 40 s with start-up."""
        from pulsar_twisted.testing.chaos.runner import ChaosConfig, run
        lines = []
        config = ChaosConfig(seed=21, duration=15.0,
                             kinds=("kill-broker", "kill-bookie", "pause-s3"), warmup=2.0,
                             after_heal=4.0, send_timeout_ms=15000, settle=20.0, drain_idle=8.0,
                             drain_timeout=30.0, offload=True, offload_timeout=30.0,
                             zk_hosts=self.zk.hosts, log=lines.append)
        history, verdict = run(config)
        print("\n  " + "\n  ".join(lines + checker.format_verdict(verdict).splitlines()
                                   + tiered.format_offload(history.meta["offload"]).splitlines()))
        self.assertGreaterEqual(len(history.faults), 2, "the nemesis injected too few faults")
        self.assertGreater(verdict.acked, 1000)
        self.assertGreater(verdict.offloaded_ledgers, 10)
        self.assertGreater(verdict.read_from_tiered_only, 500)
        self.assertEqual(history.meta["nemesis_errors"], [])
        self.assertTrue(verdict.ok, f"violations: {verdict.violations}")
