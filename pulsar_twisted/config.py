"""
Daemon configuration: one class per daemon, each key with its type, default and documentation.

Files are Pulsar's ``key=value`` format (``#`` comments, blank lines ignored). Key names are
Pulsar's and BookKeeper's where the concept matches, so an operator's habits carry over, and a
Pulsar user's own ``standalone.conf``/``broker.conf``/``bookkeeper.conf`` starts unchanged:

- a key of ours is parsed and honoured; a value that does not parse stops start-up;
- a real Pulsar or BookKeeper key that we do not implement (listed in ``data/pulsar_keys.txt``,
  ``data/pulsar_proxy_keys.txt`` and ``data/bookkeeper_keys.txt``, taken from their shipped
  configuration files) is accepted and named once in a start-up warning, or refused too when
  ``strictConfig=true``;
- any other key is a typo: it stops start-up with a ``ConfigError`` naming the key, the line and
  the closest known key. Silently ignoring a setting someone believes is in force is worse than
  refusing it.

An empty value (``key=``, as Pulsar's files write most keys) means the key's default, as in Pulsar.

The files under ``conf/`` are generated from these classes by ``scripts/gen_conf.py`` and a test
keeps them equal, so defaults, documentation and files cannot drift apart.
"""

import difflib
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional


class ConfigError(Exception):
    """A configuration file or value that cannot be used; the message names the key."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _parse_list(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_PARSERS: Dict[type, Callable[[str], Any]] = {
    bool: _parse_bool,
    int: int,
    float: float,
    str: str.strip,
    list: _parse_list,
}


@dataclass(frozen=True)
class Key:
    """One configuration key: Pulsar's name, its type, default and a line of documentation."""

    name: str
    type: type
    default: Any
    doc: str
    section: str = ""
    #: Optional check of a parsed value: returns it (possibly normalised) or raises ValueError.
    check: Optional[Callable[[Any], Any]] = None

    def parse(self, text: str) -> Any:
        value = _PARSERS[self.type](text)
        return self.check(value) if self.check is not None else value

    def render(self, value: Any) -> str:
        if self.type is bool:
            return "true" if value else "false"
        if self.type is list:
            return ",".join(value)
        if value is None:
            return ""
        return str(value)


_DATA_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

#: Prefixes under which Pulsar passes settings through to its BookKeeper client
#: (``bookkeeper_opportunisticStriping``) and its internal Pulsar client (``brokerClient_...``),
#: and the proxy's per-rule reverse-proxy keys (``httpReverseProxy.<name>.path`` / ``.proxyTo``).
PASS_THROUGH_PREFIXES = ("bookkeeper_", "brokerClient_", "httpReverseProxy.")


def _read_key_list(name: str) -> FrozenSet[str]:
    with open(os.path.join(_DATA_DIRECTORY, name), encoding="utf-8") as f:
        return frozenset(line.strip() for line in f if line.strip() and not line.startswith("#"))


@functools.lru_cache(maxsize=None)
def foreign_keys() -> FrozenSet[str]:
    """Every key of Pulsar's broker/standalone/proxy files and of BookKeeper's bookie file
    (shipped data)."""
    return (_read_key_list("pulsar_keys.txt") | _read_key_list("pulsar_proxy_keys.txt")
            | _read_key_list("bookkeeper_keys.txt"))


def is_foreign_key(name: str) -> bool:
    """Whether ``name`` is a real Pulsar or BookKeeper key (or under one of Pulsar's pass-through
    prefixes), as opposed to a typo."""
    if name in foreign_keys():
        return True
    return any(name.startswith(prefix) and len(name) > len(prefix) for prefix in PASS_THROUGH_PREFIXES)


#: The key that turns accepted-but-unimplemented keys into start-up errors (every daemon has it).
_STRICT_KEYS = [
    Key("strictConfig", bool, False,
        "Refuse, as well as typos, the real Pulsar/BookKeeper keys this implementation does not\n"
        "honour (by default they are accepted and listed once in a start-up warning).",
        "Configuration"),
]


class Config:
    """
    Base of the daemon configurations. Subclasses list their ``KEYS``; values are attributes named
    as the keys (``config.brokerServicePort``).
    """

    KEYS: Iterable[Key] = ()
    #: Keys whose defaults differ per deployment (standalone vs cluster), overriding ``KEYS``.
    DEFAULTS: Dict[str, Any] = {}
    #: Pulsar's name of a key that we keep under another name: Pulsar's name -> ours.
    ALIASES: Dict[str, str] = {}
    #: Keys that deprecated keys stand in for when left empty, as Pulsar and BookKeeper derive
    #: them: key -> function of the configuration giving its value ("" when nothing to derive).
    FALLBACKS: Dict[str, Callable[["Config"], Any]] = {}

    def __init__(self, **overrides: Any):
        self._keys = {key.name: key for key in self.KEYS}
        #: Real Pulsar/BookKeeper keys read but not implemented: name -> where first seen.
        self.unimplemented: Dict[str, str] = {}
        #: Keys filled from deprecated keys by ``apply_fallbacks``: name -> derived value.
        self.derived: Dict[str, Any] = {}
        self._warned = False
        for key in self.KEYS:
            setattr(self, key.name, self.DEFAULTS.get(key.name, key.default))
        for name, value in overrides.items():
            if name not in self._keys:
                raise ConfigError(f"unknown configuration key {name!r}")
            setattr(self, name, value)

    @classmethod
    def keys(cls) -> List[Key]:
        return list(cls.KEYS)

    def default_of(self, key: Key) -> Any:
        return self.DEFAULTS.get(key.name, key.default)

    @classmethod
    def from_file(cls, path: str, **overrides: Any) -> "Config":
        """Read ``path``; ``ConfigError`` names the file, line and key of the first problem."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from e
        config = cls(**overrides)
        config.update_from_text(text, source=path)
        return config

    def update_from_text(self, text: str, source: str = "<config>") -> None:
        """Apply ``key=value`` lines; then, with ``strictConfig=true`` (anywhere in the text),
        refuse the unimplemented Pulsar/BookKeeper keys that were read."""
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ConfigError(f"{source}:{number}: malformed line (expected key=value): {line!r}")
            name, _, value = line.partition("=")
            name = name.strip()
            self.set(name, value, where=f"{source}:{number}")
        self.apply_fallbacks()
        self.check_strict()

    def apply_fallbacks(self) -> None:
        """Fill each empty key of ``FALLBACKS`` from the deprecated keys it falls back to (a file
        that sets the new key wins, wherever the keys stand in it); ``derived`` records which."""
        for name, derive in self.FALLBACKS.items():
            if getattr(self, name) and name not in self.derived:
                continue
            value = derive(self)
            if value:
                setattr(self, name, value)
                self.derived[name] = value

    def check_strict(self) -> None:
        """``ConfigError`` listing the unimplemented keys read, when ``strictConfig`` is set."""
        if getattr(self, "strictConfig", False) and self.unimplemented:
            listed = ", ".join(f"{name} ({where})" if where else name
                               for name, where in self.unimplemented.items())
            raise ConfigError(f"strictConfig=true: these Pulsar/BookKeeper keys are not implemented "
                              f"here: {listed}")

    def unimplemented_keys(self) -> List[str]:
        """The real Pulsar/BookKeeper keys read but not honoured, in the order first read."""
        return list(self.unimplemented)

    def warn_unimplemented(self, log) -> None:
        """Log, once per configuration, one warning naming every unimplemented key read."""
        if self._warned or not self.unimplemented:
            return
        self._warned = True
        log.warn("configuration: {count} Pulsar/BookKeeper keys are accepted but not implemented "
                 "(ignored; strictConfig=true refuses them): {keys}",
                 count=len(self.unimplemented), keys=", ".join(self.unimplemented))

    def closest_key(self, name: str) -> Optional[str]:
        """The known key (ours first, then Pulsar's and BookKeeper's) ``name`` most resembles."""
        for candidates in (list(self._keys) + list(self.ALIASES), sorted(foreign_keys())):
            match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
            if match:
                return match[0]
        match = difflib.get_close_matches(name, list(self._keys) + sorted(foreign_keys()), n=1,
                                          cutoff=0.5)
        return match[0] if match else None

    def _unknown(self, name: str, where: str) -> None:
        prefix = f"{where}: " if where else ""
        if is_foreign_key(name):
            self.unimplemented.setdefault(name, where)
            return
        closest = self.closest_key(name)
        hint = f" (did you mean {closest!r}?)" if closest else ""
        raise ConfigError(f"{prefix}unknown configuration key {name!r}: not a Pulsar or "
                          f"BookKeeper key{hint}")

    def set(self, name: str, text: str, where: str = "") -> None:
        """Set key ``name`` from its textual value (an unimplemented Pulsar key is only noted)."""
        prefix = f"{where}: " if where else ""
        key = self._keys.get(self.ALIASES.get(name, name))
        if key is None:
            self._unknown(name, where)
            return
        name = key.name
        text = text.strip()
        if text == "":
            # Pulsar's files leave most keys empty to mean "the default".
            value = self.default_of(key)
        else:
            try:
                value = key.parse(text)
            except ValueError as e:
                raise ConfigError(f"{prefix}bad value for {name}: {e}") from e
        setattr(self, name, value)
        self.derived.pop(name, None)

    def render(self, header: str = "") -> str:
        """The configuration file text for this class's defaults, documented."""
        out: List[str] = []
        if header:
            out.extend(f"# {line}".rstrip() for line in header.splitlines())
            out.append("")
        section = None
        for key in self.KEYS:
            if key.section != section:
                section = key.section
                out.append(f"### --- {section} --- ###")
                out.append("")
            for line in key.doc.splitlines():
                out.append(f"# {line}".rstrip())
            out.append(f"{key.name}={key.render(self.default_of(key))}")
            out.append("")
        return "\n".join(out)


