"""
How the ledger client talks to bookies: ``IBookieClient``, transport-neutral, and
``LocalBookieClient``, the in-process adapter over ``BookieStorage`` objects (standalone and
tests). A TCP implementation of the same interface comes with the bookie protocol.

Every method returns a Deferred and reports bookie-side conditions as the errors of
``pulsar_twisted.common.bk_errors`` (NoSuchLedgerError, NoSuchEntryError, LedgerFencedError,
UnauthorizedAccessError, BookieReadOnlyError, ...); a bookie that cannot be reached at all is a
BookieUnavailableError.
"""

from twisted.internet import defer
from zope.interface import Interface, implementer

from pulsar_twisted.common.bk_errors import BookieUnavailableError
from pulsar_twisted.wire.bookie import HEADER_SIZE, packed_lac


class IBookieClient(Interface):
    """Requests to bookies, addressed by bookie id (``host:port`` for the TCP client)."""

    def add_entry(bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes,
                  packed: bytes, recovery_add: bool = False):
        """Store a packed entry (see ``digest.pack_entry``). Deferred[None] once durable on the
        bookie. ``recovery_add`` is allowed on a fenced ledger (a recovering reader re-replicating)."""

    def read_entry(bookie_id: str, ledger_id: int, entry_id: int, fence: bool = False,
                   master_key: bytes = b""):
        """Deferred[bytes]: the packed entry. ``entry_id`` -1 means the highest entry stored.
        ``fence`` fences the ledger on that bookie first (recovery read; needs ``master_key``)."""

    def read_lac(bookie_id: str, ledger_id: int):
        """Deferred[int]: the highest LAC the bookie saw piggybacked on adds (-1 if none)."""

    def delete_ledger(bookie_id: str, ledger_id: int):
        """Deferred[None]: drop the ledger's entries from the bookie."""


@implementer(IBookieClient)
class LocalBookieClient:
    """
    ``IBookieClient`` over in-process storage objects: ``bookies`` maps bookie id to an object with
    the ``BookieStorage`` methods (``BookieStorage`` itself, or ``testing.fake_bookie.FakeBookie``).
    Calls go straight to the objects: no threads, no sockets. ``bookies`` is kept by reference, so
    adding or removing a key adds or removes a bookie (removed ones answer BookieUnavailableError).
    """

    def __init__(self, bookies: dict):
        self.bookies = bookies

    def _bookie(self, bookie_id):
        try:
            return self.bookies[bookie_id]
        except KeyError:
            raise BookieUnavailableError(f"bookie {bookie_id} is not available") from None

    def add_entry(self, bookie_id, ledger_id, entry_id, master_key, packed, recovery_add=False):
        try:
            bookie = self._bookie(bookie_id)
            if len(packed) < HEADER_SIZE:
                # As the TCP bookie answers it (BAD_REQUEST), not as a struct error from packed_lac.
                raise ValueError(f"entry body of {len(packed)} bytes is shorter than the entry header")
            # The bookie keeps the LAC the writer piggybacked, for read_lac; it stores the packed
            # bytes as they are and never re-encodes them.
            return bookie.add_entry(ledger_id, entry_id, packed, master_key,
                                    lac=packed_lac(packed), recovery_add=recovery_add)
        except Exception:
            return defer.fail()

    def add_entry_notify(self, waiter, bookie_id, ledger_id, entry_id, master_key, packed,
                         recovery_add=False):
        """``add_entry`` without a Deferred per entry: ``waiter.callback(None)`` once durable, or
        ``waiter.errback(failure)``, exactly when the Deferred would fire (``add_entries_notify``
        of one entry)."""
        self.add_entries_notify(waiter, bookie_id, ledger_id, master_key, ((entry_id, packed),),
                                recovery_add)

    def add_entries_notify(self, waiter, bookie_id, ledger_id, master_key, entries,
                           recovery_add=False):
        """Store packed entries ``(entry_id, packed)`` of one ledger on one bookie (the in-process
        hot path: a ledger handle's adds of one read, in entry order): ``waiter.callback(None)``
        once all are durable, ``waiter.errback(failure)`` once otherwise, with no Deferred per
        entry. Storage that takes a batch itself (``accepts_add_waiter``: ``BookieStorage``) gets
        it whole; other objects get one ``add_entry`` each, whose Deferreds are gathered."""
        try:
            bookie = self.bookies.get(bookie_id)
            if bookie is None:
                bookie = self._bookie(bookie_id)     # raises BookieUnavailableError
            for _, packed in entries:
                if len(packed) < HEADER_SIZE:
                    # As the TCP bookie answers it (BAD_REQUEST), not as a struct error from packed_lac.
                    raise ValueError(f"entry body of {len(packed)} bytes is shorter than the entry header")
            # The bookie keeps the LAC the writer piggybacked, for read_lac; it stores the packed
            # bytes as they are and never re-encodes them.
            if getattr(bookie, "accepts_add_waiter", False):
                bookie.add_entries(ledger_id, [(entry_id, packed, packed_lac(packed))
                                               for entry_id, packed in entries],
                                   master_key, waiter, recovery_add=recovery_add)
                return
            d = defer.gatherResults(
                [bookie.add_entry(ledger_id, entry_id, packed, master_key, lac=packed_lac(packed),
                                  recovery_add=recovery_add) for entry_id, packed in entries],
                consumeErrors=True)
            d.addErrback(lambda f: f.value.subFailure)
        except Exception:
            d = defer.fail()
        d.addCallbacks(lambda _: waiter.callback(None), waiter.errback)

    def read_entry(self, bookie_id, ledger_id, entry_id, fence=False, master_key=b""):
        try:
            bookie = self._bookie(bookie_id)
        except Exception:
            return defer.fail()
        if not fence:
            return defer.maybeDeferred(bookie.read_entry, ledger_id, entry_id)
        d = defer.maybeDeferred(bookie.fence_ledger, ledger_id, master_key)
        d.addCallback(lambda _: bookie.read_entry(ledger_id, entry_id))
        return d

    def read_lac(self, bookie_id, ledger_id):
        try:
            bookie = self._bookie(bookie_id)
        except Exception:
            return defer.fail()
        return defer.maybeDeferred(bookie.read_lac, ledger_id)

    def delete_ledger(self, bookie_id, ledger_id):
        try:
            bookie = self._bookie(bookie_id)
        except Exception:
            return defer.fail()
        return defer.maybeDeferred(bookie.delete_ledger, ledger_id)
