"""
Topic and namespace names, parsed and normalised as Pulsar does.

``my-topic`` is short for ``persistent://public/default/my-topic``; ``tenant/ns/topic`` takes the
``persistent`` domain. Partitions of a partitioned topic are topics named ``<topic>-partition-<i>``.

Names are checked here once, at the edge (binary commands, admin paths, the client), so nothing
behind it sees a name it cannot store:

* tenant, namespace and cluster names follow Pulsar's ``NamedEntity.checkName``: ``[-=:.\w]``
  where ``\w`` is Java's ASCII word class (``[a-zA-Z0-9_]``, not Unicode letters), non-empty, at
  most ``MAX_ENTITY_NAME_LENGTH`` characters;
* a topic's local name is any non-empty text without ``/`` (a fourth segment is a v1 cluster
  name), control characters (NUL included) or lone surrogates (not encodable in UTF-8);
* a whole topic name is at most ``MAX_TOPIC_NAME_BYTES`` of UTF-8. Pulsar itself sets no length,
  but every topic becomes metadata paths (managed ledger, cursors, partitions): bounded here, a
  name can never be refused half-way through being stored.
"""

import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
#: Largest partition index (a Java int in Pulsar's ``TopicName``).
MAX_PARTITION_INDEX = 2**31 - 1

_NAME_PART = re.compile(r"[-=:.\w]+", re.ASCII)
#: Characters a local name may not hold: C0 controls (NUL among them) and DEL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Longest tenant, namespace or cluster name (metadata paths hold each as one node name).
MAX_ENTITY_NAME_LENGTH = 255
#: Longest topic name, in UTF-8 bytes, domain included (a partition's suffix counts too).
MAX_TOPIC_NAME_BYTES = 4096


def partition_index_of(name: str) -> int:
    """
    N for a name ending in ``-partition-N`` after something, else -1. As Pulsar's
    ``TopicName.getPartitionIndex`` (``Integer.parseInt`` and a length check): N is decimal
    digits without sign or leading zero, at most MAX_PARTITION_INDEX, so ``x-partition-01`` and
    ``x-partition-99999999999`` are plain topics' names, and so is ``x-partition-\u00b2`` (a
    digit that is not a decimal one), rather than an error.
    """
    head, sep, tail = name.rpartition(PARTITION_SUFFIX)
    if not (sep and head and 0 < len(tail) <= 10 and tail.isdecimal()):
        return -1
    index = int(tail)
    if index > MAX_PARTITION_INDEX or len(str(index)) != len(tail):
        return -1
    return index


class InvalidTopicNameError(ValueError):
    """Raised for a name Pulsar would refuse (the broker answers InvalidTopicName)."""


def _shown(text) -> str:
    """``text`` fit for an error message: repr, cut to 100 characters."""
    shown = repr(text)
    if len(shown) <= 100:
        return shown
    return shown[:100] + (f"... ({len(text)} characters)" if hasattr(text, "__len__") else "...")


def is_valid_entity_name(name) -> bool:
    """Whether ``name`` is a valid tenant, namespace or cluster name (Pulsar's NamedEntity)."""
    return (isinstance(name, str) and len(name) <= MAX_ENTITY_NAME_LENGTH
            and _NAME_PART.fullmatch(name) is not None)


def check_entity_name(kind: str, name) -> str:
    """``name`` if it is a valid ``kind`` (Tenant, Namespace, Cluster) name; InvalidTopicNameError."""
    if not is_valid_entity_name(name):
        raise InvalidTopicNameError(f"Invalid {kind.lower()} name: {_shown(name)}")
    return name


def check_local_name(local) -> str:
    """``local`` if it may be a topic's local name (see the module docstring); InvalidTopicNameError."""
    if not isinstance(local, str) or not local:
        raise InvalidTopicNameError(f"Invalid topic name: empty local name {_shown(local)}")
    if "/" in local or _CONTROL.search(local):
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(local)} holds '/' or control characters")
    try:
        local.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(local)} is not valid UTF-8") from None
    return local


#: Longest subscription name, in UTF-8 bytes (it becomes a cursor's metadata node name).
MAX_SUBSCRIPTION_NAME_BYTES = 1024


