"""
Tiered storage in the managed ledger (``mledger/offloads.py``, ``mledger/offload/``), on the fake
ledger client, the in-memory metadata store and an in-memory blob store whose calls run at once.
"""

import json
import os

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger import formats, offloads
from pulsar_twisted.mledger.interfaces import (
    ManagedLedgerFencedError, OffloadAlreadyRunningError, OffloadNotConfiguredError)
from pulsar_twisted.mledger.offload import format as fmt
from pulsar_twisted.mledger.offload.blobstore import MemoryBlobStore
from pulsar_twisted.mledger.offload.offloader import OffloaderRegistry

from tests.mledger.test_support import ManagedLedgerHarness, data

NAME = "public/default/persistent/t"
HOUR_MS = 3600 * 1000


class SyncRegistry(OffloaderRegistry):
    """Blob-store calls run at once on the test's thread (``held``: copies wait for the test)."""

    def __init__(self, clock):
        super().__init__(clock)
        self.held = None

    def copy_call(self):
        def call(fn, *args):
            if self.held is not None:
                d = defer.Deferred()
                self.held.append((d, fn, args))
                return d
            return defer.maybeDeferred(fn, *args)
        return call

    def read_call(self):
        return lambda fn, *args: defer.maybeDeferred(fn, *args)

    def release(self):
        held, self.held = self.held, None
        for d, fn, args in held:
            defer.maybeDeferred(fn, *args).chainDeferred(d)


class OffloadHarness(ManagedLedgerHarness):

    def setUp(self):
        super().setUp()
        self.blobs = MemoryBlobStore(min_part_size=64)
        self.registry = SyncRegistry(self.clock)
        self.offloader = self.registry.add(self.blobs, block_size=256)
        self.factory = self.new_factory()

    def new_factory(self, **kw):
        factory = super().new_factory(**kw)
        factory.offloaders = getattr(self, "registry", None)
        return factory

    def config(self, **kw):
        kw.setdefault("offloader", getattr(self, "offloader", None))
        kw.setdefault("offload_deletion_lag_ms", -1)
        # Kept whether consumed or not (no cursor holds them in most tests).
        kw.setdefault("retention_time_ms", -1)
        kw.setdefault("retention_size_mb", -1)
        return super().config(**kw)

    def node(self):
        value = self.successResultOf(self.store.get(formats.ledger_path(NAME)))
        return formats.decode_ledger_info(value[0])[0]

    def contexts(self):
        return {row[0]: row[4] for row in self.node()}

    def filled(self, entries=12, per_ledger=3, **kw):
        ml = self.open(NAME, max_entries_per_ledger=per_ledger, **kw)
        positions = self.add(ml, entries)
        return ml, positions, sorted({p.ledger_id for p in positions})

    def read_all(self, ml):
        entries = self.successResultOf(ml.read_entries(Position(-1, -1), 1000))
        return [e.data for e in entries]


