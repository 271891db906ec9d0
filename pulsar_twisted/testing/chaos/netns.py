"""
Network partitions for cluster daemons: a daemon runs in a network namespace of its own, joined to
the host only through the relays of ``relay`` (no IP address is assigned anywhere: each namespace
keeps its own 127.0.0.1, and the bytes cross over Unix sockets). ``cut()`` stops every byte in both
directions while the daemon keeps running and its TCP connections stay open; ``heal()`` lets them
flow again. Needs root and ``ip netns``; ``available()`` says whether this machine allows it.

``Isolation(process, outbound_ports)`` must be ``setup()`` before the process is first spawned (it
sets the process's command prefix and readiness check) and ``cleanup()``-ed after it is killed:
the namespace, the relay process and the socket directory go.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from pulsar_twisted.testing.chaos import relay
from pulsar_twisted.testing.process import repo_env

#: The relay inside the namespace, asking for SIGKILL when the harness dies (as the daemons do).
_RELAY = ("import sys, ctypes\n"
          "try:\n"
          "    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
          "except Exception:\n"
          "    pass\n"
          "from pulsar_twisted.testing.chaos.relay import main\n"
          "main(sys.argv[1:])\n")


def available() -> str:
    """'' if network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network partitions need root (ip netns)"
    name = f"chaos-probe-{uuid.uuid4().hex[:6]}"
    result = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if result.returncode != 0:
        return f"ip netns add failed: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def inbound_ports(process) -> list:
    """The ports a cluster daemon listens on."""
    return [p for p in (getattr(process, "port", None), getattr(process, "web_port", None)) if p]


class Isolation:
    """One daemon in its own namespace (see the module docstring)."""

    def __init__(self, process, outbound_ports):
        self.process = process
        self.name = f"chaos-{uuid.uuid4().hex[:8]}-{process.name}"
        # Short: a Unix socket path has a 108-byte limit.
        self.directory = tempfile.mkdtemp(prefix="chaos-ns-", dir="/tmp")
        self.inbound = inbound_ports(process)
        self.outbound = [p for p in outbound_ports if p not in self.inbound]
        self.gate = relay.Gate()
        self._listeners = []
        self._relay = None
        self._made = False

    def setup(self) -> None:
        self._run("ip", "netns", "add", self.name)
        self._made = True
        self._run("ip", "-n", self.name, "link", "set", "lo", "up")
        for port in self.inbound:
            listener = relay.tcp_listener(port)
            path = relay.inbound_path(self.directory, port)
            relay.serve(listener, lambda path=path: relay.connect_unix(path), self.gate)
            self._listeners.append(listener)
        for port in self.outbound:
            listener = relay.unix_listener(relay.outbound_path(self.directory, port))
            relay.serve(listener, lambda port=port: relay.connect_tcp(port), self.gate)
            self._listeners.append(listener)
        env = repo_env()
        self._relay = subprocess.Popen(
            ["ip", "netns", "exec", self.name, sys.executable, "-c", _RELAY, self.directory,
             "--inbound", ",".join(map(str, self.inbound)),
             "--outbound", ",".join(map(str, self.outbound))],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.directory, "relay.log"), "wb"))
        deadline = time.monotonic() + 15
        while not os.path.exists(os.path.join(self.directory, "ready")):
            if self._relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the relay in {self.name} did not start: "
                                   + open(os.path.join(self.directory, "relay.log")).read()[-500:])
            time.sleep(0.05)
        self.process.command_prefix = ("ip", "netns", "exec", self.name)
        self.process.accepting = self.accepting
        self.process.isolation = self

    def accepting(self) -> bool:
        """Whether the daemon accepts on its ready port inside the namespace: a probe through the
        relay, bypassing the gate, stays open (the relay reached the daemon) or is closed at once."""
        try:
            probe = relay.connect_unix(relay.inbound_path(self.directory, self.process.ready_port))
        except OSError:
            return False
        try:
            probe.settimeout(0.3)
            return probe.recv(1) != b""
        except socket.timeout:
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def cut(self) -> None:
        self.gate.close()

    def heal(self) -> None:
        self.gate.open()

    def is_cut(self) -> bool:
        return not self.gate.is_open()

    def cleanup(self) -> None:
        self.gate.stopped = True
        self.gate.open()
        for listener in self._listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)     # wakes the thread blocked in accept
            except OSError:
                pass
            try:
                listener.close()
            except OSError:
                pass
        if self._relay is not None and self._relay.poll() is None:
            self._relay.kill()
            self._relay.wait()
        if self._made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self._made = False
        shutil.rmtree(self.directory, ignore_errors=True)

    @staticmethod
    def _run(*command) -> None:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
