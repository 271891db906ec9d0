"""
The two spellings of "where the metadata is" that daemons and commands are given:

- Pulsar's metadata store URL, ``zk:host:port[,host:port...][/chroot]`` (``metadataStoreUrl``,
  ``pulsar ... --metadata-store``; also the legacy bare ``host:port`` and ``metadata-store:zk:...``);
- BookKeeper's metadata service URI, ``zk+null://host:port[;host:port...][/root]/ledgers``
  (``metadataServiceUri``, ``bookkeeperMetadataServiceUri``).

Both parse to ``(hosts, root)``: the ZooKeeper connect string and the store's root path. Errors
are ``MetadataUrlError`` naming the URL; the caller adds the name of the key or flag it came from.
"""

from urllib.parse import urlsplit

from pulsar_twisted.config import ConfigError
from pulsar_twisted.metadata.layout import LEDGERS_ROOT

_STORE_FORM = "zk:HOST:PORT[,HOST:PORT...][/chroot]"


class MetadataUrlError(ConfigError):
    """A metadata store URL or metadata service URI that cannot be used; the message names it."""


def parse_metadata_store_url(url: str) -> tuple:
    """
    ``"zk:h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")`` (root ``"/"`` without a
    chroot). ``MetadataUrlError`` saying what is wrong for anything else, including the stores
    that only live inside a process (memory, rocksdb) and those we do not speak (etcd, oxia).
    """
    text = (url or "").strip()
    if text.startswith("metadata-store:"):
        text = text[len("metadata-store:"):]
    scheme, sep, rest = text.partition(":")
    if scheme == "zk" and sep:
        text = rest
    elif scheme in ("memory", "rocksdb", "etcd", "oxia", "local"):
        raise MetadataUrlError(f"metadata store {url!r}: only ZooKeeper (zk:HOST:PORT) can be used from "
                               f"the command line")
    elif "//" in text:
        raise MetadataUrlError(f"metadata store {url!r} is not {_STORE_FORM}")
    hosts, slash, chroot = text.partition("/")
    root = "/" + chroot.rstrip("/") if slash and chroot.strip("/") else "/"
    if not hosts:
        raise MetadataUrlError(f"metadata store {url!r} names no ZooKeeper host (expected {_STORE_FORM})")
    for server in hosts.split(","):
        host, colon, port = server.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MetadataUrlError(f"metadata store {url!r}: {server!r} is not HOST:PORT "
                                   f"(expected {_STORE_FORM})")
    if "//" in root or any(part in (".", "..") for part in root.split("/")):
        raise MetadataUrlError(f"metadata store {url!r}: bad chroot {root!r}")
    return hosts, root


def parse_metadata_service_uri(uri: str) -> tuple:
    """
    ``zk+null://h1:2181;h2:2181/ledgers`` -> (``"h1:2181,h2:2181"``, store root ``"/"``). The
    path names the ledgers root, which our layout fixes at ``<root>/ledgers``, so what comes before
    ``/ledgers`` is the store's root. ``MetadataUrlError`` for anything else.
    """
    parts = urlsplit(uri)
    if not parts.scheme.split("+")[0] == "zk" or not parts.netloc:
        raise MetadataUrlError(f"expected zk+null://host:port[;host:port]/ledgers, got {uri!r}")
    hosts = parts.netloc.replace(";", ",")
    path = parts.path.rstrip("/")
    if path and not path.endswith(LEDGERS_ROOT):
        raise MetadataUrlError(f"the path must end in {LEDGERS_ROOT}, got {parts.path!r}")
    root = path[:-len(LEDGERS_ROOT)] if path else ""
    return hosts, root or "/"
