"""
Fuzzing targets for hardened input: the broker connection, the bookie protocol and the HTTP
routes, each fed hypothesis-generated input without sockets.

A *crash* is anything a peer must never be able to cause: an exception escaping
``dataReceived``/``render``, an error logged with a traceback (``log.failure``), a request left
unanswered, or a connection buffering more than its frame limit. ``check_*`` functions raise
``FuzzCrash`` describing it; ``tests/fuzz`` runs them a few hundred times, ``scripts/fuzz.py``
for as long as asked.

Strategies:

* ``byte_soup``: random bytes, cut into random chunks;
* ``mutated_frames``: valid frames (CONNECT, PRODUCER, SEND, SUBSCRIBE...) with bytes flipped,
  cut, duplicated or their size fields rewritten;
* ``random_commands``: well-formed frames of every command the broker handles, every field set
  to a random value (ids, names, enums, nested messages), after a valid CONNECT;
* ``admin_paths(routes)``: real admin routes with hostile path parameters (NUL, invalid UTF-8 and
  percent-encoding, huge numbers, long names);
* ``admin_bodies(routes)``: real admin routes with hostile or wrongly typed JSON bodies (deep
  nesting, huge numbers, NaN, invalid UTF-8, every JSON type where another is expected).
"""

import gc
import io
import json
import struct
from typing import Callable

from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import globalLogPublisher

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames

T = api.BaseCommand


class FuzzCrash(AssertionError):
    """Input that made a target misbehave; the message says how."""


class _FailureWatcher:
    """Collects log events carrying a traceback (``log.failure``) while active."""

    def __init__(self):
        self.failures = []

    def __call__(self, event):
        if event.get("log_failure") is not None or event.get("isError"):
            self.failures.append(event)

    def __enter__(self):
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc):
        globalLogPublisher.removeObserver(self)

    def check(self, what):
        if self.failures:
            event = self.failures[0]
            failure = event.get("log_failure") or event.get("failure")
            text = failure.getTraceback() if failure is not None else str(event.get("log_text") or event)
            raise FuzzCrash(f"{what}: logged an error: {text[-2000:]}")


# ------------------------------------------------------------------------------------ commands
#: Command types the broker dispatches (the field of BaseCommand carrying each).
_COMMAND_FIELDS = {
    T.CONNECT: "connect", T.PING: "ping", T.PONG: "pong", T.LOOKUP: "lookupTopic",
    T.PARTITIONED_METADATA: "partitionMetadata", T.PRODUCER: "producer", T.SEND: "send",
    T.CLOSE_PRODUCER: "close_producer", T.SUBSCRIBE: "subscribe", T.FLOW: "flow", T.ACK: "ack",
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: "redeliverUnacknowledgedMessages",
    T.UNSUBSCRIBE: "unsubscribe", T.CLOSE_CONSUMER: "close_consumer",
    T.GET_LAST_MESSAGE_ID: "getLastMessageId", T.SEEK: "seek", T.CONSUMER_STATS: "consumerStats",
    T.GET_TOPICS_OF_NAMESPACE: "getTopicsOfNamespace", T.GET_SCHEMA: "getSchema",
    T.GET_OR_CREATE_SCHEMA: "getOrCreateSchema", T.AUTH_RESPONSE: "authResponse",
}

_TOPICS = ["t", "persistent://public/default/t", "non-persistent://public/default/t",
           "persistent://public/default/t-partition-0", "persistent://nope/ns/t", "", "a/b/c/d/e",
           "persistent://public/default/" + "x" * 300, "\u00e9\u0000", "persistent:///",
           "persistent://public/default/t-partition-99999999999"]