#: Security keys of the broker (TLS listeners, authentication providers, authorization, limits),
#: Pulsar's names; read by ``pulsar_twisted.security``.
_SECURITY_KEYS = [
    Key("brokerServicePortTls", int, 0,
        "Port of the Pulsar binary protocol over TLS (0: no TLS listener). Needs\n"
        "tlsCertificateFilePath and tlsKeyFilePath.", "TLS"),
    Key("webServicePortTls", int, 0,
        "Port of the HTTPS service (admin REST API, lookup, metrics; 0: no HTTPS listener).", "TLS"),
    Key("tlsCertificateFilePath", str, "", "PEM certificate of the broker's TLS listeners.", "TLS"),
    Key("tlsKeyFilePath", str, "", "PEM private key of tlsCertificateFilePath.", "TLS"),
    Key("tlsTrustCertsFilePath", str, "",
        "PEM CA certificate(s) that sign client certificates (mutual TLS, AuthenticationProviderTls).",
        "TLS"),
    Key("tlsRequireTrustedClientCertOnConnect", bool, False,
        "Refuse TLS clients that present no certificate signed by tlsTrustCertsFilePath.", "TLS"),
    Key("tlsAllowInsecureConnection", bool, False,
        "Accept client certificates that are not signed by tlsTrustCertsFilePath.", "TLS"),
    Key("tlsProtocols", list, [],
        "TLS versions accepted (comma separated: TLSv1.2,TLSv1.3); empty: OpenSSL's defaults.", "TLS"),
    Key("tlsCiphers", list, [],
        "Cipher suites accepted, OpenSSL names (comma separated); empty: Twisted's defaults.", "TLS"),
    Key("authenticationProviders", list, [],
        "Authentication providers, Pulsar's class names (comma separated):\n"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,\n"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic,\n"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderTls\n"
        "(or their short names token, basic, tls).", "Authentication"),
    Key("anonymousUserRole", str, "",
        "Role given to clients that send no credentials (empty: such clients are refused).",
        "Authentication"),
    Key("authenticationRefreshCheckSeconds", int, 60,
        "Seconds between checks of connections whose credentials expire: an expired one gets an\n"
        "AUTH_CHALLENGE and is closed if the next check finds no valid answer.", "Authentication"),
    Key("tokenSecretKey", str, "",
        "HMAC key of the token provider (HS256): data:;base64,<key> or file:///path.", "Authentication"),
    Key("tokenPublicKey", str, "",
        "Public key of the token provider (RS256/ES256...): data:;base64,<DER or PEM> or file:///path.",
        "Authentication"),
    Key("tokenPublicAlg", str, "RS256",
        "Signature algorithm of tokens checked with tokenPublicKey (RS256, RS384, RS512, ES256,\n"
        "ES384, ES512).", "Authentication"),
    Key("tokenAuthClaim", str, "sub", "Claim of the token that holds the role.", "Authentication"),
    Key("tokenAudienceClaim", str, "aud", "Claim of the token that holds its audience.",
        "Authentication"),
    Key("tokenAudience", str, "",
        "When set, tokens must name this audience in tokenAudienceClaim.", "Authentication"),
    Key("basicAuthConf", str, "",
        "Users of the basic provider: path of an htpasswd-style file (user:hash lines; bcrypt\n"
        "$2y$/$2b$, $apr1$, {SHA} or crypt hashes), or that file's content in base64.",
        "Authentication"),
    Key("brokerClientAuthenticationPlugin", str, "",
        "Authentication the broker uses as a client of other brokers (replication; kept for\n"
        "compatibility of configuration files).", "Authentication"),
    Key("brokerClientAuthenticationParameters", str, "",
        "Parameters of brokerClientAuthenticationPlugin.", "Authentication"),
    Key("superUserRoles", list, [],
        "Roles allowed every operation, on every tenant (comma separated).", "Authorization"),
    Key("proxyRoles", list, [],
        "Roles of the proxies (comma separated). Only they may send original_principal in CONNECT\n"
        "(on behalf of the client they proxy); both the proxy role and the original principal are\n"
        "then authorized. A proxy role connecting without original_principal is refused.",
        "Authorization"),
    Key("authenticateOriginalAuthData", bool, False,
        "Authenticate the client credentials a proxy forwards (original_auth_data, sent by a proxy\n"
        "with forwardAuthorizationCredentials=true) and keep them fresh: the broker then challenges\n"
        "the client through the proxy when they expire.", "Authorization"),
    Key("authenticateMetricsEndpoint", bool, False,
        "Whether /metrics requires authentication (authenticationEnabled too); then only super\n"
        "users and metricsRoles may read it. False (Pulsar's default): /metrics is public.",
        "Authorization"),
    Key("metricsRoles", list, [],
        "Roles besides the super users that may read /metrics when authenticateMetricsEndpoint\n"
        "is on (comma separated).", "Authorization"),
    Key("httpMaxRequestSize", int, -1,
        "Largest HTTP request body accepted, in bytes; larger ones are refused (413) from their\n"
        "headers, before they are read. -1: maxMessageSize + 1 MiB.", "Authorization"),
    Key("brokerMaxConnections", int, 0,
        "Client connections accepted by the broker; more are closed at once (0: no limit).", "Limits"),
    Key("brokerMaxConnectionsPerIp", int, 0,
        "Client connections accepted from one IP address (0: no limit).", "Limits"),
]


