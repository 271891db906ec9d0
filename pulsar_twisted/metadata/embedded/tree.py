"""
The embedded metadata store's in-memory tree: nodes by path, and path rules shared with the ZooKeeper store.

Pure data, no I/O and no Twisted: the store (``store.py``) changes the nodes directly for its writes; the
operations here are the ones replay and snapshots need, in the record form of ``log_format``.
"""

from __future__ import annotations

from typing import Optional

from pulsar_twisted.metadata.embedded.log_format import MAX_PATH_BYTES, CorruptStoreError, encode_set


#: The children of a node that has none: shared and immutable (an empty set is 216 bytes, and most
#: nodes, a managed ledger's or a ledger's, are leaves). ``Node.add_child`` makes a node its own set.
NO_CHILDREN = frozenset()


class Node:
    """One node: value (bytes, or a record whose ``bytes()`` they are: ``data()``), version, times
    in ms, ephemeral owner, next sequential-child number, children (``children`` is read-only to
    callers: ``add_child`` / ``remove_child`` change it).

    ``children`` holds the children's full paths, the very str objects that key ``Tree.nodes``, not
    their last segments: a name would be a second string per node (~80 bytes for a ledger's or a
    managed ledger's node, issue 14: memory per topic). Sorted, full paths come in the order of
    their names (one parent, one prefix); ``child_names`` gives the names.

    ``owner`` and ``seq`` share one slot, None for the nodes that have neither (persistent, never
    a sequential parent: almost all): six slots take an 80-byte block where seven took 96."""

    __slots__ = ("value", "version", "ctime", "mtime", "children", "_owner_seq")

    def __init__(self, value: bytes, ctime: int, owner: Optional[int] = None):
        self.value = value
        self.version = 0
        self.ctime = ctime
        self.mtime = ctime
        self.children: set[str] | frozenset = NO_CHILDREN
        #: ``(owner, seq)``, or None for ``(None, 0)``.
        self._owner_seq = None if owner is None else (owner, 0)

    @property
    def owner(self) -> Optional[int]:
        """The session id of an ephemeral node's session, else None."""
        pair = self._owner_seq
        return None if pair is None else pair[0]

    @property
    def seq(self) -> int:
        """The next sequential-child counter."""
        pair = self._owner_seq
        return 0 if pair is None else pair[1]

    @seq.setter
    def seq(self, value: int) -> None:
        owner = self.owner
        self._owner_seq = None if owner is None and value == 0 else (owner, value)

    def add_child(self, path: str) -> None:
        """Add the child at ``path`` (pass the key of its ``Tree.nodes`` entry, to share it)."""
        if self.children is NO_CHILDREN:
            self.children = {path}
        else:
            self.children.add(path)

    def remove_child(self, path: str) -> None:
        children = self.children
        if path in children:
            children.discard(path)
            if not children:
                self.children = NO_CHILDREN

    def child_names(self, path: str) -> list[str]:
        """The children's names, sorted; ``path`` is this node's own path."""
        cut = 1 if path == "/" else len(path) + 1
        return sorted(child[cut:] for child in self.children)

    def data(self) -> bytes:
        """The value's bytes (``value`` may be a record given to ``put``: see ``store._kept``)."""
        value = self.value
        return value if isinstance(value, bytes) else bytes(value)

    def set_op(self, path: str, raw: Optional[bytes] = None) -> bytes:
        """The node's set operation; ``raw``: its value's bytes when the caller has them."""
        return encode_set(path, self.data() if raw is None else raw, self.version, self.ctime, self.mtime,
                          self.seq)


def parent_of(path: str) -> str:
    """The parent of an absolute path ("/" for a top-level node)."""
    return path.rsplit("/", 1)[0] or "/"