def subscription_name_problem(name) -> str:
    """Why ``name`` cannot be a subscription name ("" when it can): empty, too long, NUL, bad UTF-8."""
    if isinstance(name, bytes):     # protobuf hands over bytes for a string that is not UTF-8
        return f"Invalid subscription name {_shown(name)}: not valid UTF-8"
    if not isinstance(name, str) or not name:
        return "Empty subscription name"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return f"Invalid subscription name {_shown(name)}: not valid UTF-8"
    if size > MAX_SUBSCRIPTION_NAME_BYTES:
        return f"Invalid subscription name {_shown(name)}: longer than {MAX_SUBSCRIPTION_NAME_BYTES} bytes"
    if "\x00" in name:
        return f"Invalid subscription name {_shown(name)}: holds NUL"
    return ""


@dataclass(frozen=True, slots=True)
class NamespaceName:
    tenant: str
    namespace: str

    @classmethod
    def parse(cls, text: str) -> "NamespaceName":
        parts = text.split("/", 2) if isinstance(text, str) else ()
        if len(parts) != 2 or not all(is_valid_entity_name(p) for p in parts):
            raise InvalidTopicNameError(f"Invalid namespace name: {_shown(text)}")
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


# slots: every loaded topic keeps its TopicName (an instance dictionary was 104 bytes of it).
@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str
    #: The full name, made once (``__str__``): a loaded topic's name, its key in the broker's
    #: topics and the parse cache's key are then one string, not three copies of ~100 bytes
    #: (issue 14). Not compared, hashed, shown or copied by ``dataclasses.replace``.
    _full: str = field(default=None, init=False, compare=False, repr=False)

    @property
    def persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def partition_index(self) -> int:
        """The partition number for ``...-partition-N`` names, else -1 (see ``partition_index_of``)."""
        return partition_index_of(self.local_name)

    @property
    def partitioned_topic_name(self) -> "TopicName":
        """The partitioned topic a partition belongs to (itself for other topics)."""
        if self.partition_index < 0:
            return self
        head = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, head)

    def partition(self, index: int) -> "TopicName":
        return TopicName(self.domain, self.tenant, self.namespace,
                         f"{self.local_name}{PARTITION_SUFFIX}{index}")

    @property
    def managed_ledger_name(self) -> str:
        """Name of the managed ledger storing the topic, as Pulsar lays it out."""
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.local_name}"

    def __str__(self) -> str:
        full = self._full
        if full is None:
            full = f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"
            object.__setattr__(self, "_full", full)
        return full


def parse_topic(text: str) -> TopicName:
    """Parse a full or short topic name (``InvalidTopicNameError`` when it is not one)."""
    # The length is checked before the cache, so oversized names never fill it.
    if not isinstance(text, str) or len(text) > MAX_TOPIC_NAME_BYTES:
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)} (longer than "
                                    f"{MAX_TOPIC_NAME_BYTES} bytes)")
    return _parse_topic(text)


@lru_cache(maxsize=65536)
def _parse_topic(text: str) -> TopicName:
    if not text or text != text.strip():
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)} is not valid UTF-8") from None
    if size > MAX_TOPIC_NAME_BYTES:
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)} (longer than "
                                    f"{MAX_TOPIC_NAME_BYTES} bytes)")
    if "://" in text:
        domain, _, rest = text.partition("://")
        if domain not in (PERSISTENT, NON_PERSISTENT):
            raise InvalidTopicNameError(f"Invalid topic domain: {_shown(domain)}")
    else:
        domain, rest = PERSISTENT, text
    parts = rest.split("/")
    if len(parts) == 1:
        tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
    elif len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 4:
        raise InvalidTopicNameError(
            f"Invalid topic name: {_shown(text)} (v1 names with a cluster are not supported)")
    else:
        raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)}")
    for part in (tenant, namespace):
        if not is_valid_entity_name(part):
            raise InvalidTopicNameError(f"Invalid topic name: {_shown(text)}")
    check_local_name(local)
    # Interned: every loaded topic keeps its TopicName, and 100k topics of one namespace would
    # otherwise hold 100k copies each of "persistent", the tenant and the namespace.
    name = TopicName(sys.intern(domain), sys.intern(tenant), sys.intern(namespace), local)
    if str(name) == text:
        # A full name as given: the cache's key is the name's string too.
        object.__setattr__(name, "_full", text)
    return name
