"""
Memory and speed of the delayed-delivery tracker: hold N messages (default 1,000,000) and
report bytes per held message and the time to add and release them.

    python scripts/bench_delayed.py [N]
"""

import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import task

from pulsar_twisted.broker.delayed import DelayedDeliveryTracker
from pulsar_twisted.common.position import Position


def main(n: int) -> None:
    clock = task.Clock()
    clock.advance(1_700_000_000)
    released = [0]
    tracker = DelayedDeliveryTracker(clock, 1000, lambda due: released.__setitem__(0, released[0] + len(due)))
    now_ms = int(clock.seconds() * 1000)
    positions = [Position(1000 + i // 50000, i % 50000) for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    for i, position in enumerate(positions):
        # Delays spread over an hour, not in order.
        tracker.hold(position, now_ms + 5000 + (i * 7919) % 3_600_000)
    add_s = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    clock.advance(0)
    started = time.perf_counter()
    clock.advance(3700)
    release_s = time.perf_counter() - started
    tracker.clear()
    started = time.perf_counter()
    for i, position in enumerate(positions):
        tracker.hold(position, now_ms + 5000 + (i * 7919) % 3_600_000)
    add_untraced_s = time.perf_counter() - started
    print(f"messages held:          {n:,}")
    print(f"memory while held:      {held / 1e6:.1f} MB = {held / n:.1f} bytes/message")
    print(f"hold (add) time:        {add_untraced_s:.2f} s = {add_untraced_s / n * 1e6:.2f} us/message "
          f"({add_s / n * 1e6:.2f} under tracemalloc)")
    print(f"release time:           {release_s:.2f} s (all released at once: {released[0]:,})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