def _scalar(field, draw):
    fd = field
    if fd.name in ("topic",) and fd.type == fd.TYPE_STRING:
        return draw(st.sampled_from(_TOPICS) | st.text(max_size=40))
    if fd.type in (fd.TYPE_STRING,):
        return draw(st.text(max_size=30))
    if fd.type == fd.TYPE_BYTES:
        return draw(st.binary(max_size=40))
    if fd.type == fd.TYPE_BOOL:
        return draw(st.booleans())
    if fd.type == fd.TYPE_ENUM:
        values = [v.number for v in fd.enum_type.values]
        return draw(st.sampled_from(values))
    if fd.type in (fd.TYPE_UINT64, fd.TYPE_FIXED64):
        return draw(st.integers(0, 2 ** 64 - 1) | st.integers(0, 5))
    if fd.type in (fd.TYPE_INT64, fd.TYPE_SINT64, fd.TYPE_SFIXED64):
        return draw(st.integers(-2 ** 63, 2 ** 63 - 1) | st.integers(-2, 5))
    if fd.type in (fd.TYPE_UINT32, fd.TYPE_FIXED32):
        return draw(st.integers(0, 2 ** 32 - 1) | st.integers(0, 5))
    if fd.type in (fd.TYPE_INT32, fd.TYPE_SINT32, fd.TYPE_SFIXED32):
        return draw(st.integers(-2 ** 31, 2 ** 31 - 1) | st.integers(-2, 5))
    if fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
        return draw(st.floats(allow_nan=False, width=32))
    return None


def _required(field) -> bool:
    if hasattr(field, "is_required"):  # protobuf >= 5 (label is gone in 7)
        return field.is_required
    return field.label == field.LABEL_REQUIRED


def _repeated(field) -> bool:
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


def fill_message(message, draw, depth: int = 0) -> None:
    """Set every required field of ``message`` and a random choice of the others, recursively."""
    for field in message.DESCRIPTOR.fields:
        required = _required(field)
        if not required and not draw(st.booleans()):
            continue
        if field.type == field.TYPE_MESSAGE:
            if depth > 2 and not required:
                continue
            if _repeated(field):
                for _ in range(draw(st.integers(0, 3))):
                    fill_message(getattr(message, field.name).add(), draw, depth + 1)
            else:
                fill_message(getattr(message, field.name), draw, depth + 1)
                getattr(message, field.name).SetInParent()
            continue
        if _repeated(field):
            getattr(message, field.name).extend(
                [_scalar(field, draw) for _ in range(draw(st.integers(0, 3)))])
        else:
            setattr(message, field.name, _scalar(field, draw))


@st.composite
def random_command(draw):
    """A well-formed frame of a random broker-handled command with random field values."""
    kind = draw(st.sampled_from(sorted(_COMMAND_FIELDS)))
    command = T(type=kind)
    sub = getattr(command, _COMMAND_FIELDS[kind])
    fill_message(sub, draw)
    sub.SetInParent()
    if kind == T.SEND:
        meta = api.MessageMetadata(producer_name="p", sequence_id=draw(st.integers(0, 10)), publish_time=1)
        if draw(st.booleans()):
            fill_message(meta, draw, depth=2)
        return frames.encode_payload_command(command, frames.encode_message(meta, draw(st.binary(max_size=64))))
    return frames.encode_command(command)


def connect_frame() -> bytes:
    return frames.encode_command(T(type=T.CONNECT, connect=api.CommandConnect(
        client_version="fuzz", protocol_version=21)))


def _valid_frames():
    meta = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    return [
        connect_frame(),
        frames.encode_command(T(type=T.PRODUCER, producer=api.CommandProducer(
            topic="persistent://public/default/f", producer_id=1, request_id=1))),
        frames.encode_payload_command(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=1)),
                                      frames.encode_message(meta, b"payload")),
        frames.encode_command(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic="persistent://public/default/f", subscription="s", subType=api.CommandSubscribe.Shared,
            consumer_id=1, request_id=2))),
        frames.encode_command(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10))),
        frames.encode_command(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="f", request_id=3))),
    ]


VALID_FRAMES = _valid_frames()


@st.composite
def mutated_frames(draw):
    """A valid conversation with mutations: flipped bytes, cuts, duplicates, rewritten sizes."""
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(VALID_FRAMES), min_size=1, max_size=6))))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "dup", "size", "insert"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at:at + draw(st.integers(1, 16))]
        elif op == "dup":
            data[at:at] = data[at:at + draw(st.integers(1, 32))]
        elif op == "size":
            data[at:at + 4] = struct.pack(">I", draw(st.sampled_from([0, 1, 3, 0x7FFFFFFF, 0xFFFFFFFF,
                                                                      len(data), 2 ** 31])))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def chunked(data: bytes, draw) -> list:
    """``data`` cut at random points (the network may deliver any split)."""
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=5))))
    pieces, last = [], 0
    for cut in cuts + [len(data)]:
        pieces.append(data[last:cut])
        last = cut
    return [p for p in pieces if p]


byte_soup = st.binary(max_size=512)


