"""
Advertised listeners: the names under which a broker offers different URLs to different clients
(Pulsar's ``advertisedListeners``, ``internalListenerName`` and ``bindAddresses``).

``advertisedListeners=internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650,
external:pulsar+ssl://broker.example.com:6651`` names each listener's URLs. The rules are Pulsar's
(``MultipleListenerValidator``): every entry is ``name:scheme://host:port``; a listener has at
most two entries and at most one of each scheme (``pulsar``, ``pulsar+ssl``, ``http``, ``https``);
one ``host:port`` belongs to one listener; ``internalListenerName`` must be one of the listeners
and defaults to the first. The internal listener's URLs are the broker's own ``brokerServiceUrl``
and ``brokerServiceUrlTls`` (what a lookup without a listener name answers); without
``advertisedListeners`` those come from ``advertisedAddress`` and the ports, as before.

A lookup naming a listener (``CommandLookupTopic.advertised_listener_name``, the HTTP lookup's
``listenerName`` parameter or ``X-Pulsar-ListenerName`` header) answers the serving broker's URLs
for that listener; a broker without it fails the lookup with ServiceNotReady "the broker do not
have <name> listener" (Pulsar's message, word for word: the official C++ client matches on it).

``bindAddresses=external:pulsar://0.0.0.0:6660,...`` opens more ports (Pulsar's extra bindings),
each tied to a listener: a connection accepted there looks topics up under that listener when its
client names none (Pulsar's connection-specific listener name). ``brokerServicePort`` and
``brokerServicePortTls`` stay bound as before, with no listener of their own.
"""

from dataclasses import dataclass
from typing import Dict, List
from urllib.parse import urlsplit

from pulsar_twisted.common import errors
from pulsar_twisted.config import ConfigError

#: The schemes an advertised listener may name, by the AdvertisedListener field they fill.
_SCHEMES = {"pulsar": "broker_url", "pulsar+ssl": "broker_url_tls", "http": "http_url",
            "https": "https_url"}


@dataclass(frozen=True)
class AdvertisedListener:
    """One listener's URLs (empty when not advertised)."""

    name: str
    broker_url: str = ""
    broker_url_tls: str = ""
    http_url: str = ""
    https_url: str = ""

    def to_json(self) -> dict:
        """Pulsar's ``AdvertisedListener`` JSON (registration and ownership nodes)."""
        data = {"brokerServiceUrl": self.broker_url, "brokerServiceUrlTls": self.broker_url_tls,
                "brokerHttpUrl": self.http_url, "brokerHttpsUrl": self.https_url}
        return {k: v for k, v in data.items() if v}

    @classmethod
    def from_json(cls, name: str, data) -> "AdvertisedListener":
        data = data if isinstance(data, dict) else {}
        return cls(name, str(data.get("brokerServiceUrl") or ""), str(data.get("brokerServiceUrlTls") or ""),
                   str(data.get("brokerHttpUrl") or ""), str(data.get("brokerHttpsUrl") or ""))


def _split_entry(entry: str, key: str):
    name, sep, url = entry.partition(":")
    name, url = name.strip(), url.strip()
    if not sep or not name:
        raise ConfigError(f"{key}: the entry {entry.strip()!r} has no listener name "
                          "(expected name:scheme://host:port)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{key}: the value {url!r} of listener {name!r} is invalid ({e})")
    if not parts.scheme or not parts.hostname or port is None:
        raise ConfigError(f"{key}: the value {url!r} of listener {name!r} is invalid "
                          "(expected scheme://host:port)")
    return name, parts.scheme.lower(), parts.hostname, port, url


