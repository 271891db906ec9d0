"""
One set of tests for the ``IBookieClient`` contract, run against every bookie client.

Mix ``BookieClientTestsMixin`` into a ``twisted.trial.unittest.TestCase`` and define:

- ``make_bookie_client(count)``: Deferred (or coroutine) firing with ``(client, bookie_ids)``:
  an ``IBookieClient`` reaching ``count`` fresh, writable, empty bookies named ``bookie_ids``.
  The test case cleans everything up itself (``addCleanup``).
- ``set_read_only(bookie_id, flag)``: turn that bookie read-only (adds refused) or back.
- ``stop_bookie(bookie_id)``: Deferred; the bookie is gone (its process died, or it was removed).
- ``drop_connections(bookie_id)``: Deferred; the link to the bookie breaks, the bookie stays up
  and the client has seen the loss when it fires (nothing to do for an in-process client).

The tests use the interface only: answers may come synchronously or later; entries are packed
as the ledger handle packs them (``digest.pack_entry``), and errors are the
``pulsar_twisted.ledger.interfaces`` exceptions, whichever transport carries them.
"""

from twisted.internet import defer
from zope.interface.verify import verifyObject

from pulsar_twisted.ledger.bookies import IBookieClient
from pulsar_twisted.testing.assert_fails_mixin import AssertFailsMixin
from pulsar_twisted.wire.bookie import pack_entry
from pulsar_twisted.common.bk_errors import (
    BookieReadOnlyError, BookieUnavailableError, LedgerFencedError, NoSuchEntryError,
    NoSuchLedgerError, UnauthorizedAccessError)

__all__ = ["BookieClientTestsMixin", "contract_test"]

KEY = b"k" * 20
OTHER_KEY = b"x" * 20


def contract_test(f):
    """Run an ``async def`` test method as a Deferred-returning trial test."""
    def test(self):
        return defer.ensureDeferred(f(self))
    test.__name__ = f.__name__
    test.__doc__ = f.__doc__
    return test


def packed(ledger_id, entry_id, lac=-1, payload=None):
    payload = payload if payload is not None else b"entry-%d" % entry_id
    return pack_entry(ledger_id, entry_id, lac, len(payload), payload)


