"""
Power loss under a real cluster bookie: its journal and ledger directories on lazyfs
(``pulsar_twisted.testing.lazyfs``, which keeps every write in memory until it is fsynced), a
BookKeeper client (``pulsar_twisted.ledger``) adding entries as fast as the bookies take them, then,
with adds in flight, the bookie's disk cut (every write not fsynced dropped; the cut lands inside
one of its writes, so there always is one) and the bookie killed -9. The disk
is mounted again, the bookie restarted on it, the ledger opened with recovery: every entry whose add
was acknowledged must read back byte for byte.

Several rounds on one cluster (each round a new ledger; every earlier ledger is read again after each
cut), with checkpoints every 200 ms, journal files rolled every 1 MB and entry logs every 512 KB, so
the cuts land in group commits, journal rolls, checkpoints and replays of earlier cuts.

- one bookie, E=Qw=Qa=1: the acknowledgement is the journal's group-commit fsync alone;
- three bookies, E/Qw/Qa 3/3/2, two of them killed and cut at once.

Skipped, with the reason, without ZooKeeper or where FUSE cannot be mounted. Each test prints its
figures.
"""

import os
import random
import time

from twisted.internet import defer, reactor, task, threads
from twisted.trial import unittest

from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
from pulsar_twisted.testing.cluster import Cluster, ZooKeeperServer, ZooKeeperUnavailable, wait_for
from pulsar_twisted.testing.lazyfs import LazyFSMount, unavailable_reason

PASSWORD = b"power-loss"

BOOKIE_CONFIG = {
    "journalSyncData": "true",
    "journalMaxGroupWaitMSec": 1,
    "journalMaxSizeMB": 1,
    "logSizeLimit": 512 * 1024,
    "flushInterval": 200,
    "zkTimeout": 4000,
}


class Writer:
    """Adds entries to ``handle``, keeping ``window`` adds outstanding, until ``stop()``.

    Payloads name their index (``%08d|`` then random bytes), so an entry read back can be matched
    with what was sent. ``acked``: entry id -> payload, for each add whose Deferred fired."""

    def __init__(self, handle, rng: random.Random, window: int = 32):
        self.handle = handle
        self.rng = rng
        self.window = window
        self.sent = []
        self.acked = {}
        self.failures = []
        self.outstanding = 0
        self.stopped = False
        self._idle = None

    def start(self):
        for _ in range(self.window):
            self._add()

    def _add(self):
        if self.stopped or self.failures:
            return
        index = len(self.sent)
        payload = b"%08d|" % index + self.rng.randbytes(self.rng.randint(50, 3000))
        self.sent.append(payload)
        self.outstanding += 1
        d = self.handle.add_entry(payload)
        d.addCallbacks(self._acked, self._failed, callbackArgs=(index,))
        d.addBoth(self._settled)

    def _acked(self, entry_id, index):
        if entry_id != index:
            self.failures.append(f"add #{index} was given entry id {entry_id}")
            return
        self.acked[entry_id] = self.sent[index]
        self._add()

    def _failed(self, failure):
        self.failures.append(failure.getErrorMessage())

    def _settled(self, _):
        self.outstanding -= 1
        if self.outstanding == 0 and self._idle is not None:
            d, self._idle = self._idle, None
            d.callback(None)

    def stop(self):
        """Issue no more adds; a Deferred firing once every outstanding add has settled."""
        self.stopped = True
        if self.outstanding == 0:
            return defer.succeed(None)
        self._idle = defer.Deferred()
        return self._idle


