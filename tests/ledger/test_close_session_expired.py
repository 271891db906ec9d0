"""Closing a ledger while the metadata (ZooKeeper) session is lost: one warning line, the close
completes locally (the next owner's recovery closes the ledger); other failures still fail it."""

from twisted.internet import defer
from twisted.logger import globalLogPublisher
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import LedgerClosedError
from pulsar_twisted.resources.ledgers import LedgerState
from pulsar_twisted.metadata.interfaces import MetadataStoreError
from tests.ledger.test_handle import LedgerHarness


class SessionExpiredError(Exception):
    """Stands for kazoo.exceptions.SessionExpiredError (matched by name)."""


def wrapped(cause: Exception) -> MetadataStoreError:
    """What the ZooKeeper store raises: MetadataStoreError with kazoo's error as the cause."""
    error = MetadataStoreError(f"zookeeper: {type(cause).__name__}: {cause}")
    error.__cause__ = cause
    return error


class CloseWithoutSessionTests(LedgerHarness, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.events = []
        globalLogPublisher.addObserver(self._observe)
        self.addCleanup(globalLogPublisher.removeObserver, self._observe)

    def _observe(self, event):
        if event.get("log_namespace") == "pulsar_twisted.ledger.handle":
            self.events.append(event)

    def failing_store(self, error):
        self.patch(self.store, "put", lambda *a, **kw: defer.fail(error))

    def test_session_expired_is_one_warning(self):
        handle = self.create()
        self.add_all(handle, [b"a", b"b"])
        self.failing_store(wrapped(SessionExpiredError("session expired")))
        self.successResultOf(handle.close())
        self.assertTrue(handle.closed)
        self.failureResultOf(handle.add_entry(b"x"), LedgerClosedError)
        # Left OPEN for the next owner's recovery.
        self.assertEqual(self.stored_metadata(handle.ledger_id).state, LedgerState.OPEN)
        mine = [e for e in self.events if e.get("ledger") == handle.ledger_id]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["log_level"].name, "warn")
        self.assertNotIn("log_failure", mine[0])
        self.assertIn("session expired", mine[0]["log_format"])

    def test_kazoo_error_through_the_zookeeper_store_translation(self):
        """The real chain: kazoo's SessionExpiredError translated by the ZooKeeper store."""
        try:
            from kazoo.exceptions import SessionExpiredError as KazooSessionExpired
            from pulsar_twisted.metadata.zookeeper import _translate
        except ImportError:
            raise unittest.SkipTest("kazoo is not installed")
        handle = self.create()
        self.failing_store(_translate(KazooSessionExpired()))
        self.successResultOf(handle.close())
        self.assertTrue(handle.closed)

    def test_other_failures_still_fail_the_close(self):
        handle = self.create()
        self.add_all(handle, [b"a"])
        self.failing_store(wrapped(ConnectionError("store down")))
        self.failureResultOf(handle.close(), MetadataStoreError)
        self.assertTrue(handle.closed)
        self.assertFalse([e for e in self.events if e.get("ledger") == handle.ledger_id])
