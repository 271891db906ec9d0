"""
The stall detector: how late the reactor runs a timer, as a histogram, and who held it up.

A reactor thread that runs one callback for 200 ms delays every publish receipt queued behind it
by up to 200 ms, whatever the journal does. ``ReactorLagMonitor`` makes that visible:

- a tick every ``interval`` seconds (``callLater`` on the injected clock) measures its own lateness
  (the time it ran minus the time it was due) into a histogram of milliseconds, exported on
  /metrics as ``pulsar_broker_event_loop_lag_ms`` (Pulsar has no such metric; the name follows its
  ``pulsar_broker_`` prefix and ``_ms`` unit suffix);
- a tick later than ``stall_ms`` is logged, naming what ran. The reactor cannot say that itself
  (it was busy), so a watchdog thread (``StallWatchdog``, started with ``watch_thread``) looks at
  the reactor thread every ``interval`` of real time and, once the reactor has not ticked for
  ``stall_ms``, samples its stack (``sys._current_frames()``). The late tick's log line carries the
  sample: the innermost frames of the code that was running, without instrumenting any of it.

Only the tick runs on the reactor; the watchdog reads two floats the tick writes (a stale read
only delays a sample by one watchdog period) and writes the sample the tick reads and clears.
"""

import sys
import threading
import time
import traceback

from twisted.logger import Logger

#: Upper bounds (ms) of the lag histogram's buckets; Prometheus adds +Inf.
LAG_BUCKETS_MS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)

#: Frames kept of a stalled reactor's stack (innermost last).
STACK_FRAMES = 8


class LagHistogram:
    """Cumulative-bucket histogram of lags in ms (Prometheus semantics: ``counts[i]`` counts the
    lags <= ``LAG_BUCKETS_MS[i]``; ``count`` and ``sum`` all of them)."""

    def __init__(self, buckets=LAG_BUCKETS_MS):
        self.buckets = tuple(buckets)
        self._counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, ms: float) -> None:
        self.count += 1
        self.sum += ms
        if ms > self.max:
            self.max = ms
        for i, bound in enumerate(self.buckets):
            if ms <= bound:
                self._counts[i] += 1
                break

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, lags <= bound)`` per bucket, then ``(inf, count)``."""
        out, running = [], 0
        for bound, n in zip(self.buckets, self._counts):
            running += n
            out.append((bound, running))
        out.append((float("inf"), self.count))
        return out


def format_stack(frame, limit: int = STACK_FRAMES) -> str:
    """``file.py:line in function`` of the innermost ``limit`` frames of ``frame``'s stack,
    outermost first, joined by `` > ``."""
    entries = traceback.extract_stack(frame)[-limit:]
    return " > ".join(f"{'/'.join(e.filename.split('/')[-2:])}:{e.lineno} in {e.name}" for e in entries)


class StallWatchdog:
    """The watchdog's decision, apart from its thread (tests call ``check`` with their own times).

    ``check(now)`` samples the watched thread's stack once per stall: when the next tick is late by
    more than half of ``stall_ms`` and no sample was taken since the last tick. Half, because the
    watchdog looks only every ``interval``: sampling at the full threshold would miss most stalls
    that end just past it, and a callback that has run 25 ms is the one that runs 60.
    """

    def __init__(self, monitor: "ReactorLagMonitor", thread_id: int, frames=sys._current_frames):
        self.monitor = monitor
        self.thread_id = thread_id
        self._frames = frames
        self._sampled_tick = None
        self.samples = 0

    def check(self, now: float) -> bool:
        """Sample if the watched thread is stalled now; True when a sample was taken."""
        monitor = self.monitor
        last = monitor.last_tick
        if last is None or self._sampled_tick == last:
            return False
        if (now - last - monitor.interval) * 1000.0 < monitor.stall_ms / 2:
            return False
        frame = self._frames().get(self.thread_id)
        if frame is None:
            return False
        self._sampled_tick = last
        self.samples += 1
        # Tagged with the tick it follows: a sample that lands just after the reactor ticked again
        # must not be blamed for a later stall.
        monitor.stall_sample = (last, format_stack(frame))
        return True


class ReactorLagMonitor:
    """Measures the reactor's lateness on ``clock`` (see the module docstring).

    ``start()`` schedules the first tick; ``stop()`` cancels the next one and ends the watchdog.
    ``histogram`` holds the lags (ms); ``stalls`` counts ticks later than ``stall_ms``.
    """

    log = Logger()

    def __init__(self, clock, interval: float = 0.01, stall_ms: float = 50.0, cpu_clock=time.thread_time,
                 process_clock=time.process_time):
        self.clock = clock
        self._cpu_clock = cpu_clock
        self._process_clock = process_clock
        self.interval = interval
        self.stall_ms = stall_ms
        self.histogram = LagHistogram()
        self.stalls = 0
        self.last_tick = None       # clock time of the last tick (read by the watchdog thread)
        self.stall_sample = None    # (last_tick, stack) the watchdog sampled during a stall
        self._due = None
        self._last_cpu = self._last_process = 0.0
        self._call = None
        self._watchdog_stop = None

    def start(self) -> None:
        if self._call is not None:
            return
        self.last_tick = self.clock.seconds()
        self._last_cpu, self._last_process = self._cpu_clock(), self._process_clock()
        self._schedule()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self._watchdog_stop is not None:
            self._watchdog_stop.set()
            self._watchdog_stop = None

    def _schedule(self) -> None:
        self._due = self.clock.seconds() + self.interval
        self._call = self.clock.callLater(self.interval, self._tick)

    def _tick(self) -> None:
        now = self.clock.seconds()
        lag_ms = max(0.0, (now - self._due) * 1000.0)
        self.histogram.observe(lag_ms)
        sample, self.stall_sample = self.stall_sample, None
        previous, self.last_tick = self.last_tick, now
        cpu, process = self._cpu_clock(), self._process_clock()
        cpu_ms, self._last_cpu = (cpu - self._last_cpu) * 1000.0, cpu
        process_ms, self._last_process = (process - self._last_process) * 1000.0, process
        if lag_ms > self.stall_ms:
            self.stalls += 1
            where = sample[1] if sample is not None and sample[0] == previous else None
            # Reactor CPU far below the wall time: it was waiting, not computing. Then the process's
            # CPU tells the rest: near the wall time, another of our threads ran (holding the GIL);
            # low too, the machine did not run us (other jobs) or a blocking call/lock held us.
            self.log.warn("reactor stalled {lag_ms:.0f} ms (on CPU in {wall_ms:.0f} ms: reactor thread "
                          "{cpu_ms:.0f}, whole process {process_ms:.0f}); it was running: {where}",
                          lag_ms=lag_ms, cpu_ms=cpu_ms, process_ms=process_ms,
                          wall_ms=(now - previous) * 1000.0,
                          where=where or "(no sample: the watchdog thread is off or did not run)")
        self._schedule()

    def watch_thread(self, thread_id: int | None = None, now=None) -> None:
        """Start the watchdog thread over ``thread_id`` (default: the calling thread, which must be
        the reactor's). ``now`` is the watchdog's clock, in the same time base as ``clock.seconds``
        (default: ``clock.seconds`` itself, safe to call from a thread for the real reactor)."""
        if self._watchdog_stop is not None:
            return
        watchdog = StallWatchdog(self, thread_id if thread_id is not None else threading.get_ident())
        now = now or self.clock.seconds
        stop = self._watchdog_stop = threading.Event()

        def run():
            while not stop.wait(self.interval):
                watchdog.check(now())

        threading.Thread(target=run, name="reactor-lag-watchdog", daemon=True).start()
