"""A cluster bookie checks a ledger's metadata before it takes the first add of a ledger it does
not hold (bookie.admission), on an EmbeddedMetadataStore and a FakeBookie, without sockets."""

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.bookie.admission import READ_LIMIT, LedgerAdmission
from pulsar_twisted.bookie.protocol import BookieRequestProcessor
from pulsar_twisted.wire.bookie import pack_entry
from pulsar_twisted.resources.ledgers import LedgerManager, LedgerMetadata
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.proto import bookie_pb2 as pb
from pulsar_twisted.testing.fake_bookie import FakeBookie

KEY = b"master-key"


def add_request(ledger_id, entry_id, recovery_add=False):
    body = pack_entry(ledger_id, entry_id, entry_id - 1, 1, b"x")
    return pb.Request(request_id=entry_id + 1, add_entry=pb.AddEntryRequest(
        ledger_id=ledger_id, entry_id=entry_id, master_key=KEY, body=body,
        recovery_add=recovery_add))


class _Harness:
    """Mixin: a FakeBookie behind a processor with admission, over an embedded store."""

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())
        self.manager = LedgerManager(self.store)
        self.bookie = FakeBookie("b1:3181", self.clock)
        self.admission = LedgerAdmission(self.store, lambda: "b1:3181", self.clock)
        self.processor = BookieRequestProcessor(self.bookie, admission=self.admission)

    def create(self, ledger_id, ensemble):
        metadata = LedgerMetadata(ensemble_size=len(ensemble), write_quorum=len(ensemble),
                                  ack_quorum=1, ensembles=((0, tuple(ensemble)),),
                                  password_digest="", ctime_ms=0)
        self.successResultOf(self.manager.create(ledger_id, metadata))

    def add(self, ledger_id, entry_id, recovery_add=False):
        return self.successResultOf(self.processor.process(add_request(ledger_id, entry_id, recovery_add)))


class AdmissionTests(_Harness, unittest.TestCase):

    def test_known_ledger_in_ensemble_admitted(self):
        """A ledger whose metadata names this bookie is taken; later adds skip the check."""
        self.create(5, ["b0:3181", "b1:3181"])
        self.assertEqual(self.add(5, 0).status, pb.OK)
        self.successResultOf(self.manager.delete(5))
        # The storage holds it now: the next adds do not read the metadata again.
        self.assertEqual(self.add(5, 1).status, pb.OK)
        self.assertEqual(self.bookie.entry_ids(5), [0, 1])

    def test_no_metadata_refused_fenced(self):
        """No metadata (deleted elsewhere, never seen here): FENCED, and nothing is created."""
        response = self.add(9, 0)
        self.assertEqual(response.status, pb.FENCED)
        self.assertFalse(self.bookie.has_ledger(9))
        self.assertEqual(self.add(9, 0, recovery_add=True).status, pb.FENCED)
        self.assertEqual(self.admission.refused, 2)

    def test_not_in_ensemble(self):
        """Metadata that does not name this bookie: a writer's add is refused as UNAVAILABLE (the
        writer replaces the bookie); a recovery add (re-replication) is taken."""
        self.create(6, ["b0:3181", "b2:3181"])
        self.assertEqual(self.add(6, 0).status, pb.UNAVAILABLE)
        self.assertFalse(self.bookie.has_ledger(6))
        self.assertEqual(self.add(6, 0, recovery_add=True).status, pb.OK)
        self.assertTrue(self.bookie.has_ledger(6))

    def test_unanswered_read_refused_as_unavailable(self):
        """The metadata store does not answer (the bookie cut off from ZooKeeper, its read queued
        until it reconnects): after READ_LIMIT the waiting first adds are refused as UNAVAILABLE,
        at once, so the writer replaces the bookie instead of timing it out. The late answer is
        dropped; the next add reads again and is taken."""
        self.create(7, ["b1:3181"])
        held = []
        real_get = self.store.get

        def silent_get(path):
            held.append((defer.Deferred(), path))
            return held[-1][0]
        self.patch(self.store, "get", silent_get)
        first = self.processor.process(add_request(7, 0))
        second = self.processor.process(add_request(7, 1))
        self.assertEqual(len(held), 1)      # one read for both
        self.clock.advance(READ_LIMIT - 0.1)
        self.assertNoResult(first)
        self.clock.advance(0.1)
        self.assertEqual([self.successResultOf(d).status for d in (first, second)],
                         [pb.UNAVAILABLE, pb.UNAVAILABLE])
        self.assertEqual(self.admission.unanswered, 1)
        self.assertFalse(self.bookie.has_ledger(7))
        late, path = held[0]
        real_get(path).chainDeferred(late)       # answered after all: nothing left to decide
        self.patch(self.store, "get", real_get)
        self.assertEqual(self.add(7, 0).status, pb.OK)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_deleted_here_refused_without_reading(self):
        """A ledger this bookie deleted is refused by the storage itself, metadata or not."""
        self.create(4, ["b1:3181"])
        self.assertEqual(self.add(4, 0).status, pb.OK)
        self.successResultOf(self.bookie.delete_ledger(4))
        self.assertEqual(self.add(4, 1).status, pb.FENCED)
        self.assertFalse(self.bookie.has_ledger(4))

    def test_concurrent_first_adds_share_one_read_in_order(self):
        """First adds arriving while the metadata read is in flight share it and are applied in
        arrival order."""
        self.create(8, ["b1:3181"])
        reads = []
        real_read = self.admission._manager.read
        gate = defer.Deferred()

        def slow_read(ledger_id):
            reads.append(ledger_id)
            return gate.addCallback(lambda _: real_read(ledger_id))
        self.admission._manager.read = slow_read
        order = []
        real_add = self.bookie.add_entry

        def recording_add(ledger_id, entry_id, *a, **kw):
            order.append(entry_id)
            return real_add(ledger_id, entry_id, *a, **kw)
        self.bookie.add_entry = recording_add
        ds = [self.processor.process(add_request(8, e)) for e in range(3)]
        self.assertEqual(order, [])
        gate.callback(None)
        self.assertEqual([self.successResultOf(d).status for d in ds], [pb.OK] * 3)
        self.assertEqual((reads, order), ([8], [0, 1, 2]))