class OffloadPrefixTests(OffloadHarness, unittest.TestCase):

    def test_sealed_ledgers_before_the_position_are_offloaded(self):
        """Every sealed ledger before the asked ledger is copied and recorded complete; the later
        ones and the current are not. Status, stats and sizes say so."""
        ml, positions, ledgers = self.filled()
        first = self.successResultOf(ml.offload_prefix(Position(ledgers[2], 0)))
        self.assertEqual(first, Position(ledgers[2], 0))
        contexts = self.contexts()
        for lid in ledgers[:2]:
            self.assertTrue(contexts[lid].complete)
            self.assertFalse(contexts[lid].bk_deleted)
            self.assertIn(fmt.data_key(contexts[lid].uid, lid), self.blobs.objects)
            self.assertIn(fmt.index_key(contexts[lid].uid, lid), self.blobs.objects)
        self.assertTrue(all(contexts[lid] is None for lid in ledgers[2:]))
        self.assertEqual(ml.offload_status(), {
            "status": "SUCCESS", "lastError": "",
            "firstUnoffloadedMessage": {"ledgerId": ledgers[2], "entryId": 0}})
        stats = ml.internal_stats()["ledgers"]
        self.assertEqual([s["offloaded"] for s in stats], [True, True, False, False, False][:len(stats)])
        sizes = {i["ledgerId"]: i["size"] for i in ml.ledgers_info()}
        self.assertEqual(ml.offloaded_size(), sizes[ledgers[0]] + sizes[ledgers[1]])

    def test_reads_come_from_tiered_storage(self):
        """With tiered-storage-first, an offloaded ledger's entries are read from the objects, and
        are the entries written."""
        ml, positions, ledgers = self.filled()
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        ml._cache.clear()
        before = self.blobs.calls.get("get_range", 0)
        self.assertEqual(self.read_all(ml), [data(i) for i in range(12)])
        self.assertGreater(self.blobs.calls.get("get_range", 0), before)
        state = offloads.state_of(ml)      # what /metrics' brk_ledgeroffloader_* show
        self.assertGreater(state.offload_bytes, 0)
        self.assertEqual(state.read_bytes, sum(len(data(i)) for i in range(9)))

    def test_many_parts(self):
        """A ledger larger than a block goes up as a multipart upload and reads back whole."""
        ml = self.open(NAME, max_entries_per_ledger=50)
        big = [b"%d-" % i + b"x" * 100 for i in range(50)]
        for d in big:
            self.successResultOf(ml.add_entry(d))
        self.add(ml, 1)
        lid = ml.ledgers_info()[0]["ledgerId"]
        self.successResultOf(ml.offload_prefix(Position(ml.current_ledger_id(), 0)))
        self.assertGreaterEqual(self.blobs.calls["upload_part"], 2)
        ml._cache.clear()
        entries = self.successResultOf(ml.read_entries(Position(lid, 0), 100))
        self.assertEqual([e.data for e in entries][:50], big)

    def test_second_request_while_running_is_refused(self):
        ml, positions, ledgers = self.filled()
        self.registry.held = []
        d = ml.offload_prefix(Position(ledgers[-1], 0))
        self.assertRaises(OffloadAlreadyRunningError, ml.offload_prefix, Position(ledgers[-1], 0))
        self.assertEqual(ml.offload_status()["status"], "RUNNING")
        while self.registry.held:
            self.registry.release()
            self.registry.held = []
        self.registry.held = None
        self.successResultOf(d)
        self.assertEqual(ml.offload_status()["status"], "SUCCESS")

    def test_without_an_offloader(self):
        """As Pulsar's NullLedgerOffloader: the offload fails, and its status says why."""
        ml = self.open(NAME, offloader=None)
        self.failureResultOf(ml.offload_prefix(Position(0, 0)), OffloadNotConfiguredError)
        status = ml.offload_status()
        self.assertEqual(status["status"], "ERROR")
        self.assertIn("managedLedgerOffloadDriver", status["lastError"])

    def test_invalid_position(self):
        ml, positions, ledgers = self.filled()
        self.failureResultOf(ml.offload_prefix(Position(ledgers[-1] + 100, 0)))
        status = ml.offload_status()
        self.assertEqual(status["status"], "ERROR")
        self.assertIn("Invalid position for offload", status["lastError"])


