"""
The process runtime's supervision: one ``InstanceSupervisor`` per function instance keeps its OS
process running, restarting it after an unexpected exit with a backoff, and holds the counters
the process reports.

The instance process reports on its file descriptor 3 (its stdout and stderr stay the user's,
going to the instance log): one JSON object per line, ``{"event": "running"}`` once its consumer
is subscribed and ``{"event": "stats", ...counters}`` after every message. Pulsar's process runtime
asks its instances over gRPC instead; a pipe is the same contract without a server per instance.
"""

import enum
import json

from twisted.internet import defer, protocol
from twisted.logger import Logger

#: Pulsar's InstanceStatusData counters, as the instance reports them (zero before it does).
COUNTERS = ("numReceived", "numSuccessfullyProcessed", "numUserExceptions", "numSystemExceptions",
            "averageLatency", "lastInvocationTime")
STATUS_FD = 3


class State(enum.Enum):
    STOPPED = "stopped"        # asked to stop (or never started)
    STARTING = "starting"      # process spawned, consumer not yet subscribed
    RUNNING = "running"        # the instance reported its consumer subscribed
    BACKOFF = "backoff"        # exited unexpectedly; a restart is scheduled


class InstanceProtocol(protocol.ProcessProtocol):
    """Frames the status pipe into JSON lines for the supervisor, and the user's output into log
    lines; decides nothing."""

    log = Logger()

    def __init__(self, supervisor):
        self.supervisor = supervisor
        self._buffers = {}
        #: Deferreds fired once this process has exited (``InstanceSupervisor.shutdown``).
        self.exit_waiters = []

    def childDataReceived(self, fd, data):
        buffered = self._buffers.get(fd, b"") + data
        *lines, self._buffers[fd] = buffered.split(b"\n")
        for line in lines:
            if fd == STATUS_FD:
                try:
                    report = json.loads(line)
                except ValueError:
                    self.log.warn("{instance}: malformed status line {line!r}",
                                  instance=self.supervisor.name, line=line[:200])
                    continue
                self.supervisor.report(report)
            else:
                self.log.info("{instance}: {line}", instance=self.supervisor.name,
                              line=line.decode("utf-8", "replace"))

    def processEnded(self, reason):
        self.supervisor.ended(self, reason)


