"""LoadLog: the "Loaded topic" lines of a reactor turn are one log event, every name kept."""

from twisted.internet.task import Clock
from twisted.logger import Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.load_log import WINDOW_SECONDS, LoadLog


class LoadLogTests(SynchronousTestCase):
    def setUp(self):
        self.events = []
        self.clock = Clock()
        self.load_log = LoadLog(Logger(observer=self.events.append), self.clock)

    def test_single_load_logged_as_before(self):
        """One load in a window: the usual line with its topic field, at the end of the window."""
        self.load_log.add("persistent://public/default/a")
        self.clock.advance(WINDOW_SECONDS / 2)
        self.assertEqual(self.events, [])
        self.clock.advance(WINDOW_SECONDS / 2)
        self.assertEqual([formatEvent(e) for e in self.events], ["Loaded topic persistent://public/default/a"])
        self.assertEqual(self.events[0]["topic"], "persistent://public/default/a")

    def test_burst_is_one_event_with_every_name(self):
        """A window's loads are one event holding a "Loaded topic <name>" line for each."""
        names = [f"persistent://public/default/t{i}" for i in range(5)]
        for name in names:
            self.load_log.add(name)
        self.clock.advance(WINDOW_SECONDS)
        self.assertEqual(len(self.events), 1)
        text = formatEvent(self.events[0])
        self.assertEqual(text.splitlines(), ["Loaded 5 topics:"] + [f"Loaded topic {n}" for n in names])
        self.load_log.add("persistent://public/default/next")
        self.clock.advance(WINDOW_SECONDS)
        self.assertEqual(len(self.events), 2)

    def test_flush_writes_at_once_and_cancels_the_call(self):
        """flush() (the service stopping) logs what is queued and leaves no call pending."""
        self.load_log.add("persistent://public/default/a")
        self.load_log.flush()
        self.assertEqual(len(self.events), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.load_log.flush()
        self.assertEqual(len(self.events), 1)
