"""
``TurnLog``: the "Loaded topic <name>" lines of one reactor turn as one log event.

Pulsar logs every topic it creates or loads. With thousands of topics created per second that line
was an eighth of the broker's CPU per creation (issue 14, item 4: formatting, a write and a flush per
event), so the lines of one turn are gathered and logged together at its end: a single load is
logged exactly as before (``"Loaded topic {topic}"``); a burst is one event whose text holds one
``Loaded topic <name>`` line per topic (the file observer indents the lines after the first), so
every name is still in the log and a search for a topic's line still finds it.
"""

from __future__ import annotations

__all__ = ["TurnLog"]


class TurnLog:
    """``TurnLog(log, clock)``: ``add(name)`` queues a topic's line; the turn's lines go out in
    one event from a ``clock.callLater(0)``; ``flush()`` writes what is queued at once (on stop)."""

    def __init__(self, log, clock):
        self._log = log
        self._clock = clock
        self._names: list[str] = []
        self._call = None

    def add(self, name: str) -> None:
        self._names.append(name)
        if self._call is None:
            self._call = self._clock.callLater(0, self.flush)

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
