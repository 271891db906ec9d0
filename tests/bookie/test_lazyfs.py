"""
The power-loss filesystem (``pulsar_twisted.testing.lazyfs``) itself: what survives a cut is exactly
what fsync of files (contents) and of directories (names) made durable.

Each test mounts a real lazyfs process; they are skipped, with the reason, where FUSE cannot be
mounted.
"""

import errno
import os

from twisted.trial import unittest

from pulsar_twisted.testing.lazyfs import LazyFSMount, unavailable_reason


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LazyFSTests(unittest.SynchronousTestCase):
    def setUp(self):
        reason = unavailable_reason()
        if reason:
            raise unittest.SkipTest(reason)
        base = os.path.abspath(self.mktemp())
        self.backing = os.path.join(base, "backing")
        self.fs = LazyFSMount(self.backing, os.path.join(base, "mnt")).start()
        self.addCleanup(self.fs.stop)
        self.root = self.fs.mountpoint

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def write(self, name, data, sync=False, mode="wb"):
        with open(self.path(name), mode) as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def durable_file(self, name, data):
        """A file whose contents and name are both durable."""
        self.write(name, data, sync=True)
        fsync_path(os.path.dirname(self.path(name)))

    # -- contents --------------------------------------------------------------------------------

    def test_unsynced_write_is_lost(self):
        """A write with no fsync after it is gone after a cut; the program saw it before."""
        self.durable_file("f", b"")
        self.write("f", b"not synced")
        self.assertEqual(self.read("f"), b"not synced")
        dropped = self.fs.cut()
        self.assertEqual(self.read("f"), b"")
        self.assertEqual(dropped["unsynced_bytes"], len(b"not synced"))

    def test_synced_write_is_kept(self):
        """fsync makes the contents durable; only what came after it is lost."""
        self.durable_file("f", b"durable")
        self.write("f", b" lost", mode="ab")
        self.fs.cut()
        self.assertEqual(self.read("f"), b"durable")

    def test_fdatasync_counts(self):
        self.durable_file("f", b"")
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.pwrite(fd, b"abc", 0)
        os.fdatasync(fd)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"abc")

    def test_overwrite_in_the_middle(self):
        """A synced overwrite inside the file reaches the durable copy; later bytes stay as they were."""
        self.durable_file("f", b"0123456789")
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.pwrite(fd, b"ab", 3)
        os.fsync(fd)
        os.pwrite(fd, b"zz", 7)   # not synced
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"012ab56789")

    def test_write_past_the_end_leaves_a_hole_of_zeros(self):
        self.durable_file("f", b"ab")
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.pwrite(fd, b"z", 5)
        os.fsync(fd)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"ab\0\0\0z")

    def test_append_mode(self):
        self.durable_file("f", b"a")
        fd = os.open(self.path("f"), os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"b")
        os.write(fd, b"c")
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(self.read("f"), b"abc")
        self.fs.cut()
        self.assertEqual(self.read("f"), b"abc")

    def test_o_dsync_writes_are_durable(self):
        self.durable_file("f", b"")
        fd = os.open(self.path("f"), os.O_WRONLY | os.O_DSYNC)
        os.write(fd, b"synced by the flag")
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"synced by the flag")

    # -- truncation ------------------------------------------------------------------------------

    def test_unsynced_truncate_is_lost(self):
        self.durable_file("f", b"0123456789")
        os.truncate(self.path("f"), 4)
        self.assertEqual(self.read("f"), b"0123")
        self.fs.cut()
        self.assertEqual(self.read("f"), b"0123456789")

    def test_synced_truncate_is_kept(self):
        self.durable_file("f", b"0123456789")
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.ftruncate(fd, 4)
        os.fsync(fd)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"0123")

    def test_truncate_then_rewrite(self):
        """Shrink then grow again before one fsync: the durable copy is the final bytes, no stale tail."""
        self.durable_file("f", b"0123456789")
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.ftruncate(fd, 2)
        os.pwrite(fd, b"xyz", 2)
        os.fsync(fd)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"01xyz")

    def test_open_with_o_trunc(self):
        self.durable_file("f", b"old contents")
        self.write("f", b"new", sync=False)   # "wb" opens with O_TRUNC
        self.fs.cut()
        self.assertEqual(self.read("f"), b"old contents")
        self.write("f", b"new", sync=True)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"new")

    # -- names: create, rename, unlink, mkdir ----------------------------------------------------

    def test_created_file_needs_directory_fsync(self):
        """fsync of a new file makes its data durable, not its name: without the directory's fsync
        the file is gone after a cut."""
        self.write("new", b"data", sync=True)
        self.assertEqual(os.listdir(self.root), ["new"])
        self.assertEqual(self.fs.cut()["volatile_names"], 1)
        self.assertEqual(os.listdir(self.root), [])

    def test_created_file_with_directory_fsync(self):
        self.write("new", b"data", sync=True)
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(self.read("new"), b"data")

    def test_directory_fsync_without_file_fsync_keeps_an_empty_file(self):
        self.write("new", b"data", sync=False)
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(self.read("new"), b"")

    def test_file_fsync_after_directory_fsync(self):
        """Name made durable first, contents after: both survive (the durable copy is updated)."""
        self.write("new", b"")
        fsync_path(self.root)
        self.write("new", b"later", sync=True)
        self.fs.cut()
        self.assertEqual(self.read("new"), b"later")

    def test_contents_synced_before_directory_fsync_not_what_came_after(self):
        """The durable contents a directory fsync links are those of the file's last fsync."""
        fd = os.open(self.path("f"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"synced")
        os.fsync(fd)
        os.write(fd, b"+unsynced")
        fsync_path(self.root)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(self.read("f"), b"synced")

    def test_rename_needs_directory_fsync(self):
        self.durable_file("a", b"contents")
        os.rename(self.path("a"), self.path("b"))
        self.fs.cut()
        self.assertEqual(sorted(os.listdir(self.root)), ["a"])
        self.assertEqual(self.read("a"), b"contents")

    def test_rename_with_directory_fsync(self):
        self.durable_file("a", b"contents")
        os.rename(self.path("a"), self.path("b"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(sorted(os.listdir(self.root)), ["b"])
        self.assertEqual(self.read("b"), b"contents")

    def test_atomic_replace(self):
        """write tmp, fsync tmp, rename over the old file, fsync the directory: the new contents;
        the same without the directory fsync: the old contents, and no tmp file."""
        self.durable_file("conf", b"old")
        self.write("conf.tmp", b"new", sync=True)
        os.replace(self.path("conf.tmp"), self.path("conf"))
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), ["conf"])
        self.assertEqual(self.read("conf"), b"old")
        self.write("conf.tmp", b"new", sync=True)
        os.replace(self.path("conf.tmp"), self.path("conf"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), ["conf"])
        self.assertEqual(self.read("conf"), b"new")

    def test_rename_across_directories(self):
        """Moving a file between directories: each directory's fsync makes its side durable."""
        os.mkdir(self.path("x"))
        os.mkdir(self.path("y"))
        fsync_path(self.root)
        self.durable_file("x/f", b"moving")
        os.rename(self.path("x/f"), self.path("y/f"))
        fsync_path(self.path("y"))
        fsync_path(self.path("x"))
        self.fs.cut()
        self.assertEqual(os.listdir(self.path("x")), [])
        self.assertEqual(self.read("y/f"), b"moving")

    def test_unlink_needs_directory_fsync(self):
        self.durable_file("f", b"still here")
        os.unlink(self.path("f"))
        self.fs.cut()
        self.assertEqual(self.read("f"), b"still here")
        os.unlink(self.path("f"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), [])

    def test_unlinked_open_file_keeps_its_contents(self):
        self.durable_file("f", b"abc")
        fd = os.open(self.path("f"), os.O_RDWR)
        os.unlink(self.path("f"))
        os.pwrite(fd, b"d", 3)
        self.assertEqual(os.pread(fd, 10, 0), b"abcd")
        os.close(fd)
        self.assertEqual(os.listdir(self.root), [])

    def test_new_directory_needs_parent_fsync(self):
        os.mkdir(self.path("d"))
        self.write("d/f", b"data", sync=True)
        fsync_path(self.path("d"))
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), [])
        os.mkdir(self.path("d"))
        self.write("d/f", b"data", sync=True)
        fsync_path(self.path("d"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(self.read("d/f"), b"data")

    def test_renamed_directory_keeps_its_tree(self):
        os.mkdir(self.path("d"))
        fsync_path(self.root)
        self.durable_file("d/f", b"inside")
        os.rename(self.path("d"), self.path("e"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), ["e"])
        self.assertEqual(self.read("e/f"), b"inside")

    def test_rmdir(self):
        os.mkdir(self.path("d"))
        fsync_path(self.root)
        os.rmdir(self.path("d"))
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), ["d"])
        os.rmdir(self.path("d"))
        fsync_path(self.root)
        self.fs.cut()
        self.assertEqual(os.listdir(self.root), [])

    def test_errors(self):
        self.durable_file("f", b"")
        os.mkdir(self.path("d"))
        self.write("d/g", b"")
        with self.assertRaises(FileNotFoundError):
            open(self.path("missing"), "rb")
        with self.assertRaises(FileExistsError):
            os.open(self.path("f"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with self.assertRaises(OSError) as e:
            os.rmdir(self.path("d"))
        self.assertEqual(e.exception.errno, errno.ENOTEMPTY)

    # -- the cut itself --------------------------------------------------------------------------

    def test_open_files_go_stale_at_a_cut(self):
        self.durable_file("f", b"abc")
        fd = os.open(self.path("f"), os.O_RDWR)
        self.addCleanup(os.close, fd)
        self.fs.cut()
        with self.assertRaises(OSError) as e:
            os.pwrite(fd, b"x", 0)
        self.assertEqual(e.exception.errno, errno.EIO)

    def test_backing_directory_holds_exactly_the_durable_state(self):
        """Killing the filesystem's process is a cut too: a new mount of the backing directory
        sees what was durable, nothing else."""
        self.durable_file("kept", b"kept")
        self.write("kept", b"+lost", mode="ab")
        self.write("lost", b"lost", sync=True)
        self.assertEqual(sorted(os.listdir(self.backing)), ["kept"])
        self.fs.kill()
        self.assertFalse(os.path.ismount(self.root))
        self.fs.start()
        self.assertEqual(sorted(os.listdir(self.root)), ["kept"])
        self.assertEqual(self.read("kept"), b"kept")

    def test_stats(self):
        self.durable_file("f", b"abc")
        stats = self.fs.stats()
        self.assertEqual((stats["fsyncs"], stats["dir_fsyncs"], stats["write_bytes"]), (1, 1, 3))

    def test_dead_cut_fails_everything_until_the_next_mount(self):
        self.durable_file("f", b"abc")
        self.write("f", b"d", mode="ab")
        self.assertEqual(self.fs.cut(dead=True)["unsynced_bytes"], 1)
        with self.assertRaises(OSError) as e:
            open(self.path("f"), "rb")
        self.assertEqual(e.exception.errno, errno.EIO)
        self.fs.restart()
        self.assertEqual(self.read("f"), b"abc")

    def test_armed_cut_lands_inside_a_write(self):
        """``arm(3)``: the first two writes go through (one of them fsynced), the third fails with EIO
        and is the moment of the cut: only the fsynced write survives."""
        self.durable_file("f", b"")
        self.assertIsNone(self.fs.wait_cut(0.1))
        self.fs.arm(3)
        fd = os.open(self.path("f"), os.O_WRONLY)
        os.pwrite(fd, b"one", 0)
        os.fsync(fd)
        os.pwrite(fd, b"two", 3)
        with self.assertRaises(OSError) as e:
            os.pwrite(fd, b"three", 6)
        self.assertEqual(e.exception.errno, errno.EIO)
        with self.assertRaises(OSError):
            os.fsync(fd)
        os.close(fd)
        self.assertEqual(self.fs.wait_cut(5), dict(unsynced_bytes=len(b"twothree"), volatile_names=0))
        self.fs.restart()
        self.assertEqual(self.read("f"), b"one")
