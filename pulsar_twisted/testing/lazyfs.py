"""
A FUSE filesystem that loses every write not made durable, as a power cut would (after Jepsen's lazyfs).

``LazyFileSystem`` keeps the whole tree it serves in memory (the volatile state, what programs see) over a
backing directory that holds only the durable state. Nothing reaches the backing directory except through
the calls that make data durable on a real disk:

- ``fsync``/``fdatasync`` of a file makes that file's *contents* durable (copied to each durable name
  of it; kept aside while it has none);
- ``fsync`` of a directory makes that directory's *entries* durable: names created, renamed in or out,
  unlinked since its last fsync. A file created and fsynced but whose directory was never fsynced is
  gone after a cut, as on a strict POSIX filesystem (fsync(2): "an explicit fsync() on a file descriptor
  for the directory is also needed").

A *cut* throws the volatile state away and reloads the tree from the backing directory. Open files
become stale (every call on them fails with EIO). A *dead* cut, as a power cut, also fails every later
call with EIO until the next mount, so nothing more can be made durable. An *armed* cut is a dead cut
that happens inside the N-th write from now, so it always lands with that write (at least) not yet
durable, wherever the program is in its write/fsync cycle. Killing the filesystem's process is a cut
too: the backing directory is always exactly the durable state, so a new mount on it sees what
survived.

Hard links and symlinks are not supported (nothing here needs them).

Run as a process: ``python -m pulsar_twisted.testing.lazyfs BACKING MOUNTPOINT``. It prints ``ready``
once mounted and reads commands on stdin, one a line, answering each with one line: ``cut`` and
``cut dead`` (answer ``cut <json stats of what was dropped>``), ``arm N`` (answer ``arm ok``),
``wait-cut SECONDS`` (answer ``wait-cut <json stats>`` once the armed cut has happened, or
``wait-cut null``), ``stats`` (``stats <json>``), ``quit`` (unmount and exit).
End of stdin also unmounts, so a test process that dies takes its mount with it. ``LazyFSMount`` drives
such a process for blocking (``SynchronousTestCase``) tests; ``unavailable_reason()`` says why FUSE
cannot be used here (tests skip on it).
"""

import atexit
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

class _Node:
    """A file (``data``) or a directory (``entries``) of the volatile tree.

    Files: ``dirty_from`` is the lowest offset changed since the last fsync (None: clean), ``shadow``
    the durable contents while the durable tree names the file nowhere (None while it does: then the
    backing file is the durable copy). Directories: ``durable`` is the entry map as of the last fsync
    of the directory (its durable entries)."""

    __slots__ = ("is_dir", "data", "entries", "durable", "dirty_from", "shadow", "mode", "mtime")

    def __init__(self, is_dir: bool, mode: int):
        self.is_dir = is_dir
        self.mode = mode
        self.mtime = time.time()
        self.data = None if is_dir else bytearray()
        self.entries = {} if is_dir else None
        self.durable = {} if is_dir else None
        self.dirty_from = None
        self.shadow = None if is_dir else b""

    def dirty(self, offset: int) -> None:
        if self.dirty_from is None or offset < self.dirty_from:
            self.dirty_from = offset


def _fuse_error(code: int):
    from mfusepy import FuseOSError
    return FuseOSError(code)


