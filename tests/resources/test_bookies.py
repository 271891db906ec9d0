"""Bookie registrations in the metadata store (BookKeeper's layout under /ledgers/available)."""

from twisted.internet import defer, task
from twisted.trial import unittest

from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.resources.bookies import (
    AVAILABLE_PATH, READONLY_PATH, register_bookie, registered_bookies, registration_path,
    unregister_bookie)


class BookieRegistrationTests(unittest.TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())

    def listed(self):
        return self.successResultOf(defer.Deferred.fromCoroutine(registered_bookies(self.store)))

    def test_paths(self):
        """Writable bookies sit directly under /ledgers/available, read-only ones under readonly/."""
        self.assertEqual(registration_path("b1:3181"), "/ledgers/available/b1:3181")
        self.assertEqual(registration_path("b1:3181", read_only=True),
                         "/ledgers/available/readonly/b1:3181")
        self.assertEqual(READONLY_PATH, AVAILABLE_PATH + "/readonly")

    def test_register_list_unregister(self):
        """A registration shows in its mode's set; the readonly parent is never a bookie."""
        self.successResultOf(register_bookie(self.store, "b1:3181"))
        self.successResultOf(register_bookie(self.store, "b2:3181", read_only=True))
        self.assertEqual(self.listed(), (frozenset({"b1:3181"}), frozenset({"b2:3181"})))
        self.successResultOf(unregister_bookie(self.store, "b1:3181"))
        self.successResultOf(unregister_bookie(self.store, "b2:3181", read_only=True))
        self.assertEqual(self.listed(), (frozenset(), frozenset()))

    def test_registration_is_ephemeral_with_value(self):
        """The node carries the given value and goes with the session that made it."""
        session = self.store.new_session()
        self.successResultOf(session.start())
        self.successResultOf(register_bookie(session, "b3:3181", value=b'{"readOnly": false}'))
        value, stat = self.successResultOf(self.store.get("/ledgers/available/b3:3181"))
        self.assertEqual(value, b'{"readOnly": false}')
        self.assertTrue(stat.ephemeral)
        self.successResultOf(session.close())
        self.assertEqual(self.listed(), (frozenset(), frozenset()))