#: The bookie's journal and storage keys (BookKeeper's names), read by
#: ``BookieStorage.from_config``: one list for ``pulsar-bookie`` and the in-process bookie of
#: ``pulsar-standalone``, so the two cannot drift apart.
_STORAGE_KEYS = [
    Key("journalDirectory", str, "data/bookkeeper/journal", "Bookie journal directory.", "Bookie storage"),
    Key("ledgerDirectories", list, ["data/bookkeeper/ledgers"],
        "Bookie entry log and index directories (comma separated).", "Bookie storage"),
    Key("journalSyncData", bool, True,
        "fsync the journal before acknowledging an add. Turning it off trades durability on power\n"
        "loss or kill -9 for latency.", "Bookie storage"),
    Key("journalMaxGroupWaitMSec", float, 1.0,
        "Longest wait, in ms, to gather adds into one journal group commit (one fsync); not used\n"
        "when journalFlushWhenQueueEmpty is on.", "Bookie storage"),
    # BookKeeper defaults this to false; we default to true, since it is what gives a durable add
    # a sub-millisecond latency at low and moderate rates and it still groups under load (the adds
    # arriving during one fsync are the next group), so the batched and full-rate figures hold.
    Key("journalFlushWhenQueueEmpty", bool, True,
        "Write and fsync the journal as soon as the writer finds no more adds queued, instead of\n"
        "waiting journalMaxGroupWaitMSec for a group to fill; adds arriving during one fsync form\n"
        "the next group, so grouping adapts to the load (BookKeeper's default is false).",
        "Bookie storage"),
    # Ours, not BookKeeper's (bookie/journal.py, module docstring).
    Key("journalInlineSyncMaxMillis", float, 1.0,
        "With journalFlushWhenQueueEmpty: the reactor thread writes and fsyncs the journal itself,\n"
        "once per event-loop turn, while fsyncs average at most this many ms (no thread hand-off per\n"
        "add); slower fsyncs move the writes back to the journal thread. 0 turns it off.",
        "Bookie storage"),
    Key("journalBufferedWritesThreshold", int, 512 * 1024,
        "Commit a journal group at once when this many bytes are waiting.", "Bookie storage"),
    Key("journalBufferedEntriesThreshold", int, 0,
        "Commit a journal group at once when this many entries are waiting (0: no limit).",
        "Bookie storage"),
    Key("journalMaxSizeMB", int, 2048, "Journal file size before it rolls over.", "Bookie storage"),
    Key("journalPreAllocSizeMB", int, 16,
        "Space allocated (fallocate) and made durable ahead of the journal's end by a\n"
        "background thread, so that a small group's fsync has less to flush (0: append without it).",
        "Bookie storage"),
    Key("flushInterval", int, 1000, "Milliseconds between checkpoints of the write cache to entry logs.",
        "Bookie storage"),
    Key("dbStorage_writeCacheMaxSizeMb", int, 16,
        "Bookie write cache (entries journaled, not yet in entry logs); a checkpoint starts when it\n"
        "is full. Up to twice this is held while a checkpoint writes.", "Bookie storage"),
    Key("logSizeLimit", int, 1024 * 1024 * 1024, "Entry log file size before it rolls over.",
        "Bookie storage"),
    Key("gcWaitTime", int, 900000,
        "Milliseconds between garbage collections of entry logs (0: never).", "Bookie storage"),
]


#: Pulsar's offload driver names (OffloadPoliciesImpl.DRIVER_NAMES, matched case-insensitively)
#: and the ones this implementation has a store for.
OFFLOAD_DRIVER_NAMES = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss")
SUPPORTED_OFFLOAD_DRIVERS = ("S3", "aws-s3", "filesystem")
#: Pulsar's OffloadedReadPriority values (matched exactly, as Pulsar's fromString does).
READ_PRIORITIES = ("bookkeeper-first", "tiered-storage-first")


def _check_offload_driver(value: str) -> str:
    if value and value.lower() not in (d.lower() for d in SUPPORTED_OFFLOAD_DRIVERS):
        if value.lower() in (d.lower() for d in OFFLOAD_DRIVER_NAMES):
            raise ValueError(f"offload driver {value!r} is not supported here (use one of "
                             f"{', '.join(SUPPORTED_OFFLOAD_DRIVERS)})")
        raise ValueError(f"unknown offload driver {value!r} (Pulsar's drivers: "
                         f"{', '.join(OFFLOAD_DRIVER_NAMES)})")
    return value


def _check_at_least(least: int):
    def check(value: int) -> int:
        if value < least:
            raise ValueError(f"must be {least} or more, got {value}")
        return value
    return check


def _check_read_priority(value: str) -> str:
    if value not in READ_PRIORITIES:
        raise ValueError(f"must be one of {', '.join(READ_PRIORITIES)}, got {value!r}")
    return value