def check_path(path: str) -> None:
    """
    Raise ValueError unless ``path`` is absolute, without empty segments or a trailing slash, free of
    NUL and encodable in a log record (valid UTF-8 of at most ``MAX_PATH_BYTES``). Every write checks
    this before it changes the tree, so a node the log could not record never exists.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"metadata path must be an absolute str: {path[:100]!r}")
    if len(path) > MAX_PATH_BYTES:
        raise ValueError(f"metadata path longer than {MAX_PATH_BYTES} bytes: {path[:100]!r}...")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise ValueError(f"metadata path has an empty segment: {path[:100]!r}")
    if "\x00" in path:
        raise ValueError(f"metadata path contains NUL: {path[:100]!r}")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"metadata path is not valid Unicode (lone surrogate): {path[:100]!r}") from None
    if size > MAX_PATH_BYTES:
        raise ValueError(f"metadata path longer than {MAX_PATH_BYTES} bytes: {path[:100]!r}...")


class Tree:
    """The nodes by path, with the persistent-state operations that replay and snapshots use."""

    def __init__(self):
        self.nodes: dict[str, Node] = {"/": Node(b"", 0)}
        #: While a snapshot's cut is open: the set operation (None: no persistent node) each path had
        #: at the cut, for every path changed since; ``preserve`` fills it before a change.
        self.cut: Optional[dict[str, Optional[bytes]]] = None

    def apply(self, ops: list) -> None:
        """Apply decoded operations (from the log or a snapshot)."""
        for op in ops:
            if op[0] == "S":
                _, path, value, version, ctime, mtime, seq = op
                node = self.nodes.get(path)
                if node is None:
                    parent = self.nodes.get(parent_of(path))
                    if parent is None:
                        raise CorruptStoreError(f"record creates {path} before its parent")
                    node = self.nodes[path] = Node(value, ctime)
                    parent.add_child(path)
                node.value, node.version, node.ctime, node.mtime, node.seq = value, version, ctime, mtime, seq
            else:
                self.remove_subtree(op[1])

    def remove_subtree(self, path: str) -> list[tuple[str, Node]]:
        """Remove ``path`` and its descendants; return the removed ``(path, node)``, deepest first."""
        node = self.nodes.get(path)
        if node is None or path == "/":
            return []
        removed = []
        for child in sorted(node.children):
            removed.extend(self.remove_subtree(child))
        self.preserve(path)
        del self.nodes[path]
        self.nodes[parent_of(path)].remove_child(path)
        removed.append((path, node))
        return removed

    def snapshot_ops(self) -> list[bytes]:
        """The persistent nodes as set operations, every parent before its children."""
        ops = []
        stack = ["/"]
        while stack:
            path = stack.pop()
            node = self.nodes[path]
            if node.owner is not None:
                continue
            ops.append(node.set_op(path))
            stack.extend(sorted(node.children, reverse=True))
        return ops

    # -- a consistent cut, walked in slices -------------------------------------------------------
    #
    # A snapshot must hold the tree as it was at one transaction while writes go on. ``begin_cut``
    # takes the paths of that moment (a C-level copy of the dict's keys: milliseconds at 100k
    # nodes); every change after it first calls ``preserve``, which keeps the node's state of the
    # cut (copy on write, one path at a time). ``cut_ops`` then encodes any slice of those paths
    # as they were at the cut. The dict keeps insertion order and a node is always inserted after
    # its parent, so the paths come parents first, as replay needs.

    def begin_cut(self) -> list[str]:
        """Open a cut at the current state; returns its paths, parents before children."""
        self.cut = {}
        return list(self.nodes)

    def preserve(self, path: str) -> None:
        """Before ``path`` changes (value, version, times, counter, creation or removal)."""
        cut = self.cut
        if cut is not None and path not in cut:
            node = self.nodes.get(path)
            cut[path] = None if node is None or node.owner is not None else node.set_op(path)

    def cut_ops(self, paths: list[str]) -> list[bytes]:
        """The set operations of ``paths`` (from ``begin_cut``) as they were at the cut."""
        cut, nodes, ops = self.cut, self.nodes, []
        for path in paths:
            if path in cut:
                op = cut[path]
            else:
                node = nodes[path]      # unchanged since the cut, so still there
                op = None if node.owner is not None else node.set_op(path)
            if op is not None:
                ops.append(op)
        return ops

    def end_cut(self) -> None:
        self.cut = None