class FailureTests(OffloadHarness, unittest.TestCase):

    def test_failed_copy_leaves_the_bookies_copy_and_no_objects(self):
        """A copy that fails half-way: status ERROR naming the cause, the ledger still read from the
        bookies, its context incomplete, and the objects of the attempt deleted."""
        ml, positions, ledgers = self.filled()
        self.blobs.fail = {"put"}
        self.failureResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        status = ml.offload_status()
        self.assertEqual(status["status"], "ERROR")
        self.assertIn("injected failure", status["lastError"])
        state = offloads.state_of(ml)
        self.assertEqual((state.offload_errors, state.write_errors), (1, 1))
        context = self.contexts()[ledgers[0]]
        self.assertFalse(context.complete)
        self.assertEqual(self.blobs.objects, {})
        ml._cache.clear()
        self.assertEqual(self.read_all(ml), [data(i) for i in range(12)])
        # Once the store works again the next attempt, under a new uid, succeeds.
        self.blobs.fail = set()
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        again = self.contexts()[ledgers[0]]
        self.assertTrue(again.complete)
        self.assertNotEqual(again.uid, context.uid)

    def test_an_attempt_left_by_a_crash_is_cleaned_by_the_next(self):
        """A crash after recording the attempt (context incomplete, objects half written): a new
        owner reads the bookies' copy, and its own offload deletes the earlier attempt's objects."""
        ml, positions, ledgers = self.filled()
        self.registry.held = []
        first_run = ml.offload_prefix(Position(ledgers[1], 0))
        stale = self.contexts()[ledgers[0]]
        self.assertFalse(stale.complete)
        self.blobs.objects[fmt.data_key(stale.uid, ledgers[0])] = b"half"
        first_owners, self.registry.held = self.registry.held, None
        # The new owner: another factory over the same store and bookies (fences this one).
        other = self.new_factory()
        ml2 = self.successResultOf(other.open(NAME, self.config(max_entries_per_ledger=3)))
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])
        self.successResultOf(ml2.offload_prefix(Position(ledgers[1], 0)))
        self.assertNotIn(fmt.data_key(stale.uid, ledgers[0]), self.blobs.objects)
        fresh = self.contexts()[ledgers[0]]
        self.assertTrue(fresh.complete)
        self.assertNotEqual(fresh.uid, stale.uid)
        # The first owner wakes up and finishes its copy: its completion is refused (fenced), and
        # the stored list keeps the new owner's context.
        for d, fn, args in first_owners:
            defer.maybeDeferred(fn, *args).chainDeferred(d)
        self.failureResultOf(first_run, ManagedLedgerFencedError)
        self.assertEqual(self.contexts()[ledgers[0]], fresh)
        self.assertTrue(ml.is_fenced or ml.state.name in ("CLOSED", "FENCED"))
        ml2._cache.clear()
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])

    def test_paused_owner_cannot_mark_complete(self):
        """An owner paused during the copy, taken over meanwhile: when it wakes up its completion
        write fails and fences it; nothing is deleted from the bookies."""
        ml, positions, ledgers = self.filled()
        self.registry.held = []
        d = ml.offload_prefix(Position(ledgers[1], 0))
        other = self.new_factory()
        ml2 = self.successResultOf(other.open(NAME, self.config(max_entries_per_ledger=3,
                                                                offload_deletion_lag_ms=0)))
        while self.registry.held:
            self.registry.release()
            self.registry.held = []
        self.registry.held = None
        self.failureResultOf(d)
        self.assertTrue(ml.is_fenced)
        self.assertFalse(self.contexts()[ledgers[0]].complete)
        self.successResultOf(ml2.trim_consumed_ledgers())
        self.assertIn(ledgers[0], self.bk.ledger_ids())
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])

    def test_corrupt_object_is_an_error_not_data(self):
        """A damaged data object fails the read from tiered storage; while the bookies still have
        the ledger, the read goes there and returns the right entries."""
        ml, positions, ledgers = self.filled()
        self.successResultOf(ml.offload_prefix(Position(ledgers[1], 0)))
        context = self.contexts()[ledgers[0]]
        key = fmt.data_key(context.uid, ledgers[0])
        raw = bytearray(self.blobs.objects[key])
        raw[-1] ^= 0xFF
        self.blobs.objects[key] = bytes(raw)
        ml._cache.clear()
        self.assertEqual(self.read_all(ml), [data(i) for i in range(12)])
        handle = self.successResultOf(self.offloader.open(context.uid, ledgers[0]))
        self.failureResultOf(handle.read_entries(0, 2), fmt.FormatError)