def parse_advertised_listeners(text: str, internal_name: str = ""):
    """
    ``(listeners, internal_name)``: ``{name: AdvertisedListener}`` in configuration order and the
    internal listener's name (``internal_name`` or the first). ``ConfigError`` for what Pulsar's
    validator refuses. Empty ``text``: ``({}, internal_name)``.
    """
    key = "advertisedListeners"
    entries = [e for e in (text or "").split(",") if e.strip()]
    if not entries:
        return {}, internal_name
    grouped: Dict[str, list] = {}
    owners: Dict[str, str] = {}
    for entry in entries:
        name, scheme, host, port, url = _split_entry(entry, key)
        grouped.setdefault(name, []).append((scheme, url))
        host_port = f"{host}:{port}"
        if owners.setdefault(host_port, name) != name:
            raise ConfigError(f"{key}: must not specify {host_port} to different listeners "
                              f"({owners[host_port]} and {name})")
    internal_name = internal_name or next(iter(grouped))
    if internal_name not in grouped:
        raise ConfigError(f"internalListenerName: {internal_name!r} is not one of the "
                          f"advertisedListeners ({', '.join(grouped)})")
    listeners = {}
    for name, urls in grouped.items():
        fields = {}
        if len(urls) > 2:
            raise ConfigError(f"{key}: there are redundant entries for listener {name!r} (at most two)")
        for scheme, url in urls:
            field = _SCHEMES.get(scheme)
            if field is None:
                raise ConfigError(f"{key}: the value {url!r} of listener {name!r} has scheme "
                                  f"{scheme!r} (expected {', '.join(_SCHEMES)})")
            if field in fields:
                raise ConfigError(f"{key}: there are redundant {scheme}:// entries for listener {name!r}")
            fields[field] = url
        listeners[name] = AdvertisedListener(name, **fields)
    return listeners, internal_name


def advertised_listeners(config) -> Dict[str, AdvertisedListener]:
    """The validated listeners of a broker configuration (``{}`` without advertisedListeners)."""
    return parse_advertised_listeners(config.advertisedListeners, config.internalListenerName)[0]


def internal_listener(config):
    """The internal ``AdvertisedListener`` of ``config``, or None without advertisedListeners."""
    listeners, internal = parse_advertised_listeners(config.advertisedListeners, config.internalListenerName)
    return listeners.get(internal)


def listeners_json(listeners: Dict[str, AdvertisedListener]) -> dict:
    """``{name: AdvertisedListener JSON}``: the ``advertisedListeners`` field of Pulsar's
    LocalBrokerData and NamespaceEphemeralData."""
    return {name: listener.to_json() for name, listener in listeners.items()}


def listeners_from_json(data) -> Dict[str, AdvertisedListener]:
    """The inverse of ``listeners_json`` (anything unreadable: no listeners)."""
    if not isinstance(data, dict):
        return {}
    return {str(name): AdvertisedListener.from_json(str(name), value) for name, value in data.items()}


def select_listener(listeners: Dict[str, AdvertisedListener], name: str) -> AdvertisedListener:
    """The listener ``name`` of a broker; ServiceNotReady with Pulsar's message when it has none."""
    listener = listeners.get(name)
    if listener is None:
        raise errors.ServiceNotReady(f"the broker do not have {name} listener")
    return listener


@dataclass(frozen=True)
class BindAddress:
    """One extra binding: ``listener`` offered on ``scheme://host:port``."""

    listener: str
    scheme: str
    host: str
    port: int


def bind_addresses(config) -> List[BindAddress]:
    """The ``bindAddresses`` of ``config`` (ConfigError for a malformed entry)."""
    result = []
    for entry in (config.bindAddresses or "").split(","):
        if entry.strip():
            name, scheme, host, port, url = _split_entry(entry, "bindAddresses")
            if scheme not in _SCHEMES:
                raise ConfigError(f"bindAddresses: {url!r} has scheme {scheme!r} "
                                  f"(expected {', '.join(_SCHEMES)})")
            result.append(BindAddress(name, scheme, host, port))
    return result


def check_listener_config(config) -> None:
    """Refuse, before start-up, what Pulsar refuses in advertisedListeners/bindAddresses."""
    advertised_listeners(config)
    bind_addresses(config)
