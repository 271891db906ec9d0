"""
Password checks off the reactor thread, with caps so that one client cannot queue up everyone's.

A bcrypt check costs ~0.1 s of CPU by design; on the reactor thread, 100 wrong-password CONNECTs
held every other client's PONG back by seconds. ``PasswordChecker`` runs ``check_password`` in a
small dedicated thread pool (bcrypt releases the GIL while it hashes, so the reactor keeps
running) and bounds the work a client can ask for:

* ``max_per_host`` checks at once from one client address: the next one is refused at once
  (``AuthenticationError``, logged), before any hashing;
* ``max_pending`` checks at once across the broker (running or queued), refused the same way.

The pool starts on first use and stops with the reactor. A reactor without threads (``task.Clock``
in unit tests) runs the check inline, so tests stay synchronous (Buildbot's test reactor does the
same with its pool).
"""

import collections

from twisted.internet import defer
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from pulsar_twisted.common.errors import AuthenticationError


class PasswordChecker:
    """``check(host, function, *args)`` runs ``function(*args)`` (a password check) within the caps."""

    log = Logger()

    #: Worker threads: two checks in parallel keep one core for the reactor on a small machine.
    threads = 2
    #: Checks in flight from one client address before the next is refused.
    max_per_host = 4
    #: Checks in flight across the broker before the next is refused.
    max_pending = 64

    def __init__(self, reactor, threads: int = None, max_per_host: int = None, max_pending: int = None,
                 pool: ThreadPool = None):
        self.reactor = reactor
        if threads is not None:
            self.threads = threads
        if max_per_host is not None:
            self.max_per_host = max_per_host
        if max_pending is not None:
            self.max_pending = max_pending
        self.pool = pool
        self._own_pool = pool is None
        self._trigger = None
        self.pending = 0
        self.by_host = collections.Counter()
        #: Checks refused by the caps since start (a figure for tests and operators).
        self.refused = 0
        self._logged_at = None

    @property
    def threaded(self) -> bool:
        return IReactorFromThreads.providedBy(self.reactor)

    def _start_pool(self) -> ThreadPool:
        if self.pool is None:
            self.pool = ThreadPool(minthreads=0, maxthreads=self.threads, name="password-checks")
            self._trigger = self.reactor.addSystemEventTrigger("during", "shutdown", self._on_shutdown)
        if not self.pool.started:
            self.pool.start()
        return self.pool

    def _on_shutdown(self) -> None:
        # A trigger cannot remove itself while it fires; the pool's threads are not daemons, so
        # without this stop the process would never exit.
        self._trigger = None
        self.stop()

    def stop(self) -> None:
        """Stop our pool (idempotent); checks still queued fail, their clients get an error."""
        if self._trigger is not None:
            self.reactor.removeSystemEventTrigger(self._trigger)
            self._trigger = None
        if self.pool is not None and self._own_pool:
            self.pool.stop()
            self.pool = None

    def check(self, host: str, function, *args) -> defer.Deferred:
        """Deferred of ``function(*args)``; fails at once with AuthenticationError past a cap."""
        if self.pending >= self.max_pending:
            return self._refuse(host, "too many password checks in progress on this broker",
                                self.max_pending)
        if self.by_host[host] >= self.max_per_host:
            return self._refuse(host, "too many password checks in progress from this address",
                                self.max_per_host)
        self.pending += 1
        self.by_host[host] += 1
        if self.threaded:
            d = deferToThreadPool(self.reactor, self._start_pool(), function, *args)
        else:
            d = defer.maybeDeferred(function, *args)
        return d.addBoth(self._done, host)

    def _done(self, result, host):
        self.pending -= 1
        self.by_host[host] -= 1
        if self.by_host[host] <= 0:
            del self.by_host[host]
        return result

    #: Seconds between two log lines about refusals (a flood must not become a log flood).
    log_interval = 10.0

    def _refuse(self, host: str, reason: str, limit: int) -> defer.Deferred:
        self.refused += 1
        now = self.reactor.seconds()
        if self._logged_at is None or now - self._logged_at >= self.log_interval:
            self.log.warn("{host}: password check refused: {reason} (limit {limit}; {refused} "
                          "refused since start)", host=host, reason=reason, limit=limit,
                          refused=self.refused)
            self._logged_at = now
        return defer.fail(AuthenticationError(f"Authentication refused: {reason}, retry later"))
