"""
The IBookieClient contract (``testing.bookie_client_mixin``) over every bookie client: the
in-process client over the fake bookie and over real storage, and the TCP client over a real
bookie server on 127.0.0.1.
"""

from twisted.internet import defer, endpoints, task
from twisted.trial import unittest

from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.ledger.bookies import LocalBookieClient
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.testing.bookie_client_mixin import BookieClientTestsMixin
from pulsar_twisted.testing.fake_bookie import FakeBookie


def real_storage(test):
    """A started BookieStorage in a temp dir on the global reactor (stopped at cleanup)."""
    from twisted.internet import reactor
    base = test.mktemp()
    storage = BookieStorage(f"{base}/journal", [f"{base}/ledgers"], reactor, journal_sync_data=False,
                            flush_interval_ms=0, gc_wait_time_ms=0)
    test.addCleanup(storage.stop)
    return storage


class LocalOverFakeBookieTests(BookieClientTestsMixin, unittest.TestCase):
    def make_bookie_client(self, count):
        self.clock = task.Clock()
        self.bookies = {f"bookie-{i}": FakeBookie(f"bookie-{i}", self.clock) for i in range(count)}
        return LocalBookieClient(self.bookies), sorted(self.bookies)

    def set_read_only(self, bookie_id, flag):
        self.bookies[bookie_id].set_read_only(flag)

    def stop_bookie(self, bookie_id):
        self.bookies[bookie_id].available = False
        return defer.succeed(None)

    def drop_connections(self, bookie_id):
        return defer.succeed(None)


class LocalOverStorageTests(BookieClientTestsMixin, unittest.TestCase):
    async def make_bookie_client(self, count):
        self.bookies = {}
        for i in range(count):
            storage = real_storage(self)
            await storage.start()
            self.bookies[f"bookie-{i}"] = storage
        return LocalBookieClient(self.bookies), sorted(self.bookies)

    def set_read_only(self, bookie_id, flag):
        self.bookies[bookie_id].set_read_only(flag)

    def stop_bookie(self, bookie_id):
        # An in-process bookie that is gone is one the client no longer has.
        del self.bookies[bookie_id]
        return defer.succeed(None)

    def drop_connections(self, bookie_id):
        return defer.succeed(None)


class TcpOverServerTests(BookieClientTestsMixin, unittest.TestCase):
    async def make_bookie_client(self, count):
        from twisted.internet import reactor
        self.servers = {}
        for _ in range(count):
            storage = real_storage(self)
            server = BookieServer(storage, reactor,
                                  endpoint=endpoints.TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1"),
                                  advertised_address="127.0.0.1", disk_usage=lambda: 0.1,
                                  disk_check_interval=0)
            await server.start()
            self.addCleanup(server.stop)
            self.servers[server.bookie_id] = server
        self.tcp = TcpBookieClient(reactor, request_timeout=10.0, connect_timeout=5.0)
        self.addCleanup(self.tcp.close)
        return self.tcp, sorted(self.servers)

    def set_read_only(self, bookie_id, flag):
        self.servers[bookie_id].storage.set_read_only(flag)

    def stop_bookie(self, bookie_id):
        return self.servers[bookie_id].stop()

    def missing_bookie_id(self):
        # Port 1 on loopback: nothing listens there, the connection is refused at once.
        return "127.0.0.1:1"

    def drop_connections(self, bookie_id):
        # Wait until the client side saw the loss, so the next request is a new connection.
        connection = self.tcp._connections[bookie_id]
        protocol, lost = connection.protocol, defer.Deferred()
        previous = protocol.on_lost

        def on_lost(p, reason):
            previous(p, reason)
            lost.callback(None)
        protocol.on_lost = on_lost
        self.servers[bookie_id].factory.close_connections()
        return lost


class _AddsThroughNotify:
    """A LocalBookieClient whose ``add_entry`` goes through ``add_entry_notify`` (a Deferred is a
    valid waiter), so the whole contract also covers the Deferred-free add path."""

    def __init__(self, client):
        self.client = client

    def add_entry(self, bookie_id, ledger_id, entry_id, master_key, packed, recovery_add=False):
        d = defer.Deferred()
        result = self.client.add_entry_notify(d, bookie_id, ledger_id, entry_id, master_key, packed,
                                              recovery_add)
        assert result is None, result
        return d

    def __getattr__(self, name):
        return getattr(self.client, name)


class NotifyOverFakeBookieTests(LocalOverFakeBookieTests):
    """The contract through ``add_entry_notify`` over bookies without waiters (their Deferreds are
    forwarded to the waiter)."""

    def make_bookie_client(self, count):
        client, ids = super().make_bookie_client(count)
        return _AddsThroughNotify(client), ids

    def test_interface(self):
        """(The wrapped client provides IBookieClient.)"""
        from zope.interface.verify import verifyObject
        from pulsar_twisted.ledger.bookies import IBookieClient
        self.assertTrue(verifyObject(IBookieClient, self.client.client))


class NotifyOverStorageTests(LocalOverStorageTests):
    """The contract through ``add_entry_notify`` over real storage, which takes the waiter itself
    and hands it to the journal."""

    async def make_bookie_client(self, count):
        client, ids = await super().make_bookie_client(count)
        self.assertTrue(all(b.accepts_add_waiter for b in self.bookies.values()))
        return _AddsThroughNotify(client), ids

    test_interface = NotifyOverFakeBookieTests.test_interface


class LocalBatchTests(unittest.TestCase):
    """``LocalBookieClient.add_entries_notify``: several entries, one waiter call."""

    def entries(self, ledger_id, ids):
        from pulsar_twisted.wire.bookie import pack_entry
        return [(i, pack_entry(ledger_id, i, i - 1, i + 1, b"e%d" % i)) for i in ids]

    def test_batch_over_fake_bookie(self):
        """Over a bookie without batches, one add each; the waiter hears once, after all, and a
        refused entry fails the batch."""
        bookie = FakeBookie("b", task.Clock())
        client = LocalBookieClient({"b": bookie})
        d = defer.Deferred()
        client.add_entries_notify(d, "b", 1, b"k", self.entries(1, range(3)))
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(bookie.entry_ids(1), [0, 1, 2])
        bookie.fail("add", after=1)
        d = defer.Deferred()
        client.add_entries_notify(d, "b", 1, b"k", self.entries(1, range(3, 5)))
        self.failureResultOf(d)
        d = defer.Deferred()
        client.add_entries_notify(d, "missing", 1, b"k", self.entries(1, [5]))
        from pulsar_twisted.common.bk_errors import BookieUnavailableError
        self.failureResultOf(d, BookieUnavailableError)

    @defer.inlineCallbacks
    def test_batch_over_storage(self):
        """Over real storage the batch goes whole to ``add_entries``; entries and LAC are kept."""
        storage = real_storage(self)
        yield storage.start()
        client = LocalBookieClient({"s": storage})
        d = defer.Deferred()
        client.add_entries_notify(d, "s", 2, b"k", self.entries(2, range(4)))
        yield d
        self.assertEqual(storage.read_lac(2), 2)
        for entry_id, packed in self.entries(2, range(4)):
            got = yield client.read_entry("s", 2, entry_id)
            self.assertEqual(got, packed)
