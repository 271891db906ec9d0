"""What a daemon does when its start-up fails: say why, stop, and exit with a non-zero status."""

import atexit
import os


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
