"""Tests for pulsar_twisted.bookie.cookie: a bookie refuses to start over directories that were wiped,
replaced or mixed with another bookie's, and starts over its own (or a pre-cookie bookie's)."""

import os
import shutil

from twisted.internet import defer, endpoints, reactor

from pulsar_twisted.bookie import cookie, formats
from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.interfaces import MetadataUnavailableError
from pulsar_twisted.metadata.layout import COOKIES_ROOT
from pulsar_twisted.resources.bookies import CookieMismatchError
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
    def test_truncated_index_table_refused(self):
        """The index directory keeps its cookie and its table is cut short within its header (a damaged
        disk): the table was made, header synced, before the cookie, so this is no crash while it was
        being made. Moved aside for a new table, ledger 1 came back unfenced from the older copy of its
        header in its own file."""
        storage = yield self.open()
        yield self.fill(storage, 1, 10)         # past the inline slots: a file, with a copy of the header
        yield storage.checkpoint()
        yield storage.fence_ledger(1, KEY)      # the table's header only
        yield storage.stop()
        table = os.path.join(self.ledger_dirs[0], "index", "table")
        os.truncate(table, 100)
        yield self.refused(formats.FormatError)
        self.assertFalse(os.path.exists(table + ".bad"))
        self.assertEqual(os.path.getsize(table), 100)

    @defer.inlineCallbacks
    def test_ledger_directory_left_out_of_the_configuration_refused(self):
        """A bookie with two ledger directories restarted with one of them left out of its
        configuration: every cookie it still sees agrees, but the other directory holds entry logs of
        acknowledged entries, which it would answer as missing. The cookies record how many
        directories the bookie has, so the start is refused; with both configured again it serves."""
        self.ledger_dirs.append(self.ledger_dirs[0] + "-2")
        storage = yield self.open()
        for ledger in range(1, 5):
            yield self.fill(storage, ledger, 3)
        yield storage.checkpoint()
        yield storage.stop()
        kept = self.ledger_dirs
        self.ledger_dirs = kept[:1]
        failure = yield self.refused()
        self.assertIn("record 4 directories but 3 are configured", str(failure))
        self.ledger_dirs = kept
        storage = yield self.open()
        for ledger in range(1, 5):
            yield self.assert_entries(storage, ledger, range(3))

    @defer.inlineCallbacks
    def test_cookies_from_before_the_directory_count_get_it(self):
        """Cookies written before the number of directories was recorded (instance only) are taken,
        and rewritten with the number, so that the next start checks it."""
        instance = yield self.written()
        for directory in self.dirs():
            with open(os.path.join(directory, cookie.COOKIE_NAME), "w") as f:
                f.write(f"pulsar-twisted bookie cookie 1\ninstance {instance}\n")
        storage = yield self.open()
        self.assertEqual(storage.instance_id, instance)
        yield storage.stop()
        self.assertEqual({cookie._read(d) for d in self.dirs()}, {(instance, 3)})

    @defer.inlineCallbacks
    def test_second_bookie_on_the_same_directories_refused(self):
        """A second storage on directories a started one holds (a bookie started twice) is refused
        before it touches them; once the first has stopped, or crashed, the directories are free."""
        first = yield self.open()
        yield self.fill(first, 1, 3)
        failure = yield self.refused()
        self.assertIn("in use by another bookie process", str(failure))
        first.simulate_crash()
        second = yield self.open()
        yield self.assert_entries(second, 1, range(3))
        yield second.stop()
        third = yield self.open()
        yield self.assert_entries(third, 1, range(3))

    @defer.inlineCallbacks
    def test_new_bookies_directories_are_locked_once_made(self):
        """A new bookie's directories do not exist when it starts; once it has made them they are
        locked as well: a second bookie sharing only its ledger directory is refused."""
        first = yield self.open()
        self.journal_dir = self.journal_dir + "-other"
        failure = yield self.refused()
        self.assertIn("in use by another bookie process", str(failure))
        self.assertFalse(os.path.exists(self.journal_dir))     # a refused start makes nothing
        yield first.stop()

    def test_two_new_bookies_starting_at_once(self):
        """Two processes started at the same moment on one new configuration both find no directory
        and no cookie. The one that locks second is refused before it writes anything: the first's
        cookies, which it wrote meanwhile, stay in place (they were overwritten before)."""
        def storage():
            return BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                 gc_wait_time_ms=0)
        first, second = storage(), storage()
        self.addCleanup(first._close_files)
        real_verify = cookie.verify
        checks = []

        def verify(directories):
            found = real_verify(directories)
            if not checks:
                checks.append(found)
                first._load()   # the first starts in full between the second's check and its next step
            return found
        self.patch(cookie, "verify", verify)
        error = self.assertRaises(cookie.CookieError, second._load)
        self.assertIn("in use by another bookie process", str(error))
        self.assertEqual(checks, [None])
        self.assertEqual({cookie.read(d) for d in self.dirs()}, {first.instance_id})
        for directory in self.dirs():
            self.assertFalse(os.path.exists(os.path.join(directory, cookie.COOKIE_NAME + ".new")))

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


