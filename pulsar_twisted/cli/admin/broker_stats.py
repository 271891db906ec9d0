"""
``pulsar-admin broker-stats``: monitoring-metrics, topics (alias destinations), load-report (and
our load-decisions, the load manager's decisions log), with
Pulsar's output (Gson: compact JSON, or indented four spaces with ``-i``; the load report pretty
as Jackson prints it). Pulsar's ``mbeans`` and ``allocator-stats`` are JVM views the server does
not have, so they are not offered.
"""

import json

from pulsar_twisted.cli.admin import V2, jackson


def gson(value, indent: int = 0) -> str:
    """JSON as Gson writes it: compact, or indented ``indent`` spaces."""
    if indent:
        return json.dumps(value, indent=indent)
    return json.dumps(value, separators=(",", ":"))


def _monitoring_metrics(a, c):
    metrics = c.get(f"{V2}/broker-stats/metrics") or []
    if a.indent:
        # Pulsar writes each metric indented, followed by an empty line.
        return "\n\n".join(gson(m, 4) for m in metrics)
    return "".join(gson(m) for m in metrics)


def add(sub) -> None:
    p = sub.add_parser("monitoring-metrics", help="dump metrics for Monitoring")
    p.add_argument("-i", "--indent", action="store_true", help="Indent JSON output")
    p.set_defaults(run=_monitoring_metrics)
    p = sub.add_parser("topics", aliases=["destinations"], help="dump topics stats")
    p.add_argument("-i", "--indent", action="store_true", help="Indent JSON output")
    p.set_defaults(run=lambda a, c: gson(c.get(f"{V2}/broker-stats/topics"), 4 if a.indent else 0))
    p = sub.add_parser("load-report", help="dump broker load-report")
    p.set_defaults(run=lambda a, c: jackson(c.get(f"{V2}/broker-stats/load-report")))
    # Beyond Pulsar (issue 15): why bundles were placed, split, unloaded or shed.
    p = sub.add_parser("load-decisions", help="the load manager's placement, split, unload and shed decisions")
    p.add_argument("-k", "--kind", choices=["placement", "split", "unload", "shed"])
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/broker-stats/load-decisions", query={"kind": a.kind}))
