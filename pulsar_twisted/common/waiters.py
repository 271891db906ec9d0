"""
The waiter-and-ctx convention of the storage hot path (``LedgerHandle.add_entries_notify``,
``ManagedLedgerImpl.add_entries_notify``, ``PersistentTopic.publish_all``; Pulsar's
``asyncAddEntry(data, callback, ctx)``): a call made for several items takes one ``waiter`` and
a ctx per item. An item whose ctx is None is told as a Deferred would be
(``waiter.callback(result)`` / ``waiter.errback(failure)``); otherwise the items done together
are told in one ``waiter.adds_complete(results, ctxs)`` and each failure in
``waiter.add_failed(failure, ctx)``, so one waiter serves them all and no object is made per item.
"""

from twisted.logger import Logger

log = Logger()


def tell_done(done) -> None:
    """Tell completed items ``(waiter, ctx, result)``, in order: consecutive ones of one waiter
    with ctxs in one ``adds_complete`` call. An exception from a waiter is logged (as a Deferred
    would keep it) and the others still hear."""
    waiter, results, ctxs = None, [], []
    for d, ctx, result in done:
        if ctx is not None and d is waiter:
            results.append(result)
            ctxs.append(ctx)
            continue
        if results:
            _tell(waiter, results, ctxs)
            results, ctxs = [], []
        if ctx is None:
            waiter = None
            try:
                d.callback(result)
            except Exception:
                log.failure("a completion callback failed")
        else:
            waiter = d
            results.append(result)
            ctxs.append(ctx)
    if results:
        _tell(waiter, results, ctxs)


def _tell(waiter, results, ctxs) -> None:
    try:
        waiter.adds_complete(results, ctxs)
    except Exception:
        log.failure("a completion callback failed")


def tell_failed(waiter, ctx, failure) -> None:
    """Fail one item: ``errback(failure)``, or with a ctx ``add_failed(failure, ctx)``; an
    exception from the waiter is logged, so the items after it still hear."""
    try:
        if ctx is None:
            waiter.errback(failure)
        else:
            waiter.add_failed(failure, ctx)
    except Exception:
        log.failure("a failure callback failed")
