"""
A real multi-process cluster for tests: ZooKeeper, N ``twistd pulsar-bookie`` and M
``twistd pulsar-broker`` processes on 127.0.0.1, each with a temporary config on free ports.

``ZooKeeperServer.shared()`` is one ZooKeeper for the whole test run: the one named by
``PULSAR_TEST_ZK`` if set, else one started with ``scripts/zookeeper.sh`` on a free port (stopped at
exit); ``ZooKeeperServer.launch()`` starts another, private one. A server the harness started can be
killed -9, started again on its data, paused and resumed (the chaos nemesis's ZooKeeper faults).
``ZooKeeperUnavailable`` says why there is none (tests skip on it). Each ``Cluster`` works
under its own ZooKeeper chroot (``/test-<random>``), so clusters sharing the server see nothing of
each other.

``Cluster(zk, bookies=3, brokers=1, broker_config=..., bookie_config=...)``: ``start()`` runs
``pulsar initialize-cluster-metadata`` (the real command), starts the bookies in parallel, waits for
their registrations, then starts the brokers. Each ``DaemonProcess`` has ``stop()`` (SIGTERM),
``kill9()``, ``pause()`` (SIGSTOP) and ``resume()`` (SIGCONT), ``start()`` again on the same data and
ports, and ``log_tail()``; ``cluster.logs()`` gathers every tail for a failure message. Each knows its
ephemeral ``registration`` path, and ``cluster.session_of(path)`` the session holding it.
``cluster.zk`` is a synchronous kazoo client on the chroot for inspecting metadata. Blocking code (sleep-polling with
deadlines): for ``SynchronousTestCase``.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from pulsar_twisted.metadata import layout
from pulsar_twisted.testing.process import _REPO_ROOT, ChildProcess, free_port

HOST = "127.0.0.1"
ZK_ENV = "PULSAR_TEST_ZK"

_RUNNING = set()


@atexit.register
def _kill_leftovers():
    for process in list(_RUNNING):
        process.kill9()
    if ZooKeeperServer._shared is not None:
        ZooKeeperServer._shared.stop()


class ClusterError(Exception):
    """A process did not start or stop as asked; the message carries log tails."""


class ZooKeeperUnavailable(Exception):
    """No ZooKeeper can be had for the tests (the message says why)."""


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1, on_timeout=None):
    """Poll ``predicate`` until it returns a true value (returned) or ``timeout`` seconds pass
    (ClusterError naming ``what``, plus ``on_timeout()``'s text)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = on_timeout() if on_timeout is not None else ""
            raise ClusterError(f"timed out after {timeout}s waiting for {what}\n{extra}")
        time.sleep(interval)


class ZooKeeperServer:
    """A ZooKeeper reachable at ``hosts`` ("127.0.0.1:PORT").

    One started by the harness (``launch()``, ``scripts/zookeeper.sh``) has a ``directory`` and is
    ``owned``: it can be killed -9 and started again on the same data and port (``kill9()``,
    ``start()``), frozen and thawed (``pause()``, ``resume()``), as the chaos nemesis does. One named
    by ``PULSAR_TEST_ZK`` or ``--zk`` is someone else's: those methods refuse (ClusterError)."""

    _shared = None
    _shared_error = None
    name = "zookeeper"

    def __init__(self, hosts: str, directory: str = None):
        self.hosts = hosts
        self.directory = directory
        self.paused = False

    @property
    def owned(self) -> bool:
        """Whether the harness started this server (and may kill, restart and pause it)."""
        return self.directory is not None

    @classmethod
    def shared(cls) -> "ZooKeeperServer":
        """The run's ZooKeeper (see the module docstring); ZooKeeperUnavailable if none."""
        if cls._shared is not None:
            return cls._shared
        if cls._shared_error is not None:
            raise ZooKeeperUnavailable(cls._shared_error)
        try:
            import kazoo  # noqa: F401
        except ImportError:
            cls._shared_error = "kazoo is not installed"
            raise ZooKeeperUnavailable(cls._shared_error)
        if os.environ.get(ZK_ENV):
            cls._shared = cls(os.environ[ZK_ENV])
            return cls._shared
        try:
            cls._shared = cls.launch()
        except ZooKeeperUnavailable as e:
            cls._shared_error = str(e)
            raise
        return cls._shared

    @classmethod
    def launch(cls) -> "ZooKeeperServer":
        """A new server of the harness's own (``scripts/zookeeper.sh``) on a free port, in a new
        temporary directory; the caller stops it. ZooKeeperUnavailable (saying why) if it cannot."""
        directory = tempfile.mkdtemp(prefix="pulsar-zk-")
        server = cls(f"{HOST}:{free_port(HOST)}", directory)
        reason = server._script("start")
        if reason is not None:
            shutil.rmtree(directory, ignore_errors=True)
            raise ZooKeeperUnavailable(
                f"no ZooKeeper ({ZK_ENV} unset and scripts/zookeeper.sh failed: {reason})")
        return server

    @property
    def port(self) -> int:
        return int(self.hosts.rsplit(":", 1)[1])

    @property
    def tick_time(self) -> float:
        """Seconds of the server's tickTime (zoo.cfg; 2.0 if unknown). ZooKeeper expires sessions
        in buckets of one tick: a session is expired at the first tick boundary past its last
        contact plus its timeout, so up to one tick after the timeout."""
        try:
            with open(os.path.join(self.directory, "zoo.cfg")) as f:
                for line in f:
                    key, _, value = line.partition("=")
                    if key.strip() == "tickTime":
                        return int(value) / 1000.0
        except (OSError, TypeError, ValueError):
            pass
        return 2.0

    def _script(self, command: str):
        """``scripts/zookeeper.sh command DIR PORT``; None if it succeeded, else why not."""
        script = os.path.join(_REPO_ROOT, "scripts", "zookeeper.sh")
        try:
            result = subprocess.run(["bash", script, command, self.directory, str(self.port)],
                                    capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        if result.returncode != 0:
            return (result.stdout + result.stderr).strip() or f"exit {result.returncode}"
        return None

    def _own(self, what: str) -> None:
        if not self.owned:
            raise ClusterError(f"cannot {what} the ZooKeeper at {self.hosts}: the harness did not "
                               f"start it")

    @property
    def _pid_path(self) -> str:
        # zkServer.sh writes the pid of the java process it starts under dataDir.
        return os.path.join(self.directory, "data", "zookeeper_server.pid")

    def pid(self):
        """The server process's pid (from zkServer.sh's pid file), or None."""
        if not self.owned:
            return None
        try:
            with open(self._pid_path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        """Whether the server process exists (stopped or not) and is no zombie. (It is not our
        child: zkServer.sh daemonizes it, so init reaps it, maybe late.)"""
        pid = self.pid()
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def kill9(self) -> None:
        """SIGKILL the server; returns once the process is gone (its port closed with it)."""
        self._own("kill")
        pid = self.pid()
        if pid is not None and self.running():
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not self.running(), 10, f"ZooKeeper {pid} to die", interval=0.05)
        self.paused = False
        # A pid file naming a zombie or a recycled pid would make zkServer.sh refuse to start.
        try:
            os.remove(self._pid_path)
        except OSError:
            pass

    def start(self) -> None:
        """Start the server again on the same data directory and port (its sessions and znodes
        are restored from its snapshot and log); returns once it answers ``ruok``."""
        self._own("start")
        if self.running():
            return
        reason = self._script("start")
        if reason is not None:
            raise ClusterError(f"ZooKeeper on {self.hosts} did not start again: {reason}")

    def pause(self) -> None:
        """SIGSTOP: the server freezes with its sockets open; clients' connections stay up but
        nothing is answered, and its session clock goes on."""
        self._own("pause")
        if self.running() and not self.paused:
            os.kill(self.pid(), signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.paused:
            self.paused = False
            if self.running():
                os.kill(self.pid(), signal.SIGCONT)

    def stop(self) -> None:
        if self.directory is not None:
            self.resume()              # a stopped process would not act on the SIGTERM
            self._script("stop")
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class DaemonProcess(ChildProcess):
    """One ``twistd -n <plugin> -c <conf>`` child; ready when ``ready_port`` accepts connections.

    The child's life (spawn, wait_ready, stop, kill9, restart, pause, resume, log tails) is
    ``ChildProcess``'s; unlike the standalone, stop and kill9 do not wait for the port to close."""

    host = HOST
    error = ClusterError
    running_registry = _RUNNING
    wait_port_closed = False
    log_tail_lines = 40

    def __init__(self, name: str, plugin: str, directory: str, settings: dict, ready_port: int,
                 start_timeout: float = 30.0, stop_timeout: float = 30.0, base_text: str = ""):
        self.name = name
        self.plugin = plugin
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.settings = dict(settings)
        #: A whole configuration file (a Pulsar user's own) written before ``settings``' lines.
        self.base_text = base_text
        self.ready_port = ready_port
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.config_path = os.path.join(directory, f"{name}.conf")
        self.log_path = os.path.join(directory, f"{name}.log")
        self._init_child()
        self.write_config()

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            if self.base_text:
                f.write(self.base_text.rstrip("\n") + "\n")
            for key, value in self.settings.items():
                f.write(f"{key}={value}\n")

    def twistd_arguments(self) -> list:
        return [self.plugin, "-c", self.config_path]

    #: The ephemeral node (under the chroot) the daemon holds while its session lives.
    registration = None


class BookieProcess(DaemonProcess):
    def __init__(self, name, directory, metadata_uri, config=None, **kwargs):
        self.port = free_port(HOST)
        settings = {
            "bookiePort": self.port, "advertisedAddress": HOST,
            "bookieEndpoint": f"tcp:{self.port}:interface={HOST}",
            "metadataServiceUri": metadata_uri, "zkTimeout": 4000,
            "journalDirectory": os.path.join(directory, "journal"),
            "ledgerDirectories": os.path.join(directory, "ledgers"),
            "httpServerEnabled": "false", "journalSyncData": "false",
        }
        settings.update(config or {})
        super().__init__(name, "pulsar-bookie", directory, settings, self.port, **kwargs)

    @property
    def bookie_id(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def registration(self) -> str:
        return f"{layout.AVAILABLE_PATH}/{self.bookie_id}"


class BrokerProcess(DaemonProcess):
    def __init__(self, name, directory, metadata_url, config=None, **kwargs):
        self.port = free_port(HOST)
        self.web_port = free_port(HOST)
        settings = {
            "metadataStoreUrl": metadata_url, "clusterName": "test",
            "bindAddress": HOST, "advertisedAddress": HOST,
            "brokerServicePort": self.port, "webServicePort": self.web_port,
            "zooKeeperSessionTimeoutMillis": 4000,
        }
        settings.update(config or {})
        super().__init__(name, "pulsar-broker", directory, settings, self.port, **kwargs)

    @property
    def service_url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{HOST}:{self.web_port}"

    @property
    def broker_id(self) -> str:
        return f"{HOST}:{self.web_port}"

    @property
    def registration(self) -> str:
        return layout.broker_path(self.broker_id)


class ProxyProcess(DaemonProcess):
    """One ``twistd pulsar-proxy``; brokers from ``metadata_url`` (or ``config``'s brokerServiceURL).
    Every broker port is an allowed target (the test brokers listen on free ports)."""

    def __init__(self, name, directory, metadata_url=None, config=None, **kwargs):
        self.port = free_port(HOST)
        self.web_port = free_port(HOST)
        settings = {
            "clusterName": "test", "bindAddress": HOST, "advertisedAddress": HOST,
            "servicePort": self.port, "webServicePort": self.web_port,
            "brokerProxyAllowedTargetPorts": "*", "zooKeeperSessionTimeoutMillis": 4000,
        }
        if metadata_url:
            settings["metadataStoreUrl"] = metadata_url
        settings.update(config or {})
        super().__init__(name, "pulsar-proxy", directory, settings, self.port, **kwargs)

    @property
    def service_url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{HOST}:{self.web_port}"


class FunctionsWorkerProcess(DaemonProcess):
    """One ``twistd pulsar-functions-worker`` on the cluster's metadata store, its instances on
    ``service_url``; ready once its HTTP port accepts."""

    def __init__(self, name, directory, metadata_url, service_url, config=None, web_url=None,
                 **kwargs):
        self.port = free_port(HOST)
        settings = {
            "pulsarWebServiceUrl": web_url or "http://127.0.0.1:8080",
            "workerHostname": HOST, "bindAddress": HOST, "workerPort": self.port,
            "pulsarServiceUrl": service_url, "configurationMetadataStoreUrl": metadata_url,
            "downloadDirectory": os.path.join(directory, "download"),
            "zooKeeperSessionTimeoutMillis": 4000, "pulsarFunctionsCluster": "test",
        }
        settings.update(config or {})
        super().__init__(name, "pulsar-functions-worker", directory, settings, self.port, **kwargs)

    @property
    def web_service_url(self) -> str:
        return f"http://{HOST}:{self.port}"


class Cluster:
    """ZooKeeper chroot + bookies + brokers (see the module docstring)."""

    def __init__(self, zk: ZooKeeperServer, bookies: int = 3, brokers: int = 1,
                 broker_config: dict = None, bookie_config: dict = None):
        self.zk_server = zk
        self.chroot = f"/test-{uuid.uuid4().hex[:12]}"
        self.directory = tempfile.mkdtemp(prefix="pulsar-cluster-")
        self.metadata_url = f"zk:{zk.hosts}{self.chroot}"
        bookie_uri = f"zk+null://{zk.hosts.replace(',', ';')}{self.chroot}/ledgers"
        self.bookies = [BookieProcess(f"bookie{i}", os.path.join(self.directory, f"bookie{i}"),
                                      bookie_uri, bookie_config) for i in range(bookies)]
        self.brokers = [BrokerProcess(f"broker{i}", os.path.join(self.directory, f"broker{i}"),
                                      self.metadata_url, broker_config) for i in range(brokers)]
        self.proxies = []
        self.functions_workers = []
        self.zk = None

    def add_proxy(self, config: dict = None, discover: bool = True) -> ProxyProcess:
        """A ``pulsar-proxy`` for this cluster (not started), discovering the brokers from the
        metadata store (``discover``) or from ``config``'s brokerServiceURL."""
        name = f"proxy{len(self.proxies)}"
        proxy = ProxyProcess(name, os.path.join(self.directory, name),
                             self.metadata_url if discover else None, config)
        self.proxies.append(proxy)
        return proxy

    def add_functions_worker(self, config: dict = None) -> FunctionsWorkerProcess:
        """A ``pulsar-functions-worker`` on this cluster's store and first broker (not started)."""
        name = f"functions-worker{len(self.functions_workers)}"
        worker = FunctionsWorkerProcess(name, os.path.join(self.directory, name), self.metadata_url,
                                        self.brokers[0].service_url, config,
                                        web_url=self.brokers[0].web_service_url)
        self.functions_workers.append(worker)
        return worker

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "Cluster":
        from kazoo.client import KazooClient
        import logging
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        self.initialize_metadata()
        self.zk = KazooClient(hosts=self.zk_server.hosts, timeout=10)
        self.zk.start(timeout=15)
        for bookie in self.bookies:
            bookie.spawn()
        for bookie in self.bookies:
            bookie.wait_ready()
        wanted = {b.bookie_id for b in self.bookies}
        wait_for(lambda: wanted <= set(self.available_bookies()), 20, "bookie registrations",
                 on_timeout=self.logs)
        for broker in self.brokers:
            broker.spawn()
        for broker in self.brokers:
            broker.wait_ready()
        # A broker registers after it listens (as Pulsar's load manager does): ready means both.
        wanted = {b.broker_id for b in self.brokers}
        wait_for(lambda: wanted <= set(self.registered_brokers()), 20, "broker registrations",
                 on_timeout=self.logs)
        return self

    def initialize_metadata(self) -> None:
        """``pulsar initialize-cluster-metadata`` against this cluster's chroot."""
        broker = self.brokers[0] if self.brokers else None
        command = [sys.executable, "-m", "pulsar_twisted.cli.pulsar", "initialize-cluster-metadata",
                   "--cluster", "test", "--metadata-store", self.metadata_url,
                   "--web-service-url", broker.web_service_url if broker else "http://127.0.0.1:8080",
                   "--broker-service-url", broker.service_url if broker else "pulsar://127.0.0.1:6650"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, env.get("PYTHONPATH", "")])
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        if result.returncode != 0:
            raise ClusterError(f"initialize-cluster-metadata failed:\n{result.stdout}{result.stderr}")

    def cleanup(self) -> None:
        """Kill every process, remove the chroot and the temporary directory."""
        for process in self.functions_workers + self.proxies + self.brokers + self.bookies:
            process.kill9()
        if self.zk is not None:
            try:
                self.zk.delete(self.chroot, recursive=True)
            except Exception:
                pass
            self.zk.stop()
            self.zk.close()
            self.zk = None
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---------------------------------------------------------------- inspection
    def path(self, path: str) -> str:
        """The ZooKeeper path of a metadata path of this cluster (under its chroot)."""
        return self.chroot + path

    def session_of(self, path: str):
        """The session id holding the ephemeral node at ``path`` (under the chroot), or None."""
        try:
            stat = self.zk.exists(self.path(path))
        except Exception:
            return None
        return None if stat is None else stat.ephemeralOwner

    def available_bookies(self) -> list:
        try:
            return [b for b in self.zk.get_children(self.path(layout.AVAILABLE_PATH))
                    if b != layout.READONLY_NAME]
        except Exception:
            return []

    def registered_brokers(self) -> list:
        try:
            return self.zk.get_children(self.path(layout.BROKERS_ROOT))
        except Exception:
            return []

    def bundle_owners(self, namespace: str = "public/default") -> dict:
        """Bundle range name -> the owner's nativeUrl."""
        owners = {}
        try:
            names = self.zk.get_children(self.path(f"{layout.OWNERSHIP_ROOT}/{namespace}"))
        except Exception:
            return owners
        for name in names:
            try:
                raw, _ = self.zk.get(self.path(layout.ownership_path(namespace, name)))
                owners[name] = json.loads(raw).get("nativeUrl")
            except Exception:
                pass
        return owners

    def ledger_metadata(self) -> dict:
        """Ledger id -> its LedgerMetadata (from ``/ledgers/L...``)."""
        from pulsar_twisted.resources.ledgers import LedgerMetadata
        out = {}
        for name in self.zk.get_children(self.path(layout.LEDGERS_ROOT)):
            if name.startswith("L") and name[1:].isdigit():
                try:
                    raw, _ = self.zk.get(self.path(f"{layout.LEDGERS_ROOT}/{name}"))
                except Exception:
                    continue
                out[int(name[1:])] = LedgerMetadata.from_bytes(raw)
        return out

    def tracebacks(self) -> dict:
        """Process name -> the tracebacks in its log (text), for those that logged any."""
        out = {}
        for process in self.functions_workers + self.proxies + self.brokers + self.bookies:
            blocks = process.log_text().split("Traceback (most recent call last):")[1:]
            if blocks:
                out[process.name] = ["Traceback" + b[:3000] for b in blocks]
        return out

    def logs(self) -> str:
        return "\n".join(p.log_tail() for p in
                         self.functions_workers + self.proxies + self.brokers + self.bookies)
