"""
``LoadLog``: the "Loaded topic <name>" lines of a burst of loads as one log event.

Pulsar logs every topic it creates or loads. With thousands of topics created per second that line
was an eighth of the broker's CPU per creation (issue 14, item 4: formatting, a write and a flush
per event), so the lines of a short window (``WINDOW_SECONDS`` from the first) are logged together:
a single load is logged exactly as before (``"Loaded topic {topic}"``), only up to a window later;
a burst is one event whose text holds one ``Loaded topic <name>`` line per topic (the file
observer indents the lines after the first), so every name is still in the log and a search for a
topic's line still finds it.
"""

from __future__ import annotations

__all__ = ["LoadLog", "WINDOW_SECONDS"]

#: How long the first queued line waits for others. One reactor turn (0) was not enough: with the
#: official client's threads a turn loads a few topics, and the event was still 6% of the CPU.
WINDOW_SECONDS = 0.05


class LoadLog:
    """``LoadLog(log, clock, window=WINDOW_SECONDS)``: ``add(name)`` queues a topic's line; the
    lines queued within ``window`` seconds of the first go out in one event (a ``clock.callLater``);
    ``flush()`` writes what is queued at once (on stop)."""

    def __init__(self, log, clock, window: float = WINDOW_SECONDS):
        self._log = log
        self._clock = clock
        self._window = window
        self._names: list[str] = []
        self._call = None

    def add(self, name: str) -> None:
        self._names.append(name)
        if self._call is None:
            self._call = self._clock.callLater(self._window, self.flush)

    def flush(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        names, self._names = self._names, []
        if len(names) == 1:
            self._log.info("Loaded topic {topic}", topic=names[0])
        elif names:
            self._log.info("Loaded {count} topics:\n{lines}", count=len(names),
                           lines="\n".join(f"Loaded topic {name}" for name in names))
