"""
What a daemon does once its tree has started (say it is ready) and when it could not start (say
why, stop, and exit with a non-zero status).
"""

import atexit
import os

from twisted.internet import defer

from pulsar_twisted.common.reactor_lag import ReactorLagMonitor
from pulsar_twisted.daemons.gctune import GcFreezePolicy
from pulsar_twisted.daemons.tree import OrderedMultiService


def startup_failed(reactor, log, failure, daemon: str):
    """
    Log ``failure`` as the reason ``daemon`` could not start, stop the reactor, and make the
    process exit with status 1 once twistd has cleaned up (its pidfile included), so that
    scripts and supervisors see the failure. Returns ``failure`` for the Deferred chain.
    """
    log.failure("{daemon} failed to start", failure, daemon=daemon)
    # Registered now, run last: twistd's own clean-up has happened by then.
    atexit.register(os._exit, 1)
    if reactor.running:
        reactor.stop()
    else:
        # Failed inside startService, before twistd started the reactor.
        reactor.callWhenRunning(reactor.stop)
    return failure


def chain_startup(starting, ready, reactor, log, daemon: str) -> None:
    """
    Wire a daemon's start-up Deferred ``starting`` to its ``ready`` Deferred: a failure goes
    through ``startup_failed`` (logged once, exit status 1) and is then consumed, so observers of
    ``ready`` added later do not log it a second time as an unhandled error.
    """
    starting.addErrback(lambda failure: startup_failed(reactor, log, failure, daemon))
    starting.chainDeferred(ready)
    ready.addErrback(lambda _: None)


class Daemon(OrderedMultiService):
    """
    The root of a daemon's tree (``daemon`` names it in the log). ``ready`` fires with the root
    once every child has started; the garbage collector is then tuned for serving (``gc_policy``,
    which keeps freezing long-lived objects, ``daemons/gctune.py``) and
    ``announce()`` logs what the daemon serves. A child that fails to start stops the process
    with exit status 1 (``startup_failed``); a stop that comes during start-up is not a failure.

    Once ready, ``lag_monitor`` (the stall detector, ``common/reactor_lag.py``) measures the
    reactor's lateness, with a watchdog thread naming what ran in a stall; it is not started before,
    since start-up (journal replay, loading the metadata) may block the reactor on purpose.
    """

    #: Seconds ``stopService`` waits for the tree to stop before it gives up (None: no bound).
    shutdown_timeout = None

    def __init__(self, daemon: str, reactor=None, shutdown_timeout=None):
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor
        self.daemon = daemon
        self.reactor = reactor
        self.ready = defer.Deferred()
        self.lag_monitor = ReactorLagMonitor(reactor)
        self.gc_policy = None
        self.shutdown_timeout = shutdown_timeout

    def stopService(self):
        """
        Stop the tree, in reverse start order. With ``shutdown_timeout`` (Pulsar's
        ``brokerShutdownTimeoutMs``) the returned Deferred fires at the latest that many
        seconds later: the parts still closing are named in a warning and left behind, so
        twistd goes on to exit rather than hang on a part that cannot close (a bookie or
        ZooKeeper that does not answer). The stop itself is not cancelled: a part closing
        cleanly in the meantime still does.
        """
        self.lag_monitor.stop()
        if self.gc_policy is not None:
            self.gc_policy.stop()
        stopping = super().stopService()
        timeout = self.shutdown_timeout
        if timeout is None:
            return stopping
        bounded = defer.Deferred()

        def give_up():
            pending = self.not_stopped()
            self.log.warn("{daemon}: shutdown not done after {ms} ms (brokerShutdownTimeoutMs); "
                          "exiting without waiting for: {pending}", daemon=self.daemon,
                          ms=int(timeout * 1000), pending=", ".join(pending) or "(nothing)")
            bounded.callback(None)

        timer = self.reactor.callLater(max(0.0, timeout), give_up)

        def stopped(result):
            if timer.active():
                timer.cancel()
                bounded.callback(None)
            return result

        stopping.addBoth(stopped)
        stopping.addErrback(lambda failure: self.log.failure(
            "{daemon}: stopping failed", failure, daemon=self.daemon))
        return bounded

    def startService(self):
        config = getattr(self, "config", None)
        if config is not None and hasattr(config, "warn_unimplemented"):
            # Pulsar/BookKeeper keys the file set that we do not honour: said once, before
            # anything starts, so the operator reads it next to the start-up lines.
            config.warn_unimplemented(self.log)
        starting = super().startService()
        starting.addCallbacks(self._started, self._stopped_while_starting)
        chain_startup(starting, self.ready, self.reactor, self.log, self.daemon)

    def _started(self, _):
        self.gc_policy = GcFreezePolicy(self.reactor)
        self.gc_policy.start()
        self.lag_monitor.start()
        self.lag_monitor.watch_thread()
        self.announce()
        return self

    def _stopped_while_starting(self, failure):
        if self.running or not failure.check(defer.CancelledError):
            return failure
        self.log.info("{daemon} stopped before it was ready", daemon=self.daemon)
        return None

    def announce(self) -> None:
        """Log that the daemon is ready and what it serves (subclasses say more)."""
        self.log.info("{daemon} ready", daemon=self.daemon)
