"""Ledger metadata: serialization, segments, and its storage in the metadata store."""

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import NoSuchLedgerError
from pulsar_twisted.resources import ledgers
from pulsar_twisted.resources.ledgers import (
    LedgerManager, LedgerMetadata, LedgerState, MetadataFormatError, ledger_path, master_key,
    password_digest)
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.interfaces import AlreadyExistsError, BadVersionError


def sample(**kw):
    fields = dict(ensemble_size=3, write_quorum=2, ack_quorum=2,
                  ensembles=((0, ("a", "b", "c")),), password_digest="d")
    fields.update(kw)
    return LedgerMetadata(**fields)


class LedgerMetadataTests(unittest.TestCase):

    def test_round_trip(self):
        """to_bytes/from_bytes keep every field, custom metadata bytes included."""
        md = sample(ensembles=((0, ("a", "b", "c")), (10, ("a", "d", "c"))),
                    state=LedgerState.CLOSED, last_entry_id=41, length=999, ctime_ms=5,
                    custom_metadata={"application": b"pulsar", "bin": b"\x00\xff"})
        self.assertEqual(LedgerMetadata.from_bytes(md.to_bytes()), md)

    def test_unknown_format_and_junk(self):
        raw = sample().to_bytes().replace(b'"format_version":1', b'"format_version":99')
        self.assertRaises(MetadataFormatError, LedgerMetadata.from_bytes, raw)
        self.assertRaises(MetadataFormatError, LedgerMetadata.from_bytes, b"{not json")
        self.assertRaises(MetadataFormatError, LedgerMetadata.from_bytes, b"{}")

    def test_ensemble_for(self):
        """The segment with the greatest first entry <= e holds e."""
        md = sample().with_ensemble(10, ["a", "d", "c"]).with_ensemble(20, ["e", "d", "c"])
        self.assertEqual(md.ensemble_for(0), ("a", "b", "c"))
        self.assertEqual(md.ensemble_for(9), ("a", "b", "c"))
        self.assertEqual(md.ensemble_for(10), ("a", "d", "c"))
        self.assertEqual(md.ensemble_for(500), ("e", "d", "c"))
        self.assertEqual(md.all_bookies(), {"a", "b", "c", "d", "e"})

    def test_segment_at_same_entry_replaces(self):
        """A second change starting at the same entry replaces the empty segment."""
        md = sample().with_ensemble(10, ["a", "d", "c"]).with_ensemble(10, ["a", "e", "c"])
        self.assertEqual(md.ensembles, ((0, ("a", "b", "c")), (10, ("a", "e", "c"))))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.lists(st.text(max_size=12), min_size=1, max_size=5)),
                    min_size=1, max_size=4),
           st.dictionaries(st.text(max_size=20), st.binary(max_size=40), max_size=4),
           st.integers(-1, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
           st.sampled_from(list(LedgerState)), st.text(max_size=70), st.text(max_size=10))
    def test_hand_made_json_is_json_dumps(self, segments, custom, last, length, ctime, state, digest, kind):
        """``to_bytes`` writes exactly what ``json.dumps`` does (non-ASCII, quotes, any segment)."""
        md = sample(ensembles=tuple((first, tuple(bookies)) for first, bookies in segments),
                    custom_metadata=custom, last_entry_id=last, length=length, ctime_ms=ctime,
                    state=state, password_digest=digest, digest_type=kind)
        self.assertEqual(md.to_bytes(), md._json_bytes())
        self.assertEqual(bytes(md), md._json_bytes())
        self.assertEqual(LedgerMetadata.from_bytes(md.to_bytes()), md)

    def test_numbers_not_ints_go_through_json(self):
        md = sample(ctime_ms=1.5, ensemble_size=True)
        self.assertEqual(md.to_bytes(), md._json_bytes())
        self.assertIn(b'"ctime_ms":1.5', md.to_bytes())

    def test_equal_ensembles_are_shared(self):
        """Ledgers on the same bookies hold one ensembles tuple, however their metadata was made
        (issue 14: memory per topic), and the metadata is unchanged by it."""
        first = sample(ensembles=((0, tuple(["a", "b", "c"])),))
        second = sample(ensembles=((0, tuple(["a", "b", "c"])),), ctime_ms=7)
        parsed = LedgerMetadata.from_bytes(second.to_bytes())
        closed = parsed.with_closed(3, 30)
        self.assertIs(second.ensembles, first.ensembles)
        self.assertIs(parsed.ensembles, first.ensembles)
        self.assertIs(closed.ensembles, first.ensembles)
        self.assertEqual(parsed, second)
        other = first.with_ensemble(2, ["a", "d", "c"])
        self.assertEqual(other.ensembles, ((0, ("a", "b", "c")), (2, ("a", "d", "c"))))
        self.assertIsNot(other.ensembles, first.ensembles)

    def test_ensembles_cache_is_bounded(self):
        self.patch(ledgers, "_SHARED_ENSEMBLES", {})
        self.patch(ledgers, "SHARED_ENSEMBLES_MAX", 4)
        made = [sample(ensembles=((0, ("b%d" % i,)),)) for i in range(10)]
        self.assertLessEqual(len(ledgers._SHARED_ENSEMBLES), 4)
        self.assertEqual([md.ensembles for md in made], [((0, ("b%d" % i,)),) for i in range(10)])
        # Unhashable input is kept as given.
        listed = [(0, ["a"])]
        self.assertIs(ledgers.shared_ensembles(listed), listed)

    def test_master_key_is_bookkeepers(self):
        """SHA-1("ledger" + password), as BookKeeper's MacDigestManager."""
        self.assertEqual(master_key(b"pw"), hashlib.sha1(b"ledgerpw").digest())
        self.assertNotEqual(password_digest(master_key(b"pw")), master_key(b"pw").hex())


