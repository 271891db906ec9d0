"""
The broker daemon's probe of a bundle owner (``daemons/owner_probe.py``, issue 14 item 5).
"""

from twisted.internet import defer
from twisted.trial.unittest import TestCase

from pulsar_twisted.daemons.owner_probe import owner_alive


class OwnerProbeTests(TestCase):
    """owner_alive over real loopback sockets: refused means dead, anything else alive."""

    def test_listening_owner_is_alive(self):
        from twisted.internet import protocol, reactor
        port = reactor.listenTCP(0, protocol.Factory.forProtocol(protocol.Protocol),
                                 interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        url = f"pulsar://127.0.0.1:{port.getHost().port}"
        return owner_alive(reactor, {"nativeUrl": url}).addCallback(self.assertTrue)

    def test_refusing_owner_is_dead(self):
        from twisted.internet import protocol, reactor
        port = reactor.listenTCP(0, protocol.Factory.forProtocol(protocol.Protocol),
                                 interface="127.0.0.1")
        number = port.getHost().port
        d = defer.maybeDeferred(port.stopListening)
        d.addCallback(lambda _: owner_alive(reactor, {"nativeUrl": f"pulsar://127.0.0.1:{number}"}))
        return d.addCallback(self.assertFalse)

    def test_unparsable_url_counts_as_alive(self):
        self.assertTrue(self.successResultOf(owner_alive(None, {"nativeUrl": "nonsense"})))