_BROKER_KEYS = [
    # --- service ---
    Key("clusterName", str, "standalone", "Name of the cluster this broker belongs to.", "Service"),
    Key("bindAddress", str, "0.0.0.0", "Address the broker's listeners bind to.", "Service"),
    Key("advertisedAddress", str, "localhost",
        "Host name or IP the broker tells clients to connect to (lookup answers).", "Service"),
    Key("advertisedListeners", str, "",
        "Named listeners: name:pulsar://host:port,name:pulsar+ssl://host:port,... (at most one\n"
        "URL per scheme and two per name). Clients choosing a listener (listener_name) are\n"
        "answered its URLs; the internal listener's URLs replace advertisedAddress in lookups.",
        "Service"),
    Key("internalListenerName", str, "",
        "The listener of advertisedListeners the broker uses for itself (default: the first).",
        "Service"),
    Key("bindAddresses", str, "",
        "Extra ports, each tied to a listener: name:pulsar://0.0.0.0:6660,name:http://0.0.0.0:8081.\n"
        "Lookups on a connection accepted there answer that listener when the client names none.",
        "Service"),
    Key("brokerServicePort", int, 6650, "Port of the Pulsar binary protocol.", "Service"),
    Key("webServicePort", int, 8080, "Port of the HTTP service (admin REST API, lookup, metrics).", "Service"),
    Key("brokerServiceEndpoint", str, "",
        "Optional Twisted endpoint description overriding bindAddress/brokerServicePort\n"
        "(e.g. tcp:6650:interface=127.0.0.1, or ssl:6651:privateKey=...).", "Service"),
    Key("maxMessageSize", int, 5 * 1024 * 1024,
        "Largest message (metadata + payload) accepted, in bytes; advertised to clients on CONNECT.",
        "Service"),
    Key("keepAliveIntervalSeconds", int, 30,
        "Seconds between keep-alive pings; a connection silent for twice this is closed, and one\n"
        "that has not completed CONNECT (and authentication) within it is closed too.", "Service"),
    Key("brokerShutdownTimeoutMs", int, 60000,
        "Milliseconds a stopping broker waits for its parts to close (connections, topics,\n"
        "ledgers) before it gives up waiting, logs what was still closing and exits (0: no wait).",
        "Service"),
    Key("statsUpdateFrequencyInSecs", int, 60,
        "Seconds of a stats period: rates (msgRateIn, msgRateOut, ...) are per second over the\n"
        "last period.", "Service"),
    Key("maxConcurrentLookupRequest", int, 50000, "Lookups in flight across the broker.", "Service"),
    Key("enableBrokerSideSubscriptionPatternEvaluation", bool, True,
        "Match the topics pattern of a pattern subscription on the broker (with RE2, linear time);\n"
        "off, or for a pattern longer than subscriptionPatternMaxLength, the client gets the whole\n"
        "list and filters it.", "Service"),
    Key("subscriptionPatternMaxLength", int, 50,
        "Longest topics pattern the broker evaluates (characters).", "Service"),
    Key("exposeTopicLevelMetricsInPrometheus", bool, True,
        "Export topic and subscription metrics on /metrics (false: summed per namespace).",
        "Service"),
    Key("exposeConsumerLevelMetricsInPrometheus", bool, False,
        "Export pulsar_consumer_* metrics per consumer on /metrics (one series set per consumer).",
        "Service"),
    Key("replicationMetricsEnabled", bool, True,
        "Export pulsar_replication_* metrics on /metrics, per remote cluster of the topics that\n"
        "replicate.", "Service"),
    Key("maxPendingPublishRequestsPerConnection", int, 1000,
        "Publish requests in flight per connection before its reads are paused.", "Service"),
    Key("maxMessagePublishBufferSizeInMB", int, 32,
        "Megabytes of publishes in flight (received, not yet stored) across the broker; above it\n"
        "every connection's reads pause until half of it is stored (0: no limit).", "Service"),
    # --- topics ---
    Key("allowAutoTopicCreation", bool, True,
        "Create topics when producers or consumers use a name that does not exist.", "Topics"),
    Key("allowAutoTopicCreationType", str, "non-partitioned",
        "Type of auto-created topics: non-partitioned or partitioned.", "Topics"),
    Key("defaultNumPartitions", int, 1,
        "Partitions of an auto-created partitioned topic.", "Topics"),
    Key("brokerDeleteInactiveTopicsEnabled", bool, False,
        "Delete topics without producers, consumers and subscriptions.", "Topics"),
    Key("brokerDeduplicationEnabled", bool, False,
        "Deduplicate messages by producer name and sequence id by default.", "Topics"),
    Key("brokerDeduplicationEntriesInterval", int, 1000,
        "Stored entries between two snapshots of a topic's deduplication state (the entries after\n"
        "the last snapshot are replayed when the topic loads).", "Topics"),
    Key("brokerDeduplicationMaxNumberOfProducers", int, 10000,
        "Producer names kept in a deduplication snapshot.", "Topics"),
    Key("maxProducersPerTopic", int, 0, "Producers allowed per topic (0: no limit).", "Topics"),
    Key("maxConsumersPerTopic", int, 0, "Consumers allowed per topic (0: no limit).", "Topics"),
    Key("maxConsumersPerSubscription", int, 0,
        "Consumers allowed per subscription (0: no limit).", "Topics"),
    Key("defaultRetentionTimeInMinutes", int, 0,
        "Keep acknowledged data this long (0: delete once every subscription acked it).", "Topics"),
    Key("defaultRetentionSizeInMB", int, 0, "Keep this much acknowledged data per topic.", "Topics"),
    Key("ttlDurationDefaultInSeconds", int, 0, "Expire unacknowledged messages after this (0: never).",
        "Topics"),
    Key("messageExpiryCheckIntervalInMinutes", int, 5,
        "Minutes between message TTL checks of the loaded topics.", "Topics"),
    Key("backlogQuotaCheckEnabled", bool, True,
        "Check the loaded topics' backlog quotas periodically (producers are always checked).",
        "Topics"),
    Key("backlogQuotaCheckIntervalInSeconds", int, 60, "Seconds between backlog quota checks.",
        "Topics"),
    Key("backlogQuotaDefaultLimitBytes", int, -1,
        "Default destination_storage backlog quota per topic, in bytes (-1: no quota).", "Topics"),
    Key("backlogQuotaDefaultLimitSecond", int, -1,
        "Default message_age backlog quota: oldest unacknowledged message age in seconds\n"
        "(-1: no quota).", "Topics"),
    Key("backlogQuotaDefaultRetentionPolicy", str, "producer_request_hold",
        "What a default quota does when exceeded: producer_request_hold, producer_exception or\n"
        "consumer_backlog_eviction.", "Topics"),
    Key("brokerDeleteInactiveTopicsFrequencySeconds", int, 60,
        "Seconds between inactive topic checks.", "Topics"),
    Key("brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", int, 0,
        "Seconds a topic may stay inactive before it is deleted (0: the check frequency).", "Topics"),
    Key("brokerDeleteInactiveTopicsMode", str, "delete_when_no_subscriptions",
        "Which inactive topics are deleted: delete_when_no_subscriptions, or\n"
        "delete_when_subscriptions_caught_up (subscriptions are deleted with the topic).", "Topics"),
    Key("subscriptionExpirationTimeMinutes", int, 0,
        "Delete durable subscriptions without consumers for this long (0: never).", "Topics"),
    Key("subscriptionExpiryCheckIntervalInMinutes", int, 5,
        "Minutes between subscription expiration checks.", "Topics"),
    # --- rate limiting (broker defaults; a namespace's publishRate / dispatchRate /
    # subscriptionDispatchRate policy replaces them) ---
    Key("maxPublishRatePerTopicInMessages", int, 0,
        "Messages per second a topic accepts; above it the producers' connections pause until the\n"
        "next second (0: no limit).", "Rate limiting"),
    Key("maxPublishRatePerTopicInBytes", int, 0,
        "Bytes per second a topic accepts, as maxPublishRatePerTopicInMessages (0: no limit).",
        "Rate limiting"),
    Key("dispatchThrottlingRatePerTopicInMsg", int, 0,
        "Messages per second dispatched from a topic, all subscriptions together (0: no limit).",
        "Rate limiting"),
    Key("dispatchThrottlingRatePerTopicInByte", int, 0,
        "Bytes per second dispatched from a topic, all subscriptions together (0: no limit).",
        "Rate limiting"),
    Key("dispatchThrottlingRatePerSubscriptionInMsg", int, 0,
        "Messages per second dispatched to one subscription (0: no limit).", "Rate limiting"),
    Key("dispatchThrottlingRatePerSubscriptionInByte", int, 0,
        "Bytes per second dispatched to one subscription (0: no limit).", "Rate limiting"),
    # --- schemas and compaction ---
    Key("isAllowAutoUpdateSchemaEnabled", bool, True,
        "Producers may add a new schema version (when compatible) unless the namespace says otherwise.",
        "Schemas and compaction"),
    Key("schemaCompatibilityStrategy", str, "FULL",
        "Default schema compatibility strategy: ALWAYS_COMPATIBLE, ALWAYS_INCOMPATIBLE, BACKWARD,\n"
        "FORWARD, FULL or their *_TRANSITIVE forms. A namespace's schema_compatibility_strategy\n"
        "overrides it, and so does its deprecated schema_auto_update_compatibility_strategy when\n"
        "set (as in Pulsar 4.x); UNDEFINED means FULL.",
        "Schemas and compaction"),
    Key("schemaValidationEnforced", bool, False,
        "Refuse producers without a schema on topics that have one.", "Schemas and compaction"),
    Key("brokerServiceCompactionThresholdInBytes", int, 0,
        "Compact a topic once its backlog since the last compaction exceeds this (0: never).",
        "Schemas and compaction"),
    Key("brokerServiceCompactionMonitorIntervalInSeconds", int, 60,
        "Seconds between checks of the compaction threshold.", "Schemas and compaction"),
    # --- dispatch ---
    Key("dispatcherMaxReadBatchSize", int, 100, "Entries read from storage per dispatch round.",
        "Dispatch"),
    Key("maxUnackedMessagesPerConsumer", int, 50000,
        "Unacked messages a Shared/Key_Shared consumer may hold before dispatch to it stops\n"
        "(0: no limit).", "Dispatch"),
    Key("maxUnackedMessagesPerSubscription", int, 200000,
        "Unacked messages a Shared/Key_Shared subscription may hold before dispatch stops (0: no limit).",
        "Dispatch"),
    Key("activeConsumerFailoverDelayTimeMillis", int, 1000,
        "Delay before a Failover subscription hands over to a newly chosen active consumer.",
        "Dispatch"),
    Key("singleActiveConsumerRedeliveryCountEnabled", bool, False,
        "Not a Pulsar key: count redeliveries (negative acks, ack timeouts) on Exclusive and\n"
        "Failover subscriptions too, so MESSAGE.redelivery_count grows and a client's dead-letter\n"
        "policy can fire there. Pulsar sends 0 on these types (false, the default, does too).",
        "Dispatch"),
    Key("activeConsumerFailoverConsistentHashing", bool, False,
        "Failover picks the active consumer of a partition by a hash ring of consumer names and\n"
        "the topic name (as for non-partitioned topics) instead of partition % consumers.",
        "Dispatch"),
    Key("subscriptionKeySharedUseConsistentHashing", bool, True,
        "Key_Shared AUTO_SPLIT assigns keys by a consistent hash ring (else by range splitting).",
        "Dispatch"),
    Key("subscriptionKeySharedConsistentHashingReplicaPoints", int, 100,
        "Points per consumer on the Key_Shared hash ring.", "Dispatch"),
    Key("acknowledgmentAtBatchIndexLevelEnabled", bool, False,
        "Track acks of single messages inside batches.", "Dispatch"),
    Key("delayedDeliveryEnabled", bool, True, "Honour deliver_at/deliver_after.", "Dispatch"),
    Key("delayedDeliveryTickTimeMillis", int, 1000, "Resolution of the delayed-delivery timer.",
        "Dispatch"),
    # --- storage ---
    Key("metadataStoreUrl", str, "",
        "Metadata store: empty for the embedded store under dataDirectory, or zk:host:port[,host:port].",
        "Storage"),
    Key("dataDirectory", str, "data",
        "Root of this process's data (embedded metadata, in-process bookie). Relative to the\n"
        "working directory.", "Storage"),
    Key("managedLedgerDefaultEnsembleSize", int, 1, "Bookies each ledger is striped over (E).",
        "Storage"),
    Key("managedLedgerDefaultWriteQuorum", int, 1, "Copies written of each entry (Qw).", "Storage"),
    Key("managedLedgerDefaultAckQuorum", int, 1, "Copies acknowledged before a write completes (Qa).",
        "Storage"),
    Key("managedLedgerMaxEntriesPerLedger", int, 50000, "Entries per ledger before it rolls over.",
        "Storage"),
    Key("managedLedgerMinLedgerRolloverTimeMinutes", int, 10,
        "A ledger is not rolled over before this age.", "Storage"),
    Key("managedLedgerMaxLedgerRolloverTimeMinutes", int, 240,
        "A ledger with entries is rolled over at this age.", "Storage"),
    Key("managedLedgerCacheSizeMB", int, 32,
        "Entry cache shared by all the managed ledgers of the broker, in MB: recent entries served\n"
        "to tailing readers without reading the bookie.", "Storage"),
    Key("managedLedgerCursorMaxEntriesPerLedger", int, 50000,
        "Cursor state snapshots per cursor ledger before it rolls over.", "Storage"),
    Key("managedLedgerMaxUnackedRangesToPersist", int, 10000,
        "Ranges of individually acked messages persisted per cursor.", "Storage"),
    Key("managedLedgerMaxPendingAddsPerTopic", int, 5000,
        "Adds in flight per topic before its producers' connections are paused.", "Storage"),
    # --- tiered storage (mledger/offload/; a namespace's offload_policies override these,
    # resources/policies.py OffloadPolicies) ---
    Key("managedLedgerOffloadDriver", str, "",
        "Where sealed ledgers are offloaded: aws-s3 (or S3) for an S3 bucket, filesystem for\n"
        "fileSystemURI; empty: no offload. Pulsar's other drivers (google-cloud-storage, azureblob,\n"
        "aliyun-oss) are refused at start-up.", "Tiered storage", _check_offload_driver),
    Key("managedLedgerOffloadMaxThreads", int, 2, "Threads that copy ledgers to the offload store.",
        "Tiered storage"),
    Key("managedLedgerOffloadThresholdInBytes", int, -1,
        "Offload a topic's oldest sealed ledgers once it keeps more than this many bytes in the\n"
        "bookies (0: every sealed ledger; negative: no automatic offload by size). Pulsar's\n"
        "managedLedgerOffloadAutoTriggerSizeThresholdBytes sets the same value.", "Tiered storage"),
    Key("managedLedgerOffloadThresholdInSeconds", int, -1,
        "Offload sealed ledgers older than this many seconds (negative: no automatic offload by\n"
        "age).", "Tiered storage"),
    Key("managedLedgerOffloadDeletionLagMs", int, 4 * 3600 * 1000,
        "Milliseconds between a ledger's offload and its deletion from the bookies (negative: never\n"
        "deleted from the bookies).", "Tiered storage"),
    Key("managedLedgerDataReadPriority", str, "tiered-storage-first",
        "Where entries found both offloaded and in the bookies are read from: tiered-storage-first\n"
        "or bookkeeper-first.", "Tiered storage", _check_read_priority),
    Key("managedLedgerOffloadBucket", str, "",
        "Bucket of the offload store (any driver); s3ManagedLedgerOffloadBucket wins for S3.",
        "Tiered storage"),
    Key("managedLedgerOffloadRegion", str, "",
        "Region of the offload store; s3ManagedLedgerOffloadRegion wins for S3.", "Tiered storage"),
    Key("managedLedgerOffloadServiceEndpoint", str, "",
        "Endpoint URL of the offload store (an S3-compatible service);\n"
        "s3ManagedLedgerOffloadServiceEndpoint wins for S3.", "Tiered storage"),
    Key("s3ManagedLedgerOffloadBucket", str, "", "S3 bucket ledgers are offloaded to.",
        "Tiered storage"),
    Key("s3ManagedLedgerOffloadRegion", str, "", "Region of the S3 bucket.", "Tiered storage"),
    Key("s3ManagedLedgerOffloadServiceEndpoint", str, "",
        "Endpoint URL of the S3 service (empty: AWS's endpoint of the region).", "Tiered storage"),
    Key("s3ManagedLedgerOffloadMaxBlockSizeInBytes", int, 64 * 1024 * 1024,
        "Largest block (multipart upload part) written to S3.", "Tiered storage"),
    Key("s3ManagedLedgerOffloadReadBufferSizeInBytes", int, 1024 * 1024,
        "Bytes read from S3 at a time when reading an offloaded ledger.", "Tiered storage"),
    Key("fileSystemURI", str, "",
        "Root of the filesystem driver's store (file:///path, or a plain path).", "Tiered storage"),
    Key("triggerOffloadOnTopicLoad", bool, False,
        "Check a topic's offload thresholds as soon as it loads, not only at its next ledger\n"
        "roll-over (PIP-348).", "Tiered storage"),
    # --- load balancing (cluster brokers: broker/loadbalance/) ---
    # The *Minutes intervals are Pulsar's integers; fractions are accepted too (tests run in seconds).
    Key("defaultNumberOfNamespaceBundles", int, 4,
        "Bundles of a namespace created without a bundle count.", "LoadBalancer"),
    Key("loadBalancerEnabled", bool, True,
        "Place new bundles on the least loaded broker and shed bundles from overloaded ones.",
        "LoadBalancer"),
    Key("loadBalancerReportUpdateThresholdPercentage", int, 10,
        "Rewrite this broker's load report when a figure changed by this many percent.", "LoadBalancer"),
    Key("loadBalancerReportUpdateMinIntervalMillis", int, 5000,
        "Load report updates are at least this far apart.", "LoadBalancer"),
    Key("loadBalancerReportUpdateMaxIntervalMinutes", float, 15,
        "Rewrite the load report at least this often, changed or not.", "LoadBalancer"),
    Key("loadBalancerHostUsageCheckIntervalMinutes", float, 1,
        "How often the broker samples its CPU, memory and bandwidth.", "LoadBalancer"),
    Key("loadBalancerResourceQuotaUpdateIntervalMinutes", float, 15,
        "How often the leader writes the aggregated bundle data (/loadbalance/bundle-data).",
        "LoadBalancer"),
    Key("loadBalancerBrokerOverloadedThresholdPercentage", int, 85,
        "A broker using more than this of any resource gets no new bundles.", "LoadBalancer"),
    Key("loadBalancerSheddingEnabled", bool, True, "Let the leader shed bundles of overloaded brokers.",
        "LoadBalancer"),
    Key("loadBalancerSheddingIntervalMinutes", float, 1, "How often the leader runs the shedder.",
        "LoadBalancer"),
    Key("loadBalancerSheddingGracePeriodMinutes", float, 30,
        "A bundle unloaded by the shedder is not shed again for this long.", "LoadBalancer"),
    Key("loadBalancerBrokerThresholdShedderPercentage", int, 10,
        "ThresholdShedder: shed from brokers whose usage exceeds the cluster average by this much.",
        "LoadBalancer"),
    Key("loadBalancerHistoryResourcePercentage", float, 0.9,
        "ThresholdShedder: weight of the past usage in a broker's usage (0 to 1).", "LoadBalancer"),
    Key("loadBalancerBrokerThresholdShedderMinimumThroughputToOffload", float, 0.0,
        "ThresholdShedder: sheds nothing from a broker when less than this (bytes/s) would move.",
        "LoadBalancer"),
    Key("loadBalancerCPUResourceWeight", float, 1.0, "ThresholdShedder: weight of CPU usage.",
        "LoadBalancer"),
    Key("loadBalancerMemoryResourceWeight", float, 1.0, "ThresholdShedder: weight of memory usage.",
        "LoadBalancer"),
    Key("loadBalancerDirectMemoryResourceWeight", float, 1.0,
        "ThresholdShedder: weight of direct memory usage.", "LoadBalancer"),
    Key("loadBalancerBandwithInResourceWeight", float, 1.0,
        "ThresholdShedder: weight of inbound bandwidth usage.", "LoadBalancer"),
    Key("loadBalancerBandwithOutResourceWeight", float, 1.0,
        "ThresholdShedder: weight of outbound bandwidth usage.", "LoadBalancer"),
    Key("loadBalancerOverrideBrokerNicSpeedGbps", float, 1.0,
        "NIC speed the bandwidth usage percentages are computed against, in Gbit/s.", "LoadBalancer"),
    Key("loadBalancerAutoBundleSplitEnabled", bool, True,
        "Split a bundle over one of the next four limits.", "LoadBalancer"),
    Key("loadBalancerAutoUnloadSplitBundlesEnabled", bool, True,
        "Unload the halves of an automatic split so that they can be placed elsewhere.", "LoadBalancer"),
    Key("loadBalancerNamespaceBundleMaxTopics", int, 1000, "Split a bundle with more topics.",
        "LoadBalancer"),
    Key("loadBalancerNamespaceBundleMaxSessions", int, 1000,
        "Split a bundle with more producers plus consumers (0: no limit).", "LoadBalancer"),
    Key("loadBalancerNamespaceBundleMaxMsgRate", int, 30000,
        "Split a bundle with a higher message rate in plus out (msg/s).", "LoadBalancer"),
    Key("loadBalancerNamespaceBundleMaxBandwidthMbytes", int, 100,
        "Split a bundle with more throughput in plus out (MB/s).", "LoadBalancer"),
    Key("loadBalancerNamespaceMaximumBundles", int, 128, "Never split a namespace past this many bundles.",
        "LoadBalancer"),
    Key("defaultNamespaceBundleSplitAlgorithm", str, "range_equally_divide",
        "How bundles split: range_equally_divide or topic_count_equally_divide.", "LoadBalancer"),
    Key("loadBalancerDecisionsMaxEntries", int, 1000,
        "Placement, split and shed decisions kept for GET /admin/v2/broker-stats/load-decisions.",
        "LoadBalancer"),
    # --- security ---
    Key("authenticationEnabled", bool, False, "Require clients to authenticate.", "Security"),
    Key("authorizationEnabled", bool, False, "Check permissions of authenticated roles.", "Security"),
    # --- cluster (twistd pulsar-broker with metadataStoreUrl=zk:...) ---
    Key("metadataStoreSessionTimeoutMillis", int, 30000,
        "Metadata store (ZooKeeper) session timeout: a broker silent this long loses its\n"
        "registration and its namespace bundles, which other brokers then take over.", "Cluster"),
    Key("zooKeeperSessionTimeoutMillis", int, -1,
        "Deprecated name of metadataStoreSessionTimeoutMillis (as in Pulsar): when positive it\n"
        "wins; -1 means use metadataStoreSessionTimeoutMillis.", "Cluster"),
    Key("zookeeperServers", str, "",
        "Deprecated (as in Pulsar): ZooKeeper servers host:port[,host:port]; when metadataStoreUrl\n"
        "is empty it becomes metadataStoreUrl=zk:<zookeeperServers>.", "Cluster"),
    Key("bookkeeperMetadataServiceUri", str, "",
        "Where bookies register: zk+null://host:2181/ledgers. Empty: the broker's metadata store.",
        "Cluster"),
    Key("bookkeeperClientTimeoutInSeconds", int, 30,
        "Deadline of each request to a bookie; a bookie that misses it is replaced in the ensemble.",
        "Cluster"),
    Key("bookkeeperClientHealthCheckEnabled", bool, True,
        "Quarantine bookies whose writes fail or time out (see the next three keys).", "Cluster"),
    Key("bookkeeperClientHealthCheckIntervalSeconds", int, 60,
        "Interval over which a bookie's failed writes are counted.", "Cluster"),
    Key("bookkeeperClientHealthCheckErrorThresholdPerInterval", int, 5,
        "Failed writes within one interval that quarantine a bookie.", "Cluster"),
    Key("bookkeeperClientHealthCheckQuarantineTimeInSeconds", int, 1800,
        "How long a quarantined bookie is left out of new ensembles and replacements (used anyway\n"
        "when nothing else can make up an ensemble).", "Cluster"),
    Key("bookkeeperTLSTrustCertsFilePath", str, "",
        "PEM CA certificate of the bookies. When set, the broker talks TLS to every bookie and checks\n"
        "its certificate against this CA and the bookie's host name.", "Cluster"),
    Key("bookkeeperTLSClientAuthentication", bool, False,
        "Present bookkeeperTLSCertificateFilePath to bookies (mutual TLS).", "Cluster"),
    Key("bookkeeperTLSCertificateFilePath", str, "", "PEM client certificate for bookies.", "Cluster"),
    Key("bookkeeperTLSKeyFilePath", str, "", "PEM private key of bookkeeperTLSCertificateFilePath.",
        "Cluster"),
    # --- geo-replication (broker/replication.py) ---
    Key("replicationProducerQueueSize", int, 1000,
        "Messages a replicator has sent to a remote cluster and not yet had acknowledged, at most\n"
        "(its producer's queue); it reads no more of the topic until some are.", "Replication"),
    Key("brokerClientTlsEnabled", bool, False,
        "Replicators connect to the remote cluster's brokerServiceUrlTls (TLS) rather than its\n"
        "brokerServiceUrl.", "Replication"),
    Key("brokerClientTrustCertsFilePath", str, "",
        "PEM CA certificate(s) of the remote clusters' brokers, for brokerClientTlsEnabled.",
        "Replication"),
    # --- topic policies (resources/topic_policies.py) ---
    Key("topicLevelPoliciesEnabled", bool, True,
        "Policies set on a topic (pulsar-admin topics set-retention ...) override its namespace's;\n"
        "false: the topic-policy admin paths answer 405 and stored topic policies are ignored.",
        "Policies"),
    # --- replicated subscriptions (broker/replicated_subscriptions.py) ---
    Key("enableReplicatedSubscriptions", bool, True,
        "Keep the position of subscriptions made with replicateSubscriptionState in step across\n"
        "the clusters a topic replicates to (snapshot markers written into the topic).",
        "Replication"),
    Key("replicatedSubscriptionsSnapshotFrequencyMillis", int, 1000,
        "How often a topic with replicated subscriptions starts a snapshot of the clusters'\n"
        "positions (only when messages were published since the last one).", "Replication"),
    Key("replicatedSubscriptionsSnapshotTimeoutSeconds", int, 30,
        "Seconds a snapshot waits for the other clusters' answers before it is given up.",
        "Replication"),
    Key("replicatedSubscriptionsSnapshotMaxCachedPerSubscription", int, 30,
        "Snapshots a replicated subscription keeps ahead of its mark-delete position (3 at\n"
        "least, as Pulsar requires).", "Replication", _check_at_least(3)),
] + _SECURITY_KEYS


