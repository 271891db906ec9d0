"""
The broker side of a proxied connection, and the splice that relays bytes both ways.

``BrokerRelay`` is the protocol of the proxy's connection to the target broker. Its life:

1. HANDSHAKE: it sends a CONNECT with the proxy's own credentials, the client's protocol version
   and ``original_principal`` (plus ``original_auth_method``/``original_auth_data`` when the
   proxy forwards the client's credentials), and reads frames until the broker answers. An
   AUTH_CHALLENGE here is answered as the lookup connections answer it (``pool.answer_challenge``);
   CONNECTED fires ``handshake`` with the command and any bytes that followed it; ERROR or a lost
   connection fails ``handshake``.
2. SPLICED: every byte from the broker goes to the client's transport unread, and the client's to
   the broker's. Nothing is parsed any more: the broker's PINGs, AUTH_CHALLENGEs (for forwarded
   client credentials, which the broker refreshes itself) and the client's answers pass through.
   Either side closing closes the other (``close_spliced``).

Backpressure (``splice``): each transport gets an ``IPushProducer`` that pauses the *other*
transport. When the client's write buffer fills (the broker sends faster than the client reads),
Twisted pauses our producer on it, which stops reading from the broker; when it drains, reading
resumes. The same holds the other way, so a slow side never makes the proxy buffer without bound.
"""

import enum
import struct

from twisted.internet import defer, interfaces, protocol
from twisted.logger import Logger
from zope.interface import implementer

from pulsar_twisted.client import errors as client_errors
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.proxy.pool import PROXY_VERSION, answer_challenge
from pulsar_twisted.wire.frames import FrameError, decode_frame_body, encode_command

T = api.BaseCommand
_U32 = struct.Struct(">I")


def next_frame(buffer: bytearray, limit: int):
    """
    The first complete frame of ``buffer`` as ``(command, message, size)`` (``size`` bytes
    consumed), or None while it is incomplete. ``FrameError`` for a frame longer than ``limit``
    or one that does not decode.
    """
    if len(buffer) < 4:
        return None
    total = _U32.unpack_from(buffer, 0)[0]
    if total > limit:
        raise FrameError(f"frame of {total} bytes exceeds {limit}")
    if len(buffer) < 4 + total:
        return None
    command, message = decode_frame_body(buffer, 4, total)
    return command, message, 4 + total


class RelayState(enum.StrEnum):
    """HANDSHAKE (CONNECT sent) -> SPLICED (bytes relayed) -> CLOSED."""

    HANDSHAKE = "handshake"
    SPLICED = "spliced"
    CLOSED = "closed"


@implementer(interfaces.IPushProducer)
class PauseOther:
    """Registered on one transport: its pause/resume pauses/resumes reading from ``other``."""

    def __init__(self, other, on_pause=None):
        self.other = other
        self.paused = False
        self.on_pause = on_pause

    def pauseProducing(self):
        if not self.paused:
            self.paused = True
            self.other.pauseProducing()
            if self.on_pause is not None:
                self.on_pause()

    def resumeProducing(self):
        if self.paused:
            self.paused = False
            self.other.resumeProducing()

    def stopProducing(self):
        # Our transport is gone (Twisted stops its producer): close the other side.
        close_spliced(self.other)


def splice(client_transport, broker_transport, log=None) -> tuple:
    """Register the two ``PauseOther`` producers (see the module docstring); returns them."""
    to_client = PauseOther(broker_transport)     # client's buffer full: stop reading the broker
    to_broker = PauseOther(client_transport)     # broker's buffer full: stop reading the client
    client_transport.registerProducer(to_client, True)
    broker_transport.registerProducer(to_broker, True)
    return to_client, to_broker


def close_spliced(transport) -> None:
    """Close one side of a splice once what it holds is written. Its producer (which pauses the
    other side) is unregistered first: Twisted's ``loseConnection`` closes a transport whose
    streaming producer is paused (its buffer was full) only once that producer is unregistered;
    otherwise the drained buffer resumes the producer instead, and the connection stays open,
    unread, for good: a client never told that its broker has gone, or a broker keeping the
    producers and consumers of a client that has gone until its keep-alive gives up."""
    transport.unregisterProducer()
    transport.loseConnection()


class BrokerRelay(protocol.Protocol):
    """
    The connection to the target broker for one client (``client``: the ProxyConnection, which
    has ``transport``, ``peer`` and ``relayed(size)``). ``handshake`` fires with
    ``(CommandConnected command, bytes after it)`` or fails with the broker's error.
    """

    log = Logger()

    def __init__(self, client, own_auth, on_behalf, protocol_version: int, max_frame_size: int):
        self.client = client
        self.own_auth = own_auth
        self.on_behalf = on_behalf
        self.protocol_version = protocol_version
        self.max_frame_size = max_frame_size
        self.state = RelayState.HANDSHAKE
        self.handshake = defer.Deferred()
        self._buffer = bytearray()
        self.peer = "?"

    def connectionMade(self):
        self.peer = str(self.transport.getPeer())
        if hasattr(self.transport, "setTcpNoDelay"):
            try:
                self.transport.setTcpNoDelay(True)   # frames are small and latency-bound
            except Exception:
                pass
        connect = T(type=T.CONNECT)
        connect.connect.client_version = PROXY_VERSION
        connect.connect.protocol_version = self.protocol_version
        if self.own_auth is not None:
            connect.connect.auth_method_name = self.own_auth.auth_method_name
            data = self.own_auth.auth_data()
            if data is not None:
                connect.connect.auth_data = data
        self.on_behalf.add_to(connect.connect)
        self.transport.write(encode_command(connect))

    def dataReceived(self, data):
        if self.state == RelayState.SPLICED:
            self.client.relayed(len(data))
            self.client.transport.write(data)
            return
        if self.state != RelayState.HANDSHAKE:
            return
        self._buffer += data
        try:
            self._handshake_frames()
        except FrameError as e:
            self._fail(client_errors.ConnectError(f"broker {self.peer} sent a malformed frame: {e}"))
            self.transport.abortConnection()

    def _handshake_frames(self):
        while self.state == RelayState.HANDSHAKE:
            found = next_frame(self._buffer, self.max_frame_size)
            if found is None:
                return
            command, _, size = found
            del self._buffer[:size]
            if command.type == T.CONNECTED:
                self.state = RelayState.SPLICED
                rest, self._buffer = bytes(self._buffer), bytearray()
                self.handshake.callback((command, rest))
            elif command.type == T.AUTH_CHALLENGE:
                answer_challenge(self.transport, self.own_auth, self.on_behalf, self.log, self.peer)
            elif command.type == T.ERROR:
                self._fail(client_errors.from_server_error(command.error.error, command.error.message))
                self.transport.loseConnection()
            elif command.type == T.PING:
                self.transport.write(encode_command(T(type=T.PONG, pong=api.CommandPong())))

    def _fail(self, exc):
        self.state = RelayState.CLOSED
        if not self.handshake.called:
            self.handshake.errback(exc)

    def connectionLost(self, reason=protocol.connectionDone):
        previous, self.state = self.state, RelayState.CLOSED
        if previous == RelayState.HANDSHAKE:
            self._fail(client_errors.ConnectError(
                f"broker {self.peer} closed the connection: {reason.getErrorMessage()}"))
        elif previous == RelayState.SPLICED:
            close_spliced(self.client.transport)
