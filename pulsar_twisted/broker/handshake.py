"""
The CONNECT handshake of one broker connection, apart from the connection's command dispatch.

* A deadline (``net.deadline``, shared with the proxy): a connection that has not completed
  CONNECT (authentication included) within ``keepAliveIntervalSeconds`` is closed, silent
  sockets and partial frames alike. Without it, unauthenticated sockets could hold every
  ``brokerMaxConnections`` slot forever.
* One credentials check at a time: a second CONNECT while the first is being checked (a bcrypt
  can take 0.1 s, off the reactor thread) is refused with NotAllowedError.
* The answer: CONNECTED with the negotiated protocol version, or an ERROR (AuthenticationError,
  or AuthorizationError for a refused proxy role combination) and the connection closed.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.net.deadline import HandshakeDeadline
from pulsar_twisted.proto import PulsarApi_pb2 as api

SERVER_VERSION = "pulsar-twisted-0.1.0"
#: Highest protocol version we implement; we answer min(client's, ours) as Pulsar does.
PROTOCOL_VERSION = 21


def _reason(failure) -> str:
    return str(failure.value) or failure.type.__name__


class Handshake:
    """The handshake of ``cnx`` (a ServerConnection); ``clock`` runs the deadline."""

    log = Logger()

    def __init__(self, cnx, clock, deadline_seconds: float):
        self.cnx = cnx
        self.clock = clock
        self.deadline_seconds = deadline_seconds
        self.checking = False
        self.deadline = HandshakeDeadline(clock, deadline_seconds, lambda: cnx.transport,
                                          lambda: cnx.peer, lambda: cnx.state == "start")

    def start(self) -> None:
        """The connection is up: the deadline runs from now (none when keep-alive is off)."""
        self.deadline.start()

    def stop(self) -> None:
        """Connected, or the connection is gone: no deadline any more."""
        self.deadline.stop()

    def connect(self, connect: api.CommandConnect) -> None:
        """A CONNECT: authenticate (maybe asynchronously), then answer."""
        cnx = self.cnx
        if cnx.state == "connected":
            cnx.sender.send_error(0, api.NotAllowedError, "Already connected")
            return
        if self.checking:
            cnx.sender.send_error(0, api.NotAllowedError, "CONNECT already in progress")
            return
        self.checking = True
        cnx.client_version = connect.client_version
        cnx.protocol_version = min(connect.protocol_version, PROTOCOL_VERSION)
        d = defer.maybeDeferred(cnx.service.authenticate, cnx, connect)
        d.addCallbacks(self._authenticated, self._refused)

    def _authenticated(self, role) -> None:
        self.checking = False
        cnx = self.cnx
        if cnx.state != "start":
            return      # closed (deadline, peer) while the credentials were being checked
        self.stop()
        cnx.connected_as(role)
        cnx.sender.send_connected(SERVER_VERSION, cnx.protocol_version, cnx.max_message_size)

    def _refused(self, failure) -> None:
        self.checking = False
        cnx = self.cnx
        if cnx.state == "closed":
            return
        self.log.warn("{peer}: authentication refused: {reason}", peer=cnx.peer,
                      reason=_reason(failure))
        code = (api.AuthorizationError if failure.check(errors.AuthorizationError)
                else api.AuthenticationError)   # "Invalid roles." for a refused proxy combination
        cnx.sender.send_error(0, code, _reason(failure))
        cnx.transport.loseConnection()
