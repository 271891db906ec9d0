"""
Batch index bit sets in Pulsar's layout: ``java.util.BitSet.toLongArray()``, little-endian int64
words (bit ``i`` of the set is bit ``i % 64`` of word ``i // 64``), words as SIGNED int64 as the
protobuf ``repeated int64 ack_set`` carries them. In memory a set is one Python int.

Pure functions, no Twisted: used by the cursor (``batchDeletedIndexes``), its stored formats and
the broker's batch index acks.
"""

_WORD = 64
_WORD_MASK = (1 << _WORD) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def words_to_int(words) -> int:
    """The bit set of ``words`` (signed or unsigned int64 values) as a non-negative int."""
    value = 0
    for i, word in enumerate(words):
        value |= (word & _WORD_MASK) << (_WORD * i)
    return value


def int_to_words(value: int) -> list:
    """``value`` (non-negative) as signed int64 words, without trailing zero words (as Java)."""
    words = []
    while value:
        word = value & _WORD_MASK
        words.append(word - (1 << _WORD) if word >= (1 << 63) else word)
        value >>= _WORD
    return words


def is_int64(word) -> bool:
    return type(word) is int and _INT64_MIN <= word <= _INT64_MAX
