"""Garbage-collector settings for the long-running daemons (called once start-up is done)."""

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
