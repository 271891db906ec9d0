"""
The metadata store contract against a real ZooKeeper server, at the address in the environment variable
PULSAR_TEST_ZK (e.g. 127.0.0.1:2181). Skipped when it is unset, kazoo is missing, or nothing answers there.
Each test works under its own fresh root, removed afterwards.
"""

import os
import socket
import uuid

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SkipTest, TestCase

from pulsar_twisted.testing.metadata_mixin import MetadataStoreTestsMixin

ZK_ENV = "PULSAR_TEST_ZK"
TEST_ROOT = "/pulsar-twisted-tests"


def _zk_address():
    """The server to test against, or raise SkipTest saying why there is none."""
    hosts = os.environ.get(ZK_ENV)
    if not hosts:
        raise SkipTest(f"{ZK_ENV} is not set (e.g. {ZK_ENV}=127.0.0.1:2181)")
    try:
        import kazoo  # noqa: F401
    except ImportError:
        raise SkipTest("kazoo is not installed")
    host, _, port = hosts.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(b"ruok")
            s.settimeout(2)
            answer = s.recv(4)
    except OSError as e:
        raise SkipTest(f"no ZooKeeper at {hosts}: {e}")
    # "ruok" may be disabled by the server's whitelist (empty answer); a connection is enough then.
    if answer not in (b"imok", b""):
        raise SkipTest(f"{hosts} does not answer like ZooKeeper: {answer!r}")
    return hosts


def _remove_tree(hosts, path):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    try:
        client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()


class ZooKeeperRootMixin:
    """
    For TestCases on the real server: ``setUp`` picks a fresh root under TEST_ROOT (its last segment
    ``root_prefix`` + a uuid), removed after the test; ``_open()`` starts a store session on it, closed
    after the test.
    """

    root_prefix = ""

    def setUp(self):
        self.hosts = _zk_address()
        self.root = f"{TEST_ROOT}/{self.root_prefix}{uuid.uuid4().hex}"
        # Registered first so that it runs last, after the stores' own cleanups closed them.
        self.addCleanup(deferToThread, _remove_tree, self.hosts, self.root)

    async def _open(self):
        from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
        store = ZooKeeperMetadataStore(self.hosts, reactor, root=self.root, session_timeout=10)
        self.addCleanup(store.close)
        await store.start()
        return store


class ZooKeeperStoreContractTests(ZooKeeperRootMixin, MetadataStoreTestsMixin, TestCase):
    """The contract against ZooKeeper."""

    def make_store(self):
        return self._open()

    def make_other_session(self, store):
        return self._open()