class LedgerManagerTests(unittest.TestCase):

    def setUp(self):
        self.store = EmbeddedMetadataStore(None, task.Clock())
        self.successResultOf(self.store.start())
        self.manager = LedgerManager(self.store)

    def test_ids_unique_across_sessions(self):
        """Ids from two sessions of one store never repeat, and leave no idgen nodes behind."""
        other = LedgerManager(self.store.new_session())
        ids = [self.successResultOf(m.new_ledger_id()) for m in [self.manager, other] * 5]
        self.assertEqual(len(set(ids)), 10)
        self.assertEqual(self.successResultOf(self.store.get_children("/ledgers/idgen")), [])

    def test_ids_come_in_blocks_of_one_node(self):
        """One sequential node serves ID_BLOCK ids; more concurrent requests than a block holds
        wait for the next block; a new manager (a restart) never repeats an id."""
        from pulsar_twisted.resources.ledgers import ID_BLOCK
        writes = []
        self.store.register_listener(writes.append)
        pending = [self.manager.new_ledger_id() for _ in range(ID_BLOCK + 3)]
        ids = [self.successResultOf(d) for d in pending]
        self.assertEqual(ids, list(range(ID_BLOCK + 3)))
        created = [n for n in writes if n.kind == "created" and n.path.startswith("/ledgers/idgen/")]
        # Two blocks served the ids and one more was fetched ahead (fewer than PREFETCH_IDS
        # left); its ids are skipped after a restart, never reused.
        self.assertEqual(len(created), 3)
        restarted = LedgerManager(self.store)
        self.assertEqual(self.successResultOf(restarted.new_ledger_id()), len(created) * ID_BLOCK)

    def test_held_id_without_a_deferred(self):
        """``held_ledger_id`` hands out the id ``new_ledger_id`` would when one is held; None (and
        no allocation) when none is held or earlier requests wait for one (they go first)."""
        writes = []
        self.store.register_listener(writes.append)
        self.assertIsNone(self.manager.held_ledger_id())
        self.assertEqual(writes, [])
        first = self.successResultOf(self.manager.new_ledger_id())
        self.assertEqual(self.manager.held_ledger_id(), first + 1)
        self.assertEqual(self.manager.held_ledger_id(after=first + 10), first + 11)
        self.assertEqual(self.successResultOf(self.manager.new_ledger_id()), first + 12)
        self.manager._waiters.append((defer.Deferred(), -1))
        self.assertIsNone(self.manager.held_ledger_id())

    def test_ids_above_after_even_across_interleaved_blocks(self):
        """Two managers hold interleaved blocks: the one holding the lower block, asked for an id
        above the other's latest (a managed ledger moving between brokers), skips its held ids
        and waits for a new block rather than hand out a smaller id (positions order by ledger
        id: a smaller one would sort the new entries before the ones already stored)."""
        from pulsar_twisted.resources.ledgers import ID_BLOCK
        a, b = self.manager, LedgerManager(self.store.new_session())
        first_a = self.successResultOf(a.new_ledger_id())       # a holds block 0
        first_b = self.successResultOf(b.new_ledger_id())       # b holds a later block
        self.assertLess(first_a, first_b)
        moved = self.successResultOf(a.new_ledger_id(after=first_b))
        self.assertGreater(moved, first_b)
        self.assertEqual(moved % ID_BLOCK, 0)                    # the first id of a fresh block
        # Waiters queued behind a block allocation keep their own bound.
        bounds = [-1, moved + 5, -1]
        pending = [b.new_ledger_id(after=bound) for bound in bounds]
        got = [self.successResultOf(d) for d in pending]
        self.assertGreater(got[1], moved + 5)
        self.assertEqual(len(set(got + [first_a, first_b, moved])), 6)

    def test_burst_allocates_blocks_at_once_and_prefetches(self):
        """A burst of requests gets every block it needs in flight at once (one metadata batch, not
        one allocation after another), and the next block is fetched before the current runs out."""
        from pulsar_twisted.resources.ledgers import ID_BLOCK

        class HeldPuts:
            def __init__(self, store):
                self.store, self.held = store, []

            def put(self, *a, **kw):
                d = defer.Deferred()
                self.held.append((a, kw, d))
                return d

            def release(self):
                held, self.held = self.held, []
                for a, kw, d in held:
                    self.store.put(*a, **kw).chainDeferred(d)

            def __getattr__(self, name):
                return getattr(self.store, name)

        held = HeldPuts(self.store)
        manager = LedgerManager(held)
        burst = [manager.new_ledger_id() for _ in range(2 * ID_BLOCK + 1)]
        self.assertEqual(len(held.held), 3)
        held.release()
        ids = [self.successResultOf(d) for d in burst]
        self.assertEqual(len(set(ids)), len(ids))
        # Fewer than PREFETCH_IDS left (63): the next block is requested ahead of need.
        self.assertEqual(len(held.held), 1)
        # The ids keep coming while it is on its way; below PREFETCH_IDS - ID_BLOCK held, one
        # more block is asked for.
        more = [self.successResultOf(manager.new_ledger_id()) for _ in range(ID_BLOCK // 2)]
        self.assertEqual(len(held.held), 2)
        self.assertEqual(len(set(ids + more)), len(ids) + len(more))
        held.release()
        self.assertEqual(held.held, [])

    def test_block_allocation_failure_fails_every_waiter(self):
        """A failed block allocation fails each waiting request; the next request tries again."""
        from pulsar_twisted.metadata.interfaces import MetadataUnavailableError

        class Failing:
            def __init__(self, store):
                self.store, self.fail = store, True

            def put(self, *a, **kw):
                if self.fail:
                    return defer.fail(MetadataUnavailableError("down"))
                return self.store.put(*a, **kw)

            def __getattr__(self, name):
                return getattr(self.store, name)

        failing = Failing(self.store)
        manager = LedgerManager(failing)
        first, second = manager.new_ledger_id(), manager.new_ledger_id()
        self.failureResultOf(first, MetadataUnavailableError)
        self.failureResultOf(second, MetadataUnavailableError)
        failing.fail = False
        self.assertEqual(self.successResultOf(manager.new_ledger_id()), 0)

    def test_store_keeps_the_metadata_not_its_json(self):
        """The embedded store holds the LedgerMetadata written (the handle's own object), not a
        copy of its JSON (issue 14), and reads still return exactly that JSON."""
        md = sample(custom_metadata={"pulsar/managed-ledger": b"t/ns/persistent/x"})
        self.successResultOf(self.manager.create(3, md))
        node = self.store._core.tree.nodes[ledger_path(3)]
        self.assertIs(node.value, md)
        raw, _ = self.successResultOf(self.store.get(ledger_path(3)))
        self.assertEqual(raw, md.to_bytes())
        self.assertIsInstance(raw, bytes)
        closed = md.with_closed(5, 50)
        self.successResultOf(self.manager.write(3, closed, 0))
        self.assertIs(node.value, closed)
        self.assertEqual(self.successResultOf(self.store.get(ledger_path(3)))[0], closed.to_bytes())

    def test_create_read_cas_delete(self):
        md = sample()
        version = self.successResultOf(self.manager.create(3, md))
        self.failureResultOf(self.manager.create(3, md), AlreadyExistsError)
        self.assertEqual(self.successResultOf(self.manager.read(3)), (md, version))
        raw, _ = self.successResultOf(self.store.get(ledger_path(3)))
        self.assertEqual(LedgerMetadata.from_bytes(raw), md)
        closed = md.with_closed(5, 50)
        new_version = self.successResultOf(self.manager.write(3, closed, version))
        self.failureResultOf(self.manager.write(3, md, version), BadVersionError)
        self.assertEqual(self.successResultOf(self.manager.read(3)), (closed, new_version))
        self.successResultOf(self.manager.delete(3))
        self.failureResultOf(self.manager.read(3), NoSuchLedgerError)
        self.failureResultOf(self.manager.delete(3), NoSuchLedgerError)
