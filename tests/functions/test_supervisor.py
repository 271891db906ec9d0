"""InstanceSupervisor on task.Clock with a fake launch: restarts with backoff, stop, reports."""

import json

from twisted.internet import error, task
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.supervisor import InstanceProtocol, InstanceSupervisor, State


class FakeProcess:
    """What ``spawnProcess`` returns, enough for the supervisor: a pid and signalProcess
    (``auto_exit``: a signal ends the process at once, as a real instance does)."""

    def __init__(self, protocol, pid, auto_exit=False):
        self.protocol = protocol
        self.pid = pid
        self.signals = []
        self.auto_exit = auto_exit

    def signalProcess(self, signal):
        self.signals.append(signal)
        if self.auto_exit:
            self.exit(0 if signal == "TERM" else 137)

    def exit(self, code=1):
        reason = error.ProcessTerminated(exitCode=code) if code else error.ProcessDone(0)
        self.protocol.processEnded(Failure(reason))


class FakeLauncher:
    def __init__(self, auto_exit=False):
        self.processes = []
        self.fail = False
        self.auto_exit = auto_exit

    def __call__(self, protocol):
        if self.fail:
            raise OSError("no such interpreter")
        process = FakeProcess(protocol, 100 + len(self.processes), self.auto_exit)
        self.processes.append(process)
        return process


class SupervisorTests(SynchronousTestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.launch = FakeLauncher()
        self.supervisor = InstanceSupervisor("public/default/f", 0, self.launch, self.clock,
                                             initial_backoff=1.0, max_backoff=4.0, stable_after=30.0)

    def report(self, **fields):
        line = json.dumps(fields).encode() + b"\n"
        self.launch.processes[-1].protocol.childDataReceived(3, line)

    def test_running_once_reported(self):
        """Spawned is starting; running only once the instance reports its consumer subscribed."""
        self.supervisor.start()
        self.assertEqual(self.supervisor.state, State.STARTING)
        self.assertFalse(self.supervisor.status("w")["running"])
        self.report(event="running")
        self.assertTrue(self.supervisor.status("w")["running"])
        self.assertEqual(self.supervisor.pid, 100)

    def test_crash_restarts_with_doubling_backoff(self):
        """Each unexpected exit counts a restart and spawns again after 1, 2, 4, 4 s."""
        self.supervisor.start()
        for n, delay in enumerate((1.0, 2.0, 4.0, 4.0), start=1):
            self.launch.processes[-1].exit(137)
            self.assertEqual(self.supervisor.state, State.BACKOFF)
            self.assertEqual(self.supervisor.num_restarts, n)
            self.clock.advance(delay - 0.01)
            self.assertEqual(len(self.launch.processes), n)
            self.clock.advance(0.01)
            self.assertEqual(len(self.launch.processes), n + 1)
        self.assertIn("exit code 137", self.supervisor.status("w")["error"])

    def test_backoff_resets_after_a_stable_run(self):
        """A process that ran stable_after seconds restarts after the initial backoff again."""
        self.supervisor.start()
        self.launch.processes[-1].exit()
        self.clock.advance(1.0)
        self.launch.processes[-1].exit()
        self.clock.advance(2.0)
        self.clock.advance(30.0)
        self.launch.processes[-1].exit()
        self.clock.advance(1.0)
        self.assertEqual(len(self.launch.processes), 4)

    def test_stop_kills_and_stays_stopped(self):
        """stop() kills the process; its exit is not a crash and nothing restarts."""
        self.supervisor.start()
        process = self.launch.processes[-1]
        self.supervisor.stop()
        self.assertEqual(process.signals, ["KILL"])
        process.exit(137)
        self.clock.advance(100)
        self.assertEqual((self.supervisor.state, self.supervisor.num_restarts, len(self.launch.processes)),
                         (State.STOPPED, 0, 1))

    def test_stop_cancels_pending_restart(self):
        """A stop during the backoff cancels the restart."""
        self.supervisor.start()
        self.launch.processes[-1].exit()
        self.supervisor.stop()
        self.clock.advance(100)
        self.assertEqual(len(self.launch.processes), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_restart_is_not_a_crash(self):
        """restart() spawns a new process at once without counting a restart."""
        self.supervisor.start()
        old = self.launch.processes[-1]
        self.supervisor.restart()
        old.exit(137)           # the killed process's exit arrives after the new one started
        self.assertEqual((len(self.launch.processes), self.supervisor.num_restarts,
                          self.supervisor.state), (2, 0, State.STARTING))

    def test_spawn_failure_retried(self):
        """A launch that raises is reported as the error and retried after the backoff."""
        self.launch.fail = True
        self.supervisor.start()
        self.assertIn("no such interpreter", self.supervisor.error)
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        self.launch.fail = False
        self.clock.advance(1.0)
        self.assertEqual(len(self.launch.processes), 1)

    def test_stats_reports(self):
        """Counters the instance reports, split across reads, become status and stats."""
        self.supervisor.start()
        line = json.dumps({"event": "stats", "numReceived": 3, "numSuccessfullyProcessed": 2,
                           "numUserExceptions": 1, "userMetrics": {"m": 1.5},
                           "latestUserExceptions": [{"exceptionString": "E: x"}]}).encode()
        protocol = self.launch.processes[-1].protocol
        protocol.childDataReceived(3, line[:10])
        protocol.childDataReceived(3, line[10:] + b"\nnot json\n")
        status = self.supervisor.status("w")
        self.assertEqual((status["numReceived"], status["numSuccessfullyProcessed"],
                          status["numUserExceptions"], status["latestUserExceptions"]),
                         (3, 2, 1, [{"exceptionString": "E: x"}]))
        stats = self.supervisor.stats()
        self.assertEqual((stats["receivedTotal"], stats["userMetrics"]), (3, {"m": 1.5}))

    def test_user_output_is_logged(self):
        """What the instance prints goes to the log, one event per line, named by instance."""
        self.supervisor.start()
        protocol = self.launch.processes[-1].protocol
        self.assertIsInstance(protocol, InstanceProtocol)
        events = []
        from twisted.logger import globalLogPublisher
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        protocol.childDataReceived(2, b"hello\nwor")
        protocol.childDataReceived(2, b"ld\n")
        lines = [e["line"] for e in events if e.get("instance") == "public/default/f:0"]
        self.assertEqual(lines, ["hello", "world"])

    def test_shutdown_terminates_then_kills(self):
        """shutdown() sends SIGTERM and fires once the process exits; one still running after
        the grace period gets SIGKILL; neither counts as a crash."""
        self.supervisor.start()
        process = self.launch.processes[-1]
        d = self.supervisor.shutdown(grace=5.0)
        self.assertEqual(process.signals, ["TERM"])
        self.assertNoResult(d)
        process.exit(0)
        self.successResultOf(d)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.supervisor.start()
        stubborn = self.launch.processes[-1]
        d = self.supervisor.shutdown(grace=5.0)
        self.clock.advance(5.0)
        self.assertEqual(stubborn.signals, ["TERM", "KILL"])
        stubborn.exit(137)
        self.successResultOf(d)
        self.clock.advance(100)
        self.assertEqual((self.supervisor.num_restarts, len(self.launch.processes)), (0, 2))
        self.successResultOf(self.supervisor.shutdown())   # nothing running: at once
