"""
TCP <-> Unix-socket relays joining a daemon in its own network namespace to the host, without an IP
address anywhere but the namespaces' own loopback (see ``netns``).

A daemon in namespace N listens on N's 127.0.0.1 and connects to 127.0.0.1 ports there, exactly as
on the host. Two relays carry the bytes over Unix sockets in a shared directory (Unix sockets are
files, so both namespaces reach them):

- inbound port P (the daemon's own listener): the host side listens on the host's 127.0.0.1:P and
  relays each connection to ``in-P.sock``; the side in N accepts there and connects to N's
  127.0.0.1:P.
- outbound port P (ZooKeeper, the bookies, ...): the side in N listens on N's 127.0.0.1:P and relays
  to ``out-P.sock``; the host side accepts there and connects to the host's 127.0.0.1:P.

Only the host side has a ``Gate``: closed, it forwards nothing in either direction and holds new
connections, so TCP connections stay up while no byte passes, as in a network partition. Opening it
lets everything flow again.

Run as ``python -m pulsar_twisted.testing.chaos.relay DIR --inbound P,... --outbound P,...``: the
side inside the namespace (blocking threads, until killed).
"""

import argparse
import os
import socket
import sys
import threading

HOST = "127.0.0.1"


class Gate:
    """Open (bytes flow) or closed (``wait`` blocks until it opens again or ``stopped``)."""

    def __init__(self):
        self._open = threading.Event()
        self._open.set()
        self.stopped = False

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def is_open(self) -> bool:
        return self._open.is_set()

    def wait(self) -> bool:
        """Block while closed; False once the relay is stopping."""
        while not self._open.wait(0.5):
            if self.stopped:
                return False
        return not self.stopped


OPEN = Gate()


def _close(sock) -> None:
    # shutdown first: close alone neither wakes the other pump blocked in recv on this socket nor
    # ends the connection while that recv holds the file.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _pump(source, target, gate: Gate) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data or not gate.wait():
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def join(a, b, gate: Gate = OPEN) -> None:
    """Relay bytes both ways between sockets ``a`` and ``b`` until either end closes."""
    for source, target in ((a, b), (b, a)):
        threading.Thread(target=_pump, args=(source, target, gate), daemon=True).start()


def tcp_listener(port: int):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(64)
    return sock


def unix_listener(path: str):
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(64)
    return sock


def connect_tcp(port: int):
    return socket.create_connection((HOST, port), timeout=5)


def connect_unix(path: str):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    return sock


def serve(listener, connect, gate: Gate = OPEN) -> threading.Thread:
    """Accept on ``listener`` forever, relaying each connection to ``connect()`` (a new socket)
    once ``gate`` lets it through; a failed ``connect`` drops the accepted connection."""
    def accept_loop():
        while not gate.stopped:
            try:
                accepted, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_relay_one, args=(accepted,), daemon=True).start()

    def _relay_one(accepted):
        if not gate.wait():
            _close(accepted)
            return
        try:
            other = connect()
        except OSError:
            _close(accepted)
            return
        other.settimeout(None)
        accepted.settimeout(None)
        join(accepted, other, gate)

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    return thread


def inbound_path(directory: str, port: int) -> str:
    return os.path.join(directory, f"in-{port}.sock")


def outbound_path(directory: str, port: int) -> str:
    return os.path.join(directory, f"out-{port}.sock")


def _ports(text: str) -> list:
    return [int(p) for p in text.split(",") if p]


def main(argv=None) -> None:
    """The side inside the namespace (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--inbound", type=_ports, default=[])
    parser.add_argument("--outbound", type=_ports, default=[])
    args = parser.parse_args(argv)
    threads = []
    for port in args.inbound:
        listener = unix_listener(inbound_path(args.directory, port))
        threads.append(serve(listener, lambda port=port: connect_tcp(port)))
    for port in args.outbound:
        path = outbound_path(args.directory, port)
        threads.append(serve(tcp_listener(port), lambda path=path: connect_unix(path)))
    # Tell the host side every listener is up.
    with open(os.path.join(args.directory, "ready"), "w") as f:
        f.write(str(os.getpid()))
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    sys.exit(main())
