"""A daemon's stop is bounded by brokerShutdownTimeoutMs (issue 12: SIGTERM must always complete)."""

from twisted.internet import defer, task
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.daemons.startup import Daemon
from pulsar_twisted.daemons.tree import Step


class ShutdownBoundTests(SynchronousTestCase):
    def daemon(self, stop, timeout):
        clock = task.Clock()
        daemon = Daemon("test-daemon", clock)
        daemon.shutdown_timeout = timeout
        Step("part", None, stop).setServiceParent(daemon)
        daemon.startService()
        return daemon, clock

    def test_hung_part_does_not_hang_the_stop(self):
        """A part whose stop never fires: the daemon's stop fires at the timeout, logged as an error."""
        daemon, clock = self.daemon(defer.Deferred, 60)
        with capturedLogs() as events:
            stopping = daemon.stopService()
            clock.advance(59)
            self.assertNoResult(stopping)
            clock.advance(1)
        self.successResultOf(stopping)
        self.assertTrue([e for e in events if e["log_level"] == LogLevel.error
                         and "did not stop within" in e["log_format"]])

    def test_prompt_stop_unchanged(self):
        """A stop that completes fires at once and leaves no timer behind."""
        daemon, clock = self.daemon(lambda: None, 60)
        self.successResultOf(daemon.stopService())
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_failed_part_logged_stop_completes(self):
        """A part whose stop fails: logged, and the daemon's stop still completes."""
        daemon, clock = self.daemon(lambda: defer.fail(RuntimeError("disk gone")), 60)
        self.successResultOf(daemon.stopService())
        self.flushLoggedErrors(RuntimeError)

    def test_no_timeout_waits(self):
        """Without shutdown_timeout the stop waits for its parts, as before."""
        daemon, clock = self.daemon(defer.Deferred, None)
        stopping = daemon.stopService()
        clock.advance(3600)
        self.assertNoResult(stopping)
