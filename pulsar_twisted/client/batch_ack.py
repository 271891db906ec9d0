"""
Batch-index acknowledgement bit sets, as Java's ``BitSet.toLongArray()`` lays them out.

``MessageIdData.ack_set`` (in ACK and MESSAGE commands) is a list of signed 64-bit words; bit
``i`` (word ``i // 64``, bit ``i % 64``) set means batch index ``i`` is still *unacknowledged*.
Pure functions.
"""

_WORD = 64
_SIGN = 1 << 63


def to_words(indexes, batch_size: int = 0):  # noqa: ARG001 (size kept for callers)
    """The ack set (signed int64 words) with the bits of ``indexes`` set."""
    width = max([i + 1 for i in indexes], default=0)   # Java trims trailing zero words
    words = [0] * ((width + _WORD - 1) // _WORD)
    for i in indexes:
        words[i // _WORD] |= 1 << (i % _WORD)
    return [w - (1 << 64) if w & _SIGN else w for w in words]


def bit_is_set(words, index: int) -> bool:
    """Whether ``index`` is set in the ack set ``words``."""
    word = index // _WORD
    if word >= len(words):
        return False
    return bool((words[word] & ((1 << 64) - 1)) >> (index % _WORD) & 1)
