"""
The Prometheus text exposition (format 0.0.4) written directly, without prometheus_client's
metric objects: most of a /metrics scrape's cost at many topics was building one ``Sample`` per
series and formatting it with sorted label dicts. Here the broker's families are declared once per
scrape on a ``FamilySet`` and each series is one preformatted line.

The page is written in slices (``web/metrics.py``): each family buffers its lines, ``flush()``
turns a slice's lines into one bytes chunk per family, and the families are sent in order, each as
its ``# HELP``/``# TYPE`` header followed by its chunks, so that every family stays one group as the
format requires. Lines are byte-identical to prometheus_client's ``generate_latest`` (labels in
sorted order, values through its ``floatToGoString``).

With ``exposeTopicLevelMetricsInPrometheus=false`` (``topic_level=False``) the per-topic series are
summed per namespace instead (Pulsar's namespace level): a family declared ``folded`` keeps
``(sample, namespace labels) -> sum``, one declared ``dropped`` (subscription and consumer series)
keeps nothing and is not shown.
"""

from prometheus_client.utils import floatToGoString

#: Families whose series are not shown at namespace level.
DROPPED, FOLDED, PLAIN = "dropped", "folded", "plain"


def fmt(value) -> str:
    """A sample value exactly as prometheus_client writes it (ints fast, the rest through its
    ``floatToGoString``: Go's exponent form from 1e7 up, ``+Inf``, ``NaN``)."""
    if value.__class__ is int and -10 ** 15 < value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def escape(value: str) -> str:
    """A label value escaped for the text format (backslash, double quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def labels(**pairs) -> str:
    """``k="v",...`` in sorted key order (prometheus_client sorts them), values escaped."""
    return ",".join(f'{k}="{escape(str(v))}"' for k, v in sorted(pairs.items()))


class Family:
    """
    One metric family of the page. ``add(labels, ns_labels, value)`` is a per-topic series
    (``labels`` preformatted by ``labels()``; ``ns_labels`` its namespace-level form, used when
    folding); ``add_plain(labels, value)`` a series shown as is at both levels (broker totals,
    per-namespace figures). ``sample`` names a sample other than the family (``_count``, ...).
    """

    __slots__ = ("name", "doc", "kind", "mode", "lines", "chunks", "sums")

    def __init__(self, name: str, doc: str, kind: str = "gauge", mode: str = PLAIN):
        self.name = name
        self.doc = doc
        self.kind = kind
        self.mode = mode
        self.lines = []
        self.chunks = []
        self.sums = {}

    def add(self, labels_text: str, ns_labels: str, value, sample: str = None) -> None:
        mode = self.mode
        if mode == PLAIN:
            self.lines.append(f"{sample or self.name}{{{labels_text}}} {fmt(value)}\n")
        elif mode == FOLDED:
            key = (sample or self.name, ns_labels)
            self.sums[key] = self.sums.get(key, 0) + value

    def add_plain(self, labels_text: str, value, sample: str = None) -> None:
        self.lines.append(f"{sample or self.name}{{{labels_text}}} {fmt(value)}\n")

    def flush(self) -> None:
        """The lines buffered so far become one chunk (called at the end of every slice)."""
        if self.lines:
            self.chunks.append("".join(self.lines).encode())
            self.lines = []

    def finish(self) -> None:
        """The namespace-level sums written out (in the order first seen) and the last chunk."""
        for (sample, ns_labels), value in self.sums.items():
            self.lines.append(f"{sample}{{{ns_labels}}} {fmt(value)}\n")
        self.sums = {}
        self.flush()

    def header(self) -> bytes:
        doc = self.doc.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {self.name} {doc}\n# TYPE {self.name} {self.kind}\n".encode()


class FamilySet:
    """The families of one scrape in page order. ``family(...)`` declares one (with
    ``topic_level=False`` the per-topic modes apply); ``chunks()`` is the page's body."""

    def __init__(self, topic_level: bool = True):
        self.topic_level = topic_level
        self.families = []

    def family(self, name: str, doc: str, kind: str = "gauge", mode: str = PLAIN) -> Family:
        """``mode``: what the family's per-topic series become at namespace level (``FOLDED``,
        ``DROPPED``); families with no per-topic series are ``PLAIN``."""
        family = Family(name, doc, kind, PLAIN if self.topic_level else mode)
        self.families.append(family)
        return family

    def flush(self) -> None:
        for family in self.families:
            family.flush()

    def chunks(self) -> list:
        """Every shown family's header and chunks, in order (after ``finish``ing them). The
        chunks move to the answer: the families keep none, so that the page is freed as it is
        sent (not with the families, at the next scrape)."""
        out = []
        for family in self.families:
            family.finish()
            chunks, family.chunks = family.chunks, []
            if family.mode == DROPPED:
                continue
            out.append(family.header())
            out.extend(chunks)
        return out