class InstanceSupervisor:
    """
    Keeps instance ``instance_id`` of a function running. ``launch(protocol)`` spawns the process
    (``reactor.spawnProcess`` in production, a fake in tests) and returns its transport.

    ``start()`` spawns; an exit not asked for by ``stop()``/``restart()`` counts one restart
    (``numRestarts``) and spawns again after ``backoff`` seconds, doubling from
    ``initial_backoff`` up to ``max_backoff``, back to the initial value once a process has run
    ``stable_after`` seconds. ``stop()`` kills the process and cancels a pending restart.
    """

    log = Logger()

    def __init__(self, name: str, instance_id: int, launch, clock, initial_backoff: float = 1.0,
                 max_backoff: float = 60.0, stable_after: float = 60.0):
        self.name = f"{name}:{instance_id}"
        self.instance_id = instance_id
        self.launch = launch
        self.clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.stable_after = stable_after
        self.state = State.STOPPED
        self.num_restarts = 0
        self.error = ""
        self.backoff = initial_backoff
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.latest_user_exceptions = []
        self.user_metrics = {}
        self._protocol = self._process = self._pending = None
        self._started_at = None

    # ---------------------------------------------------------------- control
    def start(self) -> None:
        """Spawn the process unless one is running or starting."""
        if self._process is not None:
            return
        self._cancel_pending()
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.state = State.STARTING
        self._protocol = InstanceProtocol(self)
        self._started_at = self.clock.seconds()
        try:
            self._process = self.launch(self._protocol)
        except Exception as e:
            self._process = self._protocol = None
            self.error = f"failed to spawn: {e}"
            self.log.failure("{instance}: spawning failed", instance=self.name)
            self._schedule_restart()

    def stop(self) -> None:
        """Kill the process (SIGKILL: the instance holds no state a clean exit would save, and
        what it did not ack is redelivered) and stay stopped."""
        self._cancel_pending()
        self.state = State.STOPPED
        self._kill()

    def shutdown(self, grace: float = 5.0):
        """Stop for good, gracefully: SIGTERM (the instance closes its client, which flushes the
        acks it grouped), SIGKILL if it still runs ``grace`` seconds later. A Deferred firing once
        the process has exited."""
        self._cancel_pending()
        self.state = State.STOPPED
        process, proto = self._process, self._protocol
        if process is None:
            return defer.succeed(None)
        exited = defer.Deferred()
        proto.exit_waiters.append(exited)
        try:
            process.signalProcess("TERM")
        except Exception:       # ProcessExitedAlready: processEnded is on its way
            pass
        killer = self.clock.callLater(grace, self._kill)

        def exited_in_time(result):
            if killer.active():
                killer.cancel()
            return result
        return exited.addBoth(exited_in_time)

    def restart(self) -> None:
        """Stop, then start again at once (Pulsar's ``functions restart``; not a crash)."""
        self.stop()
        self.start()

    @property
    def pid(self):
        return getattr(self._process, "pid", None)

    # ---------------------------------------------------------------- from the process
    def report(self, report: dict) -> None:
        event = report.get("event")
        if event == "running":
            self.state = State.RUNNING
            self.error = ""
        elif event == "stats":
            for name in COUNTERS:
                if name in report:
                    self.counters[name] = report[name]
            self.latest_user_exceptions = report.get("latestUserExceptions", [])[-10:]
            self.user_metrics = report.get("userMetrics", {})
        elif event == "error":
            self.error = str(report.get("error", ""))

    def ended(self, proto, reason) -> None:
        waiters, proto.exit_waiters = proto.exit_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        if proto is not self._protocol:
            return          # a process we already let go of (stop, then start)
        self._process = self._protocol = None
        if self.state is State.STOPPED:
            return
        ran = self.clock.seconds() - (self._started_at or 0)
        if ran >= self.stable_after:
            self.backoff = self.initial_backoff
        self.num_restarts += 1
        self.error = self.error or f"instance exited: {reason.getErrorMessage()}"
        self.log.warn("{instance} exited ({reason}); restart {n} in {delay} s", instance=self.name,
                      reason=reason.getErrorMessage(), n=self.num_restarts, delay=self.backoff)
        self._schedule_restart()

    # ---------------------------------------------------------------- internals
    def _schedule_restart(self) -> None:
        self.state = State.BACKOFF
        delay, self.backoff = self.backoff, min(self.backoff * 2, self.max_backoff)
        self._pending = self.clock.callLater(delay, self._restart_after_backoff)

    def _restart_after_backoff(self) -> None:
        self._pending = None
        self.start()

    def _cancel_pending(self) -> None:
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None

    def _kill(self) -> None:
        process, self._process, self._protocol = self._process, None, None
        if process is not None:
            try:
                process.signalProcess("KILL")
            except Exception:       # ProcessExitedAlready: it is gone either way
                pass

    # ---------------------------------------------------------------- views
    def status(self, worker_id: str) -> dict:
        """Pulsar's ``InstanceStatusData``."""
        c = self.counters
        return {
            "running": self.state is State.RUNNING, "error": self.error,
            "numRestarts": self.num_restarts, "numReceived": c["numReceived"],
            "numSuccessfullyProcessed": c["numSuccessfullyProcessed"],
            "numUserExceptions": c["numUserExceptions"],
            "latestUserExceptions": list(self.latest_user_exceptions),
            "numSystemExceptions": c["numSystemExceptions"], "latestSystemExceptions": [],
            "averageLatency": c["averageLatency"], "lastInvocationTime": c["lastInvocationTime"],
            "workerId": worker_id,
        }

    def stats(self) -> dict:
        """Pulsar's ``FunctionInstanceStatsDataBase`` totals (the one-minute windows are not
        kept yet) and the user's metrics."""
        c = self.counters
        return {
            "receivedTotal": c["numReceived"], "processedSuccessfullyTotal": c["numSuccessfullyProcessed"],
            "systemExceptionsTotal": c["numSystemExceptions"], "userExceptionsTotal": c["numUserExceptions"],
            "avgProcessLatency": c["averageLatency"] or None, "lastInvocation": c["lastInvocationTime"] or None,
            "userMetrics": dict(self.user_metrics),
        }


async def apply_running(runtime, chosen, running: bool, restart: bool, save) -> None:
    """Start, stop or restart the instances ``chosen`` of ``runtime`` (a function's or a
    connector's: ``record`` and ``supervisors``). The stopped ones are written into the record
    first, through ``save(record)`` (a Deferred or coroutine), so that they stay stopped across a
    worker restart; nothing is written when the set does not change."""
    stopped = set(runtime.record.get("stopped", []))
    stopped = stopped - set(chosen) if running else stopped | set(chosen)
    if sorted(stopped) != sorted(runtime.record.get("stopped", [])):
        runtime.record = dict(runtime.record, stopped=sorted(stopped))
        await save(runtime.record)
    for i in chosen:
        supervisor = runtime.supervisors[i]
        if not running:
            supervisor.stop()
        elif restart:
            supervisor.restart()
        else:
            supervisor.start()
