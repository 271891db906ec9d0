"""Topics patterns with RE2 (issue 12): linear-time matching, Pulsar's filterTopics rules, clear refusals."""

import re

from twisted.trial import unittest

from pulsar_twisted.common import patterns
from pulsar_twisted.common.patterns import (
    MAX_PATTERN_LENGTH, InvalidPatternError, UnsupportedPatternError, compile_pattern,
    compile_topics_pattern, filter_topics)

NS = "persistent://acme/ns/"


class PatternTests(unittest.SynchronousTestCase):
    def test_catastrophic_pattern_linear(self):
        """(a+)+b against a 4,000-character name answers at once (a backtracking engine never would)."""
        compiled = compile_topics_pattern(NS + "(a+)+b")
        self.assertEqual(filter_topics([NS + "a" * 4000, NS + "aab"], compiled), [NS + "aab"])

    def test_filter_rules(self):
        """Scheme removed from both sides, partitions by base name, whole-name match."""
        compiled = compile_topics_pattern(NS + "x-.*")
        topics = [NS + "x-1", NS + "x-2-partition-0", NS + "y-1", NS + "ax-1",
                  "non-persistent://acme/ns/x-3"]
        self.assertEqual(filter_topics(topics, compiled),
                         [NS + "x-1", NS + "x-2-partition-0", "non-persistent://acme/ns/x-3"])

    def test_partition_suffix_by_pulsar_naming_rule(self):
        """A partition matches by its base name, but "-partition-01" (leading zero) is no
        partition suffix: that name is matched whole, as TopicName.getPartitionIndex says."""
        compiled = compile_topics_pattern(NS + "x")
        self.assertEqual(filter_topics([NS + "x-partition-3", NS + "x-partition-03"], compiled),
                         [NS + "x-partition-3"])
        self.assertEqual(patterns.base_name(NS + "x-partition-03"), NS + "x-partition-03")

    def test_java_syntax_kept(self):
        """What Pulsar users write in Java syntax works: inline flags, \\Q..\\E, classes, flags carried."""
        self.assertTrue(compile_pattern(r"(?i)topic-\d+").fullmatch("TOPIC-12"))
        self.assertTrue(compile_pattern(r"\Qa.b\E").fullmatch("a.b"))
        self.assertFalse(compile_pattern(r"\Qa.b\E").fullmatch("axb"))
        self.assertTrue(compile_pattern("topic", re.IGNORECASE).fullmatch("ToPiC"))

    def test_backtracking_constructs_refused(self):
        """Backreferences, lookaround, possessive and atomic groups: UnsupportedPatternError, named."""
        for bad in (r"(a)\1", "(?=a)a", "(?!b)a", "(?<=a)b", "a++", "(?>a)"):
            with self.assertRaises(UnsupportedPatternError) as caught:
                compile_pattern(bad)
            self.assertIn("backtracking", str(caught.exception))

    def test_invalid_and_too_long(self):
        """Not a regex: InvalidPatternError; longer than MAX_PATTERN_LENGTH: refused before compiling."""
        self.assertRaises(InvalidPatternError, compile_pattern, "(")
        self.assertRaises(InvalidPatternError, compile_pattern, b"bytes")
        self.assertRaises(UnsupportedPatternError, compile_pattern, "a" * (MAX_PATTERN_LENGTH + 1))

    def test_program_memory_bounded(self):
        """A pattern whose program would outgrow MAX_PROGRAM_MEMORY is refused, not built."""
        self.assertRaises(patterns.PatternError, compile_pattern, "((((a{100}){100}){100}){100})")