class DeletionTests(OffloadHarness, unittest.TestCase):

    def test_bookies_copy_goes_after_the_lag(self):
        """An offloaded ledger stays on the bookies until the deletion lag passed, then a trim marks
        it bkDeleted and deletes it there; reads still find every entry."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=HOUR_MS)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(self.bk.deleted, [])
        self.clock.advance(3601)
        self.successResultOf(ml.trim_consumed_ledgers())
        sealed = ledgers[:-1]
        self.assertEqual(sorted(self.bk.deleted), sealed)
        self.assertTrue(all(self.contexts()[lid].bk_deleted for lid in sealed))
        ml._cache.clear()
        self.assertEqual(self.read_all(ml), [data(i) for i in range(12)])
        # And after a restart, from the stored contexts alone.
        self.successResultOf(ml.close())
        ml2 = self.open(NAME, max_entries_per_ledger=3)
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])

    def test_failed_bookie_delete_is_tried_again(self):
        """A delete from the bookies that fails (ZooKeeper away) leaves the row unmarked, and the
        next trim deletes the ledger and marks it: nothing is left on the bookies for good."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=0)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.bk.fail_next_deletes(1)
        self.successResultOf(ml.trim_consumed_ledgers())
        contexts = self.contexts()
        left = [lid for lid in ledgers[:-1] if not contexts[lid].bk_deleted]
        self.assertEqual(len(left), 1)
        self.assertIn(left[0], self.bk.ledger_ids())
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertNotIn(left[0], self.bk.ledger_ids())
        self.assertTrue(self.contexts()[left[0]].bk_deleted)

    def test_deleted_from_bookies_before_recorded(self):
        """A ledger gone from the bookies while its row still says otherwise (a crash between the
        delete and the write): read bookkeeper-first, it comes from tiered storage; the next trim
        finds it gone and records it."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=-1, offload_read_tiered_first=False)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.successResultOf(ml.close())
        self.successResultOf(self.bk.delete_ledger(ledgers[0]))
        ml2 = self.open(NAME, max_entries_per_ledger=3, offload_read_tiered_first=False,
                        offload_deletion_lag_ms=0)
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])
        self.successResultOf(ml2.trim_consumed_ledgers())
        self.assertTrue(all(self.contexts()[lid].bk_deleted for lid in ledgers[:-1]))

    def test_negative_lag_never_deletes(self):
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=-1)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.clock.advance(10 * 24 * 3600)
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(self.bk.deleted, [])

    def test_trim_deletes_the_objects_too(self):
        """A consumed offloaded ledger that retention lets go is deleted from the bookies (if still
        there) and from tiered storage."""
        ml, positions, ledgers = self.filled()
        cursor = self.cursor(ml)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.assertTrue(self.blobs.objects)
        ml.config = self.config(max_entries_per_ledger=3, retention_time_ms=0, retention_size_mb=0)
        self.successResultOf(cursor.mark_delete(positions[-1]))
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(self.blobs.objects, {})
        self.assertTrue(set(ledgers[:-1]) <= set(self.bk.deleted))

    def test_ledger_trimmed_during_its_offload(self):
        """A ledger trimmed while it is being copied: the offload ends in error and leaves no
        object behind, whichever of the trim's delete and the last upload came first."""
        ml, positions, ledgers = self.filled()
        cursor = self.cursor(ml)
        self.registry.held = []
        d = ml.offload_prefix(Position(ledgers[1], 0))
        ml.config = self.config(max_entries_per_ledger=3, retention_time_ms=0, retention_size_mb=0)
        self.successResultOf(cursor.mark_delete(positions[-1]))
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertIn(ledgers[0], self.bk.deleted)
        while self.registry.held:
            self.registry.release()
            self.registry.held = []
        self.registry.held = None
        self.failureResultOf(d)
        self.assertEqual(self.blobs.objects, {})

    def test_deleting_the_managed_ledger_deletes_the_objects(self):
        ml, positions, ledgers = self.filled()
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.assertTrue(self.blobs.objects)
        self.successResultOf(self.factory.delete(NAME))
        self.assertEqual(self.blobs.objects, {})


class ThresholdTests(OffloadHarness, unittest.TestCase):

    def test_zero_threshold_offloads_every_sealed_ledger(self):
        """Threshold 0: each ledger is offloaded once a switch seals it."""
        ml, positions, ledgers = self.filled(offload_threshold_bytes=0)
        contexts = self.contexts()
        self.assertTrue(all(contexts[lid] is not None and contexts[lid].complete
                            for lid in ledgers[:-1]), contexts)

    def test_size_threshold_keeps_the_newest(self):
        """Walking back from the newest, ledgers are offloaded once the sizes summed pass the
        threshold: the newest ones (within it) stay only on the bookies."""
        ml = self.open(NAME, max_entries_per_ledger=3)
        self.add(ml, 12)
        size = ml.ledgers_info()[0]["size"]
        ml.config = self.config(max_entries_per_ledger=3, offload_threshold_bytes=2 * size)
        ml.maybe_offload()
        done = [row[0] for row in self.node() if row[4] is not None and row[4].complete]
        ids = [i["ledgerId"] for i in ml.ledgers_info()]
        # Sizes from the newest: current (full, 3 entries), then ledger -2 (2 * size: not over),
        # ledger -3 (over): ledgers up to -3 go.
        self.assertEqual(done, ids[:-2])

    def test_no_threshold_no_automatic_offload(self):
        ml, positions, ledgers = self.filled()
        self.assertTrue(all(c is None for c in self.contexts().values()))
        self.assertEqual(json.loads(self.successResultOf(
            self.store.get(formats.ledger_path(NAME)))[0])["v"], 1)


