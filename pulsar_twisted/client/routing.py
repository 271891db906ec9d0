"""
Partition routing for producers on partitioned topics, as the Java client routes.

A keyed message goes to ``hash(key) % partitions`` with ``JavaStringHash`` (Java's
``String.hashCode()`` & Integer.MAX_VALUE, the Java client's default) or ``Murmur3_32Hash`` (mmh3
32-bit, seed 0, of the UTF-8 key, & Integer.MAX_VALUE). Keyless messages go round-robin
(RoundRobinPartition) or always to one partition chosen at random at start (SinglePartition).
A custom router is any callable ``(message_info, num_partitions) -> int``.
"""

import random

JAVA_STRING_HASH = "JavaStringHash"
MURMUR3_32_HASH = "Murmur3_32Hash"

ROUND_ROBIN = "RoundRobinPartition"
SINGLE_PARTITION = "SinglePartition"
CUSTOM_PARTITION = "CustomPartition"

_INT_MAX = 0x7FFFFFFF


def java_string_hash(key: str) -> int:
    """Java's ``String.hashCode()`` (UTF-16 code units, 32-bit overflow), as a signed int."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def murmur3_32_hash(key) -> int:
    """The Java client's ``Murmur3_32Hash.makeHash``: mmh3 32-bit seed 0, & Integer.MAX_VALUE."""
    import mmh3
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return mmh3.hash(data, 0, signed=False) & _INT_MAX


def key_hash(key, scheme: str = JAVA_STRING_HASH) -> int:
    """Non-negative hash of ``key`` under ``scheme``."""
    if scheme == MURMUR3_32_HASH:
        return murmur3_32_hash(key)
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    return java_string_hash(key) & _INT_MAX


class MessageRouter:
    """
    Chooses a partition for each message: by key when there is one, else by ``mode``.

    ``custom`` (for ``CUSTOM_PARTITION``) is called as ``custom(message, num_partitions)`` where
    ``message`` has ``partition_key()`` and ``ordering_key()``; its answer is taken modulo N.
    """

    def __init__(self, mode: str = ROUND_ROBIN, hashing_scheme: str = JAVA_STRING_HASH,
                 custom=None, rng: random.Random = None):
        rng = rng or random.Random()
        self.mode = CUSTOM_PARTITION if custom is not None else mode
        self.hashing_scheme = hashing_scheme
        self.custom = custom
        self._next = rng.randrange(1 << 16)
        self._single = None
        self._rng = rng

    def choose(self, message, num_partitions: int) -> int:
        if self.mode == CUSTOM_PARTITION:
            return int(self.custom(message, num_partitions)) % num_partitions
        key = message.partition_key()
        if key:
            return key_hash(key, self.hashing_scheme) % num_partitions
        if self.mode == SINGLE_PARTITION:
            if self._single is None:
                self._single = self._rng.randrange(num_partitions)
            return self._single % num_partitions
        partition = self._next % num_partitions
        self._next += 1
        return partition
