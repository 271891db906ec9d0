"""
Regex (pattern) subscriptions, as the Java client's ``PatternMultiTopicsConsumerImpl``.

``subscribe(re.compile("persistent://public/default/x-.*"), ...)`` asks the broker for the topics
of the pattern's namespace (GET_TOPICS_OF_NAMESPACE with ``topics_pattern``), subscribes to every
match, and every ``pattern_auto_discovery_period`` seconds asks again: new matches are subscribed,
topics that disappeared are closed. Partitions are matched by their base topic name, as Java's
``TopicList.filterTopics`` does. A pattern without a domain is taken as
``persistent://public/default/<pattern>``. Only one namespace per pattern (Pulsar's rule).

Topic names come from the broker, so the pattern is matched with RE2 (linear time, see
``common.patterns``); a pattern only a backtracking engine can run (backreferences, lookaround)
is the application's own choice and falls back to Python's ``re``, with a warning.
"""

import re

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common import patterns
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.client import errors
from pulsar_twisted.client.partitioned import MultiConsumer

Mode = api.CommandGetTopicsOfNamespace
_MODES = {"persistentonly": Mode.PERSISTENT, "nonpersistentonly": Mode.NON_PERSISTENT,
          "alltopics": Mode.ALL}


def regex_mode(value) -> int:
    """``RegexSubscriptionMode`` from a name (PersistentOnly, NonPersistentOnly, AllTopics)."""
    if value is None:
        return Mode.PERSISTENT
    if isinstance(value, int):
        return value
    name = getattr(value, "name", value)
    try:
        return _MODES[str(name).replace("_", "").lower()]
    except KeyError:
        raise errors.InvalidConfiguration(f"unknown regex subscription mode {value!r}") from None


def split_pattern(pattern: str):
    """``(namespace, full pattern)`` of a topics regex (``InvalidTopicName`` when it has none)."""
    if "://" not in pattern:
        pattern = "persistent://public/default/" + pattern
    domain, _, rest = pattern.partition("://")
    parts = rest.split("/")
    if domain not in ("persistent", "non-persistent") or len(parts) < 3 or not all(parts[:2]):
        raise errors.InvalidTopicName(f"topics pattern {pattern!r} names no tenant/namespace")
    return f"{parts[0]}/{parts[1]}", pattern


_log = Logger()


def matcher(regex):
    """What ``matching`` takes for a compiled ``re`` pattern: its RE2 form without the scheme, or
    (for a pattern RE2 cannot run) the ``re`` form without the scheme."""
    try:
        return patterns.compile_topics_pattern(regex.pattern, regex.flags)
    except patterns.UnsupportedPatternError as e:
        _log.warn("pattern {pattern} matched with a backtracking engine: {reason}",
                  pattern=regex.pattern, reason=str(e))
        return re.compile(patterns.without_scheme(regex.pattern), regex.flags)


def matching(topics, regex):
    """The topics (partitions included) whose base name fully matches ``regex`` (a compiled
    ``re`` pattern, or a ``matcher`` of one), both without their scheme (TopicList.filterTopics)."""
    if isinstance(regex, re.Pattern):
        regex = matcher(regex)
    return patterns.filter_topics(topics, regex)


class PatternConsumer(MultiConsumer):
    """
    A ``MultiConsumer`` whose topics follow a regex. ``subscribe_topic(name)`` (given by the
    client) fires with a ``Consumer`` for one topic or partition.
    """

    log = Logger()

    def __init__(self, pattern, namespace, mode, lookup, subscribe_topic, clock,
                 discovery_period: float = 60.0, message_listener=None, subscription=None,
                 dead_letter=None):
        super().__init__(pattern.pattern, [], clock, message_listener, subscription, dead_letter)
        self.pattern = pattern
        self._matcher = matcher(pattern)
        self.namespace = namespace
        self.mode = mode
        self.lookup = lookup
        self.subscribe_topic = subscribe_topic
        self.discovery_period = discovery_period
        self._timer = None
        self._discovering = None

    def start(self) -> defer.Deferred:
        """First discovery; fires with ``self`` once every matching topic is subscribed."""
        d = self.discover()
        d.addCallback(lambda _: (self._schedule(), self)[1])
        return d

    def _schedule(self):
        if not self.closed and self.discovery_period and self.discovery_period > 0:
            self._timer = self.clock.callLater(self.discovery_period, self._tick)

    def _tick(self):
        self._timer = None
        d = self.discover()
        d.addErrback(lambda f: self.log.failure("topic discovery for {pattern} failed", f,
                                                pattern=self.pattern.pattern))
        d.addBoth(lambda _: self._schedule())

    @defer.inlineCallbacks
    def discover(self):
        """Subscribe to new matching topics and close the consumers of vanished ones."""
        if self.closed:
            return None
        topics = yield self.lookup.topics_of_namespace(self.namespace, self.mode,
                                                       self.pattern.pattern)
        wanted = set(matching(topics, self._matcher))
        if self.closed:
            return None
        for topic in sorted(wanted - set(self.consumers)):
            try:
                consumer = yield self.subscribe_topic(topic)
            except errors.PulsarException as e:
                self.log.warn("pattern {pattern}: cannot subscribe to {topic}: {error}",
                              pattern=self.pattern.pattern, topic=topic, error=e)
                continue
            if self.closed:
                yield consumer.close()
                return None
            self.log.info("pattern {pattern}: subscribed to new topic {topic}",
                          pattern=self.pattern.pattern, topic=topic)
            self.add_consumer(consumer)
        for topic in sorted(set(self.consumers) - wanted):
            self.log.info("pattern {pattern}: topic {topic} is gone", pattern=self.pattern.pattern,
                          topic=topic)
            yield self.remove_consumer(topic)
        return None

    def topics(self):
        return sorted(self.consumers)

    def _closed(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        super()._closed()
