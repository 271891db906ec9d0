"""
The bookie's cookies: one small file in each of its directories (the journal's, every ledger
directory, the index's) naming the bookie instance they belong to, as BookKeeper's ``current/VERSION``
cookies do. They let a bookie tell a directory it wrote from one that was wiped, replaced or brought
from another bookie, and refuse to start rather than serve from it.

Why it matters: a bookie that starts with its index or journal gone answers "no such ledger" or "no
such entry" for data it acknowledged. A writer's recovery counts such answers as the entry's absence,
so with one more bookie answering the same a ledger can be closed short of entries that were
acknowledged: a loss no later repair brings back. Refusing to start turns that into a bookie that is
down, which the writers work around (an ensemble change) until an operator restores the directory or
makes it a new bookie (moves the old directories aside).

Each cookie also records how many directories the bookie has (BookKeeper's cookie lists them): a
directory left out of the configuration holds entries the bookie acknowledged, which it would then
answer as missing just as if the directory had been wiped.

At start (``verify``, blocking, before anything is read):

- every directory holds the same cookie: the bookie starts;
- some hold one and others none, or two instances are mixed: refused (``CookieError``), nothing touched;
- fewer (or more) directories are configured than the cookies record: refused as well;
- none holds one: a new bookie, or one from before cookies; ``write`` gives every directory the cookie
  once the start has read what they hold (the index table made, the journal replayed), so a cookie is
  never on disk before the data it vouches for.

While a bookie runs it holds an exclusive ``flock`` on each of its directories (``lock``): a second
bookie process pointed at them is refused before it reads or writes a byte.

The index table (``index_table.py``) is made before the cookies, so a bookie whose index directory
has its cookie and not its table lost it (``verify`` reports the cookie, the index refuses the load).
"""

import fcntl
import os
import uuid

from pulsar_twisted.bookie.journal import fsync_dir

#: The cookie's file name in each directory, BookKeeper's.
COOKIE_NAME = "VERSION"
_STAGED_NAME = COOKIE_NAME + ".new"
_MAGIC = "pulsar-twisted bookie cookie 1"
_COUNT = "directories "     # the third line's key: how many directories the bookie has
_MAX_BYTES = 4096


class CookieError(Exception):
    """The bookie's directories do not belong together: it must not start."""


def read(directory: str, name: str = COOKIE_NAME) -> str | None:
    """The instance id of ``directory``'s cookie; None when it has none. A cookie that cannot be read
    (not ours, damaged) raises CookieError: it is no proof of anything."""
    found = _read(directory, name)
    return None if found is None else found[0]


def _read(directory: str, name: str = COOKIE_NAME):
    """``(instance id, number of directories)`` of ``directory``'s cookie (the number None in a
    cookie from before it was recorded); None when it has none; CookieError as ``read``."""
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_BYTES)
    except FileNotFoundError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    count = None
    if len(lines) == 3 and lines[2].startswith(_COUNT) and lines[2][len(_COUNT):].strip().isdigit():
        count = int(lines.pop()[len(_COUNT):])     # (any other third line: refused below)
    if len(lines) != 2 or lines[0] != _MAGIC or not lines[1].startswith("instance "):
        raise CookieError(f"{path} is not a bookie cookie of ours: not started; restore the directory "
                          f"or move it aside")
    return lines[1][len("instance "):].strip(), count


def verify(directories: list[str]) -> str | None:
    """The instance id all of ``directories`` share, or None when none has a cookie yet.
    Raises CookieError when they disagree (see the module docstring). Blocking.

    A directory without a cookie whose staged copy (``write``'s first step) names the instance the
    others hold saw a ``write`` interrupted by a crash: its cookie is put in place, not refused.
    Cookies from before the number of directories was recorded get it (``write`` again), once
    everything else agrees."""
    distinct = _distinct(directories)
    found = {d: _read(d) for d in distinct}
    instances = sorted({c[0] for c in found.values() if c is not None})
    if not instances:
        return None
    if len(instances) > 1:
        held = ", ".join(f"{d} ({c[0] if c else None})" for d, c in found.items())
        raise CookieError(f"the bookie's directories belong to different bookies: {held}; not started")
    instance = instances[0]
    counts = {c[1] for c in found.values() if c is not None and c[1] is not None}
    if counts and counts != {len(distinct)}:
        raise CookieError(
            f"the bookie's cookies record {' or '.join(map(str, sorted(counts)))} directories but "
            f"{len(distinct)} are configured ({', '.join(distinct)}): a directory left out holds "
            f"entries the bookie acknowledged, which it would serve as missing; not started. "
            f"Configure every one of its directories again (journal, ledger and index directories)")
    missing = [d for d, c in found.items() if c is None and not _finish(d, instance)]
    if missing:
        raise CookieError(
            f"{', '.join(missing)} holds no cookie while the bookie's other directories do (instance "
            f"{instance}): wiped or replaced, its data would be served as missing; not started. "
            f"Restore it, or move all of the bookie's directories aside to start it as a new bookie")
    if any(c is None or c[1] is None for c in found.values()):
        write(distinct, instance)       # (a staged copy put in place above has its number already)
    return instance


def _finish(directory: str, instance: str) -> bool:
    """Put a staged cookie of ``instance`` in place; False when ``directory`` has none."""
    try:
        staged = read(directory, _STAGED_NAME)
    except CookieError:
        return False
    if staged != instance:
        return False
    _put_in_place(directory)
    return True


def _put_in_place(directory: str) -> None:
    """The staged cookie becomes the cookie, durably."""
    os.replace(os.path.join(directory, _STAGED_NAME), os.path.join(directory, COOKIE_NAME))
    fsync_dir(directory)


def write(directories: list[str], instance: str | None = None) -> str:
    """Give every directory the cookie of ``instance`` (a new one if None), durably, in two steps: a
    staged copy written and synced in every directory, then each renamed into place. A crash in the
    first step leaves no cookie (the next start writes them afresh); in the second, staged copies
    that ``verify`` puts in place. Returns the instance id."""
    instance = instance or uuid.uuid4().hex
    directories = _distinct(directories)
    data = f"{_MAGIC}\ninstance {instance}\n{_COUNT}{len(directories)}\n".encode()
    for directory in directories:
        fd = os.open(os.path.join(directory, _STAGED_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(directory)
    for directory in directories:
        _put_in_place(directory)
    return instance


def lock(directories: list[str], held: dict) -> None:
    """Take an exclusive ``flock`` on each of ``directories`` that exists and is not in ``held``
    (path -> descriptor, kept for ``unlock``): a second bookie process started on the same
    directories (a copy of the configuration, a service started twice) is refused here, before it
    reads or writes anything, rather than writing journal files and entry logs beside the first.
    Called again once a start has made its missing directories, so that those are locked too. The
    locks go with the process, so a crash leaves none behind. CookieError when another process
    holds one (what this call took is released then). Blocking."""
    taken = []
    try:
        for directory in _distinct(directories):
            if directory in held:
                continue
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue
            taken.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CookieError(f"{directory} is in use by another bookie process: not started") from None
            held[directory] = fd
    except BaseException:
        _close_all(taken)
        raise


def unlock(held: dict) -> None:
    """Release what ``lock`` holds (closing a descriptor releases its flock)."""
    _close_all(held.values())
    held.clear()


def _close_all(fds) -> None:
    for fd in list(fds):
        try:
            os.close(fd)
        except OSError:
            pass


def _distinct(directories: list[str]) -> list[str]:
    """The directories once each (the journal may share a ledger directory)."""
    return list(dict.fromkeys(os.path.realpath(d) for d in directories))
