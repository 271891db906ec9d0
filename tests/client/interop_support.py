"""
Shared set-up of the client interop tests: our client (blocking facade, on a private reactor thread)
and the official ``pulsar`` client against one real ``twistd pulsar-standalone`` per test class.

``StandaloneInteropCase`` starts the standalone for the first test of a class and stops it after
that class's last test (counted when the standalone starts), so each class pays for one process.
"""

import logging

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.client.blocking import Client

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None

try:
    from pulsar_twisted.testing.process import StandaloneProcess
except ImportError:  # pragma: no cover
    StandaloneProcess = None

_reactor = {"reactor": None}


def quiet_logger():
    """The official client's log, errors only, kept out of the test output."""
    logger = logging.getLogger("pulsar-twisted-client-interop")
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def private_reactor():
    """A reactor of our own (one per test run), so the global one stays free for trial's tests."""
    if _reactor["reactor"] is None:
        from twisted.internet.epollreactor import EPollReactor
        _reactor["reactor"] = EPollReactor()
    return _reactor["reactor"]


class StandaloneInteropCase(SynchronousTestCase):
    """
    Base of the interop test classes: ``self.standalone``, ``self.ours`` (our blocking client) and
    ``self.theirs`` (the official client), both closed after each test.

    Subclasses override ``standalone_config`` (settings for the class's standalone) and
    ``our_service_url`` (which URL our client is given). The standalone and the count of tests
    still to run are kept per subclass, never shared between classes.
    """

    if pulsar is None or StandaloneProcess is None:
        skip = "needs the official pulsar client and pulsar_twisted.testing.process"

    def standalone_config(self):
        """Settings of this class's standalone; called once, when it starts."""
        return {}

    def our_service_url(self):
        """The service URL our client connects with (binary protocol by default)."""
        return self.standalone.service_url

    def setUp(self):
        cls = type(self)
        # Looked up in the class's own __dict__ so that each subclass gets its own standalone.
        live = cls.__dict__.get("_live")
        if live is None or live["standalone"] is None:
            standalone = StandaloneProcess(self.standalone_config())
            standalone.start()
            live = {"standalone": standalone,
                    "remaining": len([n for n in dir(cls) if n.startswith("test_")])}
            cls._live = live
        self.standalone = live["standalone"]
        self.addCleanup(self._done, live)
        self.ours = Client(self.our_service_url(), operation_timeout_seconds=10,
                           reactor=private_reactor())
        self.addCleanup(self.ours.close)
        self.theirs = pulsar.Client(self.standalone.service_url, operation_timeout_seconds=10,
                                    logger=quiet_logger())
        self.addCleanup(self.theirs.close)

    @staticmethod
    def _done(live):
        live["remaining"] -= 1
        if live["remaining"] <= 0 and live["standalone"] is not None:
            live["standalone"].cleanup()
            live["standalone"] = None
