"""
Topic and namespace names, parsed and normalised as Pulsar does.

``my-topic`` is short for ``persistent://public/default/my-topic``; ``tenant/ns/topic`` takes the
``persistent`` domain. Partitions of a partitioned topic are topics named ``<topic>-partition-<i>``.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

_NAME_PART = re.compile(r"^[-=:.\w]+$")


class InvalidTopicNameError(ValueError):
    """Raised for a name Pulsar would refuse (the broker answers InvalidTopicName)."""


@dataclass(frozen=True)
class NamespaceName:
    tenant: str
    namespace: str

    @classmethod
    def parse(cls, text: str) -> "NamespaceName":
        parts = text.split("/")
        if len(parts) != 2 or not all(parts) or not all(_NAME_PART.match(p) for p in parts):
            raise InvalidTopicNameError(f"Invalid namespace name: {text}")
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @property
    def persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def partition_index(self) -> int:
        """The partition number for ``...-partition-N`` names, else -1."""
        head, sep, tail = self.local_name.rpartition(PARTITION_SUFFIX)
        if sep and head and tail.isdigit():
            return int(tail)
        return -1

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
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


@lru_cache(maxsize=65536)
def parse_topic(text: str) -> TopicName:
    """Parse a full or short topic name (``InvalidTopicNameError`` when it is not one)."""
    if not text or text != text.strip():
        raise InvalidTopicNameError(f"Invalid topic name: {text!r}")
    if "://" in text:
        domain, _, rest = text.partition("://")
        if domain not in (PERSISTENT, NON_PERSISTENT):
            raise InvalidTopicNameError(f"Invalid topic domain: {domain}")
    else:
        domain, rest = PERSISTENT, text
    parts = rest.split("/")
    if len(parts) == 1:
        tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
    elif len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 4:
        raise InvalidTopicNameError(
            f"Invalid topic name: {text} (v1 names with a cluster are not supported)")
    else:
        raise InvalidTopicNameError(f"Invalid topic name: {text}")
    for part in (tenant, namespace):
        if not part or not _NAME_PART.match(part):
            raise InvalidTopicNameError(f"Invalid topic name: {text}")
    if not local:
        raise InvalidTopicNameError(f"Invalid topic name: {text}")
    return TopicName(domain, tenant, namespace, local)