def _zk_store_url(servers: str) -> str:
    """Pulsar's reading of a deprecated ZooKeeper connect string: ``zk:<servers>`` (empty stays
    empty)."""
    servers = (servers or "").strip()
    return f"zk:{servers}" if servers else ""


def _broker_metadata_store_url(config) -> str:
    """Pulsar's ServiceConfiguration: an empty metadataStoreUrl falls back to zookeeperServers."""
    return _zk_store_url(config.zookeeperServers)


#: Pulsar's names of keys we hold under another name.
_BROKER_ALIASES = {"isSchemaValidationEnforced": "schemaValidationEnforced",
                   # ServiceConfiguration's field; Pulsar's offload policies also read the key
                   # below from the file (OffloadPoliciesImpl), so both names set one value.
                   "managedLedgerOffloadAutoTriggerSizeThresholdBytes":
                       "managedLedgerOffloadThresholdInBytes"}


class BrokerConfig(Config):
    """Configuration of ``twistd pulsar-broker`` (conf/broker.conf)."""

    KEYS = _STRICT_KEYS + _BROKER_KEYS
    ALIASES = _BROKER_ALIASES
    FALLBACKS = {"metadataStoreUrl": _broker_metadata_store_url}
    DEFAULTS = {
        "clusterName": "cluster-a",
        "managedLedgerDefaultEnsembleSize": 2,
        "managedLedgerDefaultWriteQuorum": 2,
        "managedLedgerDefaultAckQuorum": 2,
    }


