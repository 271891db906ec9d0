"""
Topic patterns (regex subscriptions), matched in time linear in the input.

Pulsar takes a Java regular expression for a pattern subscription and, since 2.11, may evaluate it
on the broker (``enableBrokerSideSubscriptionPatternEvaluation``, patterns up to
``subscriptionPatternMaxLength`` characters; longer ones get the unfiltered list, which the client
filters). A backtracking engine makes ``persistent://t/ns/(a+)+b`` cost seconds per topic, so we
compile with RE2 (``google-re2``): no backtracking, time linear in the topic name, memory bounded
by ``MAX_PROGRAM_MEMORY``.

RE2 reads the Java syntax Pulsar users write (classes, quantifiers, ``(?i)``, ``\\Q...\\E``) but not
backreferences, lookaround, possessive quantifiers or atomic groups. ``compile_pattern`` tells the
two refusals apart: ``UnsupportedPatternError`` (valid elsewhere, beyond a linear-time engine) and
``InvalidPatternError`` (not a regular expression at all). Both are ``PatternError`` (ValueError);
their messages are meant for the client.

Matching follows Pulsar's ``TopicList.filterTopics``: the scheme (``persistent://``) is removed from
the pattern and the topic, a partition is matched by its partitioned topic's name, and the whole
name must match.

Pure functions, no Twisted (``common`` is below every other layer, the client included).
"""

import functools
import re
import warnings

import re2

from pulsar_twisted.common.naming import PARTITION_SUFFIX, partition_index_of

#: Longest pattern we compile at all, whatever the configuration (RE2's program grows with it).
MAX_PATTERN_LENGTH = 4096
#: RE2's memory budget for one compiled pattern; a pattern needing more is refused.
MAX_PROGRAM_MEMORY = 8 << 20

_SCHEME = re.compile(r"^(persistent|non-persistent)://")
#: Python ``re`` flags that have an inline RE2 equivalent.
_INLINE = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"))


class PatternError(ValueError):
    """A topics pattern we will not match."""


class InvalidPatternError(PatternError):
    """Not a regular expression (in any engine)."""


class UnsupportedPatternError(PatternError):
    """A regular expression that needs backtracking (backreference, lookaround, ...) or too much."""


def _options():
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_MEMORY
    # RE2 would write every refused pattern to stderr: a client could flood the broker's log.
    options.log_errors = False
    return options


def compile_pattern(pattern: str, flags: int = 0):
    """
    ``pattern`` compiled with RE2 (``fullmatch``/``match``/``search`` as ``re``); ``flags`` are
    Python ``re`` flags (IGNORECASE, MULTILINE, DOTALL carried over; others ignored). Raises
    ``InvalidPatternError`` or ``UnsupportedPatternError`` with a message for the client.
    """
    if not isinstance(pattern, str):
        raise InvalidPatternError(f"a topics pattern is text, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsupportedPatternError(
            f"topics pattern of {len(pattern)} characters is longer than {MAX_PATTERN_LENGTH}")
    inline = "".join(letter for flag, letter in _INLINE if flags & flag)
    source = f"(?{inline}){pattern}" if inline else pattern
    try:
        return re2.compile(source, _options())
    except re2.error as e:
        detail = e.args[0] if e.args else ""
        reason = (detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)) or "refused"
    try:
        with warnings.catch_warnings():     # a client's pattern must not print to our stderr
            warnings.simplefilter("ignore")
            re.compile(pattern, flags)
    except (re.error, RecursionError, OverflowError) as e:
        raise InvalidPatternError(f"invalid topics pattern {_shown(pattern)}: {e}") from None
    raise UnsupportedPatternError(
        f"topics pattern {_shown(pattern)} needs a backtracking regex engine ({reason}): "
        "backreferences, lookaround, possessive quantifiers and atomic groups are not supported")


def _shown(pattern: str) -> str:
    shown = repr(pattern)
    return shown if len(shown) <= 120 else shown[:120] + "..."


def without_scheme(name: str) -> str:
    """``name`` without its ``persistent://`` / ``non-persistent://`` prefix."""
    return _SCHEME.sub("", name, count=1)


def base_name(topic: str) -> str:
    """The partitioned topic a partition belongs to (the name itself otherwise)."""
    if partition_index_of(topic) < 0:
        return topic
    return topic.rpartition(PARTITION_SUFFIX)[0]


@functools.lru_cache(maxsize=256)
def compile_topics_pattern(pattern: str, flags: int = 0):
    """``compile_pattern`` of ``pattern`` without its scheme, for ``filter_topics`` (compiled
    patterns are cached: pattern consumers ask again every discovery period; refusals are not)."""
    return compile_pattern(without_scheme(pattern), flags)


def filter_topics(topics, compiled) -> list:
    """The topics whose partitioned name, without scheme, fully matches ``compiled``
    (from ``compile_topics_pattern``), in their order."""
    return [t for t in topics if compiled.fullmatch(without_scheme(base_name(t))) is not None]
