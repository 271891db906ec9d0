"""
The ``pulsar`` command (Pulsar's ``bin/pulsar``), for the sub-commands that act on a cluster's
metadata rather than run a daemon under twistd:

``pulsar initialize-cluster-metadata --cluster NAME --metadata-store zk:HOST:PORT[/chroot]
[--configuration-metadata-store zk:...] --web-service-url URL --broker-service-url URL
[--web-service-url-tls URL] [--broker-service-url-tls URL]``
    Creates what a new cluster needs before its first broker and bookie start (Pulsar's
    ``PulsarClusterMetadataSetup``): the cluster node, the ``public`` tenant and ``public/default``
    namespace, the ``pulsar`` tenant and ``pulsar/system`` namespace in the configuration store, and
    the BookKeeper and managed-ledger roots in the metadata store. Idempotent: existing nodes are
    kept (a tenant or namespace that exists only gets this cluster added to its clusters), so it can
    be run again, and once per cluster against a shared configuration store.

``pulsar autorecovery --metadata-store zk:HOST:PORT[/chroot] [--lost-bookie-recovery-delay S]
[--ledger-password P ...]``
    Runs BookKeeper's auto-recovery (auditor + replication worker) as its own process, talking to
    the bookies over TCP, until SIGINT/SIGTERM.

Metadata store URLs follow Pulsar: ``zk:host:port[,host:port...][/chroot]`` (also the legacy bare
``host:port`` and the ``metadata-store:zk:...`` form). The embedded store lives inside a standalone
process and cannot be reached from here. A malformed URL or an unreachable store is reported on
stderr with exit code 1.
"""

import argparse
import logging
import sys
import uuid

from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.metadata.interfaces import AlreadyExistsError, NotFoundError
from pulsar_twisted.metadata.layout import (
    INSTANCE_ID_PATH, LOCAL_ROOTS, cluster_path, namespace_path, tenant_path)
from pulsar_twisted.metadata.urls import MetadataUrlError, parse_metadata_store_url
from pulsar_twisted.resources.clusters import ClusterResources
from pulsar_twisted.resources.namespaces import NamespaceResources
from pulsar_twisted.resources.policies import new_policies
from pulsar_twisted.resources.tenants import TenantResources

log = Logger()

#: Tenants and namespaces every Pulsar cluster starts with.
DEFAULT_NAMESPACES = (("public", "default"), ("pulsar", "system"))


class CommandError(Exception):
    """A user error: printed as ``pulsar <command>: error: <message>`` with exit code 1."""


# -- cluster metadata ----------------------------------------------------------------------------

def _cluster_data(web_service_url, broker_service_url, web_service_url_tls, broker_service_url_tls):
    data = {"serviceUrl": web_service_url, "brokerServiceUrl": broker_service_url}
    if web_service_url_tls:
        data["serviceUrlTls"] = web_service_url_tls
    if broker_service_url_tls:
        data["brokerServiceUrlTls"] = broker_service_url_tls
    return data


async def _create_if_absent(store, path: str, value: bytes) -> bool:
    """True when this call created ``path``; an existing node is left as it is."""
    if await store.exists(path) is not None:
        return False
    try:
        await store.put(path, value, expected_version=-1)
        return True
    except AlreadyExistsError:
        return False        # another setup run won the race


class _Unchanged(Exception):
    """Raised inside an update that has nothing to write."""


async def _add_to_list(resources, key_of_node: str, key: str, item: str) -> bool:
    """Add ``item`` to the JSON list ``key`` of a tenant or namespace document (compare-and-set,
    through ``resources.update``). True if it changed; False if it was there or there is no node."""
    def change(doc):
        values = list(doc.get(key) or [])
        if item in values:
            raise _Unchanged()
        doc[key] = values + [item]
        return doc
    try:
        await resources.update(key_of_node, change)
        return True
    except (_Unchanged, NotFoundError):
        return False


async def initialize_cluster_metadata(metadata_store, configuration_store, cluster: str,
                                      web_service_url: str, broker_service_url: str,
                                      web_service_url_tls: str = "",
                                      broker_service_url_tls: str = "") -> list:
    """
    Write a cluster's initial metadata (see the module docstring) into two IMetadataStores (they
    may be the same). Idempotent. Returns ``[(action, path)]`` in order, action "created" or
    "updated" (a tenant or namespace that got this cluster added): empty when all was there.
    """
    if not cluster or "/" in cluster:
        raise CommandError(f"bad cluster name {cluster!r}")
    changed = []
    for path in LOCAL_ROOTS:
        if await _create_if_absent(metadata_store, path, b""):
            changed.append(("created", path))
    if await _create_if_absent(metadata_store, INSTANCE_ID_PATH, uuid.uuid4().hex.encode()):
        changed.append(("created", INSTANCE_ID_PATH))

    clusters = ClusterResources(configuration_store)
    tenants = TenantResources(configuration_store)
    namespaces = NamespaceResources(configuration_store)
    data = _cluster_data(web_service_url, broker_service_url, web_service_url_tls,
                         broker_service_url_tls)
    if await clusters.ensure(cluster, data):
        changed.append(("created", cluster_path(cluster)))
    for tenant, local_name in DEFAULT_NAMESPACES:
        info = {"adminRoles": [], "allowedClusters": [cluster]}
        if await tenants.ensure(tenant, info):
            changed.append(("created", tenant_path(tenant)))
        elif await _add_to_list(tenants, tenant, "allowedClusters", cluster):
            changed.append(("updated", tenant_path(tenant)))
        # The admin API's defaults, so a namespace made here reads exactly like one made through it.
        namespace = f"{tenant}/{local_name}"
        if await namespaces.ensure(namespace, new_policies(cluster)):
            changed.append(("created", namespace_path(namespace)))
        elif await _add_to_list(namespaces, namespace, "replication_clusters", cluster):
            changed.append(("updated", namespace_path(namespace)))
    return changed


