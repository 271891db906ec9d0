"""A cluster broker's registration (pulsar_twisted.broker.registration) on the embedded store and a
task.Clock: written at start, re-written by the periodic check and on a new ZooKeeper session."""

from twisted.internet import task
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.registration import BrokerRegistration
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.metadata.layout import broker_path


class BrokerRegistrationTests(SynchronousTestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.store = EmbeddedMetadataStore(None, self.clock)
        self.successResultOf(self.store.start())
        self.session_listeners = []
        self.store.register_session_listener = self.session_listeners.append
        self.registration = BrokerRegistration(self.store, self.clock, "b1:8080", b'{"x": 1}', 2.0)
        self.path = broker_path("b1:8080")

    def value(self):
        found = self.successResultOf(self.store.get(self.path))
        return None if found is None else found[0]

    def test_registers_ephemerally_at_start(self):
        self.successResultOf(self.registration.start())
        self.assertEqual(self.value(), b'{"x": 1}')
        self.assertTrue(self.successResultOf(self.store.exists(self.path)).ephemeral)

    def test_check_registers_again(self):
        """A registration gone (new session) is written again by the next periodic check."""
        self.successResultOf(self.registration.start())
        self.successResultOf(self.store.delete(self.path))
        self.clock.advance(1.9)
        self.assertIsNone(self.value())
        self.clock.advance(0.1)
        self.assertEqual(self.value(), b'{"x": 1}')

    def test_new_session_registers_at_once(self):
        """"expired-new-session" from the store: registered again without waiting for the check."""
        self.successResultOf(self.registration.start())
        self.successResultOf(self.store.delete(self.path))
        [listener] = self.session_listeners
        listener("reconnected")
        self.assertIsNone(self.value())
        listener("expired-new-session")
        self.assertEqual(self.value(), b'{"x": 1}')

    def test_stop_ends_the_checks(self):
        self.successResultOf(self.registration.start())
        self.registration.stop()
        self.successResultOf(self.store.delete(self.path))
        self.clock.advance(10)
        self.session_listeners[0]("expired-new-session")
        self.assertIsNone(self.value())