#: The functions worker run inside the standalone (Pulsar's standalone runs one unless told
#: ``--no-functions-worker``; the key is broker.conf's).
_STANDALONE_FUNCTIONS_KEYS = [
    Key("functionsWorkerEnabled", bool, True,
        "Run the Pulsar Functions worker in this process: admin API /admin/v3/functions, each\n"
        "instance a child process; function metadata, packages and state in the metadata store.",
        "Functions"),
]


class StandaloneConfig(Config):
    """Configuration of ``twistd pulsar-standalone`` (conf/standalone.conf): broker + bookie storage keys."""

    KEYS = _STRICT_KEYS + _BROKER_KEYS + _STORAGE_KEYS + _STANDALONE_FUNCTIONS_KEYS
    ALIASES = _BROKER_ALIASES
    FALLBACKS = {"metadataStoreUrl": _broker_metadata_store_url}
    DEFAULTS = {}


_FUNCTIONS_WORKER_KEYS = [
    Key("workerId", str, "", "This worker's id in function status (default workerHostname-workerPort).",
        "Worker"),
    Key("workerHostname", str, "localhost",
        "Host name instances and admin clients reach this worker's HTTP service at.", "Worker"),
    Key("workerPort", int, 6750, "Port of the worker's HTTP service (admin API v3, /metrics).", "Worker"),
    Key("bindAddress", str, "0.0.0.0", "Address the HTTP service listens on (not a Pulsar key).",
        "Worker"),
    Key("pulsarServiceUrl", str, "pulsar://localhost:6650",
        "Service URL of the cluster the instances consume from and produce to.", "Worker"),
    Key("pulsarWebServiceUrl", str, "http://localhost:8080",
        "The brokers' admin API: the namespace is created there, the membership read there, a\n"
        "deleted function's input subscriptions deleted there.", "Worker"),
    Key("pulsarFunctionsCluster", str, "standalone", "Cluster name in the function metrics' labels.",
        "Worker"),
    Key("downloadDirectory", str, "download/pulsar_functions",
        "Where packages and instance specs and logs are written for the instances.", "Worker"),
    Key("configurationMetadataStoreUrl", str, "",
        "The cluster's metadata store (zk:host:2181[/chroot]), the brokers' metadataStoreUrl:\n"
        "function state (counters, values) lives there; tenants and namespaces are read there.",
        "Worker"),
    Key("zooKeeperSessionTimeoutMillis", int, 30000, "Session timeout of the metadata store.", "Worker"),
    Key("pulsarFunctionsNamespace", str, "public/functions",
        "Namespace of the workers' topics (created with infinite retention at start).", "Worker cluster"),
    Key("functionMetadataTopicName", str, "metadata",
        "Topic of the function records, one keyed message per change (tombstone on delete).",
        "Worker cluster"),
    Key("clusterCoordinationTopicName", str, "coordinate",
        "Topic whose Failover subscription 'participants' elects the leader; its consumers are the\n"
        "live workers.", "Worker cluster"),
    Key("functionAssignmentTopicName", str, "assignments",
        "Topic of the leader's assignments of instances to workers.", "Worker cluster"),
    Key("failureCheckFreqMs", int, 30000,
        "Milliseconds between reads of the worker membership (the coordination subscription's\n"
        "consumers, from the brokers' topic stats).", "Worker cluster"),
    Key("brokerClientAuthenticationPlugin", str, "",
        "The worker's credentials towards the brokers (its own client and its admin calls):\n"
        "AuthenticationToken or AuthenticationBasic, as the broker's key of that name.", "Security"),
    Key("brokerClientAuthenticationParameters", str, "",
        "Parameters of brokerClientAuthenticationPlugin (token:<jwt>, file:///path, or basic's\n"
        "{\"userId\": ..., \"password\": ...}).", "Security"),
    Key("rescheduleTimeoutMs", int, 60000,
        "Milliseconds a worker may be missing from the membership before the leader reassigns its\n"
        "instances.", "Worker cluster"),
    Key("clientAuthenticationPlugin", str, "",
        "Deprecated in Pulsar for brokerClientAuthenticationPlugin, which it stands for when that is\n"
        "empty: the credentials the worker and its function and connector instances connect with.",
        "Security"),
    Key("clientAuthenticationParameters", str, "",
        "Parameters of clientAuthenticationPlugin (when brokerClientAuthenticationParameters is\n"
        "empty).", "Security"),
    Key("authenticationEnabled", bool, False,
        "Require callers of the worker's HTTP API to authenticate (Bearer token or Basic).", "Security"),
    Key("authorizationEnabled", bool, False,
        "Check the caller's role: super-users, or the admin roles of the function's tenant.",
        "Security"),
]

