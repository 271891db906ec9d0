"""Memory settings for the long-running daemons (called once start-up is done)."""

import ctypes
import ctypes.util
import gc


#: Young-generation threshold (allocations) and the two older ones (collections of the one below).
THRESHOLDS = (20_000, 20, 100)

#: Seconds between two looks at how many objects the collector still tracks in its oldest generation.
FREEZE_CHECK_SECONDS = 2.0

#: Objects promoted into the oldest generation since the last freeze that make the next look freeze them.
FREEZE_MIN_OBJECTS = 50_000


def tune_garbage_collector(gc_module=gc):
    """
    Make CPython's cyclic collector cheap for a message server, once start-up is done.

    Every message in flight (its Deferreds, op objects, callbacks) lives a few milliseconds, long
    enough to survive a young collection at the default threshold (700 allocations) and be
    promoted; the promotions then trigger full collections that walk every object of the
    process, modules included. Measured on unbatched publishing: 30-60% of broker time in the
    collector. So: freeze what start-up created (never collected again, it lives as long as the
    process), and collect the young generation per 20,000 allocations so in-flight objects die
    by reference counting before a collection sees them. Memory held in cycles is still
    reclaimed, only less often. (The one-off part of ``GcFreezePolicy.start``.)
    """
    gc_module.freeze()
    gc_module.set_threshold(*THRESHOLDS)


class GcFreezePolicy:
    """
    Keep full (generation 2) collections cheap in a daemon whose long-lived objects keep growing.

    A full collection walks every object the collector tracks: at 10k loaded topics that is
    0.4-0.9 s, at 100k many seconds, taken in whatever callback allocated last. ``gc.freeze()``
    moves the tracked objects to a permanent generation that no collection walks, so a full
    collection only costs as much as the objects created since the last freeze.

    ``start()`` freezes what start-up created and sets ``THRESHOLDS`` (``tune_garbage_collector``).
    Then every ``check_seconds`` (on ``clock``) it counts the objects in the oldest generation (only
    those promoted since the last freeze are there, so the count costs ~4 ms per 100k of them); once
    ``min_objects`` or more, it freezes them too (``gc.freeze()`` itself costs nothing: it splices
    lists). So after a burst of topic loads the new topics leave the walked generations within
    ``check_seconds``, and no look walks the heap. It does not collect before freezing: measured on
    a standalone creating 10k topics, a full collection of (at most 300k) recent objects held the
    reactor 281 ms, the very stall this avoids.

    The price: an object frozen and later dropped is still freed by reference counting, but a
    *cycle* of frozen objects is never reclaimed (``unfreeze()`` would bring back the walk), nor a
    cycle that was already garbage when it was frozen. Freezes happen only per ``min_objects`` of
    growth, so what leaks is bounded by the cyclic objects in flight at each freeze per
    ``min_objects`` of long-lived growth; ``freezes`` and ``frozen`` say how much was frozen. ``gc_module`` is the ``gc`` module, injectable for tests.
    """

    def __init__(self, clock, gc_module=gc, check_seconds: float = FREEZE_CHECK_SECONDS,
                 min_objects: int = FREEZE_MIN_OBJECTS):
        self.clock = clock
        self.gc = gc_module
        self.check_seconds = check_seconds
        self.min_objects = min_objects
        self.freezes = 0
        self._call = None

    @property
    def frozen(self) -> int:
        """How many objects are in the permanent generation."""
        return self.gc.get_freeze_count()

    def start(self) -> None:
        tune_garbage_collector(self.gc)
        self.freezes = 1
        self._schedule()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self) -> None:
        self._call = self.clock.callLater(self.check_seconds, self.check)

    def check(self) -> bool:
        """Freeze the oldest generation if it grew past ``min_objects``; say whether it did."""
        self._call = None
        try:
            old = len(self.gc.get_objects(generation=2))
            if old < self.min_objects:
                return False
            self.gc.freeze()
            self.freezes += 1
            return True
        finally:
            self._schedule()



#: glibc's mallopt parameter for the number of malloc arenas.
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> None:
    """
    Cap glibc's malloc arenas. Every thread that allocates (journal writer, checkpoint and
    metadata workers) otherwise gets an arena of its own, and payloads allocated in one and kept
    or freed in another leave partly used arenas behind: RSS under a sustained 1 GB publish varied
    from 215 to 309 MB between identical runs. Two arenas are plenty for one reactor thread and a
    few workers. Call it before any thread starts (the daemons' makeService functions do). A no-op
    where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, arenas)
