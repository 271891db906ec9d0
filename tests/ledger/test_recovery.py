"""Opening ledgers: fencing, recovery of the tail, non-recovery reads."""

from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import (
    BookieUnavailableError, LedgerClosedError, LedgerFencedError, LedgerRecoveryError, NoSuchEntryError,
    NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.ledger.handle import WriterState
from pulsar_twisted.resources.ledgers import LedgerManager, LedgerState
from tests.ledger.test_handle import LedgerHarness


class RecoveryTests(LedgerHarness, unittest.TestCase):

    def open(self, ledger_id, recovery=True, password=b"pw"):
        return self.successResultOf(self.client.open_ledger(ledger_id, password, recovery))

    def test_open_closed_ledger(self):
        """A closed ledger opens read-only at its recorded last entry, without fencing."""
        writer = self.create()
        self.add_all(writer, [b"a", b"b"])
        self.successResultOf(writer.close())
        reader = self.open(writer.ledger_id)
        self.assertTrue(reader.closed)
        self.assertEqual((reader.last_add_confirmed, reader.length), (1, 2))
        self.assertEqual(self.read_payloads(reader, 0, 1), [b"a", b"b"])
        self.assertFalse(any(b.is_fenced(writer.ledger_id) for b in self.bookies.values()))
        self.failureResultOf(reader.add_entry(b"c"), LedgerClosedError)

    def test_fencing_stops_the_writer(self):
        """Recovery while a writer is open: the reader sees exactly the acked entries, the
        writer's next add fails with LedgerFencedError, and the metadata is closed there."""
        writer = self.create(3, 2, 2)
        payloads = [b"e%d" % i for i in range(7)]
        self.add_all(writer, payloads)
        reader = self.open(writer.ledger_id)
        self.assertEqual(reader.last_add_confirmed, 6)
        self.assertEqual(reader.length, sum(map(len, payloads)))
        self.assertEqual(self.read_payloads(reader, 0, 6), payloads)
        self.failureResultOf(writer.add_entry(b"late"), LedgerFencedError)
        self.assertEqual(writer.state, WriterState.ERRORED)
        self.failureResultOf(writer.add_entry(b"later"), LedgerFencedError)
        stored = self.stored_metadata(writer.ledger_id)
        self.assertEqual((stored.state, stored.last_entry_id), (LedgerState.CLOSED, 6))
        # A fenced writer closes locally only: the recovered metadata stands.
        self.successResultOf(writer.close())
        self.assertEqual(self.stored_metadata(writer.ledger_id), stored)

    def test_pending_adds_fail_when_fenced(self):
        """Adds in flight when fencing lands fail with LedgerFencedError, later ones too."""
        writer = self.create(3, 2, 2)
        self.add_all(writer, [b"a"])
        ensemble = self.ensemble_bookies(writer)
        ensemble[2].hang("add")                 # entry 1 -> indices 1, 2: stuck at one ack
        pending = writer.add_entry(b"b")
        ensemble[2].clear_faults()
        reader = self.open(writer.ledger_id)
        # Entry 1 reached one bookie of its write set: recovery may keep it (BookKeeper semantics).
        self.assertIn(reader.last_add_confirmed, (0, 1))
        writer.add_entry(b"c").addErrback(lambda f: f.trap(LedgerFencedError))
        self.failureResultOf(pending, LedgerFencedError)

    def test_entries_on_ack_quorum_not_yet_acked_are_recovered(self):
        """An entry stored on Qa bookies whose acks never reached the writer is kept."""
        writer = self.create(3, 3, 2)
        self.add_all(writer, [b"a", b"b"])
        for bookie in self.bookies.values():
            bookie.hold("add")
        unacked = writer.add_entry(b"c")
        for bookie in self.bookies.values():
            bookie.clear_faults()
        reader = self.open(writer.ledger_id)
        self.assertEqual(reader.last_add_confirmed, 2)
        self.assertEqual(self.read_payloads(reader, 0, 2), [b"a", b"b", b"c"])
        self.assertNoResult(unacked)

    def test_tail_rereplicated(self):
        """A tail entry written to fewer than Qw bookies is re-added to its whole write set."""
        writer = self.create(3, 3, 2)
        self.add_all(writer, [b"a", b"b"])
        ensemble = self.ensemble_bookies(writer)
        ensemble[1].hang("add")
        ensemble[2].hang("add")
        writer.add_entry(b"c").addErrback(lambda f: None)
        self.assertEqual([b.entry_ids(writer.ledger_id) for b in ensemble],
                         [[0, 1, 2], [0, 1], [0, 1]])
        for bookie in ensemble:
            bookie.clear_faults()
        reader = self.open(writer.ledger_id)
        self.assertEqual(reader.last_add_confirmed, 2)
        self.assertEqual([b.entry_ids(writer.ledger_id) for b in ensemble], [[0, 1, 2]] * 3)
        ensemble[0].available = False
        self.assertEqual(self.read_payloads(reader, 0, 2), [b"a", b"b", b"c"])

    def test_recovery_after_ensemble_change(self):
        """Recovery fences the last segment and keeps entries of earlier ones."""
        writer = self.create(3, 2, 2)
        self.add_all(writer, [b"a", b"b"])
        self.ensemble_bookies(writer)[0].fail("add")
        self.add_all(writer, [b"c", b"d", b"e"])
        self.assertEqual(len(writer.metadata.ensembles), 2)
        reader = self.open(writer.ledger_id)
        self.assertEqual(reader.last_add_confirmed, 4)
        self.assertEqual(self.read_payloads(reader, 0, 4), [b"a", b"b", b"c", b"d", b"e"])
        for bookie_id in writer.metadata.last_ensemble[1]:
            self.assertTrue(self.bookies[bookie_id].is_fenced(writer.ledger_id))

    def test_empty_open_ledger(self):
        writer = self.create()
        reader = self.open(writer.ledger_id)
        self.assertEqual((reader.last_add_confirmed, reader.length), (-1, 0))
        self.failureResultOf(writer.add_entry(b"x"), LedgerFencedError)

    def test_not_enough_answers_fails_and_can_retry(self):
        """Without answers covering every ack quorum, recovery fails and leaves IN_RECOVERY;
        once the bookies are back a second open recovers."""
        writer = self.create(3, 2, 2)
        self.add_all(writer, [b"a", b"b", b"c"])
        ensemble = self.ensemble_bookies(writer)
        ensemble[0].available = False
        ensemble[1].available = False
        self.failureResultOf(self.client.open_ledger(writer.ledger_id, b"pw"),
                             LedgerRecoveryError)
        self.assertEqual(self.stored_metadata(writer.ledger_id).state, LedgerState.IN_RECOVERY)
        ensemble[0].available = ensemble[1].available = True
        reader = self.open(writer.ledger_id)
        self.assertEqual(reader.last_add_confirmed, 2)

    def test_hung_bookie_times_out_during_fencing(self):
        """One silent bookie of three (Qw=Qa=2 would need it) fails after the read timeout;
        with Qw=3, Qa=2 the other two cover every quorum."""
        writer = self.create(3, 3, 2)
        self.add_all(writer, [b"a", b"b"])
        self.ensemble_bookies(writer)[1].hang("any")
        d = self.client.open_ledger(writer.ledger_id, b"pw")
        self.assertNoResult(d)
        # fencing, then reading entries 1 and 2, each wait one read timeout for the silent bookie;
        # re-adding entry 1 waits one add timeout.
        self.clock.pump([5, 5, 5])
        self.assertNoResult(d)
        self.clock.advance(30)
        self.assertEqual(self.successResultOf(d).last_add_confirmed, 1)

    def test_writer_ensemble_change_sees_recovery(self):
        """A writer whose ensemble change meets IN_RECOVERY metadata is fenced."""
        writer = self.create(3, 2, 2)
        self.add_all(writer, [b"a"])
        manager = LedgerManager(self.store)
        metadata, version = self.successResultOf(manager.read(writer.ledger_id))
        self.successResultOf(manager.write(
            writer.ledger_id, metadata.with_state(LedgerState.IN_RECOVERY), version))
        self.ensemble_bookies(writer)[1].fail("add")
        self.failureResultOf(writer.add_entry(b"b"), LedgerFencedError)

    def test_two_recoveries_agree(self):
        writer = self.create()
        self.add_all(writer, [b"a", b"b"])
        first = self.open(writer.ledger_id)
        second = self.open(writer.ledger_id)
        self.assertEqual(first.last_add_confirmed, second.last_add_confirmed)

    def test_open_without_recovery(self):
        """recovery=False reads up to the LAC the bookies know and does not fence."""
        writer = self.create(3, 2, 2)
        self.add_all(writer, [b"a", b"b", b"c", b"d"])
        reader = self.open(writer.ledger_id, recovery=False)
        self.assertEqual(reader.last_add_confirmed, 2)    # entry 3 carried LAC 2
        self.assertFalse(reader.closed)
        self.assertEqual(self.read_payloads(reader, 0, 2), [b"a", b"b", b"c"])
        self.assertEqual(self.successResultOf(writer.add_entry(b"e")), 4)
        self.assertEqual(self.stored_metadata(writer.ledger_id).state, LedgerState.OPEN)

    def test_open_without_recovery_no_bookie(self):
        writer = self.create(3, 2, 2)
        for bookie in self.bookies.values():
            bookie.available = False
        self.failureResultOf(self.client.open_ledger(writer.ledger_id, b"pw", False),
                             BookieUnavailableError)

    def test_wrong_password_and_missing_ledger(self):
        writer = self.create(password=b"secret")
        self.failureResultOf(self.client.open_ledger(writer.ledger_id, b"nope"),
                             UnauthorizedAccessError)
        self.failureResultOf(self.client.open_ledger(12345, b"pw"), NoSuchLedgerError)
        self.assertEqual(self.successResultOf(writer.add_entry(b"ok")), 0)


class AckedSurviveFailuresTests(LedgerHarness, unittest.TestCase):
    """Issue 11 item 5: a bookie fails mid-write (some adds reached Qa, some not), the writer changes
    its ensemble, then a second client recovers the ledger: every entry acked to the writer is
    readable, and nothing past the recovered end is."""

    def test_mid_write_failure_then_recovery_by_another_client(self):
        """Recovery finds 8 and 9 on the spare: it may keep them (never acked, but written)."""
        end = self.scenario(spare_down=False)
        self.assertIn(end, (7, 8, 9))

    def test_recovery_without_the_only_copy_of_unacked_entries(self):
        """The spare (only holder of 8 and 9) is down at recovery: the end is exactly the last
        acked entry."""
        self.assertEqual(self.scenario(spare_down=True), 7)

    def scenario(self, spare_down):
        writer = self.create(3, 3, 2)
        first_ensemble = list(writer.metadata.last_ensemble[1])
        spare = next(b for b in self.bookies if b not in first_ensemble)
        b0, b1, b2 = (self.bookies[b] for b in first_ensemble)
        acked = {}

        def add(i):
            payload = b"entry-%d" % i
            d = writer.add_entry(payload)
            d.addCallbacks(lambda eid, p=payload: acked.__setitem__(eid, p), lambda f: None)
            return d

        for i in range(5):                  # 0..4: all three bookies
            add(i)
        self.assertEqual(sorted(acked), list(range(5)))
        # b2 dies (its adds fail) and b1 stops answering (stores nothing): 5..7 are acked only
        # once the ensemble change puts the spare in b2's place (b0 + spare = Qa).
        b2.fail("add")
        b1.hang("add")
        for i in range(5, 8):
            add(i)
        self.assertEqual(writer.metadata.last_ensemble[1][first_ensemble.index(b2.bookie_id)], spare)
        self.assertEqual(sorted(acked), list(range(8)))
        # Then b0 hangs too: 8 and 9 reach the spare only, one ack short of Qa: never acked.
        b0.hang("add")
        for i in range(8, 10):
            add(i)
        self.assertEqual(sorted(acked), list(range(8)))

        # The writer's broker dies; b0 and b1 answer again (b2 stays down) and another client
        # recovers the ledger.
        b0.clear_faults()
        b1.clear_faults()
        if spare_down:
            self.bookies[spare].available = False
        other = self.make_client()
        reader = self.successResultOf(other.open_ledger(writer.ledger_id, b"pw", recovery=True))
        end = reader.last_add_confirmed
        self.assertGreaterEqual(end, max(acked))
        self.assertLessEqual(end, 9)
        self.assertTrue(reader.closed)
        got = self.successResultOf(reader.read_entries(0, end))
        for entry in got:
            if entry.entry_id in acked:
                self.assertEqual(entry.data, acked[entry.entry_id])
            else:               # recovered although never acked: only 8/9, as the writer sent them
                self.assertEqual(entry.data, b"entry-%d" % entry.entry_id)
        self.failureResultOf(reader.read_entries(end + 1, end + 1), NoSuchEntryError)
        # A third client sees the same end (the recovery was recorded), and the writer is done.
        again = self.successResultOf(self.make_client().open_ledger(writer.ledger_id, b"pw"))
        self.assertEqual(again.last_add_confirmed, end)
        self.failureResultOf(writer.add_entry(b"late"), LedgerFencedError)
        return end


class RecoveryReadAheadTests(unittest.TestCase):
    """Recovery reads the tail after the LAC with several entries in flight: a writer that
    pipelined many adds leaves a long tail (a broker's LAC lags by its adds in flight), and one
    round trip per entry kept the topic unavailable for seconds after a heal."""

    def test_tail_reads_overlap(self):
        from twisted.internet import defer, task
        from pulsar_twisted.ledger.handle import LedgerEnv
        from pulsar_twisted.ledger.quorum import DistributionSchedule
        from pulsar_twisted.ledger.recovery import LedgerRecoveryOp
        from pulsar_twisted.resources.ledgers import LedgerMetadata
        from pulsar_twisted.wire.bookie import pack_entry

        clock = task.Clock()
        stored = 200                 # entries 0..199 on every bookie, none confirmed
        rounds = []                  # Deferreds answered at the next tick

        class SlowBookies:
            def read_entry(self, bookie, ledger_id, entry_id, **kw):
                d = defer.Deferred()
                if entry_id < stored:
                    rounds.append((d, pack_entry(ledger_id, entry_id, -1, entry_id + 1, b"x")))
                else:
                    rounds.append((d, NoSuchEntryError("no such entry")))
                return d

            def add_entry(self, *a, **kw):
                return defer.succeed(None)

        env = LedgerEnv(bookie_client=SlowBookies(), clock=clock, manager=None, placement=None,
                        writable_bookies=lambda: set())
        metadata = LedgerMetadata(ensemble_size=2, write_quorum=2, ack_quorum=2,
                                  ensembles=((0, ("b0", "b1")),), password_digest="")
        op = LedgerRecoveryOp(env, 7, b"key")
        d = defer.Deferred.fromCoroutine(
            op._read_forward(metadata, 0, DistributionSchedule(2, 2, 2), -1))
        ticks = 0
        while not d.called and ticks < 1000:
            batch, rounds[:] = list(rounds), []
            ticks += 1
            for waiting, answer in batch:
                if isinstance(answer, Exception):
                    waiting.errback(answer)
                else:
                    waiting.callback(answer)
        self.assertEqual(self.successResultOf(d), (stored - 1, stored))
        self.assertLessEqual(ticks, stored // 8, f"{ticks} round trips for {stored} entries")