#: Keys of the broker's security section the worker's HTTP API honours under the same names
#: (authentication providers, roles, token and basic settings, request size, TLS trust of the
#: instances' pulsar+ssl:// connections).
_FUNCTIONS_WORKER_KEYS += [key for key in {k.name: k for k in _SECURITY_KEYS + _BROKER_KEYS}.values()
                           if key.name in (
    "tlsTrustCertsFilePath", "tlsAllowInsecureConnection", "authenticationProviders",
    "anonymousUserRole", "tokenSecretKey", "tokenPublicKey", "tokenPublicAlg", "tokenAuthClaim",
    "tokenAudienceClaim", "tokenAudience", "basicAuthConf", "superUserRoles",
    "authenticateMetricsEndpoint", "metricsRoles", "httpMaxRequestSize", "maxMessageSize")]


class FunctionsWorkerConfig(Config):
    """Configuration of ``twistd pulsar-functions-worker`` (conf/functions_worker.conf): the keys
    of Pulsar's functions_worker.yml this worker honours, in key=value form."""

    KEYS = _STRICT_KEYS + _FUNCTIONS_WORKER_KEYS
    DEFAULTS = {}


def load(cls, path: Optional[str], **overrides: Any) -> Config:
    """``cls`` from ``path`` (or its defaults when ``path`` is None)."""
    if path is None:
        return cls(**overrides)
    return cls.from_file(path, **overrides)


_BOOKIE_SERVER_KEYS = [
    # --- server ---
    Key("bookiePort", int, 3181, "Port of the bookie protocol (plain TCP, or TLS when tlsCertificatePath is set).",
        "Server"),
    Key("bookieEndpoint", str, "",
        "Optional Twisted endpoint description overriding bookiePort and the TLS keys\n"
        "(e.g. tcp:3181:interface=127.0.0.1). Not a BookKeeper key.", "Server"),
    Key("advertisedAddress", str, "localhost",
        "Host name or IP clients connect to; with bookiePort it forms the bookie id host:port.",
        "Server"),
    Key("bookieId", str, "",
        "Registration name of this bookie (default advertisedAddress:bookiePort). Clients connect to\n"
        "the id, so it must be host:port reachable by them.", "Server"),
    Key("metadataServiceUri", str, "",
        "Where the bookie registers: zk+null://host:2181[,host:2181]/ledgers (the path is the\n"
        "ledgers root; anything before /ledgers is the store's root). Empty: no registration at all\n"
        "(standalone testing only: no BookKeeper client can discover this bookie).", "Server"),
    Key("zkServers", str, "",
        "Deprecated (as in BookKeeper): ZooKeeper servers host:port[,host:port]; when\n"
        "metadataServiceUri is empty it becomes\n"
        "metadataServiceUri=zk+hierarchical://<zkServers, ';'-separated><zkLedgersRootPath>.", "Server"),
    Key("zkLedgersRootPath", str, "/ledgers",
        "Deprecated (as in BookKeeper): the ledgers root that goes with zkServers.", "Server"),
    Key("zkTimeout", int, 30000, "Metadata (ZooKeeper) session timeout in milliseconds.", "Server"),
]


#: The rest of the bookie's keys (after _STORAGE_KEYS in conf/bookkeeper.conf).
_BOOKIE_KEYS = [
    # --- disks ---
    Key("diskUsageThreshold", float, 0.95,
        "Fraction of disk used above which the bookie turns read-only (refuses adds).", "Disks"),
    Key("diskUsageLwmThreshold", float, 0.90,
        "Fraction of disk used below which a read-only bookie turns writable again.", "Disks"),
    Key("diskCheckInterval", int, 10000, "Milliseconds between disk usage checks.", "Disks"),
    # --- http ---
    Key("httpServerEnabled", bool, True,
        "Serve /heartbeat, /api/v1/bookie/state, /api/v1/bookie/info and /metrics (Prometheus).",
        "HTTP"),
    Key("httpServerHost", str, "0.0.0.0", "Address the HTTP server binds to.", "HTTP"),
    Key("httpServerPort", int, 8000, "Port of the HTTP server.", "HTTP"),
    # --- tls (PEM files; BookKeeper's names with tlsKeyStoreType=PEM) ---
    Key("tlsCertificatePath", str, "",
        "PEM certificate of this bookie. When set (with tlsKeyStore), bookiePort speaks TLS only.",
        "TLS"),
    Key("tlsKeyStore", str, "", "PEM private key of tlsCertificatePath.", "TLS"),
    Key("tlsTrustStore", str, "", "PEM CA certificate that signs client certificates.", "TLS"),
    Key("tlsClientAuthentication", bool, False,
        "Mutual TLS: refuse clients without a certificate signed by tlsTrustStore.", "TLS"),
    # --- auto-recovery ---
    Key("autoRecoveryDaemonEnabled", bool, False,
        "Run the auto-recovery daemon (auditor candidate + replication worker) in this bookie:\n"
        "the ledgers of a bookie gone for good get their replicas back on live bookies.",
        "AutoRecovery"),
    Key("lostBookieRecoveryDelay", int, 0,
        "Seconds a bookie must stay away before its ledgers are re-replicated (a rolling restart\n"
        "shorter than this copies nothing).", "AutoRecovery"),
]


