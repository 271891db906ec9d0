"""
Shared harness of the managed-ledger tests: a task.Clock, an in-memory metadata store, the
fake ledger client and a factory over them. (No TestCase here: this module only lends.)
"""

from twisted.internet import task

from pulsar_twisted.mledger.config import ManagedLedgerConfig
from pulsar_twisted.mledger.factory import ManagedLedgerFactory
from pulsar_twisted.testing.fake_ledger import FakeLedgerClient

try:
    from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
except ImportError:  # pragma: no cover - only while the embedded store is being written
    EmbeddedMetadataStore = None


def data(i: int) -> bytes:
    return b"entry-%d" % i


class ManagedLedgerHarness:
    """Mixin for trial TestCases (synchronous: the fake and the memory store fire at once)."""

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())
        self.bk = FakeLedgerClient(self.clock)
        self.factory = self.new_factory()

    def config(self, **kw):
        kw.setdefault("min_rollover_time_ms", 0)
        return ManagedLedgerConfig(**kw)

    def new_factory(self, **kw):
        return ManagedLedgerFactory(self.bk, self.store, self.clock, self.config(**kw))

    def open(self, name="public/default/persistent/t", factory=None, **kw):
        factory = factory or self.factory
        config = self.config(**kw) if kw else None
        return self.successResultOf(factory.open(name, config))

    def add(self, ml, n, start=0):
        return [self.successResultOf(ml.add_entry(data(i))) for i in range(start, start + n)]

    def cursor(self, ml, name="sub", initial="earliest"):
        return self.successResultOf(ml.open_cursor(name, initial))

    def read(self, cursor, n=1000):
        return self.successResultOf(cursor.read_entries(n))

    def with_adds_held(self, issue):
        """Call ``issue()`` with the ledger client's adds held, then release them one round at a time
        (adds made while a round completes are held for the next) until none is left; returns what
        ``issue()`` returned."""
        self.bk.pause_adds()
        result = issue()
        while self.bk._held:
            self.bk.resume_adds()
            self.bk.pause_adds()
        self.bk.resume_adds()
        return result
