"""
Bookie registrations in the metadata store, BookKeeper's layout: the bookie side writes them, the
ledger client and the auditor read them.

A writable bookie holds an EPHEMERAL node ``/ledgers/available/<bookie_id>``, a read-only one
``/ledgers/available/readonly/<bookie_id>``. Ephemeral nodes vanish with the metadata session that
made them, so a bookie that dies (or loses its ZooKeeper session) leaves the lists by itself.
Every function takes an ``IMetadataStore`` and returns a Deferred (or is a coroutine).
"""

from pulsar_twisted.metadata.interfaces import AlreadyExistsError
from pulsar_twisted.metadata.layout import AVAILABLE_PATH, COOKIES_ROOT, READONLY_NAME, READONLY_PATH


def registration_path(bookie_id: str, read_only: bool = False) -> str:
    """The node announcing ``bookie_id`` in the given mode."""
    return f"{READONLY_PATH if read_only else AVAILABLE_PATH}/{bookie_id}"


def register_bookie(store, bookie_id: str, read_only: bool = False, value: bytes = b""):
    """Announce a bookie: an ephemeral node holding ``value`` that vanishes with the bookie's
    metadata session. Deferred firing with the Stat."""
    return store.put(registration_path(bookie_id, read_only), value, ephemeral=True)


def unregister_bookie(store, bookie_id: str, read_only: bool = False):
    """Withdraw a registration made by :func:`register_bookie` (e.g. going read-only)."""
    return store.delete(registration_path(bookie_id, read_only))


async def registered_bookies(store) -> tuple:
    """``(writable, readonly)`` frozensets of the bookie ids registered right now."""
    writable = await store.get_children(AVAILABLE_PATH)
    readonly = await store.get_children(READONLY_PATH)
    return frozenset(b for b in writable if b != READONLY_NAME), frozenset(readonly)


class CookieMismatchError(Exception):
    """The metadata store names another instance for this bookie id than its directories hold."""


async def check_cookie(store, bookie_id: str, instance: str, refuse_other_ids: bool = True) -> bool:
    """Check the cookie ``/ledgers/cookies/<bookie_id>`` against the ``instance`` of the bookie's
    directories (``bookie/cookie.py``), recording it when absent (True then). A different one raises
    CookieMismatchError: this id's directories were replaced (every one of them, or the local cookies
    would have refused the start) or are another bookie's, and what the id stored elsewhere in the
    cluster's ledgers is not in them, so serving under it would answer "no such entry" for entries
    it acknowledged; BookKeeper keeps the same cookie in ZooKeeper for this. A new id whose
    ``instance`` the store records for another id is refused too, unless ``refuse_other_ids`` is
    False (a bookie named after its ephemeral port, whose id changes at every start)."""
    path = f"{COOKIES_ROOT}/{bookie_id}"
    value = instance.encode()
    found = await store.get(path)
    if found is None and refuse_other_ids:
        # A new id: its directories must not be another id's (BookKeeper's local cookie names
        # the bookie for this). A bookie started under a new address over its old directories,
        # or a copy of another bookie's, would serve that bookie's ledgers under an id their
        # ensembles do not name, while the other id, started again, claims the same data.
        for other in await store.get_children(COOKIES_ROOT):
            held = await store.get(f"{COOKIES_ROOT}/{other}") if other != bookie_id else None
            if held is not None and held[0] == value:
                raise CookieMismatchError(
                    f"bookie {bookie_id}: its directories hold instance {instance}, which the metadata "
                    f"store records for bookie {other}: they are bookie {other}'s; not started. Start "
                    f"them under that id again, or, once bookie {other} is gone for good and its "
                    f"ledgers are re-replicated, delete {COOKIES_ROOT}/{other}")
    if found is None:
        try:
            await store.put(path, value, expected_version=-1)
            return True
        except AlreadyExistsError:
            found = await store.get(path)   # a race with another start under the same id
    if found is not None and found[0] != value:
        raise CookieMismatchError(
            f"bookie {bookie_id}: the metadata store names instance {found[0].decode(errors='replace')} "
            f"for it but its directories hold instance {instance}: they were replaced (their data is "
            f"gone) or belong to another bookie; not started. To start it as a new bookie once its "
            f"ledgers are re-replicated, delete {path}")
    return False
