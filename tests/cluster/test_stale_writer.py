"""
Issue 11 on real processes: ZooKeeper and four ``twistd pulsar-bookie`` processes; two "brokers"
are two managed-ledger factories in this process, each with its own ZooKeeper session and TCP
bookie client. Broker A keeps a managed ledger whose ledger broker B recovered, closed and deleted
(trimmed): A's next add is refused by the bookies and A fences itself; raw adds to the deleted
ledger are refused by every bookie, also by one killed with -9 and restarted. Bounded: about 20 s.
"""

import time

from twisted.internet import defer, reactor
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import LedgerFencedError
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError
from pulsar_twisted.resources.ledgers import ledger_path, master_key
from pulsar_twisted.testing.cluster import Cluster, ZooKeeperServer, ZooKeeperUnavailable
from pulsar_twisted.wire.bookie import pack_entry

NAME = "public/default/persistent/stale-writer"


class StaleWriterRefusedTests(unittest.TestCase):

    timeout = 120

    def setUp(self):
        try:
            zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise unittest.SkipTest(str(e))
        self.cluster = Cluster(zk, bookies=4, brokers=0)
        self.addCleanup(self.cluster.cleanup)
        self.cluster.start()        # blocking, before this test's reactor work starts

    async def broker(self):
        cluster = self.cluster
        store = ZooKeeperMetadataStore(cluster.zk_server.hosts, reactor, root=cluster.chroot,
                                       session_timeout=10)
        await store.start()
        self.addCleanup(store.close)
        bookies = TcpBookieClient(reactor, request_timeout=5.0)
        self.addCleanup(bookies.close)
        client = BookKeeperClient(store, bookies, reactor, add_timeout_ms=5000)
        config = ManagedLedgerConfig(ensemble_size=3, write_quorum=2, ack_quorum=2,
                                     min_rollover_time_ms=0)
        factory = ManagedLedgerFactory(client, store, reactor, config)
        self.addCleanup(factory.shutdown)
        return factory, bookies

    def test_stale_writer_refused_after_recover_and_delete(self):
        return defer.ensureDeferred(self._scenario())

    async def _scenario(self):
        started = time.monotonic()
        a_factory, a_bookies = await self.broker()
        b_factory, _ = await self.broker()
        a = await a_factory.open(NAME)
        for i in range(5):
            await a.add_entry(b"a-%d" % i)
        stale = a.current_ledger_id()
        ensemble = list(self.cluster.ledger_metadata()[stale].ensembles[-1][1])
        fenced_calls = []
        a.add_fenced_listener(fenced_calls.append)

        # B takes over: recovers (fences) and closes A's ledger, starts its own and, with no
        # cursor and no retention, trims A's ledger: gone from the metadata and the bookies.
        b = await b_factory.open(NAME)
        path = self.cluster.path(ledger_path(stale))
        await _wait(lambda: self.cluster.zk.exists(path) is None, 10, f"ledger {stale} deleted")

        with self.assertRaises(ManagedLedgerFencedError):
            await a.add_entry(b"stale")
        # (This coroutine resumed inside the add's errback; the listener runs right after.)
        await _sleep(0)
        self.assertTrue(a.is_fenced)
        self.assertEqual(fenced_calls, [a])
        self.assertIsNone(a_factory.get(NAME))

        # Every bookie refuses a raw add to the deleted ledger: those of its ensemble remember
        # deleting it, the other one finds no metadata.
        key = master_key(b"")
        for bookie in self.cluster.bookies:
            with self.assertRaises(LedgerFencedError):
                await a_bookies.add_entry(bookie.bookie_id, stale, 5, key,
                                          pack_entry(stale, 5, 4, 10, b"stale"))
        outsiders = [b for b in self.cluster.bookies if b.bookie_id not in ensemble]
        self.assertEqual(len(outsiders), 1)
        refusal = f"refuses an add to ledger {stale}: it has no metadata"
        await _wait(lambda: refusal in outsiders[0].log_text(), 5, "the outsider's refusal logged")
        for bookie in self.cluster.bookies:
            if bookie.bookie_id in ensemble:
                self.assertNotIn(refusal, bookie.log_text(), "refused by its own memory")
        # ... also after a kill -9 and a restart (the delete is durable on the bookie).
        victim = next(b for b in self.cluster.bookies if b.bookie_id in ensemble)
        victim.kill9()
        victim.start()
        for _ in range(100):
            try:
                await a_bookies.add_entry(victim.bookie_id, stale, 6, key,
                                          pack_entry(stale, 6, 4, 11, b"stale2"))
                self.fail("a restarted bookie took an add to a deleted ledger")
            except LedgerFencedError:
                self.assertNotIn(refusal, victim.log_text(), "the delete did not survive kill -9")
                break
            except Exception:       # not listening yet, or the client still reconnecting
                await _sleep(0.1)
        else:
            self.fail(f"bookie {victim.bookie_id} did not come back:\n{victim.log_tail()}")

        # B writes and reads normally.
        pos = await b.add_entry(b"from-b")
        entries = await b.read_entries(b.first_position(), 10)
        self.assertEqual([e.data for e in entries], [b"from-b"])
        self.assertEqual(entries[0].position, pos)
        print(f"\n  stale writer refused; raw adds refused by {len(self.cluster.bookies)} bookies "
              f"(3 remembering the delete, one after kill -9 + restart; 1 by the metadata check); "
              f"{time.monotonic() - started:.1f} s")


def _sleep(seconds):
    d = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


async def _wait(predicate, timeout, what):
    """Poll ``predicate`` without blocking the reactor (the factories run on it)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await _sleep(0.05)