class BookieClientTestsMixin(AssertFailsMixin):
    """The IBookieClient contract; see the module docstring for what the test case must provide."""

    # Real sockets and journals answer in milliseconds; a hung request would otherwise wait for
    # trial's default two minutes.
    timeout = 30
    bookie_count = 1

    def make_bookie_client(self, count):
        raise NotImplementedError

    def set_read_only(self, bookie_id, flag):
        raise NotImplementedError

    def stop_bookie(self, bookie_id):
        raise NotImplementedError

    def drop_connections(self, bookie_id):
        raise NotImplementedError

    async def _setup(self):
        self.client, self.bookie_ids = await defer.maybeDeferred(
            self.make_bookie_client, self.bookie_count)
        self.bookie = self.bookie_ids[0]

    def setUp(self):
        return defer.ensureDeferred(self._setup())

    async def add(self, ledger_id, entry_id, lac=-1, key=KEY, recovery_add=False, payload=None):
        await self.client.add_entry(self.bookie, ledger_id, entry_id, key,
                                    packed(ledger_id, entry_id, lac, payload), recovery_add)

    # -- add and read ------------------------------------------------------------------------------

    def test_interface(self):
        """The client provides IBookieClient."""
        self.assertTrue(verifyObject(IBookieClient, self.client))

    @contract_test
    async def test_add_then_read_same_bytes(self):
        """An acknowledged add is readable, byte for byte as packed."""
        for entry_id in range(3):
            self.assertIsNone(await self.client.add_entry(
                self.bookie, 7, entry_id, KEY, packed(7, entry_id, entry_id - 1)))
        for entry_id in range(3):
            data = await self.client.read_entry(self.bookie, 7, entry_id)
            self.assertEqual(data, packed(7, entry_id, entry_id - 1))

    @contract_test
    async def test_read_minus_one_is_highest_entry(self):
        """Entry id -1 reads the highest entry stored, whatever order the adds came in."""
        for entry_id in (0, 2, 1):
            await self.add(3, entry_id)
        self.assertEqual(await self.client.read_entry(self.bookie, 3, -1), packed(3, 2))

    @contract_test
    async def test_readd_overwrites(self):
        """Adding an entry id again replaces it (a writer re-sending after an ensemble change)."""
        await self.add(4, 0, payload=b"first")
        await self.add(4, 0, payload=b"second")
        self.assertEqual(await self.client.read_entry(self.bookie, 4, 0), packed(4, 0, payload=b"second"))

    @contract_test
    async def test_missing_ledger_and_entry(self):
        """Unknown ledger: NoSuchLedgerError; unknown entry of a known ledger: NoSuchEntryError."""
        await self.assert_fails(self.client.read_entry(self.bookie, 99, 0), NoSuchLedgerError)
        await self.add(5, 0)
        await self.assert_fails(self.client.read_entry(self.bookie, 5, 1), NoSuchEntryError)

    # -- LAC ---------------------------------------------------------------------------------------

    @contract_test
    async def test_lac_is_highest_piggybacked(self):
        """read_lac answers the highest LAC piggybacked on any add (-1 before any)."""
        await self.add(6, 0, lac=-1)
        self.assertEqual(await self.client.read_lac(self.bookie, 6), -1)
        await self.add(6, 1, lac=0)
        await self.add(6, 3, lac=2)
        await self.add(6, 2, lac=1)     # a late, lower LAC does not move it back
        self.assertEqual(await self.client.read_lac(self.bookie, 6), 2)

    @contract_test
    async def test_lac_of_unknown_ledger(self):
        """read_lac of a ledger the bookie never saw: NoSuchLedgerError."""
        await self.assert_fails(self.client.read_lac(self.bookie, 98), NoSuchLedgerError)

    # -- fencing -----------------------------------------------------------------------------------

    @contract_test
    async def test_fencing_read_refuses_later_adds(self):
        """A fencing read answers the entry; later adds fail with LedgerFencedError, recovery adds pass."""
        await self.add(8, 0)
        data = await self.client.read_entry(self.bookie, 8, 0, fence=True, master_key=KEY)
        self.assertEqual(data, packed(8, 0))
        await self.assert_fails(self.client.add_entry(self.bookie, 8, 1, KEY, packed(8, 1)),
                                LedgerFencedError)
        await self.add(8, 1, recovery_add=True)
        self.assertEqual(await self.client.read_entry(self.bookie, 8, 1), packed(8, 1))

    @contract_test
    async def test_fencing_unknown_ledger(self):
        """Fencing a ledger the bookie never saw records it fenced: the read finds nothing, a slow
        writer's first add is refused."""
        await self.assert_fails(self.client.read_entry(self.bookie, 9, -1, fence=True, master_key=KEY),
                                NoSuchEntryError)
        await self.assert_fails(self.client.add_entry(self.bookie, 9, 0, KEY, packed(9, 0)),
                                LedgerFencedError)

    @contract_test
    async def test_master_key_checked(self):
        """Adds and fencing reads with another ledger's master key: UnauthorizedAccessError."""
        await self.add(10, 0)
        await self.assert_fails(self.client.add_entry(self.bookie, 10, 1, OTHER_KEY, packed(10, 1)),
                                UnauthorizedAccessError)
        await self.assert_fails(
            self.client.read_entry(self.bookie, 10, 0, fence=True, master_key=OTHER_KEY),
            UnauthorizedAccessError)
        # Neither changed anything: the ledger takes normal adds.
        await self.add(10, 1)

    # -- delete ------------------------------------------------------------------------------------

    @contract_test
    async def test_delete(self):
        """A deleted ledger is gone at once; deleting an unknown ledger succeeds."""
        await self.add(11, 0)
        self.assertIsNone(await self.client.delete_ledger(self.bookie, 11))
        await self.assert_fails(self.client.read_entry(self.bookie, 11, 0), NoSuchLedgerError)
        await self.assert_fails(self.client.read_lac(self.bookie, 11), NoSuchLedgerError)
        self.assertIsNone(await self.client.delete_ledger(self.bookie, 12345))

    # -- bookie state and errors -------------------------------------------------------------------

    @contract_test
    async def test_read_only_bookie(self):
        """A read-only bookie refuses adds (recovery adds too) but still serves reads."""
        await self.add(13, 0)
        self.set_read_only(self.bookie, True)
        await self.assert_fails(self.client.add_entry(self.bookie, 13, 1, KEY, packed(13, 1)),
                                BookieReadOnlyError)
        await self.assert_fails(
            self.client.add_entry(self.bookie, 13, 1, KEY, packed(13, 1), recovery_add=True),
            BookieReadOnlyError)
        self.assertEqual(await self.client.read_entry(self.bookie, 13, 0), packed(13, 0))
        self.set_read_only(self.bookie, False)
        await self.add(13, 1)

    @contract_test
    async def test_bad_requests(self):
        """A body shorter than an entry header, or a negative entry id: ValueError, nothing stored."""
        await self.assert_fails(self.client.add_entry(self.bookie, 14, 0, KEY, b"short"), ValueError)
        await self.assert_fails(self.client.add_entry(self.bookie, 14, -3, KEY, packed(14, 0)),
                                ValueError)
        await self.assert_fails(self.client.read_entry(self.bookie, 14, 0), NoSuchLedgerError)

    @contract_test
    async def test_unknown_bookie_unavailable(self):
        """A bookie id nobody answers for: BookieUnavailableError, for every request."""
        missing = self.missing_bookie_id()
        await self.assert_fails(self.client.add_entry(missing, 1, 0, KEY, packed(1, 0)),
                                BookieUnavailableError)
        await self.assert_fails(self.client.read_entry(missing, 1, 0), BookieUnavailableError)
        await self.assert_fails(self.client.read_lac(missing, 1), BookieUnavailableError)
        await self.assert_fails(self.client.delete_ledger(missing, 1), BookieUnavailableError)

    def missing_bookie_id(self):
        """A bookie id with no bookie behind it (override where ids have a required shape)."""
        return "no-such-bookie"

    @contract_test
    async def test_stopped_bookie_unavailable(self):
        """Once a bookie is gone every request to it fails with BookieUnavailableError (none hangs)."""
        await self.add(15, 0)
        await self.stop_bookie(self.bookie)
        await self.assert_fails(self.client.add_entry(self.bookie, 15, 1, KEY, packed(15, 1)),
                                BookieUnavailableError)
        await self.assert_fails(self.client.read_entry(self.bookie, 15, 0), BookieUnavailableError)
        await self.assert_fails(self.client.read_lac(self.bookie, 15), BookieUnavailableError)

    @contract_test
    async def test_lost_connection_is_not_a_lost_bookie(self):
        """After the link to a live bookie breaks, the next request reaches it again."""
        await self.add(16, 0)
        await self.drop_connections(self.bookie)
        self.assertEqual(await self.client.read_entry(self.bookie, 16, 0), packed(16, 0))
        await self.add(16, 1, lac=0)
        self.assertEqual(await self.client.read_lac(self.bookie, 16), 0)