class PowerLossMixin:
    timeout = 240
    rounds = 3
    bookies = 1
    quorum = (1, 1, 1)
    victims = 1            # bookies killed and cut at each round
    min_acked = 400        # acknowledged adds of a round before the cut...
    min_seconds = 1.5      # ...and seconds of writing (several checkpoints)

    def setUp(self):
        reason = unavailable_reason()
        if reason:
            raise unittest.SkipTest(reason)
        try:
            self.zk = ZooKeeperServer.shared()
        except ZooKeeperUnavailable as e:
            raise unittest.SkipTest(str(e))
        self.rng = random.Random(11)
        return threads.deferToThread(self.start_cluster)

    def start_cluster(self):
        """Blocking: one lazyfs per bookie (its journal and ledger dirs on it), then the cluster."""
        base = os.path.abspath(self.mktemp())
        self.cluster = Cluster(self.zk, bookies=self.bookies, brokers=0, bookie_config=BOOKIE_CONFIG)
        self.mounts = {}
        for bookie in self.cluster.bookies:
            mount = LazyFSMount(os.path.join(base, bookie.name, "durable"),
                                os.path.join(base, bookie.name, "disk"))
            # Cleanups run last-added first: the cluster (killing the bookies) goes before the mounts.
            self.addCleanup(mount.stop)
            mount.start()
            self.mounts[bookie.name] = mount
            bookie.settings.update(journalDirectory=os.path.join(mount.mountpoint, "journal"),
                                   ledgerDirectories=os.path.join(mount.mountpoint, "ledgers"))
            bookie.write_config()
        self.addCleanup(self.cluster.cleanup)
        self.cluster.start()

    async def client(self):
        store = ZooKeeperMetadataStore(self.zk.hosts, reactor, root=self.cluster.chroot, session_timeout=10)
        await store.start()
        self.addCleanup(store.close)
        bookies = TcpBookieClient(reactor, None, request_timeout=5.0)
        self.addCleanup(bookies.close)
        client = BookKeeperClient(store, bookies, reactor, add_timeout_ms=5000, read_timeout_ms=5000)
        await client.start()
        self.addCleanup(self.quiet, client)
        return client

    async def quiet(self, client):
        """Before the store closes: BookKeeperClient has no close, and a registration refresh (the
        cluster's cleanup or a late session expiry changes them) failing on a closed store would
        be an unhandled error in whichever test runs then."""
        client._refresh_bookies = lambda: defer.succeed(None)
        deadline = time.monotonic() + 10
        while client._refreshing and time.monotonic() < deadline:
            await task.deferLater(reactor, 0.05, lambda: None)

    async def wait_writable(self, client):
        """Until the client sees every bookie writable (a restarted bookie's registration comes
        and goes while its old session expires)."""
        wanted = {b.bookie_id for b in self.cluster.bookies}
        deadline = time.monotonic() + 30
        while not wanted <= set(client.writable_bookies):
            if time.monotonic() > deadline:
                self.fail(f"the client sees {sorted(client.writable_bookies)} writable, not "
                          f"{sorted(wanted)}\n{self.cluster.logs()}")
            await task.deferLater(reactor, 0.05, lambda: None)

    def power_cut(self, victims) -> dict:
        """Blocking: the power cut. Each victim's disk is armed to die inside one of its next
        writes (a random one of the next 300), so the cut lands with a write not yet durable,
        wherever the bookie is between write and fsync; as soon as one disk has died, the others'
        die too, then every victim is killed -9. Returns bookie name -> what its cut dropped."""
        for bookie in victims:
            self.mounts[bookie.name].arm(self.rng.randint(1, 300))
        deadline = time.monotonic() + 30
        while not any(self.mounts[b.name].wait_cut(0.02) for b in victims):
            if time.monotonic() > deadline:
                raise AssertionError(f"no armed cut within 30 s\n{self.cluster.logs()}")
        dropped = {}
        for bookie in victims:
            mount = self.mounts[bookie.name]
            dropped[bookie.name] = mount.wait_cut(0) or mount.cut(dead=True)
        for bookie in victims:
            bookie.kill9()
        return dropped

    def power_on(self, victims, sessions: dict) -> None:
        """Blocking: mount each victim's disk again (a new lazyfs process on the durable state) and
        restart the bookie on it; wait until it is registered by its new session (the killed
        process's registration lingers until its session expires)."""
        old = {b.name: sessions[b.name] for b in victims}
        for bookie in victims:
            self.mounts[bookie.name].restart()
        for bookie in victims:
            bookie.spawn()
        for bookie in victims:
            bookie.wait_ready()
        for bookie in victims:
            wait_for(lambda: self.cluster.session_of(bookie.registration) not in (None, old[bookie.name]),
                     30, f"{bookie.name} registered by its new session", on_timeout=self.cluster.logs)

    async def write_until_cut(self, client, figures: dict) -> tuple:
        """One round: a new ledger, adds until enough are acknowledged, then the power cut with adds
        in flight. Returns (ledger id, the writer)."""
        await self.wait_writable(client)
        handle = await client.create_ledger(*self.quorum, password=PASSWORD)
        writer = Writer(handle, self.rng)
        started = time.monotonic()
        writer.start()
        while len(writer.acked) < self.min_acked or time.monotonic() - started < self.min_seconds:
            if writer.failures:
                self.fail(f"adds failed before the cut: {writer.failures[:3]}\n{self.cluster.logs()}")
            if time.monotonic() - started > 60:
                self.fail(f"only {len(writer.acked)} adds acknowledged in 60 s\n{self.cluster.logs()}")
            await task.deferLater(reactor, 0.01, lambda: None)
        victims = self.rng.sample(self.cluster.bookies, self.victims)
        sessions = {b.name: self.cluster.session_of(b.registration) for b in victims}
        figures["in_flight"] = writer.outstanding
        figures["acked_when_armed"] = len(writer.acked)
        figures["dropped"] = await threads.deferToThread(self.power_cut, victims)
        figures["seconds"] = round(time.monotonic() - started, 1)
        # Adds still outstanding fail (connections lost, add timeout) or, with a survivor, finish.
        await writer.stop()
        figures["acked"] = len(writer.acked)
        await threads.deferToThread(self.power_on, victims, sessions)
        return handle.ledger_id, writer

    async def check_ledger(self, client, ledger_id: int, writer: Writer) -> dict:
        """Open the ledger (recovering it if still open) and compare with what the writer sent."""
        handle = await client.open_ledger(ledger_id, PASSWORD, recovery=True)
        lac = handle.last_add_confirmed
        read = {}
        first = 0
        while first <= lac:
            last = min(lac, first + 199)
            for entry in await handle.read_entries(first, last):
                read[entry.entry_id] = entry.data
            first = last + 1
        lost = sorted(i for i in writer.acked if i not in read)
        wrong = sorted(i for i, data in read.items() if i >= len(writer.sent) or data != writer.sent[i])
        return dict(lac=lac, acked=len(writer.acked), lost=lost, wrong=wrong)

    async def run_rounds(self):
        client = await self.client()
        ledgers = []
        checked = 0
        for round_ in range(self.rounds):
            figures = {}
            ledger_id, writer = await self.write_until_cut(client, figures)
            ledgers.append((ledger_id, writer))
            for earlier_id, earlier_writer in ledgers:
                result = await self.check_ledger(client, earlier_id, earlier_writer)
                if result["lost"] or result["wrong"]:
                    self.fail(f"round {round_}, ledger {earlier_id}: {len(result['lost'])} acknowledged "
                              f"entries lost (first {result['lost'][:10]}), {len(result['wrong'])} read "
                              f"back wrong (first {result['wrong'][:10]}); recovered LAC {result['lac']}; "
                              f"round figures {figures}\n{self.cluster.logs()}")
                checked += 1
                if earlier_id == ledger_id:
                    figures["recovered_lac"] = result["lac"]
            print(f"\npower-loss round {round_} ({self.bookies} bookies, E/Qw/Qa "
                  f"{'/'.join(map(str, self.quorum))}, {self.victims} cut): {figures}, 0 lost")
        self.assertEqual(checked, self.rounds * (self.rounds + 1) // 2)


class SingleBookiePowerLossTests(PowerLossMixin, unittest.TestCase):
    """E=Qw=Qa=1 on one bookie: each acknowledgement is one journal group commit's fsync."""

    def test_acknowledged_entries_survive_power_cuts(self):
        return defer.ensureDeferred(self.run_rounds())


class ThreeBookiesPowerLossTests(PowerLossMixin, unittest.TestCase):
    """E/Qw/Qa 3/3/2, two of the three bookies killed and cut at once."""

    bookies = 3
    quorum = (3, 3, 2)
    victims = 2
    rounds = 2

    def test_acknowledged_entries_survive_power_cuts(self):
        return defer.ensureDeferred(self.run_rounds())


class StoragePowerLossTests(unittest.TestCase):
    """BookieStorage in this process, on a fresh lazyfs disk: acknowledged adds survive a power cut
    right after the first start (the directories the bookie created must be durable too)."""

    timeout = 60

    def setUp(self):
        reason = unavailable_reason()
        if reason:
            raise unittest.SkipTest(reason)
        base = os.path.abspath(self.mktemp())
        self.mount = LazyFSMount(os.path.join(base, "durable"), os.path.join(base, "disk")).start()
        self.addCleanup(self.mount.stop)

    def storage(self):
        from pulsar_twisted.bookie.storage import BookieStorage
        disk = self.mount.mountpoint
        # With the journal's preallocation on: the cut must not lose what was written over zeros.
        return BookieStorage(os.path.join(disk, "journal"), [os.path.join(disk, "ledgers")], reactor,
                             flush_interval_ms=0, gc_wait_time_ms=0, journal_prealloc_mb=1)

    async def run_cut(self, checkpoint: bool, ledgers=(7,), entries=50, more=10):
        """Add ``entries`` entries to each ledger (then, with ``checkpoint``, checkpoint and add ``more``),
        cut the power, restart: every acknowledged entry reads back."""
        storage = self.storage()
        await storage.start()
        key = b"k" * 20

        def add(first, last):
            return defer.gatherResults([storage.add_entry(lid, i, b"entry-%d-%d" % (lid, i), key, i - 1)
                                        for lid in ledgers for i in range(first, last)])
        await add(0, entries)
        total = entries
        if checkpoint:
            await storage.checkpoint()
            await add(entries, entries + more)
            total += more
        storage.simulate_crash()
        self.mount.cut(dead=True)
        self.mount.restart()
        storage = self.storage()
        await storage.start()
        self.addCleanup(storage.stop)
        self.assertEqual(storage.ledger_ids(), sorted(ledgers))
        for lid in ledgers:
            for i in range(total):
                self.assertEqual(await storage.read_entry(lid, i), b"entry-%d-%d" % (lid, i))

    def test_journal_only(self):
        return defer.ensureDeferred(self.run_cut(checkpoint=False))

    def test_after_a_checkpoint(self):
        """Entries in the entry log and index (checkpointed) and in the journal after the mark."""
        return defer.ensureDeferred(self.run_cut(checkpoint=True))

    def test_small_ledgers_after_a_checkpoint(self):
        """Many ledgers of a few entries each (a burst of new topics): indexed in the index table alone,
        which the checkpoint makes durable before its mark; the entries after the mark replay."""
        return defer.ensureDeferred(self.run_cut(checkpoint=True, ledgers=range(1, 41), entries=2, more=1))

    def test_cut_inside_each_write_of_a_checkpoint(self):
        """A checkpoint that fences a ledger with an index file (its header there is an older copy) and
        one in the index table alone, removes a deleted ledger's record and indexes new ledgers, cut
        inside each of its writes in turn: after each cut every acknowledged entry reads back, the
        fences hold (the table's header, not the file's older copy) and the deleted ledger stays
        deleted."""
        return defer.ensureDeferred(self.run_armed_cuts())

    async def run_armed_cuts(self):
        key = b"k" * 20
        counts = {1: 10, 2: 3, 4: 2, 5: 8}
        cut_at = 1
        while True:
            base = os.path.abspath(self.mktemp())
            mount = LazyFSMount(os.path.join(base, "durable"), os.path.join(base, "disk")).start()
            self.addCleanup(mount.stop)
            self.mount = mount
            storage = self.storage()
            await storage.start()

            def add(lid, first, last):
                return defer.gatherResults([storage.add_entry(lid, i, b"e%d-%d" % (lid, i), key, i - 1)
                                            for i in range(first, last)])
            await add(1, 0, 10)     # past the inline slots: an index file, with a copy of the header
            await add(2, 0, 3)
            await add(3, 0, 3)
            await storage.checkpoint()
            await storage.fence_ledger(1, key)
            await storage.fence_ledger(2, key)
            await storage.delete_ledger(3)
            await add(4, 0, 2)
            await add(5, 0, 8)
            mount.arm(cut_at)
            try:
                await storage.checkpoint()
            except Exception:
                pass                # the cut: every later write fails
            cut = mount.wait_cut(0.05)
            storage.simulate_crash()
            if cut is None:
                mount.cut(dead=True)
            mount.restart()
            storage = self.storage()
            await storage.start()
            try:
                where = f"cut inside write {cut_at} of the checkpoint"
                self.assertEqual(storage.ledger_ids(), [1, 2, 4, 5], where)
                self.assertTrue(storage.is_fenced(1) and storage.is_fenced(2), where)
                self.assertTrue(storage.was_deleted(3), where)
                self.assertEqual(storage.read_lac(1), 8, where)
                for lid, count in counts.items():
                    for i in range(count):
                        self.assertEqual(await storage.read_entry(lid, i), b"e%d-%d" % (lid, i), where)
            finally:
                await storage.stop()
                mount.stop()
            if cut is None:
                break               # the checkpoint finished before the armed write: all covered
            cut_at += 1
        self.assertGreater(cut_at, 5)
