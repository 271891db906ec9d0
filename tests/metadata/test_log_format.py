"""
The embedded store's files on their own (``log_format``): headers, and ``load``'s recovery from empty,
header-only, junk and truncated log and snapshot files, with no store, reactor or thread involved.
"""

import os

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.metadata.embedded.log_format import (
    FORMAT_VERSION,
    HEADER_SIZE,
    LOG_MAGIC,
    LOG_NAME,
    SNAPSHOT_MAGIC,
    SNAPSHOT_NAME,
    CorruptStoreError,
    SnapshotWriter,
    check_header,
    encode_header,
    encode_record,
    encode_set,
    encode_snapshot,
    load,
    write_snapshot,
)


def _set(path, value=b"v"):
    return encode_set(path, value, 0, 1, 1, 0)


class HeaderTests(SynchronousTestCase):
    def test_header_layout(self):
        """A header is the magic, the u16 format version and a u16 zero: 8 bytes."""
        self.assertEqual(encode_header(LOG_MAGIC), b"PTML" + FORMAT_VERSION.to_bytes(2, "big") + b"\0\0")
        self.assertEqual(HEADER_SIZE, 8)

    def test_wrong_magic_or_version_refused(self):
        """check_header refuses the other file's magic and an unknown version."""
        check_header(encode_header(LOG_MAGIC), LOG_MAGIC, "log")
        self.assertRaises(CorruptStoreError, check_header, encode_header(SNAPSHOT_MAGIC), LOG_MAGIC, "log")
        future = b"PTML" + (FORMAT_VERSION + 1).to_bytes(2, "big") + b"\0\0"
        self.assertRaises(CorruptStoreError, check_header, future, LOG_MAGIC, "log")


class LoadTests(SynchronousTestCase):
    """``load`` over a data directory whose files the test writes by hand."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        self.applied = []

    def write(self, name, data):
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def load(self):
        last_txid, fd, size = load(self.dir, self.applied.append)
        os.close(fd)
        return last_txid, size

    def test_empty_directory(self):
        """No files: nothing applied, txid 0, and a log holding just its header is created."""
        self.assertEqual(self.load(), (0, HEADER_SIZE))
        self.assertEqual(self.applied, [])
        self.assertEqual(self.read(LOG_NAME), encode_header(LOG_MAGIC))

    def test_empty_log(self):
        """An empty log file is given its header and loads as empty."""
        self.write(LOG_NAME, b"")
        self.assertEqual(self.load(), (0, HEADER_SIZE))
        self.assertEqual(self.read(LOG_NAME), encode_header(LOG_MAGIC))

    def test_torn_header_log(self):
        """A log cut inside its header (torn while first created) is rewritten as a fresh log."""
        self.write(LOG_NAME, encode_header(LOG_MAGIC)[:5])
        self.assertEqual(self.load(), (0, HEADER_SIZE))
        self.assertEqual(self.read(LOG_NAME), encode_header(LOG_MAGIC))

    def test_header_only_log(self):
        """A log holding only its header loads as empty and is left as it is."""
        self.write(LOG_NAME, encode_header(LOG_MAGIC))
        self.assertEqual(self.load(), (0, HEADER_SIZE))
        self.assertEqual(self.applied, [])
        self.assertEqual(self.read(LOG_NAME), encode_header(LOG_MAGIC))

    def test_junk_log_refused(self):
        """A log that is not ours fails the load and is not overwritten."""
        self.write(LOG_NAME, b"junk" * 8)
        self.assertRaises(CorruptStoreError, self.load)
        self.assertEqual(self.read(LOG_NAME), b"junk" * 8)

    def test_junk_after_records_cut(self):
        """Junk after the last good record is cut off; the records before it are applied."""
        good = encode_header(LOG_MAGIC) + encode_record(1, [_set("/a")])
        self.write(LOG_NAME, good + b"\xff" * 13)
        self.assertEqual(self.load(), (1, len(good)))
        self.assertEqual(self.applied, [[("S", "/a", b"v", 0, 1, 1, 0)]])
        self.assertEqual(self.read(LOG_NAME), good)

    def test_truncated_record_cut(self):
        """A record torn mid-write is cut at the end of the record before it."""
        first = encode_header(LOG_MAGIC) + encode_record(1, [_set("/a")])
        second = encode_record(2, [_set("/b", b"x" * 50)])
        for cut in (1, 8, len(second) - 1):
            self.applied = []
            self.write(LOG_NAME, first + second[:cut])
            self.assertEqual(self.load(), (1, len(first)))
            self.assertEqual(len(self.applied), 1)
            self.assertEqual(self.read(LOG_NAME), first)

    def test_records_the_snapshot_covers_skipped(self):
        """Log records up to the snapshot's txid are not applied again."""
        self.write(SNAPSHOT_NAME, encode_snapshot(2, [_set("/", b"")]))
        self.write(LOG_NAME, encode_header(LOG_MAGIC) + encode_record(2, [_set("/old")])
                   + encode_record(3, [_set("/new")]))
        self.assertEqual(self.load()[0], 3)
        self.assertEqual([ops[0][1] for ops in self.applied], ["/", "/new"])

    def test_empty_snapshot_refused(self):
        """An empty snapshot file is lost data, not a fresh start: the load fails."""
        self.write(SNAPSHOT_NAME, b"")
        self.assertRaises(CorruptStoreError, self.load)

    def test_header_only_snapshot_refused(self):
        """A snapshot with a header and no record fails the load."""
        self.write(SNAPSHOT_NAME, encode_header(SNAPSHOT_MAGIC))
        self.assertRaises(CorruptStoreError, self.load)

    def test_truncated_snapshot_refused(self):
        """A snapshot cut anywhere inside its record fails the load, and nothing is applied."""
        whole = encode_snapshot(4, [_set("/", b""), _set("/a")])
        for cut in (HEADER_SIZE + 3, len(whole) - 1):
            self.write(SNAPSHOT_NAME, whole[:cut])
            self.assertRaises(CorruptStoreError, self.load)
        self.assertEqual(self.applied, [])

    def test_junk_snapshot_refused(self):
        """A snapshot that is not ours, or a whole one followed by junk, fails the load."""
        self.write(SNAPSHOT_NAME, b"junk" * 8)
        self.assertRaises(CorruptStoreError, self.load)
        self.write(SNAPSHOT_NAME, encode_snapshot(1, [_set("/", b"")]) + b"junk")
        self.assertRaises(CorruptStoreError, self.load)


