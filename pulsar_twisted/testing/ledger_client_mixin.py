"""
One set of tests for the ``ILedgerClient`` / ``ILedgerHandle`` contract, run against every ledger
client: the in-memory ``FakeLedgerClient`` the managed-ledger and broker tests stand on, and the
real ``BookKeeperClient`` over bookies.

Mix ``LedgerClientTestsMixin`` into a ``twisted.trial.unittest.TestCase`` and define:

- ``make_ledger_client()``: a fresh, started ``ILedgerClient`` with no ledgers (or a Deferred or
  coroutine firing with one), able to create ledgers of ensemble 3, write quorum 2, ack quorum 2.
  The test case cleans up after it itself.

The tests use the interface only and wait on every Deferred, so an implementation may answer at
once or later. What they pin down is what the managed ledger relies on: ids assigned in order,
completions in order, the LAC, reads bounded by it, close, fencing by a recovering open, an
unrecovered open reading what the bookies know (one entry behind the writer, since each add
carries the LAC of the adds before it), delete, and the error of each refusal.
"""

from twisted.internet import defer
from zope.interface.verify import verifyObject

from pulsar_twisted.common.bk_errors import (
    LedgerClosedError, LedgerFencedError, NoSuchEntryError, NoSuchLedgerError, UnauthorizedAccessError)
from pulsar_twisted.ledger.interfaces import ILedgerClient, ILedgerHandle, LedgerEntry
from pulsar_twisted.testing.assert_fails_mixin import AssertFailsMixin
from pulsar_twisted.testing.bookie_client_mixin import contract_test

__all__ = ["LedgerClientTestsMixin"]

PASSWORD = b"secret"