# ------------------------------------------------------------------------------------ targets
def _feed(protocol, transport, chunks, settle: Callable[[], None], what: str) -> None:
    """
    Deliver ``chunks`` one ``dataReceived`` each, calling ``settle()`` after every one, until the
    protocol drops the connection; FuzzCrash (naming ``what``) if an exception escapes.
    """
    for chunk in chunks:
        if transport.disconnecting:
            break
        try:
            protocol.dataReceived(chunk)
        except Exception as e:
            raise FuzzCrash(f"exception escaped {what}: {e!r}")
        settle()


def check_broker(harness, chunks, peer_port: int = 1, collect_garbage: bool = False) -> None:
    """Feed ``chunks`` to a fresh ServerConnection of ``harness``; FuzzCrash on misbehaviour."""
    from pulsar_twisted.broker.cnx import ServerConnection
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", peer_port))
    protocol = ServerConnection(harness.broker, harness.clock)
    with _FailureWatcher() as watcher:
        protocol.makeConnection(transport)
        _feed(protocol, transport, chunks, harness.pump, "dataReceived")
        buffered = len(protocol.decoder._buffer) if hasattr(protocol.decoder, "_buffer") else 0
        limit = protocol.decoder.max_frame_size + 8
        if buffered > limit:
            raise FuzzCrash(f"connection buffers {buffered} bytes, more than its frame limit {limit}")
        harness.clock.advance(1)
        protocol.connectionLost(None)
        harness.pump()
        if collect_garbage:
            # A failed Deferred nobody handled is only reported when collected.
            gc.collect()
        watcher.check("broker connection")


def check_bookie(chunks) -> None:
    """Feed ``chunks`` to a BookieServerProtocol over a FakeBookie."""
    from twisted.internet import task
    from pulsar_twisted.bookie.protocol import BookieRequestProcessor, BookieServerProtocol
    from pulsar_twisted.testing.fake_bookie import FakeBookie
    clock = task.Clock()
    protocol = BookieServerProtocol(BookieRequestProcessor(FakeBookie("b", clock)), max_frame_size=64 * 1024)
    transport = StringTransport()
    with _FailureWatcher() as watcher:
        protocol.makeConnection(transport)
        _feed(protocol, transport, chunks, lambda: clock.advance(0), "bookie dataReceived")
        clock.advance(1)
        protocol.connectionLost(None)
        watcher.check("bookie connection")


_HTTP_WORDS = ["admin", "v2", "persistent", "non-persistent", "namespaces", "tenants", "clusters",
               "public", "default", "t", "partitions", "stats", "subscription", "s", "permissions",
               "role", "lookup", "topic", "metrics", "brokers", "skip", "resetcursor", "%2F", "..", "",
               "retention", "backlogQuota", "internalStats", "-1", "99999999999999999999"]


@st.composite
def http_requests(draw):
    """``(method, path, body, headers)`` mostly shaped like the admin API."""
    segments = draw(st.lists(st.sampled_from(_HTTP_WORDS) | st.text(max_size=8), max_size=9))
    prefix = draw(st.sampled_from([["admin", "v2"], ["lookup", "v2", "topic"], []]))
    path = "/" + "/".join(prefix + segments)
    method = draw(st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"]))
    body = draw(st.one_of(st.just(b""), st.binary(max_size=64),
                          st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                       lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                                       max_leaves=8).map(lambda v: json.dumps(v).encode())))
    headers = {}
    if draw(st.booleans()):
        headers[b"authorization"] = draw(st.sampled_from([b"Bearer x", b"Basic !!", b"Basic dTpw", b"Digest", b""])
                                         | st.binary(max_size=30))
    return method, path, body, headers


def check_http(resource, clock, request_spec) -> None:
    """Render ``request_spec`` through ``resource``; it must be answered, without a traceback."""
    from twisted.web import server
    from twisted.web.test.requesthelper import DummyRequest
    method, path, body, headers = request_spec
    raw_path = path.encode("utf-8")
    request = DummyRequest([s for s in raw_path.split(b"/")[1:]])
    request.method = method.encode()
    request.path = raw_path
    request.uri = raw_path
    request.content = io.BytesIO(body)
    for name, value in headers.items():
        request.requestHeaders.setRawHeaders(name, [value])
    with _FailureWatcher() as watcher:
        try:
            result = resource.render(request)
        except Exception as e:
            raise FuzzCrash(f"{method} {path}: exception escaped render: {e!r}")
        if result is not server.NOT_DONE_YET:
            request.write(result)
            request.finish()
        for _ in range(20):
            if request.finished:
                break
            clock.advance(0.1)
        if not request.finished:
            raise FuzzCrash(f"{method} {path}: request never answered")
        code = request.responseCode or 200
        if code >= 500:
            raise FuzzCrash(f"{method} {path}: answered {code}: {b''.join(request.written)[:300]!r}")
        watcher.check(f"{method} {path}")


