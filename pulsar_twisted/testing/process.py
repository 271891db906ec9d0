"""
A real ``twistd -n pulsar-standalone`` in a subprocess, for the interop tests that drive the
official client (and for anything else that needs a broker on a socket).

Each ``StandaloneProcess`` owns a temporary directory with its config file, its data and its log,
and a free port chosen by the kernel. ``start()`` returns once the broker port accepts connections
(bounded by ``start_timeout``); ``stop()`` is a graceful SIGTERM shutdown, ``kill9()`` a SIGKILL,
and ``restart()`` starts again on the same data and port. Every failure to start or stop raises
``StandaloneError`` carrying the tail of the log, because a test that only says "timed out" is
not worth reading.

This module blocks (``time.sleep`` while polling a socket and a child process): it is for tests
that run outside the reactor, such as ``SynchronousTestCase`` driving a blocking client.
"""

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

#: The repository root: ``twisted/plugins`` there provides the ``pulsar-standalone`` plugin.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_env() -> dict:
    """This process's environment with this checkout first on PYTHONPATH (no empty entries): what
    a child running our code from this tree (a daemon, a relay, a test's helper process) needs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


#: ``twistd`` run by this interpreter (``python -m twisted`` is ``twist``, which lacks ``-n``).
#: First, on Linux, ask for SIGKILL when the test process dies (PR_SET_PDEATHSIG), so that even
#: a test run killed with -9 leaves no broker behind. (Done in the child's own code rather than a
#: ``preexec_fn``, which is unsafe once the official client's threads exist.)
_TWISTD = ("import sys\n"
           "try:\n"
           "    import ctypes; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
           "except Exception:\n"
           "    pass\n"
           "sys.argv[0] = 'twistd'\n"
           "from twisted.scripts.twistd import run; run()\n")


#: Instances whose child may be running: stopped at interpreter exit whatever the caller forgot.
_RUNNING = set()


@atexit.register
def _kill_leftovers():
    for standalone in list(_RUNNING):
        standalone.kill9()


class StandaloneError(Exception):
    """The standalone did not start or stop as asked; the message ends with its log tail."""


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections' local ports."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: Ports this process handed out already (a daemon may not have bound its port yet).
_handed_out = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host``, for a server started a moment later.

    Chosen at random below the kernel's range for outgoing connections' local ports, not by binding
    to port 0: a port from that range, free when picked, was at times taken by some outgoing
    connection (a ZooKeeper or bookie client of another test's daemons) before the daemon it was
    for could listen ("Address already in use"). Below the range only another listener can take
    it; a pick is tried with a bind first, and not handed out twice by this process."""
    low, high = 10000, _ephemeral_low() - 1
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(low, high) if high > low else 0
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class ChildProcess:
    """
    The life of one ``twistd -n ...`` child writing to its own log file, shared by
    ``StandaloneProcess`` and the cluster's ``DaemonProcess``: ``spawn()`` then ``wait_ready()``
    (the child is ready once ``(host, ready_port)`` accepts connections), ``stop()`` (SIGTERM),
    ``kill9()``, ``restart()``, log tails for failure messages.

    A subclass sets ``name`` (it names the child in errors), ``error`` (the exception raised),
    ``running_registry`` (the set its ``atexit`` hook kills), ``twistd_arguments()``, and in its
    ``__init__`` ``directory``, ``log_path``, ``start_timeout``, ``stop_timeout`` and then calls
    ``_init_child()``. Blocking (sleep-polling with deadlines), like the rest of this module.
    """

    host = "127.0.0.1"
    name = "child"
    error = StandaloneError
    running_registry = _RUNNING
    #: Whether stop() and kill9() also wait (at most 5 s) until ``ready_port`` stops accepting.
    wait_port_closed = True
    log_tail_lines = 60

    def _init_child(self) -> None:
        self.process = None
        self._log_file = None
        self.starts = 0
        #: Whether ``pause()`` froze the child and no ``resume()`` or end of it came since.
        self.paused = False

    #: Words before the interpreter on the child's command line (``ip netns exec NAME``, which
    #: execs the interpreter in place: the child's pid stays the one to signal).
    command_prefix = ()

    def twistd_arguments(self) -> list:
        """What follows ``twistd -n --pidfile=`` on the child's command line."""
        raise NotImplementedError

    def accepting(self) -> bool:
        """Whether the child accepts connections on ``ready_port`` (what ``wait_ready`` waits for)."""
        return port_open(self.host, self.ready_port)

    def spawn(self) -> None:
        """Start the child without waiting (see ``wait_ready``)."""
        if self.running():
            raise self.error(f"{self.name} is already running")
        env = repo_env()
        self._log_file = open(self.log_path, "ab")
        self.starts += 1
        self._log_file.write(f"===== start #{self.starts} =====\n".encode())
        self._log_file.flush()
        self.process = subprocess.Popen(
            list(self.command_prefix) + [sys.executable, "-c", _TWISTD, "-n", "--pidfile="]
            + self.twistd_arguments(),
            cwd=self.directory, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT)
        self.running_registry.add(self)

    def wait_ready(self):
        """Wait until ``ready_port`` accepts connections; ``error`` (with the log tail) if the
        child exits first or ``start_timeout`` passes (then it is killed)."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                self._reap()
                raise self.error(f"{self.name} exited with status {code} while starting\n"
                                 + self.log_tail())
            if self.accepting():
                return self
            time.sleep(0.05)
        self.kill9()
        raise self.error(f"{self.name} did not listen on {self.ready_port} within "
                         f"{self.start_timeout}s\n" + self.log_tail())

    def start(self):
        """Start the child and wait until it accepts connections."""
        self.spawn()
        return self.wait_ready()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the process freezes with its sockets open (a long GC pause, a hung VM)."""
        if self.running() and not self.paused:
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.paused:
            self.paused = False
            if self.running():
                os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> int:
        """Graceful shutdown (SIGTERM, as twistd expects); SIGKILL if it overstays. Exit status."""
        if self.process is None:
            return 0
        self.resume()                  # a stopped process would not act on the SIGTERM
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self._reap()
                raise self.error(f"{self.name} ignored SIGTERM for {self.stop_timeout}s\n"
                                 + self.log_tail())
        code = self.process.returncode
        self._reap()
        if self.wait_port_closed:
            self._wait_port_closed()
        return code

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or power loss of the process."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reap()
        if self.wait_port_closed:
            self._wait_port_closed()

    def restart(self, graceful: bool = True):
        """Stop (or kill -9) and start again on the same data, config and port."""
        if graceful:
            self.stop()
        else:
            self.kill9()
        return self.start()

    def _reap(self) -> None:
        self.paused = False
        self.running_registry.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.process = None

    def _wait_port_closed(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and port_open(self.host, self.ready_port):
            time.sleep(0.05)

    # ------------------------------------------------------------------ diagnostics
    def log_tail(self, lines: int = None) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        tail = text.splitlines()[-(lines or self.log_tail_lines):]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class StandaloneProcess(ChildProcess):
    """
    One standalone (broker + bookie + embedded metadata) in a child process.

    ``config`` overrides keys of conf/standalone.conf (Pulsar key names, values as text or
    anything whose ``str`` is the text); ``base_text``, when given, is a whole configuration file
    (a Pulsar user's own) written before those override lines. The data directories, ports and advertised address are
    set here so that instances never share anything; the caller may still override them.
    """

    name = "standalone"

    def __init__(self, config=None, start_timeout: float = 30.0, stop_timeout: float = 30.0,
                 base_dir: str = None, base_text: str = ""):
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.directory = tempfile.mkdtemp(prefix="pulsar-standalone-", dir=base_dir)
        self.data_directory = os.path.join(self.directory, "data")
        self.log_path = os.path.join(self.directory, "standalone.log")
        self.config_path = os.path.join(self.directory, "standalone.conf")
        self.port = free_port(self.host)
        settings = {
            "bindAddress": self.host,
            "advertisedAddress": self.host,
            "brokerServicePort": self.port,
            "webServicePort": free_port(self.host),
            "dataDirectory": self.data_directory,
            "journalDirectory": os.path.join(self.data_directory, "bookkeeper", "journal"),
            "ledgerDirectories": os.path.join(self.data_directory, "bookkeeper", "ledgers"),
        }
        settings.update(config or {})
        self.port = int(settings["brokerServicePort"])
        self.web_port = int(settings["webServicePort"])
        with open(self.config_path, "w") as f:
            # An operator's own file first (``base_text``), our settings after it: a later line wins.
            if base_text:
                f.write(base_text.rstrip("\n") + "\n")
            for key, value in settings.items():
                f.write(f"{key}={value}\n")
        self._init_child()

    @property
    def ready_port(self) -> int:
        return self.port

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.host}:{self.web_port}"

    def twistd_arguments(self) -> list:
        return ["pulsar-standalone", "--config", self.config_path]

    def cleanup(self) -> None:
        """Stop if running and remove the temporary directory."""
        try:
            if self.running():
                self.stop()
        finally:
            self._reap()
            shutil.rmtree(self.directory, ignore_errors=True)
