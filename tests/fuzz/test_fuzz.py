"""
Bounded fuzzing of the broker connection, the bookie protocol and the HTTP routes (hypothesis, no
sockets): no exception escapes, nothing logs a traceback, every HTTP request is answered below 500,
and nothing buffers past its frame limit. ``scripts/fuzz.py`` runs the same targets longer.
"""

import base64
import struct

from hypothesis import HealthCheck, given, settings, strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.broker.cnx import ServerConnection
from pulsar_twisted.security.http import secure
from pulsar_twisted.testing import fuzz
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.web.routing import RouterResource
from pulsar_twisted.web.site import make_router

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


def _harness(**config):
    harness = BrokerHarness(**config)
    harness.clock.advance(1000)
    d = harness.start()
    harness.pump()
    return harness, d


class BrokerFuzzTests(unittest.TestCase):
    def setUp(self):
        self.harness, d = _harness()
        self.successResultOf(d)

    @FUZZ
    @given(st.data())
    def test_byte_soup(self, data):
        """Random bytes, in random chunks."""
        fuzz.check_broker(self.harness, fuzz.chunked(data.draw(fuzz.byte_soup), data.draw))

    @FUZZ
    @given(st.data())
    def test_mutated_frames(self, data):
        """Valid conversations with flipped, cut, duplicated bytes and rewritten sizes."""
        fuzz.check_broker(self.harness, fuzz.chunked(data.draw(fuzz.mutated_frames()), data.draw))

    @FUZZ
    @given(st.lists(fuzz.random_command(), min_size=1, max_size=6))
    def test_random_commands(self, commands):
        """Well-formed frames of every command with random field values, after CONNECT."""
        fuzz.check_broker(self.harness, [fuzz.connect_frame()] + commands)

    def test_huge_frame_header_refused_before_buffering(self):
        """A header announcing 2 GB closes the connection at once; nothing is buffered."""
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 9))
        protocol = ServerConnection(self.harness.broker, self.harness.clock)
        protocol.makeConnection(transport)
        protocol.dataReceived(struct.pack(">II", 0x7FFFFFF0, 0x7FFFFFE0) + b"x" * 100)
        self.assertTrue(transport.disconnecting)
        self.assertLessEqual(len(getattr(protocol.decoder, "_buffer", b"")), 108)


class BookieFuzzTests(unittest.TestCase):
    @FUZZ
    @given(st.data())
    def test_byte_soup(self, data):
        fuzz.check_bookie(fuzz.chunked(data.draw(fuzz.byte_soup), data.draw))

    @FUZZ
    @given(st.data())
    def test_framed_garbage(self, data):
        """Correctly framed, random payloads (undecodable or random requests)."""
        payloads = data.draw(st.lists(st.binary(max_size=200), min_size=1, max_size=5))
        stream = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
        fuzz.check_bookie(fuzz.chunked(stream, data.draw))


class HttpFuzzTests(unittest.TestCase):
    def setUp(self):
        self.harness, d = _harness()
        self.successResultOf(d)
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.harness.clock)
        self.resource = RouterResource(make_router(self.admin, self.harness.config))

    @FUZZ
    @given(fuzz.http_requests())
    def test_routes(self, spec):
        """Random paths, methods, bodies through the route table: answered, never 5xx."""
        fuzz.check_http(self.resource, self.harness.clock, spec)


class AdminInputFuzzTests(unittest.TestCase):
    """Real admin routes with hostile path parameters and bodies: 4xx, never 5xx."""

    def setUp(self):
        self.harness, d = _harness()
        self.successResultOf(d)
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.harness.clock)
        self.resource = RouterResource(make_router(self.admin, self.harness.config))

    @FUZZ
    @given(st.data())
    def test_admin_paths(self, data):
        """NUL bytes, invalid UTF-8 and percent-encoding, huge numbers in path parameters."""
        spec = data.draw(fuzz.admin_paths(self.resource.router.routes))
        fuzz.check_http(self.resource, self.harness.clock, spec)

    @FUZZ
    @given(st.data())
    def test_admin_bodies(self, data):
        """Deeply nested, huge-number, non-finite, invalid UTF-8 and wrongly typed JSON bodies."""
        spec = data.draw(fuzz.admin_bodies(self.resource.router.routes))
        fuzz.check_http(self.resource, self.harness.clock, spec)


class SecuredHttpFuzzTests(HttpFuzzTests):
    def setUp(self):
        secret = "data:;base64," + base64.b64encode(b"s" * 32).decode()
        self.harness, d = _harness(authenticationEnabled=True, authorizationEnabled=True,
                                   authenticationProviders=["token"], tokenSecretKey=secret)
        self.successResultOf(d)
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.harness.clock)
        self.resource = secure(RouterResource(make_router(self.admin, self.harness.config)),
                               self.harness.broker)
