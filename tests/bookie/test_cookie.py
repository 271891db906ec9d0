"""Tests for pulsar_twisted.bookie.cookie: a bookie refuses to start over directories that were wiped,
replaced or mixed with another bookie's, and starts over its own (or a pre-cookie bookie's)."""

import os
import shutil

from twisted.internet import defer, reactor

from pulsar_twisted.bookie import cookie, formats
from pulsar_twisted.bookie.storage import BookieStorage
from tests.bookie.test_storage import KEY, StorageTestBase


class CookieTests(StorageTestBase):

    def dirs(self) -> list[str]:
        return [self.journal_dir, *self.ledger_dirs, os.path.join(self.ledger_dirs[0], "index")]

    def refused(self, error=cookie.CookieError):
        storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                gc_wait_time_ms=0)
        self.addCleanup(storage.stop)
        return self.assertFailure(storage.start(), error)

    @defer.inlineCallbacks
    def written(self):
        """A bookie that stored ledgers 1 and 2 (one checkpointed, one in the journal only), stopped."""
        storage = yield self.open()
        yield self.fill(storage, 1, 3)
        yield storage.checkpoint()
        yield self.fill(storage, 2, 3)
        instance = storage.instance_id
        yield storage.stop()
        return instance

    @defer.inlineCallbacks
    def test_new_bookie_gets_one_cookie_everywhere(self):
        """The first start gives every directory the same cookie; later starts find it and serve."""
        instance = yield self.written()
        self.assertEqual({cookie.read(d) for d in self.dirs()}, {instance})
        storage = yield self.open()
        self.assertEqual(storage.instance_id, instance)
        yield self.assert_entries(storage, 1, range(3))
        yield self.assert_entries(storage, 2, range(3))

    @defer.inlineCallbacks
    def test_wiped_journal_dir_refused(self):
        """A journal directory emptied (a replaced disk) stops the start: ledger 2 lives in it alone,
        and would be served as missing. Nothing is written to the other directories."""
        yield self.written()
        shutil.rmtree(self.journal_dir)
        os.makedirs(self.journal_dir)
        table = os.path.join(self.ledger_dirs[0], "index", "table")
        before = os.path.getsize(table)
        yield self.refused()
        self.assertEqual(os.listdir(self.journal_dir), [])
        self.assertEqual(os.path.getsize(table), before)

    @defer.inlineCallbacks
    def test_wiped_index_dir_refused(self):
        yield self.written()
        shutil.rmtree(os.path.join(self.ledger_dirs[0], "index"))
        yield self.refused()

    @defer.inlineCallbacks
    def test_lost_index_table_refused(self):
        """The index directory keeps its cookie but not its table: the table was made before the
        cookie, so it was lost, not never made; a fresh table would forget every ledger in it."""
        yield self.written()
        os.remove(os.path.join(self.ledger_dirs[0], "index", "table"))
        yield self.refused(formats.FormatError)
        self.assertFalse(os.path.exists(os.path.join(self.ledger_dirs[0], "index", "table")))

    @defer.inlineCallbacks
    def test_another_bookies_directory_refused(self):
        yield self.written()
        cookie.write([self.journal_dir], "0123456789abcdef")
        yield self.refused()

    @defer.inlineCallbacks
    def test_unreadable_cookie_refused(self):
        yield self.written()
        with open(os.path.join(self.journal_dir, cookie.COOKIE_NAME), "wb") as f:
            f.write(b"junk")
        yield self.refused()

    @defer.inlineCallbacks
    def test_bookie_from_before_cookies_starts_and_gets_them(self):
        """A bookie whose directories hold data and no cookie (written before cookies existed) starts,
        serves what it holds, and has cookies from then on."""
        instance = yield self.written()
        for directory in self.dirs():
            os.remove(os.path.join(directory, cookie.COOKIE_NAME))
        storage = yield self.open()
        self.assertNotEqual(storage.instance_id, instance)
        yield self.assert_entries(storage, 1, range(3))
        yield self.assert_entries(storage, 2, range(3))
        self.assertEqual({cookie.read(d) for d in self.dirs()}, {storage.instance_id})

    def test_shared_directory_counted_once(self):
        """A journal inside a ledger directory (the same path twice) is one directory with one cookie."""
        directory = self.mktemp()
        os.makedirs(directory)
        instance = cookie.write([directory, directory + "/."])
        self.assertEqual(cookie.verify([directory, os.path.join(directory, ".")]), instance)

    def test_write_interrupted_by_a_crash(self):
        """A crash while the cookies are renamed into place (staged copies everywhere, some renamed)
        is finished by the next start, not refused; one while they are staged leaves none, so the next
        start writes them afresh."""
        dirs = []
        for name in ("a", "b", "c"):
            dirs.append(os.path.join(self.mktemp(), name))
            os.makedirs(dirs[-1])
        instance = cookie.write(dirs)
        for directory in dirs[1:]:      # back to "staged, not yet renamed" in b and c
            os.replace(os.path.join(directory, cookie.COOKIE_NAME),
                       os.path.join(directory, cookie.COOKIE_NAME + ".new"))
        self.assertEqual(cookie.verify(dirs), instance)
        self.assertEqual({cookie.read(d) for d in dirs}, {instance})
        os.replace(os.path.join(dirs[0], cookie.COOKIE_NAME), os.path.join(dirs[0], cookie.COOKIE_NAME + ".new"))
        for directory in dirs[1:]:
            os.remove(os.path.join(directory, cookie.COOKIE_NAME))
        self.assertIsNone(cookie.verify(dirs))      # staged only: no cookie yet
        self.assertNotEqual(cookie.write(dirs), instance)
