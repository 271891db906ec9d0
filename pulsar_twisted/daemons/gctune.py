"""Memory settings for the long-running daemons (called once start-up is done)."""

import ctypes
import ctypes.util
import gc


def tune_garbage_collector():
    """
    Make CPython's cyclic collector cheap for a message server, once start-up is done.

    Every message in flight (its Deferreds, op objects, callbacks) lives a few milliseconds, long
    enough to survive a young collection at the default threshold (700 allocations) and be
    promoted; the promotions then trigger full collections that walk every object of the
    process, modules included. Measured on unbatched publishing: 30-60% of broker time in the
    collector. So: freeze what start-up created (never collected again, it lives as long as the
    process), and collect the young generation per 20,000 allocations so in-flight objects die
    by reference counting before a collection sees them. Memory held in cycles is still
    reclaimed, only less often.
    """
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


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
