"""
Is a bundle's owner running? A TCP connection to its ``nativeUrl`` port tells: refused means no
process listens there (it died; its ZooKeeper session will expire), which is what lets lookups wait
for the bundle instead of sending clients to a dead broker (``BundleOwnership.owner_alive``).
Anything else (accepted, timed out, unparsable URL) counts as alive: lookups then redirect as usual.
"""

from urllib.parse import urlsplit

from twisted.internet import defer, error, protocol
from twisted.internet.endpoints import HostnameEndpoint


def owner_alive(reactor, owner: dict, timeout: float = 2.0) -> defer.Deferred:
    """Deferred[bool]: False only when the owner's broker port refuses the connection."""
    try:
        url = urlsplit(owner.get("nativeUrl") or "")
        host, port = url.hostname, url.port
    except ValueError:
        return defer.succeed(True)
    if not host or not port:
        return defer.succeed(True)
    endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
    d = endpoint.connect(protocol.Factory.forProtocol(protocol.Protocol))

    def connected(proto):
        proto.transport.abortConnection()
        return True
    d.addCallbacks(connected, lambda f: not f.check(error.ConnectionRefusedError))
    return d