# -- the command ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pulsar", description="Pulsar cluster tools.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    init = commands.add_parser(
        "initialize-cluster-metadata", help="create a new cluster's metadata (idempotent)")
    init.add_argument("-c", "--cluster", required=True, help="cluster name")
    init.add_argument("-md", "--metadata-store", "-zk", "--zookeeper", dest="metadata_store",
                      required=True, help="metadata store: zk:HOST:PORT[,HOST:PORT...][/chroot]")
    init.add_argument("-cms", "--configuration-metadata-store", "-cs", "--configuration-store",
                      dest="configuration_store", default=None,
                      help="configuration store URL (default: the metadata store)")
    init.add_argument("-uw", "--web-service-url", required=True)
    init.add_argument("-tw", "--web-service-url-tls", default="")
    init.add_argument("-ub", "--broker-service-url", required=True)
    init.add_argument("-tb", "--broker-service-url-tls", default="")
    init.set_defaults(run=_run_initialize)

    recovery = commands.add_parser(
        "autorecovery", help="run BookKeeper auto-recovery (auditor + replication worker)")
    recovery.add_argument("-md", "--metadata-store", "-zk", "--zookeeper", dest="metadata_store",
                          required=True, help="metadata store: zk:HOST:PORT[,HOST:PORT...][/chroot]")
    recovery.add_argument("--lost-bookie-recovery-delay", type=float, default=0.0,
                          help="seconds a bookie must stay away before its ledgers are replicated")
    recovery.add_argument("--ledger-password", action="append", default=None,
                          help="a ledger password to try (repeatable; default: the empty password)")
    recovery.set_defaults(run=_run_autorecovery)
    from pulsar_twisted.cli.tokens import add_tokens_parser
    add_tokens_parser(commands)  # `pulsar tokens ...` (no metadata store, no reactor)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``pulsar`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "tokens":
        from pulsar_twisted.cli.tokens import run
        return run(args)
    try:
        urls = [parse_metadata_store_url(args.metadata_store)]
        if getattr(args, "configuration_store", None):
            urls.append(parse_metadata_store_url(args.configuration_store))
    except MetadataUrlError as e:
        print(f"pulsar {args.command}: error: {e}", file=sys.stderr)
        return 1
    try:
        task.react(lambda reactor: defer.ensureDeferred(_guarded(reactor, args, urls)))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


async def _guarded(reactor, args, urls):
    try:
        await args.run(reactor, args, urls)
    except CommandError as e:
        print(f"pulsar {args.command}: error: {e}", file=sys.stderr)
        raise SystemExit(1)


async def _connect(reactor, url, hosts, root):
    from pulsar_twisted.metadata.interfaces import MetadataStoreError
    from pulsar_twisted.metadata.zookeeper import ZooKeeperMetadataStore
    store = ZooKeeperMetadataStore(hosts, reactor, root=root, session_timeout=30)
    try:
        await store.start()
    except MetadataStoreError as e:
        await store.close()
        raise CommandError(f"cannot reach the metadata store {url}: {e}") from e
    return store


async def _run_initialize(reactor, args, urls):
    from pulsar_twisted.metadata.interfaces import MetadataStoreError
    # kazoo logs every refused connection attempt; the one error that matters is reported below.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    stores = []
    try:
        local = await _connect(reactor, args.metadata_store, *urls[0])
        stores.append(local)
        config = local
        if len(urls) > 1 and urls[1] != urls[0]:
            config = await _connect(reactor, args.configuration_store, *urls[1])
            stores.append(config)
        try:
            changed = await initialize_cluster_metadata(
                local, config, args.cluster, args.web_service_url, args.broker_service_url,
                args.web_service_url_tls, args.broker_service_url_tls)
        except MetadataStoreError as e:
            raise CommandError(f"writing the cluster metadata failed: {e}") from e
    finally:
        for store in stores:
            await store.close()
    for action, path in changed:
        print(f"{action} {path}")
    print(f"Cluster metadata for '{args.cluster}' is initialized"
          + ("" if changed else " (nothing to do: it already was)"))


async def _run_autorecovery(reactor, args, urls):
    import sys as _sys

    from twisted.logger import globalLogBeginner, textFileLogObserver

    from pulsar_twisted.ledger.autorecovery import AutoRecoveryService
    from pulsar_twisted.ledger.client import BookKeeperClient
    from pulsar_twisted.ledger.tcp import TcpBookieClient

    globalLogBeginner.beginLoggingTo([textFileLogObserver(_sys.stdout)])
    store = await _connect(reactor, args.metadata_store, *urls[0])
    bookie_client = TcpBookieClient(reactor)
    ledger_client = BookKeeperClient(store, bookie_client, reactor)
    passwords = [p.encode("utf-8") for p in (args.ledger_password or [""])]
    recovery = AutoRecoveryService(store, ledger_client, bookie_client, reactor,
                                   lost_bookie_recovery_delay=args.lost_bookie_recovery_delay,
                                   passwords=passwords)
    recovery.startService()
    log.info("auto-recovery running on {url}", url=args.metadata_store)

    async def shutdown():
        await recovery.stopService()
        await bookie_client.close()
        await store.close()
    reactor.addSystemEventTrigger("before", "shutdown",
                                  lambda: defer.Deferred.fromCoroutine(shutdown()))
    await defer.Deferred()      # until SIGINT / SIGTERM stops the reactor


if __name__ == "__main__":
    sys.exit(main())