class FileSystemOffloadTests(OffloadHarness, unittest.TestCase):
    """The same path on the ``filesystem`` driver (a directory), through the registry as a broker
    builds it from a namespace's OffloadPolicies."""

    def setUp(self):
        super().setUp()
        from pulsar_twisted.resources.policies import OffloadPolicies
        self.directory = os.path.abspath(self.mktemp())
        self.policies = OffloadPolicies(driver="filesystem", file_system_uri="file://" + self.directory)
        self.offloader = self.registry.for_policies(self.policies)

    def test_one_offloader_per_location(self):
        """Every topic of the namespace, and every reader of a recorded context, share one."""
        self.assertIs(self.registry.for_policies(self.policies), self.offloader)
        self.assertIs(self.registry.for_context("filesystem", self.offloader.metadata), self.offloader)

    def test_offload_and_read_back_after_the_bookies_copy_is_gone(self):
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=0)
        self.successResultOf(ml.offload_prefix(Position(ledgers[-1], 0)))
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(sorted(self.bk.deleted), ledgers[:-1])
        objects = [n for n in os.listdir(self.directory) if not n.startswith(".")]
        self.assertEqual(len(objects), 2 * len(ledgers[:-1]))
        self.successResultOf(ml.close())
        ml2 = self.open(NAME, max_entries_per_ledger=3)
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])


class ReviewedFailureTests(OffloadHarness, unittest.TestCase):
    """Failure paths a review found (each lost data or stuck a topic before its fix)."""

    def fail_puts(self, n, skip=0):
        """The next ``n`` metadata writes (after ``skip``) fail without being applied."""
        real = getattr(self, "_real_put", None) or self.store.put
        self._real_put = real
        left = {"n": n, "skip": skip}

        def put(*a, **kw):
            if left["skip"] > 0:
                left["skip"] -= 1
                return real(*a, **kw)
            if left["n"] > 0:
                left["n"] -= 1
                return defer.fail(ConnectionError("connection loss (not applied)"))
            return real(*a, **kw)
        self.store.put = put

    def test_unrecorded_completion_is_stored_before_the_bookies_copy_goes(self):
        """The completion's write fails (not applied), then the trim's write too: the bookies keep
        the ledger, and a new owner reads every entry."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=0)
        self.fail_puts(1, skip=1)
        self.failureResultOf(ml.offload_prefix(Position(ledgers[1], 0)))
        self.assertFalse(self.contexts()[ledgers[0]].complete)
        self.fail_puts(1)
        self.failureResultOf(ml.trim_consumed_ledgers())
        self.assertEqual(self.bk.deleted, [])
        self.successResultOf(ml.trim_consumed_ledgers())
        self.assertTrue(self.contexts()[ledgers[0]].complete)
        self.successResultOf(ml.close())
        ml2 = self.open(NAME, max_entries_per_ledger=3, offload_deletion_lag_ms=0)
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])

    def test_completion_write_in_flight_keeps_the_bookies_copy(self):
        """A trim while the completion's write is in flight (lag 0) deletes nothing from the bookies
        until a write carrying the completion landed; a crash meanwhile loses nothing."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=0)
        real = self.store.put
        held = []

        def put(*a, **kw):
            if put.calls >= 1:          # the completion's write (and later ones) never land
                d = defer.Deferred()
                held.append(d)
                return d
            put.calls += 1
            return real(*a, **kw)
        put.calls = 0
        self.store.put = put
        self.assertNoResult(ml.offload_prefix(Position(ledgers[1], 0)))
        ml.trim_consumed_ledgers()
        self.assertEqual(self.bk.deleted, [])
        self.store.put = real           # kill -9; a new owner
        other = self.new_factory()
        ml2 = self.successResultOf(other.open(NAME, self.config(max_entries_per_ledger=3)))
        self.assertEqual(self.read_all(ml2), [data(i) for i in range(12)])

    def test_a_store_that_cannot_be_opened_fails_the_read(self):
        """A blob store that cannot be made on this broker (a directory, a credentials profile):
        the read fails, it does not wait for good, and a later read works once it can be made."""
        ml, positions, ledgers = self.filled(offload_deletion_lag_ms=0)
        self.successResultOf(ml.offload_prefix(Position(ledgers[1], 0)))
        self.successResultOf(ml.trim_consumed_ledgers())
        ml._cache.clear()
        ml._read_handles.clear()

        def cannot(driver, metadata):
            raise RuntimeError("no such directory")
        self.registry.for_context = cannot
        self.failureResultOf(ml.read_entries(Position(-1, -1), 1000))
        self.assertEqual(dict(ml._opening_handles), {})
        del self.registry.for_context
        self.assertEqual(self.read_all(ml), [data(i) for i in range(12)])
