"""
Batches of adds (``add_entries_notify``) through the real ledger handle and in-process bookie
client over FakeBookies: one request per bookie, completions handed up together, and a batch
refused part-way settled add by add as one add at a time would.
"""

from twisted.trial import unittest

from pulsar_twisted.common.position import Position
from pulsar_twisted.mledger.interfaces import ManagedLedgerFencedError

from tests.mledger.test_one_writer import TwoBrokers
from tests.mledger.test_support import data


class Recorder:
    """A ctx waiter (the topic's role): ``(ctx, position or error type)`` in order."""

    def __init__(self):
        self.events = []

    def adds_complete(self, positions, ctxs):
        self.events.extend(zip(ctxs, positions))

    def add_failed(self, failure, ctx):
        self.events.append((ctx, failure.type))


class BatchedAddsTests(TwoBrokers, unittest.TestCase):

    def test_batch_one_request_per_bookie_completed_in_order(self):
        """A batch of 4 on a 3/3/2 ledger: each bookie gets one request of all 4 (4 adds counted
        each), and the waiter hears of all 4 in order once the bookies answer."""
        ml = self.open(self.broker(ensemble_size=3, write_quorum=3, ack_quorum=2))
        for bookie in self.bookies.values():
            bookie.hold("add")
        waiter = Recorder()
        self.assertEqual(ml.add_entries_notify([data(i) for i in range(4)], waiter, range(4)), 4)
        self.assertEqual(waiter.events, [])
        self.assertEqual([len(b.held) for b in self.bookies.values()], [4, 4, 4])
        for bookie in self.bookies.values():
            bookie.release_held()
        lid = ml.current_ledger_id()
        self.assertEqual(waiter.events, [(i, Position(lid, i)) for i in range(4)])
        self.assertEqual(ml.number_of_entries(), 4)
        entries = self.successResultOf(ml.read_entries(Position(lid, 0), 4))
        self.assertEqual([e.data for e in entries], [data(i) for i in range(4)])

    def test_batch_on_a_recovered_ledger_fails_in_order(self):
        """A batch on a ledger another owner recovered: the bookies refuse it, the managed ledger
        fences itself, and every add of the batch fails with ManagedLedgerFencedError, in order
        (one at a time: the first fenced it, the others found it fenced); none is stored."""
        a = self.open(self.broker())
        self.successResultOf(a.add_entry(data(0)))
        self.open(self.broker())     # B recovers A's ledger
        waiter = Recorder()
        taken = a.add_entries_notify([data(i) for i in range(1, 4)], waiter, [1, 2, 3])
        # The first add fails at once; the others are given back and, made again, refused.
        self.assertEqual(taken, 1)
        self.assertEqual(a.add_entries_notify([data(2), data(3)], waiter, [2, 3]), 1)
        self.assertEqual(a.add_entries_notify([data(3)], waiter, [3]), 1)
        self.assertEqual(waiter.events, [(i, ManagedLedgerFencedError) for i in (1, 2, 3)])