class MetadataGcTests(_Harness, unittest.TestCase):
    """A bookie that missed a delete drops the ledger once its metadata is gone."""

    def setUp(self):
        super().setUp()
        from pulsar_twisted.bookie.metadata_gc import MetadataGarbageCollector
        self.successResultOf(self.store.put("/ledgers/INSTANCEID", b"cluster-a"))
        self.gc = MetadataGarbageCollector(self.bookie, self.store)

    def test_deletes_only_ledgers_without_metadata(self):
        self.create(1, ["b1:3181"])
        self.create(2, ["b1:3181"])
        self.assertEqual(self.add(1, 0).status, pb.OK)
        self.assertEqual(self.add(2, 0).status, pb.OK)
        self.successResultOf(self.manager.delete(2))   # deleted while this bookie was away
        self.assertEqual(self.successResultOf(self.gc.run()), [2])
        self.assertEqual(self.bookie.ledger_ids(), [1])
        self.assertTrue(self.bookie.was_deleted(2))
        self.assertEqual(self.add(2, 1).status, pb.FENCED)
        read = pb.Request(request_id=9, read_entry=pb.ReadEntryRequest(ledger_id=2, entry_id=0))
        self.assertEqual(self.successResultOf(self.processor.process(read)).status,
                         pb.NO_SUCH_LEDGER)
        self.assertEqual(self.successResultOf(self.gc.run()), [])

    def test_ledger_created_during_the_listing_is_kept(self):
        """A ledger whose first add arrives while the metadata is being listed is not touched:
        the local ids are taken before the listing."""
        self.create(3, ["b1:3181"])
        real = self.store.get_children
        gate = defer.Deferred()

        def slow_children(path):
            return gate.addCallback(lambda _: real(path))
        self.store.get_children = slow_children
        d = self.gc.run()
        self.assertEqual(self.add(3, 0).status, pb.OK)
        gate.callback(None)
        self.assertEqual(self.successResultOf(d), [])
        self.assertEqual(self.bookie.ledger_ids(), [3])

    def test_server_runs_it_periodically(self):
        """BookieServer with a metadata store runs the pass on its clock."""
        from twisted.internet.testing import MemoryReactorClock
        from pulsar_twisted.bookie.server import BookieServer
        clock = MemoryReactorClock()
        store = EmbeddedMetadataStore(None, clock)
        self.successResultOf(store.start())
        self.successResultOf(store.put("/ledgers/INSTANCEID", b"cluster-a"))
        bookie = FakeBookie("b1:3181", clock)
        server = BookieServer(bookie, clock, endpoint="tcp:3181", bookie_id="b1:3181",
                              metadata_store=store, own_storage=False, disk_usage=lambda: 0.1,
                              disk_check_interval=0, metadata_gc_interval=60)
        self.successResultOf(server.start())
        self.addCleanup(server.stop)
        self.successResultOf(bookie.add_entry(5, 0, b"x", KEY))   # no metadata at all
        clock.advance(60)
        self.assertFalse(bookie.has_ledger(5))
        self.assertEqual(server.metadata_gc.deleted, 1)

    def test_store_without_the_cluster_layout_deletes_nothing(self):
        """A store that does not hold this cluster's BookKeeper layout (a wrong chroot, a store
        not initialized yet) lists no ledger at all: nothing is deleted, since absence from it
        proves nothing (BookKeeper's cookie check refuses such a bookie for the same reason)."""
        from pulsar_twisted.bookie.metadata_gc import MetadataGarbageCollector
        self.create(1, ["b1:3181"])
        self.assertEqual(self.add(1, 0).status, pb.OK)
        other = EmbeddedMetadataStore(None, self.clock)      # the wrong chroot: empty
        self.successResultOf(other.start())
        self.successResultOf(other.put("/ledgers/available/b1:3181", b""))  # our registration
        gc = MetadataGarbageCollector(self.bookie, other)
        self.assertEqual(self.successResultOf(gc.run()), [])
        self.assertEqual(self.bookie.ledger_ids(), [1])

    def test_instance_id_changed_deletes_nothing(self):
        """The store now holds another cluster's layout (INSTANCEID differs from the one this
        bookie first saw): the pass deletes nothing."""
        self.create(1, ["b1:3181"])
        self.create(2, ["b1:3181"])
        self.assertEqual(self.add(1, 0).status, pb.OK)
        self.assertEqual(self.add(2, 0).status, pb.OK)
        self.assertEqual(self.successResultOf(self.gc.run()), [])
        self.successResultOf(self.store.put("/ledgers/INSTANCEID", b"cluster-b"))
        self.successResultOf(self.manager.delete(1))
        self.successResultOf(self.manager.delete(2))
        self.assertEqual(self.successResultOf(self.gc.run()), [])
        self.assertEqual(self.bookie.ledger_ids(), [1, 2])
