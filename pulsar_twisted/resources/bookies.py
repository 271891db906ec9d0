"""
Bookie registrations in the metadata store, BookKeeper's layout: the bookie side writes them, the
ledger client and the auditor read them.

A writable bookie holds an EPHEMERAL node ``/ledgers/available/<bookie_id>``, a read-only one
``/ledgers/available/readonly/<bookie_id>``. Ephemeral nodes vanish with the metadata session that
made them, so a bookie that dies (or loses its ZooKeeper session) leaves the lists by itself.
Every function takes an ``IMetadataStore`` and returns a Deferred (or is a coroutine).
"""

from pulsar_twisted.metadata.layout import AVAILABLE_PATH, READONLY_NAME, READONLY_PATH


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
