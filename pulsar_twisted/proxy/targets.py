"""
Which brokers a client may ask the proxy to connect to (``proxy_to_broker_url`` in CONNECT):
Pulsar's ``brokerProxyAllowedTargetPorts``, ``brokerProxyAllowedHostNames`` and
``brokerProxyAllowedIPAddresses``. Without these checks the proxy would be an open TCP relay into
the brokers' network.

Ports: comma separated ports and ranges (``6650,6651,7000-7010``) or ``*``. Host names: comma
separated patterns where ``*`` matches any run of characters (``*.brokers.example.com``).
IP addresses: comma separated addresses and CIDR blocks (``10.0.0.0/8``) or ``*``; a target
given by name is resolved (through the injected ``resolve``) and its address checked.
"""

import fnmatch
import ipaddress

from twisted.internet import defer


class TargetNotAllowed(Exception):
    """The target broker is outside the allowed ports, host names or addresses (message says which)."""


def parse_ports(spec: str):
    """``"6650,6651,7000-7010"`` -> list of (low, high) ranges; ``"*"`` -> None (any port)."""
    ranges = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "*":
            return None
        low, sep, high = part.partition("-")
        ranges.append((int(low), int(high) if sep else int(low)))
    return ranges


def parse_networks(spec: str):
    """Addresses and CIDR blocks; None for ``*`` (any address)."""
    networks = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "*":
            return None
        networks.append(ipaddress.ip_network(part, strict=False))
    return networks


def split_target(target: str):
    """``host:port`` (or ``pulsar://host:port``) -> (host, port); ValueError when malformed."""
    if "://" in target:
        target = target.split("://", 1)[1]
    target = target.rstrip("/")
    host, sep, port = target.rpartition(":")
    if not sep or not host:
        raise ValueError(f"target {target!r} is not host:port")
    return host.strip("[]"), int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


class AllowedTargets:
    """
    The three rules from the configuration. ``check(target)`` fires with ``(host, port)`` when
    the target is allowed, or fails with ``TargetNotAllowed``. ``resolve(host)`` -> Deferred of
    an IP address string (the reactor's resolver in production).
    """

    def __init__(self, ports: str, host_names: str, ip_addresses: str, resolve=None):
        self.ports = parse_ports(ports)
        self.host_patterns = [p.strip().lower() for p in host_names.split(",") if p.strip()]
        self.networks = parse_networks(ip_addresses)
        self.resolve = resolve

    @classmethod
    def from_config(cls, config, resolve=None) -> "AllowedTargets":
        return cls(config.brokerProxyAllowedTargetPorts, config.brokerProxyAllowedHostNames,
                   config.brokerProxyAllowedIPAddresses, resolve)

    def port_allowed(self, port: int) -> bool:
        return self.ports is None or any(low <= port <= high for low, high in self.ports)

    def host_allowed(self, host: str) -> bool:
        host = host.lower()
        return any(p == "*" or fnmatch.fnmatchcase(host, p) for p in self.host_patterns)

    def address_allowed(self, address: str) -> bool:
        if self.networks is None:
            return True
        ip = ipaddress.ip_address(address)
        return any(ip in network for network in self.networks)

    async def _check(self, target: str):
        try:
            host, port = split_target(target)
        except ValueError as e:
            raise TargetNotAllowed(str(e))
        if not self.port_allowed(port):
            raise TargetNotAllowed(f"port {port} of {target} is not in brokerProxyAllowedTargetPorts")
        if not _is_ip(host) and not self.host_allowed(host):
            raise TargetNotAllowed(f"host {host} is not in brokerProxyAllowedHostNames")
        if self.networks is not None:
            address = host if _is_ip(host) else await self.resolve(host)
            if not self.address_allowed(address):
                raise TargetNotAllowed(f"address {address} of {target} is not in "
                                       "brokerProxyAllowedIPAddresses")
        return host, port

    def check(self, target: str) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._check(target))