class LazyFileSystem:
    """The filesystem's state and its FUSE operations (an mfusepy ``Operations``; see the module
    docstring). Every operation holds one lock, so ``cut`` from a control thread is atomic with
    respect to them."""

    use_ns = True

    def __init__(self, backing: str):
        self.backing = os.path.abspath(backing)
        self._lock = threading.RLock()
        self._handles = {}      # fh -> (node, flags)
        self._next_fh = 1
        self.counters = dict(writes=0, write_bytes=0, fsyncs=0, dir_fsyncs=0, cuts=0)
        self.dead = False
        self._armed = None          # writes left before an armed cut
        self.armed_cut = None       # what the armed cut dropped, once it happened
        self.armed_event = threading.Event()
        self.root = self._load()

    # ------------------------------------------------------------------ durable state <-> backing

    def _load(self) -> _Node:
        """The tree as the backing directory holds it (all of it durable)."""
        def load_dir(path):
            node = _Node(True, 0o755)
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isdir(full):
                    child = load_dir(full)
                else:
                    child = _Node(False, stat.S_IMODE(os.stat(full).st_mode))
                    with open(full, "rb") as f:
                        child.data = bytearray(f.read())
                    child.shadow = None
                node.entries[name] = child
            node.durable = dict(node.entries)
            return node
        return load_dir(self.backing)

    def _durable_map(self) -> dict:
        """Relative path -> node, for every name the durable tree holds (the backing directory's)."""
        out = {}

        def walk(node, prefix):
            for name, child in node.durable.items():
                path = f"{prefix}{name}"
                out[path] = child
                if child.is_dir:
                    walk(child, path + "/")
        walk(self.root, "")
        return out

    def _backing_path(self, relative: str) -> str:
        return os.path.join(self.backing, relative)

    def _sync_file(self, node: _Node) -> None:
        if node.dirty_from is None:
            return
        paths = [p for p, n in self._durable_map().items() if n is node]
        if paths:
            start = node.dirty_from
            for relative in paths:
                fd = os.open(self._backing_path(relative), os.O_WRONLY)
                try:
                    os.pwrite(fd, bytes(node.data[start:]), start)
                    os.ftruncate(fd, len(node.data))
                finally:
                    os.close(fd)
        else:
            node.shadow = bytes(node.data)
        node.dirty_from = None

    def _sync_dir(self, node: _Node) -> None:
        before = self._durable_map()
        node.durable = dict(node.entries)
        after = self._durable_map()
        changed = {p for p in before.keys() | after.keys() if before.get(p) is not after.get(p)}
        # Everything under a changed name goes and comes back too (a renamed directory moves its tree).
        gone = {p for p in before if any(p == c or p.startswith(c + "/") for c in changed)}
        come = {p for p in after if any(p == c or p.startswith(c + "/") for c in changed)}
        moved = {id(n): n for p in gone | come for n in ((before.get(p), after.get(p)))
                 if n is not None and not n.is_dir}
        paths_before = {}
        for p, n in before.items():
            paths_before.setdefault(id(n), p)
        contents = {}
        for key, n in moved.items():
            if key in paths_before:
                with open(self._backing_path(paths_before[key]), "rb") as f:
                    contents[key] = f.read()
            else:
                contents[key] = n.shadow if n.shadow is not None else b""
        for relative in sorted(gone, key=lambda p: -p.count("/")):
            full = self._backing_path(relative)
            if before[relative].is_dir:
                shutil.rmtree(full, ignore_errors=True)
            elif os.path.lexists(full):
                os.unlink(full)
        for relative in sorted(come, key=lambda p: p.count("/")):
            n, full = after[relative], self._backing_path(relative)
            if n.is_dir:
                os.makedirs(full, exist_ok=True)
            else:
                with open(full, "wb") as f:
                    f.write(contents[id(n)])
                os.chmod(full, n.mode)
        still_named = {id(n) for n in after.values()}
        for key, n in moved.items():
            n.shadow = None if key in still_named else contents[key]

    def arm(self, writes: int) -> None:
        """Make the ``writes``-th write from now (1: the next) a dead cut, the write itself lost."""
        with self._lock:
            self._armed = max(1, int(writes))
            self.armed_cut = None
            self.armed_event.clear()

    def cut(self, dead: bool = False) -> dict:
        """Power cut: drop the volatile state, reload the durable one; open handles go stale; when
        ``dead``, every later call fails with EIO. Returns what was lost (bytes written and not
        fsynced, names not made durable)."""
        with self._lock:
            unsynced = volatile_names = 0

            def walk(node):
                nonlocal unsynced, volatile_names
                for name, child in node.entries.items():
                    if node.durable.get(name) is not child:
                        volatile_names += 1
                    if child.is_dir:
                        walk(child)
                    elif child.dirty_from is not None:
                        unsynced += len(child.data) - child.dirty_from
            walk(self.root)
            self.root = self._load()
            self._handles.clear()
            self.counters["cuts"] += 1
            self.dead = self.dead or dead
            return dict(unsynced_bytes=unsynced, volatile_names=volatile_names)

    # ------------------------------------------------------------------------------ path helpers

    def _alive(self) -> None:
        if self.dead:
            raise _fuse_error(errno.EIO)

    def _lookup(self, path: str) -> _Node:
        self._alive()
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir or part not in node.entries:
                raise _fuse_error(errno.ENOENT)
            node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[_Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise _fuse_error(errno.ENOTDIR)
        return parent, name

    def _handle(self, fh) -> tuple[_Node, int]:
        self._alive()
        try:
            return self._handles[fh]
        except KeyError:
            raise _fuse_error(errno.EIO) from None   # stale after a cut

    def _new_handle(self, node: _Node, flags: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = (node, flags)
        return fh

    # ------------------------------------------------------------------------------ operations

    def init(self, path):
        print("ready", flush=True)

    def destroy(self, path):
        pass

    def access(self, path, amode):
        with self._lock:
            self._lookup(path)
        return 0

    def getattr(self, path, fh=None):
        with self._lock:
            if fh is not None and fh in self._handles:
                node = self._handles[fh][0]
            else:
                node = self._lookup(path)
            ns = int(node.mtime * 1e9)
            if node.is_dir:
                return dict(st_mode=stat.S_IFDIR | node.mode, st_nlink=2 + sum(
                    1 for c in node.entries.values() if c.is_dir), st_size=4096, st_uid=os.getuid(),
                    st_gid=os.getgid(), st_atime=ns, st_mtime=ns, st_ctime=ns)
            return dict(st_mode=stat.S_IFREG | node.mode, st_nlink=1, st_size=len(node.data),
                        st_uid=os.getuid(), st_gid=os.getgid(), st_atime=ns, st_mtime=ns, st_ctime=ns,
                        st_blocks=(len(node.data) + 511) // 512)

    def readdir(self, path, fh):
        with self._lock:
            node = self._lookup(path)
            if not node.is_dir:
                raise _fuse_error(errno.ENOTDIR)
            return [".", ".."] + list(node.entries)

    def opendir(self, path):
        with self._lock:
            if not self._lookup(path).is_dir:
                raise _fuse_error(errno.ENOTDIR)
        return 0

    def releasedir(self, path, fh):
        return 0

    def fsyncdir(self, path, datasync, fh):
        with self._lock:
            node = self._lookup(path)
            self.counters["dir_fsyncs"] += 1
            self._sync_dir(node)
        return 0

    def mkdir(self, path, mode):
        with self._lock:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _fuse_error(errno.EEXIST)
            parent.entries[name] = _Node(True, stat.S_IMODE(mode))
            parent.mtime = time.time()
        return 0

    def rmdir(self, path):
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _fuse_error(errno.ENOENT)
            if not node.is_dir:
                raise _fuse_error(errno.ENOTDIR)
            if node.entries:
                raise _fuse_error(errno.ENOTEMPTY)
            del parent.entries[name]
        return 0

    def unlink(self, path):
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _fuse_error(errno.ENOENT)
            if node.is_dir:
                raise _fuse_error(errno.EISDIR)
            del parent.entries[name]
        return 0

    def rename(self, old, new):
        with self._lock:
            old_parent, old_name = self._parent(old)
            node = old_parent.entries.get(old_name)
            if node is None:
                raise _fuse_error(errno.ENOENT)
            new_parent, new_name = self._parent(new)
            target = new_parent.entries.get(new_name)
            if target is node:
                return 0
            if target is not None:
                if target.is_dir and not node.is_dir:
                    raise _fuse_error(errno.EISDIR)
                if node.is_dir and not target.is_dir:
                    raise _fuse_error(errno.ENOTDIR)
                if target.is_dir and target.entries:
                    raise _fuse_error(errno.ENOTEMPTY)
            del old_parent.entries[old_name]
            new_parent.entries[new_name] = node
        return 0

    def create(self, path, mode, flags):
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = parent.entries[name] = _Node(False, stat.S_IMODE(mode))
            elif flags & os.O_EXCL:
                raise _fuse_error(errno.EEXIST)
            elif flags & os.O_TRUNC:
                self._truncate(node, 0)
            return self._new_handle(node, flags)

    def open(self, path, flags):
        with self._lock:
            node = self._lookup(path)
            if node.is_dir:
                raise _fuse_error(errno.EISDIR)
            if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
                self._truncate(node, 0)
            return self._new_handle(node, flags)

    def read(self, path, size, offset, fh):
        with self._lock:
            node, _ = self._handle(fh)
            return bytes(node.data[offset:offset + size])

    def write(self, path, data, offset, fh):
        with self._lock:
            node, flags = self._handle(fh)
            if flags & os.O_APPEND:
                offset = len(node.data)
            end = offset + len(data)
            if offset > len(node.data):
                node.data.extend(bytes(offset - len(node.data)))
            node.data[offset:end] = data
            node.dirty(offset)
            node.mtime = time.time()
            self.counters["writes"] += 1
            self.counters["write_bytes"] += len(data)
            if self._armed is not None:
                self._armed -= 1
                if self._armed == 0:
                    self._armed = None
                    self.armed_cut = self.cut(dead=True)
                    self.armed_event.set()
                    raise _fuse_error(errno.EIO)
            if flags & (os.O_SYNC | os.O_DSYNC):
                self._sync_file(node)
            return len(data)

    def _truncate(self, node: _Node, length: int) -> None:
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(bytes(length - len(node.data)))
        node.dirty(min(length, len(node.data)))
        node.mtime = time.time()

    def truncate(self, path, length, fh=None):
        with self._lock:
            if fh is not None:
                node = self._handle(fh)[0]
            else:
                node = self._lookup(path)
            if node.is_dir:
                raise _fuse_error(errno.EISDIR)
            self._truncate(node, length)
        return 0

    def fsync(self, path, datasync, fh):
        with self._lock:
            node, _ = self._handle(fh)
            self.counters["fsyncs"] += 1
            self._sync_file(node)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        with self._lock:
            self._handles.pop(fh, None)
        return 0

    def chmod(self, path, mode):
        with self._lock:
            self._lookup(path).mode = stat.S_IMODE(mode)
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        with self._lock:
            node = self._lookup(path)
            node.mtime = times[1] / 1e9 if times else time.time()
        return 0

    def statfs(self, path):
        self._alive()
        st = os.statvfs(self.backing)
        return {key: getattr(st, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
            "f_namemax")}


# ------------------------------------------------------------------------------------ the process

def _control_loop(fs: LazyFileSystem, mountpoint: str) -> None:
    """Read commands on stdin (see the module docstring); on quit or EOF unmount, ending the FUSE loop."""
    for line in sys.stdin:
        command = line.strip()
        if command in ("cut", "cut dead"):
            print("cut " + json.dumps(fs.cut(dead=command == "cut dead")), flush=True)
        elif command.startswith("arm "):
            fs.arm(int(command.split()[1]))
            print("arm ok", flush=True)
        elif command.startswith("wait-cut "):
            fs.armed_event.wait(float(command.split()[1]))
            print("wait-cut " + json.dumps(fs.armed_cut), flush=True)
        elif command == "stats":
            with fs._lock:
                print("stats " + json.dumps(fs.counters), flush=True)
        elif command == "quit":
            break
        elif command:
            print(f"error unknown command {command!r}", flush=True)
    subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True)


def main(argv=None) -> int:
    import mfusepy
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m pulsar_twisted.testing.lazyfs BACKING MOUNTPOINT", file=sys.stderr)
        return 2
    backing, mountpoint = argv
    fs = LazyFileSystem(backing)
    threading.Thread(target=_control_loop, args=(fs, mountpoint), daemon=True, name="control").start()
    # direct_io and zero timeouts: the kernel caches neither pages nor attributes, so what a program
    # reads after a cut is what the filesystem now holds. hard_remove: unlink really unlinks (no
    # .fuse_hidden renames the model would have to make durable). auto_unmount: the mount goes away
    # with this process, even on kill -9.
    mfusepy.FUSE(fs, mountpoint, foreground=True, nothreads=True, fsname="lazyfs", hard_remove=True,
                 direct_io=True, attr_timeout=0, entry_timeout=0, negative_timeout=0, auto_unmount=True)
    return 0


# --------------------------------------------------------------------------- the test-side driver

class LazyFSError(Exception):
    """The filesystem process did not start or answer; the message carries its log."""


_probe = None


def unavailable_reason() -> str | None:
    """Why no lazyfs can be mounted on this machine (None if one can): tried once per process, by
    mounting one on an empty directory."""
    global _probe
    if _probe is not None:
        return _probe or None
    reason = ""
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        reason = f"mfusepy/libfuse not usable ({e}); install the 'fuse3' Debian package and mfusepy"
    if not reason and not os.path.exists("/dev/fuse"):
        reason = "no /dev/fuse on this machine"
    if not reason and shutil.which("fusermount3") is None:
        reason = "fusermount3 not found (Debian package fuse3)"
    if not reason:
        try:
            os.close(os.open("/dev/fuse", os.O_RDWR))
        except OSError as e:
            reason = f"/dev/fuse cannot be opened: {e}"
    if not reason:
        directory = tempfile.mkdtemp(prefix="lazyfs-probe-")
        mount = LazyFSMount(os.path.join(directory, "backing"), os.path.join(directory, "mnt"))
        try:
            mount.start(timeout=15)
        except LazyFSError as e:
            reason = f"a FUSE filesystem cannot be mounted here: {e}"
        finally:
            mount.stop()
            shutil.rmtree(directory, ignore_errors=True)
    _probe = reason
    return reason or None


_MOUNTED = set()


def _unmount_leftovers():
    for mount in list(_MOUNTED):
        mount.stop()


atexit.register(_unmount_leftovers)


class LazyFSMount:
    """One lazyfs process serving ``backing`` at ``mountpoint`` (both created if missing).

    Blocking: ``start()`` (returns once mounted), ``cut()`` (a power cut; returns what was dropped),
    ``arm()`` and ``wait_cut()`` (a power cut inside a later write), ``kill()`` (kill -9 of the
    process: a cut and an unmount), ``stats()``, ``stop()`` (unmount; safe to call twice, and at
    interpreter exit for a forgotten mount), ``restart()`` (stop, then mount the backing directory
    again)."""

    def __init__(self, backing: str, mountpoint: str, log_path: str = None):
        self.backing = os.path.abspath(backing)
        self.mountpoint = os.path.abspath(mountpoint)
        self.log_path = log_path or self.mountpoint.rstrip("/") + ".lazyfs.log"
        self.process = None
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)

    def start(self, timeout: float = 15.0) -> "LazyFSMount":
        from pulsar_twisted.testing.process import _REPO_ROOT
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, env.get("PYTHONPATH", "")])
        env["PYTHONWARNINGS"] = "ignore"
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pulsar_twisted.testing.lazyfs", self.backing, self.mountpoint],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, bufsize=0)
        _MOUNTED.add(self)
        line = self._read_line(timeout)
        if line != "ready":
            self.stop()
            raise LazyFSError(f"lazyfs did not mount {self.mountpoint} (got {line!r}): {self.log_tail()}")
        return self

    def _read_line(self, timeout: float) -> str:
        import select
        out = self.process.stdout
        deadline = time.monotonic() + timeout
        buffer = b""
        while not buffer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([out], [], [], remaining)[0]:
                return f"<no answer in {timeout}s>"
            chunk = out.read1(4096) if hasattr(out, "read1") else os.read(out.fileno(), 4096)
            if not chunk:
                return f"<exited {self.process.poll()}>"
            buffer += chunk
        return buffer.decode().strip()

    def _command(self, command: str, timeout: float = 30.0) -> str:
        if self.process is None or self.process.poll() is not None:
            raise LazyFSError(f"lazyfs at {self.mountpoint} is not running: {self.log_tail()}")
        self.process.stdin.write(command.encode() + b"\n")
        line = self._read_line(timeout)
        verb = command.split()[0]
        if not line.startswith(verb + " "):
            raise LazyFSError(f"lazyfs {command!r}: unexpected answer {line!r}: {self.log_tail()}")
        return line[len(verb) + 1:]

    def cut(self, dead: bool = False) -> dict:
        """Drop every write not made durable; the mount stays, its open files go stale; when
        ``dead``, every later call on the mount fails (EIO) until ``restart()``."""
        return json.loads(self._command("cut dead" if dead else "cut"))

    def arm(self, writes: int) -> None:
        """Cut (dead) inside the ``writes``-th write from now; see ``wait_cut``."""
        if self._command(f"arm {int(writes)}") != "ok":
            raise LazyFSError("arm not acknowledged")

    def wait_cut(self, timeout: float) -> dict | None:
        """What the armed cut dropped, once it has happened; None if it has not within ``timeout``."""
        return json.loads(self._command(f"wait-cut {timeout}", timeout=timeout + 10))

    def stats(self) -> dict:
        return json.loads(self._command("stats"))

    def stop(self, timeout: float = 15.0) -> None:
        process, self.process = self.process, None
        _MOUNTED.discard(self)
        if process is not None:
            try:
                process.stdin.write(b"quit\n")
                process.stdin.close()
            except OSError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
            process.stdout.close()
            self._log.close()
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True)

    def kill(self) -> None:
        """kill -9 the filesystem process: a power cut that also takes the mount away (the backing
        directory keeps the durable state; ``start()`` mounts it again)."""
        if self.process is not None:
            self.process.kill()
        self.stop()

    def restart(self, timeout: float = 15.0) -> "LazyFSMount":
        self.stop()
        return self.start(timeout)

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


if __name__ == "__main__":
    sys.exit(main())