class _FlakyStore:
    """A metadata store session whose first ``failures`` reads fail as unreachable (``silent``: never
    answer). ``asked`` fires in the next reactor turn after the first read."""

    def __init__(self, store, failures: int, silent: bool = False):
        self._store, self.failures, self.silent = store, failures, silent
        self.asked = defer.Deferred()

    def get(self, path):
        if not self.asked.called:
            reactor.callLater(0, self.asked.callback, None)
        if self.failures:
            self.failures -= 1
            return defer.Deferred() if self.silent else defer.fail(MetadataUnavailableError("connection lost"))
        return self._store.get(path)

    def __getattr__(self, name):
        return getattr(self._store, name)


class _HeldEndpoint:
    """A server endpoint on an ephemeral loopback port whose ``listen`` completes on ``release()``;
    ``asked`` fires when it is called, ``port`` is the listening port once released."""

    def __init__(self):
        self.asked = defer.Deferred()
        self.port = None

    def listen(self, factory):
        self._held = defer.Deferred(), factory
        self.asked.callback(None)
        return self._held[0]

    def release(self):
        d, factory = self._held

        def listening(port):
            self.port = port
            return port
        endpoints.serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(factory).addCallback(
            listening).chainDeferred(d)


class StoreCookieTests(StorageTestBase):
    """The cookie the metadata store keeps per bookie id (BookKeeper keeps one in ZooKeeper): it
    catches a bookie whose directories were ALL replaced, which the directories alone cannot tell
    from a new bookie."""

    def setUp(self):
        super().setUp()
        self.store = EmbeddedMetadataStore(None, reactor)
        self.successResultOf(self.store.start())
        self.addCleanup(self.store.close)

    def server(self, store=None, bookie_id="b1:3181") -> BookieServer:
        storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                gc_wait_time_ms=0)
        return BookieServer(storage, reactor, endpoint="tcp:0:interface=127.0.0.1", bookie_id=bookie_id,
                            metadata_store=store or self.store.new_session(), disk_check_interval=0,
                            data_dirs=[self.journal_dir, *self.ledger_dirs])

    def cookie_node(self):
        found = self.successResultOf(self.store.get(f"{COOKIES_ROOT}/b1:3181"))
        return None if found is None else found[0].decode()

    def stopped_while_waiting(self, store):
        """Start with ``store``, stop once the start waits on it: the stop fires once the start has
        ended (failed, its storage stopped, never listening nor registered)."""
        server = self.server(store)
        self.addCleanup(lambda: server.storage._running and server.storage.stop())
        starting = server.start()
        yield store.asked
        yield server.stop()
        self.assertFalse(server.storage._running)
        yield self.assertFailure(starting, defer.CancelledError)
        self.assertIsNone(server.port)
        self.assertEqual(self.successResultOf(self.store.get_children("/ledgers/available")), [])

    @defer.inlineCallbacks
    def test_stop_while_store_unreachable_ends_the_start(self):
        """Stopped between two tries: the start used to go on once the store answered, and a
        stopped bookie listened and registered (its storage still running after the stop)."""
        yield from self.stopped_while_waiting(_FlakyStore(self.store.new_session(), failures=1))

    @defer.inlineCallbacks
    def test_stop_while_store_silent_ends_the_start(self):
        """Stopped while the store has not answered the check: the start used to wait for ever."""
        yield from self.stopped_while_waiting(_FlakyStore(self.store.new_session(), 1, silent=True))

    @defer.inlineCallbacks
    def started(self, store=None, bookie_id="b1:3181") -> BookieServer:
        server = self.server(store, bookie_id)
        yield server.start()
        self.addCleanup(server.stop)
        return server

    @defer.inlineCallbacks
    def test_recorded_then_checked(self):
        server = yield self.started()
        instance = server.storage.instance_id
        self.assertEqual(self.cookie_node(), instance)
        yield server.stop()
        server = yield self.started()
        self.assertEqual(server.storage.instance_id, instance)

    @defer.inlineCallbacks
    def test_all_directories_replaced_refused(self):
        """Every directory wiped: locally a new bookie, but the store knows the id served another
        instance; the start fails before it listens or registers, and the storage is stopped."""
        server = yield self.started()
        yield server.stop()
        shutil.rmtree(os.path.dirname(self.journal_dir))
        server = self.server()
        yield self.assertFailure(server.start(), CookieMismatchError)
        self.assertIsNone(server.port)
        self.assertFalse(server.storage._running)
        self.assertEqual(self.successResultOf(self.store.get_children("/ledgers/available")), [])

    @defer.inlineCallbacks
    def test_another_bookies_directories_refused_under_a_new_id(self):
        """A bookie's directories started under another, new id (its address changed, or they were
        copied to a new machine) are refused: the store records their instance for the first id,
        whose ledgers they hold. With that cookie deleted (the first bookie gone for good) they
        start under the new id."""
        server = yield self.started()
        instance = server.storage.instance_id
        yield server.stop()
        server = self.server(bookie_id="b2:3181")
        failure = yield self.assertFailure(server.start(), CookieMismatchError)
        self.assertIn("b1:3181", str(failure))
        self.assertIsNone(server.port)
        self.assertFalse(server.storage._running)
        self.assertIsNone(self.successResultOf(self.store.get(f"{COOKIES_ROOT}/b2:3181")))
        yield self.store.delete(f"{COOKIES_ROOT}/b1:3181")
        server = yield self.started(bookie_id="b2:3181")
        self.assertEqual(server.storage.instance_id, instance)

    @defer.inlineCallbacks
    def test_deleting_the_node_starts_it_as_a_new_bookie(self):
        server = yield self.started()
        yield server.stop()
        shutil.rmtree(os.path.dirname(self.journal_dir))
        yield self.store.delete(f"{COOKIES_ROOT}/b1:3181")
        server = yield self.started()
        self.assertEqual(self.cookie_node(), server.storage.instance_id)

    @defer.inlineCallbacks
    def stopped_while_held(self, held, **server_kwargs):
        """A server started with ``server_kwargs``, stopped while ``held`` (a _HeldEndpoint among
        them) holds its listen, then released: ``(server, its start, its stop)``."""
        storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                gc_wait_time_ms=0)
        server = BookieServer(storage, reactor, bookie_id="b1:3181",
                              metadata_store=self.store.new_session(),
                              data_dirs=[self.journal_dir, *self.ledger_dirs], **server_kwargs)
        starting = server.start()
        self.addCleanup(lambda: server.stop() if server.port is not None else None)
        yield held.asked
        stopping = server.stop()
        self.assertNoResult(stopping)
        held.release()
        return server, starting, stopping

    def assert_nothing_running(self, server):
        self.assertIsNone(server.port)
        self.assertFalse(server.storage._running)
        self.assertEqual(self.successResultOf(self.store.get_children("/ledgers/available")), [])

    @defer.inlineCallbacks
    def test_stop_during_the_starts_last_steps_leaves_nothing_running(self):
        """Stopped while the start opens its HTTP port (its last step): the stop waits for the start
        to end and then closes that port too; the port used to be opened after the stop had ended,
        and stayed open."""
        http = _HeldEndpoint()
        server, starting, stopping = yield self.stopped_while_held(
            http, endpoint="tcp:0:interface=127.0.0.1", disk_check_interval=10.0, http_endpoint=http)
        yield starting
        yield stopping
        self.assertIsNone(server.http_port)
        self.assertFalse(http.port.connected)
        self.assertFalse(server._disk_loop.running)
        self.assert_nothing_running(server)

    @defer.inlineCallbacks
    def test_stop_while_the_bookie_port_opens_leaves_nothing_running(self):
        """Stopped while the start opens its bookie port (an endpoint that answers later): the
        start, once the port is open, gives up there (the stop waits for it) and closes the port
        and the storage; it used to go on to serve and register after the stop had ended, with
        nothing left to undo it."""
        endpoint = _HeldEndpoint()
        server, starting, stopping = yield self.stopped_while_held(
            endpoint, endpoint=endpoint, disk_check_interval=0)
        yield self.assertFailure(starting, defer.CancelledError)
        yield stopping
        self.assertFalse(endpoint.port.connected)
        self.assert_nothing_running(server)

    @defer.inlineCallbacks
    def test_port_named_bookie_restarts_over_its_directories(self):
        """A bookie named after its ephemeral port (bookie_id None, bookiePort=0 in the daemon)
        gets a new id at every start. Restarted over its own directories it starts (as it did
        before 60c57ff) instead of being refused as 'another bookie's directories'."""
        ids = []
        for _ in range(2):
            storage = BookieStorage(self.journal_dir, self.ledger_dirs, reactor, flush_interval_ms=0,
                                    gc_wait_time_ms=0)
            server = BookieServer(storage, reactor, endpoint="tcp:0:interface=127.0.0.1",
                                  advertised_address="127.0.0.1", metadata_store=self.store.new_session(),
                                  disk_check_interval=0, data_dirs=[self.journal_dir, *self.ledger_dirs])
            yield server.start()
            ids.append(server.bookie_id)
            yield server.stop()
        self.assertNotEqual(ids[0], ids[1])

    @defer.inlineCallbacks
    def test_store_unreachable_waits(self):
        """An unreachable store delays the start (the bookie does not serve unchecked), then it goes on."""
        flaky = _FlakyStore(self.store.new_session(), failures=2)
        server = yield self.started(flaky)
        self.assertEqual((flaky.failures, self.cookie_node()), (0, server.storage.instance_id))
        self.assertIsNotNone(server.port)
