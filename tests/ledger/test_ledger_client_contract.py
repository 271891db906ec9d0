"""
The ILedgerClient / ILedgerHandle contract (``testing.ledger_client_mixin``) over the in-memory
FakeLedgerClient and over the real BookKeeperClient, on fake bookies and on real bookies over
TCP, so the fake the managed ledger and broker tests stand on cannot drift from the client it
stands in for.
"""

import random

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.ledger.bookies import LocalBookieClient
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.resources.bookies import register_bookie
from pulsar_twisted.testing.fake_bookie import FakeBookie
from pulsar_twisted.testing.fake_ledger import FakeLedgerClient
from pulsar_twisted.testing.ledger_client_mixin import LedgerClientTestsMixin
from tests.ledger.test_tcp import BookieCluster


class FakeLedgerClientTests(LedgerClientTestsMixin, unittest.TestCase):
    def make_ledger_client(self):
        return FakeLedgerClient(task.Clock())


class BookKeeperClientOnFakeBookiesTests(LedgerClientTestsMixin, unittest.TestCase):
    async def make_ledger_client(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        await self.store.start()
        self.addCleanup(self.store.close)
        self.bookies = {f"bookie-{i}": FakeBookie(f"bookie-{i}", self.clock) for i in range(4)}
        for bookie_id in self.bookies:
            await register_bookie(self.store, bookie_id)
        client = BookKeeperClient(self.store, LocalBookieClient(self.bookies), self.clock,
                                  placement=RandomPlacementPolicy(random.Random(3)))
        await client.start()
        return client


class BookKeeperClientOverTcpTests(LedgerClientTestsMixin, unittest.TestCase):
    """The whole real stack: TCP bookie client, bookie servers and storage on 127.0.0.1."""

    async def make_ledger_client(self):
        cluster = await BookieCluster(self, 3).start()
        return await cluster.client()