# ------------------------------------------------------------------------------------ admin API
#: Path parameter values an attacker tries: encodings that do not decode, control characters,
#: traversal, huge and odd numbers, very long names.
HOSTILE_SEGMENTS = ["%00", "a%00b", "%FF", "%C3%28", "%ED%A0%80", "%", "%zz", "%2", "..", ".",
                    "%2F", "%252F", "%0A", "%7F", "-1", "0", "99999999999999999999999",
                    "1e999", "NaN", "a" * 300, "%E2%80%8B", "%F0%9F%98%80", "%20", "~"]


def _filled(template: str, draw) -> str:
    """``template`` with every ``{param}`` replaced by a plausible or a hostile value."""
    import re
    plausible = {"tenant": "public", "namespace": "default", "topic": "t", "cluster": "standalone",
                 "sub": "s", "role": "r", "version": "0", "count": "1", "timestamp": "0",
                 "seconds": "1", "position": "1"}

    def value(m):
        name = m.group(1)
        choice = draw(st.sampled_from(["plausible", "hostile", "text"]))
        if choice == "plausible":
            return plausible.get(name, "x")
        if choice == "hostile":
            return draw(st.sampled_from(HOSTILE_SEGMENTS))
        return draw(st.text(max_size=12)).replace("/", "")
    return re.sub(r"\{(\w+)\}", value, template)


@st.composite
def admin_paths(draw, routes):
    """``(method, path, body, headers)``: a real route of ``routes`` (Route objects) with hostile
    path parameters (NUL, invalid UTF-8 and percent-encoding, huge numbers, long names)."""
    route = draw(st.sampled_from(routes))
    body = draw(st.sampled_from([b"", b"{}", b"[]", b"1", b'"x"']))
    return route.method, _filled(route.template, draw), body, {}


def _deep(depth: int, opener: bytes, closer: bytes) -> bytes:
    return opener * depth + b"1" + closer * depth


#: Bodies that broke JSON handling somewhere: nesting, huge numbers, non-finite floats, bad UTF-8.
HOSTILE_BODIES = [
    _deep(100000, b"[", b"]"), _deep(5000, b'{"a":', b"}"), _deep(150, b"[", b"]"),
    b"9" * 5000, b"-" + b"9" * 4000, b"1e999", b"-1e999", b"NaN", b"Infinity", b"[NaN]",
    b"18446744073709551616", b"-9223372036854775809", b"1.5", b"\xff\xfe", b'"\xc3\x28"',
    b'"\\ud800"', b"\x00", b'{"a":1,"a":2}', b" ", b"null", b"true", b'""', b"[]", b"{}",
    b'"' + b"x" * 100000 + b'"', b'{"": null}', b"[[],[[]],{}]",
]


def _json_values():
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8) | st.sampled_from([2 ** 63, -(2 ** 63) - 1, 2 ** 64, 10 ** 30]),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=6)


#: PUT/POST routes that read no body (actions on a topic or subscription): not body targets.
_BODILESS = ("/compaction", "/unload", "/terminate", "/skip_all", "{count}", "{seconds}",
             "{timestamp}")


@st.composite
def admin_bodies(draw, routes):
    """``(method, path, body, headers)``: a real route of ``routes`` with plausible parameters and
    a hostile or wrongly typed JSON body."""
    route = draw(st.sampled_from([r for r in routes if r.method in ("PUT", "POST")
                                  and not r.template.endswith(_BODILESS)] or routes))
    path = _filled(route.template, lambda strategy: "plausible")
    kind = draw(st.sampled_from(["hostile", "typed"]))
    if kind == "hostile":
        body = draw(st.sampled_from(HOSTILE_BODIES))
    else:
        body = json.dumps(draw(_json_values())).encode()
    return route.method, path, body, {}