def _bookie_metadata_service_uri(config) -> str:
    """BookKeeper's AbstractConfiguration.getMetadataServiceUri: with no metadataServiceUri, the
    deprecated zkServers (commas turned into ';', as a URI authority needs) and zkLedgersRootPath
    under the default ledger manager's scheme."""
    servers = (config.zkServers or "").strip()
    if not servers:
        return ""
    root = "/" + (config.zkLedgersRootPath or "/ledgers").strip().strip("/")
    return f"zk+hierarchical://{servers.replace(',', ';')}{root}"


class BookieConfig(Config):
    """Configuration of ``twistd pulsar-bookie`` (conf/bookkeeper.conf): BookKeeper's key names."""

    KEYS = _STRICT_KEYS + _BOOKIE_SERVER_KEYS + _STORAGE_KEYS + _BOOKIE_KEYS
    FALLBACKS = {"metadataServiceUri": _bookie_metadata_service_uri}
    DEFAULTS = {}


def _picked(keys, names, section=None) -> list:
    """The keys of ``keys`` named in ``names``, in that order (optionally in another section)."""
    by_name = {key.name: key for key in keys}
    out = []
    for name in names:
        key = by_name[name]
        out.append(Key(key.name, key.type, key.default, key.doc, section or key.section, key.check))
    return out


_PROXY_KEYS = [
    # --- service ---
    Key("clusterName", str, "", "Name of the cluster the proxy serves (label of its metrics).", "Service"),
    Key("bindAddress", str, "0.0.0.0", "Address the proxy's listeners bind to.", "Service"),
    Key("advertisedAddress", str, "localhost", "Host name or IP clients reach the proxy at.", "Service"),
    Key("servicePort", int, 6650, "Port of the Pulsar binary protocol (0: no plain listener).", "Service"),
    Key("servicePortTls", int, 0,
        "Port of the Pulsar binary protocol over TLS (0: none). Needs tlsCertificateFilePath and\n"
        "tlsKeyFilePath.", "Service"),
    Key("webServicePort", int, 8080,
        "Port of the HTTP service: the admin REST API and HTTP lookups forwarded to brokers, and\n"
        "/metrics (0: none).", "Service"),
    Key("webServicePortTls", int, 0, "Port of the HTTPS service (0: none).", "Service"),
    Key("keepAliveIntervalSeconds", int, 30,
        "Seconds between keep-alive pings on client connections in the lookup phase.", "Service"),
    Key("maxConcurrentInboundConnections", int, 10000,
        "Client connections accepted at once; more are closed at once (0: no limit).", "Service"),
    Key("maxConcurrentInboundConnectionsPerIp", int, 0,
        "Client connections accepted at once from one IP address (0: no limit).", "Service"),
    Key("maxConcurrentLookupRequests", int, 50000,
        "Lookups (LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA) in flight\n"
        "across the proxy; more are answered TooManyRequests.", "Service"),
    Key("operationTimeoutSeconds", int, 30, "Deadline of each request the proxy sends a broker.",
        "Service"),
    # --- brokers ---
    Key("metadataStoreUrl", str, "",
        "Metadata store of the cluster (zk:host:port[,host:port][/chroot]): brokers are discovered\n"
        "from their /loadbalance/brokers registrations. Else brokerServiceURL is used.", "Brokers"),
    Key("configurationMetadataStoreUrl", str, "",
        "Configuration store (tenants, namespaces, permissions) for authorizationEnabled; empty:\n"
        "metadataStoreUrl.", "Brokers"),
    Key("zooKeeperSessionTimeoutMillis", int, 30000, "Session timeout of the metadata store.",
        "Brokers"),
    Key("zookeeperServers", str, "",
        "Deprecated (as in Pulsar): ZooKeeper servers host:port[,host:port]; when metadataStoreUrl\n"
        "is empty it becomes metadataStoreUrl=zk:<zookeeperServers>.", "Brokers"),
    Key("configurationStoreServers", str, "",
        "Deprecated (as in Pulsar): when configurationMetadataStoreUrl is empty it becomes\n"
        "configurationMetadataStoreUrl=zk:<configurationStoreServers>.", "Brokers"),
    Key("brokerServiceURL", str, "",
        "A broker (or several: pulsar://h1:6650,h2:6650) the proxy sends lookups to when no\n"
        "metadataStoreUrl is set.", "Brokers"),
    Key("brokerServiceURLTLS", str, "", "The same over TLS (pulsar+ssl://), used with tlsEnabledWithBroker.",
        "Brokers"),
    Key("brokerWebServiceURL", str, "",
        "Web service of the brokers (http://h:8080) that admin and HTTP lookup requests go to\n"
        "when no metadataStoreUrl is set.", "Brokers"),
    Key("brokerWebServiceURLTLS", str, "", "The same over HTTPS, used with tlsEnabledWithBroker.",
        "Brokers"),
    Key("brokerProxyAllowedTargetPorts", str, "6650,6651",
        "Broker ports a client may ask the proxy to connect to (proxy_to_broker_url): comma\n"
        "separated ports or ranges (6650-6660), * for any.", "Brokers"),
    Key("brokerProxyAllowedHostNames", str, "*",
        "Broker host names allowed as targets: comma separated patterns with * wildcards.", "Brokers"),
    Key("brokerProxyAllowedIPAddresses", str, "*",
        "Broker IP addresses allowed as targets: comma separated addresses or CIDR blocks, * for any.",
        "Brokers"),
    Key("tlsEnabledWithBroker", bool, False,
        "Talk TLS to the brokers (their TLS ports and https web URLs), checking their certificates\n"
        "against brokerClientTrustCertsFilePath.", "Brokers"),
    Key("brokerClientTrustCertsFilePath", str, "", "PEM CA certificate of the brokers.", "Brokers"),
    Key("brokerClientCertificateFilePath", str, "",
        "PEM certificate the proxy presents to brokers over TLS (mutual TLS).", "Brokers"),
    Key("brokerClientKeyFilePath", str, "", "PEM private key of brokerClientCertificateFilePath.",
        "Brokers"),
    Key("brokerClientAuthenticationPlugin", str, "",
        "How the proxy authenticates to brokers: org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        "or org.apache.pulsar.client.impl.auth.AuthenticationBasic (or token, basic). Its role must\n"
        "be one of the brokers' proxyRoles.", "Brokers"),
    Key("brokerClientAuthenticationParameters", str, "",
        "Parameters of brokerClientAuthenticationPlugin: token:<jwt> or file:///path for tokens;\n"
        "{\"userId\":\"u\",\"password\":\"p\"} for basic.", "Brokers"),
    Key("forwardAuthorizationCredentials", bool, False,
        "Forward the client's credentials to the broker (original_auth_data/original_auth_method in\n"
        "CONNECT), so a broker with authenticateOriginalAuthData checks and refreshes them itself.",
        "Brokers"),
    # --- security ---
    Key("authenticationEnabled", bool, False, "Require clients to authenticate to the proxy.",
        "Authentication"),
] + _picked(_SECURITY_KEYS, [
    "authenticationProviders", "anonymousUserRole", "authenticationRefreshCheckSeconds",
    "tokenSecretKey", "tokenPublicKey", "tokenPublicAlg", "tokenAuthClaim", "tokenAudienceClaim",
    "tokenAudience", "basicAuthConf"]) + [
    Key("authorizationEnabled", bool, False,
        "Check lookups against the permissions in the configuration store (the brokers check\n"
        "every producer and consumer anyway).", "Authorization"),
] + _picked(_SECURITY_KEYS, ["superUserRoles"]) + _picked(
    _SECURITY_KEYS, ["tlsCertificateFilePath", "tlsKeyFilePath", "tlsTrustCertsFilePath",
                     "tlsRequireTrustedClientCertOnConnect", "tlsAllowInsecureConnection",
                     "tlsProtocols", "tlsCiphers"])


class ProxyConfig(Config):
    """Configuration of ``twistd pulsar-proxy`` (conf/proxy.conf): Pulsar's proxy.conf key names."""

    KEYS = _STRICT_KEYS + _PROXY_KEYS
    FALLBACKS = {
        "metadataStoreUrl": _broker_metadata_store_url,
        "configurationMetadataStoreUrl": lambda config: _zk_store_url(config.configurationStoreServers),
    }
    DEFAULTS = {}
