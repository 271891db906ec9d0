"""
The metadata store contract shared by the embedded and ZooKeeper backends.

Paths are absolute, ``/``-separated, without a trailing slash (``/ledgers/L0000000001``).
Values are bytes. A writer may also hand over an immutable record whose ``bytes(record)``
(``__bytes__``) are the value, the same bytes every time: it is stored as those bytes, reads
return bytes, and a store may keep the record instead of a copy of its bytes (the embedded
store does: a ledger's metadata is held by its handle anyway, issue 14). Every node carries a
version that starts at 0 on creation and grows by one on each write, so that callers can do
compare-and-set (``expected_version``).
"""

from dataclasses import dataclass
from typing import Callable, Optional

from zope.interface import Attribute, Interface


class MetadataStoreError(Exception):
    """Base class of the errors a metadata store returns (as Deferred failures)."""


def value_bytes(value) -> bytes:
    """The bytes of a value given to ``put`` / ``put_all``: bytes, a bytearray or memoryview, or a
    record with ``__bytes__`` (see the module docstring); TypeError for anything else."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)     # a copy (bytearray) or plain bytes (a subclass), as ever
    if not isinstance(value, str) and hasattr(type(value), "__bytes__"):
        raw = bytes(value)
        if isinstance(raw, bytes):
            return raw
    raise TypeError(f"metadata values are bytes, not {type(value).__name__}")


class MetadataUnavailableError(MetadataStoreError):
    """The store cannot be reached for now: its session expired, its connection was lost or a call
    timed out. The operation may or may not have been applied; a caller retries after the session
    is back (the broker answers ServiceNotReady, which clients retry)."""


class NotFoundError(MetadataStoreError):
    """The path does not exist."""


class BadVersionError(MetadataStoreError):
    """``expected_version`` did not match the node's current version."""


class AlreadyExistsError(MetadataStoreError):
    """A create (``expected_version=-1``) found the node already there."""


class NotEmptyError(MetadataStoreError):
    """A delete found children under the node."""


@dataclass(frozen=True)
class Stat:
    """What the store knows about one node."""

    path: str
    version: int
    created_ms: int
    modified_ms: int
    ephemeral: bool = False


@dataclass(frozen=True)
class Notification:
    """A change seen by a listener: ``kind`` is "created", "modified", "deleted" or "children"."""

    kind: str
    path: str


class IMetadataStore(Interface):
    """
    A hierarchical, versioned key-value store (ZooKeeper's model). All methods return Deferreds.
    Parents are created implicitly by ``put`` (as persistent empty nodes).
    """

    def get(path: str):
        """Deferred firing with ``(value: bytes, stat: Stat)`` or ``None`` when absent."""

    def exists(path: str):
        """Deferred firing with a ``Stat`` or ``None``."""

    def get_children(path: str):
        """Deferred firing with the sorted child names (not paths); [] when absent."""

    def put(path: str, value: bytes, expected_version: Optional[int] = None,
            ephemeral: bool = False, sequential: bool = False):
        """
        Write ``value``. ``expected_version`` None: unconditional; -1: must not exist
        (AlreadyExistsError); n >= 0: must be at version n (BadVersionError / NotFoundError).
        ``sequential`` appends a 10-digit zero-padded counter to the last path segment (the
        final path is in the returned Stat). Ephemeral nodes vanish with the session that
        made them. Fires with the new ``Stat`` once durable.
        """

    def put_all(writes):
        """
        Make several writes atomically: ``writes`` is a list of ``(path, value, expected_version)``
        with ``expected_version`` -1 (create a persistent node; missing parents are created) or
        n >= 0 (update the node at version n). Either every write is applied or none is, also
        across a crash, and they cost one durable commit (a ZooKeeper multi; one log record of
        the embedded store). Paths must be distinct and none below another (ValueError). Fires
        with the list of new ``Stat``s, in order, once durable; fails with the error the first
        refused write would have had on its own (AlreadyExistsError, BadVersionError,
        NotFoundError, ...), carrying that write's position in ``writes`` as ``failed_index``.
        A new topic's first ledger and its managed ledger's node are written this way.
        """

    def delete(path: str, expected_version: Optional[int] = None):
        """Remove one node (NotFoundError, BadVersionError, NotEmptyError)."""

    def delete_recursive(path: str):
        """Remove a node and everything under it; no error when absent."""

    def register_listener(listener: Callable[[Notification], None]):
        """Call ``listener`` for every change under the store, in order, in the reactor thread."""

    def register_session_listener(listener: Callable[[str], None]):
        """
        Call ``listener(state)`` in the reactor thread when the session changes: "suspended",
        "lost", "reconnected", "expired-new-session" (a loss always comes as "lost" then
        "expired-new-session"). The embedded store's session never changes, so it never calls.
        """

    def close():
        """Release the store (ends the session: ephemeral nodes go). Returns a Deferred."""

    session_id = Attribute("An identifier of this store client's session.")
