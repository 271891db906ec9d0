"""
The managed ledger factory (Pulsar's ``ManagedLedgerFactoryImpl``): opens managed ledgers by
name over one ledger client and one metadata store, keeping one instance per name.
"""

import weakref

from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.logger import Logger
from zope.interface import implementer

from pulsar_twisted.mledger import formats, offloads
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.interfaces import (
    IManagedLedgerFactory, ManagedLedgerClosedError, ManagedLedgerError)
from pulsar_twisted.mledger.ledger import ManagedLedgerImpl, State
from pulsar_twisted.mledger.cache import CacheBudget
from pulsar_twisted.mledger.timers import SharedTimers

log = Logger()

#: Seconds an open waits for the previous instance of the same name to finish closing.
CLOSE_WAIT_LIMIT = 10.0


@implementer(IManagedLedgerFactory)
class ManagedLedgerFactory:
    """
    ``ManagedLedgerFactory(ledger_client, metadata_store, reactor, default_config=None)``;
    ``default_config`` None means ``ManagedLedgerConfig()``. ``reactor`` provides
    ``callLater``/``seconds`` for rollover timers and listener coalescing. ``offloaders``: the
    broker's ``offload.offloader.OffloaderRegistry`` (reads of offloaded ledgers find their blob
    store through it), None without tiered storage.
    """

    def __init__(self, ledger_client, metadata_store, reactor, default_config=None, offloaders=None):
        self.ledger_client = ledger_client
        self.offloaders = offloaders
        #: managed ledger -> its ``offloads.OffloadState`` once an offload ran (weak: a dropped
        #: instance leaves nothing; not a slot of the managed ledger, which most never offload).
        self.offload_states = weakref.WeakKeyDictionary()
        self.store = metadata_store
        self.reactor = reactor
        self.default_config = default_config if default_config is not None else ManagedLedgerConfig()
        #: One entry-cache budget for all the managed ledgers (cache_size_bytes is broker-wide).
        self.cache_budget = CacheBudget(self.default_config.cache_size_bytes)
        #: The managed ledgers' rollover timers, one reactor call for all (timers.py).
        self.timers = SharedTimers(reactor)
        self._ledgers = {}
        self._opening = {}
        #: The opens waiting for a previous instance's close: time limit -> the open's Deferred
        #: (a shutdown fails them, as it does any later open).
        self._close_waits = {}
        #: name -> Deferred of an instance's initialisation in progress (and of its close, when a
        #: shutdown came meanwhile).
        self._initializing = {}
        #: managed ledger -> ``(not_before, delay, error text)`` for those whose last ledger creation failed:
        #: their adds are refused until ``not_before`` (``ManagedLedgerImpl._creation_refused``).
        #: Weak keys: an instance that is dropped leaves nothing behind.
        self.creation_backoff = weakref.WeakKeyDictionary()
        self._shut_down = False

    @property
    def ledgers(self):
        """name -> open ManagedLedgerImpl."""
        return dict(self._ledgers)

    def open(self, name: str, config=None):
        if self._shut_down:
            return defer.fail(ManagedLedgerClosedError("factory is shut down"))
        ml = self._ledgers.get(name)
        if ml is not None:
            if ml.state is not State.CLOSED:
                return defer.succeed(ml)
            return self._open_after_close(ml, name, config)
        d = defer.Deferred()
        waiters = self._opening.get(name)
        if waiters is not None:
            waiters.append(d)
            return d
        self._opening[name] = [d]
        ml = ManagedLedgerImpl(self, name, config or self.default_config, self.ledger_client,
                               self.store, self.reactor)

        def opened(_):
            waiters = self._opening.pop(name)
            if self._shut_down:
                # Shut down while it initialised: it is closed (its ledger, its cursors), not
                # handed out; the shutdown waits for that close.
                for w in waiters:
                    w.errback(ManagedLedgerClosedError("factory is shut down"))
                return ml.close().addErrback(
                    lambda f: log.warn("managed ledger {name}: closing it at shutdown failed: {err}",
                                       name=name, err=f.getErrorMessage()))
            self._ledgers[name] = ml
            for w in waiters:
                w.callback(ml)

        def failed(f):
            log.warn("could not open managed ledger {name}: {err}", name=name, err=f.getErrorMessage())
            for w in self._opening.pop(name):
                w.errback(f)

        self._initializing[name] = initialized = ml.initialize().addCallbacks(opened, failed)
        initialized.addBoth(self._initialized, name)
        return d

    def _initialized(self, result, name):
        del self._initializing[name]
        return result

    def _open_after_close(self, ml, name, config):
        """``ml`` is still closing (it is forgotten once closed): a new instance once the close is
        done, so that the new one starts from the cursor positions and the ledger the close
        records. A close that takes longer than ``CLOSE_WAIT_LIMIT`` (stuck on a metadata store or
        a bookie that does not answer: seen once under the nemesis, the topic never loaded
        again) is left to finish on its own and the new instance opens anyway, as Pulsar's
        factory does at once: the new instance fences the old one's ledgers and compare-and-sets
        its nodes, as a new owner on another broker would, so the late close can only fail."""
        d = defer.Deferred()

        def reopen():
            del self._close_waits[call]
            self._forget(ml)    # (after a close that failed before forgetting it, too)
            self.open(name, config).chainDeferred(d)

        def closed(_):
            if not call.active():
                return      # opened without waiting (below), or shut down
            call.cancel()
            reopen()

        def waited_enough():
            log.warn("managed ledger {name}: the previous instance is still closing after "
                     "{seconds:.0f} s; opening a new one without waiting for it",
                     name=name, seconds=CLOSE_WAIT_LIMIT)
            reopen()

        call = self.reactor.callLater(CLOSE_WAIT_LIMIT, waited_enough)
        self._close_waits[call] = d
        ml.when_closed().addCallback(closed)
        return d

    def _forget(self, ml):
        """A managed ledger closed or was fenced: the next open makes a new instance."""
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    def get(self, name: str):
        """The open managed ledger ``name`` or None."""
        return self._ledgers.get(name)

    def delete(self, name: str):
        return defer.Deferred.fromCoroutine(self._delete(name))

    async def _delete(self, name):
        ml = self._ledgers.get(name)
        if ml is not None:
            await self._close_for_delete(ml, name)
        path = formats.ledger_path(name)
        res = await self.store.get(path)
        if res is None:
            return None
        rows = formats.decode_ledger_info(res[0])[0]
        ledger_ids = [row[0] for row in rows if row[4] is None or not row[4].bk_deleted]
        offloaded = [(row[0], row[4]) for row in rows if row[4] is not None]
        for child in await self.store.get_children(path):
            cres = await self.store.get(f"{path}/{child}")
            if cres is not None:
                try:
                    lid = formats.decode_cursor_node(cres[0])[0]
                except formats.FormatError:
                    continue
                if lid >= 0:
                    ledger_ids.append(lid)
        await self.store.delete_recursive(path)
        for lid in ledger_ids:
            try:
                await self.ledger_client.delete_ledger(lid)
            except Exception as e:
                log.warn("deleting managed ledger {name}: ledger {lid}: {err}", name=name, lid=lid, err=e)
        for lid, context in offloaded:
            await offloads.delete_objects(self, name, lid, context)
        return None

    async def _close_for_delete(self, ml, name):
        """``ml.close()`` before its data is deleted, waited for at most CLOSE_WAIT_LIMIT (as an
        open and a shutdown wait). A close still going then (stuck on a bookie or a metadata store
        that does not answer) fails the delete, and so does a new instance of the name opened
        meanwhile: an open waits for the close no longer than that either, so a delete that went
        on after a late close would remove the new instance's metadata and ledgers under it,
        messages it acknowledged with them."""
        def late(result):
            if isinstance(result, Failure):
                log.warn("managed ledger {name}: its close for a delete failed late: {err}",
                         name=name, err=result.getErrorMessage())
        if await self._at_most_close_wait(ml.close(), late) is _TIMED_OUT:
            raise ManagedLedgerError(f"managed ledger {name} is still closing after "
                                     f"{CLOSE_WAIT_LIMIT:.0f} s: not deleted; try again")
        self._forget(ml)    # (after a close that failed before forgetting it, too)
        if self._ledgers.get(name) is not None or name in self._opening:
            raise ManagedLedgerError(f"managed ledger {name} was opened again while it closed for "
                                     f"its delete: not deleted")

    def _at_most_close_wait(self, d, late=lambda result: None):
        """A Deferred firing as ``d`` does (result or failure), or with ``_TIMED_OUT`` once
        CLOSE_WAIT_LIMIT has passed first. ``d`` is not cancelled (a close stuck on a bookie or a
        metadata store goes on by itself); what it ends with after the limit goes to ``late``."""
        waited = defer.Deferred()

        def fired(result):
            if call.active():
                call.cancel()
                (waited.errback if isinstance(result, Failure) else waited.callback)(result)
            else:
                late(result)
            return None

        call = self.reactor.callLater(CLOSE_WAIT_LIMIT, waited.callback, _TIMED_OUT)
        d.addBoth(fired)
        return waited

    def list_names(self):
        d = self.store.get_children(formats.ROOT)
        d.addCallback(lambda children: [formats.name_from_segment(c) for c in children])
        return d

    def shutdown(self):
        self._shut_down = True
        waits, self._close_waits = self._close_waits, {}
        for call, d in waits.items():
            call.cancel()
            d.errback(ManagedLedgerClosedError("factory is shut down"))
        closing = {name: ml.close() for name, ml in list(self._ledgers.items())}
        # (An initialisation's Deferred never fails: ``opened``/``failed`` take its outcome.)
        closing.update(self._initializing)

        def forget(result, name):
            del closing[name]
            return result
        for name, d in list(closing.items()):
            d.addBoth(forget, name)

        def closed(result):
            if result is _TIMED_OUT:
                # As an open does: a close stuck on a bookie or a metadata store that does not
                # answer must not hold the daemon's stop for good. What it had not written yet is
                # what a crash would leave: the next owner recovers the ledger and redelivers from
                # the cursor positions last written.
                log.warn("managed ledger factory: shutting down with {n} managed ledgers still "
                         "closing after {seconds:.0f} s: {names}", n=len(closing),
                         seconds=CLOSE_WAIT_LIMIT, names=", ".join(sorted(closing)[:10]))
            self.timers.stop()
        all_closed = defer.DeferredList(list(closing.values()), consumeErrors=True)
        return self._at_most_close_wait(all_closed).addCallback(closed)


#: What ``_at_most_close_wait`` fires with when the limit passed first.
_TIMED_OUT = object()