class LedgerClientTestsMixin(AssertFailsMixin):
    """The ILedgerClient contract; see the module docstring for what the test case must provide."""

    timeout = 30

    def make_ledger_client(self):
        raise NotImplementedError

    async def _setup(self):
        self.client = await defer.maybeDeferred(self.make_ledger_client)

    def setUp(self):
        return defer.ensureDeferred(self._setup())

    def create(self, ensemble=3, write=2, ack=2, password=PASSWORD):
        """A new ledger's writer, closed at cleanup (a real writer keeps an add-timeout timer)."""
        def created(handle):
            self.addCleanup(handle.close)
            return handle
        return self.client.create_ledger(ensemble, write, ack, password).addCallback(created)

    async def write(self, payloads, password=PASSWORD):
        """A new ledger holding ``payloads`` (still open); returns its writer."""
        handle = await self.create(password=password)
        for payload in payloads:
            await handle.add_entry(payload)
        return handle

    async def read_all(self, handle):
        entries = await handle.read_entries(0, handle.last_add_confirmed)
        return [e.data for e in entries]

    # -- create and add ----------------------------------------------------------------------------

    @contract_test
    async def test_interfaces(self):
        """The client provides ILedgerClient, writers and readers ILedgerHandle."""
        self.assertTrue(verifyObject(ILedgerClient, self.client))
        writer = await self.write([b"a"])
        self.assertTrue(verifyObject(ILedgerHandle, writer))
        await writer.close()
        self.assertTrue(verifyObject(ILedgerHandle, await self.client.open_ledger(writer.ledger_id, PASSWORD)))

    @contract_test
    async def test_new_ledger_is_empty_and_open(self):
        """A new ledger has a new id, LAC -1, length 0, and is not closed."""
        first, second = await self.create(), await self.create()
        self.assertNotEqual(first.ledger_id, second.ledger_id)
        self.assertEqual((first.last_add_confirmed, first.length, first.closed), (-1, 0, False))

    @contract_test
    async def test_bad_quorums_refused(self):
        """Quorums must satisfy ensemble >= write >= ack >= 1: ValueError otherwise."""
        for quorums in ((2, 3, 2), (3, 2, 3), (3, 2, 0)):
            await self.assert_fails(self.client.create_ledger(*quorums, PASSWORD), ValueError)

    @contract_test
    async def test_adds_numbered_and_completed_in_order(self):
        """Entry ids are 0, 1, 2, ... and the adds complete in that order; LAC and length follow."""
        handle = await self.create()
        completed = []
        adds = [handle.add_entry(b"x" * (i + 1)).addCallback(completed.append) for i in range(5)]
        await defer.gatherResults(adds)
        self.assertEqual(completed, [0, 1, 2, 3, 4])
        self.assertEqual(handle.last_add_confirmed, 4)
        self.assertEqual(handle.length, 1 + 2 + 3 + 4 + 5)

    # -- reads -------------------------------------------------------------------------------------

    @contract_test
    async def test_read_ranges(self):
        """read_entries(first, last) answers LedgerEntry objects for first..last inclusive."""
        handle = await self.write([b"a", b"b", b"c", b"d"])
        entries = await handle.read_entries(1, 2)
        self.assertEqual(entries, [LedgerEntry(handle.ledger_id, 1, b"b"), LedgerEntry(handle.ledger_id, 2, b"c")])
        self.assertEqual([e.data for e in await handle.read_entries(3, 3)], [b"d"])

    @contract_test
    async def test_read_beyond_lac_and_bad_ranges(self):
        """Past the LAC: NoSuchEntryError; a negative first id or first > last: ValueError."""
        handle = await self.write([b"a", b"b"])
        await self.assert_fails(handle.read_entries(1, 2), NoSuchEntryError)
        await self.assert_fails(handle.read_entries(-1, 0), ValueError)
        await self.assert_fails(handle.read_entries(1, 0), ValueError)

    # -- close and open ----------------------------------------------------------------------------

    @contract_test
    async def test_close_then_open(self):
        """A closed writer refuses adds; opening the ledger (either way) reads it all."""
        writer = await self.write([b"a", b"b", b"c"])
        await writer.close()
        self.assertTrue(writer.closed)
        await self.assert_fails(writer.add_entry(b"d"), LedgerClosedError)
        await writer.close()     # closing twice is harmless
        for recovery in (True, False):
            reader = await self.client.open_ledger(writer.ledger_id, PASSWORD, recovery=recovery)
            self.assertTrue(reader.closed)
            self.assertEqual((reader.last_add_confirmed, reader.length), (2, 3))
            self.assertEqual(await self.read_all(reader), [b"a", b"b", b"c"])
            await self.assert_fails(reader.add_entry(b"d"), LedgerClosedError)
            await reader.close()

    @contract_test
    async def test_empty_ledger_closed(self):
        """A ledger closed with no entries opens with LAC -1 and length 0."""
        writer = await self.create()
        await writer.close()
        reader = await self.client.open_ledger(writer.ledger_id, PASSWORD)
        self.assertEqual((reader.last_add_confirmed, reader.length, reader.closed), (-1, 0, True))

    @contract_test
    async def test_recovery_open_fences_the_writer(self):
        """Opening an open ledger with recovery closes it at its last entry; its writer's adds
        then fail with LedgerFencedError, and its close still completes."""
        writer = await self.write([b"a", b"b", b"c"])
        reader = await self.client.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
        self.assertTrue(reader.closed)
        self.assertEqual(reader.last_add_confirmed, 2)
        self.assertEqual(await self.read_all(reader), [b"a", b"b", b"c"])
        await self.assert_fails(writer.add_entry(b"d"), LedgerFencedError)
        await self.assert_fails(writer.add_entry(b"e"), LedgerFencedError)
        await writer.close()
        again = await self.client.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
        self.assertEqual(again.last_add_confirmed, 2)

    @contract_test
    async def test_open_without_recovery(self):
        """Opening an open ledger without recovery does not fence it: the reader sees up to the
        LAC the bookies know (the last add carried the LAC before it), and the writer goes on."""
        writer = await self.write([b"a", b"b", b"c", b"d"])
        reader = await self.client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        self.assertFalse(reader.closed)
        self.assertEqual(reader.last_add_confirmed, 2)
        self.assertEqual(await self.read_all(reader), [b"a", b"b", b"c"])
        await self.assert_fails(reader.read_entries(3, 3), NoSuchEntryError)
        self.assertEqual(await writer.add_entry(b"e"), 4)
        # A reader's LAC is what it learned when it opened.
        self.assertEqual(reader.last_add_confirmed, 2)

    @contract_test
    async def test_open_refusals(self):
        """Open with the wrong password: UnauthorizedAccessError; an unknown id: NoSuchLedgerError."""
        writer = await self.write([b"a"])
        await writer.close()
        await self.assert_fails(self.client.open_ledger(writer.ledger_id, b"wrong"), UnauthorizedAccessError)
        await self.assert_fails(self.client.open_ledger(writer.ledger_id + 1000, PASSWORD), NoSuchLedgerError)

    @contract_test
    async def test_wrong_password_does_not_fence(self):
        """A refused recovery open changes nothing: the writer still adds."""
        writer = await self.write([b"a"])
        await self.assert_fails(self.client.open_ledger(writer.ledger_id, b"wrong", recovery=True),
                                UnauthorizedAccessError)
        self.assertEqual(await writer.add_entry(b"b"), 1)

    # -- delete ------------------------------------------------------------------------------------

    @contract_test
    async def test_delete(self):
        """A deleted ledger no longer opens; deleting it again (or any unknown id): NoSuchLedgerError."""
        writer = await self.write([b"a", b"b"])
        await writer.close()
        keep = await self.write([b"c"])
        await keep.close()
        await self.client.delete_ledger(writer.ledger_id)
        await self.assert_fails(self.client.open_ledger(writer.ledger_id, PASSWORD), NoSuchLedgerError)
        await self.assert_fails(self.client.delete_ledger(writer.ledger_id), NoSuchLedgerError)
        reader = await self.client.open_ledger(keep.ledger_id, PASSWORD)
        self.assertEqual(await self.read_all(reader), [b"c"])
