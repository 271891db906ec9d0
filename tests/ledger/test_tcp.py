"""BookKeeperClient over TcpBookieClient against real BookieServers on 127.0.0.1 (real reactor,
real storage in temp dirs, embedded metadata store), in plain TCP, TLS and mutual TLS."""

import datetime
import ipaddress
import os
import random

from twisted.internet import defer, endpoints
from twisted.trial import unittest

from pulsar_twisted.bookie.server import BookieServer
from pulsar_twisted.bookie.storage import BookieStorage
from pulsar_twisted.common.bk_errors import BookieUnavailableError, LedgerFencedError
from pulsar_twisted.ledger.client import BookKeeperClient
from pulsar_twisted.ledger.quorum import RandomPlacementPolicy
from pulsar_twisted.ledger.tcp import TcpBookieClient
from pulsar_twisted.metadata.embedded.store import EmbeddedMetadataStore
from pulsar_twisted.security.tls import ClientTLS, server_tls_options


# -- certificates made at run time --------------------------------------------------------------------

def make_certificates(directory: str) -> dict:
    """A CA, a server cert (SAN 127.0.0.1, localhost) and a client cert signed by it, and a rogue
    client cert from another CA. Returns the PEM file paths by name."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    paths = {}

    def write(name, data):
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        paths[name] = path

    def key_pem(key):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def issue(common_name, issuer_key, issuer_name, key, ca=False, san=None):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(issuer_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def ca(name):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        return key, subject, issue(name, key, subject, key, ca=True)

    ca_key, ca_name, ca_cert = ca("test CA")
    write("ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM))
    for name in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        cert = issue(name, ca_key, ca_name, key, san=san)
        write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{name}.key", key_pem(key))
    rogue_key, rogue_name, _ = ca("rogue CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = issue("rogue", rogue_key, rogue_name, key,
                 san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    write("rogue.pem", cert.public_bytes(serialization.Encoding.PEM))
    write("rogue.key", key_pem(key))
    return paths


# -- a cluster of real bookies ------------------------------------------------------------------------

class BookieCluster:
    """N BookieServers on 127.0.0.1 ephemeral ports over real storage, sharing one embedded store."""

    def __init__(self, test, count, server_tls=None):
        self.test = test
        self.count = count
        self.server_tls = server_tls
        self.servers = []
        self.store = None
        self.clients = []

    async def start(self):
        from twisted.internet import reactor
        self.store = EmbeddedMetadataStore(None, reactor)
        await self.store.start()
        self.test.addCleanup(self.store.close)
        for _ in range(self.count):
            await self.add_bookie()
        return self

    async def add_bookie(self):
        from twisted.internet import reactor
        base = self.test.mktemp()
        storage = BookieStorage(f"{base}/journal", [f"{base}/ledgers"], reactor,
                                journal_sync_data=False, flush_interval_ms=0, gc_wait_time_ms=0)
        if self.server_tls is None:
            endpoint = endpoints.TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")
        else:
            endpoint = endpoints.SSL4ServerEndpoint(reactor, 0, self.server_tls, interface="127.0.0.1")
        server = BookieServer(storage, reactor, endpoint=endpoint, advertised_address="127.0.0.1",
                              metadata_store=self.store.new_session(), data_dirs=[base],
                              disk_usage=lambda: 0.1, disk_check_interval=0)
        await server.start()
        self.test.addCleanup(server.stop)
        self.servers.append(server)
        return server

    async def client(self, tls=None, **kwargs):
        from twisted.internet import reactor
        bookies = TcpBookieClient(reactor, tls, request_timeout=10.0)
        self.test.addCleanup(bookies.close)
        client = BookKeeperClient(self.store, bookies, reactor,
                                  placement=RandomPlacementPolicy(random.Random(7)), **kwargs)
        await client.start()
        return client

    def server(self, bookie_id):
        return next(s for s in self.servers if s.bookie_id == bookie_id)


def async_test(f):
    def wrapper(self):
        return defer.ensureDeferred(f(self))
    wrapper.__name__ = f.__name__
    wrapper.__doc__ = f.__doc__
    return wrapper


class TcpClusterMixin:
    """Run against plain TCP; subclasses switch TLS on."""

    server_tls = None
    client_tls = None
    timeout = 60

    def setUp(self):
        self.certs = make_certificates(self.mktemp_dir())
        self.configure_tls()

    def mktemp_dir(self):
        path = self.mktemp()
        os.makedirs(path)
        return path

    def configure_tls(self):
        pass

    async def cluster(self, count):
        return await BookieCluster(self, count, self.server_tls).start()

    @async_test
    async def test_write_read_ensemble_change(self):
        """E=3 Qw=2 Qa=2: 200 entries written and read back; a bookie stopped mid-write is replaced
        and every acked entry stays readable."""
        cluster = await self.cluster(4)
        client = await cluster.client(self.client_tls)
        writer = await client.create_ledger(3, 2, 2, b"pw")
        payloads = [b"entry-%d" % i + b"x" * (i % 50) for i in range(200)]
        first = await defer.gatherResults([writer.add_entry(p) for p in payloads[:100]])
        self.assertEqual(first, list(range(100)))
        victim = writer.metadata.last_ensemble[1][0]
        adds = [writer.add_entry(p) for p in payloads[100:]]
        # The victim goes while those adds are in flight: its connections are cut at once (as a
        # crash would), so some of them never reach it and the writer has to change the ensemble.
        server = cluster.server(victim)
        stopping = server.stop()
        server.factory.close_connections()
        self.assertEqual(await defer.gatherResults(adds), list(range(100, 200)))
        await stopping
        self.assertNotIn(victim, writer.metadata.last_ensemble[1])
        self.assertGreater(len(writer.metadata.ensembles), 1)
        entries = await writer.read_entries(0, 199)
        self.assertEqual([e.data for e in entries], payloads)
        await writer.close()
        reader = await (await cluster.client(self.client_tls)).open_ledger(writer.ledger_id, b"pw")
        self.assertEqual(reader.last_add_confirmed, 199)
        entries = await reader.read_entries(0, 199)
        self.assertEqual([e.data for e in entries], payloads)

    @async_test
    async def test_fencing_through_tcp(self):
        """Opening with recovery while a writer is open fences it: its next add fails."""
        cluster = await self.cluster(3)
        writer_client = await cluster.client(self.client_tls)
        writer = await writer_client.create_ledger(3, 2, 2, b"pw")
        await defer.gatherResults([writer.add_entry(b"e%d" % i) for i in range(20)])
        reader_client = await cluster.client(self.client_tls)
        reader = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=True)
        self.assertEqual(reader.last_add_confirmed, 19)
        try:
            await writer.add_entry(b"late")
        except LedgerFencedError:
            pass
        else:
            self.fail("the fenced writer's add succeeded")
        entries = await reader.read_entries(0, 19)
        self.assertEqual([e.data for e in entries], [b"e%d" % i for i in range(20)])


    @async_test
    async def test_bookie_side_is_tcp_nodelay(self):
        """A bookie's connections have TCP_NODELAY (BookKeeper's serverTcpNoDelay, on by default).
        Without it, an answer written while an earlier one was unacknowledged (entries read from
        disk come back from the read thread in batches, each its own write) waited for the
        client's delayed ACK: 10 parallel reads of flushed entries took 45 ms instead of 0.6 ms,
        and the chaos read-back went at ~16 ledgers a second (~60 ms per ledger) whatever their
        size (seed 78 with 10-entry ledgers: a partition left unread after 90 s)."""
        import socket
        cluster = await self.cluster(1)
        client = await cluster.client(self.client_tls)
        writer = await client.create_ledger(1, 1, 1, b"pw")
        await writer.add_entry(b"e")
        await writer.close()
        [protocol] = cluster.servers[0].factory.connections
        handle = protocol.transport.getHandle()
        if not isinstance(handle, socket.socket):      # TLS: the connection's own socket
            handle = protocol.transport.transport.getHandle()
        self.assertTrue(handle.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


class TcpTests(TcpClusterMixin, unittest.TestCase):
    pass


class TlsTests(TcpClusterMixin, unittest.TestCase):
    """Server certificate signed by a CA the client trusts; no client certificates."""

    def configure_tls(self):
        c = self.certs
        self.server_tls = server_tls_options(c["server.pem"], c["server.key"])
        self.client_tls = ClientTLS(c["ca.pem"])


class MutualTlsTests(TcpClusterMixin, unittest.TestCase):
    """Client certificates required and checked against the CA."""

    def configure_tls(self):
        c = self.certs
        self.server_tls = server_tls_options(c["server.pem"], c["server.key"], c["ca.pem"],
                                             require_client_cert=True)
        self.client_tls = ClientTLS(c["ca.pem"], c["client.pem"], c["client.key"])

    @async_test
    async def test_untrusted_client_refused(self):
        """A client without a certificate, or with one from another CA, gets no answer."""
        from twisted.internet import reactor
        cluster = await self.cluster(1)
        bookie = cluster.servers[0].bookie_id
        c = self.certs
        for tls in (ClientTLS(c["ca.pem"]), ClientTLS(c["ca.pem"], c["rogue.pem"], c["rogue.key"])):
            client = TcpBookieClient(reactor, tls, request_timeout=10.0)
            self.addCleanup(client.close)
            try:
                await client.read_lac(bookie, 1)
            except BookieUnavailableError:
                pass
            else:
                self.fail("an untrusted client was served")
        trusted = TcpBookieClient(reactor, self.client_tls, request_timeout=10.0)
        self.addCleanup(trusted.close)
        info = await trusted.info(bookie)
        self.assertEqual(info["bookie_id"], bookie)

    @async_test
    async def test_server_identity_checked(self):
        """A client that does not trust the bookie's CA refuses the bookie."""
        from twisted.internet import reactor
        cluster = await self.cluster(1)
        c = self.certs
        client = TcpBookieClient(reactor, ClientTLS(c["rogue.pem"], c["client.pem"], c["client.key"]),
                                 request_timeout=10.0)
        self.addCleanup(client.close)
        try:
            await client.read_lac(cluster.servers[0].bookie_id, 1)
        except BookieUnavailableError:
            pass
        else:
            self.fail("a bookie with an untrusted certificate was used")