class SnapshotWriterTests(SynchronousTestCase):
    """A snapshot written a slice at a time is the same file as one encoded whole."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def test_slices_make_the_whole_snapshot(self):
        ops = [_set(f"/n{i}", b"v" * i) for i in range(50)]
        writer = SnapshotWriter(self.dir, 7)
        for start in range(0, 50, 12):
            writer.append(b"".join(ops[start:start + 12]))
        self.assertEqual(writer.size, len(encode_snapshot(7, ops)))
        log_fd = os.open(os.path.join(self.dir, LOG_NAME), os.O_WRONLY | os.O_CREAT, 0o644)
        self.addCleanup(os.close, log_fd)
        os.write(log_fd, encode_header(LOG_MAGIC))
        write_snapshot(self.dir, log_fd, writer)
        with open(os.path.join(self.dir, SNAPSHOT_NAME), "rb") as f:
            self.assertEqual(f.read(), encode_snapshot(7, ops))
        self.assertFalse(os.path.exists(os.path.join(self.dir, SNAPSHOT_NAME + ".tmp")))
        applied = []
        last_txid, fd, _ = load(self.dir, applied.append)
        os.close(fd)
        self.assertEqual(last_txid, 7)
        self.assertEqual([op[1] for op in applied[0]], [f"/n{i}" for i in range(50)])

    def test_unfinished_file_is_never_read(self):
        """Until installed the slices are in the .tmp file only; abandon removes it, and an
        earlier snapshot stays the one loaded."""
        self.write_snapshot(encode_snapshot(3, [_set("/old")]))
        writer = SnapshotWriter(self.dir, 9)
        writer.append(_set("/new"))
        self.assertTrue(os.path.exists(os.path.join(self.dir, SNAPSHOT_NAME + ".tmp")))
        writer.abandon()
        self.assertFalse(os.path.exists(os.path.join(self.dir, SNAPSHOT_NAME + ".tmp")))
        applied = []
        last_txid, fd, _ = load(self.dir, applied.append)
        os.close(fd)
        self.assertEqual((last_txid, [op[1] for op in applied[0]]), (3, ["/old"]))

    def write_snapshot(self, data):
        with open(os.path.join(self.dir, SNAPSHOT_NAME), "wb") as f:
            f.write(data)


class SnapshotWriterCloseTests(SynchronousTestCase):

    def test_a_close_that_fails_in_finish_is_not_made_again(self):
        """Linux releases a descriptor whose close fails: ``finish`` failing there must not leave
        it for ``abandon`` to close again, which would close whatever file (another thread's)
        got that number meanwhile."""
        from pulsar_twisted.metadata.embedded import log_format
        directory = self.mktemp()
        os.makedirs(directory)
        writer = SnapshotWriter(directory, 1)
        writer.append(_set("/n"))
        target = writer._fd
        closes, real = [], os.close

        def close(fd):
            closes.append(fd)
            real(fd)
            if len(closes) == 1:
                raise OSError(5, "EIO (injected)")
        self.patch(log_format.os, "close", close)
        self.assertRaises(OSError, log_format._install_snapshot, directory, writer)
        self.assertEqual(closes, [target])
